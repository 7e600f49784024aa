package alertintake

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spikehunt/spikehunt/internal/vocab"
)

// Source says where an Alert came from.
type Source string

// Sources.
const (
	SourceKafka        Source = "kafka"        // the detector, through the spikehunt.alerts topic
	SourceGrafana      Source = "grafana"      // a Grafana alerting webhook contact point
	SourceAlertmanager Source = "alertmanager" // a Prometheus Alertmanager webhook receiver
)

// PatternClass is a fleet pattern class (docs/design.md §5), or "" when the
// alert does not name one (a spike-group alert, a webhook alert without a
// pattern_class label).
type PatternClass string

// The classes the detector knows today. The detector's schema allows new
// classes to appear, so a well-formed class not listed here is passed on
// as is; the controllers match classes by equality.
const (
	FleetRecurrent    PatternClass = PatternClass(vocab.ClassFleetRecurrent)
	FleetSynchronized PatternClass = PatternClass(vocab.ClassFleetSynchronized)
	IsolatedHost      PatternClass = PatternClass(vocab.ClassIsolatedHost)
)

// Alert is one outside alert, normalized. Only firing alerts become an
// Alert: a resolved Grafana or Alertmanager alert and a resolved detector
// pattern are counted and dropped.
type Alert struct {
	Source Source
	// Key identifies the alert across re-sends, for deduplication: the
	// same alert delivered twice (a Kafka redelivery, a webhook retry or
	// repeat notification) has the same Key. It starts with the source:
	//   - kafka/<alert_id> (the detector's alert_id, a hash of what
	//     defines the alert);
	//   - grafana/<h>@<s> and alertmanager/<h>@<s>: h is a hash of the
	//     alert's full label set, s its startsAt in Unix seconds, so that
	//     the same alert firing again after it resolved is a new Key.
	Key          string
	Service      string
	PatternClass PatternClass
	// PatternKey names the pattern for the per-pattern budget, "" when the
	// alert is not about a pattern (the policy then counts by service):
	// the detector's pattern_id, or <service>/<pattern_class> for a
	// webhook alert with a pattern_class label (the form the detector's
	// pattern ids take, so both sources share one budget).
	PatternKey string
	// HWClasses are the hardware classes the alert singles out; empty
	// means it concerns every class. A spike group lists the classes of
	// its windows, most windows first; a pattern lists them only when its
	// modifiers include hw-class-skewed, and then the classes that spike
	// more often than the fleet (skew above 1), most skewed first; a
	// webhook alert lists its hw_class label, in label order.
	HWClasses []string
	// Hosts are the hosts the alert names: for detector alerts the spike
	// group's hosts or the pattern's sample of affected hosts (at most 20
	// either way), for webhook alerts the host label.
	Hosts []string
	// WindowStart and WindowEnd bound what the alert is about, zero when
	// unknown: a spike group's first window start and last window end, a
	// pattern's look-back, a webhook alert's startsAt (and no end: a firing
	// alert's endsAt is an expiry, not the end of anything).
	WindowStart, WindowEnd time.Time
	// ReceivedAt is when the intake accepted the alert.
	ReceivedAt time.Time
	// RawID is the source's own id: the detector's alert_id, or the
	// fingerprint Grafana or Alertmanager sent ("" when it sent none).
	RawID string
}

