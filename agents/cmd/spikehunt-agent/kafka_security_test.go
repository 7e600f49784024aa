package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/kafkasec"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

// secureFlags are the agent's flags for the broker's SASL_SSL listener.
func secureFlags(c kafkasec.Config) []string {
	return []string{"--kafka.tls.enabled", "--kafka.tls.ca-file", c.TLS.CAFile,
		"--kafka.sasl.mechanism", c.SASL.Mechanism, "--kafka.sasl.username", c.SASL.Username,
		"--kafka.sasl.password-file", c.SASL.PasswordFile}
}

// The binary, configured by its flags, exports over SASL_SSL; the records
// are read back through the broker's other listener.
func TestAgentExportsOverSASLSSLConfiguredByItsFlags(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	c := k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.SecureKafkaUser)
	p := startAgent(t, k.SecureBrokers(), t.TempDir(), secureFlags(c)...)
	var lines []string
	for i := range 200 {
		lines = append(lines, fmt.Sprintf("billy /get %d 200 %s %d", 900_000, traceID(i), 1000+i%8))
	}
	sendLines(t, p.sock, lines)
	got := consume(t, k, func(c *consumed) bool { return len(c.spans) == 200 && c.points["system.cpu.time"] > 0 }, 30*time.Second)
	if len(got.spans) != 200 || got.points["system.cpu.time"] == 0 {
		t.Fatalf("%d of 200 requests and %d cpu points arrived", len(got.spans), got.points["system.cpu.time"])
	}
	p.stop(t)
	if out := p.out.String(); !strings.Contains(out, "SASL_SSL SCRAM-SHA-512 as spikehunt") {
		t.Errorf("no start-up line naming the security:\n%s", tail(out, 20))
	}
}

// A wrong password stops the agent at start with what to fix, within the
// check's bound, instead of an agent that spools for ever.
func TestAgentWithAWrongPasswordExitsSayingSo(t *testing.T) {
	k := testenv.SharedSecureKafka(t)
	c := k.ClientSecurity(t, kafkasec.MechanismSCRAMSHA512, testenv.KafkaUser{Name: testenv.SecureKafkaUser.Name, Password: "wrong"})
	tmp := t.TempDir()
	out := &testenv.SyncBuffer{}
	cmd := execAgent(append([]string{"--kafka.brokers", k.SecureBrokers()[0], "--spool.dir", tmp + "/spool", "--listen", "127.0.0.1:0",
		"--capture.enabled=false", "--intake.line-unix", tmp + "/agent.sock", "--intake.line-udp", "", "--intake.otlp-grpc", "", "--intake.otlp-http", "",
		"--host-name", "test-node", "--hw-class", "gen5"}, secureFlags(c)...), out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("the agent exited 0:\n%s", out)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the agent still runs after 30 s:\n%s", tail(out.String(), 20))
	}
	if s := out.String(); !strings.Contains(s, "SASL SCRAM-SHA-512 authentication refused") || !strings.Contains(s, "kafka.sasl.password-file") {
		t.Errorf("the exit does not say what to fix:\n%s", tail(s, 10))
	}
}
