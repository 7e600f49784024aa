package nodecapture

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// Reasons of the Armed condition the agent writes.
const (
	ReasonArmed          = "Armed"
	ReasonFired          = "Fired"
	ReasonUploaded       = "Uploaded"
	ReasonNotSupported   = "NotSupported"   // the node cannot run the backend
	ReasonInvalid        = "Invalid"        // the node refuses the request (profile, script, ring cap)
	ReasonBusy           = "Busy"           // the node's own budget is spent
	ReasonArmFailed      = "ArmFailed"      // the recorder did not start
	ReasonCaptureFailed  = "CaptureFailed"  // fire, collect, seal or upload failed
	ReasonAborted        = "Aborted"        // the governor stopped it (memory pressure)
	ReasonDisarmed       = "Disarmed"       // disarmed on the node, by hand
	ReasonAgentRestarted = "AgentRestarted" // the agent that armed it is gone, and its ring with it
	ReasonAgentStopped   = "AgentStopped"   // the agent stopped and disarmed it
)

// maxMessage is the CRD's bound on status.message.
const maxMessage = 4096

// phaseRank orders the phases the agent writes; a report never moves a
// Capture back (the CRD refuses it, and a late report must not try).
var phaseRank = map[capturev1alpha1.CapturePhase]int{
	"": 0, capturev1alpha1.PhasePending: 0, capturev1alpha1.PhaseArmed: 1,
	capturev1alpha1.PhaseFired: 2, capturev1alpha1.PhaseUploaded: 3, capturev1alpha1.PhaseIndexed: 4,
}

// reportStatus is the status a Capture gets for the engine's view of it,
// st: Armed → Armed; Fired → Fired with firedAt, firedBy and the window;
// Collected → Uploaded with the artifact; Failed, Aborted and Disarmed →
// Failed with the engine's reason. Fields the operator writes (spikeIDs,
// its conditions) are kept. A final Capture, or a report that would move
// one back, is returned unchanged.
func reportStatus(c *capturev1alpha1.Capture, st control.Status, node string, now time.Time) capturev1alpha1.CaptureStatus {
	s := *c.Status.DeepCopy()
	if s.Phase.Final() {
		return s
	}
	s.ObservedGeneration = c.Generation
	if !st.ArmedAt.IsZero() {
		s.ArmedAt = new(metav1.NewTime(st.ArmedAt))
	}
	if !st.FiredAt.IsZero() {
		setFired(&s, c, st)
	}
	backend := string(c.Spec.Profile.Backend)
	var next capturev1alpha1.CapturePhase
	switch st.State {
	case control.Armed:
		next = capturev1alpha1.PhaseArmed
		s.Message = ""
		setArmed(&s, metav1.ConditionTrue, ReasonArmed, fmt.Sprintf("the %s recorder's ring is live on node %s", backend, node), now)
	case control.Fired:
		next = capturev1alpha1.PhaseFired
		s.Message = firedMessage(st.Cause)
		setArmed(&s, metav1.ConditionFalse, ReasonFired, s.Message, now)
	case control.Collected:
		next = capturev1alpha1.PhaseUploaded
		if md := st.Metadata; md != nil {
			s.Artifact = &capturev1alpha1.Artifact{URI: st.Location, Bytes: md.Bytes,
				LostEvents: clampInt64(md.Lost), OverrunEvents: clampInt64(md.Overruns), Checksum: md.Checksum,
				Findings: findingsStatus(md.Findings)}
		}
		s.Message = uploadedMessage(st)
		setArmed(&s, metav1.ConditionFalse, ReasonUploaded, s.Message, now)
	case control.Failed:
		return failStatus(c, ReasonCaptureFailed, fmt.Sprintf("the capture failed on node %s: %s", node, st.Error), now)
	case control.Aborted:
		return failStatus(c, ReasonAborted, fmt.Sprintf("node %s's governor aborted the capture: %s", node, st.Error), now)
	case control.Disarmed:
		return failStatus(c, ReasonDisarmed, fmt.Sprintf("the capture was disarmed on node %s (spikehunt-agent capture disarm)", node), now)
	default: // arming: nothing to say yet
		return c.Status
	}
	if phaseRank[next] < phaseRank[s.Phase] {
		return c.Status
	}
	s.Phase = next
	return s
}

