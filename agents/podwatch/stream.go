package podwatch

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// readEvents decodes the watch stream r, one JSON object an event, and
// hands each to fn until r ends (nil: the API server closed the watch),
// fn fails, or the stream does. No event may take more than maxEvent
// bytes of r: the read stops there with ErrTooLarge, so a hostile or
// broken stream costs at most maxEvent bytes of buffer plus one read.
// An event is decoded into a fresh value fn owns; nothing of r's bytes
// is kept.
func readEvents(r io.Reader, maxEvent int64, fn func(event) error) error {
	cr := &capReader{r: r, max: maxEvent}
	dec := json.NewDecoder(cr)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			switch {
			case errors.Is(err, io.EOF):
				return nil
			case errors.Is(err, ErrTooLarge):
				return fmt.Errorf("podwatch: a watch event over %d bytes (MaxEventBytes): %w", maxEvent, ErrTooLarge)
			}
			return fmt.Errorf("podwatch: read the watch stream: %w", err)
		}
		cr.mark = dec.InputOffset()
		ev, err := decodeEvent(raw)
		if err != nil {
			return err
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}

// capReader fails with ErrTooLarge once more than max bytes have been read
// past mark, the offset where the event being decoded began. What the
// decoder buffered beyond its last event counts against the next one.
type capReader struct {
	r       io.Reader
	n, mark int64
	max     int64
}

func (c *capReader) Read(p []byte) (int, error) {
	room := c.mark + c.max - c.n
	if room < 0 {
		return 0, ErrTooLarge
	}
	if int64(len(p)) > room+1 {
		p = p[:room+1] // one byte over is enough to know
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// readCapped reads all of r, failing with ErrTooLarge past max bytes.
func readCapped(r io.Reader, max int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("podwatch: read %s: %w", what, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("podwatch: %s over %d bytes (MaxListBytes): %w", what, max, ErrTooLarge)
	}
	return b, nil
}
