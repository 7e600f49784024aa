package ownhosts

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	varRe      = regexp.MustCompile(`\$([A-Z_]+)`)
	redirectRe = regexp.MustCompile(`\s*>\s*"?\$DATA/[a-z-]+\.log"?\s*2>&1\s*&\s*$`)
)

// normalize writes a command as both sides compare it: no quotes, every
// variable as ${VAR}, no path before the binaries (/usr/local/bin, /bin).
func normalize(cmd string) string {
	cmd = strings.ReplaceAll(cmd, `"`, "")
	cmd = strings.ReplaceAll(cmd, "${", "$")
	cmd = strings.ReplaceAll(cmd, "}", "")
	cmd = strings.TrimPrefix(strings.TrimPrefix(cmd, "/usr/local/bin/"), "/bin/")
	return strings.Join(strings.Fields(varRe.ReplaceAllString(cmd, "$${$1}")), " ")
}

// The units in deploy/systemd, which keep the single-node stack running,
// run the README's own-hosts commands, each of them and nothing else, on
// the settings of deploy/systemd/spikehunt.env; and systemd reads them.
func TestTheSystemdUnitsRunTheREADMEsOwnHostsCommands(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	blocks := readmeBlocks(t, filepath.Join(root, "README.md"))
	var readme []string
	for _, name := range []string{"store", "agent"} {
		for _, l := range strings.Split(blocks[name], "\n") {
			if strings.HasPrefix(l, "spikehunt") || strings.HasPrefix(l, "deploy/kafka.sh") || strings.HasPrefix(l, "mkdir ") {
				readme = append(readme, normalize(redirectRe.ReplaceAllString(l, "")))
			}
		}
	}

	dir := filepath.Join(root, "deploy", "systemd")
	units, _ := filepath.Glob(filepath.Join(dir, "*.service"))
	if len(units) == 0 {
		t.Fatal("no deploy/systemd/*.service")
	}
	var got []string
	for _, u := range units {
		raw, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(raw), "\nEnvironmentFile=/etc/spikehunt/spikehunt.env\n") {
			t.Errorf("%s reads no /etc/spikehunt/spikehunt.env", filepath.Base(u))
		}
		for _, l := range strings.Split(string(raw), "\n") {
			k, v, ok := strings.Cut(l, "=")
			if !ok || (k != "ExecStart" && k != "ExecStartPre") {
				continue
			}
			if inner, ok := strings.CutPrefix(v, "/bin/sh -c '"); ok {
				v = strings.TrimPrefix(strings.TrimSuffix(inner, "'"), "exec ")
				v = strings.ReplaceAll(v, "$SPIKEHUNT_CHECKOUT/", "")
			}
			got = append(got, normalize(v))
		}
	}
	slices.Sort(readme)
	slices.Sort(got)
	if !slices.Equal(readme, got) {
		t.Errorf("deploy/systemd runs\n  %s\nthe README's own-hosts blocks\n  %s", strings.Join(got, "\n  "), strings.Join(readme, "\n  "))
	}

	env, err := os.ReadFile(filepath.Join(dir, "spikehunt.env"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.TrimSpace(blocks["settings"]), "\n") {
		k, _, _ := strings.Cut(l, "=")
		if !regexp.MustCompile(`(?m)^` + k + `=\S+$`).Match(env) {
			t.Errorf("deploy/systemd/spikehunt.env sets no %s (or a comment after its value, which systemd keeps)", k)
		}
	}

	// systemd's own reading, where it is installed. The binaries are
	// where make install puts them on a host, not on this machine.
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("no systemd-analyze here: the units' syntax was not checked by systemd")
		return
	}
	args := append([]string{"verify", "--man=no", "--generators=no"}, units...)
	out, _ := exec.Command(sa, args...).CombinedOutput()
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l == "" || strings.Contains(l, "is not executable: No such file or directory") {
			continue
		}
		t.Errorf("systemd-analyze verify: %s", l)
	}
}
