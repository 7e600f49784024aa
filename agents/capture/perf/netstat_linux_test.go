package perf

import (
	"os"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/tests/testenv"
)

// /proc/net/netstat as this machine's kernel writes it, cut to the
// TcpExt pair and the line after it.
const netstat = `TcpExt: SyncookiesSent SyncookiesRecv SyncookiesFailed EmbryonicRsts ListenOverflows ListenDrops TCPHPHits
TcpExt: 2923 12891 4 0 1550 1562 142520
IpExt: InNoRoutes InTruncatedPkts
IpExt: 0 0
`

func TestParseListenStatReadsTheTcpExtPair(t *testing.T) {
	st, err := parseListenStat([]byte(netstat))
	if err != nil || st.Overflows != 1550 || st.Drops != 1562 {
		t.Errorf("%+v, %v", st, err)
	}
	for _, bad := range []string{"", "IpExt: a\nIpExt: 1\n", "TcpExt: SyncookiesSent\nTcpExt: 1\n", "TcpExt: ListenOverflows ListenDrops\nTcpExt: x 1\n"} {
		if st, err := parseListenStat([]byte(bad)); err == nil {
			t.Errorf("%q read as %+v", bad, st)
		}
	}
}

// The sampler reads this host's counters at each sample, and keeps the
// pre-window's before the fire as it does the quotas'.
func TestTheSamplerReadsTheListenCounters(t *testing.T) {
	if _, err := os.Stat(netstatFile); err != nil {
		// A kernel without TCP statistics (no /proc/net/netstat) only.
		testenv.RequirePrivileged(t, netstatFile, err)
	}
	s := newQuotaSampler(cgroupMounts{}, time.Second)
	t0 := time.Now()
	for i := range 10 {
		s.sampleListen(t0.Add(time.Duration(i) * time.Second))
	}
	got := s.Listen()
	if len(got) < 2 || len(got) > 5 || !got[len(got)-1].At.Equal(t0.Add(9*time.Second)) {
		t.Fatalf("%d samples kept of 10 a second apart with a 1 s pre-window: %+v", len(got), got)
	}
	if got[len(got)-1].Drops < got[len(got)-1].Overflows {
		t.Errorf("drops %d under overflows %d: they include them", got[len(got)-1].Drops, got[len(got)-1].Overflows)
	}
	s.Stop()
}
