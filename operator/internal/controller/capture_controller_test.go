package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/fakeclock"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// spikeStore is a migrated embedded store.
func spikeStore(t *testing.T) store.Store {
	t.Helper()
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(context.Background(), st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	return st
}

type spike struct {
	id, host   string
	start, end time.Time
}

// addSpikes writes spike windows as the detector does.
func addSpikes(t *testing.T, st store.Store, spikes ...spike) {
	t.Helper()
	lit := func(tm time.Time) string { return "'" + tm.UTC().Format("2006-01-02 15:04:05.000") + "'" }
	var vals []string
	for _, s := range spikes {
		vals = append(vals, fmt.Sprintf("(%s, 'billy', %s, 'gen5', %s, %s, 1000000, 5000, 200, 'v1', %s, 0)",
			store.QuoteString(s.id), store.QuoteString(s.host), lit(s.start), lit(s.end), lit(s.end.Add(time.Minute))))
	}
	q := `INSERT INTO spikes (spike_id, service, host, hw_class, window_start, window_end, peak_us, baseline_us, score,
		detector_version, detected_at, is_deleted) VALUES ` + strings.Join(vals, ", ")
	if err := st.Exec(context.Background(), q); err != nil {
		t.Fatalf("%v\n%s", err, q)
	}
}

// arm, fire and upload are the test agent's steps.
func arm(at time.Time) func(*v1alpha1.CaptureStatus) {
	return func(st *v1alpha1.CaptureStatus) {
		st.Phase = v1alpha1.PhaseArmed
		st.ArmedAt = &metav1.Time{Time: at}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionArmed, Status: metav1.ConditionTrue, Reason: "Armed", Message: "perf ring live"})
	}
}

func fire(at time.Time) func(*v1alpha1.CaptureStatus) {
	return func(st *v1alpha1.CaptureStatus) {
		st.Phase = v1alpha1.PhaseFired
		st.FiredAt = &metav1.MicroTime{Time: at}
		st.FiredBy = v1alpha1.FiredByLatency
	}
}

func upload(id string, from, to time.Time, lost, overrun int64) func(*v1alpha1.CaptureStatus) {
	return func(st *v1alpha1.CaptureStatus) {
		st.Phase = v1alpha1.PhaseUploaded
		st.WindowStart = &metav1.MicroTime{Time: from}
		st.WindowEnd = &metav1.MicroTime{Time: to}
		st.Artifact = &v1alpha1.Artifact{URI: "s3://captures/captures/" + id + ".json", Bytes: 4 << 20,
			LostEvents: lost, OverrunEvents: overrun, Checksum: strings.Repeat("ab", 32)}
	}
}

// waitPhase waits until the capture is in phase and returns it.
func (e *env) waitPhase(t *testing.T, name string, phase v1alpha1.CapturePhase) *v1alpha1.Capture {
	t.Helper()
	var c *v1alpha1.Capture
	eventually(t, time.Minute, "capture "+name+" "+string(phase), func() error {
		c = e.capture(t, name)
		if c.Status.Phase != phase {
			return fmt.Errorf("phase %q, want %q (conditions %+v)", c.Status.Phase, phase, c.Status.Conditions)
		}
		return nil
	})
	return c
}

func condition(c *v1alpha1.Capture, typ string) metav1.Condition {
	if cond := meta.FindStatusCondition(c.Status.Conditions, typ); cond != nil {
		return *cond
	}
	return metav1.Condition{}
}

