// Package alertsig signs and verifies the records of the alerts topic
// (internal/alertdoc/schema.md, "Signatures"). The detector signs each
// record with one current key; the operator verifies with every key it
// holds, by the key id the record names, so that a key can be rotated
// without a gap. Anyone who can write to the topic but holds no key can
// no longer make the operator widen captures.
//
// It imports only franz-go's record type and the standard library, so
// that both the detector (pipelines/services/alerts) and the operator
// (operator/internal/alertintake) use this one definition of the signed bytes.
//
// A Signer and a Verifier are safe for concurrent use and hold their keys
// in memory for their lifetime: a rotated key takes a new one (a restart).
package alertsig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/internal/defaults"
)

// Record headers of a signed record.
const (
	// HeaderKeyID names the key that made the signature.
	HeaderKeyID = "spikehunt-sig-key-id"
	// HeaderTime is when the record was signed, Unix milliseconds in
	// decimal without sign or leading zeros.
	HeaderTime = "spikehunt-sig-time"
	// HeaderSignature is the lowercase hex HMAC-SHA256 of SignedBytes.
	HeaderSignature = "spikehunt-sig"
)

// Version is the first field of the signed bytes: a later scheme signs
// different bytes, so a v1 signature never verifies under it.
const Version = "spikehunt.alert-sig/v1"

// Bounds on keys. A key shorter than 32 bytes is guessable offline from one
// signed record; a "key" of kilobytes is the wrong file.
const (
	MinKeyLen = 32
	MaxKeyLen = 4 << 10
)

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// Key is one shared secret and its id.
type Key struct {
	ID     string
	Secret []byte
}

func (k Key) validate() error {
	if !keyIDPattern.MatchString(k.ID) {
		return fmt.Errorf("alertsig: key id %.80q: want 1–63 of A-Z a-z 0-9 . _ -, starting with a letter or digit", k.ID)
	}
	if len(k.Secret) < MinKeyLen || len(k.Secret) > MaxKeyLen {
		return fmt.Errorf("alertsig: key %s is %d bytes, want %d–%d (make one with: openssl rand -hex 32)",
			k.ID, len(k.Secret), MinKeyLen, MaxKeyLen)
	}
	return nil
}

// LoadKeyFile reads one key; its id is the file's base name (as a
// Kubernetes Secret mounted as a volume names its files after its keys).
// One trailing newline is ignored.
func LoadKeyFile(path string) (Key, error) {
	b, err := readSmall(path)
	if err != nil {
		return Key{}, err
	}
	k := Key{ID: filepath.Base(path), Secret: trimNewline(b)}
	if err := k.validate(); err != nil {
		return Key{}, fmt.Errorf("%w (file %s)", err, path)
	}
	return k, nil
}

// LoadKeyDir reads every key of a folder: each regular file (or link to
// one) whose name does not start with a dot is a key named after the file.
// The dot rule skips the ..data links and timestamped folders of a
// mounted Secret. An empty folder is an error.
func LoadKeyDir(dir string) ([]Key, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("alertsig: keys: %w", err)
	}
	var keys []Key
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		p := filepath.Join(dir, e.Name())
		st, err := os.Stat(p) // follows the Secret volume's links
		if err != nil {
			return nil, fmt.Errorf("alertsig: keys: %w", err)
		}
		if !st.Mode().IsRegular() {
			continue
		}
		k, err := LoadKeyFile(p)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("alertsig: keys: no key file in %s (one file per key, named after its id)", dir)
	}
	return keys, nil
}

func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("alertsig: key: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxKeyLen+3))
	if err != nil {
		return nil, fmt.Errorf("alertsig: key: read %s: %w", path, err)
	}
	return b, nil
}

func trimNewline(b []byte) []byte {
	s := strings.TrimSuffix(string(b), "\n")
	return []byte(strings.TrimSuffix(s, "\r"))
}

// SignedBytes are the bytes the MAC covers: Version, then the key id, the
// topic, the record key, the signing time (HeaderTime's value) and the
// record value, each preceded by its length as 8 bytes big-endian so that
// no two different tuples give the same bytes. Binding the topic stops a
// record signed for one topic (a test topic sharing the key) from being
// replayed into another; binding the time bounds a replay to the
// Verifier's window; binding the key id stops a record moving between keys.
func SignedBytes(keyID, topic string, recordKey []byte, signedAt string, value []byte) []byte {
	b := make([]byte, 0, len(Version)+6*8+len(keyID)+len(topic)+len(recordKey)+len(signedAt)+len(value))
	for _, f := range [][]byte{[]byte(Version), []byte(keyID), []byte(topic), recordKey, []byte(signedAt), value} {
		b = binary.BigEndian.AppendUint64(b, uint64(len(f)))
		b = append(b, f...)
	}
	return b
}

