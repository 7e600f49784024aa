package helm_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The binaries the chart runs, built from this checkout. TestMain starts
// the build, so that it overlaps the other tests.
var (
	buildOnce             sync.Once
	buildDone             = make(chan struct{})
	buildCtx, cancelBuild = context.WithCancel(context.Background())
	binDir                string
	buildErr              error
)

func startBuild() {
	buildOnce.Do(func() {
		go func() {
			defer close(buildDone)
			binDir = filepath.Join(helmHome, "bin")
			cmd := exec.CommandContext(buildCtx, "go", "build", "-o", binDir+"/", "./pipelines/cmd/spikehunt", "./agents/cmd/spikehunt-agent", "./operator/cmd")
			cmd.Dir = ".."
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = errors.New(err.Error() + ": " + string(out))
			}
		}()
	})
}

func binaries(t *testing.T) string {
	t.Helper()
	startBuild()
	<-buildDone
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return binDir
}

// commandLine is how the chart runs a container: its binary in this
// checkout's build, its arguments and environment as the kubelet expands
// them.
func commandLine(t *testing.T, m manifest, c corev1.Container, command []string, secrets func(secret, key string) string) (string, []string, map[string]string) {
	t.Helper()
	env := expandEnv(t, m, c, secrets)
	if len(command) == 0 {
		command = c.Command
	}
	bin := map[string]string{"/spikehunt": "spikehunt", "/spikehunt-agent": "spikehunt-agent", "/spikehunt-operator": "cmd"}[command[0]]
	if bin == "" {
		t.Fatalf("%s: no binary of this repository", command[0])
	}
	var args []string
	for _, a := range append(append([]string{}, command[1:]...), c.Args...) {
		args = append(args, expandVars(a, env))
	}
	return filepath.Join(binaries(t), bin), args, env
}

// run runs bin with args and only env (plus a HOME of the test's own), and
// returns its exit code and output.
func run(t *testing.T, bin string, args []string, env map[string]string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not stop in 20 s:\n%s", bin, strings.Join(args, " "), out)
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// TestComponentsAcceptTheirCommandLines runs each spikehunt binary of this
// checkout with the command line and environment the chart gives it, up to
// the point where it would reach the outside world: every flag exists and
// every value parses. Each run is stopped by a fault the test plants after
// the checks that matter (an unparsable DSN, no kubeconfig, an empty spool
// folder), and the test checks that it was that fault that stopped it.
func TestComponentsAcceptTheirCommandLines(t *testing.T) {
	cases := append(valuesCases(t),
		valuesCase{name: "grafana", sets: []string{"grafana.enabled=true", "agent.sink=otlp"}},
		valuesCase{name: "captures-off", sets: []string{"agent.capture.enabled=false", "agent.hwClass.value=gen5", "agent.intake.lineUnix.enabled=false"}},
	)
	for _, vc := range cases {
		t.Run(vc.name, func(t *testing.T) {
			m := render(t, "spikehunt", vc)
			secrets := func(secret, key string) string { return "from-" + secret + "-" + key }
			checked := map[string]bool{}
			for _, w := range m.workloads(t) {
				for _, c := range containers(w.template.Spec) {
					if !strings.HasPrefix(c.Image, "ghcr.io/spikehunt/") && !strings.HasPrefix(c.Image, "registry.example.com/spikehunt/") {
						continue // the Collector and Grafana are not ours
					}
					component := w.template.Labels["app.kubernetes.io/component"]
					checked[component] = true
					switch component {
					case "agent":
						checkAgent(t, m, c, secrets)
					case "operator":
						bin, args, env := commandLine(t, m, c, nil, secrets)
						env["KUBECONFIG"] = filepath.Join(t.TempDir(), "none")
						code, out := run(t, bin, args, env)
						if code != 1 || !strings.Contains(out, "kubernetes config") {
							t.Errorf("operator %s: exit %d, want 1 at the Kubernetes config (flags accepted):\n%s", strings.Join(args, " "), code, out)
						}
					case "ingest", "detect":
						bin, args, env := commandLine(t, m, c, nil, secrets)
						env["SPIKEHUNT_DSN"] = "bogus://planted"
						code, out := run(t, bin, args, env)
						if code != 1 || !strings.Contains(out, "invalid DSN") {
							t.Errorf("%s %s: exit %d, want 1 at the planted DSN (flags accepted):\n%s", component, strings.Join(args, " "), code, out)
						}
						for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
							if p == nil || p.Exec == nil {
								continue
							}
							if p.Exec.Command[0] != "/spikehunt" {
								t.Errorf("%s probe %q: not the spikehunt CLI", component, p.Exec.Command)
								continue
							}
							// Probes get the container's environment but no $(VAR) expansion.
							for _, a := range p.Exec.Command {
								if strings.Contains(a, "$(") {
									t.Errorf("%s probe %q: the kubelet does not expand $(…) in probes", component, p.Exec.Command)
								}
							}
							code, out := run(t, filepath.Join(filepath.Dir(bin), "spikehunt"), p.Exec.Command[1:], env)
							if code != 1 || !strings.Contains(out, "invalid DSN") {
								t.Errorf("%s probe %q: exit %d, want 1 at the planted DSN:\n%s", component, p.Exec.Command, code, out)
							}
						}
					case "migrate":
						// --print renders the statements for these options without a server.
						bin, args, env := commandLine(t, m, c, nil, secrets)
						code, out := run(t, bin, append(args, "--print"), env)
						if code != 0 || !strings.Contains(out, "CREATE TABLE") {
							t.Errorf("migrate %s --print: exit %d:\n%s", strings.Join(args, " "), code, out)
						}
						if strings.Contains(strings.Join(args, " "), "--cluster") != strings.Contains(out, "ON CLUSTER") {
							t.Errorf("migrate %s: cluster DDL %v", strings.Join(args, " "), strings.Contains(out, "ON CLUSTER"))
						}
					case "clickhouse":
						checkEmbeddedStore(t, m, c, secrets, checked)
					default:
						t.Errorf("%s: a spikehunt container of component %q that the test does not run", w, component)
					}
				}
			}
			for _, want := range []string{"agent", "operator", "ingest", "detect", "migrate"} {
				if !checked[want] {
					t.Errorf("no %s container checked", want)
				}
			}
		})
	}
}