// TestCapturePhases drives a policy's Captures through every phase as the
// node agents would, with the operator indexing against the embedded
// store and expiring bait:
//   - Armed → Fired → Uploaded becomes Indexed with exactly the spike
//     windows on the node that overlap the capture's window, and the
//     captures row counts lost + overrun events;
//   - an Uploaded capture with no overlapping spike yet waits, and links
//     the spike the detector writes a little later;
//   - one whose window no spike will overlap is Indexed with none, and
//     says so;
//   - Failed stays Failed, and its node gets no second bait in the epoch;
//   - at the rotation, unfired bait expires and the new epoch's sample is
//     armed exactly;
//   - a node that leaves the selector has its unfired bait expired, and
//     the bait follows the new sample.
func TestCapturePhases(t *testing.T) {
	st := spikeStore(t)
	e := newEnv(t)
	// Ten minutes into an even epoch. With 4 bait among 8 nodes the deck
	// is dealt in a cycle of two epochs, so the rotation below stays within
	// one cycle and the two samples are disjoint: every unfired bait leaves
	// the sample. From an odd epoch the next one starts a new cycle, whose
	// fresh shuffle deals the unfired bait's node again half the time, and
	// bait that stays in the sample is kept, not expired (policy.Decide).
	e.clock = fakeclock.New(time.Now().UTC().Truncate(2 * time.Hour).Add(10 * time.Minute))
	nodes := fleet("p", 8, "gen5")
	e.createNodes(t, nodes)
	e.startOperator(t, operatorOptions{store: st, fast: true})
	pol := e.basePolicy("billy", "p")
	pol.Spec.Sampling = v1alpha1.Sampling{Count: ptr[int32](4), RotationPeriod: dur(time.Hour)}
	e.create(t, pol)
	sampling := samplingOf(pol.Spec.Sampling)

	sel0 := policy.Sample(string(pol.UID), policyNodes(nodes), sampling, e.clock.Now())
	eventually(t, 20*time.Second, "the epoch's bait", func() error {
		if got := nodesOf(e.captures(t)); !slices.Equal(got, sel0.Nodes) {
			return fmt.Errorf("captures on %v, want %v", got, sel0.Nodes)
		}
		return nil
	})
	first := e.captures(t)
	a, b, c, d := first[0], first[1], first[2], first[3]
	now := e.clock.Now()
	for _, x := range first {
		e.agent(t, x.Name, arm(now))
	}

	t.Run("uploaded is indexed with exactly the overlapping spikes", func(t *testing.T) {
		w0 := now.Add(-time.Minute).Truncate(time.Second)
		host := a.Spec.NodeName
		addSpikes(t, st,
			spike{"over-start", host, w0.Add(-5 * time.Second), w0.Add(time.Second)},
			spike{"inside", host, w0.Add(5 * time.Second), w0.Add(6 * time.Second)},
			spike{"touches-start", host, w0.Add(-10 * time.Second), w0},
			spike{"touches-end", host, w0.Add(12 * time.Second), w0.Add(14 * time.Second)},
			spike{"other-host", b.Spec.NodeName, w0.Add(5 * time.Second), w0.Add(6 * time.Second)},
		)
		e.agent(t, a.Name, fire(w0.Add(10*time.Second)))
		e.agent(t, a.Name, func(st *v1alpha1.CaptureStatus) {
			upload(a.Spec.ArmingID, w0, w0.Add(12*time.Second), 3, 4)(st)
			st.Artifact.Findings = &v1alpha1.Findings{Verdict: "blocked 998 ms in do_nanosleep; woken by its timer",
				BlockingStack: "do_nanosleep ← hrtimer_nanosleep", HottestCPU: 3, HottestCPUBusyPercent: 97, SoftirqPermille: 125}
		})
		got := e.waitPhase(t, a.Name, v1alpha1.PhaseIndexed)
		if diff := cmp.Diff([]string{"over-start", "inside"}, got.Status.SpikeIDs); diff != "" {
			t.Errorf("spike ids (-want +got):\n%s", diff)
		}
		if c := condition(got, v1alpha1.ConditionIndexed); c.Status != metav1.ConditionTrue || c.Reason != ReasonLinked {
			t.Errorf("Indexed condition %+v, want True, %s", c, ReasonLinked)
		}
		row, err := captures.Get(context.Background(), st, a.Spec.ArmingID)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"over-start", "inside"}, row.SpikeIDs); diff != "" {
			t.Errorf("the row's spike ids (-want +got):\n%s", diff)
		}
		if row.LostEvents != 7 || row.Host != host || row.Status != captures.StatusIndexed || row.Backend != "perf" || row.Profile != "cpu" ||
			row.Trigger != "latency: billy > 1s" {
			t.Errorf("row %+v, want 7 lost events (3 lost + 4 overrun) on host %s, indexed, perf/cpu, fired by latency", row, host)
		}
		if row.Namespace != a.Namespace || row.Name != a.Name {
			t.Errorf("the row names Capture %s/%s, want %s/%s (the report server's address of it)", row.Namespace, row.Name, a.Namespace, a.Name)
		}
		want := captures.Findings{Verdict: "blocked 998 ms in do_nanosleep; woken by its timer", BlockingStack: "do_nanosleep ← hrtimer_nanosleep",
			HottestCPU: 3, SoftirqShare: 0.125}
		if row.Findings == nil || *row.Findings != want {
			t.Errorf("the row's findings %+v, want the node's %+v", row.Findings, want)
		}
	})

	t.Run("a spike the detector writes late is linked by a later attempt", func(t *testing.T) {
		w0 := now.Add(-3 * time.Second)
		e.agent(t, c.Name, fire(w0.Add(time.Second)))
		e.agent(t, c.Name, upload(c.Spec.ArmingID, w0, w0.Add(2*time.Second), 0, 0))
		eventually(t, 20*time.Second, "waiting for spikes", func() error {
			got := e.capture(t, c.Name)
			if cond := condition(got, v1alpha1.ConditionIndexed); got.Status.Phase != v1alpha1.PhaseUploaded || cond.Reason != ReasonWaitingForSpikes {
				return fmt.Errorf("phase %s, Indexed %+v: want Uploaded, waiting", got.Status.Phase, cond)
			}
			return nil
		})
		consistently(t, 500*time.Millisecond, "still Uploaded", func() error {
			if p := e.capture(t, c.Name).Status.Phase; p != v1alpha1.PhaseUploaded {
				return fmt.Errorf("phase %s before any spike overlaps", p)
			}
			return nil
		})
		addSpikes(t, st, spike{"late", c.Spec.NodeName, w0.Add(time.Second), w0.Add(4 * time.Second)})
		got := e.waitPhase(t, c.Name, v1alpha1.PhaseIndexed)
		if diff := cmp.Diff([]string{"late"}, got.Status.SpikeIDs); diff != "" {
			t.Errorf("spike ids (-want +got):\n%s", diff)
		}
	})

	t.Run("failed stays failed and its node gets no second bait this epoch", func(t *testing.T) {
		e.agent(t, b.Name, func(st *v1alpha1.CaptureStatus) {
			st.Phase = v1alpha1.PhaseFailed
			st.Message = "perf: not supported on this node"
		})
		consistently(t, time.Second, "failed, and four captures", func() error {
			if p := e.capture(t, b.Name).Status.Phase; p != v1alpha1.PhaseFailed {
				return fmt.Errorf("phase %s, want Failed", p)
			}
			if n := len(e.captures(t)); n != 4 {
				return fmt.Errorf("%d captures, want 4", n)
			}
			return nil
		})
		if _, ok := e.capture(t, b.Name).Annotations[AnnotationEndedAt]; !ok {
			t.Errorf("the failed capture has no %s annotation", AnnotationEndedAt)
		}
	})

	// The rotation: d is armed and has not fired.
	e.clock.Advance(time.Hour)
	sel1 := policy.Sample(string(pol.UID), policyNodes(nodes), sampling, e.clock.Now())
	if sel1.Epoch%2 != 1 || slices.Contains(sel1.Nodes, d.Spec.NodeName) {
		t.Fatalf("epoch %d samples %v: the unfired bait's node %s must leave the sample", sel1.Epoch, sel1.Nodes, d.Spec.NodeName)
	}
	t.Run("the rotation expires unfired bait and arms the new sample", func(t *testing.T) {
		got := e.waitPhase(t, d.Name, v1alpha1.PhaseExpired)
		if cond := condition(got, v1alpha1.ConditionArmed); cond.Status != metav1.ConditionFalse || cond.Reason != ReasonExpired {
			t.Errorf("Armed condition %+v, want False, %s", cond, ReasonExpired)
		}
		for name, want := range map[string]v1alpha1.CapturePhase{a.Name: v1alpha1.PhaseIndexed, b.Name: v1alpha1.PhaseFailed, c.Name: v1alpha1.PhaseIndexed} {
			if p := e.capture(t, name).Status.Phase; p != want {
				t.Errorf("capture %s is %s after the rotation, want %s", name, p, want)
			}
		}
		eventually(t, 20*time.Second, "the new epoch's bait", func() error {
			var on []string
			for _, x := range e.captures(t) {
				if x.Spec.Epoch == sel1.Epoch {
					on = append(on, x.Spec.NodeName)
					if want := policy.ArmingName(pol.Name, x.Spec.NodeName, sel1.Epoch, policy.ReasonBait, ""); x.Name != want {
						return fmt.Errorf("capture %s, want the name %s", x.Name, want)
					}
				}
			}
			slices.Sort(on)
			if !slices.Equal(on, sel1.Nodes) {
				return fmt.Errorf("epoch %d captures on %v, want %v", sel1.Epoch, on, sel1.Nodes)
			}
			return nil
		})
	})

	t.Run("an upload no spike overlaps is indexed with none", func(t *testing.T) {
		x := e.capture(t, policy.ArmingName(pol.Name, sel1.Nodes[0], sel1.Epoch, policy.ReasonBait, ""))
		w0 := e.clock.Now().Add(-10 * time.Minute)
		e.agent(t, x.Name, arm(w0))
		e.agent(t, x.Name, fire(w0.Add(time.Second)))
		e.agent(t, x.Name, upload(x.Spec.ArmingID, w0, w0.Add(2*time.Second), 0, 0))
		got := e.waitPhase(t, x.Name, v1alpha1.PhaseIndexed)
		if len(got.Status.SpikeIDs) != 0 {
			t.Errorf("spike ids %v, want none", got.Status.SpikeIDs)
		}
		if cond := condition(got, v1alpha1.ConditionIndexed); cond.Status != metav1.ConditionTrue || cond.Reason != ReasonNoOverlappingSpike {
			t.Errorf("Indexed condition %+v, want True, %s", cond, ReasonNoOverlappingSpike)
		}
	})

	t.Run("a node leaving the selector expires its bait and the bait follows the sample", func(t *testing.T) {
		x := e.capture(t, policy.ArmingName(pol.Name, sel1.Nodes[1], sel1.Epoch, policy.ReasonBait, ""))
		e.agent(t, x.Name, arm(e.clock.Now()))
		e.relabel(t, x.Spec.NodeName, "fleet", "elsewhere")
		got := e.waitPhase(t, x.Name, v1alpha1.PhaseExpired)
		if cond := condition(got, v1alpha1.ConditionArmed); cond.Reason != ReasonExpired {
			t.Errorf("Armed condition %+v, want %s", cond, ReasonExpired)
		}
		left := slices.DeleteFunc(slices.Clone(nodes), func(n node) bool { return n.name == x.Spec.NodeName })
		sel := policy.Sample(string(pol.UID), policyNodes(left), sampling, e.clock.Now())
		eventually(t, time.Minute, "the bait of the new sample", func() error {
			var on []string
			for _, y := range e.captures(t) {
				if y.Spec.Epoch == sel.Epoch && (active(y.Status.Phase) || y.Status.Phase == v1alpha1.PhaseIndexed) {
					on = append(on, y.Spec.NodeName)
				}
			}
			slices.Sort(on)
			if !slices.Equal(on, sel.Nodes) {
				return fmt.Errorf("live epoch %d bait on %v, want %v", sel.Epoch, on, sel.Nodes)
			}
			return nil
		})
	})
}

