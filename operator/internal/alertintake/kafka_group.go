package alertintake

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// unassignedWarnAfter is how long the consumer may hold no partition of an
// existing alerts topic before it says so: a group forms in seconds, so a
// minute without a partition means another member holds them (a second
// operator with the same group) or the group cannot form.
const unassignedWarnAfter = time.Minute

// groupWatch follows which partitions of the alerts topic this member of
// the group owns, logs each change, and warns when it owns none for
// unassignedWarnAfter while the topic exists. Without it an alert that
// another member consumed, or a group that never formed, leaves no trace
// in the operator's log.
type groupWatch struct {
	log   *slog.Logger
	topic string
	group string
	// warnAfter: unassignedWarnAfter, shorter in tests.
	warnAfter time.Duration
	owned     atomic.Int64
	// noneSince: when the member last went from some partitions to none
	// (or started); zero while it owns some.
	noneSince atomic.Int64
	setGauge  func(float64)
}

func newGroupWatch(log *slog.Logger, topic, group string, setGauge func(float64)) *groupWatch {
	return &groupWatch{log: log, topic: topic, group: group, warnAfter: unassignedWarnAfter, setGauge: setGauge}
}

// start marks the member's joining at now, when Run begins: a standby that
// became the leader hours after it was built has owned nothing only since.
func (g *groupWatch) start(now time.Time) {
	g.owned.Store(0)
	g.setGauge(0)
	g.noneSince.Store(now.UnixNano())
}

// options are the client options that report the group's assignments.
func (g *groupWatch) options() []kgo.Opt {
	return []kgo.Opt{
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { g.change("assigned", m, +1) }),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { g.change("revoked", m, -1) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { g.change("lost", m, -1) }),
	}
}

func (g *groupWatch) change(what string, m map[string][]int32, sign int64) {
	ps := m[g.topic]
	if len(ps) == 0 {
		return
	}
	n := g.owned.Add(sign * int64(len(ps)))
	if n < 0 { // a lost after a revoke of the same partitions
		g.owned.Store(0)
		n = 0
	}
	if n == 0 {
		g.noneSince.Store(time.Now().UnixNano())
	} else {
		g.noneSince.Store(0)
	}
	g.setGauge(float64(n))
	g.log.Info("intake: kafka: partitions "+what, "topic", g.topic, "group", g.group, "partitions", ps, "owned", n)
}

// check, called while the topic exists, warns once per episode when the
// member has owned no partition for unassignedWarnAfter, naming the group's
// members as the broker sees them. It returns whether it warned.
func (g *groupWatch) check(ctx context.Context, adm *kadm.Client, now time.Time, warned bool) bool {
	since := g.noneSince.Load()
	if since == 0 {
		return false
	}
	if now.Sub(time.Unix(0, since)) < g.warnAfter {
		return warned
	}
	if warned {
		return true
	}
	g.log.Warn("intake: kafka: this operator owns no partition of the alerts topic; another member of its group holds them "+
		"(a second operator with the same --alerts.kafka.group?) or the group cannot form, and alerts go to whoever holds them",
		"topic", g.topic, "group", g.group, "for", now.Sub(time.Unix(0, since)).Round(time.Second), "members", describeGroup(ctx, adm, g.group))
	return true
}

// describeGroup names the group's members and what they own, as the broker
// sees them, or why it could not tell.
func describeGroup(ctx context.Context, adm *kadm.Client, group string) string {
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	gs, err := adm.DescribeGroups(dctx, group)
	if err != nil {
		return "unknown: " + err.Error()
	}
	d, ok := gs[group]
	if !ok {
		return "unknown: the broker did not describe the group"
	}
	if d.Err != nil {
		return "unknown: " + d.Err.Error()
	}
	if len(d.Members) == 0 {
		return fmt.Sprintf("none (group state %s)", d.State)
	}
	var out []string
	for _, m := range d.Members {
		owns := ""
		if a, ok := m.Assigned.AsConsumer(); ok {
			var parts []string
			for _, t := range a.Topics {
				parts = append(parts, fmt.Sprintf("%s%v", t.Topic, t.Partitions))
			}
			owns = " owns " + strings.Join(parts, ",")
		}
		out = append(out, fmt.Sprintf("%s@%s%s", m.ClientID, m.ClientHost, owns))
	}
	sort.Strings(out)
	return fmt.Sprintf("%s (group state %s)", strings.Join(out, "; "), d.State)
}

// kgoLogger passes franz-go's own messages (group joins and syncs, broker
// errors) to the intake's log at Info and above. Each message text is
// logged at most once per kgoLogEvery; how many were held back is logged
// with the next one, so a broker outage cannot flood the log.
type kgoLogger struct {
	log *slog.Logger

	mu   sync.Mutex
	last map[string]kgoLogSeen
}

type kgoLogSeen struct {
	at     time.Time
	missed int
}

const kgoLogEvery = 30 * time.Second

func newKgoLogger(log *slog.Logger) *kgoLogger {
	return &kgoLogger{log: log, last: map[string]kgoLogSeen{}}
}

func (k *kgoLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (k *kgoLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	now := time.Now()
	k.mu.Lock()
	seen := k.last[msg]
	if !seen.at.IsZero() && now.Sub(seen.at) < kgoLogEvery {
		seen.missed++
		k.last[msg] = seen
		k.mu.Unlock()
		return
	}
	if len(k.last) > 256 { // message texts are franz-go's constants; bound it anyway
		clear(k.last)
	}
	k.last[msg] = kgoLogSeen{at: now}
	k.mu.Unlock()
	l := slog.LevelInfo
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelDebug:
		l = slog.LevelDebug
	}
	if seen.missed > 0 {
		keyvals = append(keyvals, "same_message_held_back", seen.missed)
	}
	k.log.Log(context.Background(), l, "intake: kafka: client: "+msg, keyvals...)
}
