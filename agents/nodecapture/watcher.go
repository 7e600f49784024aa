// Package nodecapture is the node's side of the Capture API (docs/design.md §7):
// the agent watches the Capture objects whose spec.nodeName is its node,
// arms each new one in the capture engine, and reports in its status what
// the engine does with it — Armed, Fired, Uploaded, or Failed with the
// reason — until the operator indexes it. It also disarms a capture whose
// object is deleted or expired.
//
// The operator creates and deletes Captures; the agent only reads them and
// writes their status, through the status subresource, with the agent's
// ServiceAccount (operator/config/rbac/agent_role.yaml). It imports the
// API's types (operator/api) and nothing else of the operator.
//
// Lifecycle: New makes a Watcher, Run lists and watches until its context
// ends, then disarms every capture it armed that has not ended, marks
// those Failed ("the agent stopped"), and returns. Run once per Watcher.
//
// A capture is armed at most once per agent process: the Watcher remembers
// every arming until its object is deleted. A Capture found Armed or Fired
// that this process did not arm was armed by an agent that is gone (it
// restarted, or crashed) and its ring with it; it is marked Failed, never
// armed again behind the operator's back. The operator's sampling arms a
// new Capture if it still wants one, and its budgets count that one.
package nodecapture

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	capturev1alpha1 "github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// Watcher keeps the node's Captures and its capture engine in step.
type Watcher struct {
	cfg    Config
	client *captureClient
	queue  workqueue.TypedRateLimitingInterface[cache.ObjectName]
	store  cache.Store
	inf    cache.Controller
	m      *metrics

	// armings are the Captures this process armed, or tried to, until
	// their objects are deleted; the worker goroutine owns them.
	armings map[cache.ObjectName]*arming
	mu      sync.Mutex                  // guards byID, which the engine's callbacks read
	byID    map[string]cache.ObjectName // engine id → Capture
}

// arming is one Capture this process armed, or tried to.
type arming struct {
	id     string
	uid    types.UID
	armErr error // the engine refused it: the Capture is Failed, nothing runs
	fired  bool  // spec.fire was passed to the engine
}

// New checks cfg and makes a Watcher; nothing is listed or armed before
// Run.
func New(cfg Config) (*Watcher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cl, err := newCaptureClient(cfg.REST, cfg.Node)
	if err != nil {
		return nil, err
	}
	w := &Watcher{cfg: cfg, client: cl, m: newMetrics(),
		armings: map[cache.ObjectName]*arming{}, byID: map[string]cache.ObjectName{},
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](100*time.Millisecond, time.Minute)),
	}
	log := logr.FromSlogHandler(cfg.Log.Handler())
	w.store, w.inf = cache.NewInformerWithOptions(cache.InformerOptions{
		Logger:        &log,
		ListerWatcher: cl.listWatch(),
		ObjectType:    &capturev1alpha1.Capture{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    w.enqueue,
			UpdateFunc: func(_, obj any) { w.enqueue(obj) },
			DeleteFunc: w.enqueue,
		},
	})
	cfg.Engine.OnChange(w.engineChanged)
	return w, nil
}

func (w *Watcher) enqueue(obj any) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		w.cfg.Log.Warn("capture object without a name", "err", err)
		return
	}
	w.queue.Add(key)
}

// engineChanged runs on the engine's goroutines: it only queues the
// Capture, whose worker reads the engine's state.
func (w *Watcher) engineChanged(id string) {
	w.mu.Lock()
	key, ok := w.byID[id]
	w.mu.Unlock()
	if ok {
		w.queue.Add(key)
	}
}

// Run lists and watches the node's Captures and acts on them until ctx
// ends; then it disarms what it armed and reports it (within StopTimeout).
func (w *Watcher) Run(ctx context.Context) error {
	defer w.queue.ShutDown()
	informerDone := make(chan struct{})
	go func() {
		defer close(informerDone)
		w.inf.RunWithContext(ctx)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced) {
		<-informerDone
		return w.stop()
	}
	w.cfg.Log.Info("watching the node's captures", "node", w.cfg.Node)
	workerDone := make(chan struct{})
	go func() {
		defer close(workerDone)
		for w.processNext(ctx) {
		}
	}()
	<-ctx.Done()
	w.queue.ShutDown()
	<-workerDone
	<-informerDone
	return w.stop()
}