// relabel sets one label of a Node.
func (e *env) relabel(t *testing.T, name, key, value string) {
	t.Helper()
	n := nodeMeta(name)
	patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, key, value))
	if err := e.admin.Patch(context.Background(), n, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		t.Fatal(err)
	}
}

func nodeMeta(name string) *metav1.PartialObjectMetadata {
	n := &metav1.PartialObjectMetadata{}
	n.SetGroupVersionKind(nodeMetadataList().GroupVersionKind().GroupVersion().WithKind("Node"))
	n.SetName(name)
	return n
}

// TestRetentionDeletesEndedCapturesAndTheirRows: a capture that ended
// (Indexed, Failed, Expired) is deleted once its policy's retention TTL
// has passed since it ended and its epoch is over; its finalizer first
// deletes the index row and the artifact, then lets it go. A capture still
// active (fired, not yet uploaded) is kept.
func TestRetentionDeletesEndedCapturesAndTheirRows(t *testing.T) {
	st := spikeStore(t)
	e := newEnv(t)
	// Ten minutes into a day, the sample rotating daily.
	e.clock = fakeclock.New(time.Now().UTC().Truncate(24 * time.Hour).Add(10 * time.Minute))
	nodes := fleet("r", 4, "gen5")
	e.createNodes(t, nodes)
	artifacts := &recordingDeleter{}
	e.startOperator(t, operatorOptions{store: st, artifacts: artifacts, fast: true})
	pol := e.basePolicy("billy", "r")
	pol.Spec.Sampling = v1alpha1.Sampling{Count: ptr[int32](4), RotationPeriod: dur(24 * time.Hour)}
	pol.Spec.Retention.TTL = dur(time.Hour)
	e.create(t, pol)
	eventually(t, 20*time.Second, "four captures", func() error {
		if n := len(e.captures(t)); n != 4 {
			return fmt.Errorf("%d captures", n)
		}
		return nil
	})
	cs := e.captures(t)
	indexed, failed, expired, fired := cs[0], cs[1], cs[2], cs[3]
	now := e.clock.Now()
	for _, x := range cs {
		e.agent(t, x.Name, arm(now))
	}
	w0 := now.Add(-time.Minute)
	addSpikes(t, st, spike{"s1", indexed.Spec.NodeName, w0, w0.Add(time.Second)})
	e.agent(t, indexed.Name, fire(w0))
	e.agent(t, indexed.Name, upload(indexed.Spec.ArmingID, w0, w0.Add(2*time.Second), 0, 0))
	e.waitPhase(t, indexed.Name, v1alpha1.PhaseIndexed)
	e.agent(t, failed.Name, func(st *v1alpha1.CaptureStatus) { st.Phase = v1alpha1.PhaseFailed; st.Message = "no perf" })
	e.relabel(t, expired.Spec.NodeName, "fleet", "elsewhere")
	e.waitPhase(t, expired.Name, v1alpha1.PhaseExpired)
	e.agent(t, fired.Name, fire(now))
	eventually(t, 10*time.Second, "ended-at stamps", func() error {
		for _, x := range []v1alpha1.Capture{indexed, failed, expired} {
			if _, ok := e.capture(t, x.Name).Annotations[AnnotationEndedAt]; !ok {
				return fmt.Errorf("capture %s has no %s", x.Name, AnnotationEndedAt)
			}
		}
		return nil
	})
	if _, err := captures.Get(context.Background(), st, indexed.Spec.ArmingID); err != nil {
		t.Fatalf("the indexed capture's row: %v", err)
	}

	// Past the TTL, within the epoch: the policy would arm the nodes again
	// under the same names if they went.
	e.clock.Advance(time.Hour + time.Minute)
	consistently(t, time.Second, "nothing retired within the epoch", func() error {
		for _, x := range e.captures(t) {
			if !x.DeletionTimestamp.IsZero() {
				return fmt.Errorf("capture %s is being deleted", x.Name)
			}
		}
		if n := len(e.captures(t)); n != 4 {
			return fmt.Errorf("%d captures, want 4", n)
		}
		return nil
	})

	e.clock.Advance(24 * time.Hour)
	eventually(t, 20*time.Second, "the ended captures gone", func() error {
		var left []string
		for _, x := range e.captures(t) {
			if x.Spec.Epoch == indexed.Spec.Epoch {
				left = append(left, x.Name)
			}
		}
		if !slices.Equal(left, []string{fired.Name}) {
			return fmt.Errorf("epoch %d captures %v, want only the fired %s", indexed.Spec.Epoch, left, fired.Name)
		}
		return nil
	})
	if _, err := captures.Get(context.Background(), st, indexed.Spec.ArmingID); !errors.Is(err, captures.ErrNotFound) {
		t.Errorf("the retired capture's row: %v, want ErrNotFound", err)
	}
	if diff := cmp.Diff([]string{indexed.Spec.ArmingID}, artifacts.ids()); diff != "" {
		t.Errorf("artifacts deleted (-want +got):\n%s", diff)
	}
	if x := e.capture(t, fired.Name); x.Status.Phase != v1alpha1.PhaseFired || !slices.Contains(x.Finalizers, FinalizerArtifact) {
		t.Errorf("the fired capture: phase %s, finalizers %v", x.Status.Phase, x.Finalizers)
	}
}
