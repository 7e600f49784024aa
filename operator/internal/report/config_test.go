package report

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testdata/users.yaml is the users file the chart's README shows, with a
// bcrypt hash as htpasswd writes it ($2y$) and a sha256 one.
func TestUsersFileOfTheChartsREADME(t *testing.T) {
	b, err := os.ReadFile("testdata/users.yaml")
	if err != nil {
		t.Fatal(err)
	}
	us, err := parseUsers(b)
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		User, Password, Namespace string
		In, May                   bool
	}
	var got []grant
	for _, g := range []grant{
		{User: "alice", Password: alicePassword, Namespace: "shop"},
		{User: "alice", Password: alicePassword, Namespace: "payments"},
		{User: "alice", Password: alicePassword, Namespace: "kube-system"},
		{User: "alice", Password: oncallPassword, Namespace: "shop"},
		{User: "oncall", Password: oncallPassword, Namespace: "kube-system"},
		{User: "oncall", Password: strings.ToUpper(oncallPassword), Namespace: "shop"},
	} {
		u, ok := us.Authenticate(g.User, g.Password)
		g.In, g.May = ok, ok && u.may(g.Namespace)
		got = append(got, g)
	}
	want := []grant{
		{"alice", alicePassword, "shop", true, true},
		{"alice", alicePassword, "payments", true, true},
		{"alice", alicePassword, "kube-system", true, false},
		{"alice", oncallPassword, "shop", false, false},
		{"oncall", oncallPassword, "kube-system", true, true},
		{"oncall", strings.ToUpper(oncallPassword), "shop", false, false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("grants (-want +got):\n%s", diff)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Address: ":8090", UsersFile: "/etc/spikehunt/report-users/users.yaml"}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("the defaults with an address and users: %v", err)
	}
	if d := DefaultConfig(); d.Mode != ModeProxy || d.PresignTTL != 5*time.Minute || d.Address != "" {
		t.Errorf("defaults: mode %s, presign TTL %v, address %q: want proxy, 5m, off", d.Mode, d.PresignTTL, d.Address)
	}
	for _, tt := range []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no users", func(c *Config) { c.UsersFile = "" }, "never serves without authentication"},
		{"no address", func(c *Config) { c.Address = "" }, "--report.address"},
		{"an unknown mode", func(c *Config) { c.Mode = "presign" }, "want proxy or redirect"},
		{"a presigned URL for a day", func(c *Config) { c.PresignTTL = 24 * time.Hour }, "1s–12h0m0s"},
		{"a certificate without its key", func(c *Config) { c.TLSCertFile = "/tls/tls.crt" }, "both"},
		{"no connections", func(c *Config) { c.MaxConnections = -1 }, "max connections"},
		{"a 16-byte path cap", func(c *Config) { c.MaxPathBytes = 16 }, "64–8192"},
		{"a file cap under 1 MiB", func(c *Config) { c.MaxFileBytes = 1000 }, "at least 1 MiB"},
		{"no write timeout", func(c *Config) { c.WriteTimeout = -time.Second }, "write timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.change(&c)
			before := c
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want an error saying %q", err, tt.want)
			}
			if diff := cmp.Diff(before, c); diff != "" {
				t.Errorf("Validate changed its receiver:\n%s", diff)
			}
		})
	}
}
