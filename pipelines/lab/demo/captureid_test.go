package demo

import (
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/policy"
)

// The README's examples of capture ids have the shape of the ids the demo
// prints and spikehunt captures lists (the arming's name, whose policy
// part is the service's policy cut to 14 characters, and the run's start),
// whole for captures get and as a prefix of one for captures explain,
// which takes either.
func TestTheReadmesCaptureIDsLookLikeTheDemos(t *testing.T) {
	shape := regexp.MustCompile(`^checkout-offcp-[a-z0-9-]+-(bait|alert)-[0-9a-f]{16}\.[0-9]+$`)
	now := time.Now()
	d, _, err := decideCaptures("checkout", []policy.Node{{Name: "buildbox", HWClass: "local"}}, nil, now)
	if err != nil || len(d.Create) == 0 {
		t.Fatalf("the policy armed nothing on one node (%v): %+v", err, d)
	}
	id := localCaptureID(d.Create[0].Name, now)
	if !shape.MatchString(id) {
		t.Fatalf("the demo's capture id %q is not of the shape %s: fix the test's shape", id, shape)
	}
	readme, err := os.ReadFile("../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	examples := regexp.MustCompile(`spikehunt captures (get|explain) (\S+) `).FindAllSubmatch(readme, -1)
	if len(examples) == 0 {
		t.Fatal("no captures get or captures explain example in README.md")
	}
	for _, m := range examples {
		verb, example := string(m[1]), string(m[2])
		switch {
		case verb == "get" && !shape.MatchString(example):
			t.Errorf("README.md: captures get %s: want an id like %s", example, id)
		case verb == "explain" && !regexp.MustCompile(`^checkout-offcp-`).MatchString(example):
			t.Errorf("README.md: captures explain %s: want an id like %s, or a prefix of one", example, id)
		}
	}
}
