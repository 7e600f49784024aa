package intake

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/spikehunt/spikehunt/internal/telemetry"
)

var billyTrace = [16]byte{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}

func TestParseLine(t *testing.T) {
	type want struct {
		service, endpoint, status string
		latency                   time.Duration
		traceID                   [16]byte
		threadID                  uint32
	}
	tests := []struct {
		name   string
		line   string
		want   want
		reason string // "" = parses
	}{
		{name: "four fields are a request without ids", line: "billy /search 5210 200",
			want: want{"billy", "/search", "200", 5210 * time.Microsecond, [16]byte{}, 0}},
		{name: "a trace id and a thread id follow", line: "billy /search 1000123 503 4bf92f3577b34da6a3ce929d0e0e4736 21560",
			want: want{"billy", "/search", "503", 1000123 * time.Microsecond, billyTrace, 21560}},
		{name: "uppercase hex is a trace id too", line: "billy /s 1 OK 4BF92F3577B34DA6A3CE929D0E0E4736",
			want: want{"billy", "/s", "OK", time.Microsecond, billyTrace, 0}},
		{name: "a dash stands for no trace id before a thread id", line: "billy /s 7 ERROR - 42",
			want: want{"billy", "/s", "ERROR", 7 * time.Microsecond, [16]byte{}, 42}},
		{name: "tabs, runs of spaces and a CR separate fields", line: "billy\t/s  0 \t200\r",
			want: want{"billy", "/s", "200", 0, [16]byte{}, 0}},
		{name: "UTF-8 names pass", line: "bílly /café 3 200",
			want: want{"bílly", "/café", "200", 3 * time.Microsecond, [16]byte{}, 0}},
		{name: "24 hours is the longest latency", line: "b e 86400000000 200",
			want: want{"b", "e", "200", 24 * time.Hour, [16]byte{}, 0}},
		{name: "the largest thread id is MaxUint32", line: "b e 1 200 - 4294967295",
			want: want{"b", "e", "200", time.Microsecond, [16]byte{}, 4294967295}},

		{name: "a blank line is skipped", line: " \t\r", reason: ""},
		{name: "three fields are too few", line: "billy /search 5210", reason: "fields"},
		{name: "seven fields are too many", line: "b e 1 200 - 1 extra", reason: "fields"},
		{name: "a negative latency is malformed", line: "b e -1 200", reason: "latency"},
		{name: "a fractional latency is malformed", line: "b e 1.5 200", reason: "latency"},
		{name: "a latency over 24 hours is malformed", line: "b e 86400000001 200", reason: "latency"},
		{name: "a latency beyond uint64 is malformed", line: "b e 99999999999999999999999 200", reason: "latency"},
		{name: "a status over 32 bytes is malformed", line: "b e 1 " + strings.Repeat("x", 33), reason: "status"},
		{name: "a short trace id is malformed", line: "b e 1 200 4bf92f35", reason: "trace_id"},
		{name: "a trace id with a non-hex digit is malformed", line: "b e 1 200 4bf92f3577b34da6a3ce929d0e0e473g", reason: "trace_id"},
		{name: "a thread id over 32 bits is malformed", line: "b e 1 200 - 4294967296", reason: "thread_id"},
		{name: "a negative thread id is malformed", line: "b e 1 200 - -3", reason: "thread_id"},
		{name: "invalid UTF-8 in a name is malformed", line: "b \xff\xfe 1 200", reason: "utf8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rec lineRecord
			err := parseLine([]byte(tt.line), &rec)
			if tt.reason != "" || tt.want == (want{}) {
				if err == nil {
					t.Fatalf("parseLine(%q) = %+v, want error %q", tt.line, rec, tt.reason)
				}
				if err.reason != tt.reason {
					t.Fatalf("parseLine(%q) error reason = %q (%v), want %q", tt.line, err.reason, err, tt.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseLine(%q): %v", tt.line, err)
			}
			got := want{string(rec.service), string(rec.endpoint), string(rec.status), rec.latency, rec.traceID, rec.threadID}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("parseLine(%q) (-want +got):\n%s", tt.line, diff)
			}
		})
	}
}

func TestParseLineCutsLongNames(t *testing.T) {
	long := strings.Repeat("é", 200) // 400 bytes
	var rec lineRecord
	err := parseLine([]byte("billy "+long+" 1 200"), &rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.endpoint) != 256 || !strings.HasPrefix(long, string(rec.endpoint)) {
		t.Errorf("endpoint cut to %d bytes (%q), want 256 bytes at a rune start", len(rec.endpoint), rec.endpoint)
	}
}

