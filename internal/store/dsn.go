package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidDSN is wrapped by every DSN parsing error.
var ErrInvalidDSN = errors.New("invalid DSN")

const dsnForms = "want chdb:///path/to/dir, clickhouse://user:pass@host:9000/db or http(s)://user:pass@host:8123/db"

// DSN is a parsed data source name.
type DSN struct {
	Scheme   string // chdb, clickhouse, http, https
	Dir      string // chdb: data directory
	Address  string // host:port
	Database string
	User     string
	Password string
	// TLS: clickhouse://…?secure=true, or https. ca= names a PEM file;
	// skip_verify=true disables verification (tests only).
	TLS         *tls.Config
	DialTimeout time.Duration // dial_timeout=5s; default 5s
	Connections int           // pool size: chdb pool=, server max_conns=
	Compress    bool          // clickhouse://…?compress=lz4 (native only)
}

// ParseDSN parses chdb:///dir[?database=db&pool=4],
// clickhouse://[user[:pass]@]host[:9000][/db][?secure=true&ca=FILE&skip_verify=true&compress=lz4&dial_timeout=5s&max_conns=8],
// and http(s)://[user[:pass]@]host[:8123][/db][?…same TLS options].
func ParseDSN(s string) (DSN, error) {
	bad := func(why string) (DSN, error) {
		return DSN{}, fmt.Errorf("%w %q: %s (%s)", ErrInvalidDSN, redact(s), why, dsnForms)
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad("not a URL")
	}
	d := DSN{Scheme: u.Scheme, DialTimeout: 5 * time.Second}
	q := u.Query()
	for k := range q {
		switch k {
		case "database", "pool", "secure", "ca", "skip_verify", "compress", "dial_timeout", "max_conns":
		default:
			return bad("unknown parameter " + k)
		}
	}
	if v := q.Get("dial_timeout"); v != "" {
		if d.DialTimeout, err = time.ParseDuration(v); err != nil || d.DialTimeout <= 0 {
			return bad("dial_timeout must be a positive duration like 5s")
		}
	}
	n, key := 0, "pool"
	if d.Scheme != "chdb" {
		key = "max_conns"
	}
	if v := q.Get(key); v != "" {
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 64 {
			return bad(key + " must be 1–64")
		}
	}
	d.Connections = n
	switch u.Scheme {
	case "chdb":
		d.Dir = u.Host + u.Path // chdb:///abs/dir or chdb://rel/dir
		if u.Opaque != "" {
			d.Dir = u.Opaque // chdb:rel/dir
		}
		if d.Dir == "" {
			return bad("no data directory")
		}
		d.Database = q.Get("database")
		return d, nil
	case "clickhouse", "http", "https":
	case "":
		return bad("no scheme")
	default:
		return bad("unknown scheme " + u.Scheme)
	}
	if u.Host == "" {
		return bad("no host")
	}
	d.Address = u.Host
	if u.Port() == "" {
		port := map[string]string{"clickhouse": "9000", "http": "8123", "https": "8443"}[u.Scheme]
		if q.Get("secure") == "true" && u.Scheme == "clickhouse" {
			port = "9440"
		}
		d.Address = u.Host + ":" + port
	}
	d.Database = strings.Trim(u.Path, "/")
	if v := q.Get("database"); v != "" {
		d.Database = v
	}
	if strings.Contains(d.Database, "/") {
		return bad("database name contains '/'")
	}
	if u.User != nil {
		d.User = u.User.Username()
		d.Password, _ = u.User.Password()
	}
	switch c := q.Get("compress"); c {
	case "", "none":
	case "lz4":
		if u.Scheme != "clickhouse" {
			return bad("compress=lz4 is for the native protocol only")
		}
		d.Compress = true
	default:
		return bad("compress must be lz4 or none")
	}
	if u.Scheme == "https" || q.Get("secure") == "true" {
		d.TLS = &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: q.Get("skip_verify") == "true"}
		if ca := q.Get("ca"); ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return bad("ca: " + err.Error())
			}
			d.TLS.RootCAs = x509.NewCertPool()
			if !d.TLS.RootCAs.AppendCertsFromPEM(pem) {
				return bad("ca: no PEM certificates in " + ca)
			}
		}
	}
	return d, nil
}

// redact hides a password in a DSN for error messages.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// Open opens the store a DSN names. Only a chdb:// DSN loads libchdb.so.
// A chdb:// data directory and its database are created if missing.
func Open(ctx context.Context, dsn string) (Store, error) {
	return open(ctx, dsn, "")
}

// OpenExisting is Open for a reader: a chdb:// DSN opens only a data
// directory whose database already holds table (EmbeddedConfig.RequireTable),
// and creates nothing otherwise; the error wraps ErrNoStore. A server
// (clickhouse://, http(s)://) creates nothing on open either way.
func OpenExisting(ctx context.Context, dsn, table string) (Store, error) {
	return open(ctx, dsn, table)
}

func open(ctx context.Context, dsn, requireTable string) (Store, error) {
	d, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	switch d.Scheme {
	case "chdb":
		return OpenEmbedded(ctx, EmbeddedConfig{Dir: d.Dir, Database: d.Database, Connections: d.Connections, RequireTable: requireTable})
	case "clickhouse":
		return openNative(ctx, d)
	default:
		return openHTTP(ctx, d)
	}
}
