package query

import (
	"bytes"
	"context"
	"os"
	"testing"

	spikehunt "github.com/spikehunt/spikehunt/pipelines/cli"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopShared()
	os.Exit(code)
}

// commands are this package's commands by name, as spikehunt's main wires
// them.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr *bytes.Buffer) error{
	"spikes":   func(ctx context.Context, a []string, o, e *bytes.Buffer) error { return Spikes(ctx, a, o, e) },
	"patterns": func(ctx context.Context, a []string, o, e *bytes.Buffer) error { return Patterns(ctx, a, o, e) },
	"hosts":    func(ctx context.Context, a []string, o, e *bytes.Buffer) error { return Hosts(ctx, a, o, e) },
	"suspects": func(ctx context.Context, a []string, o, e *bytes.Buffer) error { return Suspects(ctx, a, o, e) },
	"captures": func(ctx context.Context, a []string, o, e *bytes.Buffer) error { return Captures(ctx, a, o, e) },
}

// runCLI runs `spikehunt args…` for a query command and returns its exit
// status and output, as the spikehunt binary would.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	run, ok := commands[args[0]]
	if !ok {
		t.Fatalf("%q is not a query command", args[0])
	}
	var out, errb bytes.Buffer
	code = spikehunt.ExitCode(args[0], run(context.Background(), args[1:], &out, &errb), &errb)
	return code, out.String(), errb.String()
}