func TestLineReceivers(t *testing.T) {
	in := startIntake(t, testConfig(t))
	addrs := in.Addrs()
	for _, tc := range []struct{ network, addr, source string }{
		{"udp", addrs.LineUDP, SourceUDP},
		{"unixgram", addrs.LineUnix, SourceUnixgram},
	} {
		t.Run(tc.network, func(t *testing.T) {
			// One datagram: three good lines, one of each malformation, blank
			// lines and a CRLF; the bad lines must not cost the good ones.
			dgram := strings.Join([]string{
				"billy /search 5210 200 4bf92f3577b34da6a3ce929d0e0e4736 21560",
				"billy /search 5210",
				"",
				"billy /search 12x 200",
				"billy /cart 1000000 503\r",
				"billy /cart 10 200 nothex",
				"billy /cart 10 200 - 99999999999",
				"   ",
				"billy /health 3 OK - 7",
			}, "\n") + "\n"
			before := time.Now()
			sendDatagram(t, tc.network, tc.addr, []byte(dgram))
			got := collect(t, in, 3, 5*time.Second)
			after := time.Now()
			want := []telemetry.Request{
				{Service: "billy", Endpoint: "/search", Duration: 5210 * time.Microsecond, Status: "200", TraceID: billyTrace, ThreadID: 21560, Weight: 1},
				{Service: "billy", Endpoint: "/cart", Duration: time.Second, Status: "503", Weight: 1},
				{Service: "billy", Endpoint: "/health", Duration: 3 * time.Microsecond, Status: "OK", ThreadID: 7, Weight: 1},
			}
			for i := range got {
				// The receive time is the end: start = end − latency.
				end := got[i].Start.Add(got[i].Duration)
				if end.Before(before) || end.After(after) {
					t.Errorf("request %d ends at %s, want within [%s, %s]", i, end, before, after)
				}
				got[i].Start = time.Time{}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
			for reason, n := range map[string]float64{"fields": 1, "latency": 1, "trace_id": 1, "thread_id": 1} {
				if got := drops(in, tc.source, reason); got != n {
					t.Errorf("drops{source=%s, reason=%s} = %v, want %v", tc.source, reason, got, n)
				}
			}
		})
	}
}

func TestUnixgramDropsOversizedDatagram(t *testing.T) {
	cfg := testConfig(t)
	cfg.OTLPGRPC, cfg.OTLPHTTP, cfg.LineUDP = "", "", ""
	in := startIntake(t, cfg)
	line := []byte("billy /search 5210 200\n")
	big := bytes.Repeat(line, MaxDatagram/len(line)+1) // just over 64 KiB
	sendDatagram(t, "unixgram", in.Addrs().LineUnix, big)
	sendDatagram(t, "unixgram", in.Addrs().LineUnix, line)
	collect(t, in, 1, 5*time.Second)
	if got := drops(in, SourceUnixgram, "datagram_too_large"); got != 1 {
		t.Errorf("drops{reason=datagram_too_large} = %v, want 1", got)
	}
	expectNoMore(t, in, 50*time.Millisecond)
}

func TestUnixgramReplacesStaleSocketButNotALiveOne(t *testing.T) {
	cfg := testConfig(t)
	cfg.OTLPGRPC, cfg.OTLPHTTP, cfg.LineUDP = "", "", ""
	first := startIntake(t, cfg)

	second, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if err := second.Start(t.Context()); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Fatalf("Start on a live socket: err = %v, want 'in use by another process'", err)
	}
	// A killed agent leaves its socket file behind: simulate by closing
	// the socket without removing the file.
	first.packets[0].Close()
	third := startIntake(t, cfg)
	sendDatagram(t, "unixgram", cfg.LineUnix, []byte("billy /x 1 200\n"))
	collect(t, third, 1, 5*time.Second)
}

// decodeTraceID decodes eight digits at a time with word arithmetic: hold
// it to encoding/hex with every byte value at every position.
func TestDecodeTraceIDEveryByte(t *testing.T) {
	base := []byte("0123456789abcdefABCDEF0123456789")
	for pos := range base {
		for c := range 256 {
			s := bytes.Clone(base)
			s[pos] = byte(c)
			want, err := hex.DecodeString(string(s))
			var got [16]byte
			ok := decodeTraceID(&got, s)
			if ok != (err == nil) || (ok && !bytes.Equal(got[:], want)) {
				t.Fatalf("decodeTraceID(%q) = %x, %v; encoding/hex says %x, %v", s, got, ok, want, err)
			}
		}
	}
}
