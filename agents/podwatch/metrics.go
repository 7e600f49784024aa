package podwatch

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Watcher's own figures, atomics that Stats and /metrics
// read.
type metrics struct {
	pods                      atomic.Int64
	live                      atomic.Bool
	lists                     atomic.Uint64
	relistsGone, relistsError atomic.Uint64
	listErrors, watchErrors   atomic.Uint64
	droppedPods               atomic.Uint64
	droppedContainers         atomic.Uint64
	invalid                   atomic.Uint64
}

// Stats is a snapshot of the Watcher's figures.
type Stats struct {
	Pods int  // pods named
	Live bool // the watch is connected; false: names come from the cache
	// Lists counts complete lists: the first, and each one after the
	// watch could not resume (RelistsGone: 410 Gone; RelistsError: a
	// stream that failed to decode or was too large).
	Lists, RelistsGone, RelistsError uint64
	// ListErrors and WatchErrors count failed requests and streams.
	ListErrors, WatchErrors uint64
	// DroppedPods are pods not kept because MaxPods were, each time one
	// was seen; DroppedContainers likewise beyond MaxContainersPerPod;
	// Invalid are list items that were not a pod (no name, namespace or
	// UID, or longer than Kubernetes allows).
	DroppedPods, DroppedContainers, Invalid uint64
}

// Stats returns the Watcher's figures now.
func (w *Watcher) Stats() Stats {
	m := &w.m
	return Stats{Pods: int(m.pods.Load()), Live: m.live.Load(), Lists: m.lists.Load(),
		RelistsGone: m.relistsGone.Load(), RelistsError: m.relistsError.Load(),
		ListErrors: m.listErrors.Load(), WatchErrors: m.watchErrors.Load(),
		DroppedPods: m.droppedPods.Load(), DroppedContainers: m.droppedContainers.Load(), Invalid: m.invalid.Load()}
}

// Register adds the Watcher's figures to reg:
//
//	spikehunt_podwatch_pods                      pods named
//	spikehunt_podwatch_live                      1 while the watch is connected
//	spikehunt_podwatch_lists_total               complete lists
//	spikehunt_podwatch_relists_total{reason}     gone | error: lists after a watch could not resume
//	spikehunt_podwatch_errors_total{op}          list | watch: failed requests and streams
//	spikehunt_podwatch_dropped_total{what}       pod | container | invalid: not kept (bounds, or not a pod)
func (w *Watcher) Register(reg prometheus.Registerer) error {
	m := &w.m
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help, label, value string, v *atomic.Uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: prometheus.Labels{label: value}},
			func() float64 { return float64(v.Load()) })
	}
	const relists, errs, dropped = "Lists of this node's pods made because the watch could not resume from where it was.",
		"Pod list requests and watch streams that failed; the names last known stay in use.",
		"Pods and containers not kept: beyond the pod watch's bounds, or list items that are not a pod."
	cs := []prometheus.Collector{
		gauge("spikehunt_podwatch_pods", "Pods of this node whose names the agent knows.", func() float64 { return float64(m.pods.Load()) }),
		gauge("spikehunt_podwatch_live", "1 while the pod watch is connected to the API server; 0 while names come from the cache.", func() float64 {
			if m.live.Load() {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "spikehunt_podwatch_lists_total", Help: "Complete lists of this node's pods."},
			func() float64 { return float64(m.lists.Load()) }),
		counter("spikehunt_podwatch_relists_total", relists, "reason", "gone", &m.relistsGone),
		counter("spikehunt_podwatch_relists_total", relists, "reason", "error", &m.relistsError),
		counter("spikehunt_podwatch_errors_total", errs, "op", "list", &m.listErrors),
		counter("spikehunt_podwatch_errors_total", errs, "op", "watch", &m.watchErrors),
		counter("spikehunt_podwatch_dropped_total", dropped, "what", "pod", &m.droppedPods),
		counter("spikehunt_podwatch_dropped_total", dropped, "what", "container", &m.droppedContainers),
		counter("spikehunt_podwatch_dropped_total", dropped, "what", "invalid", &m.invalid),
	}
	var all []error
	for _, c := range cs {
		all = append(all, reg.Register(c))
	}
	return errors.Join(all...)
}
