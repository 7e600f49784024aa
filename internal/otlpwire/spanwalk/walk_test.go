package spanwalk_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spikehunt/spikehunt/internal/otlpattr"
	"github.com/spikehunt/spikehunt/internal/otlpwire"
	"github.com/spikehunt/spikehunt/internal/otlpwire/spanwalk"
	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// The walk's own properties. Whether it takes what pdata takes, and
// reads what pdata reads, is each decoder's differential fuzz test's
// (FuzzSpanDecoderMatchesPdata in agents/intake and in
// pipelines/services/ingest): this package holds no pdata.

// record is what a sink got, copied out of the message.
type record struct {
	Resources []resource
	Spans     []span
}

type resource struct{ Service, Host, Node, HWClass attr }

type span struct {
	Resource                     int
	TraceID                      [16]byte
	SpanID                       [8]byte
	HasParent                    bool
	Name                         string
	Kind                         int32
	Start, End                   uint64
	StatusCode                   int32
	Route, Weight, Thread        attr
	HTTPStatus, HTTPStatusLegacy attr
}

type attr struct {
	Found bool
	Kind  otlpattr.Kind
	Str   string
	Num   int64
}

func attrOf(a otlpattr.First) attr {
	return attr{a.Found, a.V.Kind, string(a.V.Str), a.V.Num}
}

// recorder is a Sink that keeps everything; failAt > 0 makes its
// failAt-th span fail.
type recorder struct {
	rec    record
	failAt int
}

var errSink = errors.New("the sink refused a span")

func (r *recorder) Resource(res *spanwalk.Resource) error {
	r.rec.Resources = append(r.rec.Resources, resource{attrOf(res.Service), attrOf(res.Host), attrOf(res.Node), attrOf(res.HWClass)})
	return nil
}

func (r *recorder) Span(s *spanwalk.Span) error {
	r.rec.Spans = append(r.rec.Spans, span{
		Resource: len(r.rec.Resources) - 1, TraceID: s.TraceID, SpanID: s.SpanID, HasParent: s.HasParent,
		Name: string(s.Name), Kind: s.Kind, Start: s.Start, End: s.End, StatusCode: s.StatusCode,
		Route: attrOf(s.Route), Weight: attrOf(s.Weight), Thread: attrOf(s.Thread),
		HTTPStatus: attrOf(s.HTTPStatus), HTTPStatusLegacy: attrOf(s.HTTPStatusLegacy),
	})
	if r.failAt > 0 && len(r.rec.Spans) == r.failAt {
		return errSink
	}
	return nil
}

// walk is one walk of msg with fresh scratch.
func walk(msg []byte, o spanwalk.Options) (record, spanwalk.Tally, error) {
	w := spanwalk.Walker{Options: o}
	var r recorder
	err := spanwalk.Walk(&w, msg, &r)
	return r.rec, w.Tally, err
}

func TestWalkReadsWhatTheAgentEncodes(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 123_456_000)
	reqs := []telemetry.Request{
		{Service: "checkout", Endpoint: "POST /pay", Status: "200", Start: t0, Duration: 3 * time.Millisecond,
			TraceID: [16]byte{1, 2}, SpanID: [8]byte{3}, ThreadID: 42, Weight: 10},
		{Service: "billing", Endpoint: "GET /invoice", Status: "ERROR", Start: t0.Add(time.Second), Duration: time.Millisecond,
			TraceID: [16]byte{4}, SpanID: [8]byte{5}},
		{Service: "checkout", Endpoint: "GET /cart", Status: "503", Start: t0.Add(2 * time.Second), Duration: 2 * time.Second,
			TraceID: [16]byte{6}, SpanID: [8]byte{7}, Weight: 3},
	}
	res := telemetry.Resource{HostName: "node-7", HWClass: "gen5"}
	msg := new(otlpwire.SpanEncoder).Append(nil, res, reqs)
	for _, o := range []spanwalk.Options{{}, {MaxDepth: 64, MaxSpans: 3, RefuseGroups: true, MigrateLegacy: true}} {
		got, tally, err := walk(msg, o)
		if err != nil {
			t.Fatalf("%+v: %v", o, err)
		}
		str := func(s string) attr { return attr{Found: true, Kind: otlpattr.Str, Str: s} }
		num := func(n int64) attr { return attr{Found: true, Kind: otlpattr.Int, Num: n} }
		at := func(t time.Time) uint64 { return uint64(t.UnixNano()) }
		want := record{
			Resources: []resource{
				{Service: str("checkout"), Host: str("node-7"), HWClass: str("gen5")},
				{Service: str("billing"), Host: str("node-7"), HWClass: str("gen5")},
			},
			Spans: []span{
				{Resource: 0, TraceID: reqs[0].TraceID, SpanID: reqs[0].SpanID, Name: "POST /pay", Kind: spanwalk.SpanKindServer,
					Start: at(t0), End: at(t0.Add(3 * time.Millisecond)), Thread: num(42), Weight: num(10), HTTPStatus: num(200)},
				{Resource: 0, TraceID: reqs[2].TraceID, SpanID: reqs[2].SpanID, Name: "GET /cart", Kind: spanwalk.SpanKindServer,
					Start: at(t0.Add(2 * time.Second)), End: at(t0.Add(4 * time.Second)), StatusCode: spanwalk.StatusCodeError,
					Weight: num(3), HTTPStatus: num(503)},
				{Resource: 1, TraceID: reqs[1].TraceID, SpanID: reqs[1].SpanID, Name: "GET /invoice", Kind: spanwalk.SpanKindServer,
					Start: at(t0.Add(time.Second)), End: at(t0.Add(time.Second + time.Millisecond)), StatusCode: spanwalk.StatusCodeError,
					Weight: num(1)},
			},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%+v: walked (-want +got):\n%s", o, diff)
		}
		if tally.Spans != 3 || tally.Messages[spanwalk.KindSpan] != 3 || tally.Messages[spanwalk.KindResourceSpans] != 2 {
			t.Errorf("%+v: tally %+v, want 3 spans in 2 resource spans", o, tally)
		}
	}
}

