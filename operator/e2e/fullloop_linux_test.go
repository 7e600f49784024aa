package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/twmb/franz-go/pkg/kadm"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/agents/capture"
	"github.com/spikehunt/spikehunt/agents/capture/perf"
	"github.com/spikehunt/spikehunt/internal/alertdoc"
	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/captures"
	"github.com/spikehunt/spikehunt/internal/schema"
	"github.com/spikehunt/spikehunt/internal/store"
	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/operator/internal/controller"
	"github.com/spikehunt/spikehunt/pipelines/services/detect"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// runs numbers the runs of the test in one process (-count=2): each gets
// a node, a namespace, topics and groups of its own, since the API server
// and the broker are shared and the budgets are fleet-wide.
var runs atomic.Int64

// The platform's full loop, on one node of a real cluster:
//
//  1. The node's app ("shop", ~200 requests/s) stalls for a second. Its
//     requests, as the agent's OTLP spans, are ingested into ClickHouse;
//     a detector pass finds the spike and the alerts publisher puts a
//     spike-group alert on Kafka.
//  2. The operator's alert intake hands it to the CapturePolicy
//     controller; the policy arms no bait (sampling count 0), so only the
//     alert arms a Capture, on the node the alert names.
//  3. The node's agent arms perf for it, and its own latency stream fires
//     it when the app stalls again (one request over 500 ms); the
//     artifact goes to S3 and the Capture to Uploaded.
//  4. Detector passes find the second spike; the operator's Capture
//     controller links the capture to it: Indexed, with exactly the spike
//     windows of the node that overlap the capture's window (the second
//     stall's, never the first's), in the Capture's status and in the
//     captures row, whose uri is the artifact's record in the bucket, and
//     whose files are there with the checksums the record names.
func TestADetectorAlertArmsPerfOnTheNodeWhichCatchesTheNextSpikeAndIsIndexedAgainstIt(t *testing.T) {
	profiles, err := capture.NewProfiles()
	if err != nil {
		t.Fatal(err)
	}
	perf := perf.New(perf.Config{Profiles: profiles})
	if err := perf.Check(); err != nil {
		testenv.RequirePrivileged(t, "perf", err)
	}
	if os.Geteuid() != 0 {
		testenv.RequirePrivileged(t, "perf as root", fmt.Errorf("running as uid %d", os.Geteuid()))
	}

	began := time.Now()
	ctx := context.Background()
	log := newLog(t)
	run := runs.Add(1)
	node, ns := "e2e-node", "shop"
	if run > 1 {
		node, ns = fmt.Sprintf("e2e-node-%d", run), fmt.Sprintf("shop-%d", run)
	}
	const (
		service = "shop"
		hwClass = "gen5"
		pre     = 3 * time.Second
		post    = time.Second
		trigger = 500 * time.Millisecond
		// fleetLabel puts the run's node in its policy's fleet, and in no
		// earlier run's: policies select nodes, and an alert is offered to
		// every policy of its service.
		fleetLabel = "spikehunt.io/e2e-fleet"
	)

	// The real components.
	cl := newCluster(t)
	kafka := testenv.SharedKafka(t)
	alertTopic := fmt.Sprintf("spikehunt.alerts.e2e-%d", run)
	if err := kafka.CreateTopic(ctx, alertTopic, 1); err != nil {
		t.Fatal(err)
	}
	st := testenv.ClickHouse(t)
	if _, err := schema.Apply(ctx, st, schema.Options{}); err != nil {
		t.Fatal(err)
	}
	bucket := testenv.S3(t)
	t.Logf("API server, Kafka, ClickHouse and s3proxy up after %v", time.Since(began).Round(time.Millisecond))

	for _, obj := range []client.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node,
			Labels: map[string]string{v1alpha1.DefaultHWClassLabel: hwClass, fleetLabel: ns}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
	} {
		if err := cl.admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	cl.dumpOnFailure(t, ns)

	// The node's agent: the capture engine with perf and the S3 store,
	// and the watcher of the node's Captures. The engine closes after the
	// watcher stops (cleanups run last-registered first).
	artifacts, err := artifact.OpenStore(ctx, artifact.StoreConfig{S3: s3Config(t, bucket)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { artifacts.Close() })
	eng, err := capture.NewEngine(capture.EngineConfig{Dir: t.TempDir(), Backends: []capture.Backend{perf}, Store: artifacts,
		Resource: capture.HostIdentity{Host: node, Node: node, HWClass: hwClass}, Log: log.With("component", "capture")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	cl.startAgent(t, node, eng, log)

	group := fmt.Sprintf("spikehunt-operator-e2e-%d", run)
	cl.startOperator(t, operatorConfig{store: st, brokers: kafka.Brokers(), alertTopic: alertTopic, group: group, log: log})

	// The app, its load, and the way of its requests to the store. Each
	// request goes to the engine (the intake's tap: the local trigger)
	// and to the exporter, as in the agent.
	pipe := startPipeline(t, st, telemetry.Resource{HostName: node, NodeName: node, HWClass: hwClass}, service,
		kafka.Brokers(), alertTopic, log)
	app := startShop(t, func(q telemetry.Request) {
		eng.Observe(&q)
		pipe.observe(q)
	})
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		app.load(loadCtx, 200)
	}()
	t.Cleanup(func() {
		stopLoad()
		<-loadDone
	})

	// The policy: no bait, only alerts of the service arm, one node each;
	// the node's cooldown keeps the second stall's own alert from arming
	// a second capture there.
	pol := &v1alpha1.CapturePolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-stalls", Namespace: ns},
		Spec: v1alpha1.CapturePolicySpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{fleetLabel: ns}},
			Service:      service,
			Sampling:     v1alpha1.Sampling{Count: ptr[int32](0)},
			Profile:      v1alpha1.CaptureProfile{Backend: v1alpha1.BackendPerf, Pre: dur(pre), Post: dur(post)},
			Triggers: &v1alpha1.Triggers{
				Local:       &v1alpha1.LocalTrigger{Latency: dur(trigger)},
				FleetAlerts: &v1alpha1.FleetAlertTrigger{Services: []string{service}, WidenBy: ptr[int32](1)},
			},
			Budgets: v1alpha1.Budgets{MaxConcurrentPerFleet: 10, PerNodeCooldown: dur(30 * time.Minute), MaxPerPatternPerHour: 6},
		},
	}
	if err := cl.admin.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the operator decides on the policy", func() error {
		var p v1alpha1.CapturePolicy
		if err := cl.admin.Get(ctx, client.ObjectKeyFromObject(pol), &p); err != nil {
			return err
		}
		if p.Status.ObservedGeneration != p.Generation {
			return fmt.Errorf("status of generation %d, spec %d", p.Status.ObservedGeneration, p.Generation)
		}
		return nil
	})
	if caps := cl.captures(t, ns); len(caps) != 0 {
		t.Fatalf("a policy without bait armed %d captures before any alert", len(caps))
	}

	// Stall 1: detected, alerted, armed.
	time.Sleep(5 * time.Second) // the host's typical latency
	stall1From, stall1To := app.stall(t)
	time.Sleep(3 * time.Second) // the seconds after it, for the detector's merge gap
	res, sent := pipe.detect(t)
	spike1, ok := overlapping(res.Spikes, node, stall1From, stall1To)
	if !ok {
		t.Fatalf("no spike window of host %s overlaps stall 1 [%s, %s]; the pass found %s",
			node, stamp(stall1From), stamp(stall1To), describe(res.Spikes))
	}
	alert, ok := alertOf(sent, spike1.ID)
	if !ok {
		t.Fatalf("the publisher sent no spike-group alert with spike %s: %+v", spike1.ID, sent)
	}
	t.Logf("stall 1 [%s, %s] is spike %s [%s, %s), peak %d µs; alert %s published after %v", stamp(stall1From), stamp(stall1To),
		spike1.ID, stamp(spike1.Start), stamp(spike1.End), spike1.PeakUS, alert.AlertID, time.Since(began).Round(time.Millisecond))

	var c v1alpha1.Capture
	eventually(t, 60*time.Second, "the operator arms a Capture for the alert", func() error {
		caps := cl.captures(t, ns)
		if len(caps) == 0 {
			return fmt.Errorf("no Capture in %s", ns)
		}
		if len(caps) > 1 {
			t.Fatalf("%d Captures for one alert on one node", len(caps))
		}
		c = caps[0]
		return nil
	})
	key := client.ObjectKeyFromObject(&c)
	if s := c.Spec; s.NodeName != node || s.Reason != v1alpha1.ReasonAlert || s.AlertID != "kafka/"+alert.AlertID ||
		s.Profile.Backend != v1alpha1.BackendPerf || s.Trigger == nil || s.Trigger.Service != service ||
		s.Trigger.Latency == nil || s.Trigger.Latency.Duration != trigger {
		t.Fatalf("capture %s: spec %+v; want node %s, reason alert, alert kafka/%s, perf, trigger %s > %s", c.Name, s, node, alert.AlertID, service, trigger)
	}
	eventually(t, 60*time.Second, "the agent arms the capture", cl.reached(t, key, v1alpha1.PhaseArmed, &c))
	t.Logf("capture %s (arming %s) armed at %s, %v in", c.Name, c.Spec.ArmingID, stamp(c.Status.ArmedAt.Time), time.Since(began).Round(time.Millisecond))

	// Stall 2: the node's own trigger fires the armed recorder.
	time.Sleep(pre + time.Second) // the ring holds the whole pre-window
	stall2From, stall2To := app.stall(t)
	eventually(t, 90*time.Second, "the capture is fired and uploaded", cl.reached(t, key, v1alpha1.PhaseUploaded, &c))
	st2 := c.Status
	if st2.FiredBy != v1alpha1.FiredByLatency || st2.FiredAt == nil || st2.WindowStart == nil || st2.WindowEnd == nil || st2.Artifact == nil {
		t.Fatalf("uploaded capture: firedBy %q, firedAt %v, window %v–%v, artifact %+v", st2.FiredBy, st2.FiredAt, st2.WindowStart, st2.WindowEnd, st2.Artifact)
	}
	fired := st2.FiredAt.Time
	if fired.Before(stall2From.Add(trigger)) || fired.After(stall2To.Add(time.Second)) {
		t.Errorf("fired at %s; stall 2 was [%s, %s]: the first request over %s ends in its last moments", stamp(fired), stamp(stall2From), stamp(stall2To), trigger)
	}
	if got := st2.WindowEnd.Sub(fired); got != post {
		t.Errorf("window ends %v after the fire, want post %v", got, post)
	}
	if got := fired.Sub(st2.WindowStart.Time); got != pre {
		t.Errorf("window starts %v before the fire, want pre %v (armed at %s)", got, pre, stamp(st2.ArmedAt.Time))
	}
	t.Logf("stall 2 [%s, %s] fired the capture at %s: window [%s, %s), %d bytes at %s, %v in", stamp(stall2From), stamp(stall2To),
		stamp(fired), stamp(st2.WindowStart.Time), stamp(st2.WindowEnd.Time), st2.Artifact.Bytes, st2.Artifact.URI,
		time.Since(began).Round(time.Millisecond))

	// The detector's passes find stall 2; the operator links the capture.
	var spike2 detect.SpikeWindow
	var published []alertdoc.Alert
	eventually(t, 60*time.Second, "a detector pass finds stall 2", func() error {
		res, sent := pipe.detect(t)
		published = append(published, sent...)
		var ok bool
		if spike2, ok = overlapping(res.Spikes, node, stall2From, stall2To); !ok {
			return fmt.Errorf("no spike window overlaps stall 2 [%s, %s]: %s", stamp(stall2From), stamp(stall2To), describe(res.Spikes))
		}
		return nil
	})
	eventually(t, 60*time.Second, "the operator indexes the capture", cl.reached(t, key, v1alpha1.PhaseIndexed, &c))
	stopLoad()
	t.Logf("stall 2 is spike %s [%s, %s); capture indexed with %v, %v in", spike2.ID, stamp(spike2.Start), stamp(spike2.End),
		c.Status.SpikeIDs, time.Since(began).Round(time.Millisecond))

	// Stall 2's own alert reaches the operator too, and arms nothing: the
	// node, the only one, is in its cooldown, so policy.Widen finds no node
	// for it.
	if _, ok := alertOf(published, spike2.ID); !ok {
		t.Errorf("the publisher sent no spike-group alert with spike %s: %+v", spike2.ID, published)
	}
	kc, err := kafka.Client()
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	adm := kadm.NewClient(kc)
	eventually(t, 30*time.Second, "the operator's intake takes every alert", func() error {
		offsets, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		o, _ := offsets.Lookup(alertTopic, 0)
		if want := int64(pipe.published); o.At != want {
			return fmt.Errorf("group %s committed offset %d of %s, want %d", group, o.At, alertTopic, want)
		}
		return nil
	})
	consistently(t, 2*time.Second, "one Capture", func() error {
		if caps := cl.captures(t, ns); len(caps) != 1 {
			return fmt.Errorf("%d Captures, want the one armed for stall 1's alert", len(caps))
		}
		return nil
	})

	// The links: exactly the node's live spike windows that share an
	// instant with the capture's window, read from the spikes table.
	capFrom, capTo := c.Status.WindowStart.Time, c.Status.WindowEnd.Time
	spikes := liveSpikes(t, st, node)
	var want []string
	for _, s := range spikes {
		// The index stores windows at millisecond precision.
		if s.start.Before(capTo.Truncate(time.Millisecond)) && s.end.After(capFrom.Truncate(time.Millisecond)) {
			want = append(want, s.id)
		}
	}
	if !slices.Contains(want, spike2.ID) || slices.Contains(want, spike1.ID) {
		t.Fatalf("the spikes of %s overlapping the capture's window [%s, %s) are %v: want stall 2's %s and not stall 1's %s; all: %+v",
			node, stamp(capFrom), stamp(capTo), want, spike2.ID, spike1.ID, spikes)
	}
	if got := sorted(c.Status.SpikeIDs); !slices.Equal(got, sorted(want)) {
		t.Errorf("status.spikeIDs = %v, want %v (all spikes of %s: %+v)", got, want, node, spikes)
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, v1alpha1.ConditionIndexed); cond == nil ||
		cond.Status != metav1.ConditionTrue || cond.Reason != controller.ReasonLinked {
		t.Errorf("Indexed condition %+v, want True, %s", cond, controller.ReasonLinked)
	}

	// The captures row.
	id := c.Spec.ArmingID
	art := c.Status.Artifact
	wantURI := "s3://" + bucket.Bucket + "/captures/" + id + ".json"
	row, err := captures.Get(ctx, st, id)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sorted(row.SpikeIDs), sorted(want)) {
		t.Errorf("captures row links %v, want %v", row.SpikeIDs, want)
	}
	if art.URI != wantURI || row.URI != wantURI {
		t.Errorf("artifact uri %q, row uri %q; want %q", art.URI, row.URI, wantURI)
	}
	if row.Host != node || row.Backend != "perf" || row.Checksum != art.Checksum || int64(row.Bytes) != art.Bytes ||
		row.Status != captures.StatusIndexed || !strings.HasPrefix(row.Trigger, "latency") ||
		!row.WindowStart.Equal(capFrom.Truncate(time.Millisecond)) || !row.WindowEnd.Equal(capTo.Truncate(time.Millisecond)) {
		t.Errorf("captures row %+v disagrees with the Capture's status %+v", row, c.Status)
	}

	// The artifact in the bucket: the record the uri names, and each of
	// its files under its sha256.
	s3c, err := bucket.Client()
	if err != nil {
		t.Fatal(err)
	}
	recordBytes := readObject(t, s3c, bucket.Bucket, "captures/"+id+".json")
	md, err := record.DecodeMetadata(recordBytes)
	if err != nil {
		t.Fatal(err)
	}
	if md.ID != id || md.Host != node || md.Backend != capture.Perf || md.Checksum != art.Checksum || md.Bytes != art.Bytes ||
		md.Trigger.Kind != "latency" || md.Trigger.Service != service || md.Trigger.Latency <= trigger ||
		!md.FiredAt.Truncate(time.Microsecond).Equal(fired) ||
		!md.WindowStart.Truncate(time.Microsecond).Equal(capFrom) || !md.WindowEnd.Truncate(time.Microsecond).Equal(capTo) {
		t.Errorf("the record in the bucket %+v disagrees with the Capture's status %+v", md, c.Status)
	}
	var perfFiles int
	for _, f := range md.Files {
		b := readObject(t, s3c, bucket.Bucket, "objects/sha256/"+f.SHA256)
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != f.SHA256 || int64(len(b)) != f.Bytes {
			t.Errorf("file %s: %d bytes with sha256 %s in the bucket; the record says %d bytes, %s", f.Name, len(b), got, f.Bytes, f.SHA256)
		}
		if strings.HasPrefix(f.Name, "perf.data") && f.Bytes > 0 {
			perfFiles++
		}
	}
	if perfFiles == 0 {
		t.Errorf("the artifact has no perf data: %+v", md.Files)
	}
	checkExplained(t, &c, &row, cl.admin, artifacts)
	t.Logf("record %s: %d files (%d perf), %d bytes, lost %d; the loop closed in %v", wantURI, len(md.Files), perfFiles,
		md.Bytes, md.Lost, time.Since(began).Round(time.Millisecond))
}

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func stamp(t time.Time) string { return t.UTC().Format("15:04:05.000") }

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// s3Config is the agent's store on the test's bucket, the secret key in a
// file as a mounted Secret gives it.
func s3Config(t *testing.T, srv *testenv.S3Server) *artifact.S3StoreConfig {
	t.Helper()
	secret := filepath.Join(t.TempDir(), "secret-key")
	if err := os.WriteFile(secret, []byte(srv.SecretKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &artifact.S3StoreConfig{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket,
		AccessKey: srv.AccessKey, SecretKeyFile: secret, Insecure: true}
}

func readObject(t *testing.T, cl *minio.Client, bucket, key string) []byte {
	t.Helper()
	obj, err := cl.GetObject(context.Background(), bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatalf("s3://%s/%s: %v", bucket, key, err)
	}
	defer obj.Close()
	b, err := io.ReadAll(obj)
	if err != nil {
		t.Fatalf("s3://%s/%s: %v", bucket, key, err)
	}
	return b
}

// overlapping is the spike window of host that shares an instant with
// [from, to].
func overlapping(ws []detect.SpikeWindow, host string, from, to time.Time) (detect.SpikeWindow, bool) {
	for _, w := range ws {
		if w.Host == host && w.Start.Before(to) && w.End.After(from) {
			return w, true
		}
	}
	return detect.SpikeWindow{}, false
}

func describe(ws []detect.SpikeWindow) string {
	if len(ws) == 0 {
		return "none"
	}
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "%s on %s [%s, %s) peak %d µs; ", w.ID, w.Host, stamp(w.Start), stamp(w.End), w.PeakUS)
	}
	return b.String()
}

