package intake

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/spikehunt/spikehunt/internal/telemetry"
	"github.com/spikehunt/spikehunt/tests/testenv"
)

func TestTrustPolicyDecidesByWhatTheTransportVouchesFor(t *testing.T) {
	cred := func(uid, gid uint32) telemetry.Sender {
		return telemetry.Sender{Source: SourceUnixgram, HasCred: true, UID: uid, GID: gid}
	}
	addr := func(s string) telemetry.Sender {
		return telemetry.Sender{Source: SourceUDP, Addr: netip.MustParseAddr(s)}
	}
	listed := TriggerConfig{UIDs: []uint32{1000}, GIDs: []uint32{2000}, CIDRs: []string{"10.244.0.0/16", "fd00::7", "::ffff:192.168.0.0/112"}}
	everyone := TriggerConfig{CIDRs: []string{"0.0.0.0/0", "::/0"}}
	for _, tc := range []struct {
		name   string
		cfg    TriggerConfig
		sender telemetry.Sender
		want   bool
	}{
		{"root on the unix socket, by default", TriggerConfig{}, cred(0, 0), true},
		{"another uid, by default", TriggerConfig{}, cred(1000, 1000), false},
		{"a listed uid", listed, cred(1000, 1000), true},
		{"an unlisted uid in a listed group", listed, cred(1001, 2000), true},
		{"an unlisted uid and group", listed, cred(1001, 1001), false},
		{"any uid", TriggerConfig{AnyUID: true}, cred(4242, 4242), true},
		{"a unix sender without credentials (not Linux)", listed, telemetry.Sender{Source: SourceUnixgram}, false},
		{"loopback UDP, by default", TriggerConfig{}, addr("127.0.0.1"), false},
		{"an address in a listed prefix", listed, addr("10.244.3.7"), true},
		{"an address outside it", listed, addr("10.245.0.1"), false},
		{"a listed single IPv6 address", listed, addr("fd00::7"), true},
		{"a v4-mapped prefix matches the plain address", listed, addr("192.168.0.9"), true},
		{"a v4-mapped address matches a plain prefix", listed, addr("::ffff:10.244.0.1"), true},
		{"OTLP, whose peer is unknown, by default", listed, telemetry.Sender{Source: SourceOTLPHTTP}, false},
		{"OTLP when every address is trusted", everyone, telemetry.Sender{Source: SourceOTLPGRPC}, true},
		{"OTLP when only IPv4 is", TriggerConfig{CIDRs: []string{"0.0.0.0/0"}}, telemetry.Sender{Source: SourceOTLPGRPC}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			p := newTrustPolicy(tc.cfg)
			s := tc.sender
			p.decide(&s)
			if s.Trusted != tc.want {
				t.Errorf("%s: trusted %v, want %v", s.String(), s.Trusted, tc.want)
			}
		})
	}
}

func TestTriggerCIDRsMustParse(t *testing.T) {
	cfg := testConfig(t)
	cfg.Trigger.CIDRs = []string{"10.0.0.0/8", "pods", "::ffff:1.2.3.4/64"}
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `trigger.cidrs: "pods"`) || !strings.Contains(err.Error(), `"::ffff:1.2.3.4/64"`) {
		t.Fatalf("Validate = %v, want both bad entries named", err)
	}
}

// tapped records what the tap saw: each kept request with its sender.
type tapped struct {
	mu   sync.Mutex
	from []telemetry.Sender
}

func (tp *tapped) tap(_ *telemetry.Request, from *telemetry.Sender) {
	tp.mu.Lock()
	tp.from = append(tp.from, *from)
	tp.mu.Unlock()
}

func (tp *tapped) wait(t *testing.T, n int) []telemetry.Sender {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		tp.mu.Lock()
		got := append([]telemetry.Sender(nil), tp.from...)
		tp.mu.Unlock()
		if len(got) >= n {
			return got
		}
	}
	t.Fatalf("the tap saw fewer than %d requests", n)
	return nil
}

