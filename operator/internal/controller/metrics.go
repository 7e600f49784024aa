package controller

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	capturesCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_operator_captures_created_total",
		Help: "Captures the policy controller created, by reason (bait, alert).",
	}, []string{"reason"})
	capturesExpired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spikehunt_operator_captures_expired_total",
		Help: "Captures the policy controller expired before they fired.",
	})
	budgetRefusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_operator_budget_refusals_total",
		Help: "Armings a budget refused, by budget (counted once per decision that refused them).",
	}, []string{"reason"})
	alertsReceived = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spikehunt_operator_alerts_received_total",
		Help: "Alerts offered to the alert inbox.",
	})
	alertsDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_operator_alerts_dropped_total",
		Help: "Alerts the inbox dropped for a policy without acting on all of them, by reason: no_policy (no policy's trigger matches), expired (older than the inbox TTL), backlog (over the per-policy limit; the oldest go).",
	}, []string{"reason"})
	capturesIndexed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "spikehunt_operator_captures_indexed_total",
		Help: "Captures the capture controller indexed, by outcome (linked, no_spikes).",
	}, []string{"outcome"})
	capturesRetired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "spikehunt_operator_captures_retired_total",
		Help: "Captures deleted because their retention TTL passed.",
	})
)

var registerOnce sync.Once

// registerMetrics adds the controllers' metrics to controller-runtime's
// registry, which the manager serves on /metrics.
func registerMetrics() {
	registerOnce.Do(func() {
		metrics.Registry.MustRegister(capturesCreated, capturesExpired, budgetRefusals,
			alertsReceived, alertsDropped, capturesIndexed, capturesRetired)
	})
}
