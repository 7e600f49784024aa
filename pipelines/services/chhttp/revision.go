package chhttp

import (
	"bufio"
	"context"
	"io"

	"github.com/spikehunt/spikehunt/internal/store"
)

// nativeAtRevision runs st with Native output and reframes every block for
// the client's protocol revision (see transcodeNative).
func (h *Handler) nativeAtRevision(ctx context.Context, eng Engine, st store.RawStatement, revision int, w io.Writer) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(eng.QueryRaw(ctx, st, "Native", pw)) }()
	defer pr.Close()
	return transcodeNative(bufio.NewReaderSize(pr, 64<<10), bufio.NewWriterSize(w, 64<<10), revision)
}
