package report

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/spikehunt/spikehunt/internal/capture/artifact/record"
)

// FuzzParsePath: whatever a client sends, a path the server accepts names
// a namespace, a Capture name and a file the store accepts, none of which
// can leave its segment.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/captures/shop/cap/report", "/captures/shop/cap/files/", "/captures/shop/cap/files/stacks.folded",
		"/captures/shop/cap/files/..%2F..%2Fetc%2Fpasswd", "/captures/%2e%2e/cap/report", "/captures/shop/cap/files/a%00b", "/captures//x/report"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		req, ok := parsePath(p)
		if !ok {
			return
		}
		if len(validation.IsDNS1123Label(req.namespace)) > 0 || len(validation.IsDNS1123Subdomain(req.name)) > 0 {
			t.Fatalf("%q: accepted namespace %q, name %q", p, req.namespace, req.name)
		}
		if req.file != "" && (record.ValidName("file", req.file) != nil || strings.ContainsAny(req.file, "/\\\x00")) {
			t.Fatalf("%q: accepted file %q", p, req.file)
		}
		if req.list && req.file != "" {
			t.Fatalf("%q: both a list and a file", p)
		}
	})
}
