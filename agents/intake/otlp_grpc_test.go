package intake

import "testing"

// TestRecvBuffersHandOutTheLengthAskedAndKeepOnlyTheirOwn: a buffer has
// the length asked for and a power-of-two capacity, comes back from the
// pool at its tier, and a buffer not cut by the pool is not pooled.
func TestRecvBuffersHandOutTheLengthAskedAndKeepOnlyTheirOwn(t *testing.T) {
	p := &bufferTiers{}
	for _, tc := range []struct{ n, capacity int }{
		{1, 256}, {256, 256}, {257, 512}, {200 << 10, 256 << 10}, {4 << 20, 4 << 20}, {0, 0},
	} {
		b := p.Get(tc.n)
		if len(*b) != tc.n || cap(*b) != tc.capacity {
			t.Errorf("Get(%d): len %d cap %d, want len %d cap %d", tc.n, len(*b), cap(*b), tc.n, tc.capacity)
		}
		p.Put(b)
	}
	odd := make([]byte, 3000)
	p.Put(&odd)
	for range 4 {
		if b := p.Get(2049); cap(*b) != 4096 {
			t.Fatalf("Get(2049) after a 3000-byte Put: cap %d, want 4096", cap(*b))
		}
	}
}
