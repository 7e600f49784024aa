package nodecapture

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/spikehunt/spikehunt/agents/capture"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// CaptureID is the engine's id for the Capture namespace/armingID: it names
// the capture's work folder and its artifact (captures/<id>.json in the
// store), so it is what `spikehunt-agent capture get|fire|disarm` take on
// the node.
//
// It is "<namespace>.<armingID>". The arming id alone is unique only
// within a namespace — the operator derives it from the policy's name, so
// two policies of one name in two namespaces arm the same ids on a node —
// and a namespace holds no '.', so the pair stays unambiguous. The id rule
// (capture.ValidName) allows 128 bytes; a longer pair is cut and ends in 16
// hex digits of its sha256, so it stays unique and deterministic.
func CaptureID(namespace, armingID string) string {
	id := namespace + "." + armingID
	if len(id) <= maxIDLength {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return id[:maxIDLength-17] + "-" + hex.EncodeToString(sum[:8])
}

const maxIDLength = 128

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
//	namespace, spec.armingID      → ID (CaptureID)
func SpecFor(c *capturev1alpha1.Capture) (capture.Spec, error) {
	p := c.Spec.Profile
	s := capture.Spec{
		ID:      CaptureID(c.Namespace, c.Spec.ArmingID),
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
