package collect

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseNetSNMP(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want snmpReading
	}{
		{
			name: "the named counters are read, a signed MaxConn beside them is not",
			in: "Tcp: RtoAlgorithm MaxConn RetransSegs InCsumErrors\nTcp: 1 -1 42 9\n" +
				"Udp: InDatagrams RcvbufErrors InCsumErrors\nUdp: 5 7 3\n",
			want: snmpReading{
				values: [snmpCounters]uint64{snmpRetransSegs: 42, snmpUDPRcvbufErrors: 7, snmpUDPCsumErrors: 3},
				has:    [snmpCounters]bool{snmpRetransSegs: true, snmpUDPRcvbufErrors: true, snmpUDPCsumErrors: true},
			},
		},
		{
			name: "a name read under another section (UdpLite) is not taken",
			in:   "UdpLite: RcvbufErrors\nUdpLite: 99\nTcpExt: ListenOverflows ListenDrops TCPTimeouts\nTcpExt: 40 41 2\n",
			want: snmpReading{
				values: [snmpCounters]uint64{snmpListenOverflows: 40, snmpListenDrops: 41, snmpTimeouts: 2},
				has:    [snmpCounters]bool{snmpListenOverflows: true, snmpListenDrops: true, snmpTimeouts: true},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got snmpReading
			if err := parseNetSNMP([]byte(tt.in), &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(snmpReading{})); diff != "" {
				t.Errorf("parseNetSNMP (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseNetSNMPRejectsMalformedInput(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"a header without its values", "Tcp: RetransSegs\n"},
		{"values under another prefix", "Tcp: RetransSegs\nUdp: 1\n"},
		{"fewer values than names", "Tcp: RetransSegs InErrs\nTcp: 1\n"},
		{"more values than names", "Tcp: RetransSegs\nTcp: 1 2\n"},
		{"a counter read that is negative", "Tcp: RetransSegs\nTcp: -1\n"},
		{"a line without a prefix", "RetransSegs\n1\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var r snmpReading
			if err := parseNetSNMP([]byte(tt.in), &r); !errors.Is(err, errMalformed) {
				t.Errorf("parseNetSNMP(%q) error = %v, want errMalformed", tt.in, err)
			}
		})
	}
}

func TestParseNetSNMPOnRealFiles(t *testing.T) {
	var got snmpReading
	for _, f := range []string{"testdata/real/proc/net/snmp", "testdata/real/proc/net/netstat"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := parseNetSNMP(b, &got); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	want := snmpReading{values: [snmpCounters]uint64{snmpRetransSegs: 1, snmpTimeouts: 2}}
	for c := range snmpCounters {
		want.has[c] = true
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(snmpReading{})); diff != "" {
		t.Errorf("parseNetSNMP(real) (-want +got):\n%s", diff)
	}
}

// A listen queue overflowing 40 times a second: ListenOverflows and
// ListenDrops (which counts every SYN dropped at the listener, overflows
// included) rise; the real files are the baseline.
func TestListenQueueOverflowIsReportedAsARate(t *testing.T) {
	snmp, err := os.ReadFile("testdata/real/proc/net/snmp")
	if err != nil {
		t.Fatal(err)
	}
	netstat, err := os.ReadFile("testdata/real/proc/net/netstat")
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	clock := newFakeClock()
	writeFile(t, root, "proc/net/snmp", string(snmp))
	writeFile(t, root, "proc/net/netstat", string(netstat))
	c := newFixtureCollector(t, root, clock, "netsnmp")
	c.Sample()
	clock.Advance(time.Second)
	// Raise ListenOverflows and ListenDrops by 40 in the TcpExt values.
	lines := strings.Split(string(netstat), "\n")
	for i := 0; i+1 < len(lines); i += 2 {
		names, vals := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if names[0] != "TcpExt:" {
			continue
		}
		for j, n := range names {
			if n == "ListenOverflows" || n == "ListenDrops" {
				v, err := strconv.ParseUint(vals[j], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				vals[j] = strconv.FormatUint(v+40, 10)
			}
		}
		lines[i+1] = strings.Join(vals, " ")
	}
	writeFile(t, root, "proc/net/netstat", strings.Join(lines, "\n"))
	pts := c.Sample()
	got := map[string]float64{}
	for _, m := range []string{"spikehunt.tcp.listen_overflows", "spikehunt.tcp.listen_drops", "spikehunt.tcp.retransmits"} {
		for k, v := range rates(t, pts, m) {
			got[k] = v
		}
	}
	want := map[string]float64{"spikehunt.tcp.listen_overflows{}": 40, "spikehunt.tcp.listen_drops{}": 40, "spikehunt.tcp.retransmits{}": 0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rates (-want +got):\n%s", diff)
	}
}
