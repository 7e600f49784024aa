package controller

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/spikehunt/spikehunt/internal/policy"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// Defaults of CapturePolicyReconciler.
const (
	DefaultMaxRequeue    = time.Hour
	DefaultCreateWorkers = 16
)

// Condition reasons of a CapturePolicy.
const (
	ReasonBaitArmed     = "BaitArmed"
	ReasonBaitRefused   = "BaitRefused"
	ReasonInvalidSpec   = "InvalidSpec"
	ReasonWithinBudgets = "WithinBudgets"
)

// Condition reasons of a Capture the policy controller writes.
const ReasonExpired = "Expired"

// CapturePolicyReconciler keeps each CapturePolicy's Captures as
// policy.Decide says: the epoch's bait on the sampled nodes, more nodes for
// matching fleet alerts, all within the fleet's budgets; bait whose node
// left the sample expires.
//
// Reconcile: fetch the policy (gone: forget its alerts) → list the Nodes
// its selector matches (cache, metadata only) → take the lock → list every
// Capture of the fleet through APIReader → take its pending alerts →
// Decide → expire, then create → settle the alerts → write the status if
// it changed → requeue at Decision.RequeueAt.
//
// The budgets count every policy's Captures, so decisions are serialized
// (one worker and a lock from the fleet's listing to the last create) and
// the fleet is read past the cache, which may not show a Capture this
// controller created a moment ago (policy package, "Hazards").
type CapturePolicyReconciler struct {
	// Client reads policies and Nodes from the manager's cache and writes.
	Client client.Client
	// APIReader lists the fleet's Captures from the API server
	// (mgr.GetAPIReader()).
	APIReader client.Reader
	// Decide is the policy: policy.Decide when nil. Tests swap it.
	Decide func(policy.Input) (policy.Decision, error)
	// Alerts is where fleet alerts come from; nil for none.
	Alerts *AlertInbox
	Clock  Clock
	// MaxRequeue bounds the wait for Decision.RequeueAt (default 1h), so
	// that a clock step or a missed event is caught up within it.
	MaxRequeue time.Duration
	// CreateWorkers is how many Captures are created or expired at once
	// (default 16).
	CreateWorkers int

	mu sync.Mutex // held from the fleet's listing to the last write
}

// SetupWithManager registers the controller: policies (spec changes),
// their Captures (phase changes, deletion), Nodes (labels) and the alert
// inbox wake it.
func (r *CapturePolicyReconciler) SetupWithManager(mgr ctrl.Manager) error {
	registerMetrics()
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("capturepolicy").
		For(&v1alpha1.CapturePolicy{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.Capture{}, handler.EnqueueRequestsFromMapFunc(r.policiesOfCapture),
			builder.WithPredicates(capturePhaseChanged())).
		WatchesMetadata(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.policiesOfNode),
			builder.WithPredicates(nodeLabelsChanged())).
		// One worker: see the type's documentation.
		WithOptions(controller.Options{MaxConcurrentReconciles: 1})
	if r.Alerts != nil {
		b = b.WatchesRawSource(source.Channel(r.Alerts.Events(), &handler.EnqueueRequestForObject{}))
	}
	return b.Complete(r)
}

