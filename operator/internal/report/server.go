package report

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
	"github.com/spikehunt/spikehunt/internal/peerconns"
	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// ReportFile is the file of an artifact that /report serves: the node
// writes a self-contained report.html into every artifact it seals
// (agents older than that leave none).
const ReportFile = "report.html"

// Artifacts is the agents' artifact store as the server reads it;
// operator/cmd implements it over internal/capture/artifact.
type Artifacts interface {
	// Record returns the record of capture id, or an error wrapping
	// ErrNotFound.
	Record(ctx context.Context, id string) (*record.Metadata, error)
	// Open reads one file of capture id (the caller closes it). A read
	// that reaches the end of bytes that do not match the record returns
	// an error wrapping record.ErrCorrupt; the server checks the sha256
	// itself as well.
	Open(ctx context.Context, id, file string) (io.ReadCloser, error)
}

// Presigner is an Artifacts whose objects a URL can grant (S3).
type Presigner interface {
	// PresignGet returns a URL that GETs file of capture id, and nothing
	// else, for ttl, with contentType as the response's Content-Type.
	PresignGet(ctx context.Context, id, file string, ttl time.Duration, contentType string) (*url.URL, error)
}

// ErrNotFound marks a capture, or a file of one, that the store does not
// hold.
var ErrNotFound = errors.New("not found")

// contentSecurityPolicy lets a self-contained report render (its inline
// styles and scripts, data: images and fonts) and load nothing from
// anywhere: no fetch, no image, no form, no frame. The sandbox gives it
// an origin of its own, so a script in a report cannot read this
// server's other answers with the user's credentials. Every answer
// carries it, an SVG flame graph as much as the report.
const contentSecurityPolicy = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; " +
	"img-src data:; font-src data:; media-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; " +
	"sandbox allow-scripts allow-popups allow-downloads"

// memorySpool is the size up to which a file is checked in memory rather
// than in a temporary file.
const memorySpool = 1 << 20

// Server serves capture artifacts over HTTP(S); see the package doc.
type Server struct {
	cfg       Config
	users     *Users
	captures  client.Reader
	artifacts Artifacts
	presigner Presigner
	log       *slog.Logger
	metrics   *metrics
	srv       *http.Server
	ln        net.Listener
	tls       bool
}

// New checks cfg (completed with its defaults), reads the users file and
// the TLS key pair, and listens. It refuses to build a server without
// users, and one in ModeRedirect over a store that cannot presign.
// captures reads Capture objects (the manager's client).
func New(cfg Config, captures client.Reader, artifacts Artifacts, log *slog.Logger) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if artifacts == nil {
		return nil, errors.New("report server: no artifact store: set --artifacts.config to the agents' store")
	}
	users, err := LoadUsers(cfg.UsersFile)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, users: users, captures: captures, artifacts: artifacts, log: log, metrics: newMetrics()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if cfg.Mode == ModeRedirect {
		p, ok := artifacts.(Presigner)
		if !ok {
			return nil, errors.New("report server: mode redirect needs an S3 store (a local store has no URL a browser can open): use --report.mode=proxy")
		}
		s.presigner = p
	}
	var tlsCfg *tls.Config
	if cfg.TLSCertFile != "" {
		pair, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("report server TLS: %w", err)
		}
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
		s.tls = true
	}
	ln, err := net.Listen("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("report server: listen %s: %w", cfg.Address, err)
	}
	gated, err := peerconns.Listen(ln, peerconns.Config{
		Max:      cfg.MaxConnections,
		PerPeer:  cfg.MaxConnectionsPerPeer,
		Reserved: peerconns.DefaultReserved(cfg.MaxConnections),
		Closed:   func(r peerconns.Reason) { s.metrics.conns.WithLabelValues(string(r)).Inc() },
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("report server: %w", err)
	}
	s.ln = gated
	if tlsCfg != nil {
		s.ln = tls.NewListener(s.ln, tlsCfg)
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: cfg.ReadHeaderTimeout, ReadTimeout: cfg.ReadTimeout,
		WriteTimeout: cfg.WriteTimeout, IdleTimeout: cfg.IdleTimeout, MaxHeaderBytes: 16 << 10,
		ConnState: peerconns.ConnState, ConnContext: peerconns.ConnContext,
		ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)}
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Register adds the server's metrics to reg.
func (s *Server) Register(reg prometheus.Registerer) error { return s.metrics.register(reg) }

