package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// Defaults of CaptureReconciler.
const (
	DefaultIndexRetry = 30 * time.Second
	DefaultIndexWait  = 5 * time.Minute
	// DefaultTTL is retention when the Capture's policy is gone; the
	// CRD's default for retention.ttl.
	DefaultTTL = 168 * time.Hour
)

// Condition reasons of a Capture's Indexed condition.
const (
	ReasonLinked             = "Linked"
	ReasonNoOverlappingSpike = "NoOverlappingSpikes"
	ReasonWaitingForSpikes   = "WaitingForSpikes"
	ReasonNoStore            = "NoStore"
	ReasonInvalidCapture     = "InvalidCapture"
)

// maxSpikeIDs is the CRD's bound on status.spikeIDs; the index row keeps
// every id.
const maxSpikeIDs = 1024

// ArtifactDeleter deletes a capture's artifact from the store the agents
// upload to. The operator must not import the agents' store, so main wires
// an implementation of its own; nil leaves artifacts to the bucket's own
// lifecycle rule (the index row and the Capture are still deleted).
type ArtifactDeleter interface {
	// DeleteArtifact removes the artifact of the capture armingID: its
	// metadata record (captures/<armingID>.json) and the content-addressed
	// objects no other record names. An artifact already gone is not an
	// error, so that the finalizer can retry.
	DeleteArtifact(ctx context.Context, armingID string, a v1alpha1.Artifact) error
}

// CaptureReconciler indexes what the agents upload and retires Captures.
//
//   - Indexing: a Capture in phase Uploaded gets its captures row
//     (captures.Index, LostEvents = lost + overrun) and then phase Indexed
//     with the ids of the spike windows on its node that overlap its
//     window. The detector may not have written those windows yet, so while
//     none overlaps, the row is written again every IndexRetry until
//     IndexWait after the window's end; then the Capture is Indexed with
//     none, and its Indexed condition says so.
//   - Retention: every Capture carries FinalizerArtifact. When a Capture
//     is done (Uploaded, Indexed, Failed, Expired) it is stamped
//     AnnotationEndedAt; its policy's retention.ttl later, and once its
//     epoch is over (see retainedUntil), it is deleted. On
//     deletion, for whatever reason, the artifact (through Artifacts) and
//     the index row go, then the finalizer.
//
// The Capture's node name is the host its spikes are indexed under: the
// agent names its host in telemetry by its node.
type CaptureReconciler struct {
	Client client.Client
	// Store is the ClickHouse store of the spikes and captures tables;
	// nil turns indexing off (Uploaded Captures say so in a condition).
	Store store.Store
	// DeleteOptions go to captures.Delete (captures.OnCluster for a cluster).
	DeleteOptions []captures.DeleteOption
	// Artifacts deletes artifacts; nil leaves them (see ArtifactDeleter).
	Artifacts ArtifactDeleter
	Clock     Clock
	// IndexRetry is the wait between index attempts that found no spike
	// (default 30s); IndexWait how long after the capture's window ends
	// they go on (default 5m: a few detector passes).
	IndexRetry time.Duration
	IndexWait  time.Duration
	// MaxRequeue bounds the wait for retention (default 1h).
	MaxRequeue time.Duration
	// Workers is how many Captures are reconciled at once (default 4).
	Workers int
}

// SetupWithManager registers the controller on Captures.
func (r *CaptureReconciler) SetupWithManager(mgr ctrl.Manager) error {
	registerMetrics()
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("capture").
		For(&v1alpha1.Capture{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: cmp.Or(r.Workers, 4)}).
		Complete(r)
}

