package export

import "errors"

// Kind says what an export request holds; it picks the Kafka topic and the
// OTLP service.
type Kind byte

const (
	KindTraces  Kind = 1
	KindMetrics Kind = 2
)

func (k Kind) String() string {
	switch k {
	case KindTraces:
		return "traces"
	case KindMetrics:
		return "metrics"
	}
	return "unknown"
}

// ErrFull is returned by Sink.Send when the destination cannot take more
// now (an outage or a slow broker): the sender keeps the record and offers
// it again later.
var ErrFull = errors.New("sink full")

// ErrSinkClosed is given to done for a record the sink still held when it
// closed: the record stays in the spool, unacknowledged, and is sent again
// at the next start.
var ErrSinkClosed = errors.New("sink closed before delivery")

// A Sink delivers encoded export requests to a destination. Send must not
// block; done is called exactly once per accepted record, with nil once it
// is delivered or with an error when it never will be.
type Sink interface {
	Send(kind Kind, payload []byte, done func(error)) error
	// Flush waits for every accepted record's done (or ctx's end).
	Close() error
	Name() string
}
