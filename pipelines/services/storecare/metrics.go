package storecare

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// The Carer's rows in counters (docs/pipeline-health.md). The host column
// is the store's instance (serve-clickhouse --instance).
const (
	// metricVolumeFree and metricVolumeSize are the store's volume, gauges
	// every round.
	metricVolumeFree = "spikehunt.store.volume.free_bytes"
	metricVolumeSize = "spikehunt.store.volume.size_bytes"
	// metricPartsDetached counts the parts taken out of a table (the
	// device column), metricPartsRebuilt those whose rows were rebuilt,
	// metricRowsLost the rows of those that could not be.
	metricPartsDetached = "spikehunt.store.parts.detached"
	metricPartsRebuilt  = "spikehunt.store.parts.rebuilt"
	metricRowsLost      = "spikehunt.store.rows.lost"
)

type metrics struct {
	free, size, pending prometheus.Gauge
	detached, rebuilt   *prometheus.CounterVec
	rowsLost            *prometheus.CounterVec
	verified            prometheus.Counter
	roundErrors         prometheus.Counter
	rebuildSeconds      prometheus.Histogram
}

func newMetrics() metrics {
	return metrics{
		free: prometheus.NewGauge(prometheus.GaugeOpts{Name: "spikehunt_store_volume_free_bytes",
			Help: "Bytes free on the file system that holds the store's data (statfs f_bavail)."}),
		size: prometheus.NewGauge(prometheus.GaugeOpts{Name: "spikehunt_store_volume_size_bytes",
			Help: "Size of the file system that holds the store's data."}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "spikehunt_store_repairs_pending",
			Help: "Parts taken out of their table whose rows wait to be rebuilt."}),
		detached: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spikehunt_store_parts_detached_total",
			Help: "Parts the engine could not read, taken out of their table (kept in its detached/ folder)."}, []string{"table"}),
		rebuilt: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spikehunt_store_parts_rebuilt_total",
			Help: "Parts taken out whose rows were rebuilt from the materialized view's source."}, []string{"table"}),
		rowsLost: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "spikehunt_store_rows_lost_total",
			Help: "Rows of parts taken out of tables no view feeds: gone from the store."}, []string{"table"}),
		verified: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_store_parts_verified_total",
			Help: "Parts read whole to check them, after an engine error named them or after the volume ran low."}),
		roundErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "spikehunt_store_care_round_failures_total",
			Help: "Rounds of the store's care in which a step failed."}),
		rebuildSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "spikehunt_store_rebuild_duration_seconds",
			Help: "Time to rebuild the rows of one part taken out.", Buckets: prometheus.ExponentialBuckets(0.1, 4, 8)}),
	}
}

func (m metrics) register(reg prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.free, m.size, m.pending, m.detached, m.rebuilt, m.rowsLost, m.verified, m.roundErrors, m.rebuildSeconds} {
		errs = append(errs, reg.Register(c))
	}
	return errors.Join(errs...)
}
