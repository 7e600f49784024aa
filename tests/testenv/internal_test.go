package testenv

import (
	"strings"
	"testing"
	"time"
)

func TestKafkaOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		opts    KafkaOptions
		wantErr string
	}{
		{"the zero value is valid", KafkaOptions{}, ""},
		{"explicit values within bounds are valid", KafkaOptions{MaxHeap: "1g", StartTimeout: time.Minute, LogLimit: 1 << 20}, ""},
		{"a negative start timeout is refused", KafkaOptions{StartTimeout: -time.Second}, "StartTimeout"},
		{"a negative stop timeout is refused", KafkaOptions{StopTimeout: -time.Second}, "StopTimeout"},
		{"a tiny log limit is refused", KafkaOptions{LogLimit: 10}, "LogLimit"},
		{"a heap with JVM flags smuggled in is refused", KafkaOptions{MaxHeap: "1g -Xss1m"}, "MaxHeap"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}

func TestTailBufferKeepsTheNewestBytes(t *testing.T) {
	b := NewTailBuffer(10)
	for _, s := range []string{"0123", "4567", "89ab", "cdef", "ghij"} {
		b.Write([]byte(s))
	}
	got := b.String()
	if !strings.HasSuffix(got, "abcdefghij") || !strings.Contains(got, "10 older bytes dropped") {
		t.Errorf("String() = %q, want the last 10 bytes after a note that 10 were dropped", got)
	}
	small := NewTailBuffer(10)
	small.Write([]byte("abc"))
	if got := small.String(); got != "abc" {
		t.Errorf("String() = %q, want %q", got, "abc")
	}
}

func TestLastLines(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{"fewer lines than asked returns everything", "a\nb", 5, "a\nb"},
		{"a trailing newline does not count as a line", "a\nb\nc\n", 2, "b\nc"},
		{"zero lines is empty", "a\nb", 0, ""},
		{"a leading empty line is kept when asked for", "\na\nb", 3, "\na\nb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lastLines(tt.in, tt.n); got != tt.want {
				t.Errorf("lastLines(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

func TestServerPropertiesAppliesOverridesInPlace(t *testing.T) {
	k := &Kafka{
		opts: KafkaOptions{Properties: map[string]string{
			"num.partitions":   "6",
			"log.retention.ms": "60000",
			"compression.type": "zstd",
		}},
		dir: "/d", brokerAddr: "127.0.0.1:1", controllerAddr: "127.0.0.1:2",
	}
	props := k.serverProperties()
	for _, want := range []string{
		"\nnum.partitions=6\n",
		"\nlog.dirs=/d/data\n",
		"\nlisteners=PLAINTEXT://127.0.0.1:1,CONTROLLER://127.0.0.1:2\n",
		"\ntransaction.state.log.replication.factor=1\n",
		"\ncompression.type=zstd\nlog.retention.ms=60000\n",
	} {
		if !strings.Contains(props, want) {
			t.Errorf("server.properties lacks %q:\n%s", want, props)
		}
	}
	if strings.Count(props, "\nnum.partitions=") != 1 {
		t.Errorf("num.partitions set more than once:\n%s", props)
	}
}
