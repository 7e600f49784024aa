//go:build linux

package e2ecluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// installBlockRe is the README's Kubernetes install: the ```sh fence right
// after the marker comment.
var installBlockRe = regexp.MustCompile("(?s)<!-- kubernetes:install -->\\s*```sh\\n(.*?)```")

// setRe is one --set of the block: its key and value (quoted or not).
var setRe = regexp.MustCompile(`--set ('?)([A-Za-z0-9_.]+)=([^' ]*)'?`)

// runREADMEInstall runs the README's Kubernetes install block as written,
// with bash, kubectl and helm against the test's cluster. Only the values
// a reader puts in are the test's: each --set of the block whose key the
// test knows (its broker, bucket and keys, the store's password) gets the
// test's value, and a --set the test does not know fails it, so a new one
// in the README is seen here first. The test's own settings (local images,
// a detector pass every few seconds) come in values, a --values file that
// the block's --set override; helm is given --wait.
func (e *env) runREADMEInstall(t *testing.T, values string) {
	t.Helper()
	root := repoRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := installBlockRe.FindAllStringSubmatch(string(raw), -1)
	if len(m) != 1 {
		t.Fatalf("README: %d `<!-- kubernetes:install -->` shell blocks, want 1", len(m))
	}
	block, err := readmeInstallBlock(m[0][1], values, map[string]string{
		"kafka.brokers":       "{" + e.kafka.Brokers()[0] + "}",
		"clickhouse.password": storePassword,
		"s3.endpoint":         e.s3.Endpoint,
		"s3.bucket":           e.s3.Bucket,
		"s3.accessKeyId":      e.s3.AccessKey,
		"s3.secretAccessKey":  e.s3.SecretKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	helm, kubeNode := os.Getenv("SPIKEHUNT_HELM"), os.Getenv("SPIKEHUNT_KUBE_NODE")
	if helm == "" || kubeNode == "" {
		t.Fatal("SPIKEHUNT_HELM or SPIKEHUNT_KUBE_NODE is not set: run through make test (deps/install.sh env)")
	}
	if _, err := os.Stat(filepath.Join(kubeNode, "kubectl")); err != nil {
		t.Fatalf("no kubectl in %s (deps/install.sh kube-node builds it): %v", kubeNode, err)
	}
	// kubectl and helm from the deps, ahead of any on the machine.
	bin := t.TempDir()
	for name, target := range map[string]string{"helm": helm, "kubectl": filepath.Join(kubeNode, "kubectl")} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's install block: %v\n%s\nran:\n%s", err, out, block)
	}
	t.Logf("the README's install block:\n%s", out)
}

// readmeInstallBlock is the block with ours in its --set (by key) and
// helm install given values and --wait.
func readmeInstallBlock(block, values string, ours map[string]string) (string, error) {
	var unknown []string
	block = setRe.ReplaceAllStringFunc(block, func(set string) string {
		sm := setRe.FindStringSubmatch(set)
		v, ok := ours[sm[2]]
		if !ok {
			unknown = append(unknown, sm[2])
			return set
		}
		return fmt.Sprintf("--set '%s=%s'", sm[2], v)
	})
	if len(unknown) > 0 {
		return "", fmt.Errorf("the README's install block sets %v, which the test has no value for", unknown)
	}
	if !strings.Contains(block, "helm install ") {
		return "", fmt.Errorf("the README's install block runs no helm install:\n%s", block)
	}
	return strings.Replace(block, "helm install ", fmt.Sprintf("helm install --values %s --wait --timeout 6m ", values), 1), nil
}

// The README's block as the cluster test runs it, checked without a
// cluster: every --set it has is one the test fills, and helm install
// gets the test's values and --wait.
func TestTheREADMEsInstallBlockIsOneTheClusterTestCanRun(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := installBlockRe.FindStringSubmatch(string(raw))
	if m == nil {
		t.Fatal("README has no `<!-- kubernetes:install -->` shell block")
	}
	ours := map[string]string{"kafka.brokers": "{b:9092}", "clickhouse.password": "p", "s3.endpoint": "s:9000",
		"s3.bucket": "k", "s3.accessKeyId": "a", "s3.secretAccessKey": "s"}
	got, err := readmeInstallBlock(m[1], "/v.yaml", ours)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"kubectl create namespace spikehunt", "helm install --values /v.yaml --wait --timeout 6m spikehunt helm/spikehunt -n spikehunt",
		"--set 'kafka.brokers={b:9092}'", "--set 'clickhouse.password=p'", "--set 's3.secretAccessKey=s'"} {
		if !strings.Contains(got, want) {
			t.Errorf("the block as run lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "…") {
		t.Errorf("a placeholder is left in the block as run:\n%s", got)
	}
	if _, err := readmeInstallBlock(m[1]+"helm upgrade x y --set agent.foo=1\n", "/v.yaml", ours); err == nil {
		t.Error("a --set the test has no value for was let through")
	}
}
