package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/kafkasec"
)

// KafkaUser is a SASL user of the broker's SASL_SSL listener: PLAIN and
// both SCRAM mechanisms accept it with the same password.
type KafkaUser struct {
	Name     string
	Password string
}

// SASLSSLOptions adds a SASL_SSL listener to the broker, beside the
// PLAINTEXT one every other test uses. Its certificate is issued by a CA
// made for the broker (Kafka.CA); clients may present a certificate of that
// CA too (ssl.client.auth=requested), which the broker checks but does not
// require.
type SASLSSLOptions struct {
	// Users are created at format time: SCRAM-SHA-256 and SCRAM-SHA-512
	// credentials with kafka-storage --add-scram, PLAIN ones in the
	// listener's JAAS configuration. At least one.
	Users []KafkaUser
	// Authorize turns on KRaft's StandardAuthorizer: a SASL user may then
	// do only what an ACL grants it. The broker's own principal on its
	// PLAINTEXT inter-broker and controller listeners is User:ANONYMOUS;
	// it is the super user, so every client of the PLAINTEXT listener
	// (Kafka.Client, Kafka.CreateTopic) may create topics and grant ACLs
	// with kadm. Only a broker a test starts for itself needs it.
	Authorize bool
}

// Validate checks the users: names and passwords that Kafka's configuration
// syntax can carry as they are.
func (o *SASLSSLOptions) Validate() error {
	if len(o.Users) == 0 {
		return errors.New("testenv: SASLSSLOptions: no users")
	}
	for _, u := range o.Users {
		if u.Name == "" || u.Password == "" {
			return errors.New("testenv: SASLSSLOptions: a user needs a name and a password")
		}
		if strings.ContainsAny(u.Name+u.Password, "\"\\,=[] \t\n;") {
			return fmt.Errorf("testenv: SASLSSLOptions: user %q: use letters, digits, '-' and '_' only (the JAAS and --add-scram syntax)", u.Name)
		}
	}
	return nil
}

// TestCA is a certificate authority made in the test with crypto/x509.
type TestCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
}

// NewTestCA makes a CA valid for a day.
func NewTestCA(name string) (*TestCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testenv: CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("testenv: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &TestCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// CertPEM is the CA's certificate, PEM.
func (ca *TestCA) CertPEM() []byte { return ca.certPEM }

// Issue makes a certificate for a server (names are DNS names or IP
// addresses) or, with no names, for a client whose common name is cn. It
// returns the certificate and its PKCS#8 key, PEM (Kafka's PEM key store
// reads only PKCS#8).
func (ca *TestCA) Issue(cn string, names ...string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if len(names) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: issue %s: %w", cn, err)
	}
	k8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: k8}), nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// writeSecureFiles makes the broker's CA and certificate and writes the
// PEM key store and trust store into the broker's folder.
func (k *Kafka) writeSecureFiles() error {
	ca, err := NewTestCA("spikehunt testenv kafka CA")
	if err != nil {
		return err
	}
	// The certificate names both the loopback address the broker
	// advertises and "localhost", so a client may check either.
	cert, key, err := ca.Issue("kafka-broker", "127.0.0.1", "localhost", k.opts.Host)
	if err != nil {
		return err
	}
	k.ca = ca
	for name, b := range map[string][]byte{
		"keystore.pem":   append(append([]byte{}, key...), cert...),
		"truststore.pem": ca.CertPEM(),
	} {
		if err := os.WriteFile(filepath.Join(k.dir, name), b, 0o600); err != nil {
			return fmt.Errorf("testenv: kafka: %w", err)
		}
	}
	return nil
}

