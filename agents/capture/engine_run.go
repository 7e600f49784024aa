package capture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/capture/control"
	"github.com/spikehunt/spikehunt/internal/capture/explain"
	"github.com/spikehunt/spikehunt/internal/capture/reportpage"
)

// run is one capture's goroutine: wait for a fire, dump the pre-window,
// wait out the post-window, collect, write the window's requests, seal and
// publish. ctx ends it early (disarm, abort, engine close).
func (e *Engine) run(ctx context.Context, c *armed) {
	defer e.wg.Done()
	defer close(c.done)
	var cause record.FireCause
	select {
	case cause = <-c.fire:
	case <-ctx.Done():
		e.stop(c, context.Cause(ctx))
		return
	}
	fctx, cancel := context.WithTimeout(ctx, e.cfg.CollectTimeout)
	err := c.rec.Fire(fctx)
	cancel()
	dumped := e.cfg.Now()
	if err != nil {
		c.rec.Disarm()
		e.fail(c, fmt.Errorf("fire: %w", err))
		return
	}
	fireAt := cause.RequestAt
	e.mu.Lock()
	c.status.State, c.status.FiredAt, c.status.FireToDump, c.status.Cause = control.Fired, fireAt, dumped.Sub(fireAt), &cause
	e.refreshArmedLocked()
	e.mu.Unlock()
	e.changed(c.spec.ID)
	e.m.fireToDump.Observe(dumped.Sub(fireAt).Seconds())
	e.cfg.Log.Info("capture fired", "id", c.spec.ID, "trigger", cause.Kind, "latency", cause.Latency, "fire_to_dump", dumped.Sub(fireAt))

	// The post-window runs from the fire, not from the dump.
	post := time.NewTimer(time.Until(fireAt.Add(c.spec.Post)))
	select {
	case <-post.C:
	case <-ctx.Done():
		post.Stop()
		e.stop(c, context.Cause(ctx))
		return
	}
	cctx, cancel := context.WithTimeout(context.Background(), e.cfg.CollectTimeout)
	defer cancel()
	res, err := c.rec.Collect(cctx)
	if err != nil {
		c.rec.Disarm()
		e.fail(c, fmt.Errorf("collect: %w", err))
		return
	}
	md := e.metadata(c, cause, res)
	reqs, err := e.writeRequests(c, md)
	if err != nil {
		e.fail(c, err)
		return
	}
	e.analyze(c, md, reqs, cause)
	if err := artifact.Seal(c.dir, md); err != nil {
		e.fail(c, fmt.Errorf("seal: %w", err))
		return
	}
	loc, files := c.dir, []string(nil)
	if e.cfg.Store != nil {
		l, err := e.put(ctx, c, md)
		if err != nil {
			e.fail(c, err)
			return
		}
		loc, files = l.Metadata, l.Files
		os.RemoveAll(c.dir)
	}
	e.m.lost.Add(float64(md.Lost + md.Overruns))
	e.m.bytes.Add(float64(md.Bytes))
	e.mu.Lock()
	c.status.State, c.status.Location, c.status.Files, c.status.Metadata = control.Collected, loc, files, md
	e.refreshArmedLocked()
	e.mu.Unlock()
	e.changed(c.spec.ID)
	e.m.done.WithLabelValues(string(control.Collected)).Inc()
	e.cfg.Log.Info("capture collected", "id", c.spec.ID, "location", loc, "bytes", md.Bytes, "lost", md.Lost, "overruns", md.Overruns)
}

func (e *Engine) metadata(c *armed, cause record.FireCause, res Result) *record.Metadata {
	st, _ := e.Get(c.spec.ID)
	from := cause.RequestAt.Add(-c.spec.Pre)
	if from.Before(st.ArmedAt) {
		from = st.ArmedAt // a ring holds nothing from before it was armed
	}
	md := &record.Metadata{Version: record.MetadataVersion, ID: c.spec.ID,
		Host: e.cfg.Resource.Host, Node: e.cfg.Resource.Node, HWClass: e.cfg.Resource.HWClass,
		Backend: c.spec.Backend, Profile: c.spec.Profile, Script: c.spec.Script, Service: c.spec.Trigger.Service,
		ArmedAt: st.ArmedAt, FiredAt: cause.RequestAt,
		WindowStart: from, WindowEnd: cause.RequestAt.Add(c.spec.Post),
		Trigger: cause, Lost: res.Lost, Overruns: res.Overruns, Clock: res.Clock, Notes: res.Notes,
		Governance: record.Governance{CPUs: c.spec.Govern.CPUs, Nice: c.spec.Govern.Nice, IOClass: c.spec.Govern.IOClass}}
	if md.Service == "" {
		md.Service = cause.Service
	}
	for _, f := range res.Files {
		md.Files = append(md.Files, record.File{Name: f})
	}
	return md
}

// writeRequests writes the requests that ended inside the window beside
// the trace, as requests.jsonl.
func (e *Engine) writeRequests(c *armed, md *record.Metadata) ([]record.RequestRecord, error) {
	e.mu.Lock()
	if e.ring == nil {
		e.mu.Unlock()
		return nil, nil
	}
	qs, oldest := e.ring.window(md.WindowStart, md.WindowEnd)
	e.mu.Unlock()
	if !oldest.IsZero() && oldest.After(md.WindowStart) {
		md.Notes = append(md.Notes, fmt.Sprintf("requests before %s are not in requests.jsonl: the agent's request ring (%d) was full", oldest.Format(time.RFC3339Nano), e.cfg.RequestRing))
	}
	if len(qs) == 0 {
		return nil, nil
	}
	const name = "requests.jsonl"
	f, err := os.OpenFile(filepath.Join(c.dir, name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return nil, fmt.Errorf("requests: %w", err)
	}
	recs, werr := writeRequests(f, qs)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return nil, fmt.Errorf("requests: %w", err)
	}
	md.Requests = name
	md.Files = append(md.Files, record.File{Name: name})
	return recs, nil
}

