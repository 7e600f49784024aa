package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CaptureReason says why a capture was armed.
// +kubebuilder:validation:Enum=bait;alert
type CaptureReason string

const (
	// ReasonBait: the node was sampled to keep a recorder armed before any
	// spike.
	ReasonBait CaptureReason = "bait"
	// ReasonAlert: a fleet alert widened the sample to this node.
	ReasonAlert CaptureReason = "alert"
)

// CapturePhase is where a capture is in its life:
// Pending → Armed → Fired → Uploaded → Indexed, or Failed or Expired.
// +kubebuilder:validation:Enum=Pending;Armed;Fired;Uploaded;Indexed;Failed;Expired
type CapturePhase string

const (
	// PhasePending: created by the operator, not yet armed by the agent.
	PhasePending CapturePhase = "Pending"
	// PhaseArmed: the node's recorder is live, its ring overwriting itself.
	PhaseArmed CapturePhase = "Armed"
	// PhaseFired: the trigger fired; the recorder is writing the window.
	PhaseFired CapturePhase = "Fired"
	// PhaseUploaded: the artifact is sealed in the store (status.artifact).
	PhaseUploaded CapturePhase = "Uploaded"
	// PhaseIndexed: the operator wrote the capture's index row and linked
	// the spikes its window overlaps (status.spikeIDs). Final.
	PhaseIndexed CapturePhase = "Indexed"
	// PhaseFailed: the capture could not go on; status.message says why.
	// Final.
	PhaseFailed CapturePhase = "Failed"
	// PhaseExpired: the arming ended (its epoch rotated away, its policy
	// went) before anything fired. Final.
	PhaseExpired CapturePhase = "Expired"
)

// Final reports whether a capture in phase p never changes phase again.
func (p CapturePhase) Final() bool {
	return p == PhaseIndexed || p == PhaseFailed || p == PhaseExpired
}

// FireCause says what fired a capture.
// +kubebuilder:validation:Enum=latency;p99;remote;manual
type FireCause string

const (
	FiredByLatency FireCause = "latency" // one request over the local trigger's latency
	FiredByP99     FireCause = "p99"     // a second's p99 over the local trigger's p99
	FiredByRemote  FireCause = "remote"  // the operator, on a fleet alert
	FiredByManual  FireCause = "manual"  // a person, through the agent's CLI
)

// CaptureSpec is one arming of one recorder on one node. Everything in it
// says which arming it is and what it records, so none of it changes once
// the Capture exists.
//
// +kubebuilder:validation:XValidation:rule="self.reason == 'alert' || !has(self.alertID)",message="alertID is only for captures armed by an alert"
// +kubebuilder:validation:XValidation:rule="self.reason != 'alert' || has(self.alertID)",message="a capture armed by an alert needs alertID"
// +kubebuilder:validation:XValidation:rule="has(self.alertID) == has(oldSelf.alertID) && (!has(self.alertID) || self.alertID == oldSelf.alertID)",message="alertID is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.patternID) == has(oldSelf.patternID) && (!has(self.patternID) || self.patternID == oldSelf.patternID)",message="patternID is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.trigger) == has(oldSelf.trigger) && (!has(self.trigger) || self.trigger == oldSelf.trigger)",message="trigger is immutable"
// +kubebuilder:validation:XValidation:rule="!has(self.trigger) || has(self.trigger.service)",message="a Capture's trigger names its service"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.fire) || (has(self.fire) && self.fire == oldSelf.fire)",message="fire is set once and never changed"
type CaptureSpec struct {
	// NodeName is the node whose agent arms the capture; the agent lists
	// Captures with the field selector spec.nodeName=<its node>.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="nodeName is immutable"
	NodeName string `json:"nodeName"`

	// PolicyRef names the CapturePolicy, in the Capture's namespace, that
	// armed it.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="policyRef is immutable"
	PolicyRef PolicyReference `json:"policyRef"`

	// ArmingID identifies the arming: the operator makes one Capture per
	// arming, and the agent uses it as the capture's id, which names its
	// folder and its artifact.
	// +required
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._-]{0,127}$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="armingID must not contain '..'"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="armingID is immutable"
	ArmingID string `json:"armingID"`

	// Epoch is the policy's rotation epoch the arming belongs to.
	// +required
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="epoch is immutable"
	Epoch int64 `json:"epoch"`

	// Reason says whether the node was sampled (bait) or added by an alert.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="reason is immutable"
	Reason CaptureReason `json:"reason"`

	// AlertID is the id of the alert that armed the capture.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	AlertID string `json:"alertID,omitempty"`

	// PatternID is the key the per-pattern budget counts the capture
	// under: the detector's id of the pattern the alert is about (for an
	// alert about a group of spikes, which has none, its service).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	PatternID string `json:"patternID,omitempty"`

	// Profile is what the node records, resolved from the policy.
	// +required
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="profile is immutable"
	Profile CaptureProfile `json:"profile"`

	// Trigger fires the capture from the node's latency stream; unset,
	// only a remote or manual fire does.
	// +optional
	Trigger *LocalTrigger `json:"trigger,omitempty"`

	// Fire asks the node to fire the capture now (a remote fire: the
	// operator on a fleet alert, or a person with kubectl). It can be set
	// once and never changed; the agent fires an Armed capture the first
	// time it sees it, and a capture that already fired ignores it.
	// +optional
	Fire *FireRequest `json:"fire,omitempty"`
}

// FireRequest is a remote fire.
type FireRequest struct {
	// Reason is kept in the capture's metadata ("alert 1234").
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason"`
}

