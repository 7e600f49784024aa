package schema

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestOptionsValidate(t *testing.T) {
	defaults := Options{
		RequestsTTLDays: 7, LatencyTTLDays: 90, CountersTTLDays: 14,
		DetectionsTTLDays: 365, CapturesTTLDays: 365, DedupWindow: 20000,
	}
	with := func(f func(*Options)) Options { o := defaults; f(&o); return o }
	tests := []struct {
		name    string
		in      Options
		want    Options
		wantErr string
	}{
		{name: "the zero value gets the defaults", in: Options{}, want: defaults},
		{name: "set values are kept", in: Options{Database: "sh", Cluster: "prod-eu.1", RequestsTTLDays: 3, DedupWindow: 10},
			want: with(func(o *Options) { o.Database, o.Cluster, o.RequestsTTLDays, o.DedupWindow = "sh", "prod-eu.1", 3, 10 })},
		{name: "a database name that is not an identifier", in: Options{Database: "sh-prod"}, wantErr: "database name"},
		{name: "a cluster name with a quote", in: Options{Database: "sh", Cluster: "a'b"}, wantErr: "cluster name"},
		{name: "a cluster without a database", in: Options{Cluster: "fleet"}, wantErr: "set Options.Database"},
		{name: "a negative TTL", in: Options{CountersTTLDays: -1}, wantErr: "CountersTTLDays = -1"},
		{name: "a TTL beyond ten years", in: Options{CapturesTTLDays: 4000}, wantErr: "CapturesTTLDays = 4000"},
		{name: "a rollup that expires before its requests", in: Options{RequestsTTLDays: 30, LatencyTTLDays: 10}, wantErr: "LatencyTTLDays (10) < RequestsTTLDays (30)"},
		{name: "a dedup window too large", in: Options{DedupWindow: 1 << 20}, wantErr: "DedupWindow"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in
			err := got.Validate()
			if diff := cmp.Diff(tt.in, got); diff != "" {
				t.Errorf("Validate changed the options (-before +after):\n%s", diff)
			}
			got = got.WithDefaults()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("WithDefaults() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTheEmbeddedMigrationsLoad(t *testing.T) {
	list, err := load(sources)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range list {
		got = append(got, m.Name)
		for _, s := range m.Statements {
			if strings.Contains(s, "--") {
				t.Errorf("migration %d %s: a comment survived: %s", m.Version, m.Name, firstLine(s))
			}
		}
	}
	if diff := cmp.Diff([]string{"requests", "counters", "detections", "captures", "ingest", "latency_1m", "latency_1s_hist", "dedup_window", "capture_findings", "capture_object", "host_tails", "host_tail_blocks"}, got); diff != "" {
		t.Errorf("migrations (-want +got):\n%s", diff)
	}
	d := Default()
	d[0].Statements[0] = "changed"
	if Default()[0].Statements[0] == "changed" {
		t.Error("Default() shares its statements with the caller")
	}
}