// writeSigned feeds SignedBytes into h without building them.
func writeSigned(h hash.Hash, keyID, topic string, recordKey []byte, signedAt string, value []byte) {
	var n [8]byte
	field := func(s []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write(s)
	}
	field([]byte(Version))
	field([]byte(keyID))
	field([]byte(topic))
	field(recordKey)
	field([]byte(signedAt))
	field(value)
}

// Signer signs records with one key.
type Signer struct {
	key  Key
	pool sync.Pool // hash.Hash keyed with key
}

// NewSigner checks the key.
func NewSigner(k Key) (*Signer, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	s := &Signer{key: k}
	s.pool.New = func() any { return hmac.New(sha256.New, k.Secret) }
	return s, nil
}

// KeyID is the id of the signing key.
func (s *Signer) KeyID() string { return s.key.ID }

// Sign adds the signature headers to r, replacing any it had. r.Topic
// must be the topic r is produced to: it is signed.
func (s *Signer) Sign(r *kgo.Record, now time.Time) {
	at := strconv.FormatInt(now.UnixMilli(), 10)
	h := s.pool.Get().(hash.Hash)
	h.Reset()
	writeSigned(h, s.key.ID, r.Topic, r.Key, at, r.Value)
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	s.pool.Put(h)
	kept := r.Headers[:0:0]
	for _, hd := range r.Headers {
		if hd.Key != HeaderKeyID && hd.Key != HeaderTime && hd.Key != HeaderSignature {
			kept = append(kept, hd)
		}
	}
	r.Headers = append(kept,
		kgo.RecordHeader{Key: HeaderKeyID, Value: []byte(s.key.ID)},
		kgo.RecordHeader{Key: HeaderTime, Value: []byte(at)},
		kgo.RecordHeader{Key: HeaderSignature, Value: []byte(hex.EncodeToString(sum[:]))},
	)
}

// Reasons a record is refused; each is a label value of the consumer's
// rejected metric.
const (
	ReasonUnsigned     = "unsigned"             // none of the signature headers
	ReasonMalformed    = "bad_signature_header" // some but not all, one twice, or a value that does not parse
	ReasonUnknownKey   = "unknown_key"          // a key id the Verifier does not hold
	ReasonBadSignature = "bad_signature"        // the MAC does not match: forged, tampered, or another secret under the same id
	ReasonStale        = "stale_signature"      // signed longer ago than MaxAge
	ReasonFuture       = "future_signature"     // signed further ahead than MaxSkew
)

// Error is a refused record; Reason is one of the Reason constants.
type Error struct {
	Reason string
	Detail string
}

func (e *Error) Error() string { return "alertsig: " + e.Reason + ": " + e.Detail }

// ErrUnsigned matches (errors.Is) an Error whose reason is ReasonUnsigned,
// which a consumer that allows unsigned records lets through.
var ErrUnsigned = &Error{Reason: ReasonUnsigned}

// Is makes errors.Is(err, ErrUnsigned) compare reasons.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Reason == e.Reason && t.Detail == ""
}

func refuse(reason, format string, args ...any) error {
	return &Error{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// Defaults of VerifierConfig.
const (
	// DefaultMaxAge bounds how long a signed record may wait in the topic:
	// an operator down for longer than this refuses the backlog as stale
	// (counted), and a captured record can be replayed for at most this
	// long (as the same alert_id, which arms nothing new, see schema.md).
	DefaultMaxAge = time.Hour
	// DefaultMaxSkew is how far ahead of the verifier's clock a signing
	// time may be: the detector's and the operator's clocks disagree by
	// less than this.
	DefaultMaxSkew = 5 * time.Minute
)

// VerifierConfig configures a Verifier. A zero MaxAge or MaxSkew means its
// default (WithDefaults; NewVerifier fills them).
type VerifierConfig struct {
	Keys    []Key
	MaxAge  time.Duration // default DefaultMaxAge, 1m–7d
	MaxSkew time.Duration // default DefaultMaxSkew, 1s–1h
}

// WithDefaults returns c with a zero MaxAge and MaxSkew set to their
// defaults; c itself is not changed.
func (c VerifierConfig) WithDefaults() VerifierConfig {
	defaults.Fill(&c.MaxAge, DefaultMaxAge)
	defaults.Fill(&c.MaxSkew, DefaultMaxSkew)
	return c
}

// Validate checks the keys and bounds of c as NewVerifier would run it,
// its zero fields taken as their defaults. It does not change c.
func (c VerifierConfig) Validate() error {
	c = c.WithDefaults()
	var errs []error
	if len(c.Keys) == 0 {
		errs = append(errs, errors.New("alertsig: no verification key"))
	}
	seen := map[string]bool{}
	for _, k := range c.Keys {
		if err := k.validate(); err != nil {
			errs = append(errs, err)
		}
		if seen[k.ID] {
			errs = append(errs, fmt.Errorf("alertsig: key id %s given twice", k.ID))
		}
		seen[k.ID] = true
	}
	if c.MaxAge < time.Minute || c.MaxAge > 7*24*time.Hour {
		errs = append(errs, fmt.Errorf("alertsig: max age %s, want 1m–168h", c.MaxAge))
	}
	if c.MaxSkew < time.Second || c.MaxSkew > time.Hour {
		errs = append(errs, fmt.Errorf("alertsig: max skew %s, want 1s–1h", c.MaxSkew))
	}
	return errors.Join(errs...)
}

// Verifier checks the signatures of records against a set of keys.
type Verifier struct {
	cfg   VerifierConfig
	pools map[string]*sync.Pool // key id → keyed hash.Hash
}

// NewVerifier checks cfg.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v := &Verifier{cfg: cfg, pools: make(map[string]*sync.Pool, len(cfg.Keys))}
	for _, k := range cfg.Keys {
		secret := k.Secret
		v.pools[k.ID] = &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }}
	}
	return v, nil
}

