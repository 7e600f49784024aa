package intake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The attacks below come from 127.0.0.2 and up, the real senders from
// 127.0.0.1: on Linux all of 127.0.0.0/8 is loopback, so each address is
// a peer of its own, as two pods on a node are.

// dialerFrom dials from the loopback address from.
func dialerFrom(from string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
}

// dialGRPCFrom is dialGRPC from the loopback address from.
func dialGRPCFrom(t testing.TB, addr, from string) *grpc.ClientConn {
	t.Helper()
	d := dialerFrom(from)
	conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// silentStreams opens n Export streams on conn that never send their
// message.
func silentStreams(t testing.TB, ctx context.Context, conn *grpc.ClientConn, n int) {
	t.Helper()
	for range n {
		if _, err := conn.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, exportMethod); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSilentGRPCStreamsHoldNoBudgetAndAreCounted(t *testing.T) {
	cfg := testConfig(t)
	cfg.OTLPReadTimeout = 400 * time.Millisecond
	cfg.OTLPWriteTimeout = 400 * time.Millisecond
	in := startIntake(t, cfg)
	addr := in.Addrs().OTLPGRPC
	small := ptraceotlp.NewExportRequestFromTraces(manySpans(10))

	// Sixteen silent streams, as many as the whole default budget took at
	// max_request_bytes each when it was charged as a stream opened.
	attacker := dialGRPCFrom(t, addr, "127.0.0.2")
	silentStreams(t, t.Context(), attacker, 16)
	waitFor(t, 5*time.Second, "the streams to open", func() bool {
		in.budget.mu.Lock()
		defer in.budget.mu.Unlock()
		p := in.budget.peers[peerAddr(&net.TCPAddr{IP: net.ParseIP("127.0.0.2")})]
		return p != nil && p.streams == 16
	})
	if used := in.budget.used.Load(); used != 0 {
		t.Errorf("silent streams hold %d bytes of the decode budget, want none", used)
	}
	client := ptraceotlp.NewGRPCClient(dialGRPCFrom(t, addr, "127.0.0.1"))
	for i := range 5 {
		if _, err := client.Export(t.Context(), small); err != nil {
			t.Fatalf("export %d beside the silent streams: %v", i, err)
		}
	}
	// More streams than otlp_streams_per_peer are refused at once.
	extra, err := attacker.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true}, exportMethod)
	if err != nil {
		t.Fatal(err)
	}
	if err := extra.RecvMsg(&grpcRequest{}); status.Code(err) != codes.ResourceExhausted || !hasRetryInfo(err) {
		t.Errorf("stream beyond the peer's cap: %v, want ResourceExhausted with a RetryInfo", err)
	}
	if got := drops(in, SourceOTLPGRPC, reasonPeerStreams); got != 1 {
		t.Errorf("drops{peer_streams} = %v, want 1", got)
	}
	// The silent ones end at the call's timeout, counted.
	waitFor(t, 5*time.Second, "16 silent streams counted", func() bool { return drops(in, SourceOTLPGRPC, reasonSilentStream) == 16 })
	collect(t, in, 50, 5*time.Second)
}

// rawHeaderFlood opens a plain HTTP/2 connection from from and sends
// streams Export requests, each with a metadata entry of size bytes,
// without reading; it returns the connection.
func rawHeaderFlood(t testing.TB, addr, from string, streams, size int) net.Conn {
	t.Helper()
	c := rawHeaderFloodConn(addr, from, streams, size)
	if c == nil {
		t.Fatalf("dial %s from %s", addr, from)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawHeaderFloodConn is rawHeaderFlood's connection, nil if it could not
// dial; the caller closes it.
func rawHeaderFloodConn(addr, from string, streams, size int) net.Conn {
	c, err := dialerFrom(from).Dial("tcp", addr)
	if err != nil {
		return nil
	}
	block := headerBlock(addr, size)
	go func() {
		c.Write([]byte(http2.ClientPreface))
		fr := http2.NewFramer(c, c)
		fr.WriteSettings()
		for i := range streams {
			b := block
			id := uint32(2*i + 1)
			first := min(len(b), 16<<10)
			if fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b[:first], EndHeaders: first == len(b)}) != nil {
				return
			}
			for b = b[first:]; len(b) > 0; {
				k := min(len(b), 16<<10)
				if fr.WriteContinuation(id, k == len(b), b[:k]) != nil {
					return
				}
				b = b[k:]
			}
		}
	}()
	return c
}

