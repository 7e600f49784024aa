package testenv_test

import (
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestPathsFindTheInstalledComponents(t *testing.T) {
	p, err := testenv.Paths()
	if err != nil {
		t.Fatal(err)
	}
	for name, lookup := range map[string]func() (string, error){
		"kafka":   p.KafkaLibsDir,
		"s3proxy": p.S3ProxyLibsDir,
		"envtest": p.EnvtestAssetsDir,
	} {
		if _, err := lookup(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestStartKafkaWithoutJarsSaysToRunMakeDeps(t *testing.T) {
	t.Setenv("SPIKEHUNT_KAFKA_LIBS", t.TempDir())
	k, err := testenv.StartKafka(testenv.KafkaOptions{})
	if err == nil {
		k.Stop()
		t.Fatal("StartKafka succeeded without jars")
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "make deps") {
		t.Errorf("error %q: want one line mentioning `make deps`", msg)
	}
}
