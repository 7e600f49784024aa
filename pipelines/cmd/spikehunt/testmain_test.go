package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// spikehuntBin is this package built, for the tests that must kill -9 it.
var spikehuntBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "spikehunt-bin-")
	if err != nil {
		panic(err)
	}
	spikehuntBin = filepath.Join(dir, "spikehunt")
	if out, err := exec.Command("go", "build", "-o", spikehuntBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build spikehunt: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	testenv.StopShared()
	os.RemoveAll(dir)
	os.Exit(code)
}
