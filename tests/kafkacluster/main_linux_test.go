package kafkacluster

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// The binaries under test, built once by TestMain.
var agentBin, spikehuntBin string

// skipRecovery is the control run: every fault test leaves out its
// recovery (the killed or stopped broker is not started again, the full
// disk is not freed) and must then fail.
var skipRecovery = flag.Bool("kafkacluster.skip-recovery", false, "control run: leave out each fault's recovery; every fault test must fail")

func TestMain(m *testing.M) {
	flag.Parse()
	var cleanup func()
	var err error
	agentBin, spikehuntBin, cleanup, err = testenv.BuildChainBinaries("spikehunt-kafkacluster-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	cleanup()
	os.Exit(code)
}
