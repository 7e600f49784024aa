package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// DefaultOpenWait is how long the long-running commands (ingest, detect,
// the operator) wait for a server store that does not answer yet: on a
// fresh install they start beside it, and a crash loop while it boots
// reads as a broken install.
const DefaultOpenWait = 2 * time.Minute

// OpenWaiting opens the store a DSN names like Open, retrying while the
// server cannot be reached (refused, unresolved, timed out, or a proxy's
// 404, 502, 503 or 504 without a ClickHouse error) for up to wait,
// and calling waiting before each retry with the error and the time left.
// Any other error (a bad DSN, refused credentials, a server that answers
// with an error) returns at once: waiting cannot fix it. An embedded
// store (chdb://) is opened once. wait 0 is Open.
func OpenWaiting(ctx context.Context, dsn string, wait time.Duration, waiting func(err error, left time.Duration)) (Store, error) {
	deadline := time.Now().Add(wait)
	backoff := 500 * time.Millisecond
	for {
		st, err := Open(ctx, dsn)
		if err == nil || !unreachable(err) {
			return st, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			if wait > 0 {
				return nil, fmt.Errorf("%w (waited %v for the store to answer)", err, wait)
			}
			return nil, err
		}
		if waiting != nil {
			waiting(err, left)
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(err, ctx.Err())
		case <-time.After(min(backoff, left)):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// unreachable reports whether err says that no ClickHouse answered:
// nothing did (refused, unresolved, timed out), or something that is not
// ClickHouse did, with a gateway's status and no ClickHouse error code (a
// proxy or load balancer in front of a server that is not up yet; an
// address nothing routes to yet, where a network's egress proxy answers).
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &op) || errors.As(err, &dns) {
		return true
	}
	var ex *Exception
	if errors.As(err, &ex) && ex.Code == 0 {
		switch ex.HTTPStatus {
		case http.StatusNotFound, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true
		}
	}
	var timeout interface{ Timeout() bool }
	return errors.As(err, &timeout) && timeout.Timeout()
}
