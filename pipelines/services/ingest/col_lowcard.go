package ingest

import (
	"encoding/binary"
	"math"

	"github.com/ClickHouse/ch-go/proto"
)

// lowCardStrings is a LowCardinality(String) insert column that the
// decoder fills with dictionary keys rather than strings. A batch holds a
// handful of services, hosts, endpoints and statuses over 100,000s of
// rows: the decoder looks a value up once per resource (service, host) or
// once per span without allocating (endpoint: the map lookup of
// string(bytes) does not copy), and the per-row cost is one key.
// ch-go's ColLowCardinality, by contrast, keeps a string per row and
// hashes every one of them again when the block is encoded.
//
// The dictionary holds the batch's values in order of first appearance,
// the block ch-go would send for the same rows. Not safe for concurrent
// use.
type lowCardStrings struct {
	dict []string       // key → value
	ids  map[string]int // value → key
	keys []uint32       // per row
	// last is the key looked up last: runs of one value (an endpoint, a
	// status) are the common case and skip the map.
	last int
}

func newLowCardStrings() *lowCardStrings { return &lowCardStrings{ids: map[string]int{}, last: -1} }

// Compile-time assertions: an insert column with the LowCardinality state.
var (
	_ proto.ColInput     = (*lowCardStrings)(nil)
	_ proto.StateEncoder = (*lowCardStrings)(nil)
)

// keyBytes is the key of the value v, added to the dictionary if new. The
// dictionary copies v: the caller keeps v.
func (c *lowCardStrings) keyBytes(v []byte) uint32 {
	if c.last >= 0 && c.dict[c.last] == string(v) {
		return uint32(c.last)
	}
	k, ok := c.ids[string(v)]
	if !ok {
		k = c.add(string(v))
	}
	c.last = k
	return uint32(k)
}

// key is keyBytes for a string.
func (c *lowCardStrings) key(v string) uint32 {
	if c.last >= 0 && c.dict[c.last] == v {
		return uint32(c.last)
	}
	k, ok := c.ids[v]
	if !ok {
		k = c.add(v)
	}
	c.last = k
	return uint32(k)
}

func (c *lowCardStrings) add(v string) int {
	k := len(c.dict)
	c.dict = append(c.dict, v)
	c.ids[v] = k
	return k
}

// appendKey appends a row holding the value of key k.
func (c *lowCardStrings) appendKey(k uint32) { c.keys = append(c.keys, k) }

// Append appends a row holding v.
func (c *lowCardStrings) Append(v string) { c.appendKey(c.key(v)) }

// Row is row i's value.
func (c *lowCardStrings) Row(i int) string { return c.dict[c.keys[i]] }

// Rows implements proto.ColInput.
func (c *lowCardStrings) Rows() int { return len(c.keys) }

// Type implements proto.ColInput.
func (c *lowCardStrings) Type() proto.ColumnType {
	return proto.ColumnTypeLowCardinality.Sub(proto.ColumnTypeString)
}

// truncate drops rows from the rows-th on and dictionary values from the
// dictLen-th on: what a rejected message had added.
func (c *lowCardStrings) truncate(rows, dictLen int) {
	c.keys = c.keys[:rows]
	for _, v := range c.dict[dictLen:] {
		delete(c.ids, v)
	}
	clear(c.dict[dictLen:])
	c.dict = c.dict[:dictLen]
	if c.last >= dictLen {
		c.last = -1
	}
}

// Reset empties the column and its dictionary, keeping their memory.
func (c *lowCardStrings) Reset() { c.truncate(0, 0) }

// LowCardinality serialization, as ch-go writes it (col_low_cardinality.go):
// a key serialization version in the column's state, then per block a
// meta word (keys type and flags: "has additional keys", "update the
// dictionary"), the dictionary as a String column, and the keys.
const (
	lowCardSharedDictionariesWithAdditionalKeys = 1
	lowCardUpdateAll                            = 1<<9 | 1<<10
)

// EncodeState implements proto.StateEncoder.
func (c *lowCardStrings) EncodeState(b *proto.Buffer) {
	b.PutInt64(lowCardSharedDictionariesWithAdditionalKeys)
}

// EncodeColumn implements proto.ColInput.
func (c *lowCardStrings) EncodeColumn(b *proto.Buffer) {
	if len(c.keys) == 0 {
		return
	}
	keyType := proto.KeyUInt8
	switch n := len(c.dict); {
	case n > math.MaxUint16+1:
		keyType = proto.KeyUInt32
	case n > math.MaxUint8+1:
		keyType = proto.KeyUInt16
	}
	b.PutInt64(lowCardUpdateAll | int64(keyType))
	b.PutInt64(int64(len(c.dict)))
	for _, v := range c.dict {
		b.Buf = binary.AppendUvarint(b.Buf, uint64(len(v)))
		b.Buf = append(b.Buf, v...)
	}
	b.PutInt64(int64(len(c.keys)))
	switch keyType {
	case proto.KeyUInt8:
		for _, k := range c.keys {
			b.Buf = append(b.Buf, byte(k))
		}
	case proto.KeyUInt16:
		for _, k := range c.keys {
			b.Buf = binary.LittleEndian.AppendUint16(b.Buf, uint16(k))
		}
	default:
		for _, k := range c.keys {
			b.Buf = binary.LittleEndian.AppendUint32(b.Buf, k)
		}
	}
}

// WriteColumn implements proto.ColInput.
func (c *lowCardStrings) WriteColumn(w *proto.Writer) {
	w.ChainBuffer(c.EncodeColumn)
}
