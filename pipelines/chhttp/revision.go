package chhttp

import (
	"context"
	"fmt"
	"io"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/pipelines/store"
)

// nativeAtRevision runs st with Native output and re-encodes every block at
// the client's protocol revision (block info and serialization flags where
// the revision has them). Column types ch-go cannot decode are an error that
// names the type, rather than bytes the client would misread.
func (h *Handler) nativeAtRevision(ctx context.Context, st store.RawStatement, revision int, w io.Writer) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(h.eng.QueryRaw(ctx, st, "Native", pw)) }()
	defer pr.Close()
	var buf proto.Buffer
	return store.DecodeNative(pr, func(b store.Block) error {
		input := make(proto.Input, len(b.Columns))
		for i, c := range b.Columns {
			in, ok := c.(proto.ColInput)
			if !ok {
				return fmt.Errorf("column %s of type %s cannot be re-encoded", b.Names[i], b.Types[i])
			}
			input[i] = proto.InputColumn{Name: b.Names[i], Data: in}
		}
		buf.Reset()
		blk := proto.Block{Columns: len(input), Rows: b.Rows}
		if err := blk.EncodeBlock(&buf, revision, input); err != nil {
			return fmt.Errorf("encode block at revision %d: %w", revision, err)
		}
		_, err := w.Write(buf.Buf)
		return err
	})
}
