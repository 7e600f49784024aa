package chhttp

import "testing"

// A wildcard listen address is named as loopback to Grafana, and an
// address without a port is refused.
func TestGrafanaProvisioningOfAWildcardAddressNamesLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8123", "[::]:8123"} {
		p, err := NewGrafanaProvisioning(addr, "demo", "", "X", "")
		if err != nil || p.Host != "127.0.0.1" || p.Port != "8123" || p.PasswordEnv != "" {
			t.Errorf("%s: %+v, %v", addr, p, err)
		}
	}
	if _, err := NewGrafanaProvisioning("nonsense", "demo", "", "", ""); err == nil {
		t.Error("an address without a port was accepted")
	}
}
