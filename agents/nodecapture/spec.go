package nodecapture

import (
	"fmt"

	"github.com/spikehunt/spikehunt/agents/capture"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// CaptureID is the engine's id for a Capture: its spec.armingID, as the
// API says ("the agent uses it as the capture's id, which names its folder
// and its artifact"). The operator indexes the capture under it and
// deletes captures/<armingID>.json from the store at retention, and a
// person on the node gives it to `spikehunt-agent capture get|fire|disarm`:
// one id everywhere. The API server checks it against the same rule as
// capture.ValidName; SpecFor checks it again.
//
// An arming id is unique within its namespace. Two Captures of one node
// with the same id in two namespaces cannot both run: the second is Failed
// ("capture id … is taken"), and a second artifact under an id the store
// already holds is refused by the store, never overwritten.
func CaptureID(c *capturev1alpha1.Capture) string { return c.Spec.ArmingID }

// SpecFor maps a Capture to the engine's request. The API server checked
// the Capture against the CRD's rules; the engine checks the result again
// (the agent's own caps, profiles and script folder are its to know), so an
// error here or from Arm is a Capture this node refuses.
//
//	spec.profile.backend          → Backend
//	spec.profile.profile          → Profile ("" is the backend's default)
//	spec.profile.script           → Script (a name in the agent's allow-listed folder)
//	spec.profile.ringKB           → RingKB (0 keeps the profile's)
//	spec.profile.pre, post        → Pre, Post
//	spec.profile.overhead         → Govern.Nice, Govern.IOClass: only where gentler than the agent's
//	spec.trigger                  → Trigger (unset: fired only remotely or by hand)
//	spec.armingID                 → ID (CaptureID)
func SpecFor(c *capturev1alpha1.Capture) (capture.Spec, error) {
	p := c.Spec.Profile
	s := capture.Spec{
		ID:      CaptureID(c),
		Backend: string(p.Backend),
		Profile: p.Profile,
		Script:  p.Script,
	}
	if p.RingKB != nil {
		s.RingKB = int(*p.RingKB)
	}
	s.Pre, s.Post = p.Window()
	if o := p.Overhead; o != nil {
		if o.Nice != nil {
			s.Govern.Nice = int(*o.Nice)
		}
		s.Govern.IOClass = string(o.IOClass)
	}
	if t := c.Spec.Trigger; t != nil {
		s.Trigger = capture.Trigger{Service: t.Service, Endpoint: t.Endpoint}
		if t.Latency != nil {
			s.Trigger.Latency = t.Latency.Duration
		}
		if t.P99 != nil {
			s.Trigger.P99 = t.P99.Duration
		}
		if t.Cooldown != nil {
			s.Trigger.Cooldown = t.Cooldown.Duration
		}
	}
	if err := s.Validate(); err != nil {
		return capture.Spec{}, fmt.Errorf("capture %s/%s: %w", c.Namespace, c.Name, err)
	}
	return s, nil
}
