package helm_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// helmHome keeps helm's cache, config and data out of the user's home.
var helmHome string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spikehunt-helm-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	helmHome = dir
	startBuild()
	code := m.Run()
	cancelBuild() // when no test needed the binaries
	<-buildDone
	testenv.StopShared()
	os.RemoveAll(dir)
	os.Exit(code)
}
