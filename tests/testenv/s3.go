package testenv

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Server is one test's view of the test binary's S3 API server: s3proxy
// (SPIKEHUNT_S3PROXY_LIBS) on 127.0.0.1 over plain HTTP, storing objects in
// a temporary folder through its filesystem-nio2 backend, and a bucket of
// the test's own. Requests must be signed (AWS signature v2 or v4) with
// AccessKey and SecretKey.
type S3Server struct {
	Endpoint  string // host:port, plain HTTP
	Region    string // what the server answers for every bucket's location
	AccessKey string
	SecretKey string
	// Bucket was created empty for this test; it is removed with its
	// objects when the test passes and kept for a look when it fails.
	Bucket string

	proxy *s3Proxy
}

// Client returns a minio-go client for the server. Clients hold no
// resources that need closing.
func (s *S3Server) Client() (*minio.Client, error) {
	return s.proxy.client()
}

// Log returns the server's output, at most the newest 1 MiB. It holds one
// line per request (logger org.gaul.s3proxy at DEBUG).
func (s *S3Server) Log() string {
	return s.proxy.log.String()
}

const (
	s3Region           = "us-east-1"
	s3Heap             = "256m"
	s3StartTimeout     = 60 * time.Second // the JVM serves ~2 s after it starts on 2 cores
	s3StopTimeout      = 10 * time.Second
	s3LogLimit         = 1 << 20
	s3BucketNameBudget = 63 - len("t--") - 6 // S3 bucket names are at most 63 bytes; 6 for the counter
)

// S3 returns a view of the test binary's s3proxy with a fresh bucket named
// after the test, starting the server on first use; StopShared stops it and
// removes its folder. A missing install fails t with the command that
// installs it. When t fails, the tail of the server's log is added to its
// output.
//
// Tests share the server, never a bucket: a test that wants two buckets
// calls S3 twice.
func S3(t testing.TB) *S3Server {
	t.Helper()
	if sharedStopped() {
		t.Fatal("testenv: S3 called after StopShared")
	}
	shared.s3Once.Do(func() {
		shared.s3, shared.s3Err = startS3Proxy("127.0.0.1")
	})
	if shared.s3Err != nil {
		t.Fatal(shared.s3Err)
	}
	p := shared.s3
	if p == nil {
		t.Fatal("testenv: S3 called after StopShared")
	}
	return bucketView(t, p)
}

// S3At starts an S3 API server of t's own listening on host, an IP
// address that pods of a test cluster reach (S3 listens on loopback), with
// a fresh bucket; t's cleanup stops it and removes its folder.
func S3At(t testing.TB, host string) *S3Server {
	t.Helper()
	if net.ParseIP(host) == nil {
		t.Fatalf("testenv: S3At: %q is not an IP address", host)
	}
	p, err := startS3Proxy(host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Logf("testenv: %v", err)
		}
	})
	return bucketView(t, p)
}

// bucketView makes t's bucket on the server p.
func bucketView(t testing.TB, p *s3Proxy) *S3Server {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("s3proxy log (tail):\n%s", lastLines(p.log.String(), 60))
		}
	})
	cl, err := p.client()
	if err != nil {
		t.Fatal(err)
	}
	bucket := s3BucketName(t.Name(), s3Buckets.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: s3Region}); err != nil {
		t.Fatalf("testenv: s3: create bucket %s: %v", bucket, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("testenv: s3: bucket %s kept for a look until StopShared removes the server's folder: %s", bucket, filepath.Join(p.dir, "data", bucket))
			return
		}
		if err := removeBucket(cl, bucket); err != nil {
			t.Logf("testenv: s3: remove bucket %s: %v", bucket, err)
		}
	})
	return &S3Server{
		Endpoint:  p.endpoint,
		Region:    s3Region,
		AccessKey: p.accessKey,
		SecretKey: p.secretKey,
		Bucket:    bucket,
		proxy:     p,
	}
}

// s3Buckets numbers buckets so that a test run twice (-count=2) or two
// tests whose names collapse alike get buckets of their own.
var s3Buckets atomic.Int64

var nonBucketChars = regexp.MustCompile(`[^a-z0-9]+`)

// s3BucketName makes a valid S3 bucket name (3-63 bytes of a-z 0-9 '-',
// starting and ending with a letter or digit) from a test name.
func s3BucketName(testName string, n int64) string {
	name := strings.Trim(nonBucketChars.ReplaceAllString(strings.ToLower(testName), "-"), "-")
	if len(name) > s3BucketNameBudget {
		name = strings.TrimRight(name[:s3BucketNameBudget], "-")
	}
	return fmt.Sprintf("t-%s-%d", name, n)
}

func removeBucket(cl *minio.Client, bucket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for obj := range cl.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		if obj.Err != nil {
			return obj.Err
		}
		if err := cl.RemoveObject(ctx, bucket, obj.Key, minio.RemoveObjectOptions{}); err != nil {
			return err
		}
	}
	return cl.RemoveBucket(ctx, bucket)
}

// s3Proxy is the running server, one per test binary.
type s3Proxy struct {
	dir       string // owned by the s3Proxy; removed by stop
	endpoint  string
	accessKey string
	secretKey string
	log       *TailBuffer
	proc      *brokerProcess
}

