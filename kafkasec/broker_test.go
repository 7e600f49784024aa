package kafkasec_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// refusalBound is how long a refusal may take to come back: the broker
// answers at once, this is generous for a loaded machine. Without Check
// a refused client waits for its deadline, whatever it is.
const refusalBound = 10 * time.Second

func client(t *testing.T, k *testenv.Kafka, c kafkasec.Config, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	sec, err := c.Options()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(append(sec, kgo.SeedBrokers(k.SecureBrokers()...)), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func TestEveryMechanismProducesAndConsumesOverTLS(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	for _, m := range []string{kafkasec.MechanismPlain, kafkasec.MechanismSCRAMSHA256, kafkasec.MechanismSCRAMSHA512} {
		t.Run(m, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := k.ClientSecurity(t, m, testenv.SecureKafkaUser)
			topic := "sec-" + strings.ToLower(m)
			p := client(t, k, c, kgo.AllowAutoTopicCreation())
			if err := kafkasec.Check(ctx, p, c); err != nil {
				t.Fatal(err)
			}
			if err := p.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(m)}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			cons := client(t, k, c, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			fs := cons.PollRecords(ctx, 1)
			if err := fs.Err0(); err != nil {
				t.Fatal(err)
			}
			if r := fs.Records(); len(r) != 1 || string(r[0].Value) != m {
				t.Fatalf("consumed %v, want the record produced", r)
			}
		})
	}
}

// A client certificate of the broker's CA (mTLS) beside SCRAM; the broker
// asks for one (ssl.client.auth=requested) and checks what it gets.
func TestClientCertificateIsPresentedAndAccepted(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	c := k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.SecureKafkaUser)
	cert, key, err := k.CA().Issue("spikehunt-agent")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	c.TLS.CertFile, c.TLS.KeyFile = filepath.Join(dir, "user.crt"), filepath.Join(dir, "user.key")
	os.WriteFile(c.TLS.CertFile, cert, 0o600)
	os.WriteFile(c.TLS.KeyFile, key, 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := kafkasec.Check(ctx, client(t, k, c), c); err != nil {
		t.Fatal(err)
	}

	// A certificate from a CA the broker does not trust is refused by the
	// broker, which proves the certificate is sent and checked.
	other, _ := testenv.NewTestCA("someone else")
	cert, key, _ = other.Issue("intruder")
	os.WriteFile(c.TLS.CertFile, cert, 0o600)
	os.WriteFile(c.TLS.KeyFile, key, 0o600)
	err = kafkasec.Check(ctx, client(t, k, c), c)
	if !errors.Is(err, kafkasec.ErrRefused) {
		t.Fatalf("an untrusted client certificate: %v, want ErrRefused", err)
	}
}

func TestWrongPasswordIsRefusedWithAClearErrorInBoundedTime(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	for _, m := range []string{kafkasec.MechanismPlain, kafkasec.MechanismSCRAMSHA256, kafkasec.MechanismSCRAMSHA512} {
		c := k.ClientSecurity(t, m, testenv.KafkaUser{Name: testenv.SecureKafkaUser.Name, Password: "not-the-password"})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		start := time.Now()
		err := kafkasec.Check(ctx, client(t, k, c), c)
		took := time.Since(start)
		cancel()
		if !errors.Is(err, kafkasec.ErrRefused) || !strings.Contains(err.Error(), "SASL "+m+" authentication refused") ||
			!strings.Contains(err.Error(), "kafka.sasl.password-file") {
			t.Errorf("%s: %v; want ErrRefused naming the mechanism and the password file", m, err)
		}
		if took > refusalBound {
			t.Errorf("%s: refused after %v, want within %v", m, took, refusalBound)
		}
	}
}

func TestUnknownCAIsRefusedWithAClearError(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	c := k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.SecureKafkaUser)
	other, err := testenv.NewTestCA("not the broker's CA")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(c.TLS.CAFile, other.CertPEM(), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err = kafkasec.Check(ctx, client(t, k, c), c)
	if !errors.Is(err, kafkasec.ErrRefused) || !strings.Contains(err.Error(), "not issued by a CA of kafka.tls.ca-file "+c.TLS.CAFile) {
		t.Errorf("%v; want ErrRefused naming the CA file", err)
	}
	if took := time.Since(start); took > refusalBound {
		t.Errorf("refused after %v, want within %v", took, refusalBound)
	}

	// The same with the system's roots, and a certificate for another name.
	for _, tc := range []struct {
		name string
		tls  kafkasec.TLSConfig
		want string
	}{
		{"system roots", kafkasec.TLSConfig{Enabled: true}, "the system's roots"},
		{"another server name", kafkasec.TLSConfig{Enabled: true, CAFile: k.ClientSecurity(t, "PLAIN", testenv.SecureKafkaUser).TLS.CAFile, ServerName: "kafka.example"}, "kafka.tls.server-name"},
	} {
		c := c
		c.TLS = tc.tls
		if err := kafkasec.Check(ctx, client(t, k, c), c); !errors.Is(err, kafkasec.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrRefused saying %q", tc.name, err, tc.want)
		}
	}
}

// TLS to the PLAINTEXT listener: the broker hangs up, and franz-go's error
// says TLS may be misconfigured. It is not a refusal: a broker going down
// hangs up too, and must not stop a client at start.
func TestTLSToAPlaintextListenerIsAnErrorNamingTLS(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	c := kafkasec.Config{TLS: kafkasec.TLSConfig{Enabled: true}}
	sec, _ := c.Options()
	cl, err := kgo.NewClient(append(sec, kgo.SeedBrokers(k.Brokers()...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkasec.Check(ctx, cl, c); err == nil || errors.Is(err, kafkasec.ErrRefused) || !strings.Contains(err.Error(), "TLS") {
		t.Errorf("%v; want an error that is not ErrRefused and names TLS", err)
	}
}

// The password file is read at every new connection: a rotated Secret
// takes effect without a new client.
func TestRotatedPasswordFileIsReadAtTheNextConnection(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	c := k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA256, testenv.KafkaUser{Name: testenv.SecureKafkaUser.Name, Password: "stale"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl := client(t, k, c)
	if err := kafkasec.Check(ctx, cl, c); !errors.Is(err, kafkasec.ErrRefused) {
		t.Fatalf("stale password: %v, want ErrRefused", err)
	}
	os.WriteFile(c.SASL.PasswordFile, []byte(testenv.SecureKafkaUser.Password+"\n"), 0o600)
	if err := kafkasec.Check(ctx, cl, c); err != nil {
		t.Fatalf("after the rotation, the same client: %v", err)
	}
}

// Once running, a refused connection is logged with what to fix, not
// retried in silence.
func TestRefusalAfterStartIsLogged(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	c := k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.KafkaUser{Name: testenv.SecureKafkaUser.Name, Password: "rotated-at-the-broker"})
	var buf testenv.SyncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	cl := client(t, k, c, kafkasec.RefusalLog(log, c), kgo.DefaultProduceTopic("refused-after-start"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = cl.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}) // retried until ctx ends
	if out := buf.String(); strings.Count(out, "level=ERROR") != 1 || !strings.Contains(out, "SASL SCRAM-SHA-512 authentication refused") {
		t.Errorf("log:\n%s\nwant one error line saying the authentication was refused", out)
	}
}
