package alerts

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// Validate judges a config as NewPublisher would run it and changes
// nothing in it: defaults are WithDefaults' job, on a copy.
func TestConfigValidateLeavesTheConfigAsItWas(t *testing.T) {
	for _, tc := range []struct {
		in      Config
		wantErr string
	}{
		{Config{}, ""},
		{Config{SpikeGroupBurst: 7, ResolveAfter: time.Minute}, ""},
		{Config{SpikeGroupBurst: -3}, "SpikeGroupBurst -3"},
		{Config{DedupHorizon: time.Second}, "DedupHorizon 1s"},
	} {
		got := tc.in
		err := got.Validate()
		if diff := cmp.Diff(tc.in, got); diff != "" {
			t.Errorf("Validate changed the config (-before +after):\n%s", diff)
		}
		if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%+v: Validate = %v, want %q", tc.in, err, tc.wantErr)
		}
	}
	d := Config{}.WithDefaults()
	if d.Clock == nil || d.SpikeGroupBurst != DefaultSpikeGroupBurst || d.MaxHosts != DefaultMaxHosts {
		t.Errorf("WithDefaults = %+v, want the defaults", d)
	}
}

func TestKafkaConfigValidateLeavesTheConfigAsItWas(t *testing.T) {
	ignoreNow := cmpopts.IgnoreFields(KafkaConfig{}, "Now")
	for _, in := range []KafkaConfig{
		{Brokers: []string{"k:9092"}},
		{},
		{Brokers: []string{"k:9092"}, SendTimeout: time.Millisecond},
	} {
		got := in
		_ = got.Validate()
		if diff := cmp.Diff(in, got, ignoreNow); diff != "" || got.Now != nil {
			t.Errorf("Validate changed the config (-before +after):\n%s", diff)
		}
	}
	if d := (KafkaConfig{Brokers: []string{"k:9092"}}).WithDefaults(); d.Topic != DefaultTopic || d.SendTimeout != 30*time.Second || d.Now == nil {
		t.Errorf("WithDefaults: topic %q, send timeout %s, now set %v", d.Topic, d.SendTimeout, d.Now != nil)
	}
}