// alertOf is the spike-group alert that names spike id.
func alertOf(sent []alertdoc.Alert, id string) (alertdoc.Alert, bool) {
	for _, a := range sent {
		if a.Kind == alertdoc.KindSpikeGroup && a.SpikeGroup != nil && slices.Contains(a.SpikeGroup.SpikeIDs, id) {
			return a, true
		}
	}
	return alertdoc.Alert{}, false
}

type spikeRow struct {
	id         string
	start, end time.Time
}

// liveSpikes reads the host's spike windows as every reader does: FINAL,
// without the retracted ones.
func liveSpikes(t *testing.T, st store.Store, host string) []spikeRow {
	t.Helper()
	tab, err := store.Select(context.Background(), st, `SELECT spike_id, toUnixTimestamp64Milli(window_start), toUnixTimestamp64Milli(window_end)
FROM spikes FINAL WHERE host = `+store.QuoteString(host)+` AND is_deleted = 0 ORDER BY window_start`)
	if err != nil {
		t.Fatal(err)
	}
	var out []spikeRow
	for _, r := range tab.Rows {
		var from, to int64
		if _, err := fmt.Sscan(r[1], &from); err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscan(r[2], &to); err != nil {
			t.Fatal(err)
		}
		out = append(out, spikeRow{id: r[0], start: time.UnixMilli(from), end: time.UnixMilli(to)})
	}
	return out
}