// Reconcile applies the policy's decision; see the type's documentation.
func (r *CapturePolicyReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := logf.FromContext(ctx)
	var pol v1alpha1.CapturePolicy
	if err := r.Client.Get(ctx, req.NamespacedName, &pol); err != nil {
		if apierrors.IsNotFound(err) {
			// Its Captures go with it: they carry its owner reference.
			r.Alerts.Forget(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !pol.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}

	nodes, err := r.nodes(ctx, &pol)
	if errors.Is(err, policy.ErrInvalid) {
		return ctrl.Result{}, r.writeStatus(ctx, &pol, invalidStatus(&pol, err, r.clock().Now()))
	}
	if err != nil {
		return ctrl.Result{}, err
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	began := time.Now()
	state, mine, err := r.fleet(ctx, string(pol.UID))
	if err != nil {
		return ctrl.Result{}, err
	}
	now := r.clock().Now()
	trigger := alertTriggerOf(&pol)
	in := policy.Input{
		PolicyID:   string(pol.UID),
		PolicyName: pol.Name,
		Nodes:      nodes,
		Sampling:   samplingOf(pol.Spec.Sampling),
		Budgets:    budgetsOf(pol.Spec.Budgets),
		Trigger:    trigger,
		Alerts:     r.Alerts.Pending(req.NamespacedName),
		State:      state,
		Now:        now,
	}
	decide := r.Decide
	if decide == nil {
		decide = policy.Decide
	}
	d, err := decide(in)
	if errors.Is(err, policy.ErrInvalid) {
		return ctrl.Result{}, r.writeStatus(ctx, &pol, invalidStatus(&pol, err, now))
	}
	if err != nil {
		return ctrl.Result{}, err
	}

	decided := time.Now()
	if len(d.Create) > 0 {
		// The cache may still hold a policy that is gone: its Captures
		// would be made again just as they are being deleted.
		if gone, err := r.gone(ctx, &pol); err != nil || gone {
			return ctrl.Result{}, err
		}
	}
	// Expire before create (policy package, "Hazards").
	expireErr := r.expire(ctx, d.Expire, mine, d.Selection.Epoch, now)
	created, createErr := r.create(ctx, &pol, d.Create, now)

	armed := map[string]int{} // this policy's armings per alert
	for _, a := range state {
		if a.PolicyID == in.PolicyID && a.Reason == policy.ReasonAlert {
			armed[a.AlertKey]++
		}
	}
	for _, a := range created {
		if a.Reason == policy.ReasonAlert {
			armed[a.AlertKey]++
		}
	}
	// short says whether a matching alert still wants armings it lacks.
	wants := func(a policy.Alert) int { return max(trigger.ExtraNodes, d.Wants[a.ID]) }
	short := func(a policy.Alert) bool { return trigger.Matches(a) && armed[a.ID] < wants(a) }
	r.Alerts.Settle(req.NamespacedName, func(a policy.Alert) bool { return !short(a) })
	for _, ref := range d.Refused {
		if ref.Reason != policy.RefusedDuplicate {
			budgetRefusals.WithLabelValues(string(ref.Reason)).Inc()
		}
	}
	for _, a := range in.Alerts {
		// An alert that arms nothing says why only here and in the
		// policy's status: at debug level, as it is weighed again at
		// every wake until it arms or expires.
		if short(a) {
			log.V(1).Info("a pending alert is not fully armed", "alert", a.ID, "hosts", a.Hosts, "hw_classes", a.HWClasses,
				"armed", armed[a.ID], "wants", wants(a), "nodes", len(nodes), "refused", refusalsOf(d.Refused, a.ID))
		}
	}
	if len(created) > 0 || len(d.Expire) > 0 {
		log.V(1).Info("applied decision", "epoch", d.Selection.Epoch, "created", len(created),
			"expired", len(d.Expire), "refused", len(d.Refused), "nodes", len(nodes), "fleet", len(state),
			"decide", decided.Sub(began).String(), "apply", time.Since(decided).String())
	}

	statusErr := r.writeStatus(ctx, &pol, decidedStatus(&pol, d, now))
	if err := errors.Join(expireErr, createErr, statusErr); err != nil {
		return ctrl.Result{}, err
	}
	if after, ok := untilCapped(now, d.RequeueAt, r.maxRequeue()); ok {
		return ctrl.Result{RequeueAfter: after}, nil
	}
	return ctrl.Result{}, nil
}

// gone reports whether the policy is deleted or deleting on the API
// server, past the cache.
func (r *CapturePolicyReconciler) gone(ctx context.Context, pol *v1alpha1.CapturePolicy) (bool, error) {
	var live v1alpha1.CapturePolicy
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(pol), &live)
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("get policy %s: %w", pol.Name, err)
	}
	return live.UID != pol.UID || !live.DeletionTimestamp.IsZero(), nil
}

func (r *CapturePolicyReconciler) clock() Clock { return clockOr(r.Clock) }

func (r *CapturePolicyReconciler) maxRequeue() time.Duration {
	return cmp.Or(r.MaxRequeue, DefaultMaxRequeue)
}

// nodes lists the Nodes the policy's selector matches, from the cache of
// their metadata. The error wraps policy.ErrInvalid for a selector that
// does not parse.
func (r *CapturePolicyReconciler) nodes(ctx context.Context, pol *v1alpha1.CapturePolicy) ([]policy.Node, error) {
	sel := labels.Everything()
	if pol.Spec.NodeSelector != nil {
		var err error
		if sel, err = metav1.LabelSelectorAsSelector(pol.Spec.NodeSelector); err != nil {
			return nil, fmt.Errorf("%w: nodeSelector: %v", policy.ErrInvalid, err)
		}
	}
	list := nodeMetadataList()
	if err := r.Client.List(ctx, list, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := make([]policy.Node, 0, len(list.Items))
	for i := range list.Items {
		n := &list.Items[i]
		if n.DeletionTimestamp.IsZero() {
			out = append(out, policy.Node{Name: n.Name, Labels: n.Labels})
		}
	}
	return out, nil
}

func nodeMetadataList() *metav1.PartialObjectMetadataList {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	return list
}

// fleet lists every Capture in the cluster from the API server: the
// budgets' state, and this policy's Captures by name.
func (r *CapturePolicyReconciler) fleet(ctx context.Context, policyID string) ([]policy.Arming, map[string]*v1alpha1.Capture, error) {
	var list v1alpha1.CaptureList
	if err := r.APIReader.List(ctx, &list); err != nil {
		return nil, nil, fmt.Errorf("list the fleet's Captures: %w", err)
	}
	state := make([]policy.Arming, 0, len(list.Items))
	mine := map[string]*v1alpha1.Capture{}
	for i := range list.Items {
		c := &list.Items[i]
		a := armingOf(c)
		state = append(state, a)
		if a.PolicyID == policyID {
			mine[c.Name] = c
		}
	}
	return state, mine, nil
}

// expire marks the named Captures Expired. The update carries the listed
// resourceVersion, so one the agent fired meanwhile is left alone (a
// conflict): its status event brings the next decision.
func (r *CapturePolicyReconciler) expire(ctx context.Context, names []string, mine map[string]*v1alpha1.Capture, epoch int64, now time.Time) error {
	errs := forEach(ctx, len(names), r.workers(), func(ctx context.Context, i int) error {
		c, ok := mine[names[i]]
		if !ok {
			return nil
		}
		c = c.DeepCopy()
		msg := fmt.Sprintf("expired before it fired: node %s left the policy's sample (epoch %d), or the node is gone", c.Spec.NodeName, epoch)
		if c.Spec.Reason == v1alpha1.ReasonAlert {
			msg = fmt.Sprintf("expired before it fired: the alert arming is a rotation period old, or node %s left the policy's nodes", c.Spec.NodeName)
		}
		c.Status.Phase = v1alpha1.PhaseExpired
		c.Status.Message = msg
		c.Status.ObservedGeneration = c.Generation
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionArmed, Status: metav1.ConditionFalse, Reason: ReasonExpired,
			Message: msg, ObservedGeneration: c.Generation, LastTransitionTime: metav1.NewTime(now),
		})
		err := r.Client.Status().Update(ctx, c)
		switch {
		case err == nil:
			capturesExpired.Inc()
			return nil
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			return nil
		case apierrors.IsInvalid(err):
			// The API server's phase rules refused it: it fired after all.
			logf.FromContext(ctx).V(1).Info("not expiring a capture the API server says has moved on", "capture", c.Name, "err", err)
			return nil
		}
		return fmt.Errorf("expire capture %s: %w", c.Name, err)
	})
	return errors.Join(errs...)
}