// Reconcile: fetch → finalizer (deleting: release and let go) → index
// when Uploaded → retention.
func (r *CaptureReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var c v1alpha1.Capture
	if err := r.Client.Get(ctx, req.NamespacedName, &c); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !c.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.release(ctx, &c)
	}
	if !controllerutil.ContainsFinalizer(&c, FinalizerArtifact) {
		patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
		controllerutil.AddFinalizer(&c, FinalizerArtifact)
		if err := r.Client.Patch(ctx, &c, patch); err != nil {
			return ctrl.Result{}, client.IgnoreNotFound(err)
		}
	}

	now := r.clock().Now()
	var wait time.Duration // 0: no requeue
	if c.Status.Phase == v1alpha1.PhaseUploaded {
		w, err := r.index(ctx, &c, now)
		if err != nil {
			return ctrl.Result{}, err
		}
		wait = w
	}
	w, err := r.retain(ctx, &c, now)
	if err != nil || w < 0 {
		return ctrl.Result{}, err
	}
	if w > 0 && (wait == 0 || w < wait) {
		wait = w
	}
	return ctrl.Result{RequeueAfter: wait}, nil
}

func (r *CaptureReconciler) clock() Clock { return clockOr(r.Clock) }

// index writes the Uploaded capture's row and, once it links spikes or
// the wait is over, moves it to Indexed. It returns how long to wait
// before trying again (0: done).
func (r *CaptureReconciler) index(ctx context.Context, c *v1alpha1.Capture, now time.Time) (time.Duration, error) {
	if r.Store == nil {
		return 0, r.setIndexed(ctx, c, "", metav1.ConditionFalse, ReasonNoStore,
			"the operator has no store (--dsn): the capture is not indexed", now)
	}
	row, err := indexRow(c)
	if err == nil {
		var ids []string
		ids, err = captures.Index(ctx, r.Store, row)
		if err == nil {
			return r.indexed(ctx, c, ids, now)
		}
	}
	if errors.Is(err, captures.ErrInvalidCapture) || errors.Is(err, captures.ErrKeyChanged) {
		// Indexing again cannot help: say why and leave it Uploaded.
		return 0, r.setIndexed(ctx, c, "", metav1.ConditionFalse, ReasonInvalidCapture, err.Error(), now)
	}
	return 0, err
}

// indexed records an index attempt that linked ids.
func (r *CaptureReconciler) indexed(ctx context.Context, c *v1alpha1.Capture, ids []string, now time.Time) (time.Duration, error) {
	window := fmt.Sprintf("[%s, %s)", c.Status.WindowStart.UTC().Format(time.RFC3339Nano), c.Status.WindowEnd.UTC().Format(time.RFC3339Nano))
	if len(ids) == 0 {
		giveUp := c.Status.WindowEnd.Add(cmp.Or(r.IndexWait, DefaultIndexWait))
		if now.Before(giveUp) {
			msg := fmt.Sprintf("indexed; no spike window on host %s overlaps %s yet: indexing again until %s, for the detector's next passes",
				c.Spec.NodeName, window, giveUp.UTC().Format(time.RFC3339))
			if err := r.setIndexed(ctx, c, "", metav1.ConditionFalse, ReasonWaitingForSpikes, msg, now); err != nil {
				return 0, err
			}
			return cmp.Or(r.IndexRetry, DefaultIndexRetry), nil
		}
		capturesIndexed.WithLabelValues("no_spikes").Inc()
		return 0, r.setIndexed(ctx, c, v1alpha1.PhaseIndexed, metav1.ConditionTrue, ReasonNoOverlappingSpike,
			fmt.Sprintf("indexed with no spike: none on host %s overlaps %s", c.Spec.NodeName, window), now, ids...)
	}
	msg := fmt.Sprintf("indexed with %d spike windows on host %s that overlap %s", len(ids), c.Spec.NodeName, window)
	if len(ids) > maxSpikeIDs {
		msg += fmt.Sprintf("; status lists the first %d, the index row all", maxSpikeIDs)
		ids = ids[:maxSpikeIDs]
	}
	capturesIndexed.WithLabelValues("linked").Inc()
	return 0, r.setIndexed(ctx, c, v1alpha1.PhaseIndexed, metav1.ConditionTrue, ReasonLinked, msg, now, ids...)
}

