package ingest

import (
	"bytes"
	"encoding/binary"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"
	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// The direct span decoder against its reference, the pdata path: same
// verdict, same rows, for what the agent and the Collector send and for
// what protobuf allows them to send differently.

// directAndPdata decodes msg both ways, each into a batch that already
// holds the fixture message, and returns the two outcomes.
type decodeOutcome struct {
	rows, skipped int
	err           error
	batch         []requestRowText
	block         []byte // the batch as the insert sends it
	capped        Capped
}

func directAndPdata(t testing.TB, msg []byte) (direct, pdata decodeOutcome) {
	t.Helper()
	fixture := fixtureSpansMsg(t, fixtureResource, fixtureRequests())
	d, p := NewRequestRows(), NewRequestRows()
	if _, _, err := d.AppendTraces(fixture); err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.appendTracesPdata(fixture); err != nil {
		t.Fatal(err)
	}
	direct.rows, direct.skipped, direct.err = d.direct.appendDirect(d, msg)
	direct.batch, direct.block, direct.capped = requestRowsIn(t, d), encodeBlock(t, d.Input()), d.Capped()
	pdata.rows, pdata.skipped, pdata.err = p.appendTracesPdata(msg)
	pdata.batch, pdata.block, pdata.capped = requestRowsIn(t, p), encodeBlock(t, p.Input()), p.Capped()
	return direct, pdata
}

// encodeBlock is in as a Native block.
func encodeBlock(t testing.TB, in proto.Input) []byte {
	t.Helper()
	var buf proto.Buffer
	if err := (proto.Block{Columns: len(in), Rows: in[0].Data.Rows()}).EncodeRawBlock(&buf, 0, in); err != nil {
		t.Fatal(err)
	}
	return buf.Buf
}

// Hand-made protobuf, for what no marshaler writes: fields out of the
// usual order, repeated, unknown.
func encLen(b []byte, field protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(b, field, protowire.BytesType), v)
}

func encVarint(b []byte, field protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, field, protowire.VarintType), v)
}

func encFixed64(b []byte, field protowire.Number, v uint64) []byte {
	return protowire.AppendFixed64(protowire.AppendTag(b, field, protowire.Fixed64Type), v)
}

func encStrAttr(k, v string) []byte {
	return encLen(encLen(nil, 1, []byte(k)), 2, encLen(nil, 1, []byte(v)))
}

func encIntAttr(k string, v int64) []byte {
	return encLen(encLen(nil, 1, []byte(k)), 2, encVarint(nil, 3, uint64(v)))
}