// headerBlock is the HPACK block of an Export request with a metadata
// entry of size bytes. Its fields are never indexed, so the same block
// serves every stream of a connection; it is encoded once a size.
func headerBlock(authority string, size int) []byte {
	key := fmt.Sprint(authority, "/", size)
	if b, ok := headerBlocks.Load(key); ok {
		return b.([]byte)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", exportMethod}, {":authority", authority},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"x-pad", strings.Repeat("a", size)}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1], Sensitive: true})
	}
	headerBlocks.Store(key, block.Bytes())
	return block.Bytes()
}

var headerBlocks sync.Map

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

func TestOversizeGRPCMetadataIsRefusedAndCounted(t *testing.T) {
	cfg := testConfig(t)
	in := startIntake(t, cfg)
	addr := in.Addrs().OTLPGRPC
	small := ptraceotlp.NewExportRequestFromTraces(manySpans(10))

	t.Run("a grpc-go client is told the limit", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(t.Context(), "x-pad", strings.Repeat("a", 64<<10))
		client := ptraceotlp.NewGRPCClient(dialGRPCFrom(t, addr, "127.0.0.1"))
		// The first call may go out before the server's SETTINGS arrive.
		client.Export(t.Context(), small)
		if _, err := client.Export(ctx, small); err == nil {
			t.Error("an export with 64 KiB of metadata was taken")
		}
	})

	t.Run("a flood of large header blocks is cut and counted", func(t *testing.T) {
		before := heapInUse()
		// The grpc-go client above may have sent its block before it
		// read the limit, and been counted.
		counted := drops(in, SourceOTLPGRPC, reasonOversizeMetadata)
		var conns []net.Conn
		for i := range 8 {
			conns = append(conns, rawHeaderFlood(t, addr, "127.0.0.2", 16, 1<<20+i))
		}
		// At least 8: the grpc-go client's own connection may be counted
		// late, after counted was read. That each of the 8 was cut by
		// the agent is checked below, connection by connection.
		waitFor(t, 10*time.Second, "8 connections counted", func() bool {
			return drops(in, SourceOTLPGRPC, reasonOversizeMetadata)-counted >= 8
		})
		for i, c := range conns {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Read(make([]byte, 64<<10)); err != nil && !closedByPeer(c) {
				t.Errorf("flood connection %d: %v, want it closed by the agent", i, err)
			}
		}
		if grew := int64(heapInUse()) - int64(before); grew > 32<<20 {
			t.Errorf("the heap grew %d MiB under the flood, want under 32 MiB", grew>>20)
		}
		if _, err := ptraceotlp.NewGRPCClient(dialGRPCFrom(t, addr, "127.0.0.1")).Export(t.Context(), small); err != nil {
			t.Errorf("export after the flood: %v", err)
		}
	})
}