// checkEmbeddedStore runs the embedded store's containers: the migration
// (init container) with --print, and serve-clickhouse with a planted
// libchdb path, which it opens only after every flag, the users and their
// passwords passed its checks (a non-loopback address without them stops
// it earlier, with a usage error).
func checkEmbeddedStore(t *testing.T, m manifest, c corev1.Container, secrets func(secret, key string) string, checked map[string]bool) {
	t.Helper()
	bin, args, env := commandLine(t, m, c, nil, secrets)
	switch c.Name {
	case "migrate":
		checked["migrate"] = true
		code, out := run(t, bin, append(args, "--print"), env)
		if code != 0 || !strings.Contains(out, "CREATE TABLE") {
			t.Errorf("migrate %s --print: exit %d:\n%s", strings.Join(args, " "), code, out)
		}
	case "clickhouse":
		env["SPIKEHUNT_LIBCHDB"] = filepath.Join(t.TempDir(), "planted", "libchdb.so")
		code, out := run(t, bin, args, env)
		if code != 1 || !strings.Contains(out, "libchdb.so not found") {
			t.Errorf("serve-clickhouse %s: exit %d, want 1 at the planted libchdb path (flags and users accepted):\n%s", strings.Join(args, " "), code, out)
		}
	default:
		t.Errorf("the embedded store's container %s: not run by the test", c.Name)
	}
}

// checkAgent runs spikehunt-agent with its arguments and the rendered
// config file, and an empty --spool.dir appended: Validate checks the spool
// last, so "spool: Config.Dir is empty" means the config file decoded
// strictly (no unknown key) and every other check passed, before the agent
// opened anything.
func checkAgent(t *testing.T, m manifest, c corev1.Container, secrets func(secret, key string) string) {
	t.Helper()
	bin, args, env := commandLine(t, m, c, nil, secrets)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(configMapData(t, m, fullname()+"-agent")["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	found := false
	for i, a := range args {
		if strings.HasPrefix(a, "--config=") {
			args[i], found = "--config="+cfg, true
		}
	}
	if !found {
		t.Fatalf("agent args %q: no --config", args)
	}
	code, out := run(t, bin, append(args, "--spool.dir="), env)
	if code != 1 || !strings.Contains(out, "spool: Config.Dir is empty") {
		t.Errorf("spikehunt-agent %s: exit %d, want 1 at the planted empty spool dir (config and flags accepted):\n%s", strings.Join(args, " "), code, out)
	}
}
