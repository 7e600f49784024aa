package chhttp

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"github.com/ClickHouse/ch-go/proto"

	"github.com/spikehunt/spikehunt/internal/store"
)

// seedBlock is a revision-0 Native block with nested and LowCardinality types.
func seedBlock(t testing.TB, withMap bool) []byte {
	ts := new(proto.ColDateTime64).WithPrecision(proto.PrecisionMicro)
	host := new(proto.ColStr).LowCardinality()
	tags := new(proto.ColStr).LowCardinality().Array()
	attrs := proto.NewMap[string, string](new(proto.ColStr).LowCardinality(), new(proto.ColStr))
	var v proto.ColFloat64
	for i := 0; i < 4; i++ {
		ts.Append(time.Unix(int64(i), 0))
		host.Append("h")
		tags.Append([]string{"a", "b"}[:i%2+1])
		attrs.Append(map[string]string{"k": "v"})
		v.Append(float64(i))
	}
	var buf proto.Buffer
	in := proto.Input{{Name: "ts", Data: ts}, {Name: "host", Data: host}, {Name: "tags", Data: tags}, {Name: "v", Data: &v}}
	if withMap { // ch-go cannot decode this Map type by itself, clickhouse-go can
		in = append(in, proto.InputColumn{Name: "attrs", Data: attrs})
	}
	if err := store.EncodeNative(&buf, in); err != nil {
		t.Fatal(err)
	}
	return buf.Buf
}

func transcode(in []byte, rev int) ([]byte, error) {
	var out bytes.Buffer
	w := bufio.NewWriter(&out)
	err := transcodeNative(bufio.NewReader(bytes.NewReader(in)), w, rev)
	w.Flush()
	return out.Bytes(), err
}

// At revision 0 the reframing is the identity; at a modern revision ch-go,
// which implements the protocol independently, decodes what it produces.
func TestTranscodeNative(t *testing.T) {
	if same, err := transcode(seedBlock(t, true), 0); err != nil || !bytes.Equal(same, seedBlock(t, true)) {
		t.Fatalf("revision 0 changed the bytes (err %v)", err)
	}
	in := append(seedBlock(t, false), seedBlock(t, false)...)
	same, err := transcode(in, 0)
	if err != nil || !bytes.Equal(same, in) {
		t.Fatalf("revision 0 changed the bytes (err %v)", err)
	}
	const rev = 54460
	out, err := transcode(in, rev)
	if err != nil {
		t.Fatal(err)
	}
	r := proto.NewReader(bytes.NewReader(out))
	for i := 0; i < 2; i++ {
		var b proto.Block
		var res proto.Results
		if err := b.DecodeBlock(r, rev, res.Auto()); err != nil {
			t.Fatalf("block %d at revision %d: %v", i, rev, err)
		}
		if b.Rows != 4 || len(res) != 4 || res[3].Data.(*proto.ColFloat64).Row(3) != 3 {
			t.Fatalf("block %d decoded wrong: %d rows, %d columns", i, b.Rows, len(res))
		}
	}
	if _, err := transcode(in[:len(in)-5], rev); err == nil {
		t.Fatal("truncated input transcoded without error")
	}
}

func FuzzTranscodeNative(f *testing.F) {
	f.Add(seedBlock(f, true))
	f.Add([]byte{1, 1, 1, 'a', 14, 'A', 'r', 'r', 'a', 'y', '(', 'S', 't', 'r', 'i', 'n', 'g', ')', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := transcode(data, 54460)
		if err == nil && len(out) < len(data) {
			t.Fatalf("accepted input of %d bytes but wrote only %d", len(data), len(out))
		}
	})
}
