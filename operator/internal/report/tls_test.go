package report

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/operator/api/v1alpha1"
)

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "spikehunt-operator-report"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// With a certificate and key the server speaks HTTPS only: the report
// comes over TLS, and a plain-HTTP request (which would carry the password
// in clear) gets no report.
func TestWithTLSTheReportServerSpeaksHTTPSOnly(t *testing.T) {
	s := localStore(t)
	k := startKube(t)
	ns := k.namespace(t, "shop")
	md := sealed(t, s.st, "tls-1", map[string]string{ReportFile: reportHTML})
	k.capture(t, ns, "cap", md, v1alpha1.PhaseIndexed)
	certFile, keyFile, pool := selfSigned(t)
	srv, err := New(Config{Address: "127.0.0.1:0", UsersFile: writeUsers(t, ns), TLSCertFile: certFile, TLSKeyFile: keyFile}, k.c, storeArtifacts{s.st}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	defer func() { cancel(); <-done }()
	path := "/captures/" + ns + "/cap/report"

	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, _ := http.NewRequest(http.MethodGet, "https://"+srv.Addr().String()+path, nil)
	req.SetBasicAuth("alice", alicePassword)
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != reportHTML || resp.TLS == nil {
		t.Errorf("over HTTPS: %s, TLS %v, %q", resp.Status, resp.TLS != nil, body)
	}
	if a := get(t, "http://"+srv.Addr().String(), path, "alice", alicePassword); a.status == http.StatusOK || strings.Contains(a.body, "blocked 998 ms") {
		t.Errorf("plain HTTP to the TLS server: %d %q", a.status, a.body)
	}
	if _, err := New(Config{Address: "127.0.0.1:0", UsersFile: writeUsers(t, ns), TLSCertFile: certFile, TLSKeyFile: certFile}, k.c, storeArtifacts{s.st}, nil); err == nil {
		t.Error("a certificate as its own key was accepted")
	}
}
