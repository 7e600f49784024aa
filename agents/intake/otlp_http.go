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
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// OTLP/HTTP (https://opentelemetry.io/docs/specs/otlp/#otlphttp): POST
// /v1/traces with a protobuf or JSON ExportTraceServiceRequest, optionally
// gzip. The answer uses the request's encoding: an
// ExportTraceServiceResponse, or a google.rpc.Status on 400, 413 and 503.

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
	srv := &http.Server{
		Handler:           in.otlpHTTPHandler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       time.Minute,
		WriteTimeout:      time.Minute,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(in.log.Handler(), slog.LevelDebug),
	}
	return ln, srv, nil
}

func (in *Intake) otlpHTTPHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", in.serveOTLPHTTP)
	return mux
}

var (
	bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}
	gzipPool sync.Pool // *gzip.Reader
)

func (in *Intake) serveOTLPHTTP(w http.ResponseWriter, r *http.Request) {
	src := in.m.sources[SourceOTLPHTTP]
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "405 method not allowed: POST an ExportTraceServiceRequest", http.StatusMethodNotAllowed)
		return
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case ctProtobuf, "application/protobuf":
		ct = ctProtobuf
	case ctJSON:
	default:
		src.drop(reasonContentType, 1)
		http.Error(w, "415 unsupported media type: want "+ctProtobuf+" or "+ctJSON, http.StatusUnsupportedMediaType)
		return
	}

	buf := bodyPool.Get().(*bytes.Buffer)
	defer func() { buf.Reset(); bodyPool.Put(buf) }()
	if err := readBody(r, in.cfg.MaxRequestBytes, buf); err != nil {
		switch {
		case errors.Is(err, errTooLarge):
			src.drop(reasonTooLarge, 1)
			writeStatus(w, ct, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
				fmt.Sprintf("request body larger than %d bytes: send smaller batches", in.cfg.MaxRequestBytes))
		case errors.Is(err, errUnsupportedEncoding):
			src.drop(reasonContentEncoding, 1)
			http.Error(w, "415 "+err.Error(), http.StatusUnsupportedMediaType)
		default:
			src.drop(reasonDecode, 1)
			writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, "read body: "+err.Error())
		}
		return
	}

	req := ptraceotlp.NewExportRequest()
	var err error
	if ct == ctJSON {
		err = req.UnmarshalJSON(buf.Bytes())
	} else {
		err = req.UnmarshalProto(buf.Bytes())
	}
	if err != nil {
		src.drop(reasonDecode, 1)
		writeStatus(w, ct, http.StatusBadRequest, codes.InvalidArgument, "decode ExportTraceServiceRequest: "+err.Error())
		return
	}
	t, ok := in.consumeTraces(src, req.Traces())
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeStatus(w, ct, http.StatusServiceUnavailable, codes.Unavailable, "spikehunt intake is shutting down")
		return
	}
	resp := exportResponse(t)
	var body []byte
	if ct == ctJSON {
		body, err = resp.MarshalJSON()
	} else {
		body, err = resp.MarshalProto()
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

var errUnsupportedEncoding = errors.New("unsupported Content-Encoding: want gzip or none")

// readBody reads r's body, gunzipped if need be, into buf. Both the bytes
// on the wire and the decompressed bytes count against limit, so a gzip
// bomb stops at limit.
func readBody(r *http.Request, limit int, buf *bytes.Buffer) error {
	raw := &cappedReader{r: r.Body, left: int64(limit)}
	var body io.Reader = raw
	switch r.Header.Get("Content-Encoding") {
	case "", "identity":
	case "gzip", "x-gzip":
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
	n, err := buf.ReadFrom(io.LimitReader(body, int64(limit)+1))
	switch {
	case raw.over || n > int64(limit):
		return errTooLarge
	case err != nil:
		return err
	}
	return nil
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
