package intake

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/spikehunt/spikehunt/internal/otlpwire/spanwalk"
)

// What an OTLP request costs once decoded, and the budget all requests in
// flight share.
//
// pdata decodes every message of a request into a struct of its own: an
// empty span is 2 bytes on the wire and some 200 bytes decoded, an empty
// attribute 2 bytes and 80. So the wire size does not bound memory; a
// 4 KiB gzip of empty spans decodes to hundreds of megabytes. Before
// decoding, the receivers walk the protobuf (scanTraceRequest: no
// allocation, a few ns a field) and charge the budget with an upper bound
// of what decoding will allocate; JSON is bounded by counting its '{'
// (jsonDecodeCost). A request the budget cannot take now is refused with
// a retryable answer, so a burst costs latency, never the agent.

// msgKind is a message type of ExportTraceServiceRequest
// (opentelemetry/proto/collector/trace/v1/trace_service.proto and the
// messages it holds): the direct decoder's walk counts them by the same
// kinds, so that the two walks price a request alike.
type msgKind = spanwalk.Kind

const (
	kindNone          = spanwalk.KindNone
	kindRequest       = spanwalk.KindRequest
	kindResourceSpans = spanwalk.KindResourceSpans
	kindResource      = spanwalk.KindResource
	kindEntityRef     = spanwalk.KindEntityRef
	kindScopeSpans    = spanwalk.KindScopeSpans
	kindScope         = spanwalk.KindScope
	kindSpan          = spanwalk.KindSpan
	kindEvent         = spanwalk.KindEvent
	kindLink          = spanwalk.KindLink
	kindStatus        = spanwalk.KindStatus
	kindKeyValue      = spanwalk.KindKeyValue
	kindAnyValue      = spanwalk.KindAnyValue
	kindArrayValue    = spanwalk.KindArrayValue
	kindKeyValueList  = spanwalk.KindKeyValueList
	kindStrings       = spanwalk.KindStrings // a repeated string, not walked
	numKinds          = spanwalk.NumKinds
)

// maxField is the highest field number that holds a message in any kind.
const maxField = 15

// children[k][f] is the kind of field f of a kind-k message, kindNone for
// scalars, strings and bytes.
var children = func() (t [numKinds][maxField + 1]msgKind) {
	t[kindRequest][1] = kindResourceSpans
	t[kindResourceSpans][1] = kindResource
	t[kindResourceSpans][2] = kindScopeSpans
	t[kindResource][1] = kindKeyValue
	t[kindResource][3] = kindEntityRef
	t[kindEntityRef][3] = kindStrings
	t[kindEntityRef][4] = kindStrings
	t[kindScopeSpans][1] = kindScope
	t[kindScopeSpans][2] = kindSpan
	t[kindScope][3] = kindKeyValue
	t[kindSpan][9] = kindKeyValue
	t[kindSpan][11] = kindEvent
	t[kindSpan][13] = kindLink
	t[kindSpan][15] = kindStatus
	t[kindEvent][3] = kindKeyValue
	t[kindLink][4] = kindKeyValue
	t[kindKeyValue][2] = kindAnyValue
	t[kindAnyValue][5] = kindArrayValue
	t[kindAnyValue][6] = kindKeyValueList
	t[kindArrayValue][1] = kindAnyValue
	t[kindKeyValueList][1] = kindKeyValue
	return t
}()

// decodedBytes is an upper bound of what pdata allocates for one message
// of each kind, measured with TestDecodeCostBoundsWhatDecodingAllocates
// and rounded up: the struct, its slot in the parent's slice counted
// twice over (append doubles), and for attribute values the boxed oneof.
var decodedBytes = [numKinds]int64{
	kindRequest:       128,
	kindResourceSpans: 384,
	kindResource:      192,
	kindEntityRef:     256,
	kindScopeSpans:    256,
	kindScope:         192,
	kindSpan:          448,
	kindEvent:         192,
	kindLink:          256,
	kindStatus:        64,
	kindKeyValue:      192,
	kindAnyValue:      96,
	kindArrayValue:    96,
	kindKeyValueList:  96,
	kindStrings:       96,
}

// deprecatedScopeSpans is ResourceSpans' instrumentation_library_spans of
// OTLP before 0.15, which pdata still decodes, into scope spans.
const deprecatedScopeSpans = 1000

// anyValueFieldBytes is charged for every field of an attribute value,
// whatever its type: pdata boxes each one it reads, even one that a
// later field of the same value replaces.
const anyValueFieldBytes = 32

// lenFieldBytes is charged for every length-delimited field besides its
// bytes: a string header, or the slot of a repeated string.
const lenFieldBytes = 32

