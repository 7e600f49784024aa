package testenv

import "testing"

func TestParseStatPPID(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want int
	}{
		{"a plain command name", "4242 (etcd) S 17 4242 4242 0 -1", 17},
		{"a command name with spaces and parentheses", "4242 (a) b (c) R 99 1 1", 99},
		{"a truncated line", "4242 (etcd) S", -1},
		{"no command name", "garbage", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseStatPPID([]byte(tt.stat)); got != tt.want {
				t.Errorf("parseStatPPID(%q) = %d, want %d", tt.stat, got, tt.want)
			}
		})
	}
}
