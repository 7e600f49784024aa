package intake

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/spikehunt/spikehunt/internal/peerconns"
)

// OTLP/HTTP (https://opentelemetry.io/docs/specs/otlp/#otlphttp): POST
// /v1/traces with a protobuf or JSON ExportTraceServiceRequest, optionally
// gzip. The answer uses the request's encoding: an
// ExportTraceServiceResponse, or a google.rpc.Status on 400, 413, 429 and
// 503. /v1/metrics and /v1/logs are answered success and discarded
// (otlp_discard.go).

const (
	ctProtobuf = "application/x-protobuf"
	ctJSON     = "application/json"
)

var errTooLarge = errors.New("request body larger than max_request_bytes")

// listenHTTP binds the OTLP/HTTP receiver and builds its server.
func (in *Intake) listenHTTP(ctx context.Context) (net.Listener, *http.Server, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", in.cfg.OTLPHTTP)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp http: %w", err)
	}
	gated, err := in.gateConns(ln, SourceOTLPHTTP)
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("otlp http: %w", err)
	}
	srv := &http.Server{
		Handler: in.otlpHTTPHandler(),
		// The gate closes idle connections, never busy ones, to make
		// room.
		ConnState:         peerconns.ConnState,
		ConnContext:       peerconns.ConnContext,
		ReadHeaderTimeout: min(10*time.Second, in.cfg.OTLPReadTimeout),
		ReadTimeout:       in.cfg.OTLPReadTimeout,
		WriteTimeout:      in.cfg.OTLPWriteTimeout,
		IdleTimeout:       in.cfg.OTLPIdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(in.log.Handler(), slog.LevelDebug),
	}
	return gated, srv, nil
}

func (in *Intake) otlpHTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", in.serveOTLPHTTP)
	mux.HandleFunc("/v1/metrics", in.serveOTLPDiscard(signalMetrics))
	mux.HandleFunc("/v1/logs", in.serveOTLPDiscard(signalLogs))
	if in.tokens == nil {
		return mux
	}
	src := in.m.sources[SourceOTLPHTTP]
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !in.tokens.accepts(r.Header.Get("Authorization")) {
			// Before the body is read: an unauthenticated sender costs a
			// header's worth. The connection is closed with the answer,
			// so that it does not keep a place in the gate.
			src.drop(reasonUnauthenticated, 1)
			w.Header().Set("WWW-Authenticate", `Bearer realm="spikehunt-agent"`)
			w.Header().Set("Connection", "close")
			http.Error(w, "401 unauthorized: send the agent's token as the header authorization: Bearer <token> (OTEL_EXPORTER_OTLP_HEADERS)", http.StatusUnauthorized)
			return
		}
		if c := peerconns.FromContext(r.Context()); c != nil {
			c.Authenticate() // it may now hold the reserved places
		}
		mux.ServeHTTP(w, r)
	})
}

// acceptOTLPPost answers what is not an OTLP/HTTP export (405 for another
// method, 415 for another media type, counted) and otherwise returns the
// body's canonical content type. what names the message in the 405.
func acceptOTLPPost(w http.ResponseWriter, r *http.Request, src *sourceMetrics, what string) (string, bool) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "405 method not allowed: POST "+what, http.StatusMethodNotAllowed)
		return "", false
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case ctProtobuf, "application/protobuf":
		return ctProtobuf, true
	case ctJSON:
		return ct, true
	}
	src.drop(reasonContentType, 1)
	http.Error(w, "415 unsupported media type: want "+ctProtobuf+" or "+ctJSON, http.StatusUnsupportedMediaType)
	return "", false
}

var (
	bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	gzipPool sync.Pool // *gzip.Reader
)

