package detect

import (
	"fmt"
	"time"
)

// sqlCase is one rendered statement of the detector, named for its file
// under testdata/sql.
type sqlCase struct {
	name string
	sql  string
}

// sqlCases renders each templated statement for a few configurations: the
// defaults, and one with every value moved off them (and a host and a
// service that need quoting), materialized or not, with and without the
// look-back's fleet, with and without the illusion's host sample. Configs
// are spelt out rather than filled by Validate, so a change of a default
// does not move them.
func sqlCases(spikeSQL func(string, spikeRange, SpikeConfig, bool) string,
	suspectSQL func(string, suspectChunk, SuspectConfig) string,
	illusionSQL func(string, time.Time, time.Time, int) string) []sqlCase {
	from := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)
	to := from.Add(6 * time.Hour)
	spikeConfigs := []struct {
		name string
		c    SpikeConfig
	}{
		{"default", SpikeConfig{K: DefaultK, Z: DefaultZ, Floor: DefaultFloor, Bucket: DefaultBucket, MergeGap: DefaultMergeGap, Pad: DefaultPad}},
		{"tuned", SpikeConfig{K: 3.25, Z: 0, Floor: 1500 * time.Microsecond, Bucket: 90 * time.Second, MergeGap: 0, Pad: 2 * time.Minute}},
	}
	suspectConfigs := []struct {
		name string
		c    SuspectConfig
	}{
		{"default", SuspectConfig{Margin: time.Second, Baseline: 30 * time.Minute, Guard: 30 * time.Second, MinBaselineIntervals: 5,
			MinDeviation: DefaultMinDeviation, RelativeFloor: 0.05, TimeWeight: 100, DownInterfaceWeight: 10_000, Max: DefaultMaxSuspects}},
		{"tuned", SuspectConfig{Margin: 0, Baseline: 7 * time.Minute, Guard: 1500 * time.Millisecond, MinBaselineIntervals: 1,
			MinDeviation: 0.125, RelativeFloor: 1, TimeWeight: 1, DownInterfaceWeight: 3e7, Max: 255}},
	}
	var out []sqlCase
	for _, sc := range spikeConfigs {
		for _, lookback := range []time.Duration{6 * time.Hour, time.Hour} {
			cfg := Config{Service: "billy", From: from, To: to, Spikes: sc.c, Patterns: PatternConfig{Lookback: lookback}}
			r := newSpikeRange(&cfg)
			fleet := "fleet"
			if r.fleetFrom.IsZero() {
				fleet = "nofleet"
			}
			for _, m := range []bool{true, false} {
				name := fmt.Sprintf("spike_windows_%s_%s_materialized_%t", sc.name, fleet, m)
				svc := "billy"
				if sc.name == "tuned" {
					svc = `o'neil\svc`
				}
				out = append(out, sqlCase{name, spikeSQL(svc, r, sc.c, m)})
			}
		}
	}
	chunks := []suspectChunk{
		{where: "service = 'billy' AND is_deleted = 0", windows: 2, hosts: []string{"host-0001", "host-0002"},
			from: from.Add(-31 * time.Minute), to: to.Add(1001 * time.Millisecond)},
		{where: "spike_id IN ('a', 'b')", windows: 1, hosts: []string{`o'neil\h`},
			from: from.Add(1234 * time.Millisecond), to: from.Add(time.Hour)},
	}
	for _, sc := range suspectConfigs {
		for i, ch := range chunks {
			out = append(out, sqlCase{fmt.Sprintf("suspects_%s_chunk%d", sc.name, i), suspectSQL("billy", ch, sc.c)})
		}
	}
	for _, fleet := range []int{0, 100, 101, 1000} {
		out = append(out, sqlCase{fmt.Sprintf("averaged_illusion_fleet%d", fleet), illusionSQL("billy", from, to, fleet)})
	}
	return out
}
