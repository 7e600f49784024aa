package ingest

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// overlong is a value of n bytes of two-byte characters, so that a cut
// at MaxValueBytes that ignored characters would split one.
func overlong(n int) string { return strings.Repeat("é", n/2) + "x" }

// manyAttrsPoint adds to ms a Sum point with, in wire order: a value of
// 5,000 bytes, a key of 300 bytes, a device of 2,000 bytes and 300 short
// attributes.
func manyAttrsPoint(ms pmetric.MetricSlice, start time.Time) {
	dp := validSum(ms, "hostile")
	dp.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
	dp.SetTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Second)))
	a := dp.Attributes()
	a.PutStr("long", overlong(5000))
	a.PutStr(strings.Repeat("k", MaxAttrKeyBytes+44), "v")
	a.PutStr("network.interface.name", overlong(2000))
	for i := range 300 {
		a.PutStr(fmt.Sprintf("a%03d", i), "v")
	}
}

// One point's attributes all used to go into its attrs map, bounded only
// by the message size. The row is still inserted, with the first MaxPointAttrs attributes, none with a
// key over MaxAttrKeyBytes, values cut to MaxValueBytes at a character
// boundary; what was cut is counted by reason.
func TestAPointKeepsAtMost128AttributesOfBoundedSizeAndCountsWhatWasCut(t *testing.T) {
	c := NewCounterRows()
	rows, err := c.AppendMetrics(metricMsg(t, func(ms pmetric.MetricSlice) { manyAttrsPoint(ms, fixtureEpoch) }))
	if err != nil || rows != 1 {
		t.Fatalf("AppendMetrics: %d rows, %v; want the row", rows, err)
	}
	kv := inputCol[*proto.ColMap[string, string]](t, c.Input(), "attrs").RowKV(0)
	if len(kv) != MaxPointAttrs {
		t.Fatalf("attrs holds %d attributes, want %d", len(kv), MaxPointAttrs)
	}
	if kv[0].Key != "long" || len(kv[0].Value) > MaxValueBytes || len(kv[0].Value) < MaxValueBytes-3 || !utf8.ValidString(kv[0].Value) {
		t.Errorf("first attribute %q of %d bytes (valid UTF-8: %v); want long, cut to at most %d bytes at a character boundary",
			kv[0].Key, len(kv[0].Value), utf8.ValidString(kv[0].Value), MaxValueBytes)
	}
	// The first 127 short ones follow, in wire order.
	if kv[1].Key != "a000" || kv[MaxPointAttrs-1].Key != fmt.Sprintf("a%03d", MaxPointAttrs-2) {
		t.Errorf("attrs run %s … %s, want a000 … a%03d", kv[1].Key, kv[MaxPointAttrs-1].Key, MaxPointAttrs-2)
	}
	if dev := inputCol[*proto.ColLowCardinality[string]](t, c.Input(), "device").Row(0); len(dev) > MaxValueBytes || !utf8.ValidString(dev) {
		t.Errorf("device of %d bytes, want at most %d, valid UTF-8", len(dev), MaxValueBytes)
	}
	want := Capped{TooMany: 300 - (MaxPointAttrs - 1), KeyTooLong: 1, ValueTooLong: 2}
	if diff := cmp.Diff(want, c.Capped()); diff != "" {
		t.Errorf("Capped (-want +got):\n%s", diff)
	}
	// The next message starts its own count.
	if _, err := c.AppendMetrics(fixturePointsMsg(t, fixtureResource, fixturePoints())); err != nil || c.Capped() != (Capped{}) {
		t.Errorf("an ordinary message after it: %v, Capped %+v; want nothing cut", err, c.Capped())
	}
}

