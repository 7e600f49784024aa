package helm_test

import (
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// agent.podNames switches the agent's pod watch and, with it, the one
// RBAC rule it needs: get, list and watch on Pods, nothing more.
func TestPodNamesAddExactlyTheReadingOfPods(t *testing.T) {
	for _, tc := range []struct {
		name string
		sets []string
		on   bool
	}{
		{"podnames-default", nil, true},
		{"podnames-off", []string{"agent.podNames.enabled=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := render(t, "spikehunt", valuesCase{name: tc.name, sets: tc.sets})
			var cr rbacv1.ClusterRole
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.mustFind(t, "ClusterRole", fullname()+"-agent").Object, &cr); err != nil {
				t.Fatal(err)
			}
			var pods []string
			for _, r := range flattenRules(cr.Rules) {
				if strings.Contains(r, " pods ") || strings.HasSuffix(r, " pods") || strings.Contains(r, "pods/") {
					pods = append(pods, r)
				}
			}
			want := []string{`"" pods get`, `"" pods list`, `"" pods watch`}
			if !tc.on {
				want = nil
			}
			if !slices.Equal(pods, want) {
				t.Errorf("the agent's rules on pods are %q, want %q", pods, want)
			}
			var cfg struct {
				Collect struct {
					PodNames struct {
						Enabled *bool `json:"enabled"`
					} `json:"pod_names"`
				} `json:"collect"`
			}
			if err := yaml.Unmarshal([]byte(configMapData(t, m, fullname()+"-agent")["config.yaml"]), &cfg); err != nil {
				t.Fatal(err)
			}
			if e := cfg.Collect.PodNames.Enabled; e == nil || *e != tc.on {
				t.Errorf("the agent's collect.pod_names.enabled is %v, want %v", e, tc.on)
			}
		})
	}
}