// NeedLeaderElection: no, every replica serves reports.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends, then gives requests in flight 5 s.
func (s *Server) Start(ctx context.Context) error {
	errs := make(chan error, 1)
	go func() { errs <- s.srv.Serve(s.ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errs:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.srv.Shutdown(sctx)
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("report server: %w", err)
	}
	return nil
}

// Close releases the listener of a server that will not Start.
func (s *Server) Close() error { return s.ln.Close() }

type userKey struct{}

// ServeHTTP bounds the path, authenticates, then routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	// Artifacts are for the user who asked: no shared cache keeps them.
	h.Set("Cache-Control", "private, no-store")
	if len(r.URL.EscapedPath())+len(r.URL.RawQuery) > s.cfg.MaxPathBytes {
		s.fail(w, http.StatusRequestURITooLong, "bad_path", fmt.Sprintf("the path is over %d bytes", s.cfg.MaxPathBytes))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		s.fail(w, http.StatusMethodNotAllowed, "bad_path", "only GET and HEAD")
		return
	}
	name, password, ok := r.BasicAuth()
	if !ok {
		s.unauthorized(w, "sign in with your spikehunt report user")
		return
	}
	u, ok := s.users.Authenticate(name, password)
	if !ok {
		s.unauthorized(w, "wrong user or password")
		return
	}
	if c := peerconns.FromContext(r.Context()); c != nil {
		c.Authenticate() // it may take the places kept for signed-in users
	}
	s.route(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
}

func (s *Server) unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Basic realm="spikehunt captures", charset="UTF-8"`)
	s.fail(w, http.StatusUnauthorized, "unauthenticated", msg)
}

// route parses /captures/{namespace}/{name}/{report | files/ | files/{file}}.
// The segments are split from the escaped path and then unescaped, so an
// encoded '/' or ".." stays inside its segment and is refused by the
// name checks.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	req, ok := parsePath(r.URL.EscapedPath())
	if !ok {
		s.fail(w, http.StatusNotFound, "not_found", "no such page: this server answers /captures/{namespace}/{name}/report, "+
			"/captures/{namespace}/{name}/files/ and /captures/{namespace}/{name}/files/{file}")
		return
	}
	u := r.Context().Value(userKey{}).(*user)
	if !u.may(req.namespace) {
		s.fail(w, http.StatusForbidden, "forbidden", fmt.Sprintf("user %s may not open captures of namespace %s (the users file lists theirs)", u.name, req.namespace))
		return
	}
	c, md, ok := s.artifactOf(w, r, req)
	if !ok {
		return
	}
	switch {
	case req.list:
		s.serveList(w, r, c, md)
	case req.file == "":
		s.serveFile(w, r, c, md, ReportFile, true)
	default:
		s.serveFile(w, r, c, md, req.file, false)
	}
}

// request is a parsed path.
type request struct {
	namespace, name string
	file            string // "" for the report
	list            bool
}

// parsePath parses an escaped request path; ok is false for anything
// that is not one of the server's pages or names what cannot exist.
func parsePath(escaped string) (request, bool) {
	rest, ok := strings.CutPrefix(escaped, "/captures/")
	if !ok {
		return request{}, false
	}
	seg := strings.Split(rest, "/")
	if len(seg) < 3 || len(seg) > 4 {
		return request{}, false
	}
	for i, e := range seg {
		v, err := url.PathUnescape(e)
		if err != nil {
			return request{}, false
		}
		seg[i] = v
	}
	req := request{namespace: seg[0], name: seg[1]}
	if len(validation.IsDNS1123Label(req.namespace)) > 0 || len(validation.IsDNS1123Subdomain(req.name)) > 0 {
		return request{}, false
	}
	switch {
	case len(seg) == 3 && seg[2] == "report":
	case len(seg) == 3 && seg[2] == "files", len(seg) == 4 && seg[2] == "files" && seg[3] == "":
		req.list = true
	case len(seg) == 4 && seg[2] == "files":
		if record.ValidName("file name", seg[3]) != nil {
			return request{}, false
		}
		req.file = seg[3]
	default:
		return request{}, false
	}
	return req, true
}

// artifactOf finds the Capture of req and its artifact's record, or
// answers why not.
func (s *Server) artifactOf(w http.ResponseWriter, r *http.Request, req request) (*v1alpha1.Capture, *record.Metadata, bool) {
	ref := req.namespace + "/" + req.name
	var c v1alpha1.Capture
	if err := s.captures.Get(r.Context(), client.ObjectKey{Namespace: req.namespace, Name: req.name}, &c); err != nil {
		if apierrors.IsNotFound(err) {
			s.fail(w, http.StatusNotFound, "not_found", fmt.Sprintf("no Capture %s: check the namespace and the name (kubectl get captures -n %s)", ref, req.namespace))
			return nil, nil, false
		}
		s.log.Warn("read capture", "capture", ref, "error", err)
		s.fail(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("cannot read Capture %s from the Kubernetes API; try again", ref))
		return nil, nil, false
	}
	st := c.Status
	if (st.Phase != v1alpha1.PhaseUploaded && st.Phase != v1alpha1.PhaseIndexed) || st.Artifact == nil {
		phase := string(st.Phase)
		if phase == "" {
			phase = string(v1alpha1.PhasePending)
		}
		why := "its artifact is not uploaded yet; try again once it is Uploaded"
		if st.Phase.Final() {
			why = "it has no artifact and never will"
		}
		s.fail(w, http.StatusConflict, "not_uploaded", fmt.Sprintf("Capture %s is %s: %s", ref, phase, why))
		return nil, nil, false
	}
	md, err := s.artifacts.Record(r.Context(), c.Spec.ArmingID)
	switch {
	case errors.Is(err, ErrNotFound):
		s.fail(w, http.StatusNotFound, "not_found", fmt.Sprintf("Capture %s names artifact %s, which the store does not hold (retention deleted it, or the agent uploaded to another store)", ref, st.Artifact.URI))
		return nil, nil, false
	case errors.Is(err, record.ErrCorrupt):
		s.log.Warn("corrupt artifact record", "capture", ref, "error", err)
		s.fail(w, http.StatusBadGateway, "corrupt", fmt.Sprintf("the store's record of Capture %s cannot be read: %v", ref, err))
		return nil, nil, false
	case err != nil:
		s.log.Warn("read artifact record", "capture", ref, "error", err)
		s.fail(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("cannot read the artifact of Capture %s from the store; try again", ref))
		return nil, nil, false
	}
	if md.Checksum != st.Artifact.Checksum {
		s.log.Warn("artifact record differs from the capture", "capture", ref, "record", md.Checksum, "status", st.Artifact.Checksum)
		s.fail(w, http.StatusBadGateway, "corrupt", fmt.Sprintf("the store's record of Capture %s has checksum %s, the Capture's status.artifact %s: not served", ref, md.Checksum, st.Artifact.Checksum))
		return nil, nil, false
	}
	return &c, md, true
}

// serveFile answers with one file of the artifact: its bytes, checked
// (ModeProxy), or a redirect to a presigned URL (ModeRedirect).
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, c *v1alpha1.Capture, md *record.Metadata, name string, isReport bool) {
	ref := c.Namespace + "/" + c.Name
	f, ok := md.FileNamed(name)
	if !ok {
		if isReport {
			s.failHTML(w, http.StatusNotFound, "no_report", fmt.Sprintf("The artifact of Capture %s has no %s: the agent that recorded it predates the node's report. ", ref, ReportFile),
				"Its files", "files/")
			return
		}
		s.fail(w, http.StatusNotFound, "not_found", fmt.Sprintf("the artifact of Capture %s has no file %s (see files/)", ref, name))
		return
	}
	ctype := contentType(name)
	if s.cfg.Mode == ModeRedirect {
		u, err := s.presigner.PresignGet(r.Context(), c.Spec.ArmingID, name, s.cfg.PresignTTL, ctype)
		if err != nil {
			s.log.Warn("presign", "capture", ref, "file", name, "error", err)
			s.fail(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("cannot presign %s of Capture %s; try again", name, ref))
			return
		}
		s.metrics.requests.WithLabelValues("redirected").Inc()
		http.Redirect(w, r, u.String(), http.StatusFound)
		return
	}
	if f.Bytes > s.cfg.MaxFileBytes {
		s.fail(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("%s of Capture %s is %d bytes, over this server's cap of %d (--report.max-file-bytes): download it with spikehunt captures get %s",
			name, ref, f.Bytes, s.cfg.MaxFileBytes, c.Spec.ArmingID))
		return
	}
	body, release, err := s.checked(r.Context(), c.Spec.ArmingID, f)
	if err != nil {
		if errors.Is(err, record.ErrCorrupt) {
			s.log.Warn("artifact file differs from its record", "capture", ref, "file", name, "error", err)
			s.fail(w, http.StatusBadGateway, "corrupt", fmt.Sprintf("%s of Capture %s is not served: the stored bytes' checksum differs from the record's sha256 %s (%v)", name, ref, f.SHA256, err))
			return
		}
		s.log.Warn("read artifact file", "capture", ref, "file", name, "error", err)
		s.fail(w, http.StatusServiceUnavailable, "unavailable", fmt.Sprintf("cannot read %s of Capture %s from the store; try again", name, ref))
		return
	}
	defer release()
	h := w.Header()
	h.Set("Content-Type", ctype)
	disposition := "attachment"
	if inline(ctype) {
		disposition = "inline"
	}
	h.Set("Content-Disposition", disposition+`; filename="`+name+`"`)
	h.Set("ETag", `"`+f.SHA256+`"`)
	s.metrics.requests.WithLabelValues("ok").Inc()
	http.ServeContent(w, r, name, time.Time{}, body)
}

// checked reads f of capture id whole, into memory or a temporary file,
// and returns it once its size and sha256 match the record, so that no
// byte of a changed object reaches the browser. release frees it.
func (s *Server) checked(ctx context.Context, id string, f record.File) (io.ReadSeeker, func(), error) {
	rc, err := s.artifacts.Open(ctx, id, f.Name)
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(rc, f.Bytes+1), h)
	var body io.ReadSeeker
	var n int64
	release := func() {}
	if f.Bytes <= memorySpool {
		b, err := io.ReadAll(src)
		if err != nil {
			return nil, nil, err
		}
		body, n = bytes.NewReader(b), int64(len(b))
	} else {
		tmp, err := os.CreateTemp(s.cfg.SpoolDir, "spikehunt-report-*")
		if err != nil {
			return nil, nil, fmt.Errorf("spool %s: %w (--report.spool-dir)", f.Name, err)
		}
		release = func() { tmp.Close(); os.Remove(tmp.Name()) }
		if n, err = io.Copy(tmp, src); err == nil {
			_, err = tmp.Seek(0, io.SeekStart)
		}
		if err != nil {
			release()
			return nil, nil, err
		}
		body = tmp
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != f.Bytes || sum != f.SHA256 {
		release()
		return nil, nil, fmt.Errorf("%w: read %d bytes with sha256 %s, the record says %d bytes with sha256 %s", record.ErrCorrupt, n, sum, f.Bytes, f.SHA256)
	}
	return body, release, nil
}

var listPage = template.Must(template.New("files").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>Capture {{.Ref}}</title>
<style>body{font-family:sans-serif;margin:2em}td,th{padding:.2em .8em;text-align:left}code{font-size:.85em}</style></head>
<body><h1>Capture {{.Ref}}</h1>
<p>Artifact <code>{{.URI}}</code>, checksum <code>{{.Checksum}}</code>.{{if .Report}} <a href="../report">Open the report</a>.{{end}}</p>
<table><tr><th>File</th><th>Bytes</th><th>sha256</th></tr>
{{range .Files}}<tr><td><a href="{{.Name}}">{{.Name}}</a></td><td>{{.Bytes}}</td><td><code>{{.SHA256}}</code></td></tr>
{{end}}</table></body></html>
`))

