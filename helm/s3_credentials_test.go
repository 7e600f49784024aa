package helm_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/spikehunt/spikehunt/internal/capture/artifact"
)

// storeConfigs decodes, strictly, the artifact store configuration the
// agent (capture.store in its config.yaml) and the operator
// (--artifacts.config) get.
func storeConfigs(t *testing.T, m manifest) map[string]artifact.StoreConfig {
	t.Helper()
	var agentCfg struct {
		Capture struct {
			Store yaml.Node `yaml:"store"`
		} `yaml:"capture"`
	}
	if err := yaml.Unmarshal([]byte(configMapData(t, m, fullname()+"-agent")["config.yaml"]), &agentCfg); err != nil {
		t.Fatal(err)
	}
	agent, err := yaml.Marshal(&agentCfg.Capture.Store)
	if err != nil {
		t.Fatal(err)
	}
	raw := map[string][]byte{"agent": agent, "operator": []byte(configMapData(t, m, fullname()+"-operator")["artifacts.yaml"])}
	out := map[string]artifact.StoreConfig{}
	for who, b := range raw {
		var cfg artifact.StoreConfig
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			t.Fatalf("%s store config: %v\n%s", who, err, b)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s store config: %v\n%s", who, err, b)
		}
		if cfg.S3 == nil {
			t.Fatalf("%s store config has no s3:\n%s", who, b)
		}
		out[who] = cfg
	}
	return out
}

// s3KeyRefs lists what in a pod spec reaches the S3 keys: environment
// variables named SPIKEHUNT_S3_* or read from the S3 Secret, and volumes
// of that Secret.
func s3KeyRefs(spec corev1.PodSpec, secret string) []string {
	var refs []string
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		for _, e := range c.Env {
			fromSecret := e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name == secret
			if strings.HasPrefix(e.Name, "SPIKEHUNT_S3_") || fromSecret {
				refs = append(refs, c.Name+" env "+e.Name)
			}
		}
		for _, ef := range c.EnvFrom {
			if ef.SecretRef != nil && ef.SecretRef.Name == secret {
				refs = append(refs, c.Name+" envFrom "+secret)
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == secret {
			refs = append(refs, "volume "+v.Name)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil && src.Secret.Name == secret {
					refs = append(refs, "volume "+v.Name)
				}
			}
		}
	}
	return refs
}

func TestAmbientS3CredentialsGiveTheAgentAndTheOperatorNoKeysAndTheirIdentity(t *testing.T) {
	m := render(t, "spikehunt", valuesCase{name: "eks", files: []string{filepath.Join(chartDir, "examples", "eks.yaml")}})
	secret := fullname() + "-s3"
	if m.find("Secret", secret) != nil {
		t.Errorf("Secret %s is rendered with s3.credentials: ambient", secret)
	}
	for who, cfg := range storeConfigs(t, m) {
		if cfg.S3.Credentials != artifact.S3CredentialsAmbient {
			t.Errorf("%s store config: credentials %q, want ambient", who, cfg.S3.Credentials)
		}
	}
	for _, component := range []string{"agent", "operator"} {
		w := m.workload(t, fullname()+"-"+component)
		if refs := s3KeyRefs(w.template.Spec, secret); len(refs) > 0 {
			t.Errorf("%s reaches for S3 keys: %v", w, refs)
		}
		if w.template.Spec.ServiceAccountName != fullname()+"-"+component {
			t.Errorf("%s runs as ServiceAccount %q", w, w.template.Spec.ServiceAccountName)
		}
		sa := m.mustFind(t, "ServiceAccount", fullname()+"-"+component)
		if arn := sa.GetAnnotations()["eks.amazonaws.com/role-arn"]; !strings.HasPrefix(arn, "arn:aws:iam::") {
			t.Errorf("ServiceAccount %s: eks.amazonaws.com/role-arn = %q", sa.GetName(), arn)
		}
		// They talk to the API server, so they mount the default token;
		// IRSA's token is a projected volume the EKS webhook adds anyway.
		if v, ok := sa.Object["automountServiceAccountToken"]; ok && v == false {
			t.Errorf("ServiceAccount %s does not mount its token", sa.GetName())
		}
		if a := w.template.Spec.AutomountServiceAccountToken; a != nil && !*a {
			t.Errorf("%s does not mount its ServiceAccount token", w)
		}
	}
}

func TestKeyedS3CredentialsStayAsTheyWere(t *testing.T) {
	for _, vc := range []valuesCase{
		{name: "keys-default", sets: []string{"s3.endpoint=minio.storage:9000", "s3.bucket=captures", "s3.accessKeyId=AKIA", "s3.secretAccessKey=secret"}},
		{name: "keys-named", sets: []string{"s3.endpoint=minio.storage:9000", "s3.bucket=captures", "s3.accessKeyId=AKIA", "s3.secretAccessKey=secret", "s3.credentials=keys"}},
	} {
		t.Run(vc.name, func(t *testing.T) {
			m := render(t, "spikehunt", vc)
			secret := fullname() + "-s3"
			if got := secretData(t, m, secret); got["access-key-id"] != "AKIA" || got["secret-access-key"] != "secret" {
				t.Errorf("Secret %s holds %v", secret, got)
			}
			for who, cfg := range storeConfigs(t, m) {
				want := artifact.S3StoreConfig{Endpoint: "minio.storage:9000", Bucket: "captures",
					AccessKeyEnv: "SPIKEHUNT_S3_ACCESS_KEY_ID", SecretKeyEnv: "SPIKEHUNT_S3_SECRET_ACCESS_KEY"}
				if *cfg.S3 != want {
					t.Errorf("%s store config %+v, want %+v", who, *cfg.S3, want)
				}
			}
			for _, component := range []string{"agent", "operator"} {
				w := m.workload(t, fullname()+"-"+component)
				env := expandEnv(t, m, w.template.Spec.Containers[0], noSecrets(t))
				if env["SPIKEHUNT_S3_ACCESS_KEY_ID"] != "AKIA" || env["SPIKEHUNT_S3_SECRET_ACCESS_KEY"] != "secret" {
					t.Errorf("%s: S3 keys in the environment: %q, %q", w, env["SPIKEHUNT_S3_ACCESS_KEY_ID"], env["SPIKEHUNT_S3_SECRET_ACCESS_KEY"])
				}
			}
		})
	}
}

func TestValuesRefuseAmbientS3CredentialsWithKeys(t *testing.T) {
	base := []string{"s3.endpoint=s3.eu-west-1.amazonaws.com", "s3.bucket=captures", "s3.credentials=ambient"}
	for _, tt := range []struct {
		name    string
		sets    []string
		mention string
	}{
		{"an access key", []string{"s3.accessKeyId=AKIA", "s3.secretAccessKey=secret"}, "remove s3.accessKeyId, s3.secretAccessKey"},
		{"a Secret of the user's", []string{"s3.existingSecret=s3-keys"}, "remove s3.existingSecret"},
		{"an unknown mode", []string{"s3.credentials=iam"}, "s3/credentials"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tryRender(t, "spikehunt", valuesCase{name: tt.name, sets: append(append([]string{}, base...), tt.sets...)})
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("render = %v, want an error mentioning %q", err, tt.mention)
			}
		})
	}
	_, err := tryRender(t, "spikehunt", valuesCase{name: "no keys", sets: []string{"s3.endpoint=minio:9000", "s3.bucket=captures"}})
	if err == nil || !strings.Contains(err.Error(), "s3.credentials: ambient") {
		t.Fatalf("render without keys = %v, want the error to offer s3.credentials: ambient", err)
	}
}
