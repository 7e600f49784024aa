package v1alpha1

import (
	"github.com/spikehunt/spikehunt/internal/vocab"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DefaultHWClassLabel is the node label that names a node's hardware class.
const DefaultHWClassLabel = "spikehunt.io/hw-class"

// PatternClass is a detector's class of a recurrence pattern
// (pipelines/services/detect).
// +kubebuilder:validation:Enum=fleet-recurrent;fleet-synchronized;isolated-host
type PatternClass string

const (
	PatternFleetRecurrent    PatternClass = PatternClass(vocab.ClassFleetRecurrent)
	PatternFleetSynchronized PatternClass = PatternClass(vocab.ClassFleetSynchronized)
	PatternIsolatedHost      PatternClass = PatternClass(vocab.ClassIsolatedHost)
)

// CapturePolicySpec says which nodes keep a recorder armed as bait, which
// fleet alerts widen that, and the budgets that bound both.
type CapturePolicySpec struct {
	// NodeSelector chooses the nodes the policy samples from; unset
	// selects every node.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// Service is the service whose spikes the captures are for.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Service string `json:"service"`

	// Sampling chooses the nodes that get bait.
	// +required
	Sampling Sampling `json:"sampling"`

	// Profile is what the policy's Captures record.
	// +required
	Profile CaptureProfile `json:"profile"`

	// Triggers fire the bait locally and widen it on fleet alerts.
	// +optional
	Triggers *Triggers `json:"triggers,omitempty"`

	// Budgets bound captures, bait and alerts alike.
	// +optional
	// +kubebuilder:default={}
	Budgets Budgets `json:"budgets,omitempty"`

	// Retention says how long captures and their artifacts are kept.
	// +optional
	// +kubebuilder:default={}
	Retention Retention `json:"retention,omitempty"`
}

// Sampling chooses the bait nodes: deterministically from a hash of the
// policy, the node and the rotation epoch, stratified by hardware class so
// that every class gets bait, and chosen again every rotation period so
// that over time the bait covers the fleet. Exactly one of percent and
// count is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.percent) != has(self.count)",message="set exactly one of sampling.percent and sampling.count"
type Sampling struct {
	// Percent of the selected nodes, rounded up, spread over the hardware
	// classes in proportion to their size with at least one per class.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Percent *int32 `json:"percent,omitempty"`

	// Count of the selected nodes (all of them when there are fewer),
	// spread over the hardware classes like percent. 0 arms no bait: only
	// fleet alerts arm captures.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000
	Count *int32 `json:"count,omitempty"`

	// HWClassLabel is the node label naming a node's hardware class;
	// nodes without it form one class of their own.
	// +optional
	// +kubebuilder:default="spikehunt.io/hw-class"
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	HWClassLabel string `json:"hwClassLabel,omitempty"`

	// RotationPeriod is how long one epoch's choice of nodes holds; at
	// least 1m.
	// +optional
	// +kubebuilder:default="1h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m')",message="rotationPeriod must be at least 1m"
	RotationPeriod *metav1.Duration `json:"rotationPeriod,omitempty"`
}

// Triggers fire captures.
type Triggers struct {
	// Local arms the bait with a trigger on the node's own latency stream.
	// +optional
	Local *LocalTrigger `json:"local,omitempty"`

	// FleetAlerts widens the bait when a detector alert matches.
	// +optional
	FleetAlerts *FleetAlertTrigger `json:"fleetAlerts,omitempty"`
}

// FleetAlertTrigger matches the detector's alerts (the spikehunt.alerts
// topic, the Grafana and Alertmanager webhooks). A match arms captures on
// more nodes, of the hardware classes the alert names and the hosts it
// names first, one class after another, within the budgets; when the
// fleet's concurrency budget is full, bait of the policy that has not
// fired makes room.
type FleetAlertTrigger struct {
	// Services whose alerts match; empty means the policy's service.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=253
	Services []string `json:"services,omitempty"`

	// PatternClasses whose alerts match; empty means every class.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	PatternClasses []PatternClass `json:"patternClasses,omitempty"`

	// WidenBy is how many nodes beyond the bait one matching alert arms
	// over its whole life (a re-sent alert arms no more), and at least one
	// in each hardware class the alert names hosts of; 0 arms none.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	WidenBy *int32 `json:"widenBy,omitempty"`
}

// Budgets bound captures however many alerts arrive. They count the
// captures of every policy: a node never has two armed at once.
type Budgets struct {
	// MaxConcurrentPerFleet bounds the captures active at once (not yet
	// Uploaded, Failed or Expired) across the fleet.
	// +optional
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	MaxConcurrentPerFleet int32 `json:"maxConcurrentPerFleet,omitempty"`

	// PerNodeCooldown is the least time between the armings of two
	// captures on one node.
	// +optional
	// +kubebuilder:default="30m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="perNodeCooldown must not be negative"
	PerNodeCooldown *metav1.Duration `json:"perNodeCooldown,omitempty"`

	// MaxPerPatternPerHour bounds the captures armed for one recurrence
	// pattern's alerts in any hour, finished ones included; bait is not
	// counted.
	// +optional
	// +kubebuilder:default=6
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	MaxPerPatternPerHour int32 `json:"maxPerPatternPerHour,omitempty"`
}

// Retention says how long captures are kept.
type Retention struct {
	// TTL is how long a capture and its artifact live after it ends; the
	// operator then deletes the artifact, its index row and the Capture
	// (through a finalizer). At least 1h.
	// +optional
	// +kubebuilder:default="168h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h')",message="retention.ttl must be at least 1h"
	TTL *metav1.Duration `json:"ttl,omitempty"`
}

// CapturePolicyStatus is what the operator last did with the policy.
type CapturePolicyStatus struct {
	// ObservedGeneration is the generation of the spec the status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, BudgetLimited.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// SampledNodes is how many nodes the current epoch chose for bait.
	// +optional
	SampledNodes int32 `json:"sampledNodes,omitempty"`

	// Epoch is the current rotation epoch.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`

	// LastRotation is when the current epoch began.
	// +optional
	LastRotation *metav1.Time `json:"lastRotation,omitempty"`
}

// Condition types of a CapturePolicy.
const (
	// ConditionReady: the current epoch's bait is armed as sampled.
	ConditionReady = "Ready"
	// ConditionBudgetLimited: the sampler or an alert wanted more captures
	// than a budget allows; the reason names the budget.
	ConditionBudgetLimited = "BudgetLimited"
)

// CapturePolicy keeps flight recorders armed on a sample of a service's
// nodes and widens the sample when the fleet's alerts match.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cpol,categories=spikehunt
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.service`
// +kubebuilder:printcolumn:name="Sampled",type=integer,JSONPath=`.status.sampledNodes`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CapturePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec CapturePolicySpec `json:"spec"`
	// +optional
	Status CapturePolicyStatus `json:"status,omitempty"`
}

// CapturePolicyList is a list of CapturePolicy.
//
// +kubebuilder:object:root=true
type CapturePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CapturePolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&CapturePolicy{}, &CapturePolicyList{})
}
