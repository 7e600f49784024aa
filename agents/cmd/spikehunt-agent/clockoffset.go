package main

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// offsetClock is time.Now plus the duration held in path, re-read every
// second until ctx ends: a wall-clock step of this node, for the soak
// (--debug.clock-offset-file). A file that is missing, empty or not a
// duration is no offset; a bad one is logged once per change.
func offsetClock(ctx context.Context, path string, log *slog.Logger) func() time.Time {
	var offset atomic.Int64
	read := func(last string) string {
		b, err := os.ReadFile(path)
		text := strings.TrimSpace(string(b))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			text = "error: " + err.Error()
		}
		if text == last {
			return last
		}
		d, perr := time.ParseDuration(text)
		if text == "" || err != nil || perr != nil {
			d = 0
		}
		if text != "" && (err != nil || perr != nil) {
			log.Warn("debug clock offset: ignored", "file", path, "content", text)
		}
		offset.Store(int64(d))
		log.Warn("debug clock offset: the intake's wall clock is stepped", "offset", time.Duration(d).String(), "file", path)
		return text
	}
	last := read("\x00")
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				last = read(last)
			}
		}
	}()
	return func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
}
