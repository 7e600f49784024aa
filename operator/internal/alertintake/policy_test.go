package alertintake

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/policy"
)

// The mapping internal/policy documents for its Alert.
func TestAlertPolicy(t *testing.T) {
	a, _, err := decodeDetectorAlert(readTestdata(t, "pattern.json"), received)
	if err != nil {
		t.Fatal(err)
	}
	got := a.Policy()
	want := policy.Alert{
		ID: "kafka/pattern-05c235507bf9b2641cb661066dbb9a78", Service: "billy", PatternClass: "fleet-recurrent",
		PatternKey: "billy/fleet-recurrent", Hosts: []string{"h1", "h2"}, HWClasses: []string{"gen5"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("policy alert (-want +got):\n%s", diff)
	}
	got.Hosts[0] = "changed"
	if a.Hosts[0] != "h1" {
		t.Error("the policy alert shares its hosts with the Alert")
	}
	trigger := policy.AlertTrigger{Services: []string{"billy"}, PatternClasses: []string{"fleet-recurrent"}, ExtraNodes: 2}
	if !trigger.Matches(a.Policy()) {
		t.Error("a billy fleet-recurrent trigger does not match the billy fleet-recurrent pattern")
	}
}

func TestPolicySink(t *testing.T) {
	var got []policy.Alert
	sink := PolicySink(func(_ context.Context, as ...policy.Alert) error {
		got = append(got, as...)
		return nil
	})
	alerts, _, err := decodeAlertmanager(readTestdata(t, "alertmanager.json"), received)
	if err != nil {
		t.Fatal(err)
	}
	if err := sink.Emit(context.Background(), alerts); err != nil {
		t.Fatal(err)
	}
	want := []policy.Alert{alerts[0].Policy(), alerts[1].Policy()}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("offered (-want +got):\n%s", diff)
	}
	if got[0].ID != alerts[0].Key || got[0].PatternKey != "search/isolated-host" {
		t.Errorf("offered %+v", got[0])
	}
}
