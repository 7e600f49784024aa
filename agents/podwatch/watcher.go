package podwatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"
)

// listPageSize is the pods asked for in one list request; a node rarely
// holds more than one page.
const listPageSize = 500

// Watcher keeps the names of this node's pods and of their containers,
// from a list and then a watch of the pods whose spec.nodeName is the
// node. It implements the cgroup sampler's PodNamer (agents/collect):
// PodName and ContainerName answer from memory, never from the network,
// and keep answering with the last names known while the API server
// cannot be reached.
type Watcher struct {
	cfg   Config
	hc    *http.Client
	token *tokenFile
	base  *url.URL
	m     metrics

	mu         sync.RWMutex
	pods       map[string]*pod   // by UID
	containers map[string]string // runtime id → container name

	failing bool // one goroutine (Run) reads and writes it
}

// New checks cfg and builds a Watcher; nothing is requested until Run.
func New(cfg Config) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	base, err := url.Parse(cfg.Server)
	if err != nil || base.Scheme == "" || base.Host == "" {
		return nil, fmt.Errorf("podwatch: API server %q: not a URL like https://host:port", cfg.Server)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		if hc, err = inClusterClient(cfg.CAFile); err != nil {
			return nil, err
		}
	}
	w := &Watcher{cfg: cfg, hc: hc, base: base, pods: map[string]*pod{}, containers: map[string]string{}}
	if cfg.TokenFile != "" {
		w.token = &tokenFile{path: cfg.TokenFile}
	}
	return w, nil
}

// PodName returns "namespace/name" for a pod UID of this node.
func (w *Watcher) PodName(uid string) (string, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	p, ok := w.pods[uid]
	if !ok {
		return "", false
	}
	return p.namespace + "/" + p.name, true
}

// ContainerName returns the name in its pod's spec of the container with
// this runtime id (without the runtime's "containerd://" scheme).
func (w *Watcher) ContainerName(id string) (string, bool) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	name, ok := w.containers[id]
	return name, ok
}

// Run lists and watches the node's pods until ctx ends, then returns
// nil. While the API server cannot be reached it tries again with
// backoff, keeping the names it has. It must be called once; the caller
// owns its goroutine and stops it by cancelling ctx.
func (w *Watcher) Run(ctx context.Context) error {
	b := backoff{min: w.cfg.MinBackoff, max: w.cfg.MaxBackoff}
	rv := ""
	for ctx.Err() == nil {
		if rv == "" {
			var err error
			if rv, err = w.list(ctx); err != nil {
				if ctx.Err() != nil {
					break
				}
				w.m.listErrors.Add(1)
				w.failed("list", err)
				b.wait(ctx)
				continue
			}
		}
		start := time.Now()
		err := w.watch(ctx, &rv)
		switch {
		case ctx.Err() != nil:
		case err == nil: // the API server ended the watch at its timeout
			if time.Since(start) < time.Second { // a server that ends every watch at once is not waited for in a loop
				b.wait(ctx)
			} else {
				b.reset()
			}
		case errors.Is(err, errGone):
			w.m.relistsGone.Add(1)
			rv = ""
		default:
			if time.Since(start) > 10*time.Second {
				b.reset() // the watch had been working: start the backoff over
			}
			w.m.watchErrors.Add(1)
			w.failed("watch", err)
			var se *statusError
			if !errors.As(err, &se) && !isNetwork(err) {
				// A stream we could not decode may have lost an event:
				// only a list is sure to be whole again.
				w.m.relistsError.Add(1)
				rv = ""
			}
			b.wait(ctx)
		}
	}
	w.m.live.Store(false)
	return nil
}

// failed notes a failed request: a warning on the first failure after
// success, debug afterwards.
func (w *Watcher) failed(op string, err error) {
	w.m.live.Store(false)
	if w.failing {
		w.cfg.Log.Debug("pod watch: still failing; names come from the cache", "op", op, "err", err)
		return
	}
	w.failing = true
	w.cfg.Log.Warn("pod watch failed: pods keep the names last known until the API server answers again", "op", op, "node", w.cfg.Node, "err", err)
}

func (w *Watcher) recovered() {
	w.m.live.Store(true)
	if w.failing {
		w.failing = false
		w.cfg.Log.Info("pod watch restored", "node", w.cfg.Node)
	}
}