func (in *Intake) serveOTLPHTTP(w http.ResponseWriter, r *http.Request) {
	src := in.m.sources[SourceOTLPHTTP]
	ct, ok := acceptOTLPPost(w, r, src, "an ExportTraceServiceRequest")
	if !ok {
		return
	}

	from := remoteAddr(r)
	share := in.budget.share(peerAddr(from), false, 0)
	defer in.budget.unshare(share, false)
	hold := budgetHold{b: in.budget, p: share}
	defer hold.release()
	buf := bodyPool.Get().(*bytes.Buffer)
	defer putBody(buf)
	if err := readBody(r, in.cfg.MaxRequestBytes, buf, &hold); err != nil {
		switch {
		case errors.Is(err, errTooLarge):
			src.drop(reasonTooLarge, 1)
			writeStatus(w, ct, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
				fmt.Sprintf("request body larger than %d bytes: send smaller batches", in.cfg.MaxRequestBytes))
		case errors.Is(err, errOverBudget):
			in.refuseHTTP(w, ct, src, err)
		case errors.Is(err, errUnsupportedEncoding):
			src.drop(reasonContentEncoding, 1)
			http.Error(w, "415 "+err.Error(), http.StatusUnsupportedMediaType)
		default:
			src.drop(reasonDecode, 1)
			writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, "read body: "+err.Error())
		}
		return
	}

	// What decoding will allocate, before it does: the body stays held
	// (its buffer's capacity is), and the decoded request is added.
	bodyHeld := hold.held.Load()
	now := in.now()
	var shape requestShape
	var d *spanDecoder
	var err error
	if ct == ctJSON {
		shape.cost, err = jsonDecodeCost(buf.Bytes())
	} else {
		shape, d, err = in.priceProto(buf.Bytes(), now, &hold)
	}
	if d != nil {
		defer putSpanDecoder(d) // before putBody: d aliases buf
	}
	if err != nil {
		src.drop(reasonDecode, 1)
		writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, "decode ExportTraceServiceRequest: "+err.Error())
		return
	}
	if shape.spans > in.cfg.MaxSpansPerRequest {
		in.refuseHTTP(w, ct, src, tooManySpans(shape.spans, in.cfg.MaxSpansPerRequest))
		return
	}
	if err := in.reserve(&hold, bodyHeld+shape.cost); err != nil {
		in.refuseHTTP(w, ct, src, err)
		return
	}

	var t spanTally
	if d != nil {
		t, ok = in.consumeDecoded(src, from, d, now)
	} else if t, ok, err = in.decodeHTTP(w, ct, src, from, buf.Bytes()); err != nil {
		return
	}
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeStatus(w, ct, http.StatusServiceUnavailable, codes.Unavailable, "spikehunt intake is shutting down")
		return
	}
	var body []byte
	switch {
	case ct == ctProtobuf && t.rejected() == 0: // an empty ExportTraceServiceResponse
	case ct == ctJSON:
		body, err = exportResponse(t).MarshalJSON()
	default:
		body, err = exportResponse(t).MarshalProto()
	}
	if err != nil { // cannot happen for a response this simple
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

// decodeHTTP decodes and files a body with pdata: JSON, or protobuf the
// direct decoder did not take. On error it has answered the request.
func (in *Intake) decodeHTTP(w http.ResponseWriter, ct string, src *sourceMetrics, from net.Addr, body []byte) (spanTally, bool, error) {
	req := ptraceotlp.NewExportRequest()
	var err error
	if ct == ctJSON {
		err = req.UnmarshalJSON(body)
	} else {
		err = req.UnmarshalProto(body)
	}
	if err != nil {
		src.drop(reasonDecode, 1)
		writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, "decode ExportTraceServiceRequest: "+err.Error())
		return spanTally{}, false, err
	}
	if n := req.Traces().SpanCount(); n > in.cfg.MaxSpansPerRequest { // JSON: counted only now, within the budget
		err := tooManySpans(n, in.cfg.MaxSpansPerRequest)
		in.refuseHTTP(w, ct, src, err)
		return spanTally{}, false, err
	}
	t, ok := in.consumeTraces(src, from, req.Traces())
	return t, ok, nil
}

var errUnsupportedEncoding = errors.New("unsupported Content-Encoding: want gzip or none")