// maxProtoDepth bounds message nesting: the request, resource spans,
// scope spans, span and attribute take 5, which leaves attribute values
// (arrays and maps in arrays and maps) about 25 levels. pdata decodes
// recursively without a limit; a 4 MiB body could nest 500,000 deep.
const maxProtoDepth = 64

// errTooDeep and errGroup are what the walk refuses that pdata would
// take: OTLP is proto3, which has no groups, and pdata skips a group
// loosely (a length-delimited field inside ends it).
var (
	errTooDeep = fmt.Errorf("messages nested deeper than %d", maxProtoDepth)
	errGroup   = errors.New("a protobuf group, which OTLP (proto3) never sends")
)

// requestShape is what scanTraceRequest learnt of a request.
type requestShape struct {
	spans int   // spans of any kind
	cost  int64 // upper bound of the bytes decoding allocates
}

var errTruncated = errors.New("a field runs past the end of its message, or a varint past 64 bits")

// scanTraceRequest walks an ExportTraceServiceRequest in protobuf without
// decoding it. It fails on what no decoder would take (a truncated field,
// a bad varint), on nesting deeper than maxProtoDepth and on groups; a
// field of the wrong wire type is skipped here and left for pdata to
// refuse.
func scanTraceRequest(b []byte) (requestShape, error) {
	s := requestShape{cost: int64(len(b))} // strings are copied out of the body
	err := scanMessage(b, kindRequest, 1, &s)
	return s, err
}

func scanMessage(b []byte, k msgKind, depth int, s *requestShape) error {
	if depth > maxProtoDepth {
		return errTooDeep
	}
	s.cost += decodedBytes[k]
	for len(b) > 0 {
		var tag uint64
		n := 1
		if b[0] < 0x80 { // most tags; spanwalk.ConsumeVarint is not inlined
			tag = uint64(b[0])
		} else if tag, n = spanwalk.ConsumeVarint(b); n < 0 {
			return errTruncated
		}
		b = b[n:]
		num, typ := int32(tag>>3), protowire.Type(tag&7) // pdata truncates to int32 too
		if num <= 0 {
			return fmt.Errorf("field number %d", num)
		}
		if k == kindAnyValue {
			s.cost += anyValueFieldBytes
		}
		var v []byte
		switch typ {
		case protowire.VarintType:
			_, n = spanwalk.ConsumeVarint(b)
		case protowire.Fixed32Type:
			n = 4
		case protowire.Fixed64Type:
			n = 8
		case protowire.BytesType:
			var l uint64
			if len(b) > 0 && b[0] < 0x80 {
				l, n = uint64(b[0]), 1
			} else {
				l, n = spanwalk.ConsumeVarint(b)
			}
			if n >= 0 {
				if l > uint64(len(b)-n) {
					return errTruncated
				}
				v = b[n : n+int(l)]
				n += int(l)
			}
		case protowire.StartGroupType, protowire.EndGroupType:
			return errGroup
		default:
			return fmt.Errorf("wire type %d", typ)
		}
		if n < 0 || n > len(b) {
			return errTruncated
		}
		b = b[n:]
		if typ != protowire.BytesType {
			continue
		}
		s.cost += lenFieldBytes
		var child msgKind
		switch {
		case num <= maxField:
			child = children[k][num]
		case k == kindResourceSpans && num == deprecatedScopeSpans:
			child = kindScopeSpans
		}
		switch child {
		case kindNone:
			continue
		case kindStrings:
			s.cost += decodedBytes[kindStrings]
			continue
		}
		if child == kindSpan {
			s.spans++
		}
		if err := scanMessage(v, child, depth+1, s); err != nil {
			return err
		}
	}
	return nil
}

// jsonDecodeCost bounds what decoding an OTLP/JSON body allocates: every
// message decoded needs a '{' in the body, and costs at most a span; every
// element of an array after the first needs a ','. A '{' or ',' inside a
// string is counted too, which only overestimates. It refuses nesting
// deeper than maxJSONDepth: pdata decodes JSON recursively, without a
// limit either.
func jsonDecodeCost(b []byte) (int64, error) {
	if jsonDepth(b) > maxJSONDepth {
		return 0, errTooDeep
	}
	return int64(len(b)) + int64(bytes.Count(b, []byte{'{'}))*jsonObjectBytes + int64(bytes.Count(b, []byte{','}))*jsonElementBytes, nil
}

// maxJSONDepth is maxProtoDepth in JSON, where a repeated field adds a
// '[' to each message's '{'.
const maxJSONDepth = 2 * maxProtoDepth