// analyze lets a recorder that can explain its trace do so (Analyzer),
// within AnalyzeTimeout. Its files join the artifact; its failure is a
// note, and the capture is kept.
func (e *Engine) analyze(c *armed, md *record.Metadata, reqs []record.RequestRecord, cause record.FireCause) {
	an, ok := c.rec.(Analyzer)
	if !ok {
		e.ensureReport(c, md, fmt.Sprintf("the %s recorder makes no analysis on the node", c.spec.Backend))
		return
	}
	if e.cfg.AnalyzeTimeout < 0 {
		e.ensureReport(c, md, "this agent's analysis is off (capture analyze_timeout is negative)")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.AnalyzeTimeout)
	defer cancel()
	start := time.Now()
	// The requests to explain are those past the trigger's threshold,
	// not past the one that fired (0 for a fire without a threshold:
	// the slowest of all).
	out, err := an.Analyze(ctx, AnalysisInput{Metadata: md, Requests: reqs, Threshold: c.spec.Trigger.Latency})
	files := out.Files
	took := time.Since(start)
	e.m.analyzeSeconds.Observe(took.Seconds())
	if err != nil {
		md.Notes = append(md.Notes, fmt.Sprintf("analysis failed after %s: %v", took.Round(time.Millisecond), err))
		e.cfg.Log.Warn("capture analysis failed", "id", c.spec.ID, "err", err)
		e.ensureReport(c, md, fmt.Sprintf("the analysis failed: %v", err))
		return
	}
	for _, f := range files {
		md.Files = append(md.Files, record.File{Name: f})
	}
	md.Findings = out.Findings
	md.Notes = append(md.Notes, fmt.Sprintf("analysis: %s on the node in %s", strings.Join(files, ", "), took.Round(time.Millisecond)))
	e.ensureReport(c, md, "the recorder's analysis made no report")
}

// ensureReport leaves report.html in every artifact, the page the
// operator's links open: a recorder's analysis writes its own; for a
// capture without one the page says why and lists the files. A failure
// to write it is a note.
func (e *Engine) ensureReport(c *armed, md *record.Metadata, why string) {
	if _, ok := md.FileNamed(explain.ReportFile); ok {
		return
	}
	// O_TRUNC: a failed analysis may have left part of its own.
	f, err := os.OpenFile(filepath.Join(c.dir, explain.ReportFile), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err == nil {
		err = errors.Join(reportpage.WriteUnanalysedReport(f, md, why), f.Sync(), f.Close())
	}
	if err != nil {
		md.Notes = append(md.Notes, fmt.Sprintf("no %s: %v", explain.ReportFile, err))
		return
	}
	md.Files = append(md.Files, record.File{Name: explain.ReportFile})
}

// stop ends a capture before collection: disarmed by hand, aborted by the
// governor, or the engine closing.
func (e *Engine) stop(c *armed, cause error) {
	c.rec.Disarm()
	os.RemoveAll(c.dir)
	state := control.Disarmed
	if errors.Is(cause, errAbort) {
		state = control.Aborted
	}
	if state == control.Disarmed {
		cause = nil
	}
	e.setState(c, state, cause)
	e.m.done.WithLabelValues(string(state)).Inc()
	e.cfg.Log.Info("capture stopped", "id", c.spec.ID, "state", state, "reason", cause)
}

func (e *Engine) fail(c *armed, err error) {
	e.setState(c, control.Failed, err)
	e.m.done.WithLabelValues(string(control.Failed)).Inc()
	e.cfg.Log.Warn("capture failed", "id", c.spec.ID, "err", err)
}

// put puts the sealed capture in the Store, retrying a refusal with
// backoff for StoreRetryFor: a Store that is down for a while (S3 out of
// reach, expired credentials) delays the capture instead of losing it.
// The sealed folder stays on disk until a Put succeeds; when the engine
// closes or the retries run out, the error says where it is.
func (e *Engine) put(ctx context.Context, c *armed, md *record.Metadata) (artifact.Location, error) {
	deadline := time.Now().Add(e.cfg.StoreRetryFor)
	wait := time.Second
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(context.Background(), e.cfg.CollectTimeout)
		l, err := e.cfg.Store.Put(actx, md, c.dir)
		cancel()
		if err == nil {
			if attempt > 1 {
				e.cfg.Log.Info("capture stored after the store refused it", "id", c.spec.ID, "attempts", attempt)
			}
			return l, nil
		}
		if time.Now().Add(wait).After(deadline) {
			return artifact.Location{}, fmt.Errorf("store: %w (after %d attempts over %s; the sealed capture stays in %s)", err, attempt, e.cfg.StoreRetryFor, c.dir)
		}
		e.m.storeRetries.Inc()
		if attempt == 1 {
			e.cfg.Log.Warn("the artifact store refused a sealed capture; keeping it and retrying", "id", c.spec.ID, "err", err, "retry_for", e.cfg.StoreRetryFor)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return artifact.Location{}, fmt.Errorf("store: %w (the engine closed while retrying; the sealed capture stays in %s)", err, c.dir)
		}
		wait = min(2*wait, 30*time.Second)
	}
}
