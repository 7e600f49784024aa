package spool

import (
	"encoding/binary"
	"hash/crc32"
)

// A record on disk is a frame: [magic u8][len u32][crc u32][payload], the
// integers little-endian, crc = CRC-32C over the four len bytes and the
// payload. Covering len means a damaged length is caught like a damaged
// payload, before it is used to find the next frame.
const (
	recordMagic byte = 0xD5 // neither 0x00 nor 0xFF: zero-filled or erased tails never look like a frame
	headerSize       = 9
	maxPayload       = maxSegmentBytes - headerSize
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func frameCRC(lenField, payload []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, lenField), castagnoli, payload)
}

// appendFrame appends payload, framed, to dst. The header is built inside
// dst: a separate array would escape through the CRC call and cost an
// allocation per Append.
func appendFrame(dst, payload []byte) []byte {
	n := len(dst)
	dst = append(dst, recordMagic, 0, 0, 0, 0, 0, 0, 0, 0)
	dst = append(dst, payload...)
	h := dst[n : n+headerSize]
	binary.LittleEndian.PutUint32(h[1:5], uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[5:9], frameCRC(h[1:5], payload))
	return dst
}

type frameStatus int

const (
	frameOK     frameStatus = iota
	frameBadCRC             // the header is plausible and the frame fits, but the CRC does not match
	frameLost               // no frame starts here: wrong magic, or a length that runs past the data
)

// parseFrame decodes the frame at the start of data. For frameOK and
// frameBadCRC, size is the whole frame's length; payload aliases data and is
// set only for frameOK.
func parseFrame(data []byte) (payload []byte, size int, st frameStatus) {
	if len(data) < headerSize || data[0] != recordMagic {
		return nil, 0, frameLost
	}
	n := binary.LittleEndian.Uint32(data[1:5])
	if n > maxPayload || int(n) > len(data)-headerSize {
		return nil, 0, frameLost
	}
	size = headerSize + int(n)
	if binary.LittleEndian.Uint32(data[5:9]) != frameCRC(data[1:5], data[headerSize:size]) {
		return nil, size, frameBadCRC
	}
	return data[headerSize:size:size], size, frameOK
}

// endsAtBoundary reports whether a frame ending at end is followed by the
// end of data or by another header: the test that tells a damaged payload
// (skip that record, the framing holds) from a damaged length (framing lost).
func endsAtBoundary(data []byte, end int) bool {
	return end == len(data) || data[end] == recordMagic
}
