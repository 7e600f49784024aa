package policy

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

func TestArmingName(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy string
		node   string
		reason Reason
		prefix string // the readable part, before the 16 hex digits
	}{
		{"plain names", "billy-bait", "node-0001", ReasonBait, "billy-bait-node-0001-bait-"},
		{"upper case and dots", "Billy.Web", "ip-10-0-0-1.eu-west-1.compute.internal", ReasonAlert, "billy-web-ip-10-0-0-1-eu-west-1-co-alert-"},
		{"runs of other characters become one dash", "a__b", "x  y", ReasonBait, "a-b-x-y-bait-"},
		{"long parts are cut without a trailing dash", "a-very-long-policy-name", "n", ReasonBait, "a-very-long-po-n-bait-"},
		{"a cut ending on a dash drops it", "abcdefghijklm-nop", "n", ReasonBait, "abcdefghijklm-n-bait-"},
		{"parts with nothing valid are left out", "___", "ünïcødé", ReasonAlert, "n-c-d-alert-"},
		{"everything empty is the hash alone", "", "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ArmingName(tc.policy, tc.node, 42, tc.reason, "alert-1")
			if !strings.HasPrefix(got, tc.prefix) || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(got[len(tc.prefix):]) {
				t.Errorf("ArmingName = %q, want %q followed by 16 hex digits", got, tc.prefix)
			}
			if errs := validation.IsDNS1123Label(got); len(errs) > 0 {
				t.Errorf("ArmingName = %q: %v", got, errs)
			}
		})
	}
}

// TestArmingNameIsValidDeterministicAndDistinct draws 100,000 distinct
// inputs, many of them alike (the same readable prefix, parts that differ
// only past the cut or only in where a dash falls), and checks each name:
// a DNS-1123 label, the same on a second call, and never another input's.
func TestArmingNameIsValidDeterministicAndDistinct(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	alphabet := []rune("ab-._AZ09 éü/")
	str := func(maxLen int) string {
		var b strings.Builder
		for range r.IntN(maxLen + 1) {
			b.WriteRune(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	long := strings.Repeat("x", 70)
	type input struct {
		policy, node string
		epoch        int64
		reason       Reason
		alertKey     string
	}
	seen := map[string]input{}
	for i := 0; len(seen) < 100_000; i++ {
		in := input{str(6), str(6), int64(r.IntN(5)) - 1, Reason(str(2)), str(4)}
		switch i % 4 {
		case 1: // same cut prefix, differing past it
			in.policy, in.node = long+in.policy, long+in.node
		case 2: // where the separator falls
			in.policy, in.node = "a-b", "c"
			in.epoch = int64(i)
		case 3:
			in.policy, in.node = "a", "b-c"
			in.epoch = int64(i)
		}
		name := ArmingName(in.policy, in.node, in.epoch, in.reason, in.alertKey)
		if prev, ok := seen[name]; ok {
			if prev != in {
				t.Fatalf("%+v and %+v are both named %q", prev, in, name)
			}
			continue
		}
		seen[name] = in
		if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
			t.Fatalf("%+v: %q: %v", in, name, errs)
		}
		if again := ArmingName(in.policy, in.node, in.epoch, in.reason, in.alertKey); again != name {
			t.Fatalf("%+v: %q, then %q", in, name, again)
		}
	}
	if n := len(seen); n != 100_000 {
		t.Fatal(fmt.Sprint(n))
	}
}
