package store

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/ClickHouse/ch-go/proto"
)

// HTTPServer is a ClickHouse server (or serve-clickhouse) over the HTTP
// interface. Results travel as Native blocks; a cancelled context closes the
// request, and the server cancels the query (see
// cancel_http_readonly_queries_on_client_close).
type HTTPServer struct {
	base   url.URL
	dsn    DSN
	client *http.Client
}

func openHTTP(ctx context.Context, d DSN) (*HTTPServer, error) {
	scheme := "http"
	if d.TLS != nil {
		scheme = "https"
	}
	conns := d.Connections
	if conns == 0 {
		conns = 8
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: d.DialTimeout}).DialContext,
		TLSClientConfig:     d.TLS,
		MaxIdleConnsPerHost: conns,
		MaxConnsPerHost:     conns,
	}
	s := &HTTPServer{base: url.URL{Scheme: scheme, Host: d.Address, Path: "/"}, dsn: d, client: &http.Client{Transport: tr}}
	pctx, cancel := context.WithTimeout(ctx, d.DialTimeout)
	defer cancel()
	if err := s.Exec(pctx, "SELECT 1"); err != nil {
		tr.CloseIdleConnections()
		return nil, fmt.Errorf("connect to ClickHouse at %s://%s: %w", scheme, d.Address, err)
	}
	return s, nil
}

// Backend implements Store.
func (s *HTTPServer) Backend() string { return "http" }

// Close implements Store.
func (s *HTTPServer) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// do sends one statement; query goes in the URL when body carries data.
func (s *HTTPServer) do(ctx context.Context, query string, body io.Reader, opts []Option) (*http.Response, error) {
	o := collect(opts)
	p := url.Values{}
	if s.dsn.Database != "" {
		p.Set("database", s.dsn.Database)
	}
	p.Set("default_format", "Native")
	p.Set("cancel_http_readonly_queries_on_client_close", "1")
	for _, st := range o.settings {
		if !settingName.MatchString(st.key) {
			return nil, fmt.Errorf("invalid setting name %q", st.key)
		}
		p.Set(st.key, st.value)
	}
	if o.queryID != "" {
		p.Set("query_id", o.queryID)
	}
	if body == nil {
		body = strings.NewReader(query)
	} else {
		p.Set("query", query)
	}
	u := s.base
	u.RawQuery = p.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if err != nil {
		return nil, err
	}
	if s.dsn.User != "" {
		req.SetBasicAuth(s.dsn.User, s.dsn.Password)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("ClickHouse at %s unreachable: %w", s.base.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		ex := parseException(string(msg))
		ex.HTTPStatus = resp.StatusCode
		if c, err := strconv.Atoi(resp.Header.Get("X-ClickHouse-Exception-Code")); err == nil {
			ex.Code = c
		}
		if ex.Message == "" {
			ex.Message = fmt.Sprintf("HTTP %s", resp.Status)
		}
		return nil, ex
	}
	return resp, nil
}

// Exec implements Store.
func (s *HTTPServer) Exec(ctx context.Context, query string, opts ...Option) error {
	resp, err := s.do(ctx, query, nil, opts)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return inBandError(resp.Body)
}

// Insert implements Store.
func (s *HTTPServer) Insert(ctx context.Context, table string, cols proto.Input, opts ...Option) error {
	var buf proto.Buffer
	if err := EncodeNative(&buf, cols); err != nil {
		return err
	}
	resp, err := s.do(ctx, insertInto(table, cols)+" FORMAT Native", bytes.NewReader(buf.Buf), opts)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return inBandError(resp.Body)
}

// Query implements Store.
func (s *HTTPServer) Query(ctx context.Context, query string, fn func(Block) error, opts ...Option) error {
	resp, err := s.do(ctx, query, nil, opts)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = DecodeNative(resp.Body, fn)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// inBandError reads a statement's (normally empty) answer: a failure after
// the server sent its status line arrives in the body.
func inBandError(r io.Reader) error {
	b, err := io.ReadAll(io.LimitReader(r, 64<<10))
	if err != nil {
		return err
	}
	if i := bytes.Index(b, []byte("Code: ")); i >= 0 && bytes.Contains(b[i:], []byte("Exception")) {
		return parseException(string(b[i:]))
	}
	return nil
}
