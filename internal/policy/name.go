package policy

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// MaxNameLength is the length of a DNS-1123 label, which ArmingName never
// exceeds: a Capture name that also fits a label value.
const MaxNameLength = 63

// ArmingName is the name of the Capture of one arming: the same inputs
// always give the same name, so a reconcile that runs again, or an operator
// restarted between deciding and creating, finds the Capture it made
// instead of making a second one.
//
// The name is <policy>-<node>-<reason>-<16 hex digits>: the readable parts
// lower-cased, other characters turned into '-', and cut to 14, 24 and 5
// characters; the digits are the first 64 bits of a sha256 over all five
// inputs, length-prefixed, so that names differ whenever the inputs do
// (cut or mangled readable parts included). Pass the policy's name (its
// Captures share its namespace, where that name is unique) so that the
// prefix is readable. The result is a valid DNS-1123 label, and so a valid
// object name.
func ArmingName(policy, node string, epoch int64, reason Reason, alertKey string) string {
	h := sha256.New()
	var buf [8]byte
	for _, s := range []string{policy, node, string(reason), alertKey} {
		binary.BigEndian.PutUint64(buf[:], uint64(len(s)))
		h.Write(buf[:])
		h.Write([]byte(s))
	}
	binary.BigEndian.PutUint64(buf[:], uint64(epoch))
	h.Write(buf[:])
	sum := h.Sum(nil)

	var b strings.Builder
	b.Grow(MaxNameLength)
	for _, part := range []string{labelPart(policy, 14), labelPart(node, 24), labelPart(string(reason), 5)} {
		if part != "" {
			b.WriteString(part)
			b.WriteByte('-')
		}
	}
	b.WriteString(hex.EncodeToString(sum[:8]))
	return b.String()
}

// labelPart lower-cases s, turns each run of characters a DNS-1123 label
// may not hold into one '-', and cuts it to at most n characters that
// neither start nor end with '-'.
func labelPart(s string, n int) string {
	out := make([]byte, 0, n)
	dash := false
	for i := 0; i < len(s) && len(out) < n; i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if ('a' <= c && c <= 'z') || ('0' <= c && c <= '9') {
			if dash && len(out) > 0 {
				out = append(out, '-')
				if len(out) == n {
					break
				}
			}
			out = append(out, c)
			dash = false
		} else {
			dash = true
		}
	}
	return strings.TrimRight(string(out), "-")
}
