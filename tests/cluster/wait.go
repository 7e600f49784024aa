//go:build linux

package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// defaultRouteIP is the source address the kernel picks for the default
// route: the address a node has on its network. Connecting a UDP socket
// sends nothing.
func defaultRouteIP() (string, error) {
	conn, err := net.Dial("udp4", "192.0.2.255:9")
	if err != nil {
		return "", fmt.Errorf("cluster: find the node IP (no IPv4 default route?): %w; set Options.NodeIP", err)
	}
	defer conn.Close()
	ip := conn.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() {
		return "", errors.New("cluster: the default route's address is loopback; set Options.NodeIP to an address pods can reach")
	}
	return ip.String(), nil
}

// waitFor polls check until it succeeds, the component exits or ctx ends.
func waitFor(ctx context.Context, comp *component, what string, check func() error) error {
	var last error
	for {
		if last = check(); last == nil {
			return nil
		}
		if err := comp.exited(); err != nil {
			return fmt.Errorf("cluster: waiting for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster: waiting for %s: %w; last: %v; log %s:\n%s", what, ctx.Err(), last, comp.log, tailFile(comp.log, 20))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func httpOK(client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

func nodeReady(ctx context.Context, cs kubernetes.Interface, name string) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %s not registered yet", name)
	}
	if err != nil {
		return err
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			if cond.Status == corev1.ConditionTrue {
				return nil
			}
			return fmt.Errorf("node %s not Ready: %s", name, cond.Message)
		}
	}
	return fmt.Errorf("node %s has no Ready condition yet", name)
}

// adminHTTPClient is an HTTP client with the admin certificate, for the
// API server's /readyz before a clientset is worth building.
func (f nodeFiles) adminHTTPClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(f.admin.Cert, f.admin.Key)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	ca, err := os.ReadFile(f.caFile)
	if err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}, nil
}