// A route (or span name, service, host) of 100 KiB went whole into a
// dictionary column. Both span decoders now cut it to MaxValueBytes at
// a character boundary, alike, and count it.
func TestAnOverlongRouteIsCutAlikeByBothSpanDecoders(t *testing.T) {
	msg := oneSpanMsg(t, func(s ptrace.Span) { s.Attributes().PutStr("http.route", overlong(100<<10)) })
	direct, pdata := directAndPdata(t, msg)
	if direct.err != nil || pdata.err != nil || direct.rows != 1 {
		t.Fatalf("direct: %d rows, %v; pdata: %v; want the row", direct.rows, direct.err, pdata.err)
	}
	if diff := cmp.Diff(pdata.batch, direct.batch); diff != "" {
		t.Fatalf("batches (-pdata +direct):\n%s", diff)
	}
	got := direct.batch[len(direct.batch)-1].Endpoint
	if len(got) > MaxValueBytes || len(got) < MaxValueBytes-3 || !utf8.ValidString(got) || !strings.HasPrefix(overlong(100<<10), got) {
		t.Errorf("endpoint of %d bytes (valid UTF-8: %v), want the route's first %d bytes or fewer, cut between characters", len(got), utf8.ValidString(got), MaxValueBytes)
	}
	for name, c := range map[string]Capped{"direct": direct.capped, "pdata": pdata.capped} {
		if c != (Capped{ValueTooLong: 1}) {
			t.Errorf("%s: Capped %+v, want one value cut", name, c)
		}
	}
}

// Bytes that are not UTF-8 still keep nearly all of the limit: the cut
// backs off at most three bytes looking for a character's start.
func TestCappedLenBacksOffAtMostThreeBytes(t *testing.T) {
	for _, tc := range []struct {
		v    string
		want int
	}{
		{strings.Repeat("a", MaxValueBytes), MaxValueBytes},
		{strings.Repeat("a", MaxValueBytes+1), MaxValueBytes},
		{overlong(MaxValueBytes + 10), MaxValueBytes},                // "é" pairs: byte MaxValueBytes starts one
		{"a" + overlong(MaxValueBytes+10), MaxValueBytes - 1},        // … here it is the second byte of one
		{strings.Repeat("\x80", MaxValueBytes+5), MaxValueBytes - 3}, // no character starts anywhere
	} {
		if got := cappedLen(tc.v); got != tc.want {
			t.Errorf("cappedLen(%d bytes %q…) = %d, want %d", len(tc.v), tc.v[:4], got, tc.want)
		}
	}
}

// Through Kafka: the row is inserted and
// spikehunt_ingest_attributes_capped_total counts what was cut, by table
// and reason; nothing is dead-lettered.
func TestAttributesCutFromARowAreCountedByReasonAndTheRowIsInserted(t *testing.T) {
	p := newPipeline(t, 1)
	in, _ := p.run(t, p.st)
	now := t0 // newPipeline's time window is around t0
	p.produce(t,
		&kgo.Record{Topic: p.cfg.MetricsTopic, Key: []byte("web-7"), Value: metricMsg(t, func(ms pmetric.MetricSlice) { manyAttrsPoint(ms, now) })},
		&kgo.Record{Topic: p.cfg.SpansTopic, Key: []byte("web-7"), Value: traceMsg(t, func(td ptrace.Traces) {
			s := validSpan(spanScope(td), "GET /x")
			s.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
			s.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Millisecond)))
			s.Attributes().PutStr("http.route", overlong(10<<10))
		})})
	p.waitFor(t, "SELECT count(), max(length(mapKeys(attrs))) FROM counters WHERE metric = 'hostile'", fmt.Sprintf("1\t%d", MaxPointAttrs))
	p.waitFor(t, "SELECT count(), max(length(endpoint)) FROM requests", fmt.Sprintf("1\t%d", MaxValueBytes))
	for _, tc := range []struct {
		table, reason string
		want          float64
	}{
		{"counters", capTooMany, 300 - (MaxPointAttrs - 1)},
		{"counters", capKeyTooLong, 1},
		{"counters", capValueTooLong, 2},
		{"requests", capValueTooLong, 1},
	} {
		if got := testutil.ToFloat64(in.m.capped.WithLabelValues(tc.table, tc.reason)); got != tc.want {
			t.Errorf("spikehunt_ingest_attributes_capped_total{table=%q,reason=%q} = %v, want %v", tc.table, tc.reason, got, tc.want)
		}
	}
	if n := testutil.CollectAndCount(in.m.deadLetters); n != 0 {
		t.Errorf("dead letters counted under %d reasons, want none", n)
	}
}
