package alertintake

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeGrafana(t *testing.T) {
	got, skipped, err := decodeGrafana(readTestdata(t, "grafana.json"), received) // fixed date: decoded only, never stored
	if err != nil {
		t.Fatal(err)
	}
	want := []Alert{{
		Source: SourceGrafana,
		// A literal: keys are compared across operator restarts and
		// versions, so a change of the hash is a change of behaviour.
		Key:     "grafana/10cfdfea7c0acad4976bc0a968b7ee26@1748779200",
		Service: "billy", PatternClass: FleetRecurrent, PatternKey: "billy/fleet-recurrent", HWClasses: []string{"gen5", "gen4"}, Hosts: []string{"web-07"},
		WindowStart: mustTime(t, "2025-06-01T12:00:00Z"), ReceivedAt: received, RawID: "57c6d9296de2ad39", // fixed date: decoded only, never stored
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	// The resolved alert, and Grafana's contact point test alert, which
	// has no service label.
	if diff := cmp.Diff(map[string]int{skipResolved: 1, skipNoService: 1}, skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}

func TestDecodeAlertmanager(t *testing.T) {
	got, skipped, err := decodeAlertmanager(readTestdata(t, "alertmanager.json"), received) // fixed date: decoded only, never stored
	if err != nil {
		t.Fatal(err)
	}
	want := []Alert{
		{
			Source: SourceAlertmanager, Key: "alertmanager/c9a103cd154ccb78e80939e746a96e30@1748769300",
			Service: "search", PatternClass: IsolatedHost, PatternKey: "search/isolated-host", HWClasses: []string{"gen3"}, Hosts: []string{"search-12", "search-13"},
			WindowStart: mustTime(t, "2025-06-01T09:15:00.123Z"), ReceivedAt: received, RawID: "9a8b7c6d5e4f3a2b", // fixed date: decoded only, never stored
		},
		{
			Source: SourceAlertmanager, Key: "alertmanager/04e317587584d1cae2e6cc20647f665a@1748769360",
			Service: "search", WindowStart: mustTime(t, "2025-06-01T09:16:00Z"), ReceivedAt: received, RawID: "1122334455667788", // fixed date: decoded only, never stored
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("alerts (-want +got):\n%s", diff)
	}
	if len(skipped) != 0 {
		t.Errorf("skipped %v, want none", skipped)
	}
}

func TestDecodeNotificationRefusesMalformedBodies(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  Source
		body string
		want string // substring of the error
	}{
		{"not JSON", SourceGrafana, `{"version": "1", "alerts": [`, "unexpected end of JSON input"},
		{"a JSON string", SourceAlertmanager, `"firing"`, "cannot unmarshal string"},
		{"an Alertmanager body at the Grafana endpoint", SourceGrafana, `{"version": "4", "alerts": []}`, `version "4"; this operator reads version 1`},
		{"an old Alertmanager", SourceAlertmanager, `{"version": "3", "alerts": []}`, `version "3"; this operator reads version 4`},
		{"no alerts list", SourceAlertmanager, `{"version": "4", "status": "firing"}`, "without an alerts list"},
		{"alerts: null", SourceGrafana, `{"version": "1", "alerts": null}`, "without an alerts list"},
		{"an alert status of neither firing nor resolved", SourceGrafana,
			`{"version": "1", "alerts": [{"status": "pending", "labels": {"service": "a"}}]}`, `alert 0 has status "pending"`},
		{"a label that is not a string", SourceAlertmanager,
			`{"version": "4", "alerts": [{"status": "firing", "labels": {"service": 7}}]}`, "cannot unmarshal number"},
		{"a start that is not RFC 3339", SourceAlertmanager,
			`{"version": "4", "alerts": [{"status": "firing", "labels": {"service": "a"}, "startsAt": "yesterday"}]}`, "cannot parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version := grafanaPayloadVersion
			if tc.src == SourceAlertmanager {
				version = alertmanagerPayloadVersion
			}
			got, _, err := decodeNotification(tc.src, version, []byte(tc.body), received)
			if got != nil {
				t.Errorf("alerts %v from a malformed body", got)
			}
			checkErr(t, err, tc.want)
			if err != nil && reasonOf(err) != rejectMalformed {
				t.Errorf("reason %q, want %q", reasonOf(err), rejectMalformed)
			}
		})
	}
}

func TestDecodeNotificationSkipsAlertsWithUnusableLabels(t *testing.T) {
	body := /* fixed date: decoded only, never stored */ `{"version": "4", "alerts": [
		{"status": "firing", "labels": {"service": "ok"}, "startsAt": "2025-06-01T09:15:00Z"},
		{"status": "firing", "labels": {"service": "a\u0000b"}},
		{"status": "firing", "labels": {"service": "x", "pattern_class": "Fleet Recurrent"}},
		{"status": "firing", "labels": {"service": "x", "host": "h1,\u001b[31mh2"}},
		{"status": "firing", "labels": {"alertname": "NoService"}},
		{"status": "resolved", "labels": {"service": "x"}}
	]}`
	got, skipped, err := decodeAlertmanager([]byte(body), received)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Service != "ok" {
		t.Errorf("alerts %+v, want only service ok", got)
	}
	want := map[string]int{skipInvalidLabels: 3, skipNoService: 1, skipResolved: 1}
	if diff := cmp.Diff(want, skipped); diff != "" {
		t.Errorf("skipped (-want +got):\n%s", diff)
	}
}

func TestWebhookKey(t *testing.T) {
	t0 := mustTime(t, "2025-06-01T12:00:00Z") // fixed date: decoded only, never stored
	labels := map[string]string{"service": "billy", "host": "h1"}
	base := webhookKey(SourceGrafana, labels, t0)
	for _, tc := range []struct {
		name string
		key  string
		same bool
	}{
		{"the same labels and start, from a new map", webhookKey(SourceGrafana, map[string]string{"host": "h1", "service": "billy"}, t0), true},
		{"the same start to the second", webhookKey(SourceGrafana, labels, t0.Add(400*time.Millisecond)), true},
		{"a new start: the alert fired again", webhookKey(SourceGrafana, labels, t0.Add(time.Hour)), false},
		{"another label value", webhookKey(SourceGrafana, map[string]string{"service": "billy", "host": "h2"}, t0), false},
		{"a label moved across the name/value boundary", webhookKey(SourceGrafana, map[string]string{"service": "billyhost", "": "h1"}, t0), false},
		{"another source", webhookKey(SourceAlertmanager, labels, t0), false},
	} {
		if (tc.key == base) != tc.same {
			t.Errorf("%s: key %s vs %s, want same=%v", tc.name, tc.key, base, tc.same)
		}
	}
}
