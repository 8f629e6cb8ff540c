package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A Watcher whose service refuses the token stops for good with the refusal in Err,
// and Close ends its goroutines; one on an unreachable service keeps retrying until
// Close.
func TestWatcher_RefusedTokenIsFatalAndCloseEndsIt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/query", WithToken("nope"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch([]string{"agent:main:main"}, WatcherOptions{MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if w.Err() == nil {
		t.Fatal("a refused token did not stop the watcher")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := w.WaitConnected(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitConnected on a refused watcher: %v, want the refusal", err)
	}
	_ = w.Close()

	dead := deadEndpoint(t)
	w2, err := dead.Watch([]string{"agent:main:main"}, WatcherOptions{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if w2.Err() != nil {
		t.Fatalf("an unreachable service is fatal: %v", w2.Err())
	}
	_ = w2.Close()
}

// Drain hands out each notice once; a replay (same notifiedVersion) is dropped, a
// closed item removes a notice, and a newer notice supersedes a drained one.
func TestWatcher_AcceptDedupesAndCloses(t *testing.T) {
	w := &Watcher{open: map[noticeKey]*tracked{}, drained: map[noticeKey]int64{}, notify: make(chan struct{}, 1)}
	n := Notice{Watcher: "agent:main:main", Target: "agent:main:subagent:a", TargetAgentID: "main", NotifiedVersion: 2}
	w.mu.Lock()
	if !w.acceptLocked(n, true) || w.acceptLocked(n, true) {
		t.Fatal("first item not accepted, or the replay accepted")
	}
	w.mu.Unlock()
	if got := w.Drain(); len(got) != 1 {
		t.Fatalf("drained %d", len(got))
	}
	w.mu.Lock()
	if w.acceptLocked(n, true) {
		t.Fatal("a replay of a drained notice was accepted")
	}
	newer := n
	newer.NotifiedVersion = 5
	if !w.acceptLocked(newer, true) {
		t.Fatal("a newer notice was dropped")
	}
	closed := newer
	closed.Closed = true
	w.acceptLocked(closed, true)
	w.mu.Unlock()
	if got := w.Drain(); len(got) != 0 || w.Duplicates() != 2 {
		t.Fatalf("after the closed item: drained %d, duplicates %d", len(got), w.Duplicates())
	}
}