// create makes one Capture per arming, owned by the policy, and returns
// the armings whose Capture exists now. AlreadyExists is success: the
// name is the arming's, so an earlier attempt made it.
func (r *CapturePolicyReconciler) create(ctx context.Context, pol *v1alpha1.CapturePolicy, armings []policy.Arming, now time.Time) ([]policy.Arming, error) {
	errs := forEach(ctx, len(armings), r.workers(), func(ctx context.Context, i int) error {
		c := newCapture(pol, armings[i], now)
		err := r.Client.Create(ctx, c)
		switch {
		case err == nil:
			capturesCreated.WithLabelValues(string(c.Spec.Reason)).Inc()
			return nil
		case apierrors.IsAlreadyExists(err):
			return nil
		case apierrors.IsInvalid(err):
			// Retrying cannot help (an alert id too long for the API, say);
			// the alert stays pending until its TTL and is tried again only
			// with the next decision.
			logf.FromContext(ctx).Error(err, "the API server refused a capture", "capture", c.Name)
			return errSkipped
		}
		return fmt.Errorf("create capture %s: %w", c.Name, err)
	})
	var created []policy.Arming
	var failed []error
	for i, err := range errs {
		switch {
		case err == nil:
			created = append(created, armings[i])
		case errors.Is(err, errSkipped):
		default:
			failed = append(failed, err)
		}
	}
	return created, errors.Join(failed...)
}

var errSkipped = errors.New("skipped")

func (r *CapturePolicyReconciler) workers() int { return cmp.Or(r.CreateWorkers, DefaultCreateWorkers) }