// jsonDepth is the deepest nesting of objects and arrays in b, outside
// strings; it stops counting past maxJSONDepth.
func jsonDepth(b []byte) int {
	depth, deepest := 0, 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		case '{', '[':
			if depth++; depth > deepest {
				if deepest = depth; deepest > maxJSONDepth {
					return deepest
				}
			}
		case '}', ']':
			depth--
		}
	}
	return deepest
}

// jsonObjectBytes is charged per '{': the largest decoded message, plus
// what the JSON decoder allocates around it; jsonElementBytes per ',': a
// string in a repeated field.
const (
	jsonObjectBytes  = 640
	jsonElementBytes = 96
)

// decodeBudget is the memory OTLP requests in flight may hold, shared by
// the HTTP and gRPC receivers. Taking from it never waits: a request that
// does not fit is refused, and its client retries later. Each peer (a
// client's IP address) holds at most perPeer of it, so one sender cannot
// spend what the others need; its gRPC Export streams in flight are
// counted here too (otlp_grpc.go).
type decodeBudget struct {
	limit   int64
	perPeer int64
	used    atomic.Int64

	mu    sync.Mutex
	peers map[netip.Addr]*peerShare
}

// peerShare is what one peer holds of the budget.
type peerShare struct {
	addr netip.Addr
	held atomic.Int64
	// Under decodeBudget.mu: the holds bound to it, and of them the gRPC
	// Export streams.
	refs, streams int
}

func newDecodeBudget(limit, perPeer int64) *decodeBudget {
	return &decodeBudget{limit: limit, perPeer: perPeer, peers: map[netip.Addr]*peerShare{}}
}

// share binds a request of the peer at a (the zero Addr when unknown) to
// its share; give it back with unshare. stream counts the request as a
// gRPC stream: with streamCap > 0, share refuses (nil) a stream beyond
// the peer's streamCap.
func (b *decodeBudget) share(a netip.Addr, stream bool, streamCap int) *peerShare {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.peers[a]
	if p == nil {
		p = &peerShare{addr: a}
		b.peers[a] = p
	}
	if stream {
		if streamCap > 0 && p.streams >= streamCap {
			if p.refs == 0 {
				delete(b.peers, a)
			}
			return nil
		}
		p.streams++
	}
	p.refs++
	return p
}

func (b *decodeBudget) unshare(p *peerShare, stream bool) {
	if p == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if stream {
		p.streams--
	}
	if p.refs--; p.refs == 0 && b.peers[p.addr] == p {
		delete(b.peers, p.addr)
	}
}

// take reserves n bytes and reports whether they fit.
func (b *decodeBudget) take(n int64) bool {
	if n <= 0 {
		return true
	}
	if b.used.Add(n) > b.limit {
		b.used.Add(-n)
		return false
	}
	return true
}

func (b *decodeBudget) give(n int64) {
	if n > 0 {
		b.used.Add(-n)
	}
}

// budgetHold is what one request holds of the budget, charged to its
// peer's share when p is set. Not safe for concurrent use, except
// release, which may run twice.
type budgetHold struct {
	b    *decodeBudget
	p    *peerShare
	held atomic.Int64
}

// grow takes n more bytes; on false nothing more is held.
func (h *budgetHold) grow(n int64) bool {
	if n <= 0 {
		return true
	}
	if h.p != nil && h.p.held.Add(n) > h.b.perPeer {
		h.p.held.Add(-n)
		return false
	}
	if !h.b.take(n) {
		if h.p != nil {
			h.p.held.Add(-n)
		}
		return false
	}
	h.held.Add(n)
	return true
}

// resize makes the hold exactly n bytes: it takes what is missing or
// gives back the surplus.
func (h *budgetHold) resize(n int64) bool {
	d := n - h.held.Load()
	if d < 0 {
		h.held.Add(d)
		h.b.give(-d)
		if h.p != nil {
			h.p.held.Add(d)
		}
		return true
	}
	return h.grow(d)
}

// release gives back all the hold has.
func (h *budgetHold) release() {
	n := h.held.Swap(0)
	h.b.give(n)
	if h.p != nil && n > 0 {
		h.p.held.Add(-n)
	}
}

// most is the most this hold may ever take: the budget, or its peer's
// share of it.
func (h *budgetHold) most() int64 {
	if h.p != nil {
		return min(h.b.limit, h.b.perPeer)
	}
	return h.b.limit
}

// errOverBudget: the request does not fit the budget now; retry.
// errNeverFits: it would not fit an empty budget; send less per request.
var (
	errOverBudget = errors.New("the intake's decode budget is spent by the requests in flight: retry later")
	errNeverFits  = errors.New("request too large once decoded")
)
