package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/wsgorilla"
)

// Shutdown leaves no window in which a reconnecting client is refused while the
// process still runs: on a socket of its own the server keeps accepting (and /readyz
// says draining) while a request is still running, and closes the port only when the
// request is done; on a socket the next process or systemd also holds it stops
// accepting at once. A connection that never sends a request does not hold it up.
func TestDrainHTTP_ClosesThePortAtTheLastMoment(t *testing.T) {
	for _, kind := range []socketKind{socketBound, socketReusePort} {
		t.Run(string(kind), func(t *testing.T) {
			var logs syncBuffer
			m := newMain(serveConfig{ShutdownTimeout: 10 * time.Second}, &logs)
			m.streams, m.endStreams = context.WithCancel(t.Context())
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			m.ln, m.sock = &onceListener{Listener: ln}, kind
			addr := ln.Addr().String()
			inSlow, releaseSlow := make(chan struct{}), make(chan struct{})
			mux := http.NewServeMux()
			mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
				close(inSlow)
				<-releaseSlow
				_, _ = io.WriteString(w, "slow done")
			})
			mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") })
			mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ready\n") })
			reqs, fresh := new(inflight), new(newConns)
			srv := &http.Server{Handler: m.drainAware(mux, reqs), ConnState: fresh.hook}
			served := make(chan struct{})
			go func() { defer close(served); _ = srv.Serve(m.ln) }()
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			get := func(path string) (int, string, error) {
				resp, err := client.Get("http://" + addr + path)
				if err != nil {
					return 0, "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return resp.StatusCode, string(b), err
			}

			silent, err := net.Dial("tcp", addr) // a client's socket opened ahead of need
			if err != nil {
				t.Fatal(err)
			}
			defer silent.Close()
			var wg sync.WaitGroup
			var slowCode int
			var slowErr error
			wg.Go(func() { slowCode, _, slowErr = get("/slow") })
			<-inSlow

			drained := make(chan struct{})
			go func() {
				defer close(drained)
				m.drainHTTP(t.Context(), drainParts{srv: srv, ws: new(wsgorilla.Conns), wsConns: new(sync.WaitGroup),
					reqs: reqs, fresh: fresh, closeMCP: func() {}})
			}()
			for !m.draining.Load() {
				time.Sleep(time.Millisecond)
			}
			if kind.handedOver() {
				// The port is the next process's now.
				deadline := time.Now().Add(5 * time.Second)
				for {
					c, err := net.Dial("tcp", addr)
					if errors.Is(err, syscall.ECONNREFUSED) {
						break
					}
					if err == nil {
						c.Close()
					}
					if time.Now().After(deadline) {
						t.Fatal("a handed-over socket still accepts during the drain")
					}
					time.Sleep(5 * time.Millisecond)
				}
			} else {
				// Still accepting, and telling load balancers to go elsewhere.
				if code, body, err := get("/readyz"); err != nil || code != http.StatusServiceUnavailable || body != "draining\n" {
					t.Errorf("/readyz during the drain = %d %q %v, want 503 draining", code, body, err)
				}
				if code, body, err := get("/ok"); err != nil || code != http.StatusOK || body != "ok" {
					t.Errorf("a request during the drain = %d %q %v, want it served", code, body, err)
				}
			}
			select {
			case <-drained:
				t.Fatal("the drain ended while a request was running")
			default:
			}
			close(releaseSlow)
			wg.Wait()
			if slowErr != nil || slowCode != http.StatusOK {
				t.Errorf("the running request = %d %v, want it finished", slowCode, slowErr)
			}
			select {
			case <-drained:
			case <-time.After(4 * time.Second): // net/http alone would wait 5 s for the silent connection
				t.Fatalf("the drain did not end after the last request:\n%s", logs.String())
			}
			<-served
			if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("after the drain, dial = %v, want connection refused", err)
			}
			_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the silent connection: read = %v, want it closed", err)
			}
			if !strings.Contains(logs.String(), "connections_without_request=1") {
				t.Errorf("the log does not count the silent connection:\n%s", logs.String())
			}
		})
	}
}
