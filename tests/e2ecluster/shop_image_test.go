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
	dir := t.TempDir()
	bin := filepath.Join(dir, "shop")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./shop")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./shop: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "shop.oci.tar")
	if err := cluster.WriteImageArchive(archive, cluster.Image{
		Name:       shopImageName,
		Files:      []cluster.ImageFile{{Path: "/shop", Mode: 0o755, Data: data}},
		Entrypoint: []string{"/shop"},
		User:       "65532:65532",
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.ImportImage(context.Background(), archive); err != nil {
		t.Fatal(err)
	}
	return shopImageName
}
