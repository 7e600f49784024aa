package alertintake

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spikehunt/spikehunt/internal/alertdoc"
)

var received = time.Date(2025, 6, 1, 12, 5, 0, 0, time.UTC) // fixed date: decoded only, never stored

func TestDecodeDetectorAlert(t *testing.T) {
	spikeGroup := readTestdata(t, "spike_group.json") // fixed date: decoded only, never stored
	pattern := readTestdata(t, "pattern.json")        // fixed date: decoded only, never stored
	for _, tc := range []struct {
		name   string
		doc    []byte
		want   Alert
		skip   string
		reason string // the reject reason; "" = accepted
	}{
		{
			name: "a spike group names its hosts and its classes by windows, and an added field is ignored",
			doc:  spikeGroup,
			want: Alert{
				Source: SourceKafka, Key: "kafka/spikegroup-b3174bce73197f743815c153321b0b6a", Service: "billy",
				HWClasses: []string{"gen5", "gen4"}, Hosts: []string{"web-01", "web-02"},
				WindowStart: mustTime(t, "2025-06-01T12:00:00Z"), WindowEnd: mustTime(t, "2025-06-01T12:00:02Z"), // fixed date: decoded only, never stored
				ReceivedAt: received, RawID: "spikegroup-b3174bce73197f743815c153321b0b6a",
			},
		},
		{
			name: "a changed pattern carries its class, its id, the classes it is skewed to and its look-back",
			doc:  pattern,
			want: Alert{
				Source: SourceKafka, Key: "kafka/pattern-05c235507bf9b2641cb661066dbb9a78", Service: "billy",
				PatternClass: FleetRecurrent, PatternKey: "billy/fleet-recurrent", HWClasses: []string{"gen5"}, Hosts: []string{"h1", "h2"},
				WindowStart: mustTime(t, "2025-06-01T06:00:00Z"), WindowEnd: mustTime(t, "2025-06-01T12:00:00Z"), // fixed date: decoded only, never stored
				ReceivedAt: received, RawID: "pattern-05c235507bf9b2641cb661066dbb9a78",
			},
		},
		{
			name: "a class the detector learned later passes through",
			doc:  edit(t, pattern, func(m map[string]any) { m["pattern"].(map[string]any)["class"] = "rack-correlated" }),
			want: Alert{
				Source: SourceKafka, Key: "kafka/pattern-05c235507bf9b2641cb661066dbb9a78", Service: "billy",
				PatternClass: "rack-correlated", PatternKey: "billy/fleet-recurrent", HWClasses: []string{"gen5"}, Hosts: []string{"h1", "h2"},
				WindowStart: mustTime(t, "2025-06-01T06:00:00Z"), WindowEnd: mustTime(t, "2025-06-01T12:00:00Z"), // fixed date: decoded only, never stored
				ReceivedAt: received, RawID: "pattern-05c235507bf9b2641cb661066dbb9a78",
			},
		},
		{
			name: "a pattern not skewed by class singles out no class",
			doc: edit(t, pattern, func(m map[string]any) {
				m["pattern"].(map[string]any)["modifiers"] = []string{}
				m["pattern"].(map[string]any)["affected_hosts_sample"] = []string{}
			}),
			want: Alert{
				Source: SourceKafka, Key: "kafka/pattern-05c235507bf9b2641cb661066dbb9a78", Service: "billy",
				PatternClass: FleetRecurrent, PatternKey: "billy/fleet-recurrent",
				WindowStart: mustTime(t, "2025-06-01T06:00:00Z"), WindowEnd: mustTime(t, "2025-06-01T12:00:00Z"), // fixed date: decoded only, never stored
				ReceivedAt: received, RawID: "pattern-05c235507bf9b2641cb661066dbb9a78",
			},
		},
		{
			name: "a resolved pattern is valid and yields nothing",
			doc:  edit(t, pattern, func(m map[string]any) { m["pattern"].(map[string]any)["change"] = "resolved" }),
			skip: skipResolved,
		},
		{name: "not JSON", doc: []byte("{\"schema\": \"spikehunt.alert/v1\""), reason: rejectBadJSON},
		{name: "a JSON array", doc: []byte(`[1, 2]`), reason: rejectBadJSON},
		{name: "a field of the wrong type", doc: edit(t, spikeGroup, func(m map[string]any) { m["spike_group"].(map[string]any)["hosts"] = "web-01" }),
			reason: rejectBadJSON},
		{name: "schema v2", doc: edit(t, spikeGroup, func(m map[string]any) { m["schema"] = "spikehunt.alert/v2" }), reason: rejectUnknownSchema},
		{name: "no schema", doc: edit(t, spikeGroup, func(m map[string]any) { delete(m, "schema") }), reason: rejectUnknownSchema},
		{name: "a kind that does not match the body", doc: edit(t, spikeGroup, func(m map[string]any) { m["kind"] = "pattern" }), reason: rejectInvalid},
		{name: "both bodies", doc: edit(t, spikeGroup, func(m map[string]any) { m["pattern"] = map[string]any{"change": "new", "class": "isolated-host"} }),
			reason: rejectInvalid},
		{name: "a spike-group id on a pattern", doc: edit(t, pattern, func(m map[string]any) { m["alert_id"] = "spikegroup-05c235507bf9b2641cb661066dbb9a78" }),
			reason: rejectInvalid},
		{name: "an alert id that is not a hash", doc: edit(t, spikeGroup, func(m map[string]any) { m["alert_id"] = "spikegroup-1" }), reason: rejectInvalid},
		{name: "no service", doc: edit(t, spikeGroup, func(m map[string]any) { m["service"] = " " }), reason: rejectInvalid},
		{name: "a host with a control character", doc: edit(t, spikeGroup, func(m map[string]any) { m["spike_group"].(map[string]any)["hosts"] = []string{"web\x1b[2J"} }),
			reason: rejectInvalid},
		{name: "a pattern without an id", doc: edit(t, pattern, func(m map[string]any) { delete(m["pattern"].(map[string]any), "pattern_id") }),
			reason: rejectInvalid},
		{name: "an unknown change", doc: edit(t, pattern, func(m map[string]any) { m["pattern"].(map[string]any)["change"] = "grew" }), reason: rejectInvalid},
		{name: "a class that is not a name", doc: edit(t, pattern, func(m map[string]any) { m["pattern"].(map[string]any)["class"] = "Fleet Recurrent" }),
			reason: rejectInvalid},
		{name: "a window that ends before it starts", doc: edit(t, spikeGroup, func(m map[string]any) {
			m["spike_group"].(map[string]any)["last_window_end"] = "2025-06-01T11:00:00Z" // fixed date: decoded only, never stored
		}), reason: rejectInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, skip, err := decodeDetectorAlert(tc.doc, received)
			if tc.reason != "" {
				if err == nil || reasonOf(err) != tc.reason {
					t.Fatalf("err = %v (reason %q), want reason %q", err, reasonOf(err), tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if skip != tc.skip {
				t.Errorf("skip = %q, want %q", skip, tc.skip)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("alert (-want +got):\n%s", diff)
			}
		})
	}
}

// The reader here and the writer in pipelines/services/alerts must agree: decode
// what that package's types marshal to, including fields this reader
// ignores.
func TestDecodeDetectorAlertReadsWhatThePublisherWrites(t *testing.T) {
	t0 := mustTime(t, "2025-06-01T12:00:00Z") // fixed date: decoded only, never stored
	docs := []alertdoc.Alert{
		{
			Schema: alertdoc.SchemaVersion, AlertID: "spikegroup-0123456789abcdef0123456789abcdef", Kind: alertdoc.KindSpikeGroup,
			Service: "billy", DetectorVersion: "v1", GeneratedAt: t0.Add(time.Minute),
			SpikeGroup: &alertdoc.SpikeGroup{
				Count: 4, HostsCount: 3, Hosts: []string{"h3", "h1", "h2"}, HWClasses: map[string]int{"gen4": 1, "gen5": 3},
				FirstWindowStart: t0, LastWindowEnd: t0.Add(5 * time.Second), PeakMS: 900, PeakHost: "h3",
				SpikeIDs: []string{"billy/h1/1", "billy/h2/2", "billy/h3/3", "billy/h3/4"},
			},
		},
		{
			Schema: alertdoc.SchemaVersion, AlertID: "pattern-0123456789abcdef0123456789abcdef", Kind: alertdoc.KindPattern,
			Service: "billy", DetectorVersion: "v1", GeneratedAt: t0,
			Pattern: &alertdoc.PatternChange{Change: alertdoc.ChangeNew, PatternFacts: alertdoc.PatternFacts{
				PatternID: "billy/isolated-host", Class: "isolated-host", Modifiers: []string{"hw-class-skewed"},
				HostsAffected: 1, HostsTotal: 50,
				HWClassSkew: map[string]float64{"gen3": 7, "gen4": 0.2}, AffectedHostsSample: []string{"h9"},
				LookbackStart: t0.Add(-6 * time.Hour), LookbackEnd: t0,
			}},
		},
	}
	want := []Alert{
		{
			Source: SourceKafka, Key: "kafka/spikegroup-0123456789abcdef0123456789abcdef", Service: "billy",
			HWClasses: []string{"gen5", "gen4"}, Hosts: []string{"h3", "h1", "h2"},
			WindowStart: t0, WindowEnd: t0.Add(5 * time.Second), ReceivedAt: received,
			RawID: "spikegroup-0123456789abcdef0123456789abcdef",
		},
		{
			Source: SourceKafka, Key: "kafka/pattern-0123456789abcdef0123456789abcdef", Service: "billy",
			PatternClass: IsolatedHost, PatternKey: "billy/isolated-host", HWClasses: []string{"gen3"}, Hosts: []string{"h9"},
			WindowStart: t0.Add(-6 * time.Hour), WindowEnd: t0, ReceivedAt: received,
			RawID: "pattern-0123456789abcdef0123456789abcdef",
		},
	}
	for i, doc := range docs {
		b, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := alertdoc.Parse(b); err != nil {
			t.Fatalf("the publisher's own parser refuses the test document: %v", err)
		}
		got, skip, err := decodeDetectorAlert(b, received)
		if err != nil || skip != "" {
			t.Fatalf("decode %s: skip %q, %v", doc.AlertID, skip, err)
		}
		if diff := cmp.Diff(want[i], got); diff != "" {
			t.Errorf("alert %s (-want +got):\n%s", doc.AlertID, diff)
		}
	}
}

// edit decodes a JSON object, changes it and encodes it again.
func edit(t testing.TB, doc []byte, change func(map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	change(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestByWeight(t *testing.T) {
	got, ok := byWeight(map[string]float64{"b": 1, "a": 1, "c": 3, "zero": 0, "neg": -1, " c": 2})
	if want := []string{"c", "a", "b"}; !ok || !cmp.Equal(want, got) {
		t.Errorf("byWeight = %q, %v; want %q", got, ok, want)
	}
	if _, ok := byWeight(map[string]float64{strings.Repeat("x", 300): 1}); ok {
		t.Error("a 300-byte class name was accepted")
	}
}