// serveList answers with the artifact's files, each a link.
func (s *Server) serveList(w http.ResponseWriter, r *http.Request, c *v1alpha1.Capture, md *record.Metadata) {
	if !strings.HasSuffix(r.URL.Path, "/") {
		// Relative links in the page resolve against files/.
		http.Redirect(w, r, path.Base(r.URL.Path)+"/", http.StatusMovedPermanently)
		return
	}
	_, hasReport := md.FileNamed(ReportFile)
	var b bytes.Buffer
	err := listPage.Execute(&b, struct {
		Ref, URI, Checksum string
		Report             bool
		Files              []record.File
	}{c.Namespace + "/" + c.Name, c.Status.Artifact.URI, md.Checksum, hasReport, md.Files})
	if err != nil {
		s.fail(w, http.StatusInternalServerError, "unavailable", err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	s.metrics.requests.WithLabelValues("ok").Inc()
	w.Write(b.Bytes())
}

// fail answers status with msg as plain text, counted under result.
func (s *Server) fail(w http.ResponseWriter, status int, result, msg string) {
	s.metrics.requests.WithLabelValues(result).Inc()
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Del("Content-Disposition")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

var failPage = template.Must(template.New("fail").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>{{.Msg}}</title></head>
<body><p>{{.Msg}}<a href="{{.Href}}">{{.Link}}</a>.</p></body></html>
`))

// failHTML is fail with a link, for a browser.
func (s *Server) failHTML(w http.ResponseWriter, status int, result, msg, link, href string) {
	s.metrics.requests.WithLabelValues(result).Inc()
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	failPage.Execute(w, struct{ Msg, Link, Href string }{msg, link, href})
}

// contentType is the media type of an artifact file, by its name: the
// report and SVG flame graphs render; text and JSON show; the rest
// (perf.data, pprof) download.
func contentType(name string) string {
	switch {
	case strings.HasSuffix(name, ".html"):
		return "text/html; charset=utf-8"
	case strings.HasSuffix(name, ".svg"):
		return "image/svg+xml"
	case strings.HasSuffix(name, ".json"):
		return "application/json"
	case strings.HasSuffix(name, ".jsonl"):
		return "application/x-ndjson"
	case strings.HasSuffix(name, ".folded"), strings.HasSuffix(name, ".txt"), strings.HasSuffix(name, ".log"):
		return "text/plain; charset=utf-8"
	case strings.HasSuffix(name, ".gz"):
		return "application/gzip"
	}
	return "application/octet-stream"
}

func inline(ctype string) bool {
	return strings.HasPrefix(ctype, "text/") || ctype == "image/svg+xml" || ctype == "application/json"
}
