package config_test

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/internal/vocab"
)

// TestTheCRDsPatternClassesAreTheDetectors: the CapturePolicy's enum of
// pattern classes is the one place outside internal/vocab that lists
// them (a kubebuilder marker cannot name a Go constant), so a class added
// to the vocabulary fails here until the marker in
// operator/api/v1alpha1/capturepolicy_types.go and the CRD follow.
func TestTheCRDsPatternClassesAreTheDetectors(t *testing.T) {
	b, err := os.ReadFile("crd/bases/capture.spikehunt.io_capturepolicies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	var got []string
	for i, l := range lines {
		if strings.TrimSpace(l) != "enum:" || i == 0 || !strings.Contains(strings.Join(lines[max(0, i-4):i], "\n"), "PatternClass") {
			continue
		}
		for _, v := range lines[i+1:] {
			v = strings.TrimSpace(v)
			if !strings.HasPrefix(v, "- ") {
				break
			}
			got = append(got, strings.TrimPrefix(v, "- "))
		}
	}
	want := slices.Clone(vocab.Classes)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the CRD's pattern classes are %q, the detector's %q: update the +kubebuilder:validation:Enum marker of PatternClass and run make manifests", got, want)
	}
}

// TestTheCRDsBackendsAreTheAgents: likewise for the backends' enum in the
// Capture and CapturePolicy CRDs.
func TestTheCRDsBackendsAreTheAgents(t *testing.T) {
	for _, crd := range []string{"crd/bases/capture.spikehunt.io_captures.yaml", "crd/bases/capture.spikehunt.io_capturepolicies.yaml"} {
		b, err := os.ReadFile(crd)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		found := 0
		for i, l := range lines {
			if strings.TrimSpace(l) != "backend:" {
				continue
			}
			var got []string
			inEnum := false
			for _, v := range lines[i+1 : min(len(lines), i+12)] {
				v = strings.TrimSpace(v)
				if v == "enum:" {
					inEnum = true
					continue
				}
				if !inEnum {
					continue
				}
				if !strings.HasPrefix(v, "- ") {
					break
				}
				got = append(got, strings.TrimPrefix(v, "- "))
			}
			found++
			if !slices.Equal(got, vocab.Backends) {
				t.Errorf("%s: backend enum %q, the agent's %q: update the Backend marker and run make manifests", crd, got, vocab.Backends)
			}
		}
		if found == 0 {
			t.Errorf("%s: no backend property", crd)
		}
	}
}
