package kafkacluster

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The binaries under test, built once by TestMain.
var agentBin, spikehuntBin string

// skipRecovery is the control run: every fault test leaves out its
// recovery (the killed or stopped broker is not started again, the full
// disk is not freed) and must then fail.
var skipRecovery = flag.Bool("kafkacluster.skip-recovery", false, "control run: leave out each fault's recovery; every fault test must fail")

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "spikehunt-kafkacluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	agentBin, spikehuntBin = filepath.Join(dir, "spikehunt-agent"), filepath.Join(dir, "spikehunt")
	for bin, pkg := range map[string]string{
		agentBin:     "github.com/spikehunt/spikehunt/agents/cmd/spikehunt-agent",
		spikehuntBin: "github.com/spikehunt/spikehunt/pipelines/cmd/spikehunt",
	} {
		if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
