// Package defaults holds the one helper every component's config.go uses
// to give a zero field its default, so that defaulting stays a separate,
// copying step (WithDefaults) apart from a Validate that never changes its
// receiver (CONTRIBUTING.md, "House style"). It imports nothing, so every room
// may import it; agents/client stays on the standard library alone and
// does not.
package defaults

// Fill sets *p to def when *p is the zero value of its type. A field whose
// zero value is meaningful (0 = "fsync every Append") must not be filled.
func Fill[T comparable](p *T, def T) {
	var zero T
	if *p == zero {
		*p = def
	}
}