// setFired fills firedAt, firedBy and the window: [fire − pre, fire +
// post] clipped to the arming, from the artifact's record once there is
// one (the same values, sealed).
func setFired(s *capturev1alpha1.CaptureStatus, c *capturev1alpha1.Capture, st control.Status) {
	fired := st.FiredAt
	pre, post := c.Spec.Profile.Window()
	from, to := fired.Add(-pre), fired.Add(post)
	if from.Before(st.ArmedAt) {
		from = st.ArmedAt
	}
	if md := st.Metadata; md != nil {
		fired, from, to = md.FiredAt, md.WindowStart, md.WindowEnd
	}
	s.FiredAt = new(metav1.NewMicroTime(fired))
	s.WindowStart, s.WindowEnd = new(metav1.NewMicroTime(from)), new(metav1.NewMicroTime(to))
	if st.Cause != nil {
		switch by := capturev1alpha1.FireCause(st.Cause.Kind); by {
		case capturev1alpha1.FiredByLatency, capturev1alpha1.FiredByP99, capturev1alpha1.FiredByRemote, capturev1alpha1.FiredByManual:
			s.FiredBy = by
		}
	}
}

func firedMessage(c *record.FireCause) string {
	if c == nil {
		return "fired"
	}
	switch c.Kind {
	case "latency":
		return fmt.Sprintf("fired by a %v request of %s %s", c.Latency.Round(time.Millisecond), c.Service, c.Endpoint)
	case "p99":
		return fmt.Sprintf("fired by a second of %s whose p99 was %v", c.Service, c.Latency.Round(time.Millisecond))
	case "remote":
		return "fired by the operator: " + c.Reason
	case "manual":
		return "fired by hand on the node: " + c.Reason
	}
	return "fired: " + c.Reason
}

func uploadedMessage(st control.Status) string {
	md := st.Metadata
	if md == nil {
		return "uploaded to " + st.Location
	}
	msg := fmt.Sprintf("uploaded %d bytes in %d files", md.Bytes, len(md.Files))
	if md.Lost > 0 || md.Overruns > 0 {
		msg += fmt.Sprintf("; the trace has holes: %d events lost, %d overwritten", md.Lost, md.Overruns)
	}
	return msg
}

// failStatus is the status of a Capture that failed on the node.
func failStatus(c *capturev1alpha1.Capture, reason, message string, now time.Time) capturev1alpha1.CaptureStatus {
	s := *c.Status.DeepCopy()
	if s.Phase.Final() {
		return s
	}
	s.ObservedGeneration = c.Generation
	s.Phase = capturev1alpha1.PhaseFailed
	s.Message = truncate(message, maxMessage)
	setArmed(&s, metav1.ConditionFalse, reason, s.Message, now)
	return s
}

// armFailure is the reason and message for an Arm the engine refused.
func armFailure(node string, err error) (reason, message string) {
	reason = ReasonArmFailed
	switch {
	case errors.Is(err, capture.ErrNotSupported):
		reason = ReasonNotSupported
	case errors.Is(err, capture.ErrInvalid):
		reason = ReasonInvalid
	case errors.Is(err, capture.ErrBusy):
		reason = ReasonBusy
	}
	return reason, fmt.Sprintf("node %s cannot arm the capture: %v", node, err)
}

func setArmed(s *capturev1alpha1.CaptureStatus, status metav1.ConditionStatus, reason, message string, now time.Time) {
	meta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: capturev1alpha1.ConditionArmed, Status: status,
		Reason: reason, Message: truncate(message, 32768), ObservedGeneration: s.ObservedGeneration,
		LastTransitionTime: metav1.NewTime(now)})
}

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	i := n - len(more)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + more
}

// equalStatus compares two statuses as the API server stores them (times
// to the second or microsecond, in UTC).
func equalStatus(a, b capturev1alpha1.CaptureStatus) bool {
	ja, errA := json.Marshal(a)
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && bytes.Equal(ja, jb)
}

// findingsStatus is the artifact's findings as the Capture's status holds
// them: the texts cut to the API's bounds, the shares in integers.
func findingsStatus(f *record.Findings) *capturev1alpha1.Findings {
	if f == nil {
		return nil
	}
	cut := func(s string) string {
		if len(s) <= 1024 {
			return s
		}
		s = s[:1021]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		return s + "…"
	}
	return &capturev1alpha1.Findings{Verdict: cut(f.Verdict), BlockingStack: cut(f.BlockingStack),
		HottestCPU: int32(max(f.HottestCPU, -1)), HottestCPUBusyPercent: int32(math.Round(min(max(f.HottestCPUBusy, 0), 1) * 100)),
		SoftirqPermille: int32(math.Round(min(max(f.SoftirqShare, 0), 1) * 1000))}
}