// setIndexed writes the Indexed condition, and the phase and spike ids
// when phase is set, if that changes the status. The update carries the
// resourceVersion read: a conflict retries with what the agent wrote.
func (r *CaptureReconciler) setIndexed(ctx context.Context, c *v1alpha1.Capture, phase v1alpha1.CapturePhase,
	status metav1.ConditionStatus, reason, msg string, now time.Time, ids ...string) error {
	st := c.Status.DeepCopy()
	if phase != "" {
		st.Phase = phase
		st.SpikeIDs = ids
	}
	st.ObservedGeneration = c.Generation
	setCondition(&st.Conditions, metav1.Condition{Type: v1alpha1.ConditionIndexed, Status: status, Reason: reason, Message: msg},
		c.Generation, now)
	if equality.Semantic.DeepEqual(&c.Status, st) {
		return nil
	}
	c.Status = *st
	if err := r.Client.Status().Update(ctx, c); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

// indexRow is the captures row of an uploaded Capture.
func indexRow(c *v1alpha1.Capture) (captures.Capture, error) {
	st := &c.Status
	if st.Artifact == nil {
		return captures.Capture{}, fmt.Errorf("%w %s: Uploaded without status.artifact", captures.ErrInvalidCapture, c.Spec.ArmingID)
	}
	if st.WindowStart == nil || st.WindowEnd == nil {
		return captures.Capture{}, fmt.Errorf("%w %s: Uploaded without status.windowStart and windowEnd", captures.ErrInvalidCapture, c.Spec.ArmingID)
	}
	profile := cmp.Or(c.Spec.Profile.Profile, "default")
	if c.Spec.Profile.Script != "" {
		profile = c.Spec.Profile.Script
	}
	var findings *captures.Findings
	if f := st.Artifact.Findings; f != nil {
		findings = &captures.Findings{Verdict: f.Verdict, BlockingStack: f.BlockingStack,
			HottestCPU: int16(min(max(f.HottestCPU, -1), math.MaxInt16)), SoftirqShare: float32(f.SoftirqPermille) / 1000}
	}
	return captures.Capture{
		Findings:    findings,
		ID:          c.Spec.ArmingID,
		Host:        c.Spec.NodeName,
		Node:        c.Spec.NodeName,
		Backend:     string(c.Spec.Profile.Backend),
		Profile:     profile,
		WindowStart: st.WindowStart.Time,
		WindowEnd:   st.WindowEnd.Time,
		Trigger:     triggerText(c),
		URI:         st.Artifact.URI,
		Bytes:       uint64(max(st.Artifact.Bytes, 0)),
		LostEvents:  uint64(max(st.Artifact.LostEvents, 0)) + uint64(max(st.Artifact.OverrunEvents, 0)),
		Checksum:    st.Artifact.Checksum,
		CreatedAt:   c.CreationTimestamp.Time,
		// The report server's address of the capture (the dashboard's link).
		Namespace: c.Namespace,
		Name:      c.Name,
	}, nil
}

// triggerText says what fired the capture, for the captures table.
func triggerText(c *v1alpha1.Capture) string {
	t := c.Spec.Trigger
	switch c.Status.FiredBy {
	case v1alpha1.FiredByLatency:
		if t != nil && t.Latency != nil {
			return fmt.Sprintf("latency: %s%s > %s", t.Service, t.Endpoint, t.Latency.Duration)
		}
	case v1alpha1.FiredByP99:
		if t != nil && t.P99 != nil {
			return fmt.Sprintf("p99: %s%s > %s", t.Service, t.Endpoint, t.P99.Duration)
		}
	case v1alpha1.FiredByRemote:
		if c.Spec.AlertID != "" {
			return "remote: alert " + c.Spec.AlertID
		}
	}
	return string(c.Status.FiredBy)
}

// retain stamps a done Capture's end and deletes it when its retention
// is over. It returns how long until then (0: not done yet; -1: deleted).
func (r *CaptureReconciler) retain(ctx context.Context, c *v1alpha1.Capture, now time.Time) (time.Duration, error) {
	if !done(c.Status.Phase) {
		return 0, nil
	}
	endedAt, err := time.Parse(time.RFC3339Nano, c.Annotations[AnnotationEndedAt])
	if err != nil {
		// Not stamped (or stamped by hand, badly): it ends now.
		endedAt = now
		patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
		if c.Annotations == nil {
			c.Annotations = map[string]string{}
		}
		c.Annotations[AnnotationEndedAt] = now.UTC().Format(time.RFC3339Nano)
		if err := r.Client.Patch(ctx, c, patch); err != nil {
			return 0, client.IgnoreNotFound(err)
		}
	}
	expires, ttl, err := r.retainedUntil(ctx, c, endedAt)
	if err != nil {
		return 0, err
	}
	if now.Before(expires) {
		d, _ := untilCapped(now, expires, cmp.Or(r.MaxRequeue, DefaultMaxRequeue))
		return d, nil
	}
	uid := c.UID
	if err := r.Client.Delete(ctx, c, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("retire capture %s: %w", c.Name, err)
	}
	capturesRetired.Inc()
	logf.FromContext(ctx).V(1).Info("retention: deleting capture", "capture", c.Name, "endedAt", endedAt.String(), "ttl", ttl.String())
	return -1, nil
}

// retainedUntil is when a Capture that ended at endedAt may go: its
// policy's retention.ttl later (DefaultTTL without a policy), and not
// before its epoch is over. While the epoch lasts, the Capture is what
// tells the policy that the node had this arming: deleted, the policy
// would arm the node again under the same name and artifact id.
func (r *CaptureReconciler) retainedUntil(ctx context.Context, c *v1alpha1.Capture, endedAt time.Time) (time.Time, time.Duration, error) {
	var pol v1alpha1.CapturePolicy
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: c.Namespace, Name: c.Spec.PolicyRef.Name}, &pol)
	switch {
	case apierrors.IsNotFound(err):
		return endedAt.Add(DefaultTTL), DefaultTTL, nil
	case err != nil:
		return time.Time{}, 0, fmt.Errorf("the retention of capture %s: %w", c.Name, err)
	}
	ttl := DefaultTTL
	if t := pol.Spec.Retention.TTL; t != nil && t.Duration > 0 {
		ttl = t.Duration
	}
	until := endedAt.Add(ttl)
	if period := samplingOf(pol.Spec.Sampling).RotationPeriod; period > 0 && c.Spec.Epoch >= 0 {
		// policy.Sample's epochs: [e·period, (e+1)·period) since the Unix epoch.
		if end := time.Unix(0, 0).Add(time.Duration(c.Spec.Epoch+1) * period); end.After(until) {
			until = end
		}
	}
	return until, ttl, nil
}

// release deletes a deleted Capture's artifact and index row, then removes
// the finalizer. Each step may be repeated: both deletions accept what is
// already gone.
func (r *CaptureReconciler) release(ctx context.Context, c *v1alpha1.Capture) error {
	if !controllerutil.ContainsFinalizer(c, FinalizerArtifact) {
		return nil
	}
	if r.Artifacts != nil && c.Status.Artifact != nil {
		if err := r.Artifacts.DeleteArtifact(ctx, c.Spec.ArmingID, *c.Status.Artifact); err != nil {
			return fmt.Errorf("delete the artifact of capture %s: %w", c.Name, err)
		}
	}
	// A Capture that never reached Uploaded has no row, and Delete of no
	// row is not an error; one whose row a restarted operator may be
	// writing has been deleted first, so no Index follows this.
	if r.Store != nil && c.Spec.ArmingID != "" {
		if err := captures.Delete(ctx, r.Store, c.Spec.ArmingID, r.DeleteOptions...); err != nil {
			return err
		}
	}
	patch := client.MergeFromWithOptions(c.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(c, FinalizerArtifact)
	if err := r.Client.Patch(ctx, c, patch); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}