// startS3Proxy starts s3proxy on a free port of host with fresh
// credentials and returns once a signed ListBuckets succeeds. On failure
// nothing is left running and its folder is gone.
func startS3Proxy(host string) (*s3Proxy, error) {
	paths, err := Paths()
	if err != nil {
		return nil, err
	}
	libs, err := paths.S3ProxyLibsDir()
	if err != nil {
		return nil, err
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("testenv: java not found: install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless): %w", err)
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, fmt.Errorf("testenv: s3proxy: %w", err)
	}
	p := &s3Proxy{
		endpoint:  net.JoinHostPort(host, strconv.Itoa(ports[0])),
		accessKey: "spikehunt-test",
		secretKey: rand.Text(),
		log:       NewTailBuffer(s3LogLimit),
	}
	if p.dir, err = os.MkdirTemp("", "spikehunt-s3proxy-"); err != nil {
		return nil, fmt.Errorf("testenv: s3proxy: %w", err)
	}
	if err := p.launch(java, libs); err != nil {
		os.RemoveAll(p.dir)
		return nil, err
	}
	return p, nil
}

func (p *s3Proxy) launch(java, libs string) error {
	data := filepath.Join(p.dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		return fmt.Errorf("testenv: s3proxy: %w", err)
	}
	props := strings.Join([]string{
		"# written by spikehunt tests/testenv",
		"s3proxy.endpoint=http://" + p.endpoint,
		"s3proxy.authorization=aws-v2-or-v4",
		"s3proxy.identity=" + p.accessKey,
		"s3proxy.credential=" + p.secretKey,
		// filesystem-nio2, not the deprecated filesystem provider, which
		// lists a folder marker ("captures/") for every folder a key
		// makes; unlike that one it wants jclouds credentials, unused.
		"jclouds.provider=filesystem-nio2",
		"jclouds.filesystem.basedir=" + data,
		"jclouds.identity=unused",
		"jclouds.credential=unused",
		"",
	}, "\n")
	files := map[string]string{"s3proxy.properties": props, "logback.xml": s3ProxyLogback}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(p.dir, name), []byte(content), 0o600); err != nil {
			return fmt.Errorf("testenv: s3proxy: %w", err)
		}
	}
	cmd := exec.Command(java,
		"-Xmx"+s3Heap, "-Xms32m",
		// Tests care about start time and few threads, not throughput.
		"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.awt.headless=true",
		"-Dlogback.configurationFile="+filepath.Join(p.dir, "logback.xml"),
		"-cp", filepath.Join(libs, "*"),
		"org.gaul.s3proxy.Main", "--properties", filepath.Join(p.dir, "s3proxy.properties"))
	cmd.Dir = p.dir
	// Its own process group, and SIGKILL when the thread that started it
	// dies: a crashed test binary leaves no server behind (see doc.go).
	cmd.SysProcAttr = childProcAttr()
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("testenv: s3proxy: start %s: %w", java, err)
	}
	proc := &brokerProcess{cmd: cmd, done: make(chan struct{})}
	go func() {
		proc.err = cmd.Wait()
		close(proc.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), s3StartTimeout)
	defer cancel()
	if err := p.waitReady(ctx, proc); err != nil {
		_ = stopProcess(proc, 0)
		return err
	}
	p.proc = proc
	return nil
}

// s3proxy logs through logback; without a configuration logback logs
// everything at DEBUG, Jetty's internals included (thousands of lines per
// start).
const s3ProxyLogback = `<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>[%d{HH:mm:ss.SSS}] %-5level %logger{24} %msg%n</pattern></encoder>
  </appender>
  <logger name="org.gaul.s3proxy" level="DEBUG"/>
  <logger name="org.gaul.shaded" level="WARN"/>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
`

func (p *s3Proxy) waitReady(ctx context.Context, proc *brokerProcess) error {
	cl, err := p.client()
	if err != nil {
		return err
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var lastErr error
	for {
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cl.ListBuckets(attempt)
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-proc.done:
			return fmt.Errorf("testenv: s3proxy exited before it was ready (%v); log tail:\n%s", proc.err, lastLines(p.log.String(), 40))
		case <-ctx.Done():
			return fmt.Errorf("testenv: s3proxy at %s not ready after %v (last error: %v); log tail:\n%s",
				p.endpoint, s3StartTimeout, lastErr, lastLines(p.log.String(), 40))
		case <-tick.C:
		}
	}
}

func (p *s3Proxy) client() (*minio.Client, error) {
	cl, err := minio.New(p.endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(p.accessKey, p.secretKey, ""),
		Secure: false,
		Region: s3Region,
	})
	if err != nil {
		return nil, fmt.Errorf("testenv: s3 client: %w", err)
	}
	return cl, nil
}

// stop stops the server (SIGTERM, then SIGKILL to its process group) and
// removes its folder, objects included.
func (p *s3Proxy) stop() error {
	var stopErr error
	if p.proc != nil {
		stopErr = stopProcess(p.proc, s3StopTimeout)
		p.proc = nil
	}
	return errors.Join(
		wrapIf(stopErr, "testenv: s3proxy stop"),
		wrapIf(os.RemoveAll(p.dir), "testenv: s3proxy stop: remove data"),
	)
}