func TestIdleHTTPConnectionsCannotKeepSendersOut(t *testing.T) {
	cfg := testConfig(t)
	cfg.OTLPIdleTimeout = time.Minute
	cfg.OTLPReadTimeout = time.Minute
	in := startIntake(t, cfg)
	addr := in.Addrs().OTLPHTTP
	body, _ := ptraceotlp.NewExportRequestFromTraces(manySpans(2)).MarshalProto()

	// 1,030 connections that never send a byte, from five peers: more
	// than the server's 1,024 places.
	var idle []net.Conn
	for i := range 1030 {
		c, err := dialerFrom([]string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"}[i%5]).Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		idle = append(idle, c)
	}
	// Strangers fill every place but the last sixteenth, kept for
	// trusted senders.
	full := float64(cfg.WithDefaults().OTLPMaxConnections * 15 / 16)
	waitFor(t, 10*time.Second, "the server to be full", func() bool {
		return testutil.ToFloat64(in.m.conns.WithLabelValues(SourceOTLPHTTP)) == full
	})
	// Six real senders, each on a new connection, all taken.
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			tr := &http.Transport{DialContext: dialerFrom("127.0.0.1").DialContext, DisableKeepAlives: true}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/traces", bytes.NewReader(body))
			req.Header.Set("Content-Type", ctProtobuf)
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
			if err != nil {
				t.Errorf("sender %d: %v", i, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("sender %d: status %d", i, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	collect(t, in, 12, 5*time.Second)
	refused := func(r string) float64 {
		return testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPHTTP, r))
	}
	if refused("evicted_idle") < 1030-full+1 || refused("server_full") != 0 {
		t.Errorf("connections refused: evicted_idle %v, server_full %v; want an idle one closed for each connection past the places and for the first sender, none refused",
			refused("evicted_idle"), refused("server_full"))
	}
}

func TestOneSenderHoldsAtMostItsShareOfTheDecodeBudget(t *testing.T) {
	b := newDecodeBudget(64<<20, 16<<20)
	a := netipAddr(t, "10.0.0.1")
	hog := budgetHold{b: b, p: b.share(a, false, 0)}
	if !hog.grow(16 << 20) {
		t.Fatal("the hog's first 16 MiB refused")
	}
	second := budgetHold{b: b, p: b.share(a, false, 0)}
	if second.grow(1) {
		t.Error("a second request of the same peer took more than its share")
	}
	other := budgetHold{b: b, p: b.share(netipAddr(t, "10.0.0.2"), false, 0)}
	if !other.grow(16 << 20) {
		t.Error("another peer was refused while the budget had room")
	}
	hog.release()
	other.release()
	second.release()
	if b.used.Load() != 0 {
		t.Errorf("budget used %d after release, want 0", b.used.Load())
	}
	b.unshare(hog.p, false)
	b.unshare(second.p, false)
	b.unshare(other.p, false)
	if len(b.peers) != 0 {
		t.Errorf("%d peers left, want none", len(b.peers))
	}
}

func TestContentEncodingIsCaseInsensitive(t *testing.T) {
	in := startIntake(t, testConfig(t))
	body, _ := ptraceotlp.NewExportRequestFromTraces(manySpans(3)).MarshalProto()
	for _, enc := range []string{"GZIP", "Gzip", " gzip", "X-GZIP"} {
		if code, msg := post(t, "http://"+in.Addrs().OTLPHTTP+"/v1/traces", ctProtobuf, enc, gzipped(t, body)); code != http.StatusOK {
			t.Errorf("Content-Encoding %q: status %d %q, want 200", enc, code, msg)
		}
	}
	if code, _ := post(t, "http://"+in.Addrs().OTLPHTTP+"/v1/traces", ctProtobuf, "IDENTITY", body); code != http.StatusOK {
		t.Errorf("Content-Encoding IDENTITY: status %d, want 200", code)
	}
	if code, _ := post(t, "http://"+in.Addrs().OTLPHTTP+"/v1/traces", ctProtobuf, "br", body); code != http.StatusUnsupportedMediaType {
		t.Errorf("Content-Encoding br: status %d, want 415", code)
	}
	collect(t, in, 15, 5*time.Second)
}

func netipAddr(t testing.TB, s string) netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// postFrom is post from the loopback address from, on a new connection.
func postFrom(t testing.TB, from, url, contentType, encoding string, body []byte) (int, string) {
	t.Helper()
	tr := &http.Transport{DialContext: dialerFrom(from).DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