// The receivers hand the tap each request's sender: on the unix socket
// the kernel's credentials of the sending process (this one), on UDP the
// source address; each judged by Config.Trigger.
func TestLineSendersCarryTheKernelsCredentialsOrTheirAddress(t *testing.T) {
	if runtime.GOOS != "linux" {
		testenv.RequirePrivileged(t, "a datagram's credentials (SCM_CREDENTIALS)", fmt.Errorf("only Linux passes them; this is %s", runtime.GOOS))
	}
	for _, tc := range []struct {
		name       string
		cidrs      []string
		udpTrusted bool
	}{
		{"by default", nil, false},
		{"with loopback listed", []string{"127.0.0.0/8"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.OTLPGRPC, cfg.OTLPHTTP = "", ""
			cfg.Trigger.CIDRs = tc.cidrs
			var tp tapped
			in := startIntake(t, cfg, func(in *Intake) { in.Tap(tp.tap) })
			sendDatagram(t, "unixgram", in.Addrs().LineUnix, []byte("checkout /pay 5000000 200\n"))
			got := tp.wait(t, 1)
			sendDatagram(t, "udp", in.Addrs().LineUDP, []byte("checkout /pay 5000000 200\n"))
			got = tp.wait(t, 2)
			u, p := got[0], got[1]
			if !u.HasCred || u.UID != uint32(os.Getuid()) || u.GID != uint32(os.Getgid()) || u.PID != int32(os.Getpid()) || u.Source != SourceUnixgram {
				t.Errorf("unix sender %+v, want uid %d gid %d pid %d", u, os.Getuid(), os.Getgid(), os.Getpid())
			}
			if u.Trusted != (os.Getuid() == 0) {
				t.Errorf("unix sender uid %d trusted %v: only root is, by default", u.UID, u.Trusted)
			}
			if p.HasCred || p.Addr != netip.MustParseAddr("127.0.0.1") || p.Source != SourceUDP || p.Trusted != tc.udpTrusted {
				t.Errorf("udp sender %+v, want 127.0.0.1 trusted %v", p, tc.udpTrusted)
			}
		})
	}
}

// An OTLP request's sender is its TCP peer, judged by address against
// the trigger's networks over both receivers; a forwarding header is a
// client's word and changes nothing.
func TestOTLPSendersAreJudgedByTheirPeerAddress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cidrs   []string
		trusted bool
	}{
		{"by default", nil, false},
		{"with another network listed", []string{"10.244.0.0/16"}, false},
		{"with loopback listed", []string{"127.0.0.0/8"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.LineUDP, cfg.LineUnix = "", ""
			cfg.Trigger.CIDRs = tc.cidrs
			var tp tapped
			in := startIntake(t, cfg, func(in *Intake) { in.Tap(tp.tap) })
			pb, err := ptraceotlp.NewExportRequestFromTraces(mixedTraces()).MarshalProto()
			if err != nil {
				t.Fatal(err)
			}
			hreq, _ := http.NewRequest(http.MethodPost, "http://"+in.Addrs().OTLPHTTP+"/v1/traces", bytes.NewReader(pb))
			hreq.Header.Set("Content-Type", "application/x-protobuf")
			hreq.Header.Set("X-Forwarded-For", "10.244.1.2")
			resp, err := http.DefaultClient.Do(hreq)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("OTLP/HTTP status %d", resp.StatusCode)
			}
			if _, err := ptraceotlp.NewGRPCClient(dialGRPC(t, in.Addrs().OTLPGRPC)).Export(t.Context(), ptraceotlp.NewExportRequestFromTraces(mixedTraces())); err != nil {
				t.Fatal(err)
			}
			got := tp.wait(t, 4) // mixedTraces holds two request spans
			sources := map[string]int{}
			for _, s := range got {
				sources[s.Source]++
				if s.Addr != netip.MustParseAddr("127.0.0.1") || s.Trusted != tc.trusted {
					t.Errorf("%s sender %+v, want 127.0.0.1 trusted %v", s.Source, s, tc.trusted)
				}
			}
			if sources[SourceOTLPHTTP] != 2 || sources[SourceOTLPGRPC] != 2 {
				t.Errorf("senders by source %v, want two of each OTLP receiver", sources)
			}
		})
	}
}

// The OTLP receivers' hook: a TCP peer judged by its address.
func TestSenderAtJudgesAConnectionsPeerByItsAddress(t *testing.T) {
	cfg := testConfig(t)
	cfg.Trigger.CIDRs = []string{"10.244.0.0/16"}
	in, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	src := in.m.sources[SourceOTLPGRPC]
	for addr, want := range map[string]bool{"10.244.1.2:4711": true, "[::ffff:10.244.1.2]:4711": true, "10.1.0.1:4711": false} {
		ta, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if s := in.senderAt(src, ta); s.Trusted != want || s.Source != SourceOTLPGRPC {
			t.Errorf("%s: %+v, want trusted %v", addr, s, want)
		}
	}
	if s := in.senderAt(src, nil); s.Trusted || s.Addr.IsValid() {
		t.Errorf("no address: %+v, want untrusted", s)
	}
}