// Sink receives accepted alerts: the firing alerts of one webhook request,
// or those of one Kafka poll, in order. Emit is called concurrently (see
// the package doc) and the slice is the sink's after the call. An error
// means the alerts were not taken: the webhook answers 503 and the sender
// retries; the Kafka consumer retries with backoff and commits nothing
// meanwhile. Emit should return promptly when ctx ends.
type Sink interface {
	Emit(ctx context.Context, alerts []Alert) error
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(ctx context.Context, alerts []Alert) error

// Emit calls f.
func (f SinkFunc) Emit(ctx context.Context, alerts []Alert) error { return f(ctx, alerts) }

// ChannelSink sends each alert on ch in order, waiting while ch is full
// until ctx ends; the channel's capacity is the backlog the intake may
// build before senders see 503s and the Kafka consumer stops polling. When
// ctx ends midway, the alerts already sent stay sent (they come again with
// the retry, under the same Key).
func ChannelSink(ch chan<- Alert) Sink {
	return SinkFunc(func(ctx context.Context, alerts []Alert) error {
		for _, a := range alerts {
			select {
			case ch <- a:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
}

// Clock tells the time; tests inject their own.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Bounds on the strings an alert carries into the operator. Label values
// end up in Kubernetes objects and logs; a longer or binary value is a
// broken or hostile sender, not a service name.
const maxValueLen = 256

var classPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// cleanValue trims s and checks it is printable UTF-8 of bounded length.
func cleanValue(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if len(s) > maxValueLen || !utf8.ValidString(s) {
		return "", false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return "", false
		}
	}
	return s, true
}

// cleanList cleans each value, drops empty ones and repeats (the first
// stays), and keeps the order. It returns nil for an empty result.
func cleanList(values []string) ([]string, bool) {
	var out []string
	for _, v := range values {
		c, ok := cleanValue(v)
		if !ok {
			return nil, false
		}
		if c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, true
}

// cleanClass checks a pattern class: "" or a lowercase token.
func cleanClass(s string) (PatternClass, bool) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", true
	}
	if !classPattern.MatchString(s) {
		return "", false
	}
	return PatternClass(s), true
}

// Label names a webhook alert carries spikehunt's facts in. hw_class and
// host may list several values separated by commas.
const (
	labelService      = "service"
	labelPatternClass = "pattern_class"
	labelHWClass      = "hw_class"
	labelHost         = "host"
)

// Reasons an alert yields no Alert (the alerts_skipped metrics).
const (
	skipResolved      = "resolved"
	skipNoService     = "no_service"
	skipInvalidLabels = "invalid_labels"
)

// alertFromLabels normalizes a firing webhook alert. A non-empty skip
// reason means it yields no Alert.
func alertFromLabels(src Source, labels map[string]string, startsAt, received time.Time, fingerprint string) (Alert, string) {
	service, ok := cleanValue(labels[labelService])
	if !ok {
		return Alert{}, skipInvalidLabels
	}
	if service == "" {
		return Alert{}, skipNoService
	}
	class, ok := cleanClass(labels[labelPatternClass])
	if !ok {
		return Alert{}, skipInvalidLabels
	}
	hw, ok := cleanList(strings.Split(labels[labelHWClass], ","))
	if !ok {
		return Alert{}, skipInvalidLabels
	}
	hosts, ok := cleanList(strings.Split(labels[labelHost], ","))
	if !ok {
		return Alert{}, skipInvalidLabels
	}
	raw, ok := cleanValue(fingerprint)
	if !ok {
		raw = "" // an id we cannot show is no id; the Key does not use it
	}
	key := ""
	if class != "" {
		key = service + "/" + string(class)
	}
	return Alert{
		Source:       src,
		Key:          webhookKey(src, labels, startsAt),
		Service:      service,
		PatternClass: class,
		PatternKey:   key,
		HWClasses:    hw,
		Hosts:        hosts,
		WindowStart:  startsAt,
		ReceivedAt:   received,
		RawID:        raw,
	}, ""
}

// webhookKey hashes the label set itself rather than trusting the sender's
// fingerprint: Grafana and Alertmanager compute theirs differently, and a
// key of our own cannot collide by a sender's mistake.
func webhookKey(src Source, labels map[string]string, startsAt time.Time) string {
	names := make([]string, 0, len(labels))
	for n := range labels {
		names = append(names, n)
	}
	slices.Sort(names)
	h := sha256.New()
	for _, n := range names {
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(labels[n]))
		h.Write([]byte{0})
	}
	key := string(src) + "/" + hex.EncodeToString(h.Sum(nil)[:16])
	if !startsAt.IsZero() {
		key += "@" + strconv.FormatInt(startsAt.Unix(), 10)
	}
	return key
}
