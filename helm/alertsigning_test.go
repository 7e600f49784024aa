package helm_test

import (
	"encoding/base64"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The alert signing keys (values alertSigning): by default a generated
// Secret whose current key the detector mounts alone and signs with, and
// all of whose keys the operator mounts and verifies with; a rotation
// adds a key to both; an existing Secret replaces the generated one; and
// allowUnsigned, said in so many words, is the only way to run either
// side without a key.
func TestAlertSigningKeysReachTheDetectorAndTheOperator(t *testing.T) {
	for _, tc := range []struct {
		name             string
		sets             []string
		secret           string   // the Secret both mount; "" = none
		generated        []string // keys of the generated Secret; nil = not generated
		current          string
		detectArg, opArg string
	}{
		{name: "default", secret: fullname() + "-alert-signing", generated: []string{"k1"}, current: "k1",
			detectArg: "--alerts.signing-key-file=/etc/spikehunt/alert-signing/k1", opArg: "--alerts.keys-dir=/etc/spikehunt-operator/alert-signing"},
		{name: "rotating to k2", sets: []string{"alertSigning.keyIds={k1,k2}", "alertSigning.currentKeyId=k2"},
			secret: fullname() + "-alert-signing", generated: []string{"k1", "k2"}, current: "k2",
			detectArg: "--alerts.signing-key-file=/etc/spikehunt/alert-signing/k2", opArg: "--alerts.keys-dir=/etc/spikehunt-operator/alert-signing"},
		{name: "an existing Secret", sets: []string{"alertSigning.existingSecret=my-alert-keys", "alertSigning.currentKeyId=2026-11"},
			secret: "my-alert-keys", current: "2026-11",
			detectArg: "--alerts.signing-key-file=/etc/spikehunt/alert-signing/2026-11", opArg: "--alerts.keys-dir=/etc/spikehunt-operator/alert-signing"},
		{name: "unsigned, explicitly", sets: []string{"alertSigning.allowUnsigned=true"},
			detectArg: "--alerts.allow-unsigned", opArg: "--alerts.allow-unsigned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, "spikehunt", valuesCase{name: tc.name, sets: tc.sets})
			s := m.find("Secret", fullname()+"-alert-signing")
			switch {
			case tc.generated == nil && s != nil:
				t.Errorf("a generated Secret %s, want none", s.GetName())
			case tc.generated != nil && s == nil:
				t.Fatal("no generated Secret")
			case tc.generated != nil:
				data, _ := s.Object["data"].(map[string]any)
				var ids []string
				for id, v := range data {
					ids = append(ids, id)
					b, err := base64.StdEncoding.DecodeString(v.(string))
					if err != nil || len(b) < 32 {
						t.Errorf("key %s: %d bytes (%v), want at least 32", id, len(b), err)
					}
				}
				slices.Sort(ids)
				if !slices.Equal(ids, tc.generated) {
					t.Errorf("generated keys %v, want %v", ids, tc.generated)
				}
			}
			for _, w := range m.workloads(t) {
				component := w.template.Labels["app.kubernetes.io/component"]
				if component != "detect" && component != "operator" {
					continue
				}
				c := w.template.Spec.Containers[0]
				want := map[string]string{"detect": tc.detectArg, "operator": tc.opArg}[component]
				if !slices.Contains(c.Args, want) {
					t.Errorf("%s args %q, want %s", component, c.Args, want)
				}
				if slices.Contains(c.Args, "--alerts.allow-unsigned") && tc.secret != "" {
					t.Errorf("%s runs with --alerts.allow-unsigned", component)
				}
				var vol *corev1.Volume
				for i := range w.template.Spec.Volumes {
					if w.template.Spec.Volumes[i].Name == "alert-signing" {
						vol = &w.template.Spec.Volumes[i]
					}
				}
				if tc.secret == "" {
					if vol != nil {
						t.Errorf("%s mounts alert-signing keys though unsigned alerts are allowed", component)
					}
					continue
				}
				if vol == nil || vol.Secret == nil || vol.Secret.SecretName != tc.secret {
					t.Fatalf("%s: alert-signing volume %+v, want Secret %s", component, vol, tc.secret)
				}
				var items []string
				for _, it := range vol.Secret.Items {
					items = append(items, it.Key)
				}
				switch component {
				case "detect":
					if !slices.Equal(items, []string{tc.current}) {
						t.Errorf("detect mounts keys %v, want only the current one, %s", items, tc.current)
					}
				case "operator":
					if len(items) != 0 {
						t.Errorf("the operator mounts keys %v, want every key of the Secret", items)
					}
				}
				if w.template.Annotations["checksum/alert-signing"] == "" {
					t.Errorf("%s: no checksum/alert-signing annotation: a rotation would not roll it", component)
				}
			}
		})
	}
}
