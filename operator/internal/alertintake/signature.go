package alertintake

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Reasons a webhook request is refused (the webhook rejected metric).
const (
	rejectMethod       = "method"            // 405
	rejectTooLarge     = "too_large"         // 413
	rejectReadError    = "read_error"        // 400: the body could not be read whole
	rejectMalformed    = "malformed"         // 400
	rejectMissingSig   = "missing_signature" // 401 ...
	rejectMissingTS    = "missing_timestamp"
	rejectBadTS        = "bad_timestamp"
	rejectStaleTS      = "stale_timestamp"
	rejectFutureTS     = "future_timestamp"
	rejectBadSignature = "bad_signature"
	rejectReplayed     = "replayed"
	// rejectSignedBeforeStart: 503, a Grafana request signed before this
	// webhook (a new leader) started serving; see Webhook.servingSince.
	rejectSignedBeforeStart = "signed_before_start"
	rejectMissingToken      = "missing_token"
	rejectBadToken          = "bad_token"
	rejectSinkUnavailable   = "sink_unavailable" // 503
)

// checkGrafanaTimestamp parses the timestamp header Grafana sends (Unix
// seconds, decimal, as strconv.FormatInt writes it) and checks it is within
// window of now. It returns a reject reason, or "".
func checkGrafanaTimestamp(value string, now time.Time, window time.Duration) (time.Time, string) {
	if value == "" || len(value) > 18 || strings.TrimLeft(value, "0123456789") != "" {
		return time.Time{}, rejectBadTS // also refuses signs, spaces and fractions, which Grafana never sends
	}
	sec, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return time.Time{}, rejectBadTS
	}
	ts := time.Unix(sec, 0)
	switch {
	case now.Sub(ts) > window:
		return ts, rejectStaleTS
	case ts.Sub(now) > window:
		return ts, rejectFutureTS
	}
	return ts, ""
}

// grafanaSignature is what Grafana puts in the signature header: the hex
// HMAC-SHA256, keyed with the contact point's secret, of the timestamp
// header's value, a colon, and the body (grafana/alerting http/hmac.go,
// HMACRoundTripper.sign; Grafana's webhook notifier documentation,
// "HMAC signature").
func grafanaSignature(secret []byte, timestamp string, body []byte) [sha256.Size]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp))
	m.Write([]byte(":"))
	m.Write(body)
	var sum [sha256.Size]byte
	m.Sum(sum[:0])
	return sum
}

// verifyGrafanaSignature checks the signature header against the signed
// timestamp and body in constant time. Grafana writes lowercase hex;
// uppercase is accepted since hex decoding does not care.
func verifyGrafanaSignature(secret []byte, sigHex, timestamp string, body []byte) ([sha256.Size]byte, bool) {
	var got [sha256.Size]byte
	if len(sigHex) != hex.EncodedLen(sha256.Size) {
		return got, false
	}
	if _, err := hex.Decode(got[:], []byte(sigHex)); err != nil {
		return got, false
	}
	want := grafanaSignature(secret, timestamp, body)
	return got, hmac.Equal(got[:], want[:])
}

// tokenDigest is the SHA-256 of a bearer token: tokens are compared by
// digest so that the comparison takes the same time whatever the length
// of the presented token.
func tokenDigest(token []byte) [sha256.Size]byte { return sha256.Sum256(token) }

// bearerMatches checks an Authorization header value against the token's
// digest. It returns a reject reason, or "".
func bearerMatches(header string, want [sha256.Size]byte) string {
	if header == "" {
		return rejectMissingToken
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return rejectBadToken // Basic or another scheme: Alertmanager is configured wrong
	}
	got := tokenDigest([]byte(strings.TrimSpace(token)))
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return rejectBadToken
	}
	return ""
}

// replayGuard remembers the signatures of accepted Grafana requests until
// their timestamp leaves the window, so that a captured request cannot be
// replayed while it is still fresh. Grafana signs each attempt anew with
// the current time, so its own retries never look like replays. At most
// max signatures are kept; the oldest are forgotten first.
type replayGuard struct {
	mu    sync.Mutex
	max   int
	seen  map[[sha256.Size]byte]time.Time // signature → when it may be forgotten
	order []replayEntry                   // insertion order
}

type replayEntry struct {
	sig     [sha256.Size]byte
	forgets time.Time
}

func newReplayGuard(max int) *replayGuard {
	return &replayGuard{max: max, seen: map[[sha256.Size]byte]time.Time{}}
}

// firstSeen records sig and reports whether it was new. forgets is when
// the request's timestamp goes stale: after that, checkGrafanaTimestamp
// refuses it anyway.
func (g *replayGuard) firstSeen(sig [sha256.Size]byte, forgets, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for len(g.order) > 0 && (len(g.order) >= g.max || !g.order[0].forgets.After(now)) {
		e := g.order[0]
		g.order = g.order[1:]
		if g.seen[e.sig].Equal(e.forgets) {
			delete(g.seen, e.sig)
		}
	}
	if t, ok := g.seen[sig]; ok && t.After(now) {
		return false
	}
	g.seen[sig] = forgets
	g.order = append(g.order, replayEntry{sig, forgets})
	return true
}
