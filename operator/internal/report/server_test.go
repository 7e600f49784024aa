package report

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/crypto/bcrypt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/peerconns"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The report the node writes (internal/capture/explain makes the real one):
// self-contained, with an inline style, an inline script and a data: image.
const reportHTML = `<!doctype html><html><head><meta charset="utf-8"><title>capture</title>
<style>body{font-family:sans-serif}</style></head><body>
<h1>blocked 998 ms in do_nanosleep</h1><img src="data:image/svg+xml;base64,PHN2Zy8+">
<script>document.title += " ✓"</script></body></html>
`

// Users of the tests: alice (bcrypt) may open captures of her
// namespaces; oncall (sha256) of every namespace.
const (
	alicePassword  = "correct horse battery staple"
	oncallPassword = "3f9c2b0d7a51e8c4"
)

// kube is the test API server with the Capture CRD, and a client that
// knows its types.
type kube struct {
	c client.Client
}

var capturesCRD = filepath.Join("..", "..", "config", "crd", "bases")

func startKube(t testing.TB) kube {
	t.Helper()
	cfg, _ := testenv.SharedAPIServer(t)
	testenv.InstallCRDs(t, cfg, capturesCRD)
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	return kube{c: c}
}

var nsSeq atomic.Int64

// namespace makes a namespace of its own for a test.
func (k kube) namespace(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e6, nsSeq.Add(1))
	if err := k.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	return name
}

// capture creates a Capture whose artifact is md, in phase.
func (k kube) capture(t testing.TB, ns, name string, md *record.Metadata, phase v1alpha1.CapturePhase) {
	t.Helper()
	ctx := context.Background()
	c := &v1alpha1.Capture{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1alpha1.CaptureSpec{NodeName: "node-a", PolicyRef: v1alpha1.PolicyReference{Name: "checkout"},
			ArmingID: md.ID, Epoch: 1, Reason: v1alpha1.ReasonBait,
			Profile: v1alpha1.CaptureProfile{Backend: v1alpha1.BackendPerf}},
	}
	if err := k.c.Create(ctx, c); err != nil {
		t.Fatal(err)
	}
	c.Status.Phase = phase
	if phase == v1alpha1.PhaseUploaded || phase == v1alpha1.PhaseIndexed {
		c.Status.Artifact = &v1alpha1.Artifact{URI: "s3://captures/captures/" + md.ID + ".json", Bytes: md.Bytes, Checksum: md.Checksum}
	}
	if err := k.c.Status().Update(ctx, c); err != nil {
		t.Fatal(err)
	}
}

// sealed stores an artifact with files (name → content) in st, through
// the agents' own Seal and Put.
func sealed(t testing.TB, st artifact.Store, id string, files map[string]string) *record.Metadata {
	t.Helper()
	work := t.TempDir()
	md := &record.Metadata{ID: id, Host: "node-a", Backend: "perf", Trigger: record.FireCause{Kind: "manual"}}
	now := time.Now().UTC()
	md.ArmedAt, md.FiredAt, md.WindowStart, md.WindowEnd = now.Add(-time.Minute), now, now.Add(-10*time.Second), now.Add(2*time.Second)
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(work, name), []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		md.Files = append(md.Files, record.File{Name: name})
	}
	if err := artifact.Seal(work, md); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(context.Background(), md, work); err != nil {
		t.Fatal(err)
	}
	return md
}

