package testenv

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolvePaths(t *testing.T) {
	scriptOut := []byte("SPIKEHUNT_LIBCHDB=/s/libchdb.so\nSPIKEHUNT_KAFKA_LIBS=/s/kafka/libs\nKUBEBUILDER_ASSETS=/s/envtest\nSPIKEHUNT_HELM=/s/helm\n")
	tests := []struct {
		name       string
		env        map[string]string
		script     []byte
		scriptErr  error
		want       DepPaths
		wantRuns   int
		wantErrHas string
	}{
		{
			name:     "every variable comes from the script when none is set",
			script:   scriptOut,
			want:     DepPaths{LibCHDB: "/s/libchdb.so", KafkaLibs: "/s/kafka/libs", KubebuilderAssets: "/s/envtest", Helm: "/s/helm"},
			wantRuns: 1,
		},
		{
			name:     "a set variable wins over the script",
			env:      map[string]string{"SPIKEHUNT_KAFKA_LIBS": "/e/libs"},
			script:   scriptOut,
			want:     DepPaths{LibCHDB: "/s/libchdb.so", KafkaLibs: "/e/libs", KubebuilderAssets: "/s/envtest", Helm: "/s/helm"},
			wantRuns: 1,
		},
		{
			name: "the script is not run when every variable is set",
			env: map[string]string{"SPIKEHUNT_LIBCHDB": "/e/l", "SPIKEHUNT_KAFKA_LIBS": "/e/k", "SPIKEHUNT_S3PROXY_LIBS": "/e/s",
				"KUBEBUILDER_ASSETS": "/e/a", "SPIKEHUNT_KUBE_NODE": "/e/n", "SPIKEHUNT_HELM": "/e/h", "SPIKEHUNT_OTELCOL": "/e/o", "SPIKEHUNT_CONTROLLER_GEN": "/e/c",
				"SPIKEHUNT_CHCLIENTS": "/e/ch", "SPIKEHUNT_KUBE_NETWORK_POLICIES": "/e/p"},
			scriptErr: errors.New("must not run"),
			want: DepPaths{LibCHDB: "/e/l", KafkaLibs: "/e/k", S3ProxyLibs: "/e/s", KubebuilderAssets: "/e/a", KubeNode: "/e/n", Helm: "/e/h", Otelcol: "/e/o",
				ControllerGen: "/e/c", ChClients: "/e/ch", KubeNetPolicies: "/e/p"},
		},
		{
			name:     "a variable the script does not print stays empty",
			script:   []byte("deps: noise\nSPIKEHUNT_KAFKA_LIBS=/s/kafka/libs\n"),
			want:     DepPaths{KafkaLibs: "/s/kafka/libs"},
			wantRuns: 1,
		},
		{
			name: "a failing script names the unset variables",
			env: map[string]string{"SPIKEHUNT_LIBCHDB": "/e/l", "SPIKEHUNT_S3PROXY_LIBS": "/e/s", "SPIKEHUNT_HELM": "/e/h", "SPIKEHUNT_OTELCOL": "/e/o",
				"SPIKEHUNT_CONTROLLER_GEN": "/e/c", "SPIKEHUNT_KUBE_NODE": "/e/n", "SPIKEHUNT_CHCLIENTS": "/e/ch", "SPIKEHUNT_KUBE_NETWORK_POLICIES": "/e/p"},
			scriptErr:  errors.New("deps/install.sh env failed: exit status 1"),
			wantRuns:   1,
			wantErrHas: "SPIKEHUNT_KAFKA_LIBS, KUBEBUILDER_ASSETS unset and deps/install.sh env failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runs := 0
			got, err := resolvePaths(
				func(name string) string { return tt.env[name] },
				func() ([]byte, error) { runs++; return tt.script, tt.scriptErr },
			)
			if tt.wantErrHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrHas) {
					t.Fatalf("error = %v, want one containing %q", err, tt.wantErrHas)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("paths (-want +got):\n%s", diff)
			}
			if runs != tt.wantRuns {
				t.Errorf("script ran %d times, want %d", runs, tt.wantRuns)
			}
		})
	}
}

func TestMissingDependencyErrorsSayToRunMakeDeps(t *testing.T) {
	empty := t.TempDir()
	notThere := filepath.Join(empty, "nope")
	tests := []struct {
		name    string
		lookup  func(DepPaths) (string, error)
		paths   DepPaths
		mention string
	}{
		{"an unset Kafka folder", DepPaths.KafkaLibsDir, DepPaths{}, "SPIKEHUNT_KAFKA_LIBS is not set"},
		{"a nonexistent Kafka folder", DepPaths.KafkaLibsDir, DepPaths{KafkaLibs: notThere}, notThere},
		{"a Kafka folder without the broker jar", DepPaths.KafkaLibsDir, DepPaths{KafkaLibs: empty}, "kafka-server-*.jar"},
		{"an unset s3proxy folder", DepPaths.S3ProxyLibsDir, DepPaths{}, "SPIKEHUNT_S3PROXY_LIBS is not set"},
		{"an s3proxy folder without the s3proxy jar", DepPaths.S3ProxyLibsDir, DepPaths{S3ProxyLibs: empty}, "s3proxy-*.jar"},
		{"an envtest folder without kube-apiserver", DepPaths.EnvtestAssetsDir, DepPaths{KubebuilderAssets: empty}, "kube-apiserver"},
		{"a nonexistent libchdb.so", DepPaths.LibCHDBFile, DepPaths{LibCHDB: notThere}, "SPIKEHUNT_LIBCHDB=" + notThere},
		{"an unset helm", DepPaths.HelmBinary, DepPaths{}, "SPIKEHUNT_HELM"},
		{"an unset Collector", DepPaths.OtelcolBinary, DepPaths{}, "SPIKEHUNT_OTELCOL"},
		{"an unset controller-gen", DepPaths.ControllerGenBinary, DepPaths{}, "SPIKEHUNT_CONTROLLER_GEN"},
		{"a nonexistent controller-gen", DepPaths.ControllerGenBinary, DepPaths{ControllerGen: notThere}, "SPIKEHUNT_CONTROLLER_GEN=" + notThere},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.lookup(tt.paths)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") || !strings.Contains(msg, "make deps") || !strings.Contains(msg, tt.mention) {
				t.Errorf("error %q: want one line mentioning `make deps` and %q", msg, tt.mention)
			}
		})
	}
}

func TestEnvtestAssetsDirWantsBothBinaries(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kube-apiserver"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := DepPaths{KubebuilderAssets: dir}.EnvtestAssetsDir()
	if err == nil || !strings.Contains(err.Error(), "etcd") {
		t.Fatalf("error = %v, want one naming the missing etcd", err)
	}
}

func TestParseDepEnv(t *testing.T) {
	got := parseDepEnv([]byte("# comment\nA=1\n\n  B=/x=y  \nnot a pair\nC=\n"))
	want := map[string]string{"A": "1", "B": "/x=y", "C": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("parseDepEnv (-want +got):\n%s", diff)
	}
}
