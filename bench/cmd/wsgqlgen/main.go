// Command wsgqlgen is the stock-gqlgen peer of the WebSocket runs (issue 19, item 5):
// the service's own schema, generated code and resolvers, with gqlgen v0.17.98's
// default WebSocket transport (transport.Websocket on its own gorilla upgrader, the
// keep-alive of handler.NewDefaultServer) and POST transport, and none of the
// service's adapter (internal/wsgorilla) or one-pass writers (graph/fastpath). It is
// in memory: no database is written; the store answers the pending-notice read of a
// new subscription with nothing, and the triggers publish notices to the hub
// directly. So staleNotices is the same type, subscribed with the same query, and a
// notice reaches a subscriber the way stock gqlgen would send it.
//
// It speaks bench/cmd/wsbaseline's triggers, so that bench/cmd/wsload drives it with
// -mode baseline:
//
//	POST /notify     {"watcher": i, "target": T}   one notice for watcher i on T (L1 a)
//	POST /broadcast  {"target": T, "count": n}     one notice on T for watchers 0..n-1 (L1 b)
//	GET  /readyz, /healthz                         ok
//	GET  /debug/stats                              goroutines, heap, stack, subscriptions
//
// Both triggers answer first (flushed) and then publish, as the service answers
// recordEvent once committed and publishes afterwards.
//
// Usage: wsgqlgen -addr 127.0.0.1:PORT   (-frame-bytes is accepted and ignored)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/awareness/awareness/bench/internal/loadkeys"
	"github.com/awareness/awareness/graph/generated"
	"github.com/awareness/awareness/graph/resolvers"
	"github.com/awareness/awareness/internal/awareness"
)

// memStore is the peer's store: no pending notices; any other call panics (the
// embedded interface is nil), which shows the runs use nothing else.
type memStore struct{ awareness.Store }

func (memStore) Pending(context.Context, string) ([]awareness.Notice, error) { return nil, nil }

type server struct {
	hub     *awareness.Hub
	version atomic.Int64
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8091", "listen address")
	flag.Int("frame-bytes", 0, "ignored (wsbaseline's flag)")
	flag.Parse()

	hub := awareness.NewHub()
	svc := awareness.NewService(awareness.Config{Store: memStore{}, Hub: hub})
	srv := handler.New(generated.NewExecutableSchema(resolvers.NewExecutableSchema(svc)))
	// handler.NewDefaultServer's WebSocket transport.
	srv.AddTransport(transport.Websocket{KeepAlivePingInterval: 10 * time.Second})
	srv.AddTransport(transport.POST{})

	s := &server{hub: hub}
	mux := http.NewServeMux()
	mux.Handle("/query", srv)
	mux.HandleFunc("POST /notify", s.notify)
	mux.HandleFunc("POST /broadcast", s.broadcast)
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
	mux.HandleFunc("GET /readyz", ok)
	mux.HandleFunc("GET /healthz", ok)
	mux.HandleFunc("GET /debug/stats", s.stats)
	hs := &http.Server{Addr: *addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		hub.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
	}()
	if err := hs.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		log.Fatal(err)
	}
}

// notice is the one the service would open for watcher on target at L = 0.
func (s *server) notice(watcher string, target awareness.SessionRef, now time.Time) awareness.Notice {
	v := s.version.Add(1)
	return awareness.Notice{Watcher: watcher, Target: target, ChangesSince: 0, NotifiedVersion: v, MaterialVersion: v,
		Text: awareness.NoticeText(target.Key, 0), Wake: awareness.WakeFor(watcher), OpenedAt: now}
}

func (s *server) notify(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Watcher int    `json:"watcher"`
		Target  string `json:"target"`
	}
	target, ok := decode(w, r, &req, &req.Target)
	if !ok {
		return
	}
	n := s.notice(loadkeys.Watcher(req.Watcher), target, time.Now().UTC())
	answer(w, 1)
	s.hub.PublishNotices(n)
}

func (s *server) broadcast(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Target string `json:"target"`
		Count  int    `json:"count"`
	}
	target, ok := decode(w, r, &req, &req.Target)
	if !ok {
		return
	}
	now := time.Now().UTC()
	ns := make([]awareness.Notice, req.Count)
	for i := range ns {
		ns[i] = s.notice(loadkeys.Watcher(i), target, now)
	}
	answer(w, len(ns))
	s.hub.PublishNotices(ns...)
}

func decode(w http.ResponseWriter, r *http.Request, req any, target *string) (awareness.SessionRef, bool) {
	if err := json.NewDecoder(r.Body).Decode(req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return awareness.SessionRef{}, false
	}
	ref, err := awareness.ResolveSession(*target, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return awareness.SessionRef{}, false
	}
	return ref, true
}

func answer(w http.ResponseWriter, sent int) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"sent":%d}`, sent)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *server) stats(w http.ResponseWriter, _ *http.Request) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	n, _ := s.hub.Subscribers()
	_ = json.NewEncoder(w).Encode(map[string]any{
		"goroutines": runtime.NumGoroutine(), "heap_inuse": ms.HeapInuse, "stack_inuse": ms.StackInuse,
		"sys": ms.Sys, "subscriptions": n,
	})
}
