package v1alpha1

import (
	"time"

	"github.com/spikehunt/spikehunt/internal/vocab"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Backend names a flight recorder (docs/design.md §6).
// +kubebuilder:validation:Enum=perf;ftrace;bpftrace;wpr
type Backend string

// The backends, as the agent's capture engine names them.
const (
	// BackendPerf is `perf record --overwrite --switch-output=signal`.
	BackendPerf Backend = Backend(vocab.BackendPerf)
	// BackendFtrace is a tracefs instance with a sized ring and a snapshot.
	BackendFtrace Backend = Backend(vocab.BackendFtrace)
	// BackendBpftrace runs a named script from the agent's allow-listed
	// folder, never program text from the API.
	BackendBpftrace Backend = Backend(vocab.BackendBpftrace)
	// BackendWPR is Windows Performance Recorder in memory mode.
	BackendWPR Backend = Backend(vocab.BackendWPR)
)

// Backends lists every backend the API accepts.
func Backends() []Backend {
	return []Backend{BackendPerf, BackendFtrace, BackendBpftrace, BackendWPR}
}

// IOClass is the IO scheduling class of a recorder's process.
// +kubebuilder:validation:Enum=idle;best-effort
type IOClass string

const (
	IOClassIdle       IOClass = "idle"
	IOClassBestEffort IOClass = "best-effort"
)

// Window bounds, as the agent's capture engine enforces them.
const (
	MinRingKB = 64
	MaxRingKB = 1 << 20
	MaxWindow = 10 * time.Minute
)

// CaptureProfile is what a node records and how: the same on a policy (the
// profile its Captures get) and on a Capture (the profile resolved for it).
//
// +kubebuilder:validation:XValidation:rule="self.backend != 'bpftrace' || has(self.script)",message="the bpftrace backend needs script: the name of a script in the agents' allow-listed folder"
// +kubebuilder:validation:XValidation:rule="self.backend == 'bpftrace' || !has(self.script)",message="script is only for the bpftrace backend"
type CaptureProfile struct {
	// Backend is the flight recorder.
	// +required
	Backend Backend `json:"backend"`

	// Profile names one of the agent's profiles for the backend (events,
	// sampling frequency, call graphs, ring size); empty is "default".
	// The agent refuses a name it does not have.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._-]{0,127}$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="profile must not contain '..'"
	Profile string `json:"profile,omitempty"`

	// Script names a bpftrace script. The API server checks only the name
	// rule (lower-case letters, digits, '.', '_', '-', no ".."); whether the
	// script is in the allow-listed folder only the node's agent knows, and
	// it refuses the Capture (phase Failed) when it is not.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9._-]{0,127}$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('..')",message="script must not contain '..': it names a file in the agents' allow-listed folder"
	Script string `json:"script,omitempty"`

	// RingKB overrides the profile's ring size per CPU, in KiB (for wpr,
	// the total); unset keeps the profile's.
	// +optional
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=1048576
	RingKB *int32 `json:"ringKB,omitempty"`

	// Pre is how much before the fire the capture keeps: the window is
	// [fire − pre, fire + post]. 0s to 10m.
	// +optional
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('10m')",message="pre must be between 0s and 10m"
	Pre *metav1.Duration `json:"pre,omitempty"`

	// Post is how long the recorder keeps recording after the fire. 0s to 10m.
	// +optional
	// +kubebuilder:default="2s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('10m')",message="post must be between 0s and 10m"
	Post *metav1.Duration `json:"post,omitempty"`

	// Overhead bounds what the recorder may cost its node.
	// +optional
	Overhead *OverheadLimits `json:"overhead,omitempty"`
}

// Window returns the pre- and post-window, zero where unset.
func (p CaptureProfile) Window() (pre, post time.Duration) {
	if p.Pre != nil {
		pre = p.Pre.Duration
	}
	if p.Post != nil {
		post = p.Post.Duration
	}
	return pre, post
}

// OverheadLimits is how gently a recorder runs. The agent applies the
// stricter of these and its own configuration (the higher nice, idle over
// best-effort); where it pins the recorder (the coolest CPUs) is its own
// decision from the node's heat.
type OverheadLimits struct {
	// Nice is the recorder process's nice level.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=19
	Nice *int32 `json:"nice,omitempty"`

	// IOClass is the recorder process's IO scheduling class.
	// +optional
	IOClass IOClass `json:"ioClass,omitempty"`
}

// LocalTrigger fires an armed capture from the node agent's own latency
// stream: on one request slower than latency, or on a second whose p99 is
// over p99, within 100 ms. At least one of the two is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.latency) || has(self.p99)",message="a local trigger needs latency or p99"
type LocalTrigger struct {
	// Service whose requests the trigger watches. On a policy, unset
	// means the policy's service; on a Capture it is always set.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Service string `json:"service,omitempty"`

	// Endpoint narrows the trigger to one endpoint of the service.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Endpoint string `json:"endpoint,omitempty"`

	// Latency fires on one request slower than this.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="latency must be positive"
	Latency *metav1.Duration `json:"latency,omitempty"`

	// P99 fires when a second's p99 latency is over this.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="p99 must be positive"
	P99 *metav1.Duration `json:"p99,omitempty"`

	// Cooldown is the quiet time after a fire before the trigger may fire
	// again.
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="cooldown must not be negative"
	Cooldown *metav1.Duration `json:"cooldown,omitempty"`
}
