//go:build linux

package e2ecluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// webhookTLSSecret is the kubernetes.io/tls Secret the release's alert
// webhook serves with (operator.webhook.tlsSecretName).
const webhookTLSSecret = "e2e-webhook-tls"

// createWebhookTLSSecretWhenTheNamespaceExists makes a self-signed
// certificate for the webhook's Service and puts it in the release's
// namespace as soon as the README's install block has created it: the
// block makes the namespace and installs at once, and the operator's pods
// wait for the Secret to mount. The returned channel gets the outcome.
func (e *env) createWebhookTLSSecretWhenTheNamespaceExists(t *testing.T) <-chan error {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	host := release + "-operator-webhook." + namespace + ".svc"
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: webhookTLSSecret, Namespace: namespace},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		},
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		for {
			_, err := e.clientset.CoreV1().Secrets(namespace).Create(ctx, secret, metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				done <- nil
				return
			}
			select {
			case <-ctx.Done():
				done <- err
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return done
}