// Hand-made protobuf, for what the agent's encoder never writes.
func pbLen(f protowire.Number, parts ...[]byte) []byte {
	var v []byte
	for _, p := range parts {
		v = append(v, p...)
	}
	return protowire.AppendBytes(protowire.AppendTag(nil, f, protowire.BytesType), v)
}

func pbVarint(f protowire.Number, n uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, f, protowire.VarintType), n)
}

func pbGroup(f protowire.Number, inner ...[]byte) []byte {
	b := protowire.AppendTag(nil, f, protowire.StartGroupType)
	for _, p := range inner {
		b = append(b, p...)
	}
	return protowire.AppendTag(b, f, protowire.EndGroupType)
}

var (
	plainSpan = pbLen(2, pbLen(1, make([]byte, 16)), pbLen(5, []byte("GET /")), pbVarint(6, spanwalk.SpanKindServer),
		pbLen(9, pbLen(1, []byte("http.route")), pbLen(2, pbLen(1, []byte("/users/{id}")))))
	deepValue = func() []byte { // an attribute value nested 70 arrays deep
		v := pbVarint(3, 7)
		for range 70 {
			v = pbLen(5, pbLen(1, v))
		}
		return pbLen(9, pbLen(1, []byte("x")), pbLen(2, v))
	}()
)

func TestOptionsBoundTheWalk(t *testing.T) {
	request := func(scopeSpans ...[]byte) []byte { return pbLen(1, scopeSpans...) }
	for _, tc := range []struct {
		name     string
		msg      []byte
		o        spanwalk.Options
		refused  bool
		spansOut int
	}{
		// pdata's ConsumeUnknown and so the walk: a group ends at the first
		// field inside it that is not a group, and one that ends its
		// message reads as truncated.
		{"an unknown empty group is skipped", request(pbGroup(9), pbLen(2, plainSpan)), spanwalk.Options{}, false, 1},
		{"an unknown group of groups is skipped", request(pbGroup(9, pbGroup(1), pbGroup(2)), pbLen(2, plainSpan)), spanwalk.Options{}, false, 1},
		{"an unknown group ends at its first field", request(pbGroup(9, pbVarint(1, 1)), pbLen(2, plainSpan)), spanwalk.Options{}, true, 0},
		{"an unknown group that ends its message", request(pbLen(2, plainSpan), pbGroup(9)), spanwalk.Options{}, true, 0},
		{"an unknown group is refused with RefuseGroups", request(pbGroup(9), pbLen(2, plainSpan)), spanwalk.Options{RefuseGroups: true}, true, 0},
		{"a group in a known field is refused", request(pbGroup(2)), spanwalk.Options{}, true, 0},
		{"deep attribute values", request(pbLen(2, pbLen(2, plainSpan[2:], deepValue))), spanwalk.Options{}, false, 1},
		{"deep attribute values past MaxDepth", request(pbLen(2, pbLen(2, plainSpan[2:], deepValue))), spanwalk.Options{MaxDepth: 64}, true, 0},
		{"spans up to MaxSpans", request(pbLen(2, plainSpan, plainSpan)), spanwalk.Options{MaxSpans: 2}, false, 2},
		{"spans past MaxSpans", request(pbLen(2, plainSpan, plainSpan)), spanwalk.Options{MaxSpans: 1}, true, 0},
		{"legacy scope spans are checked", request(pbLen(1000, plainSpan)), spanwalk.Options{}, false, 0},
		{"legacy scope spans migrate without scope spans", request(pbLen(1000, plainSpan)), spanwalk.Options{MigrateLegacy: true}, false, 1},
		{"legacy scope spans do not migrate beside scope spans", request(pbLen(1000, plainSpan), pbLen(2)), spanwalk.Options{MigrateLegacy: true}, false, 0},
		{"a malformed legacy span is refused", request(pbLen(1000, pbLen(2, pbLen(1, []byte{1})))), spanwalk.Options{}, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _, err := walk(tc.msg, tc.o)
			if refused := err != nil; refused != tc.refused {
				t.Fatalf("err %v, want refused %v", err, tc.refused)
			}
			if err == nil && len(got.Spans) != tc.spansOut {
				t.Errorf("%d spans passed on, want %d", len(got.Spans), tc.spansOut)
			}
		})
	}
}

