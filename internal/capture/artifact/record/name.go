package record

import (
	"errors"
	"fmt"
	"regexp"
)

// ErrInvalid marks a request or a record that is wrong in itself (an
// unknown backend, profile or script, an absurd size, a bad name):
// retrying cannot help. The capture engine's ErrInvalid is this one.
var ErrInvalid = errors.New("invalid capture request")

// ErrCorrupt marks stored data that does not match its record: a record
// that fails to decode, an object missing or of the wrong size or content,
// a download whose bytes are not the ones sealed.
var ErrCorrupt = errors.New("corrupt artifact")

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// ValidName checks a name that reaches the filesystem or a bucket (a
// capture id, a profile, a script, a file of an artifact): lower-case
// letters, digits, '.', '_' and '-', starting with a letter or digit, no
// "..", at most 128 bytes.
func ValidName(what, s string) error {
	if !nameRE.MatchString(s) || containsDotDot(s) {
		return fmt.Errorf("%w: %s %q: use 1–128 of a-z 0-9 . _ - starting with a letter or digit, without \"..\"", ErrInvalid, what, s)
	}
	return nil
}

func containsDotDot(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '.' && s[i+1] == '.' {
			return true
		}
	}
	return false
}
