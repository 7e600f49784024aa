package kafkasec

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// DialFunc dials one broker; kgo.Dialer takes it.
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// dialTimeout is franz-go's default, kept when we dial ourselves.
const dialTimeout = 10 * time.Second

// Options validates c, reads its files and returns the franz-go options
// that make a client speak it: a TLS dialer and the SASL mechanism. It
// returns no options for the zero Config. Its errors match ErrConfig and
// name the file and the flag to fix.
func (c Config) Options() ([]kgo.Opt, error) { return c.OptionsWithDialer(nil) }

// OptionsWithDialer is Options for a client that dials brokers itself
// (kgo.Dialer): dial makes the TCP connection and TLS runs over it. Nil
// dial is a net.Dialer with franz-go's 10 s timeout. franz-go's own
// DialTLSConfig would replace such a dialer, not wrap it.
func (c Config) OptionsWithDialer(dial DialFunc) ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if c.TLS.Enabled {
		tc, err := c.TLS.load()
		if err != nil {
			return nil, err
		}
		if dial == nil {
			dial = (&net.Dialer{Timeout: dialTimeout}).DialContext
		}
		opts = append(opts, kgo.Dialer(tlsDialer(dial, tc)))
	} else if dial != nil {
		opts = append(opts, kgo.Dialer(dial))
	}
	if c.SASL.Mechanism != "" {
		m, err := c.SASL.load()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// tlsDialer runs a TLS client handshake over each connection dial makes,
// naming the broker's host as the server unless the config names one (as
// franz-go's DialTLSConfig does).
func tlsDialer(dial DialFunc, base *tls.Config) DialFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := base.Clone()
		if cfg.ServerName == "" {
			if host, _, err := net.SplitHostPort(addr); err == nil {
				cfg.ServerName = host
			}
		}
		conn := tls.Client(raw, cfg)
		if err := conn.HandshakeContext(ctx); err != nil {
			raw.Close()
			return nil, err
		}
		return conn, nil
	}
}

// load reads the CA and checks the client key pair once, so that a wrong
// path fails at start rather than at the first connection.
func (t TLSConfig) load() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.DangerousSkipVerify {
		cfg.InsecureSkipVerify = true
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: kafka.tls.ca-file: %w", ErrConfig, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: kafka.tls.ca-file %s holds no PEM certificate (want -----BEGIN CERTIFICATE-----; Strimzi: ca.crt of <cluster>-cluster-ca-cert)", ErrConfig, t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			return nil, fmt.Errorf("%w: kafka.tls.cert-file %s with kafka.tls.key-file %s: %w", ErrConfig, t.CertFile, t.KeyFile, err)
		}
		certFile, keyFile := t.CertFile, t.KeyFile
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				return nil, fmt.Errorf("kafka: client certificate: %w", err)
			}
			return &c, nil
		}
	}
	return cfg, nil
}

// load checks the credential files once and returns a mechanism that reads
// them again at every authentication.
func (s SASLConfig) load() (sasl.Mechanism, error) {
	creds := func() (user, pass string, err error) {
		user = s.Username
		if s.UsernameFile != "" {
			if user, err = readSecretFile(s.UsernameFile, "kafka.sasl.username-file"); err != nil {
				return "", "", err
			}
		}
		pass, err = readSecretFile(s.PasswordFile, "kafka.sasl.password-file")
		return user, pass, err
	}
	if _, _, err := creds(); err != nil {
		return nil, err
	}
	switch mechanism(s.Mechanism) {
	case MechanismPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			u, p, err := creds()
			return plain.Auth{User: u, Pass: p}, err
		}), nil
	case MechanismSCRAMSHA256:
		return scram.Sha256(func(context.Context) (scram.Auth, error) {
			u, p, err := creds()
			return scram.Auth{User: u, Pass: p}, err
		}), nil
	default: // Validate admits nothing else
		return scram.Sha512(func(context.Context) (scram.Auth, error) {
			u, p, err := creds()
			return scram.Auth{User: u, Pass: p}, err
		}), nil
	}
}

// readSecretFile reads a one-line secret. A file written with echo ends in
// a line break that is not part of the secret; Kubernetes Secrets have
// none.
func readSecretFile(path, flag string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrConfig, flag, err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	if len(b) == 0 {
		return "", fmt.Errorf("%w: %s %s is empty", ErrConfig, flag, path)
	}
	return string(b), nil
}

// ErrRefused is what Explain's and Check's errors match with errors.Is
// when the broker or the client refused the other: a certificate that does
// not verify, a failed authentication, a mechanism the listener does not
// enable. Retrying does not help; the configuration must change.
var ErrRefused = errors.New("kafka refused the connection")
