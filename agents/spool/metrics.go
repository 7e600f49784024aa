package spool

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

func newFsyncHistogram() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "spikehunt_spool_fsync_duration_seconds",
		Help:    "Time of one fsync of a spool segment, the ack file or the spool directory.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9), // 100 µs … 6.6 s
	})
}

var (
	bytesDesc = prometheus.NewDesc("spikehunt_spool_bytes",
		"Size of the spool's segment files.", nil, nil)
	recordsDesc = prometheus.NewDesc("spikehunt_spool_records",
		"Unacknowledged records in the spool.", nil, nil)
	droppedDesc = prometheus.NewDesc("spikehunt_spool_dropped_records_total",
		"Records the spool lost: reason=cap, dropped unacknowledged to stay under MaxBytes; reason=corrupt, failed their CRC or were torn.",
		[]string{"reason"}, nil)
	appendsDesc = prometheus.NewDesc("spikehunt_spool_appends_total",
		"Records appended to the spool.", nil, nil)
	fsyncErrorsDesc = prometheus.NewDesc("spikehunt_spool_fsync_errors_total",
		"Background fsyncs that failed; records since the last good one may not survive a machine crash.", nil, nil)
)

// Register adds the spool's metrics to reg. Register one Spool per
// registry; the names carry no label that tells two apart.
func (s *Spool) Register(reg prometheus.Registerer) error {
	c := spoolCollector{s}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("spool: register metrics: %w", err)
	}
	if err := reg.Register(s.fsyncSeconds); err != nil {
		reg.Unregister(c)
		return fmt.Errorf("spool: register metrics: %w", err)
	}
	return nil
}

// spoolCollector reads Stats at scrape time, so the counters cost Append
// nothing.
type spoolCollector struct{ s *Spool }

func (c spoolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{bytesDesc, recordsDesc, droppedDesc, appendsDesc, fsyncErrorsDesc} {
		ch <- d
	}
}

func (c spoolCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.Stats()
	records, _ := c.s.Pending()
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.GaugeValue, float64(st.Bytes))
	ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.GaugeValue, float64(records))
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(st.DroppedRecords), "cap")
	ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(st.CorruptRecords), "corrupt")
	ch <- prometheus.MustNewConstMetric(appendsDesc, prometheus.CounterValue, float64(st.Appended))
	ch <- prometheus.MustNewConstMetric(fsyncErrorsDesc, prometheus.CounterValue, float64(st.FsyncErrors))
}
