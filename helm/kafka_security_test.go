package helm_test

import (
	"path"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
)

// secretFile is where a mounted file comes from.
type secretFile struct{ secret, key string }

// mountedFrom follows path in container c of pod to the Secret key it is
// mounted from; ok is false when no Secret volume provides it.
func mountedFrom(pod corev1.PodSpec, c corev1.Container, p string) (secretFile, bool) {
	for _, vm := range c.VolumeMounts {
		rel, err := filepath.Rel(vm.MountPath, p)
		if err != nil || strings.HasPrefix(rel, "..") || vm.SubPath != "" {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if it.Path == rel {
					return secretFile{v.Secret.SecretName, it.Key}, true
				}
			}
		}
	}
	return secretFile{}, false
}

// kafkaSecurity is one client's kafkasec settings as the chart gives them:
// flag name (without prefix) or agent config key → value.
func kafkaSecurity(t *testing.T, m manifest, component string, c corev1.Container) map[string]string {
	t.Helper()
	out := map[string]string{}
	if component == "agent" {
		var cfg struct {
			Kafka struct {
				TLS  map[string]any `yaml:"tls"`
				SASL map[string]any `yaml:"sasl"`
			} `yaml:"kafka"`
		}
		if err := yaml.Unmarshal([]byte(configMapData(t, m, fullname()+"-agent")["config.yaml"]), &cfg); err != nil {
			t.Fatal(err)
		}
		for k, v := range cfg.Kafka.TLS {
			out["tls."+strings.ReplaceAll(k, "_", "-")] = strings.TrimSpace(yamlString(v))
		}
		for k, v := range cfg.Kafka.SASL {
			out["sasl."+strings.ReplaceAll(k, "_", "-")] = strings.TrimSpace(yamlString(v))
		}
		return out
	}
	prefix := "--kafka."
	if component != "ingest" {
		prefix = "--alerts.kafka."
	}
	for _, a := range c.Args {
		if !strings.HasPrefix(a, prefix+"tls.") && !strings.HasPrefix(a, prefix+"sasl.") {
			continue
		}
		k, v, ok := strings.Cut(strings.TrimPrefix(a, prefix), "=")
		if !ok {
			v = "true"
		}
		out[k] = v
	}
	return out
}

func yamlString(v any) string {
	b, _ := yaml.Marshal(v)
	return string(b)
}

// TestKafkaSecurityReachesEveryClientAsFiles: with the Strimzi example
// (TLS with the cluster CA, SCRAM with the KafkaUser's Secret) and with an
// mTLS install, the agent, ingest, detect and the operator each get the
// same settings, every file is mounted from the Secret key it should be,
// and no argument carries a secret.
func TestKafkaSecurityReachesEveryClientAsFiles(t *testing.T) {
	for _, tc := range []struct {
		vc    valuesCase
		want  map[string]string     // settings every client gets
		files map[string]secretFile // setting → where its file comes from
	}{
		{
			vc: valuesCase{name: "strimzi", files: []string{filepath.Join(chartDir, "examples", "strimzi.yaml")}},
			want: map[string]string{"tls.enabled": "true", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "spikehunt",
				"tls.ca-file": "", "sasl.password-file": ""},
			files: map[string]secretFile{"tls.ca-file": {"spikehunt-cluster-ca-cert", "ca.crt"}, "sasl.password-file": {"spikehunt", "password"}},
		},
		{
			vc: valuesCase{name: "mtls", sets: []string{"kafka.tls.enabled=true", "kafka.tls.caSecret.name=kafka-ca", "kafka.tls.caSecret.key=ca.pem",
				"kafka.tls.clientCertSecret.name=kafka-user", "kafka.tls.serverName=kafka.internal"}},
			want: map[string]string{"tls.enabled": "true", "tls.server-name": "kafka.internal", "tls.ca-file": "", "tls.cert-file": "", "tls.key-file": ""},
			files: map[string]secretFile{"tls.ca-file": {"kafka-ca", "ca.pem"}, "tls.cert-file": {"kafka-user", "user.crt"},
				"tls.key-file": {"kafka-user", "user.key"}},
		},
		{
			vc: valuesCase{name: "chart-secret", sets: []string{"kafka.sasl.enabled=true", "kafka.sasl.mechanism=SCRAM-SHA-256",
				"kafka.sasl.username=u-8c1f", "kafka.sasl.password=p-5e0a"}},
			want:  map[string]string{"sasl.mechanism": "SCRAM-SHA-256", "sasl.username-file": "", "sasl.password-file": ""},
			files: map[string]secretFile{"sasl.username-file": {fullname() + "-kafka", "username"}, "sasl.password-file": {fullname() + "-kafka", "password"}},
		},
	} {
		t.Run(tc.vc.name, func(t *testing.T) {
			m := render(t, "spikehunt", tc.vc)
			seen := map[string]bool{}
			for _, w := range m.workloads(t) {
				component := w.template.Labels["app.kubernetes.io/component"]
				if component != "agent" && component != "ingest" && component != "detect" && component != "operator" {
					continue
				}
				for _, c := range containers(w.template.Spec) {
					if path.Base(c.Image) == "" || !strings.Contains(c.Image, "spikehunt") {
						continue
					}
					seen[component] = true
					got := kafkaSecurity(t, m, component, c)
					if len(got) != len(tc.want) {
						t.Errorf("%s: settings %v, want the keys of %v", component, got, tc.want)
					}
					for k, want := range tc.want {
						if v, ok := got[k]; !ok || (want != "" && v != want) {
							t.Errorf("%s: %s = %q (set %v), want %q", component, k, v, ok, want)
						}
					}
					for k, want := range tc.files {
						if src, ok := mountedFrom(w.template.Spec, c, got[k]); !ok || src != want {
							t.Errorf("%s: %s %s is mounted from %v (found %v), want %v", component, k, got[k], src, ok, want)
						}
					}
					for _, a := range c.Args {
						if strings.Contains(a, "password") && !strings.Contains(a, "password-file=") || strings.Contains(a, "p-5e0a") || strings.Contains(a, "u-8c1f") {
							t.Errorf("%s: argument %q carries a secret", component, a)
						}
					}
				}
			}
			for _, want := range []string{"agent", "ingest", "detect", "operator"} {
				if !seen[want] {
					t.Errorf("no %s container checked", want)
				}
			}
		})
	}
}
