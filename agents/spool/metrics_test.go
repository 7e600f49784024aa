package spool

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// gather returns every sample of reg by name and labels, histograms by
// their sample count.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			switch {
			case m.GetCounter() != nil:
				got[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				got[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return got
}

func TestMetrics(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxBytes = 8 << 10
	s, _ := mustOpen(t, cfg)
	reg := prometheus.NewPedanticRegistry()
	if err := s.Register(reg); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 1, 40)
	n, _ := s.Pending()
	st := s.Stats()
	if st.DroppedRecords == 0 || n+int(st.DroppedRecords) != 40 {
		t.Fatalf("%d pending and %d dropped of 40 appended", n, st.DroppedRecords)
	}
	got := gather(t, reg)
	if got["spikehunt_spool_fsync_duration_seconds_count"] < 1 {
		t.Errorf("no fsync observed: %v", got)
	}
	delete(got, "spikehunt_spool_fsync_duration_seconds_count")
	want := map[string]float64{
		"spikehunt_spool_appends_total":                         40,
		"spikehunt_spool_records":                               float64(n),
		"spikehunt_spool_bytes":                                 float64(st.Bytes),
		"spikehunt_spool_dropped_records_total{reason=cap}":     float64(st.DroppedRecords),
		"spikehunt_spool_dropped_records_total{reason=corrupt}": 0,
		"spikehunt_spool_fsync_errors_total":                    0,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("metrics (-want +got):\n%s", diff)
	}
	if err := s.Register(reg); err == nil {
		t.Error("registering twice on one registry succeeded")
	}
}