// PolicyReference names a CapturePolicy in the same namespace.
type PolicyReference struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// CaptureStatus is written by the node's agent (Armed, Fired, Uploaded,
// Failed) and by the operator (Indexed, Expired).
//
// +kubebuilder:validation:XValidation:rule="!has(self.windowStart) || !has(self.windowEnd) || self.windowStart <= self.windowEnd",message="windowStart must not be after windowEnd"
type CaptureStatus struct {
	// Phase: Pending, Armed, Fired, Uploaded, Indexed, or Failed or
	// Expired. It only moves forward, and Indexed, Failed and Expired are
	// final, so a late write from a restarted writer cannot undo one.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="!(oldSelf in ['Indexed', 'Failed', 'Expired']) || self == oldSelf",message="phases Indexed, Failed and Expired are final"
	// +kubebuilder:validation:XValidation:rule="self == oldSelf || self in ['Failed', 'Expired'] || oldSelf in ['Pending', 'Indexed', 'Failed', 'Expired'] || (oldSelf == 'Armed' && self in ['Fired', 'Uploaded', 'Indexed']) || (oldSelf == 'Fired' && self in ['Uploaded', 'Indexed']) || (oldSelf == 'Uploaded' && self == 'Indexed')",message="phase moves only forward: Pending, Armed, Fired, Uploaded, Indexed"
	// +kubebuilder:validation:XValidation:rule="self != 'Expired' || oldSelf in ['Pending', 'Armed', 'Expired']",message="only a capture that has not fired expires"
	Phase CapturePhase `json:"phase,omitempty"`

	// ObservedGeneration is the generation of the spec the status is for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Armed, Indexed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// ArmedAt is when the recorder's ring went live.
	// +optional
	ArmedAt *metav1.Time `json:"armedAt,omitempty"`

	// FiredAt is when the capture fired, to the microsecond.
	// +optional
	FiredAt *metav1.MicroTime `json:"firedAt,omitempty"`

	// FiredBy says what fired it.
	// +optional
	FiredBy FireCause `json:"firedBy,omitempty"`

	// WindowStart and WindowEnd are the wall-clock window the artifact
	// covers, [fire − pre, fire + post] clipped to when it was armed, to
	// the microsecond: spikes are linked by overlap with it.
	// +optional
	WindowStart *metav1.MicroTime `json:"windowStart,omitempty"`
	// +optional
	WindowEnd *metav1.MicroTime `json:"windowEnd,omitempty"`

	// Artifact is the sealed artifact in the store.
	// +optional
	Artifact *Artifact `json:"artifact,omitempty"`

	// SpikeIDs are the spikes on the node whose windows overlap the
	// capture's window, as indexed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=1024
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	SpikeIDs []string `json:"spikeIDs,omitempty"`

	// Message is a person's explanation of the phase, such as why it
	// failed.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Message string `json:"message,omitempty"`
}

// Artifact is a capture's sealed, content-addressed output.
type Artifact struct {
	// URI locates the artifact's metadata record in the store
	// (s3://bucket/captures/<id>.json, file:///…).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URI string `json:"uri"`

	// Bytes is the size of the artifact's files together.
	// +required
	// +kubebuilder:validation:Minimum=0
	Bytes int64 `json:"bytes"`

	// LostEvents counts events the tool could not record; a trace with
	// holes says so.
	// +optional
	// +kubebuilder:validation:Minimum=0
	LostEvents int64 `json:"lostEvents"`

	// OverrunEvents counts events a ring overwrote before they were read.
	// +optional
	// +kubebuilder:validation:Minimum=0
	OverrunEvents int64 `json:"overrunEvents"`

	// Checksum is the artifact's sha256 (hex) over its files' checksums.
	// +required
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{64}$`
	Checksum string `json:"checksum"`

	// Findings summarize the analysis the agent made of the trace on the
	// node (the artifact's explain.json), when its recorder makes one.
	// +optional
	Findings *Findings `json:"findings,omitempty"`
}

// Findings are a capture's analysis in a few fields: what the captures
// index shows next to the spike.
type Findings struct {
	// Verdict is the slowest explained request's one-line verdict.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Verdict string `json:"verdict,omitempty"`

	// BlockingStack is that request's longest blocking call chain,
	// innermost first.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	BlockingStack string `json:"blockingStack,omitempty"`

	// HottestCPU is the CPU whose samples were least idle (-1: none),
	// and HottestCPUBusyPercent how busy it was.
	// +optional
	// +kubebuilder:validation:Minimum=-1
	HottestCPU int32 `json:"hottestCPU"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	HottestCPUBusyPercent int32 `json:"hottestCPUBusyPercent,omitempty"`

	// SoftirqPermille is the share of the window's samples, over every
	// CPU, that ran softirq work, in thousandths.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	SoftirqPermille int32 `json:"softirqPermille,omitempty"`
}

// Condition types of a Capture.
const (
	// ConditionArmed: the node's recorder is live, or, False, why it
	// could not arm (the backend is not supported there, the node's own
	// budget is spent).
	ConditionArmed = "Armed"
	// ConditionIndexed: the capture's index row is written.
	ConditionIndexed = "Indexed"
)

// Capture is one arming of one flight recorder on one node, from arming to
// its indexed artifact.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cap,categories=spikehunt
// +kubebuilder:selectablefield:JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.spec.nodeName`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.profile.backend`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.spec.reason`,priority=1
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policyRef.name`,priority=1
// +kubebuilder:printcolumn:name="Fired",type=date,JSONPath=`.status.firedAt`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Capture struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec CaptureSpec `json:"spec"`
	// +optional
	Status CaptureStatus `json:"status,omitempty"`
}

// CaptureList is a list of Capture.
//
// +kubebuilder:object:root=true
type CaptureList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Capture `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Capture{}, &CaptureList{})
}
