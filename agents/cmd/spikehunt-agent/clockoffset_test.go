package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The soak steps one node's clock through this file: the offset must
// follow the file, and a file that says nothing sensible must not step it.
func TestOffsetClockFollowsItsFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offset")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := offsetClock(ctx, path, slog.New(slog.NewTextHandler(io.Discard, nil)))
	near := func(want time.Duration) bool {
		d := now().Sub(time.Now()) - want
		return d > -time.Second && d < time.Second
	}
	if !near(0) {
		t.Fatalf("no file: offset %v, want none", now().Sub(time.Now()))
	}
	wait := func(want time.Duration, what string) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !near(want); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: offset %v, want %v", what, now().Sub(time.Now()).Round(time.Second), want)
			}
		}
	}
	write("2h\n")
	wait(2*time.Hour, "2h")
	write("not a duration")
	wait(0, "a bad file")
	write("-90s")
	wait(-90*time.Second, "-90s")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	wait(0, "the file removed")
}