// secureProperties are the SASL_SSL listener's keys.
func (k *Kafka) secureProperties() [][2]string {
	var jaas strings.Builder
	jaas.WriteString("org.apache.kafka.common.security.plain.PlainLoginModule required")
	for _, u := range k.opts.SASLSSL.Users {
		fmt.Fprintf(&jaas, " user_%s=\"%s\"", u.Name, u.Password)
	}
	jaas.WriteString(";")
	scram := "org.apache.kafka.common.security.scram.ScramLoginModule required;"
	props := [][2]string{
		{"sasl.enabled.mechanisms", "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"},
		{"listener.name.sasl_ssl.plain.sasl.jaas.config", jaas.String()},
		{"listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config", scram},
		{"listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config", scram},
		{"listener.name.sasl_ssl.ssl.keystore.type", "PEM"},
		{"listener.name.sasl_ssl.ssl.keystore.location", filepath.Join(k.dir, "keystore.pem")},
		{"listener.name.sasl_ssl.ssl.truststore.type", "PEM"},
		{"listener.name.sasl_ssl.ssl.truststore.location", filepath.Join(k.dir, "truststore.pem")},
		{"listener.name.sasl_ssl.ssl.client.auth", "requested"},
	}
	if k.opts.SASLSSL.Authorize {
		// In combined mode the controller authorizes its own listener's
		// requests too: the broker reaches it as User:ANONYMOUS, which
		// must be a super user, or the node cannot register with itself.
		props = append(props,
			[2]string{"authorizer.class.name", "org.apache.kafka.metadata.authorizer.StandardAuthorizer"},
			[2]string{"super.users", KafkaSuperUser})
	}
	return props
}

// KafkaSuperUser is the principal of the PLAINTEXT and controller
// listeners, a super user of a broker started with SASLSSLOptions.Authorize.
const KafkaSuperUser = "User:ANONYMOUS"

// scramFormatArgs are kafka-storage's --add-scram arguments for the users.
func (k *Kafka) scramFormatArgs() []string {
	var args []string
	for _, u := range k.opts.SASLSSL.Users {
		for _, m := range []string{"SCRAM-SHA-256", "SCRAM-SHA-512"} {
			args = append(args, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", m, u.Name, u.Password))
		}
	}
	return args
}

// SecureBrokers returns the SASL_SSL listener's address, or nil when the
// broker was started without SASLSSLOptions.
func (k *Kafka) SecureBrokers() []string {
	if k.secureAddr == "" {
		return nil
	}
	return []string{k.secureAddr}
}

// CA is the authority that issued the SASL_SSL listener's certificate; nil
// without SASLSSLOptions. Issue client certificates from it for mTLS.
func (k *Kafka) CA() *TestCA { return k.ca }

// SecureKafkaUser is the user SharedSecureKafka creates.
var SecureKafkaUser = KafkaUser{Name: "spikehunt", Password: "spikehunt-test-password"}

// SharedSecureKafka returns the test binary's broker with a SASL_SSL
// listener beside its PLAINTEXT one (user SecureKafkaUser), starting it on
// first use; StopShared stops it. It is a broker of its own, not
// SharedKafka's: only tests of TLS and SASL pay for it.
func SharedSecureKafka(t testing.TB) *Kafka {
	t.Helper()
	if sharedStopped() {
		t.Fatal("testenv: SharedSecureKafka called after StopShared")
	}
	shared.secureOnce.Do(func() {
		shared.secure, shared.secureErr = StartKafka(KafkaOptions{SASLSSL: &SASLSSLOptions{Users: []KafkaUser{SecureKafkaUser}}})
	})
	if shared.secureErr != nil {
		t.Fatal(shared.secureErr)
	}
	k := shared.secure
	if k == nil {
		t.Fatal("testenv: SharedSecureKafka called after StopShared")
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafka broker log (tail):\n%s", lastLines(k.Log(), 60))
		}
	})
	return k
}

// ClientSecurity writes the broker's CA and the password of user into a
// temporary folder of t and returns the client configuration of the
// SASL_SSL listener with mechanism (PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512).
func (k *Kafka) ClientSecurity(t testing.TB, mechanism string, user KafkaUser) kafkasec.Config {
	t.Helper()
	if k.ca == nil {
		t.Fatal("testenv: ClientSecurity: the broker has no SASL_SSL listener (KafkaOptions.SASLSSL)")
	}
	dir := t.TempDir()
	ca, pw := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "password")
	if err := os.WriteFile(ca, k.ca.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pw, []byte(user.Password), 0o600); err != nil {
		t.Fatal(err)
	}
	return kafkasec.Config{
		TLS:  kafkasec.TLSConfig{Enabled: true, CAFile: ca},
		SASL: kafkasec.SASLConfig{Mechanism: mechanism, Username: user.Name, PasswordFile: pw},
	}
}
