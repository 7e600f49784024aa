package testenv_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestS3ProxyDiesWithACrashedTestBinary(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "s3crash" {
		testenv.S3(t)
		fmt.Printf("CHILD_PIDS %s\n", strings.Trim(fmt.Sprint(childPIDs(t)), "[]"))
		panic("testenv: simulated crash of a test binary")
	}
	out, err := runChild(t, "TestS3ProxyDiesWithACrashedTestBinary", "s3crash", "TMPDIR="+t.TempDir())
	if err == nil {
		t.Fatalf("child passed; want it to crash. Output:\n%s", out)
	}
	pids := parseChildPIDs(out)
	if len(pids) < 1 {
		t.Fatalf("child reported no processes; want s3proxy's JVM. Output:\n%s", out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var alive []string
		for _, pid := range pids {
			if name, ok := running(pid); ok {
				alive = append(alive, fmt.Sprintf("%d (%s)", pid, name))
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the crashed test binary still running after 20s: %v", alive)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
