package alertsig

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	keyA = Key{ID: "k1", Secret: []byte("0123456789abcdef0123456789abcdef")}
	keyB = Key{ID: "k2", Secret: []byte("fedcba9876543210fedcba9876543210")}
	t0   = time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
)

func record() *kgo.Record {
	return &kgo.Record{
		Topic: "spikehunt.alerts", Key: []byte("billy"),
		Value:   []byte(`{"schema":"spikehunt.alert/v1","alert_id":"spikegroup-11111111111111111111111111111111"}`),
		Headers: []kgo.RecordHeader{{Key: "schema", Value: []byte("spikehunt.alert/v1")}},
	}
}

func mustSigner(t testing.TB, k Key) *Signer {
	t.Helper()
	s, err := NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func mustVerifier(t testing.TB, keys ...Key) *Verifier {
	t.Helper()
	v, err := NewVerifier(VerifierConfig{Keys: keys})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func reasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// The MAC is HMAC-SHA256 of SignedBytes, as schema.md documents: a
// consumer in another language can verify from the document alone.
func TestTheSignatureIsHMACOfTheDocumentedBytes(t *testing.T) {
	r := record()
	mustSigner(t, keyA).Sign(r, t0)
	at := []byte(nil)
	var sig string
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderTime:
			at = h.Value
		case HeaderSignature:
			sig = string(h.Value)
		}
	}
	if string(at) != "1795662000000" {
		t.Errorf("%s = %s, want Unix milliseconds 1795662000000", HeaderTime, at)
	}
	m := hmac.New(sha256.New, keyA.Secret)
	m.Write(SignedBytes("k1", "spikehunt.alerts", []byte("billy"), string(at), r.Value))
	if want := string(hexOf(m.Sum(nil))); sig != want {
		t.Errorf("signature %s, want %s", sig, want)
	}
	want := "\x00\x00\x00\x00\x00\x00\x00\x16spikehunt.alert-sig/v1\x00\x00\x00\x00\x00\x00\x00\x02k1"
	if got := SignedBytes("k1", "", nil, "", nil); !strings.HasPrefix(string(got), want) || len(got) != len(want)+4*8 {
		t.Errorf("SignedBytes = %q, want %q and four empty fields", got, want)
	}
}

func hexOf(b []byte) []byte {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return out
}

// Every way a record can fail is refused with its own reason, and a
// record signed by either of two keys (a rotation) passes.
func TestVerifyRefusesEveryForgeryWithItsReason(t *testing.T) {
	v := mustVerifier(t, keyA, keyB)
	signed := func(k Key, at time.Time, edit func(*kgo.Record)) *kgo.Record {
		r := record()
		mustSigner(t, k).Sign(r, at)
		if edit != nil {
			edit(r)
		}
		return r
	}
	setHeader := func(name, value string) func(*kgo.Record) {
		return func(r *kgo.Record) {
			for i := range r.Headers {
				if r.Headers[i].Key == name {
					r.Headers[i].Value = []byte(value)
				}
			}
		}
	}
	for _, c := range []struct {
		name   string
		r      *kgo.Record
		reason string
	}{
		{"signed with the current key", signed(keyA, t0, nil), ""},
		{"signed with the next key", signed(keyB, t0, nil), ""},
		{"signed 59 minutes ago", signed(keyA, t0.Add(-59*time.Minute), nil), ""},
		{"signed 4 minutes ahead", signed(keyA, t0.Add(4*time.Minute), nil), ""},
		{"unsigned", record(), ReasonUnsigned},
		{"a secret nobody holds under a known id", signed(Key{ID: "k1", Secret: bytes.Repeat([]byte("x"), 32)}, t0, nil), ReasonBadSignature},
		{"an unknown key id", signed(Key{ID: "k9", Secret: keyA.Secret}, t0, nil), ReasonUnknownKey},
		{"tampered value", signed(keyA, t0, func(r *kgo.Record) { r.Value = bytes.Replace(r.Value, []byte("1111"), []byte("2222"), 1) }), ReasonBadSignature},
		{"another record key", signed(keyA, t0, func(r *kgo.Record) { r.Key = []byte("checkout") }), ReasonBadSignature},
		{"another topic", signed(keyA, t0, func(r *kgo.Record) { r.Topic = "spikehunt.alerts.test" }), ReasonBadSignature},
		{"the time moved forward", signed(keyA, t0.Add(-2*time.Hour), setHeader(HeaderTime, "1795662000000")), ReasonBadSignature},
		{"the key id swapped for another held key", signed(keyA, t0, setHeader(HeaderKeyID, "k2")), ReasonBadSignature},
		{"replayed after two hours", signed(keyA, t0.Add(-2*time.Hour), nil), ReasonStale},
		{"signed an hour ahead", signed(keyA, t0.Add(time.Hour), nil), ReasonFuture},
		{"no time header", signed(keyA, t0, func(r *kgo.Record) { r.Headers = r.Headers[:len(r.Headers)-2] }), ReasonMalformed},
		{"a header twice", signed(keyA, t0, func(r *kgo.Record) { r.Headers = append(r.Headers, r.Headers[len(r.Headers)-1]) }), ReasonMalformed},
		{"a time with a sign", signed(keyA, t0, setHeader(HeaderTime, "+1795662000000")), ReasonMalformed},
		{"a time with a leading zero", signed(keyA, t0, setHeader(HeaderTime, "01795662000000")), ReasonMalformed},
		{"a short signature", signed(keyA, t0, setHeader(HeaderSignature, "abcd")), ReasonMalformed},
		{"a signature that is not hex", signed(keyA, t0, setHeader(HeaderSignature, strings.Repeat("zz", 32))), ReasonMalformed},
	} {
		t.Run(c.name, func(t *testing.T) {
			id, err := v.Verify(c.r, t0)
			if got := reasonOf(err); got != c.reason || (c.reason == "" && err != nil) {
				t.Fatalf("Verify = %q, %v; want reason %q", id, err, c.reason)
			}
			if c.reason == ReasonUnsigned && !errors.Is(err, ErrUnsigned) {
				t.Errorf("errors.Is(%v, ErrUnsigned) = false", err)
			}
			if c.reason != ReasonUnsigned && errors.Is(err, ErrUnsigned) {
				t.Errorf("errors.Is(%v, ErrUnsigned) = true", err)
			}
		})
	}
}