// KeyIDs lists the ids of the keys v holds, sorted.
func (v *Verifier) KeyIDs() []string {
	ids := make([]string, 0, len(v.pools))
	for id := range v.pools {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Verify checks r's signature, made at most MaxAge before now and at most
// MaxSkew after it, against the key r names. It returns the key id, or an
// *Error. r is not retained or changed.
func (v *Verifier) Verify(r *kgo.Record, now time.Time) (string, error) {
	var keyID, at, sigHex []byte
	var nKey, nAt, nSig int
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderKeyID:
			keyID, nKey = h.Value, nKey+1
		case HeaderTime:
			at, nAt = h.Value, nAt+1
		case HeaderSignature:
			sigHex, nSig = h.Value, nSig+1
		}
	}
	switch {
	case nKey+nAt+nSig == 0:
		return "", refuse(ReasonUnsigned, "the record has none of the headers %s, %s, %s", HeaderKeyID, HeaderTime, HeaderSignature)
	case nKey != 1 || nAt != 1 || nSig != 1:
		return "", refuse(ReasonMalformed, "want each of %s, %s, %s once, have %d, %d, %d", HeaderKeyID, HeaderTime, HeaderSignature, nKey, nAt, nSig)
	}
	pool, ok := v.pools[string(keyID)]
	if !ok {
		return "", refuse(ReasonUnknownKey, "key id %.64q is not one of %s", keyID, strings.Join(v.KeyIDs(), ", "))
	}
	ms, ok := parseMillis(at)
	if !ok {
		return "", refuse(ReasonMalformed, "%s %.32q is not Unix milliseconds", HeaderTime, at)
	}
	var got [sha256.Size]byte
	if len(sigHex) != hex.EncodedLen(sha256.Size) {
		return "", refuse(ReasonMalformed, "%s is %d characters, want %d hex digits", HeaderSignature, len(sigHex), hex.EncodedLen(sha256.Size))
	}
	if _, err := hex.Decode(got[:], sigHex); err != nil {
		return "", refuse(ReasonMalformed, "%s is not hex", HeaderSignature)
	}
	h := pool.Get().(hash.Hash)
	h.Reset()
	writeSigned(h, string(keyID), r.Topic, r.Key, string(at), r.Value)
	var want [sha256.Size]byte
	h.Sum(want[:0])
	pool.Put(h)
	if !hmac.Equal(got[:], want[:]) {
		return "", refuse(ReasonBadSignature, "the signature does not match the record under key %s", keyID)
	}
	// The time is judged after the MAC, so that stale_signature counts only
	// records a key holder signed (a lagging operator, a replay of a real
	// record): forgeries all count as bad_signature.
	signed := time.UnixMilli(ms)
	switch {
	case now.Sub(signed) > v.cfg.MaxAge:
		return "", refuse(ReasonStale, "signed at %s, more than %s before %s", signed.UTC().Format(time.RFC3339), v.cfg.MaxAge, now.UTC().Format(time.RFC3339))
	case signed.Sub(now) > v.cfg.MaxSkew:
		return "", refuse(ReasonFuture, "signed at %s, more than %s after %s", signed.UTC().Format(time.RFC3339), v.cfg.MaxSkew, now.UTC().Format(time.RFC3339))
	}
	return string(keyID), nil
}

// parseMillis accepts what Sign writes: decimal digits, no sign, no
// leading zero, at most 15 digits (past the year 30000).
func parseMillis(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