// encSpan is a SERVER span that makes a row, then extra.
func encSpan(extra ...[]byte) []byte {
	start := uint64(fixtureEpoch.UnixNano())
	b := encLen(nil, 1, make16(0xaa))
	b = encLen(b, 2, make8(0xbb))
	b = encLen(b, 5, []byte("GET /x"))
	b = encVarint(b, 6, 2)
	b = encFixed64(b, 7, start)
	b = encFixed64(b, 8, start+1_000_000)
	for _, e := range extra {
		b = append(b, e...)
	}
	return b
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func make16(v byte) []byte { id := fixtureID[[16]byte](v); return id[:] }
func make8(v byte) []byte  { id := fixtureID[[8]byte](v); return id[:] }

// encRequest wraps resource spans fields into an export request.
func encRequest(resourceSpans ...[]byte) []byte {
	var b []byte
	for _, rs := range resourceSpans {
		b = encLen(b, 1, rs)
	}
	return b
}

// encResource is a ResourceSpans' resource field: service checkout on web-7.
var encResource = encLen(nil, 1, cat(encLen(nil, 1, encStrAttr("service.name", "checkout")), encLen(nil, 1, encStrAttr("host.name", "web-7"))))

func encScope(spans ...[]byte) []byte {
	var b []byte
	for _, s := range spans {
		b = encLen(b, 2, s)
	}
	return b
}

func TestTheDirectDecoderTakesWhatPdataTakes(t *testing.T) {
	// A request of one resource (encResource unless given) and its scope.
	request := func(resourceFields, scope []byte) []byte {
		return encRequest(cat(resourceFields, encLen(nil, 2, scope)))
	}
	attr := func(kv []byte) []byte { return encLen(nil, 9, kv) }
	resAttr := func(kv []byte) []byte { return encLen(nil, 1, encLen(nil, 1, kv)) }

	unknownGroup := protowire.AppendTag(protowire.AppendTag(nil, 99, protowire.StartGroupType), 99, protowire.EndGroupType)
	scope := encLen(nil, 1, cat(encLen(nil, 1, []byte("io.opentelemetry.http")), encLen(nil, 3, encIntAttr("a", 1))))
	nested := encLen(encLen(nil, 1, []byte("arr")), 2, encLen(nil, 5, cat( // [true, {k: "v"}]
		encLen(nil, 1, encVarint(nil, 2, 1)),
		encLen(nil, 1, encLen(nil, 6, encLen(nil, 1, encStrAttr("k", "v")))))))
	richSpan := encSpan(
		encLen(nil, 11, encFixed64(encLen(nil, 2, []byte("exception")), 1, 5)),
		encLen(nil, 13, encLen(encLen(nil, 1, make16(1)), 4, nested)),
		protowire.AppendFixed32(protowire.AppendTag(nil, 16, protowire.Fixed32Type), 1),
		encVarint(nil, 10, 3), encVarint(nil, 12, 1), encVarint(nil, 14, 2), encLen(nil, 3, []byte("k=v")))
	entityRef := encLen(nil, 1, encLen(nil, 3, encLen(nil, 1, []byte("k8s.pod"))))
	oddSpan := encSpan(encFixed64(nil, 99, 1), unknownGroup, attr(cat(encStrAttr("x", "y"), encVarint(nil, 9, 1))))

	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"the agent's export", fixtureSpansMsg(t, fixtureResource, fixtureRequests())},
		{"one span per message", request(encResource, encScope(encSpan()))},
		{"resource after its spans", encRequest(cat(encLen(nil, 2, encScope(encSpan())), encResource))},
		{"resource split in two fields", encRequest(cat(resAttr(encStrAttr("host.name", "web-7")),
			encLen(nil, 2, encScope(encSpan())), resAttr(encStrAttr("service.name", "checkout"))))},
		{"a repeated resource attribute: the first counts", request(
			cat(resAttr(encStrAttr("host.name", "first")), resAttr(encStrAttr("host.name", "second"))), encScope(encSpan()))},
		{"host.name not a string: the node name", request(
			cat(resAttr(encIntAttr("host.name", 7)), resAttr(encStrAttr("k8s.node.name", "node-3"))), encScope(encSpan()))},
		{"attributes in any order, repeated", request(encResource, encScope(encSpan(
			attr(encIntAttr("thread.id", 12)),
			attr(encStrAttr("http.route", "/users/{id}")),
			attr(encIntAttr("spikehunt.weight", 3)),
			attr(encIntAttr("spikehunt.weight", 0)), // not the first: ignored, as by Map.Get
			attr(encStrAttr("http.status_code", "404")),
			attr(encIntAttr("http.response.status_code", 201)))))},
		{"a status code that is no number falls to the legacy one", request(encResource, encScope(encSpan(
			attr(encStrAttr("http.response.status_code", "teapot")),
			attr(encStrAttr("http.status_code", "+0418")))))},
		{"a value field repeated: the last value counts", request(encResource, encScope(encSpan(
			attr(cat(encLen(nil, 1, []byte("spikehunt.weight")), encLen(nil, 2, encVarint(nil, 3, 5)), encLen(nil, 2, encLen(nil, 1, []byte("7"))))))))},
		{"a value set twice in one message: the last counts", request(encResource, encScope(encSpan(
			attr(cat(encLen(nil, 1, []byte("http.route")), encLen(nil, 2, encVarint(encLen(nil, 1, []byte("/r")), 2, 1)))))))},
		{"span fields repeated: the last counts", request(encResource, encScope(encSpan(
			encVarint(nil, 6, 3), encVarint(nil, 6, 2+1<<32), // kind is an int32: 2^32+2 is SERVER
			encLen(nil, 1, nil), // trace id emptied
			encLen(nil, 5, []byte("GET /y")),
			encLen(nil, 15, encVarint(nil, 3, 2)), encLen(nil, 15, encLen(nil, 2, []byte("oops"))), // statuses merge: ERROR
		)))},
		{"unspecified kind with an all-zero parent is a root", request(encResource, encScope(encSpan(
			encVarint(nil, 6, 0), encLen(nil, 4, make([]byte, 8)))))},
		{"client and child spans are skipped", request(encResource, encScope(
			encSpan(encVarint(nil, 6, 3)), encSpan(encVarint(nil, 6, 0), encLen(nil, 4, make8(1))), encSpan()))},
		{"events, links, scope, entity refs, flags", request(cat(encResource, entityRef), cat(scope, encLen(nil, 2, richSpan)))},
		{"unknown fields everywhere", cat(encRequest(cat(encResource, encVarint(nil, 77, 1),
			encLen(nil, 2, cat(encScope(oddSpan), encLen(nil, 50, []byte("?")))), encFixed64(nil, 4, 9))), encVarint(nil, 2, 1))},
		{"deprecated instrumentation_library_spans: checked, no rows", encRequest(cat(encResource, encLen(nil, 1000, encScope(encSpan()))))},
		{"an empty message", nil},
		{"a resource without spans", encRequest(encResource)},
		{"a resource without request spans", encRequest(cat(resAttr(encStrAttr("service.name", "batch")), encLen(nil, 2, encScope(encSpan(encVarint(nil, 6, 3))))))},
		{"no resource: unknown service and host", encRequest(encLen(nil, 2, encScope(encSpan())))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct, pdata := directAndPdata(t, tc.msg)
			if pdata.err != nil {
				t.Fatalf("the test's message is one pdata rejects: %v", pdata.err)
			}
			if direct.err != nil {
				t.Fatalf("the direct decoder refused it (AppendTraces would fall back to pdata)")
			}
			if direct.rows != pdata.rows || direct.skipped != pdata.skipped {
				t.Errorf("direct %d rows, %d skipped; pdata %d, %d", direct.rows, direct.skipped, pdata.rows, pdata.skipped)
			}
			if diff := cmp.Diff(pdata.batch, direct.batch); diff != "" {
				t.Errorf("rows (-pdata +direct):\n%s", diff)
			}
			if !bytes.Equal(direct.block, pdata.block) {
				t.Errorf("the rows agree, the insert blocks do not (dictionaries?)")
			}
			before := pdataFallbacks.Load()
			if _, _, err := NewRequestRows().AppendTraces(tc.msg); err != nil || pdataFallbacks.Load() != before {
				t.Errorf("AppendTraces: %v, %d fallbacks to pdata; want none", err, pdataFallbacks.Load()-before)
			}
		})
	}
}

