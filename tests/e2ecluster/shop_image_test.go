//go:build linux

package e2ecluster

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spikehunt/spikehunt/tests/cluster"
)

// shopImageName is the app's image, built by the test and imported into
// the node (never pulled).
const shopImageName = "spikehunt.local/e2e-shop:1"

// buildShopImage compiles tests/e2ecluster/shop statically and imports it
// into the node's containerd as a one-file image.
func buildShopImage(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	buildCommandImage(t, c, "shop", shopImageName)
	return shopImageName
}

// probeImageName is the network probe's image (tests/e2ecluster/probe).
const probeImageName = "spikehunt.local/e2e-probe:1"

// buildCommandImage compiles tests/e2ecluster/<cmd> statically and imports
// it into the node's containerd as image name, with only /<cmd> in it.
func buildCommandImage(t *testing.T, c *cluster.Cluster, cmdName, name string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, cmdName)
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./"+cmdName)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./%s: %v\n%s", cmdName, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, cmdName+".oci.tar")
	if err := cluster.WriteImageArchive(archive, cluster.Image{
		Name:       name,
		Files:      []cluster.ImageFile{{Path: "/" + cmdName, Mode: 0o755, Data: data}},
		Entrypoint: []string{"/" + cmdName},
		User:       "65532:65532",
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(context.Background(), archive); err != nil {
		t.Fatal(err)
	}
}

// gatewayImageName is the gateway Collector (pipelines/services/otel's build, which
// holds every component of the chart's gateway config) as an image: the
// chart's default, the upstream contrib image, cannot be pulled here.
const gatewayImageName = "spikehunt.local/e2e-otelcol:0.155.0"

// buildGatewayImage packs the Collector that deps/install.sh built
// (SPIKEHUNT_OTELCOL) into an image and imports it into the node.
func buildGatewayImage(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	bin := os.Getenv("SPIKEHUNT_OTELCOL")
	if bin == "" {
		t.Fatal("SPIKEHUNT_OTELCOL is not set: run through make test (deps/install.sh env)")
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatalf("the gateway Collector: %v (deps/install.sh otelcol builds it)", err)
	}
	archive := filepath.Join(t.TempDir(), "otelcol.oci.tar")
	if err := cluster.WriteImageArchive(archive, cluster.Image{
		Name:       gatewayImageName,
		Files:      []cluster.ImageFile{{Path: "/otelcol", Mode: 0o755, Data: data}},
		Entrypoint: []string{"/otelcol"},
		User:       "10001:10001",
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(context.Background(), archive); err != nil {
		t.Fatal(err)
	}
}
