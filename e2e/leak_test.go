package e2e

import (
	"bytes"
	"context"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

// No goroutine leak after 1,000 subscribe/unsubscribe cycles, in-process (the real
// /query handler over the SQLite store): 100 WebSocket connections run 10
// subscriptions each; 9 end with `complete`, the 10th with the connection closing.
// Every subscription proves it is live by delivering the pending notice first.
//
// Not parallel: parallel tests only start once this one has finished, so the
// process-wide goroutine count is this test's own.
func TestNoGoroutineLeak_1000SubscribeCycles(t *testing.T) {
	ctx := context.Background()
	store, err := models.OpenSQLite(ctx, filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hub := awareness.NewHub()
	svc := awareness.NewService(awareness.Config{Store: store, Hub: hub})
	hs := httptest.NewServer(graph.NewHandler(graph.Config{Service: svc}))
	t.Cleanup(func() {
		hs.Close()
		hub.Close()
		store.Close()
	})
	wsURL := "ws" + hs.URL[len("http"):] + "/query"
	child := "agent:main:subagent:leak"
	for _, in := range []awareness.RecordInput{
		{SessionKey: child, Kind: awareness.ChildSpawned, ActorType: awareness.ActorAgent, Watchers: []string{mainWatcher}},
		{SessionKey: child, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman},
	} {
		if _, err := svc.RecordEvent(ctx, in); err != nil {
			t.Fatal(err)
		}
	}

	connection := func(subs int) {
		w := dialWS(t, wsURL)
		for j := range subs {
			id := "s" + itoa(j)
			w.subscribe(id, mainWatcher)
			n, _ := w.nextNotice(id)
			wantNotice(t, n, mainWatcher, child, 1)
			if j < subs-1 {
				w.complete(id)
			}
		}
		w.close()
	}
	settled := func(limit int) (int, bool) {
		deadline := time.Now().Add(wait)
		for {
			ns, es := hub.Subscribers()
			g := runtime.NumGoroutine()
			if ns == 0 && es == 0 && (limit < 0 || g <= limit) {
				return g, true
			}
			if time.Now().After(deadline) {
				return g, false
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	connection(2) // warm up pools and caches
	time.Sleep(100 * time.Millisecond)
	base, _ := settled(-1)
	snapshot := goleak.IgnoreCurrent()

	const conns, perConn = 100, 10
	for range conns {
		connection(perConn)
	}
	const slack = 3
	if g, ok := settled(base + slack); !ok {
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
		ns, es := hub.Subscribers()
		t.Fatalf("after %d subscribe/unsubscribe cycles: %d goroutines (baseline %d), %d notice and %d event subscriptions\n%s",
			conns*perConn, g, base, ns, es, tail(buf.String(), 8000))
	}
	goleak.VerifyNone(t, snapshot)
}