func TestTheDirectDecoderRefusesWhatPdataRejects(t *testing.T) {
	valid := encRequest(append(encResource, encLen(nil, 2, encScope(encSpan()))...))
	inScope := func(extra ...[]byte) []byte {
		return encRequest(append(encResource, encLen(nil, 2, encScope(encSpan(extra...)))...))
	}
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"truncated", valid[:len(valid)-3]},
		{"a trace id of 3 bytes", inScope(encLen(nil, 1, []byte{1, 2, 3}))},
		{"a parent id of 9 bytes", inScope(encLen(nil, 4, make([]byte, 9)))},
		{"a link's span id of 4 bytes", inScope(encLen(nil, 13, encLen(nil, 2, make([]byte, 4))))},
		{"kind as a string", inScope(encLen(nil, 6, []byte("SERVER")))},
		{"a bad attribute deep in an event", inScope(encLen(nil, 11, encLen(nil, 3, encLen(nil, 2, encLen(nil, 4, []byte{1, 2})))))},
		{"an end of group without a start", inScope(protowire.AppendTag(nil, 99, protowire.EndGroupType))},
		// pdata leaves a group at its first field that is not a group, and
		// then finds the group's end where no group is open.
		{"a group holding a field", inScope(protowire.AppendTag(encVarint(protowire.AppendTag(nil, 99, protowire.StartGroupType), 1, 1),
			99, protowire.EndGroupType))},
		{"field number 0", append(valid, 0x00, 0x01)},
		{"wire type 7", append(valid, 0x0f)},
		{"a bad deprecated scope span", encRequest(append(encResource, encLen(nil, 1000, encScope(encLen(nil, 1, []byte{1})))...))},
		{"no start time", encRequest(append(encResource, encLen(nil, 2, encScope(encSpan(encFixed64(nil, 7, 0))))...))},
		{"end before start", inScope(encFixed64(nil, 8, uint64(fixtureEpoch.UnixNano())-1))},
		{"start in 1970", inScope(encFixed64(nil, 7, 5e9))},
		{"weight 0", inScope(encLen(nil, 9, encIntAttr("spikehunt.weight", 0)))},
		{"weight over 32 bits", inScope(encLen(nil, 9, encStrAttr("spikehunt.weight", "4294967296")))},
		{"weight without a value", inScope(encLen(nil, 9, encLen(nil, 1, []byte("spikehunt.weight"))))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct, pdata := directAndPdata(t, tc.msg)
			if pdata.err == nil {
				t.Fatalf("the test's message is one pdata accepts")
			}
			if direct.err == nil {
				t.Fatalf("the direct decoder took a message pdata rejects (%v)", pdata.err)
			}
			if direct.rows != 0 || direct.skipped != 0 {
				t.Errorf("refused with %d rows, %d skipped", direct.rows, direct.skipped)
			}
			if diff := cmp.Diff(pdata.batch, direct.batch); diff != "" {
				t.Errorf("the refusal left rows behind (-pdata +direct):\n%s", diff)
			}
			// AppendTraces says what pdata says, word for word.
			r := NewRequestRows()
			if _, _, err := r.AppendTraces(tc.msg); err == nil || err.Error() != pdata.err.Error() {
				t.Errorf("AppendTraces: %v\nwant pdata's %v", err, pdata.err)
			}
		})
	}
}