// readBody reads r's body, gunzipped if need be, into buf. Both the bytes
// on the wire and the decompressed bytes count against limit, so a gzip
// bomb stops at limit. buf's capacity is taken from hold before it grows:
// errOverBudget when the budget has no room for it.
func readBody(r *http.Request, limit int, buf *bytes.Buffer, hold *budgetHold) error {
	raw := &cappedReader{r: r.Body, left: int64(limit)}
	var body io.Reader = raw
	switch enc := strings.TrimSpace(r.Header.Get("Content-Encoding")); {
	// Content codings are case-insensitive (RFC 9110 §8.4.1).
	case enc == "", strings.EqualFold(enc, "identity"):
	case strings.EqualFold(enc, "gzip"), strings.EqualFold(enc, "x-gzip"):
		zr, _ := gzipPool.Get().(*gzip.Reader)
		var err error
		if zr == nil {
			zr, err = gzip.NewReader(raw)
		} else {
			err = zr.Reset(raw)
		}
		if err != nil {
			if raw.over {
				return errTooLarge
			}
			return fmt.Errorf("gzip: %w", err)
		}
		defer gzipPool.Put(zr)
		body = zr
	default:
		return errUnsupportedEncoding
	}
	if !hold.grow(int64(buf.Cap())) {
		return errOverBudget
	}
	body = io.LimitReader(body, int64(limit)+1)
	for {
		if buf.Available() < minBodyRead {
			// bytes.Buffer grows to twice its capacity plus what is
			// asked; take that first, and the size class's rounding
			// after.
			if !hold.resize(2*int64(buf.Cap()) + minBodyRead) {
				return errOverBudget
			}
			buf.Grow(minBodyRead)
			if c := int64(buf.Cap()); c > hold.held.Load() && !hold.resize(c) {
				return errOverBudget
			}
		}
		free := buf.AvailableBuffer()[:buf.Available()]
		n, err := body.Read(free)
		buf.Write(free[:n])
		switch {
		case raw.over || buf.Len() > limit:
			return errTooLarge
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
}

// minBodyRead is the least room readBody reads into.
const minBodyRead = 16 << 10

// maxPooledBody: larger body buffers are left to the GC, so the pool
// holds no memory the budget does not see for long.
const maxPooledBody = 1 << 20

func putBody(buf *bytes.Buffer) {
	if buf.Cap() > maxPooledBody {
		return
	}
	buf.Reset()
	bodyPool.Put(buf)
}

// refuseHTTP answers a request refused for its cost: 429 with Retry-After
// when the budget may have room later, 413 when it never will.
func (in *Intake) refuseHTTP(w http.ResponseWriter, ct string, src *sourceMetrics, err error) {
	if errors.Is(err, errOverBudget) {
		src.drop(reasonOverBudget, 1)
		w.Header().Set("Retry-After", strconv.Itoa(retryAfterSeconds))
		writeStatus(w, ct, http.StatusTooManyRequests, codes.ResourceExhausted, err.Error())
		return
	}
	if errors.Is(err, errTooManySpans) {
		src.drop(reasonTooManySpans, 1)
	} else {
		src.drop(reasonTooLarge, 1)
	}
	writeStatus(w, ct, http.StatusRequestEntityTooLarge, codes.ResourceExhausted, err.Error())
}

// cappedReader fails once more than left bytes have been read, and
// remembers it, however a decompressor wraps the error.
type cappedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.left < 0 {
		c.over = true
		return 0, errTooLarge
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		c.over = true
		return n, errTooLarge
	}
	return n, err
}

// writeStatus answers with a google.rpc.Status in the request's encoding,
// as OTLP/HTTP asks for failures.
func writeStatus(w http.ResponseWriter, ct string, httpCode int, code codes.Code, msg string) {
	st := status.New(code, msg).Proto()
	var body []byte
	var err error
	if ct == ctJSON {
		body, err = protojson.Marshal(st)
	} else {
		body, err = proto.Marshal(st)
	}
	if err != nil {
		http.Error(w, msg, httpCode)
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(httpCode)
	w.Write(body)
}

// peerAddr is the IP address a peer's share of the budget is kept
// under: the zero Addr, one shared peer, when unknown.
func peerAddr(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// remoteAddr is the HTTP peer's address, as the server's connection saw
// it (never a forwarding header: a client could write those), or nil.
func remoteAddr(r *http.Request) net.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return nil
	}
	return net.TCPAddrFromAddrPort(ap)
}