// writeUsers writes the tests' users file: alice limited to namespaces,
// oncall everywhere.
func writeUsers(t testing.TB, aliceNamespaces ...string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(alicePassword), minBcryptCost)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(oncallPassword))
	var b strings.Builder
	fmt.Fprintf(&b, "users:\n  - name: alice\n    password_hash: %q\n    namespaces: [%s]\n", h, strings.Join(aliceNamespaces, ", "))
	fmt.Fprintf(&b, "  - name: oncall\n    password_hash: sha256:%s\n    namespaces: [\"*\"]\n", hex.EncodeToString(sum[:]))
	p := filepath.Join(t.TempDir(), "users.yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// stores are the two stores the agents upload to: a local folder and a
// bucket of the real s3proxy.
type storeUnderTest struct {
	name string
	st   artifact.Store
	// tamper changes the stored bytes of f's object.
	tamper func(t *testing.T, f record.File, content []byte)
}

func localStore(t testing.TB) storeUnderTest {
	t.Helper()
	dir := t.TempDir()
	st, err := artifact.OpenLocalStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return storeUnderTest{name: "local", st: st, tamper: func(t *testing.T, f record.File, content []byte) {
		p := filepath.Join(dir, "objects", "sha256", f.SHA256)
		os.Chmod(p, 0o640)
		if err := os.WriteFile(p, content, 0o640); err != nil {
			t.Fatal(err)
		}
	}}
}

func s3Store(t *testing.T) (storeUnderTest, *artifact.S3Store) {
	t.Helper()
	srv := testenv.S3(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(srv.SecretKey), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := artifact.OpenS3Store(context.Background(), artifact.S3StoreConfig{Endpoint: srv.Endpoint, Region: srv.Region, Bucket: srv.Bucket,
		Prefix: "spikehunt/", AccessKey: srv.AccessKey, SecretKeyFile: secret, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return storeUnderTest{name: "s3", st: st, tamper: func(t *testing.T, f record.File, content []byte) {
		cl, err := srv.Client()
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.PutObject(context.Background(), srv.Bucket, "spikehunt/objects/sha256/"+f.SHA256, bytes.NewReader(content), int64(len(content)), minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}}, st
}

// storeArtifacts is operator/cmd's adapter, written again here: the
// report package may not import the store.
type storeArtifacts struct{ st artifact.Store }

func (a storeArtifacts) Record(ctx context.Context, id string) (*record.Metadata, error) {
	md, err := a.st.Get(ctx, id)
	if errors.Is(err, artifact.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return md, err
}

func (a storeArtifacts) Open(ctx context.Context, id, file string) (io.ReadCloser, error) {
	return a.st.Open(ctx, id, file)
}

type presigningArtifacts struct {
	storeArtifacts
	s3 *artifact.S3Store
}

func (p presigningArtifacts) PresignGet(ctx context.Context, id, file string, ttl time.Duration, ctype string) (*url.URL, error) {
	ps, err := p.s3.PresignGet(ctx, id, file, ttl, ctype)
	return ps.URL, err
}

// serve starts a Server on a free loopback port and returns its base URL.
func serve(t testing.TB, cfg Config, k kube, a Artifacts) string {
	t.Helper()
	if cfg.Address == "" {
		cfg.Address = "127.0.0.1:0"
	}
	s, err := New(cfg, k.c, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	base := "http://" + s.Addr().String()
	served.Store(base, s)
	return base
}

// served maps a served base URL to its server, for a test that reads
// its metrics.
var served sync.Map

type answer struct {
	status int
	header http.Header
	body   string
}

// get GETs base+path as user (none when user is ""), following no
// redirect.
func get(t *testing.T, base, path, user, password string) answer {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	cl := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}
}

func (a answer) check(t *testing.T, what string, status int, bodyHas ...string) {
	t.Helper()
	if a.status != status {
		t.Errorf("%s: status %d, want %d; body %q", what, a.status, status, a.body)
	}
	for _, s := range bodyHas {
		if !strings.Contains(a.body, s) {
			t.Errorf("%s: body %q does not say %q", what, a.body, s)
		}
	}
}

// fixture is a server in proxy mode over store, with one Uploaded
// capture "cap" in namespace ns that alice may open.
type fixture struct {
	k    kube
	ns   string
	base string
	md   *record.Metadata
}

var stacks = "main;handle;nanosleep 998\nmain;idle 2\n"

func newFixture(t *testing.T, s storeUnderTest, cfg Config) fixture {
	t.Helper()
	k := startKube(t)
	ns := k.namespace(t, "shop")
	md := sealed(t, s.st, "checkout-node-a-"+strconv.Itoa(int(nsSeq.Add(1))), map[string]string{
		ReportFile: reportHTML, "stacks.folded": stacks, "perf.data.1": "PERFILE2 a trace",
	})
	k.capture(t, ns, "cap", md, v1alpha1.PhaseIndexed)
	if cfg.UsersFile == "" {
		cfg.UsersFile = writeUsers(t, ns)
	}
	var a Artifacts = storeArtifacts{s.st}
	if s3, ok := s.st.(*artifact.S3Store); ok {
		a = presigningArtifacts{storeArtifacts{s.st}, s3}
	}
	return fixture{k: k, ns: ns, base: serve(t, cfg, k, a), md: md}
}

func (f fixture) path(file string) string { return "/captures/" + f.ns + "/cap/" + file }

func TestProxyModeServesTheExactReportBytesAsHTMLWithACSP(t *testing.T) {
	s3, _ := s3Store(t)
	for _, s := range []storeUnderTest{localStore(t), s3} {
		t.Run(s.name, func(t *testing.T) {
			f := newFixture(t, s, Config{})
			a := get(t, f.base, f.path("report"), "alice", alicePassword)
			a.check(t, "the report", http.StatusOK)
			if a.body != reportHTML {
				t.Errorf("the report's bytes differ from the artifact's:\n%q\nwant\n%q", a.body, reportHTML)
			}
			for k, want := range map[string]string{"Content-Type": "text/html; charset=utf-8", "X-Content-Type-Options": "nosniff",
				"Content-Security-Policy": contentSecurityPolicy, "Cache-Control": "private, no-store"} {
				if got := a.header.Get(k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
			csp := a.header.Get("Content-Security-Policy")
			for _, d := range []string{"default-src 'none'", "script-src 'unsafe-inline'", "style-src 'unsafe-inline'", "img-src data:", "frame-ancestors 'none'"} {
				if !strings.Contains(csp, d) {
					t.Errorf("CSP %q lacks %q: the report must render and load nothing from elsewhere", csp, d)
				}
			}

			a = get(t, f.base, f.path("files/stacks.folded"), "oncall", oncallPassword)
			a.check(t, "stacks.folded", http.StatusOK)
			if a.body != stacks || a.header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Errorf("stacks.folded: %q as %q", a.body, a.header.Get("Content-Type"))
			}
			a = get(t, f.base, f.path("files/perf.data.1"), "alice", alicePassword)
			a.check(t, "perf.data.1", http.StatusOK)
			if a.header.Get("Content-Type") != "application/octet-stream" || !strings.HasPrefix(a.header.Get("Content-Disposition"), "attachment") {
				t.Errorf("perf.data.1 as %q, %q: want a download", a.header.Get("Content-Type"), a.header.Get("Content-Disposition"))
			}
			a = get(t, f.base, f.path("files/"), "alice", alicePassword)
			a.check(t, "the files list", http.StatusOK, `href="stacks.folded"`, `href="perf.data.1"`, `href="../report"`, f.md.Checksum)
			if a := get(t, f.base, f.path("files"), "alice", alicePassword); a.status != http.StatusMovedPermanently || a.header.Get("Location") != f.path("files/") {
				t.Errorf("files without a slash: %d to %q, want 301 to %s", a.status, a.header.Get("Location"), f.path("files/"))
			}
		})
	}
}

func TestAnUnauthenticatedRequestIsAnswered401WithWWWAuthenticate(t *testing.T) {
	f := newFixture(t, localStore(t), Config{})
	for _, p := range []string{f.path("report"), f.path("files/stacks.folded"), "/captures/nowhere/none/report", "/"} {
		a := get(t, f.base, p, "", "")
		a.check(t, p, http.StatusUnauthorized)
		if got := a.header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Basic realm=") {
			t.Errorf("%s: WWW-Authenticate %q, want a Basic challenge", p, got)
		}
		if strings.Contains(a.body, "blocked 998 ms") {
			t.Errorf("%s: the report was served without authentication", p)
		}
	}
}

func TestAWrongPasswordIsAnswered401(t *testing.T) {
	f := newFixture(t, localStore(t), Config{})
	for _, c := range []struct{ user, password string }{
		{"alice", "wrong"}, {"alice", oncallPassword}, {"oncall", alicePassword}, {"oncall", ""}, {"mallory", alicePassword}, {"alice", alicePassword + "x"},
	} {
		a := get(t, f.base, f.path("report"), c.user, c.password)
		a.check(t, c.user+":"+c.password, http.StatusUnauthorized)
		if a.header.Get("WWW-Authenticate") == "" || strings.Contains(a.body, "blocked 998 ms") {
			t.Errorf("%s: %+v", c.user, a)
		}
	}
	// The right one after wrong ones (the bcrypt cache holds only what
	// bcrypt accepted).
	get(t, f.base, f.path("report"), "alice", alicePassword).check(t, "alice", http.StatusOK)
	get(t, f.base, f.path("report"), "alice", "wrong").check(t, "alice, wrong after right", http.StatusUnauthorized)
}

func TestAUserOutsideTheirNamespacesIsAnswered403(t *testing.T) {
	s := localStore(t)
	k := startKube(t)
	other := k.namespace(t, "payments")
	md := sealed(t, s.st, "payments-node-b-1", map[string]string{ReportFile: reportHTML})
	k.capture(t, other, "cap", md, v1alpha1.PhaseIndexed)
	f := newFixture(t, s, Config{})
	// alice may open f.ns only; the same server holds other's capture.
	a := get(t, f.base, "/captures/"+other+"/cap/report", "alice", alicePassword)
	a.check(t, "alice in "+other, http.StatusForbidden, "alice", other)
	if strings.Contains(a.body, "blocked 998 ms") {
		t.Error("served outside the user's namespaces")
	}
	// Whether a Capture exists there is not told either.
	get(t, f.base, "/captures/"+other+"/nothing/report", "alice", alicePassword).check(t, "alice, a missing capture in "+other, http.StatusForbidden)
	get(t, f.base, "/captures/"+other+"/cap/report", "oncall", oncallPassword).check(t, "oncall (all namespaces)", http.StatusOK)
}

func TestATamperedObjectIsAnswered502AndNotServed(t *testing.T) {
	s3, _ := s3Store(t)
	for _, s := range []storeUnderTest{localStore(t), s3} {
		t.Run(s.name, func(t *testing.T) {
			f := newFixture(t, s, Config{})
			rf, _ := f.md.FileNamed(ReportFile)
			// Same size, one script more: what an attacker with write
			// access to the store would do.
			evil := strings.Replace(reportHTML, "<h1>", "<script>steal()</script><h1>", 1)
			evil = evil[:len(reportHTML)]
			s.tamper(t, rf, []byte(evil))
			a := get(t, f.base, f.path("report"), "alice", alicePassword)
			a.check(t, "a tampered report", http.StatusBadGateway, "checksum differs", rf.SHA256)
			if strings.Contains(a.body, "steal()") || strings.Contains(a.body, "<h1>") {
				t.Errorf("the tampered bytes were served: %q", a.body)
			}
			// A longer object is refused too.
			sf, _ := f.md.FileNamed("stacks.folded")
			s.tamper(t, sf, []byte(stacks+"more;stacks 1\n"))
			get(t, f.base, f.path("files/stacks.folded"), "alice", alicePassword).check(t, "a longer stacks.folded", http.StatusBadGateway, "checksum differs")
		})
	}
}

func TestAFileOverTheSizeCapIsRefused413WithoutBeingRead(t *testing.T) {
	s := localStore(t)
	k := startKube(t)
	ns := k.namespace(t, "shop")
	md := sealed(t, s.st, "big-1", map[string]string{ReportFile: reportHTML, "perf.data.1": strings.Repeat("x", 1<<20+1)})
	k.capture(t, ns, "big", md, v1alpha1.PhaseUploaded)
	base := serve(t, Config{UsersFile: writeUsers(t, ns), MaxFileBytes: 1 << 20}, k, storeArtifacts{s.st})
	get(t, base, "/captures/"+ns+"/big/files/perf.data.1", "alice", alicePassword).check(t, "a file over the cap", http.StatusRequestEntityTooLarge, "spikehunt captures get big-1")
	get(t, base, "/captures/"+ns+"/big/report", "alice", alicePassword).check(t, "the report beside it", http.StatusOK)
}

func TestACaptureNotUploadedIsAnswered409SayingItsPhase(t *testing.T) {
	s := localStore(t)
	k := startKube(t)
	ns := k.namespace(t, "shop")
	for _, phase := range []v1alpha1.CapturePhase{v1alpha1.PhaseArmed, v1alpha1.PhaseFired, v1alpha1.PhaseFailed} {
		name := strings.ToLower(string(phase))
		k.capture(t, ns, name, &record.Metadata{ID: "arming-" + name}, phase)
	}
	base := serve(t, Config{UsersFile: writeUsers(t, ns)}, k, storeArtifacts{s.st})
	get(t, base, "/captures/"+ns+"/armed/report", "alice", alicePassword).check(t, "Armed", http.StatusConflict, "is Armed", "not uploaded yet")
	get(t, base, "/captures/"+ns+"/fired/files/", "alice", alicePassword).check(t, "Fired", http.StatusConflict, "is Fired")
	get(t, base, "/captures/"+ns+"/failed/report", "alice", alicePassword).check(t, "Failed", http.StatusConflict, "is Failed", "never will")
}

func TestUnknownCapturesAndFilesAreAnswered404SayingWhat(t *testing.T) {
	f := newFixture(t, localStore(t), Config{})
	get(t, f.base, "/captures/"+f.ns+"/nope/report", "alice", alicePassword).check(t, "no such capture", http.StatusNotFound, "no Capture "+f.ns+"/nope")
	get(t, f.base, f.path("files/flame.svg"), "alice", alicePassword).check(t, "no such file", http.StatusNotFound, "no file flame.svg")
	get(t, f.base, "/captures/"+f.ns+"/cap", "alice", alicePassword).check(t, "no page", http.StatusNotFound, "/captures/{namespace}/{name}/report")
}

// Artifacts of agents older than the node's report have no report.html:
// the answer says so and links the files list.
func TestAnArtifactWithoutAReportIsAnswered404LinkingItsFiles(t *testing.T) {
	s := localStore(t)
	k := startKube(t)
	ns := k.namespace(t, "shop")
	md := sealed(t, s.st, "old-agent-1", map[string]string{"perf.data.1": "PERFILE2"})
	k.capture(t, ns, "old", md, v1alpha1.PhaseIndexed)
	base := serve(t, Config{UsersFile: writeUsers(t, ns)}, k, storeArtifacts{s.st})
	a := get(t, base, "/captures/"+ns+"/old/report", "alice", alicePassword)
	a.check(t, "no report.html", http.StatusNotFound, "has no report.html", `href="files/"`)
	if a.header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q, want HTML (a link to click)", a.header.Get("Content-Type"))
	}
	get(t, base, "/captures/"+ns+"/old/files/", "alice", alicePassword).check(t, "its files", http.StatusOK, `href="perf.data.1"`)
}

// A capture whose record in the store is not the one its status names
// (another artifact under the id) is not served.
func TestARecordThatIsNotTheCapturesIsAnswered502(t *testing.T) {
	s := localStore(t)
	k := startKube(t)
	ns := k.namespace(t, "shop")
	md := sealed(t, s.st, "swapped-1", map[string]string{ReportFile: reportHTML})
	other := *md
	other.Checksum = strings.Repeat("0", 64)
	k.capture(t, ns, "swapped", &other, v1alpha1.PhaseIndexed)
	base := serve(t, Config{UsersFile: writeUsers(t, ns)}, k, storeArtifacts{s.st})
	get(t, base, "/captures/"+ns+"/swapped/report", "alice", alicePassword).check(t, "a swapped record", http.StatusBadGateway, "not served")
}

func TestRedirectModeAnswersAPresignedURLThatS3ProxyServesAndThatExpires(t *testing.T) {
	s, _ := s3Store(t)
	const ttl = 2 * time.Second
	f := newFixture(t, s, Config{Mode: ModeRedirect, PresignTTL: ttl})
	a := get(t, f.base, f.path("report"), "alice", alicePassword)
	a.check(t, "the report", http.StatusFound)
	loc, err := url.Parse(a.header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	rf, _ := f.md.FileNamed(ReportFile)
	q := loc.Query()
	if q.Get("X-Amz-Expires") != "2" || q.Get("X-Amz-Signature") == "" || !strings.HasSuffix(loc.Path, "/spikehunt/objects/sha256/"+rf.SHA256) {
		t.Errorf("Location %s: want a presigned GET of exactly the report's object, expiring in 2 s", loc)
	}
	if strings.Contains(loc.String(), "Secret") || q.Get("X-Amz-Credential") == "" {
		t.Errorf("Location %s", loc)
	}
	// The browser follows it to s3proxy, without any credential of ours.
	resp, err := http.Get(loc.String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != reportHTML {
		t.Fatalf("GET the presigned URL: %s, %q", resp.Status, body)
	}
	if ct, params, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); ct != "text/html" || params["charset"] != "utf-8" {
		t.Errorf("the bucket answered Content-Type %q, want text/html (signed into the URL)", resp.Header.Get("Content-Type"))
	}
	// The URL grants that object only: another key with the same
	// signature is refused.
	other := *loc
	other.Path = strings.Replace(loc.Path, rf.SHA256, strings.Repeat("0", 64), 1)
	if resp, err := http.Get(other.String()); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("the signature on another key: %v %v, want 403", resp.Status, err)
	}
	time.Sleep(ttl + 1500*time.Millisecond)
	resp, err = http.Get(loc.String())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("GET the presigned URL after its %v: %s, want 403", ttl, resp.Status)
	}
	// Authentication and scope come first in redirect mode too.
	get(t, f.base, f.path("report"), "alice", "wrong").check(t, "wrong password", http.StatusUnauthorized)
}

func TestRedirectModeOverALocalStoreRefusesToStart(t *testing.T) {
	k := startKube(t)
	_, err := New(Config{Address: "127.0.0.1:0", Mode: ModeRedirect, UsersFile: writeUsers(t, "shop")}, k.c, storeArtifacts{localStore(t).st}, nil)
	if err == nil || !strings.Contains(err.Error(), "S3") {
		t.Errorf("redirect over a local store: %v, want an error saying it needs S3", err)
	}
}

func TestTheServerWithoutUsersRefusesToStart(t *testing.T) {
	k := startKube(t)
	a := storeArtifacts{localStore(t).st}
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o600)
		return p
	}
	for _, c := range []struct {
		name, file, want string
	}{
		{"no users file", "", "--report.users-file"},
		{"an empty users file", write("empty.yaml", "users: []\n"), "never serves without authentication"},
		{"a password in clear", write("clear.yaml", "users:\n  - name: a\n    password_hash: hunter2\n    namespaces: [shop]\n"), "in clear is not accepted"},
		{"a cheap bcrypt", write("cheap.yaml", "users:\n  - name: a\n    password_hash: \"$2a$04$1234567890123456789012uZoHCZ0Xq4D6vmfiSxbOySsC5iT1q4W\"\n    namespaces: [shop]\n"), "cost 4"},
		{"no namespaces", write("nons.yaml", fmt.Sprintf("users:\n  - name: a\n    password_hash: sha256:%s\n", strings.Repeat("ab", 32))), "has no namespaces"},
		{"a missing file", filepath.Join(dir, "missing.yaml"), "no such file"},
	} {
		_, err := New(Config{Address: "127.0.0.1:0", UsersFile: c.file}, k.c, a, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
	if _, err := New(Config{Address: "127.0.0.1:0"}, k.c, a, nil); !errors.Is(err, ErrNoUsers) {
		t.Errorf("no users: %v, want ErrNoUsers", err)
	}
}

func TestHostileRequestsAreBounded(t *testing.T) {
	f := newFixture(t, localStore(t), Config{MaxConnections: 3, IdleTimeout: 300 * time.Millisecond})
	for _, p := range []string{
		f.path("files/..%2F..%2F..%2Fetc%2Fpasswd"), f.path("files/%2e%2e"), f.path("files/..%2fusers.yaml"),
		f.path("files/a%00b"), "/captures/" + f.ns + "/..%2Fcap/report", "/captures/%2e%2e/cap/report",
		f.path("files/report.html/x"),
	} {
		a := get(t, f.base, p, "alice", alicePassword)
		if a.status != http.StatusNotFound && a.status != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 404 or 400; body %q", p, a.status, a.body)
		}
		if strings.Contains(a.body, "root:") || strings.Contains(a.body, "password_hash") {
			t.Errorf("%s leaked a file: %q", p, a.body)
		}
	}
	// ".." unescaped is cleaned by the client or answered elsewhere, never
	// outside the captures.
	raw, err := net.Dial("tcp", strings.TrimPrefix(f.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(raw, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Basic %s\r\nConnection: close\r\n\r\n", f.path("files/../../../../etc/passwd"), basic("alice", alicePassword))
	b, _ := io.ReadAll(raw)
	raw.Close()
	if strings.Contains(string(b), "root:") || !(strings.HasPrefix(string(b), "HTTP/1.1 404") || strings.HasPrefix(string(b), "HTTP/1.1 400")) {
		t.Errorf("a raw ../ path: %q", firstLine(b))
	}

	huge := f.path("files/" + strings.Repeat("a", 2000))
	get(t, f.base, huge, "alice", alicePassword).check(t, "a 2 KB path", http.StatusRequestURITooLong)
	get(t, f.base, huge, "", "").check(t, "a 2 KB path without auth", http.StatusRequestURITooLong)
	if a := get(t, f.base, "/captures/"+strings.Repeat("x/", 10000), "alice", alicePassword); a.status != http.StatusRequestHeaderFieldsTooLarge && a.status != http.StatusRequestURITooLong {
		t.Errorf("a 20 KB path: %d, want 414 or 431", a.status)
	}

	// Idle connections are closed after IdleTimeout. The gate counts a
	// connection until the server has seen its close, and a connection
	// stays busy until the server, not the client, is done with its
	// answer; so this starts from no connection open and opens the
	// peer's share (2 of 3), which no race can make refused. get's
	// client keeps its last connection, authenticated, which an
	// unauthenticated newcomer may not close: it goes first.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	s, _ := served.Load(f.base)
	gate := s.(*Server).ln.(*peerconns.Listener)
	for deadline := time.Now().Add(5 * time.Second); gate.Open() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open 5 s after the last answer", gate.Open())
		}
	}
	var conns []net.Conn
	for range 2 {
		c, _ := testenv.KeepAliveGET(t, "tcp", strings.TrimPrefix(f.base, "http://"), f.path("report"))
		conns = append(conns, c)
	}
	testenv.CheckIdleConnsClosed(t, conns, 5*time.Second)
}

// One client's idle connections cannot keep the others out: it holds at
// most MaxConnectionsPerPeer, and a newcomer takes the place of an idle
// one. On Linux all of 127.0.0.0/8 is loopback: 127.0.0.2 is a peer of
// its own.
func TestTheReportServerCapsConnectionsPerPeer(t *testing.T) {
	f := newFixture(t, localStore(t), Config{MaxConnections: 4, MaxConnectionsPerPeer: 2})
	addr := strings.TrimPrefix(f.base, "http://")
	for i := range 8 {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP([]string{"127.0.0.2", "127.0.0.3"}[i%2])}}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	for range 3 {
		done := make(chan answer, 1)
		go func() { done <- get(t, f.base, f.path("report"), "alice", alicePassword) }()
		select {
		case a := <-done:
			a.check(t, "a report beside the flood", http.StatusOK)
		case <-time.After(5 * time.Second):
			t.Fatal("a signed-in user was kept out by idle connections")
		}
	}
	s, _ := served.Load(f.base)
	if got := testutil.ToFloat64(s.(*Server).metrics.conns.WithLabelValues("evicted_idle")); got < 4 {
		t.Errorf("connections_refused_total{evicted_idle} = %v, want at least 4", got)
	}
}

func basic(user, password string) string {
	req, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	req.SetBasicAuth(user, password)
	return strings.TrimPrefix(req.Header.Get("Authorization"), "Basic ")
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\r\n")
	return s
}