// processNext handles one queued Capture; it reports false once the queue
// is shut down.
func (w *Watcher) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(key)
	if err := w.reconcile(ctx, key); err != nil {
		if ctx.Err() == nil {
			w.cfg.Log.Warn("capture status not written; retrying", "capture", key.String(), "err", err)
			w.m.errors.Inc()
		}
		w.queue.AddRateLimited(key)
		return true
	}
	w.queue.Forget(key)
	return true
}

// errStale says the Capture changed under a status write: decide again
// from the fresh object.
var errStale = errors.New("capture changed")

// reconcile brings one Capture and the engine in step, deciding again from
// a fresh read when a write finds the object changed.
func (w *Watcher) reconcile(ctx context.Context, key cache.ObjectName) error {
	obj, exists, err := w.store.GetByKey(key.String())
	if err != nil {
		return err
	}
	var c *capturev1alpha1.Capture
	if exists {
		c = obj.(*capturev1alpha1.Capture)
	}
	for attempt := 0; ; attempt++ {
		err := w.sync(ctx, key, c)
		if !errors.Is(err, errStale) || attempt == 3 {
			return err
		}
		w.m.conflicts.Inc()
		fresh, err := w.client.get(ctx, key)
		switch {
		case apierrors.IsNotFound(err):
			c = nil
		case err != nil:
			return err
		default:
			c = fresh
		}
	}
}

// sync decides for one Capture, c (nil when it is gone).
func (w *Watcher) sync(ctx context.Context, key cache.ObjectName, c *capturev1alpha1.Capture) error {
	a := w.armings[key]
	if c == nil || c.Spec.NodeName != w.cfg.Node {
		if a != nil {
			w.release(key, a, "its Capture was deleted")
		}
		return nil
	}
	if a != nil && a.uid != c.UID { // deleted and made again under the same name
		w.release(key, a, "its Capture was replaced")
		a = nil
	}
	if c.DeletionTimestamp != nil {
		// Deleted, and waiting for the operator's finalizer (which
		// deletes the artifact and the index row): the recorder stops
		// now; the arming is forgotten when the object goes.
		if a != nil {
			w.disarm(a, "its Capture is being deleted")
		}
		return nil
	}
	phase := c.Status.Phase
	if phase == "" {
		phase = capturev1alpha1.PhasePending
	}
	if phase.Final() {
		if a != nil {
			w.disarm(a, fmt.Sprintf("its Capture is %s", phase))
		}
		return nil
	}
	now := w.cfg.Now()
	if a == nil {
		switch phase {
		case capturev1alpha1.PhasePending:
			return w.arm(ctx, key, c)
		case capturev1alpha1.PhaseArmed, capturev1alpha1.PhaseFired:
			w.m.orphaned.Inc()
			return w.report(ctx, c, failStatus(c, ReasonAgentRestarted, fmt.Sprintf(
				"agent restarted; the ring was lost: the agent on node %s that armed this capture is gone, and this one never re-arms a capture it did not arm", w.cfg.Node), now))
		}
		return nil // Uploaded: the operator's turn
	}
	if a.armErr != nil {
		reason, msg := armFailure(w.cfg.Node, a.armErr)
		return w.report(ctx, c, failStatus(c, reason, msg, now))
	}
	st, ok := w.cfg.Engine.Get(a.id)
	if !ok {
		return w.report(ctx, c, failStatus(c, ReasonDisarmed, fmt.Sprintf(
			"the capture engine on node %s no longer knows capture %s (forgotten by hand)", w.cfg.Node, a.id), now))
	}
	if c.Spec.Fire != nil && st.State == control.Armed && !a.fired {
		// A remote fire, once: the engine's state moves on and the
		// listener brings the Capture back here to report it.
		a.fired = true
		if err := w.cfg.Engine.Fire(a.id, c.Spec.Fire.Reason); err != nil {
			w.cfg.Log.Warn("remote fire refused", "capture", key.String(), "err", err)
		}
		st, _ = w.cfg.Engine.Get(a.id)
	}
	return w.report(ctx, c, reportStatus(c, st, w.cfg.Node, now))
}

