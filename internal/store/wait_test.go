package store_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spikehunt/spikehunt/internal/store"
)

// A store that is not up yet is waited for, up to the wait, with a word
// each retry; a store that answers with an error is not retried.
func TestOpenWaitingWaitsForAStoreThatIsNotUpYetAndNoLonger(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: connections are refused

	var waits atomic.Int32
	began := time.Now()
	_, err = store.OpenWaiting(context.Background(), "http://"+addr+"/db", 1500*time.Millisecond, func(error, time.Duration) { waits.Add(1) })
	if err == nil || !strings.Contains(err.Error(), "waited 1.5s") {
		t.Fatalf("no server: %v, want an error saying how long it waited", err)
	}
	if waits.Load() < 2 || time.Since(began) < 1500*time.Millisecond || time.Since(began) > 10*time.Second {
		t.Errorf("no server: %d retries in %v, want a few within about the wait", waits.Load(), time.Since(began))
	}

	// The server comes up while the command waits.
	go func() {
		time.Sleep(700 * time.Millisecond)
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Error(err)
			return
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("1\n")) })}
		t.Cleanup(func() { srv.Close() })
		srv.Serve(l)
	}()
	st, err := store.OpenWaiting(context.Background(), "http://"+addr+"/db", 30*time.Second, nil)
	if err != nil {
		t.Fatalf("a server that comes up within the wait: %v", err)
	}
	st.Close()

	// A proxy in front of a server that is not up yet: 503, no ClickHouse
	// error code. Waited for.
	var proxied atomic.Int32
	proxy := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if proxied.Add(1) < 3 {
			http.Error(w, "no healthy upstream", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("1\n"))
	})}
	l3, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go proxy.Serve(l3)
	defer proxy.Close()
	if st, err := store.OpenWaiting(context.Background(), "http://"+l3.Addr().String()+"/db", 30*time.Second, nil); err != nil || proxied.Load() != 3 {
		t.Errorf("a proxy answering 503 twice: %v after %d requests, want the store on the third", err, proxied.Load())
	} else {
		st.Close()
	}

	// A server that answers with an error (here, refused credentials) is
	// not waited for.
	refusing := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Code: 516. DB::Exception: default: Authentication failed", http.StatusUnauthorized)
	})}
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go refusing.Serve(l2)
	defer refusing.Close()
	began = time.Now()
	if _, err := store.OpenWaiting(context.Background(), "http://"+l2.Addr().String()+"/db", 30*time.Second, nil); err == nil || time.Since(began) > 5*time.Second {
		t.Errorf("refused credentials: %v after %v, want the error at once", err, time.Since(began))
	}
}