func TestTheDictionaryColumnEncodesAsChGoDoes(t *testing.T) {
	// Enough distinct values to need 16-bit keys.
	var values []string
	for i := range 700 {
		values = append(values, "v"+strconv.Itoa(i%300), "w"+strconv.Itoa(i))
	}
	values = append(values, "")
	for _, n := range []int{1, 3, 300, len(values)} {
		ours := newLowCardStrings()
		chgo := newChGoLowCard()
		for _, v := range values[:n] {
			ours.Append(v)
			chgo.Append(v)
		}
		if got, want := encodeColumn(t, ours), encodeColumn(t, chgo); !cmp.Equal(got, want) {
			t.Errorf("%d rows: the block differs from ch-go's", n)
		}
	}
}

func newChGoLowCard() *proto.ColLowCardinality[string] { return new(proto.ColStr).LowCardinality() }

// encodeColumn is col as the one column of a Native block.
func encodeColumn(t testing.TB, col proto.ColInput) []byte {
	t.Helper()
	return encodeBlock(t, proto.Input{{Name: "c", Data: col}})
}

// BenchmarkDirectVersusPdata decodes the agent's message of 1,000 spans,
// as BenchmarkIngest sends it, through each path.
func BenchmarkDirectVersusPdata(b *testing.B) {
	reqs := make([]telemetry.Request, 1000)
	t0 := time.Now()
	for i := range reqs {
		r := &reqs[i]
		r.Service, r.Endpoint, r.Status, r.Weight = "billy", "/v1/item", "200", 10
		r.Start, r.Duration = t0.Add(time.Duration(i)*time.Microsecond), time.Duration(500+i%4000)*time.Microsecond
		binary.BigEndian.PutUint64(r.TraceID[:8], uint64(i)*0x9e3779b97f4a7c15)
		binary.BigEndian.PutUint64(r.SpanID[:], uint64(i)*0x94d049bb133111eb|1)
	}
	msg := fixtureSpansMsg(b, telemetry.Resource{HostName: "node-001", HWClass: "gen5"}, reqs)
	for _, path := range []struct {
		name   string
		decode func(r *RequestRows, msg []byte) (int, int, error)
	}{
		{"direct", func(r *RequestRows, msg []byte) (int, int, error) { return r.direct.appendDirect(r, msg) }},
		{"pdata", (*RequestRows).appendTracesPdata},
	} {
		b.Run(path.name, func(b *testing.B) {
			r := NewRequestRows()
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				if r.Rows() >= 100_000 {
					r.Reset()
				}
				if rows, _, err := path.decode(r, msg); err != nil || rows != len(reqs) {
					b.Fatalf("%d rows, %v", rows, err)
				}
			}
			b.ReportMetric(float64(len(reqs)*b.N)/b.Elapsed().Seconds(), "spans/s")
		})
	}
}