// arm arms a Pending Capture and reports Armed, or Failed with the
// engine's reason.
func (w *Watcher) arm(ctx context.Context, key cache.ObjectName, c *capturev1alpha1.Capture) error {
	spec, err := SpecFor(c)
	a := &arming{id: spec.ID, uid: c.UID, armErr: err}
	if err == nil {
		w.mu.Lock()
		if other, taken := w.byID[spec.ID]; taken {
			a.armErr = fmt.Errorf("%w: capture id %s is taken by Capture %s", capture.ErrInvalid, spec.ID, other)
		} else {
			w.byID[spec.ID] = key // before Arm: the engine may report a fire before Arm returns
		}
		w.mu.Unlock()
	}
	if a.armErr == nil {
		if _, err := w.cfg.Engine.Arm(ctx, spec); err != nil {
			a.armErr = err
			w.mu.Lock()
			delete(w.byID, spec.ID)
			w.mu.Unlock()
		}
	}
	w.armings[key] = a
	if a.armErr != nil {
		reason, msg := armFailure(w.cfg.Node, a.armErr)
		w.m.refused.WithLabelValues(reason).Inc()
		w.cfg.Log.Warn("capture refused", "capture", key.String(), "reason", reason, "err", a.armErr)
		return w.report(ctx, c, failStatus(c, reason, msg, w.cfg.Now()))
	}
	w.cfg.Log.Info("capture armed for its Capture", "capture", key.String(), "id", spec.ID, "backend", spec.Backend)
	st, _ := w.cfg.Engine.Get(spec.ID)
	return w.report(ctx, c, reportStatus(c, st, w.cfg.Node, w.cfg.Now()))
}

// report writes next as c's status when it differs.
func (w *Watcher) report(ctx context.Context, c *capturev1alpha1.Capture, next capturev1alpha1.CaptureStatus) error {
	if equalStatus(c.Status, next) {
		return nil
	}
	_, err := w.client.patchStatus(ctx, c, next)
	switch {
	case err == nil:
		w.m.written.WithLabelValues(string(next.Phase)).Inc()
		return nil
	case apierrors.IsNotFound(err):
		return nil // deleted: its delete event releases it
	case apierrors.IsConflict(err), apierrors.IsInvalid(err):
		// Changed since read; or the API server's rules refused the
		// report because the phase moved on (the operator expired it).
		return fmt.Errorf("%w: %w", errStale, err)
	}
	return fmt.Errorf("patch %s/%s status: %w", c.Namespace, c.Name, err)
}

// disarm stops a capture whose Capture says it is over (Expired, or Failed
// by the operator); the engine remembers it as Disarmed until the object
// goes.
func (w *Watcher) disarm(a *arming, why string) {
	if a.armErr != nil {
		return
	}
	if st, ok := w.cfg.Engine.Get(a.id); ok && !st.State.Terminal() {
		w.cfg.Log.Info("disarming capture", "id", a.id, "why", why)
		w.cfg.Engine.Disarm(a.id)
	}
}

// release disarms and forgets a capture whose object is gone.
func (w *Watcher) release(key cache.ObjectName, a *arming, why string) {
	w.disarm(a, why)
	delete(w.armings, key)
	if a.armErr != nil {
		return
	}
	w.mu.Lock()
	if w.byID[a.id] == key {
		delete(w.byID, a.id)
	}
	w.mu.Unlock()
	w.cfg.Engine.Forget(a.id)
}

// stop disarms every capture this Watcher armed that has not ended, and
// marks its Capture Failed: the agent is going and its rings with it.
func (w *Watcher) stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.StopTimeout)
	defer cancel()
	var errs []error
	for key, a := range w.armings {
		if a.armErr != nil {
			continue
		}
		st, ok := w.cfg.Engine.Get(a.id)
		if !ok || st.State.Terminal() {
			continue
		}
		w.cfg.Engine.Disarm(a.id)
		msg := fmt.Sprintf("the agent on node %s stopped and disarmed the capture; the ring was lost", w.cfg.Node)
		if st.State == control.Fired {
			msg = fmt.Sprintf("the agent on node %s stopped during the post-window; the capture was dropped before its upload", w.cfg.Node)
		}
		if err := w.reportStopped(ctx, key, msg); err != nil {
			errs = append(errs, fmt.Errorf("capture %s: %w", key, err))
		}
	}
	return errors.Join(errs...)
}

// reportStopped marks a Capture Failed for a stopping agent, reading it
// fresh for each attempt.
func (w *Watcher) reportStopped(ctx context.Context, key cache.ObjectName, msg string) error {
	for attempt := 0; ; attempt++ {
		c, err := w.client.get(ctx, key)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		err = w.report(ctx, c, failStatus(c, ReasonAgentStopped, msg, w.cfg.Now()))
		if !errors.Is(err, errStale) || attempt == 3 {
			return err
		}
	}
}

// Register adds the Watcher's metrics to reg.
func (w *Watcher) Register(reg prometheus.Registerer) error {
	return w.m.register(reg)
}
