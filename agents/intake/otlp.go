package intake

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

// consumeTraces files the request spans of td, sent by the connection's
// peer (nil when unknown), and counts the rest. It reports false, having
// done nothing, once the intake is closed.
func (in *Intake) consumeTraces(src *sourceMetrics, peer net.Addr, td ptrace.Traces) (spanTally, bool) {
	return in.consume(src, peer, in.now(), func(k *tally, w spanWindow, from *telemetry.Sender) spanTally {
		return requestSpans(td, w, func(svc, ep string, r *telemetry.Request) {
			if classify(k, svc, ep, r) {
				in.offerFrom(src, r, from)
			}
		})
	})
}

// consumeDecoded is consumeTraces for the request spans the direct
// decoder found (decode_spans.go) in a request received at now.
func (in *Intake) consumeDecoded(src *sourceMetrics, peer net.Addr, d *spanDecoder, now time.Time) (spanTally, bool) {
	return in.consume(src, peer, now, func(k *tally, _ spanWindow, from *telemetry.Sender) spanTally {
		var r telemetry.Request
		for i := range d.spans {
			s := &d.spans[i]
			s.fill(&r)
			if classify(k, d.services[s.resource], s.endpoint, &r) {
				in.offerFrom(src, &r, from)
			}
		}
		return d.tally
	})
}

// consume runs file over the spans of one OTLP request, received at now,
// under the intake's read lock, with the request's sender, window and
// tally, and counts what file did not keep.
func (in *Intake) consume(src *sourceMetrics, peer net.Addr, now time.Time, file func(k *tally, w spanWindow, from *telemetry.Sender) spanTally) (spanTally, bool) {
	in.mu.RLock()
	defer in.mu.RUnlock()
	if in.closed {
		return spanTally{}, false
	}
	from := in.unnamed[src.name]
	if peer != nil {
		s := in.senderAt(src, peer)
		from = &s
	}
	k := newTally(in, src, now.UnixNano())
	t := file(&k, in.windowAt(now), from)
	k.flush()
	if t.ignored > 0 {
		src.ignored.Add(float64(t.ignored))
	}
	for f, n := range t.invalid {
		if n > 0 {
			src.drop(faultReasons[f], n)
		}
	}
	return t, true
}

// windowAt is the span window of a request received at now.
func (in *Intake) windowAt(now time.Time) spanWindow {
	return newSpanWindow(now, in.cfg.MaxSpanAge, in.cfg.MaxSpanAhead)
}

// priceProto prices a protobuf ExportTraceServiceRequest before any of
// it is filed: with the direct decoder when it takes the message (then d
// holds the request spans for consumeDecoded, and the caller puts it back
// with putSpanDecoder once done with b), else with scanTraceRequest (d
// nil: decode with ptraceotlp once the budget is taken). The shape and
// its refusals are the same either way. now is the receive time, which
// the direct decoder judges span times by: give consumeDecoded the same. hold pays for the decoder's
// scratch; the caller resizes it to what the request costs.
func (in *Intake) priceProto(b []byte, now time.Time, hold *budgetHold) (requestShape, *spanDecoder, error) {
	if in.cfg.OTLPDecoder != OTLPDecoderPdata {
		d := getSpanDecoder()
		if d.decode(b, in.windowAt(now), in.cfg.MaxSpansPerRequest, hold) == nil {
			return d.shape, d, nil
		}
		putSpanDecoder(d)
	}
	shape, err := scanTraceRequest(b)
	return shape, nil, err
}

// exportResponse is the OTLP answer: empty, or a partial success naming
// the request spans rejected as invalid. Spans dropped later (queue_full)
// are not reported: the client could do nothing about them, and a retry
// would only add load to an agent that is already behind.
func exportResponse(t spanTally) ptraceotlp.ExportResponse {
	resp := ptraceotlp.NewExportResponse()
	n := t.rejected()
	if n == 0 {
		return resp
	}
	var why []string
	for f, c := range t.invalid {
		if c > 0 {
			why = append(why, fmt.Sprintf("%d %s", c, faultDescriptions[f]))
		}
	}
	ps := resp.PartialSuccess()
	ps.SetRejectedSpans(int64(n))
	ps.SetErrorMessage(fmt.Sprintf("spikehunt: %d request spans rejected: %s", n, strings.Join(why, ", ")))
	return resp
}

var faultDescriptions = [numFaults]string{
	"without start or end time",
	"with end not after start",
	"with an all-zero trace id",
	"with an all-zero span id",
	"that started more than max_span_age before the agent's clock",
	"that end more than max_span_ahead after the agent's clock",
}

// retryAfterSeconds is what a client refused for the budget is told to
// wait: requests in flight end within a second or so.
const retryAfterSeconds = 1

var errTooManySpans = errors.New("too many spans in one request")

func tooManySpans(n, limit int) error {
	return fmt.Errorf("%w: %d spans, more than max_spans_per_request (%d): send smaller batches", errTooManySpans, n, limit)
}

// reserve makes h hold total bytes of the decode budget: errNeverFits when
// total is more than the whole budget (retrying cannot help), errOverBudget
// when the requests in flight leave no room for it now.
func (in *Intake) reserve(h *budgetHold, total int64) error {
	if most := h.most(); total > most {
		return fmt.Errorf("%w: decoding it would hold %d bytes, more than one sender may (decode_budget_bytes %d, decode_budget_per_peer_bytes %d): send smaller batches",
			errNeverFits, total, in.budget.limit, in.budget.perPeer)
	}
	if !h.resize(total) {
		return errOverBudget
	}
	return nil
}