// FuzzSpanDecoderMatchesPdata holds the direct decoder to its reference:
// for any bytes, it refuses exactly what pdata rejects, leaves the batch
// as it was when it refuses, and appends pdata's rows when it accepts.
func FuzzSpanDecoderMatchesPdata(f *testing.F) {
	f.Add(fixtureSpansMsg(f, fixtureResource, fixtureRequests()))
	f.Add(encRequest(append(encLen(nil, 2, encScope(encSpan(encLen(nil, 9, encStrAttr("spikehunt.weight", "12"))))), encResource...)))
	f.Add(oneSpanMsg(f, func(s ptrace.Span) {
		s.SetKind(ptrace.SpanKindUnspecified)
		s.Attributes().PutStr("http.route", "/users/{id}")
		s.Attributes().PutStr("http.response.status_code", "418")
		s.Attributes().PutInt("spikehunt.weight", 3)
		s.Attributes().PutStr("thread.id", "12")
		s.Status().SetCode(ptrace.StatusCodeError)
		s.Events().AppendEmpty().Attributes().PutEmptySlice("x").AppendEmpty().SetEmptyMap().PutBool("y", true)
		s.Links().AppendEmpty().SetTraceID(fixtureID[[16]byte](9))
	}))
	f.Add(oneSpanMsg(f, func(s ptrace.Span) { s.SetParentSpanID(fixtureID[[8]byte](1)) }))
	f.Add(oneSpanMsg(f, func(s ptrace.Span) { s.Attributes().PutInt("spikehunt.weight", math.MaxUint32+1) }))
	f.Add(fixturePointsMsg(f, fixtureResource, fixturePoints()))
	f.Fuzz(func(t *testing.T, msg []byte) {
		direct, pdata := directAndPdata(t, msg)
		switch {
		case pdata.err == nil && direct.err != nil:
			t.Fatalf("the direct decoder refused a message pdata takes (%d rows)", pdata.rows)
		case pdata.err != nil && direct.err == nil:
			t.Fatalf("the direct decoder took %d rows pdata rejects: %v", direct.rows, pdata.err)
		}
		if direct.rows != pdata.rows || direct.skipped != pdata.skipped {
			t.Fatalf("direct %d rows, %d skipped; pdata %d, %d", direct.rows, direct.skipped, pdata.rows, pdata.skipped)
		}
		if diff := cmp.Diff(pdata.batch, direct.batch); diff != "" {
			t.Fatalf("batches (-pdata +direct):\n%s", diff)
		}
		if !bytes.Equal(direct.block, pdata.block) {
			t.Fatalf("the rows agree, the insert blocks do not (dictionaries?)")
		}
		// Both cut values to MaxValueBytes (attr_limits.go) and count it.
		if direct.err == nil && direct.capped != pdata.capped {
			t.Fatalf("direct cut %+v, pdata %+v", direct.capped, pdata.capped)
		}
	})
}
