package intake

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
)

// BenchmarkThroughputUnderAttack is what a real OTLP sender keeps of its
// throughput while others attack the agent: four apps of one pod
// (127.0.0.1) export SDK batches of 512 spans over OTLP/gRPC at 20,000
// spans/s (SPIKEHUNT_BENCH_RATE), each one export at a time, for
// SPIKEHUNT_BENCH_SECONDS (default 120) unattacked and then as long under
// a mixed attack from other peers (other loopback addresses):
//
//   - silent gRPC Export streams, 64 at a time, each reopened a second
//     after the agent ends or refuses it (its RetryInfo's delay)
//     (127.0.0.2);
//   - metadata floods: 8 connections at a time, each opening 16 streams
//     with a 1 MiB header block, reconnecting 100 ms after the agent cuts
//     them (127.0.0.3);
//   - idle connections: 1,030 to each OTLP server, more than its places,
//     from five addresses (127.0.0.4 to 127.0.0.8).
//
// The figure is the spans/s the agent accepted under attack over those
// it accepted before: hardening.throughput_under_attack_share. The agent
// runs with its default limits.
func BenchmarkThroughputUnderAttack(b *testing.B) {
	secs := benchDuration("SPIKEHUNT_BENCH_SECONDS", 120*time.Second)
	rate := 20000
	if v, err := strconv.Atoi(os.Getenv("SPIKEHUNT_BENCH_RATE")); err == nil && v > 0 {
		rate = v
	}
	in, err := New(Config{OTLPGRPC: "127.0.0.1:0", OTLPHTTP: "127.0.0.1:0", QueueSize: 1 << 16}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close() })
	if err := in.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	go func() {
		for range in.Out() {
		}
	}()
	addrs := in.Addrs()

	const apps, batch = 4, 512
	body := sdkBatch(b, batch/2, time.Now())
	var conns [apps]*grpc.ClientConn
	for i := range conns {
		conns[i] = dialGRPCFrom(b, addrs.OTLPGRPC, "127.0.0.1")
	}
	// send paces the apps for d and returns the spans/s accepted, and
	// the spans refused.
	var lastErr atomic.Value
	send := func(d time.Duration) (float64, int64) {
		var accepted, refused atomic.Int64
		every := time.Duration(float64(time.Second) * batch * apps / float64(rate))
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		for i, cc := range conns {
			wg.Go(func() {
				next := time.Now().Add(every * time.Duration(i) / apps)
				for {
					select {
					case <-ctx.Done():
						return
					case <-time.After(time.Until(next)):
					}
					next = next.Add(every)
					if now := time.Now(); now.Sub(next) > every {
						next = now.Add(every) // fell behind: the missed batches are lost
					}
					// The bytes the SDK sent once, dated at the start: well
					// within max_span_age for the benchmark's minutes.
					err := cc.Invoke(ctx, exportMethod, &grpcResponse{b: body}, &grpcRequest{}, grpc.ForceCodecV2(otlpCodec{}))
					switch {
					case err == nil:
						accepted.Add(batch)
					case ctx.Err() == nil:
						refused.Add(batch)
						lastErr.Store(err.Error())
					}
				}
			})
		}
		wg.Wait()
		return float64(accepted.Load()) / d.Seconds(), refused.Load()
	}

	send(2 * time.Second) // warm up
	base, baseRefused := send(secs)
	stop := startMixedAttack(b, addrs)
	time.Sleep(2 * time.Second) // the attack in full
	openHTTP, openGRPC := testutil.ToFloat64(in.m.conns.WithLabelValues(SourceOTLPHTTP)), testutil.ToFloat64(in.m.conns.WithLabelValues(SourceOTLPGRPC))
	under, underRefused := send(secs)
	stop()

	if e, ok := lastErr.Load().(string); ok {
		b.Logf("the sender's last refusal: %s", e)
	}
	b.Logf("open connections as the attack began: http %v, grpc %v", openHTTP, openGRPC)
	b.Logf("unattacked %.0f spans/s (%d refused), under attack %.0f spans/s (%d refused), over %s each; the attack: %s",
		base, baseRefused, under, underRefused, secs, attackSummary(in))
	b.ReportMetric(under/base, "hardening.throughput_under_attack_share:x")
	b.ReportMetric(base, "hardening.throughput_unattacked_spans_per_s:spans/s")
	b.ReportMetric(under, "hardening.throughput_under_attack_spans_per_s:spans/s")
	b.ReportMetric(drops(in, SourceOTLPGRPC, reasonSilentStream), "hardening.attack_silent_streams:streams")
	b.ReportMetric(drops(in, SourceOTLPGRPC, reasonOversizeMetadata), "hardening.attack_oversize_metadata_conns:conns")
	b.ReportMetric(testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPHTTP, "evicted_idle"))+
		testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPGRPC, "evicted_idle")), "hardening.attack_idle_conns_closed:conns")
}

func benchDuration(env string, def time.Duration) time.Duration {
	if v, err := strconv.Atoi(os.Getenv(env)); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return def
}

func attackSummary(in *Intake) string {
	return fmt.Sprintf("silent_stream %v, peer_streams %v, oversize_metadata %v; connections closed: http %v/%v/%v, grpc %v/%v/%v (evicted_idle/peer_full/server_full)",
		drops(in, SourceOTLPGRPC, reasonSilentStream), drops(in, SourceOTLPGRPC, reasonPeerStreams), drops(in, SourceOTLPGRPC, reasonOversizeMetadata),
		testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPHTTP, "evicted_idle")),
		testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPHTTP, "peer_full")),
		testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPHTTP, "server_full")),
		testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPGRPC, "evicted_idle")),
		testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPGRPC, "peer_full")),
		testutil.ToFloat64(in.m.connsRefused.WithLabelValues(SourceOTLPGRPC, "server_full")))
}

// startMixedAttack starts the attacks BenchmarkThroughputUnderAttack
// describes; stop ends them and closes their connections.
func startMixedAttack(b *testing.B, addrs Addrs) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup

	// Silent streams, reopened as they end.
	silent := dialGRPCFrom(b, addrs.OTLPGRPC, "127.0.0.2")
	for range 64 {
		wg.Go(func() {
			for ctx.Err() == nil {
				s, err := silent.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, exportMethod)
				if err == nil {
					s.RecvMsg(&grpcRequest{}) // until the agent ends (or refuses) it
				}
				pause(ctx, time.Second) // the RetryInfo's delay
			}
		})
	}

	// Metadata floods, reconnecting as they are cut.
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				c := rawHeaderFloodConn(addrs.OTLPGRPC, "127.0.0.3", 16, 1<<20)
				if c == nil {
					pause(ctx, 100*time.Millisecond)
					continue
				}
				stopped := context.AfterFunc(ctx, func() { c.Close() })
				buf := make([]byte, 16<<10)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				stopped()
				c.Close()
				pause(ctx, 100*time.Millisecond)
			}
		})
	}

	// Idle connections, more than each server's places.
	var idleMu sync.Mutex
	var idle []net.Conn
	for _, addr := range []string{addrs.OTLPHTTP, addrs.OTLPGRPC} {
		for i := range 1030 {
			c, err := dialerFrom(fmt.Sprintf("127.0.0.%d", 4+i%5)).Dial("tcp", addr)
			if err != nil {
				b.Fatalf("idle connection %d: %v", i, err)
			}
			idle = append(idle, c)
		}
	}
	return func() {
		cancel()
		silent.Close()
		idleMu.Lock()
		for _, c := range idle {
			c.Close()
		}
		idleMu.Unlock()
		wg.Wait()
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
