package artifact_test

import (
	"os"
	"testing"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// TestMain stops the test binary's s3proxy (testenv.S3) after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}
