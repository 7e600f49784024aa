package store

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The engine streams each chunk as its own output: a header kept once,
// JSON-like formats not streamed at all.
func TestStreamedChunksJoinIntoOneOutput(t *testing.T) {
	rb := func(chunks ...string) []string { return chunks }
	for _, tc := range []struct {
		format string
		chunks []string
		want   string
		whole  bool
	}{
		{"Native", rb("\x01\x01", "\x01\x01"), "\x01\x01\x01\x01", false},
		{"RowBinaryWithNamesAndTypes", rb("\x01\x01n\x06UInt64AAAAAAAA", "\x01\x01n\x06UInt64BBBBBBBB"), "\x01\x01n\x06UInt64AAAAAAAABBBBBBBB", false},
		{"RowBinaryWithNames", rb("\x02\x01a\x01bXY", "\x02\x01a\x01bZW"), "\x02\x01a\x01bXYZW", false},
		{"CSVWithNames", rb("\"n\"\n1\n", "\"n\"\n2\n"), "\"n\"\n1\n2\n", false},
		{"TSVWithNamesAndTypes", rb("n\nUInt8\n1\n", "n\nUInt8\n2\n"), "n\nUInt8\n1\n2\n", false},
		{"JSONCompactEachRowWithNamesAndTypes", rb("[\"n\"]\n[\"UInt8\"]\n[1]\n", "[\"n\"]\n[\"UInt8\"]\n[2]\n"), "[\"n\"]\n[\"UInt8\"]\n[1]\n[2]\n", false},
		{"JSON", nil, "", true},
		{"Parquet", nil, "", true},
		{"PrettyCompact", nil, "", true},
	} {
		t.Run(tc.format, func(t *testing.T) {
			f := chunkFramingOf(tc.format)
			if f.whole != tc.whole {
				t.Fatalf("whole = %v, want %v", f.whole, tc.whole)
			}
			var header []byte
			var got []byte
			for _, c := range tc.chunks {
				got = append(got, f.join([]byte(c), &header)...)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Fatalf("joined (-want +got):\n%s", diff)
			}
		})
	}
}
