package testenv

import (
	"fmt"
	"os"
	"sync"
	"testing"
)

// shared holds the components started once per test binary. Each is started
// by the first test that asks for it and stopped by StopShared.
var shared struct {
	kafkaOnce sync.Once
	kafka     *Kafka
	kafkaErr  error

	secureOnce sync.Once // the broker with a SASL_SSL listener, see kafka_secure.go
	secure     *Kafka
	secureErr  error

	chOnce sync.Once // the embedded ClickHouse engine, see clickhouse.go

	s3Once sync.Once // s3proxy, see s3.go
	s3     *s3Proxy
	s3Err  error

	apiOnce sync.Once
	api     *apiServer
	apiErr  error

	mu      sync.Mutex
	stopped bool
}

// SharedKafka returns the test binary's broker, starting it with default
// options on first use. It fails t if the broker cannot start; every later
// call fails the same way without trying again. When t fails, the tail of the
// broker log is added to its output.
//
// Tests share the broker: give each test its own topics, and do not Restart
// or Stop it from a test that runs in parallel with others.
func SharedKafka(t testing.TB) *Kafka {
	t.Helper()
	if sharedStopped() {
		t.Fatal("testenv: SharedKafka called after StopShared")
	}
	shared.kafkaOnce.Do(func() {
		shared.kafka, shared.kafkaErr = StartKafka(KafkaOptions{})
	})
	if shared.kafkaErr != nil {
		t.Fatal(shared.kafkaErr)
	}
	k := shared.kafka
	if k == nil {
		t.Fatal("testenv: SharedKafka called after StopShared")
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafka broker log (tail):\n%s", lastLines(k.Log(), 60))
		}
	})
	return k
}

// StopShared stops whatever SharedKafka, SharedAPIServer, S3 and ClickHouse
// started. Call it from TestMain after m.Run; without it the processes die
// only with the test binary (Kafka and s3proxy through Pdeathsig, the API
// server through the reaper on Linux). Errors are printed, not returned:
// TestMain has nothing to fail.
func StopShared() {
	shared.mu.Lock()
	shared.stopped = true
	shared.mu.Unlock()
	// Do with an empty function marks an unstarted component as done, so that
	// a late Shared call cannot start one that nobody stops.
	shared.kafkaOnce.Do(func() {})
	shared.secureOnce.Do(func() {})
	shared.apiOnce.Do(func() {})
	shared.s3Once.Do(func() {})
	shared.chOnce.Do(func() {})
	stopClickHouse()
	if shared.kafka != nil {
		if err := shared.kafka.Stop(); err != nil {
			warn(fmt.Errorf("testenv: StopShared: %w", err))
		}
	}
	if shared.secure != nil {
		if err := shared.secure.Stop(); err != nil {
			warn(fmt.Errorf("testenv: StopShared: %w", err))
		}
	}
	if shared.s3 != nil {
		if err := shared.s3.stop(); err != nil {
			warn(fmt.Errorf("testenv: StopShared: %w", err))
		}
	}
	if shared.api != nil {
		if err := shared.api.Stop(); err != nil {
			warn(fmt.Errorf("testenv: StopShared: %w", err))
		}
	}
}

func sharedStopped() bool {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	return shared.stopped
}

// warn prints what cannot be returned, such as a failed cleanup in
// StopShared, to stderr, where go test shows it.
func warn(err error) {
	fmt.Fprintln(os.Stderr, err)
}
