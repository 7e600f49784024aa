package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Check asks the brokers for metadata through cl, which connects,
// handshakes and authenticates as every request would. It returns nil, an
// error matching ErrRefused that says what to fix, or another error when
// no broker answered within ctx (down, or unreachable).
//
// Why a check at all: once running, franz-go retries a refused connection
// like a broker that is down, so a producer or consumer with a wrong
// password or CA waits until its deadline (for ever, without one) and
// says only "context deadline exceeded". A metadata request returns the
// refusal itself.
func Check(ctx context.Context, cl *kgo.Client, c Config) error {
	_, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err == nil {
		return nil
	}
	return Explain(err, c)
}

// Explain wraps err with what to fix when it is a refusal (it then matches
// ErrRefused); it returns other errors as they are.
func Explain(err error, c Config) error {
	var (
		unknownCA   x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		verify      *tls.CertificateVerificationError
		opErr       *net.OpError
		recordHdr   tls.RecordHeaderError
		kafkaErr    *kerr.Error
		caSource    = "the system's roots (kafka.tls.ca-file is empty)"
		credentials = "kafka.sasl.username"
	)
	if c.TLS.CAFile != "" {
		caSource = "kafka.tls.ca-file " + c.TLS.CAFile
	}
	if c.SASL.UsernameFile != "" {
		credentials = "kafka.sasl.username-file"
	}
	switch {
	case err == nil:
		return nil
	case errors.As(err, &unknownCA):
		return fmt.Errorf("%w: the broker's TLS certificate is not issued by a CA of %s; give the CA that issued it (Strimzi: ca.crt of the <cluster>-cluster-ca-cert Secret): %w", ErrRefused, caSource, err)
	case errors.As(err, &hostname):
		return fmt.Errorf("%w: the broker's TLS certificate does not name the address dialled; set kafka.tls.server-name to a name it carries, or dial a name it carries: %w", ErrRefused, err)
	case errors.As(err, &invalid), errors.As(err, &verify):
		return fmt.Errorf("%w: the broker's TLS certificate does not verify: %w", ErrRefused, err)
	case errors.As(err, &recordHdr):
		return fmt.Errorf("%w: the broker did not answer TLS: is this a PLAINTEXT or SASL_PLAINTEXT listener? Dial its SSL or SASL_SSL port, or turn kafka.tls.enabled off: %w", ErrRefused, err)
	case errors.As(err, &opErr) && opErr.Op == "remote error":
		// A TLS alert from the broker; crypto/tls has no exported type
		// for it.
		return fmt.Errorf("%w: the broker refused the TLS handshake (a client certificate it does not accept, or none where it requires one: kafka.tls.cert-file): %w", ErrRefused, err)
	case errors.As(err, &kafkaErr) && kafkaErr.Code == kerr.SaslAuthenticationFailed.Code:
		return fmt.Errorf("%w: SASL %s authentication refused by the broker: check the user (%s) and the password in kafka.sasl.password-file, and that the user exists for this mechanism: %w",
			ErrRefused, mechanism(c.SASL.Mechanism), credentials, err)
	case errors.As(err, &kafkaErr) && (kafkaErr.Code == kerr.UnsupportedSaslMechanism.Code || kafkaErr.Code == kerr.IllegalSaslState.Code):
		return fmt.Errorf("%w: the listener does not enable SASL %s: use a mechanism of its sasl.enabled.mechanisms, or another listener: %w", ErrRefused, mechanism(c.SASL.Mechanism), err)
	}
	return err
}
