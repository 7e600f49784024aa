package kafkasec

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

func TestConfigMistakesAreClearErrors(t *testing.T) {
	sasl := func(m string) SASLConfig { return SASLConfig{Mechanism: m, Username: "u", PasswordFile: "/p"} }
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"the zero value is plaintext", Config{}, ""},
		{"TLS with the system roots", Config{TLS: TLSConfig{Enabled: true}}, ""},
		{"SCRAM in lower case", Config{SASL: sasl("scram-sha-512")}, ""},
		{"an unknown mechanism", Config{SASL: sasl("GSSAPI")}, `unknown SASL mechanism "GSSAPI"`},
		{"MSK IAM", Config{SASL: sasl("AWS_MSK_IAM")}, "AWS_MSK_IAM are not supported"},
		{"no password file", Config{SASL: SASLConfig{Mechanism: "PLAIN", Username: "u"}}, "needs kafka.sasl.password-file"},
		{"no user", Config{SASL: SASLConfig{Mechanism: "PLAIN", PasswordFile: "/p"}}, "needs a user"},
		{"two users", Config{SASL: SASLConfig{Mechanism: "PLAIN", Username: "u", UsernameFile: "/u", PasswordFile: "/p"}}, "not both"},
		{"credentials without a mechanism", Config{SASL: SASLConfig{Username: "u", PasswordFile: "/p"}}, "no mechanism"},
		{"a CA without TLS", Config{TLS: TLSConfig{CAFile: "/ca"}}, "kafka.tls.enabled is not"},
		{"a certificate without its key", Config{TLS: TLSConfig{Enabled: true, CertFile: "/c"}}, "both kafka.tls.cert-file and kafka.tls.key-file"},
		{"skip-verify beside a CA", Config{TLS: TLSConfig{Enabled: true, CAFile: "/ca", DangerousSkipVerify: true}}, "ignores kafka.tls.ca-file"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig)):
			t.Errorf("%s: err %v, want one matching ErrConfig that contains %q", tc.name, err, tc.want)
		}
	}
}

func TestOptionsSayWhichFileIsWrong(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pw, empty, notPEM := write("pw", "secret\n"), write("empty", "\n"), write("notpem", "hello")
	unreadable := filepath.Join(dir, "dir")
	os.Mkdir(unreadable, 0o700)
	scram := func(file string) Config {
		return Config{SASL: SASLConfig{Mechanism: MechanismSCRAMSHA512, Username: "u", PasswordFile: file}}
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"a missing CA file", Config{TLS: TLSConfig{Enabled: true, CAFile: filepath.Join(dir, "nope")}}, "kafka.tls.ca-file: open"},
		{"a CA file without a certificate", Config{TLS: TLSConfig{Enabled: true, CAFile: notPEM}}, "holds no PEM certificate"},
		{"a client key pair that does not load", Config{TLS: TLSConfig{Enabled: true, CertFile: notPEM, KeyFile: notPEM}}, "kafka.tls.cert-file " + notPEM},
		{"a missing password file", scram(filepath.Join(dir, "nope")), "kafka.sasl.password-file: open"},
		{"an unreadable password file", scram(unreadable), "kafka.sasl.password-file: read"},
		{"an empty password file", scram(empty), "kafka.sasl.password-file " + empty + " is empty"},
	} {
		_, err := tc.cfg.Options()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrConfig) {
			t.Errorf("%s: err %v, want one matching ErrConfig that contains %q", tc.name, err, tc.want)
		}
	}
	if opts, err := scram(pw).Options(); err != nil || len(opts) != 1 {
		t.Errorf("SCRAM with a good password file: %d options, %v; want the SASL option", len(opts), err)
	}
	if opts, err := (Config{}).Options(); err != nil || len(opts) != 0 {
		t.Errorf("the zero Config: %d options, %v; want none", len(opts), err)
	}
}

func TestPasswordFileLosesOneTrailingLineBreakOnly(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pw")
	for content, want := range map[string]string{"pw\n": "pw", "pw\r\n": "pw", "pw": "pw", " pw \n\n": " pw \n"} {
		os.WriteFile(p, []byte(content), 0o600)
		if got, err := readSecretFile(p, "f"); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", content, got, err, want)
		}
	}
}

func TestStringNamesTheProtocolAndNeverThePassword(t *testing.T) {
	c := Config{TLS: TLSConfig{Enabled: true, DangerousSkipVerify: true}, SASL: SASLConfig{Mechanism: "scram-sha-256", Username: "u", PasswordFile: "/secret/pw"}}
	if got, want := c.String(), "SASL_SSL SCRAM-SHA-256 as u, BROKER CERTIFICATES NOT VERIFIED"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}

func TestConfigLoadsEveryKeyOfTheSample(t *testing.T) {
	b, err := os.ReadFile("testdata/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var got Config
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := Config{
		TLS: TLSConfig{Enabled: true, CAFile: "/etc/spikehunt/kafka/ca/ca.crt", CertFile: "/etc/spikehunt/kafka/client/tls.crt",
			KeyFile: "/etc/spikehunt/kafka/client/tls.key", ServerName: "kafka.internal"},
		SASL: SASLConfig{Mechanism: "SCRAM-SHA-512", Username: "spikehunt", PasswordFile: "/etc/spikehunt/kafka/sasl/password"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := got.Validate(); err != nil {
		t.Error(err)
	}
	strict := yaml.NewDecoder(strings.NewReader("sasl:\n  password: hunter2\n"))
	strict.KnownFields(true)
	if err := strict.Decode(new(Config)); err == nil {
		t.Error("a password key was accepted: passwords come from password_file only")
	}
}
