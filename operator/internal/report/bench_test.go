package report

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// BenchmarkProxyServesACheckedFile: one authenticated GET in proxy mode,
// the Capture read from the API server and the file read whole and
// checked before it is sent, for a 200 KiB report (in memory) and an
// 8 MiB profile (spooled to a temporary file).
func BenchmarkProxyServesACheckedFile(b *testing.B) {
	for _, size := range []struct {
		name, file string
		bytes      int
	}{{"report-200KiB", ReportFile, 200 << 10}, {"profile-8MiB", "profile.pb.gz", 8 << 20}} {
		b.Run(size.name, func(b *testing.B) {
			s := localStore(b).st
			k := startKube(b)
			ns := k.namespace(b, "bench")
			md := sealed(b, s, "bench-"+strings.ToLower(size.name), map[string]string{size.file: strings.Repeat("x", size.bytes)})
			k.capture(b, ns, "cap", md, v1alpha1.PhaseIndexed)
			base := serve(b, Config{UsersFile: writeUsers(b, ns)}, k, storeArtifacts{s})
			path := base + "/captures/" + ns + "/cap/files/" + size.file
			cl := &http.Client{}
			b.SetBytes(int64(size.bytes))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				req, _ := http.NewRequest(http.MethodGet, path, nil)
				req.SetBasicAuth("oncall", oncallPassword)
				resp, err := cl.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || n != int64(size.bytes) {
					b.Fatalf("%s: %d bytes", resp.Status, n)
				}
			}
		})
	}
}
