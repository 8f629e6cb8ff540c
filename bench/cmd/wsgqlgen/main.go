// Command wsgqlgen is the stock-gqlgen peer of the WebSocket runs:
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
// With -durable FILE it is "stock gqlgen + a durable append", what a user would
// assemble from stock parts: each trigger first performs the raw durable append of
// the benchmarks (bench/internal/rawappend, B1's raw baseline: SQLite WAL,
// synchronous=FULL, the head upsert and the event insert on the trigger's target, one
// transaction per trigger, one write connection), answers once it is committed, then
// publishes.
//
// Usage: wsgqlgen -addr 127.0.0.1:PORT [-durable FILE]   (-frame-bytes is accepted and ignored)
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/transport"

	"github.com/awareness/awareness/bench/internal/loadkeys"
	"github.com/awareness/awareness/bench/internal/rawappend"
	"github.com/awareness/awareness/bench/internal/serve"
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
	durable *rawappend.Appender // nil: in memory
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8091", "listen address")
	flag.Int("frame-bytes", 0, "ignored (wsbaseline's flag)")
	durable := flag.String("durable", "", "SQLite file: each trigger performs a raw durable append before it answers (created; default: in memory)")
	flag.Parse()

	hub := awareness.NewHub()
	svc := awareness.NewService(awareness.Config{Store: memStore{}, Hub: hub})
	srv := handler.New(generated.NewExecutableSchema(resolvers.NewExecutableSchema(svc)))
	// handler.NewDefaultServer's WebSocket transport.
	srv.AddTransport(transport.Websocket{KeepAlivePingInterval: 10 * time.Second})
	srv.AddTransport(transport.POST{})

	s := &server{hub: hub}
	if *durable != "" {
		a, db, err := rawappend.OpenSQLite(context.Background(), *durable)
		if err != nil {
			log.Fatal(err)
		}
		defer db.Close()
		s.durable = a
	}
	mux := http.NewServeMux()
	mux.Handle("/query", srv)
	serve.Triggers{Notify: s.notify, Broadcast: s.broadcast}.Register(mux)
	serve.Health(mux)
	mux.HandleFunc("GET /debug/stats", s.stats)
	ctx, stop := serve.SignalContext()
	defer stop()
	if err := serve.Run(ctx, *addr, mux, 2*time.Second, hub.Close); err != nil {
		log.Fatal(err)
	}
}

// notice is the one the service would open for watcher on target at L = 0.
func (s *server) notice(watcher string, target awareness.SessionRef, now time.Time) awareness.Notice {
	v := s.version.Add(1)
	return awareness.Notice{Watcher: watcher, Target: target, ChangesSince: 0, NotifiedVersion: v, MaterialVersion: v,
		Text: awareness.NoticeText(target.Key, 0), Wake: awareness.WakeFor(watcher), OpenedAt: now}
}

// commit is the durable append of a trigger on target (none in memory).
func (s *server) commit(ctx context.Context, target awareness.SessionRef) error {
	if s.durable == nil {
		return nil
	}
	return s.durable.Append(ctx, 1, func(int) rawappend.Session {
		return rawappend.Session{Agent: target.AgentID, Key: target.Key, Kind: string(awareness.ClassifyKey(target.Key))}
	})
}

// notify prepares the notice of watcher on target.
func (s *server) notify(watcher int, target string) (int, func(), error) {
	ref, err := awareness.ResolveSession(target, nil)
	if err != nil {
		return 0, nil, err
	}
	if err := s.commit(context.Background(), ref); err != nil {
		return 0, nil, err
	}
	n := s.notice(loadkeys.Watcher(watcher), ref, time.Now().UTC())
	return 1, func() { s.hub.PublishNotices(n) }, nil
}

// broadcast prepares the notices on target of watchers 0..count-1, published at once.
func (s *server) broadcast(target string, count int) (int, func(), error) {
	ref, err := awareness.ResolveSession(target, nil)
	if err != nil {
		return 0, nil, err
	}
	if err := s.commit(context.Background(), ref); err != nil {
		return 0, nil, err
	}
	now := time.Now().UTC()
	ns := make([]awareness.Notice, count)
	for i := range ns {
		ns[i] = s.notice(loadkeys.Watcher(i), ref, now)
	}
	return len(ns), func() { s.hub.PublishNotices(ns...) }, nil
}

func (s *server) stats(w http.ResponseWriter, _ *http.Request) {
	n, _ := s.hub.Subscribers()
	serve.WriteStats(w, n, nil)
}