// Signing again (a resend) replaces the old signature headers instead of
// adding a second set, which the verifier would refuse.
func TestSigningAgainReplacesTheSignature(t *testing.T) {
	r := record()
	s := mustSigner(t, keyA)
	s.Sign(r, t0.Add(-3*time.Hour))
	s.Sign(r, t0)
	if len(r.Headers) != 4 {
		t.Errorf("%d headers after two signatures, want schema + 3", len(r.Headers))
	}
	if _, err := mustVerifier(t, keyA).Verify(r, t0); err != nil {
		t.Error(err)
	}
}

// A mounted Secret: files named after the key ids, plus the ..data link
// and timestamped folder the kubelet makes, which are not keys.
func TestLoadKeyDirReadsAMountedSecret(t *testing.T) {
	dir := t.TempDir()
	ts := filepath.Join(dir, "..2026_11_26_03_00_00.000000001")
	if err := os.Mkdir(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for id, secret := range map[string]string{"k1": string(keyA.Secret) + "\n", "k2": string(keyB.Secret)} {
		if err := os.WriteFile(filepath.Join(ts, id), []byte(secret), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, link := range [][2]string{{filepath.Base(ts), "..data"}, {"..data/k1", "k1"}, {"..data/k2", "k2"}} {
		if err := os.Symlink(link[0], filepath.Join(dir, link[1])); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := LoadKeyDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0].ID != "k1" || string(keys[0].Secret) != string(keyA.Secret) || keys[1].ID != "k2" {
		t.Errorf("keys = %+v, want k1 (newline trimmed) and k2", keys)
	}
	short := t.TempDir()
	if err := os.WriteFile(filepath.Join(short, "k1"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyDir(short); err == nil || !strings.Contains(err.Error(), "openssl rand -hex 32") {
		t.Errorf("a 6-byte key: %v, want an error saying how to make one", err)
	}
	if _, err := LoadKeyDir(t.TempDir()); err == nil {
		t.Error("an empty folder gave no error")
	}
}

func TestVerifierConfigValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  VerifierConfig
		want string
	}{
		{"no key", VerifierConfig{}, "no verification key"},
		{"an id twice", VerifierConfig{Keys: []Key{keyA, keyA}}, "given twice"},
		{"a bad id", VerifierConfig{Keys: []Key{{ID: "../k", Secret: keyA.Secret}}}, "key id"},
		{"max age too long", VerifierConfig{Keys: []Key{keyA}, MaxAge: 30 * 24 * time.Hour}, "max age"},
		{"skew too small", VerifierConfig{Keys: []Key{keyA}, MaxSkew: time.Millisecond}, "max skew"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Validate = %v, want %q", err, c.want)
			}
		})
	}
}

// The cost of verifying one alert of the size the detector sends (a
// spike group with 20 hosts is about 1.5 KiB).
func BenchmarkVerify(b *testing.B) {
	v := mustVerifier(b, keyA, keyB)
	r := record()
	r.Value = bytes.Repeat([]byte("x"), 1536)
	mustSigner(b, keyA).Sign(r, t0)
	b.SetBytes(int64(len(r.Value)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := v.Verify(r, t0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "alerts.verify_ns_per_alert:ns")
}

func BenchmarkSign(b *testing.B) {
	s := mustSigner(b, keyA)
	r := record()
	r.Value = bytes.Repeat([]byte("x"), 1536)
	b.SetBytes(int64(len(r.Value)))
	b.ReportAllocs()
	for b.Loop() {
		s.Sign(r, t0)
	}
}

// Verify is a decoder of untrusted headers: it never panics, and accepts
// a record only if it carries a valid MAC for its exact bytes.
func FuzzVerify(f *testing.F) {
	r := record()
	mustSigner(f, keyA).Sign(r, t0)
	f.Add(r.Key, r.Value, []byte("k1"), []byte("1795662000000"), r.Headers[3].Value)
	f.Add([]byte(""), []byte("{}"), []byte("k2"), []byte("0"), []byte("00"))
	v := mustVerifier(f, keyA, keyB)
	f.Fuzz(func(t *testing.T, key, value, keyID, at, sig []byte) {
		r := &kgo.Record{Topic: "spikehunt.alerts", Key: key, Value: value, Headers: []kgo.RecordHeader{
			{Key: HeaderKeyID, Value: keyID}, {Key: HeaderTime, Value: at}, {Key: HeaderSignature, Value: sig},
		}}
		id, err := v.Verify(r, t0)
		if err != nil {
			if reasonOf(err) == "" {
				t.Fatalf("an error without a reason: %v", err)
			}
			return
		}
		k := keyA
		if id == keyB.ID {
			k = keyB
		}
		m := hmac.New(sha256.New, k.Secret)
		m.Write(SignedBytes(id, r.Topic, key, string(at), value))
		if string(hexOf(m.Sum(nil))) != string(sig) {
			t.Fatalf("accepted a record whose signature is not its MAC")
		}
	})
}