// newCapture is the Capture of an arming: named by the arming, in the
// policy's namespace, controlled by the policy (so it goes with it), with
// the artifact finalizer and the start by the operator's clock.
func newCapture(pol *v1alpha1.CapturePolicy, a policy.Arming, now time.Time) *v1alpha1.Capture {
	return &v1alpha1.Capture{
		ObjectMeta: metav1.ObjectMeta{
			Name:            a.Name,
			Namespace:       pol.Namespace,
			Annotations:     map[string]string{AnnotationStartedAt: now.UTC().Format(time.RFC3339Nano)},
			Finalizers:      []string{FinalizerArtifact},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(pol, v1alpha1.GroupVersion.WithKind("CapturePolicy"))},
		},
		Spec: v1alpha1.CaptureSpec{
			NodeName:  a.Node,
			PolicyRef: v1alpha1.PolicyReference{Name: pol.Name},
			// The artifact's id is unique across namespaces and across a
			// policy deleted and made again under its name: the policy's
			// UID stands in for its name. The Capture's name stays readable.
			ArmingID:  policy.ArmingName(string(pol.UID), a.Node, a.Epoch, a.Reason, a.AlertKey),
			Epoch:     a.Epoch,
			Reason:    v1alpha1.CaptureReason(a.Reason),
			AlertID:   a.AlertKey,
			PatternID: a.PatternKey,
			Profile:   *pol.Spec.Profile.DeepCopy(),
			Trigger:   localTriggerOf(pol),
		},
	}
}

// decidedStatus is the policy's status after a decision.
func decidedStatus(pol *v1alpha1.CapturePolicy, d policy.Decision, now time.Time) *v1alpha1.CapturePolicyStatus {
	st := pol.Status.DeepCopy()
	st.ObservedGeneration = pol.Generation
	st.SampledNodes = int32(len(d.Selection.Nodes))
	st.Epoch = d.Selection.Epoch
	st.LastRotation = nil
	if !d.Selection.EpochStart.IsZero() {
		t := metav1.NewTime(d.Selection.EpochStart)
		st.LastRotation = &t
	}

	refused := map[policy.RefusalReason]int{}
	bait := 0
	for _, ref := range d.Refused {
		if ref.Reason == policy.RefusedDuplicate {
			continue
		}
		refused[ref.Reason]++
		if ref.Request.Reason == policy.ReasonBait {
			bait++
		}
	}
	ready := metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonBaitArmed,
		Message: fmt.Sprintf("epoch %d: every one of the %d sampled nodes has its bait or another capture", d.Selection.Epoch, len(d.Selection.Nodes)),
	}
	if bait > 0 {
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonBaitRefused
		ready.Message = fmt.Sprintf("epoch %d: the budgets refused bait on %d of the %d sampled nodes", d.Selection.Epoch, bait, len(d.Selection.Nodes))
	}
	limited := metav1.Condition{
		Type: v1alpha1.ConditionBudgetLimited, Status: metav1.ConditionFalse, Reason: ReasonWithinBudgets,
		Message: "the last decision armed everything it wanted",
	}
	if len(refused) > 0 {
		limited.Status = metav1.ConditionTrue
		limited.Reason, limited.Message = refusalSummary(refused)
	}
	setCondition(&st.Conditions, ready, pol.Generation, now)
	setCondition(&st.Conditions, limited, pol.Generation, now)
	return st
}

// invalidStatus says why the policy cannot be applied.
func invalidStatus(pol *v1alpha1.CapturePolicy, err error, now time.Time) *v1alpha1.CapturePolicyStatus {
	st := pol.Status.DeepCopy()
	st.ObservedGeneration = pol.Generation
	setCondition(&st.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonInvalidSpec, Message: err.Error(),
	}, pol.Generation, now)
	return st
}

// refusalSummary names the budget that refused most as the reason
// (FleetConcurrency, NodeBusy, NodeCooldown, PatternPerHour) and counts
// every refusal in the message.
func refusalSummary(refused map[policy.RefusalReason]int) (reason, message string) {
	reasons := make([]policy.RefusalReason, 0, len(refused))
	for r := range refused {
		reasons = append(reasons, r)
	}
	slices.SortFunc(reasons, func(a, b policy.RefusalReason) int {
		return cmp.Or(cmp.Compare(refused[b], refused[a]), cmp.Compare(a, b))
	})
	parts := make([]string, len(reasons))
	for i, r := range reasons {
		parts[i] = fmt.Sprintf("%s %d", r, refused[r])
	}
	return camel(string(reasons[0])), "the last decision's armings refused by budget: " + strings.Join(parts, ", ")
}