// list reads every pod of the node and replaces the cache with them; it
// returns the resourceVersion to watch from.
func (w *Watcher) list(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var kept []pod
	dropped, invalid := 0, 0
	cont := ""
	for {
		q := w.query()
		q.Set("limit", strconv.Itoa(listPageSize))
		if cont != "" {
			q.Set("continue", cont)
		}
		resp, err := w.do(ctx, q)
		if err != nil {
			return "", err
		}
		data, err := readCapped(resp.Body, w.cfg.MaxListBytes, "the pod list")
		resp.Body.Close()
		if err != nil {
			return "", err
		}
		l, inv, err := decodeList(data)
		if err != nil {
			return "", err
		}
		invalid += inv
		for _, p := range l.pods {
			if len(kept) >= w.cfg.MaxPods {
				dropped++
				continue
			}
			kept = append(kept, p)
		}
		if cont = l.continueToken; cont == "" {
			w.replace(kept, dropped, invalid)
			w.m.lists.Add(1)
			return l.resourceVersion, nil
		}
	}
}

// watch follows the node's pods from *rv, which it advances with every
// event, until the API server ends the watch (nil) or it fails.
func (w *Watcher) watch(ctx context.Context, rv *string) error {
	timeout := w.cfg.WatchTimeout + rand.N(w.cfg.WatchTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout+30*time.Second)
	defer cancel()
	q := w.query()
	q.Set("watch", "true")
	q.Set("resourceVersion", *rv)
	q.Set("allowWatchBookmarks", "true")
	q.Set("timeoutSeconds", strconv.Itoa(int(timeout/time.Second)))
	resp, err := w.do(ctx, q)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	w.recovered()
	return readEvents(resp.Body, w.cfg.MaxEventBytes, func(ev event) error {
		if ev.resourceVersion != "" {
			*rv = ev.resourceVersion
		}
		switch ev.typ {
		case eventAdded, eventModified:
			w.upsert(ev.pod)
		case eventDeleted:
			w.remove(ev.pod.uid)
		}
		return nil
	})
}

// query is the selection every request makes: this node's pods, in every
// namespace.
func (w *Watcher) query() url.Values {
	return url.Values{"fieldSelector": {"spec.nodeName=" + w.cfg.Node}}
}

// replace makes pods the whole cache, as one change: a lookup sees the
// old names or the new ones.
func (w *Watcher) replace(pods []pod, dropped, invalid int) {
	byUID := make(map[string]*pod, len(pods))
	containers := make(map[string]string, len(pods)*2)
	for i := range pods {
		p := &pods[i]
		if p.node != w.cfg.Node {
			continue // the field selector keeps these out; never trust it blindly
		}
		byUID[p.uid] = p
		for _, c := range p.containers {
			containers[c.id] = c.name
		}
		w.m.droppedContainers.Add(uint64(p.droppedContainers))
	}
	w.mu.Lock()
	w.pods, w.containers = byUID, containers
	w.mu.Unlock()
	w.m.pods.Store(int64(len(byUID)))
	w.m.droppedPods.Add(uint64(dropped))
	w.m.invalid.Add(uint64(invalid))
}

func (w *Watcher) upsert(p pod) {
	if p.node != w.cfg.Node {
		w.remove(p.uid)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.pods[p.uid]
	if !ok && len(w.pods) >= w.cfg.MaxPods {
		w.m.droppedPods.Add(1)
		return
	}
	if ok {
		for _, c := range old.containers {
			delete(w.containers, c.id)
		}
	}
	for _, c := range p.containers {
		w.containers[c.id] = c.name
	}
	w.m.droppedContainers.Add(uint64(p.droppedContainers))
	w.pods[p.uid] = &p
	w.m.pods.Store(int64(len(w.pods)))
}

func (w *Watcher) remove(uid string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old, ok := w.pods[uid]
	if !ok {
		return
	}
	for _, c := range old.containers {
		delete(w.containers, c.id)
	}
	delete(w.pods, uid)
	w.m.pods.Store(int64(len(w.pods)))
}

// backoff is the wait between failed attempts: doubling from min to max,
// each wait drawn from its upper half, so the agents of a fleet that lost
// the API server together do not return in step.
type backoff struct {
	min, max, next time.Duration
}

func (b *backoff) reset() { b.next = 0 }

func (b *backoff) wait(ctx context.Context) {
	if b.next == 0 {
		b.next = b.min
	}
	d := b.next/2 + rand.N(b.next/2+1)
	b.next = min(2*b.next, b.max)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