// FuzzWalk holds the walk to what it promises whatever the bytes: it
// never panics; its bounds only refuse (a message the bounded walk takes,
// the unbounded one takes alike); MigrateLegacy changes which spans are
// passed on, never the verdict or the tally; MaxSpans refuses exactly the
// messages with more spans; reused scratch walks as fresh scratch does;
// and a sink's error ends the walk.
func FuzzWalk(f *testing.F) {
	t0 := time.Unix(1_700_000_000, 0)
	f.Add(new(otlpwire.SpanEncoder).Append(nil, telemetry.Resource{HostName: "h"}, []telemetry.Request{
		{Service: "a", Endpoint: "/x", Status: "200", Start: t0, Duration: time.Millisecond, TraceID: [16]byte{1}, SpanID: [8]byte{1}},
		{Service: "b", Endpoint: "/y", Status: "OK", Start: t0, Duration: time.Second, TraceID: [16]byte{2}, SpanID: [8]byte{2}, ThreadID: 9},
	}))
	f.Add(pbLen(1, pbLen(2, pbGroup(7, pbGroup(1)), plainSpan), pbLen(1000, plainSpan)))
	f.Add(pbLen(1, pbLen(2, pbLen(2, plainSpan[2:], deepValue))))
	f.Fuzz(func(t *testing.T, msg []byte) {
		loose, looseTally, looseErr := walk(msg, spanwalk.Options{})
		for _, migrate := range []bool{false, true} {
			bounded := spanwalk.Options{MaxDepth: 64, MaxSpans: 1 << 20, RefuseGroups: true, MigrateLegacy: migrate}
			got, tally, err := walk(msg, bounded)
			if err != nil && !errors.Is(err, spanwalk.ErrRefused) {
				t.Fatalf("%+v: error %v, not ErrRefused", bounded, err)
			}
			unbounded := spanwalk.Options{MigrateLegacy: migrate}
			want, wantTally, wantErr := walk(msg, unbounded)
			if (wantErr == nil) != (looseErr == nil) || wantTally != looseTally {
				t.Fatalf("MigrateLegacy %v: err %v, tally %+v; without it %v, %+v", migrate, wantErr, wantTally, looseErr, looseTally)
			}
			if !migrate && fmt.Sprint(want) != fmt.Sprint(loose) {
				t.Fatal("two walks of the same bytes differ")
			}
			if err == nil {
				if wantErr != nil {
					t.Fatalf("%+v takes the message, %+v refuses it: %v", bounded, unbounded, wantErr)
				}
				if diff := cmp.Diff(want, got); diff != "" || tally != wantTally {
					t.Fatalf("bounded and unbounded walks differ (-unbounded +bounded):\n%s\ntallies %+v, %+v", diff, wantTally, tally)
				}
			}
			if wantErr != nil {
				continue
			}
			n := wantTally.Spans
			for _, limit := range []int{n, n - 1} {
				if limit < 1 {
					continue
				}
				_, _, err := walk(msg, spanwalk.Options{MaxSpans: limit, MigrateLegacy: migrate})
				if (err == nil) != (limit >= n) {
					t.Fatalf("%d spans, MaxSpans %d: err %v", n, limit, err)
				}
			}
			// Reused scratch: a walker that walked another message first.
			w := spanwalk.Walker{Options: unbounded}
			seed := new(otlpwire.SpanEncoder).Append(nil, telemetry.Resource{NodeName: "n"}, []telemetry.Request{{Service: "s", Endpoint: "/z"}})
			if err := spanwalk.Walk(&w, seed, &recorder{}); err != nil {
				t.Fatal(err)
			}
			var again recorder
			if err := spanwalk.Walk(&w, msg, &again); err != nil || w.Tally != wantTally {
				t.Fatalf("reused scratch: err %v, tally %+v; fresh: %+v", err, w.Tally, wantTally)
			}
			if diff := cmp.Diff(want, again.rec); diff != "" {
				t.Fatalf("reused scratch walks otherwise (-fresh +reused):\n%s", diff)
			}
			w.Release()
			if k := len(want.Spans); k > 0 {
				r := recorder{failAt: k}
				if err := spanwalk.Walk(&spanwalk.Walker{Options: unbounded}, msg, &r); !errors.Is(err, errSink) || len(r.rec.Spans) != k {
					t.Fatalf("the sink failed at span %d: Walk returned %v after %d spans", k, err, len(r.rec.Spans))
				}
			}
		}
	})
}