// camel turns fleet_concurrency into FleetConcurrency.
func camel(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part != "" {
			b.WriteString(strings.ToUpper(part[:1]) + part[1:])
		}
	}
	return b.String()
}

// setCondition sets c with the generation and, when its status changes,
// the transition time from the controller's clock.
func setCondition(conds *[]metav1.Condition, c metav1.Condition, generation int64, now time.Time) {
	c.ObservedGeneration = generation
	c.LastTransitionTime = metav1.NewTime(now)
	meta.SetStatusCondition(conds, c)
}

// writeStatus patches the policy's status when it differs. The controller
// is the status's only writer, so a merge patch without a resourceVersion
// is safe and does not fail on a cache a write behind.
func (r *CapturePolicyReconciler) writeStatus(ctx context.Context, pol *v1alpha1.CapturePolicy, st *v1alpha1.CapturePolicyStatus) error {
	if equality.Semantic.DeepEqual(&pol.Status, st) {
		return nil
	}
	patch := client.MergeFrom(pol.DeepCopy())
	pol.Status = *st
	if err := r.Client.Status().Patch(ctx, pol, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("write the status of policy %s: %w", pol.Name, err)
	}
	return nil
}

// policiesOfCapture wakes the policy that owns the Capture and, when the
// Capture stops holding a place in the budgets, every policy a budget held
// back: their refused armings may fit now.
func (r *CapturePolicyReconciler) policiesOfCapture(ctx context.Context, o client.Object) []reconcile.Request {
	c, ok := o.(*v1alpha1.Capture)
	if !ok {
		return nil
	}
	var reqs []reconcile.Request
	if ref := metav1.GetControllerOf(c); ref != nil && ref.Kind == "CapturePolicy" {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: ref.Name}})
	}
	if active(c.Status.Phase) && c.DeletionTimestamp.IsZero() {
		return reqs
	}
	var list v1alpha1.CapturePolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		logf.FromContext(ctx).Error(err, "list policies to wake after a capture ended")
		return reqs
	}
	for i := range list.Items {
		p := &list.Items[i]
		if meta.IsStatusConditionTrue(p.Status.Conditions, v1alpha1.ConditionBudgetLimited) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		}
	}
	return reqs
}

// policiesOfNode wakes the policies whose selector matches the Node's
// labels (controller-runtime maps an update's old and new object both, so
// a Node leaving a selector wakes its policy too).
func (r *CapturePolicyReconciler) policiesOfNode(ctx context.Context, o client.Object) []reconcile.Request {
	var list v1alpha1.CapturePolicyList
	if err := r.Client.List(ctx, &list); err != nil {
		logf.FromContext(ctx).Error(err, "list policies to wake for a node", "node", o.GetName())
		return nil
	}
	var reqs []reconcile.Request
	set := labels.Set(o.GetLabels())
	for i := range list.Items {
		p := &list.Items[i]
		sel := labels.Everything()
		if p.Spec.NodeSelector != nil {
			var err error
			if sel, err = metav1.LabelSelectorAsSelector(p.Spec.NodeSelector); err != nil {
				continue
			}
		}
		if sel.Matches(set) {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(p)})
		}
	}
	return reqs
}

// capturePhaseChanged passes a Capture's creation, deletion, and updates
// that change its phase or start its deletion: what the budgets see.
func capturePhaseChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*v1alpha1.Capture)
			n, ok2 := e.ObjectNew.(*v1alpha1.Capture)
			if !ok1 || !ok2 {
				return true
			}
			return o.Status.Phase != n.Status.Phase || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
		},
	}
}

// nodeLabelsChanged passes a Node's creation, deletion, and updates that
// change its labels or start its deletion, not its heartbeats.
func nodeLabelsChanged() predicate.Predicate {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !labels.Equals(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels()) ||
				e.ObjectOld.GetDeletionTimestamp().IsZero() != e.ObjectNew.GetDeletionTimestamp().IsZero()
		},
	}
}

// refusalsOf are the budget refusals of an alert's armings, as
// "node: reason", for a log line.
func refusalsOf(refused []policy.Refusal, alertID string) []string {
	var out []string
	for _, r := range refused {
		if r.Request.AlertKey == alertID {
			out = append(out, r.Request.Node+": "+string(r.Reason))
		}
	}
	return out
}
