// Command profserve serves the service's /query handler composed as server.go composes
// it (models.OpenSQLite, awareness.NewHub, awareness.NewService, Sweep,
// graph.NewHandler), without the pruner, the upstream monitor and the static routes,
// and adds what the real binary does not expose, for profiling the WebSocket load runs:
//
//	GET  /debug/pprof/...          net/http/pprof
//	GET  /debug/stats              goroutines, heap, stack, hub subscribers
//	POST /debug/cpuprofile/start?file=PATH, POST /debug/cpuprofile/stop
//
// It takes the real binary's command line (serve --addr ADDR --db FILE [--log-level L]
// [--rate-limit R] [--ws-ping-interval D]), so bench/cmd/wsload drives it the same way. The L1/L2 numbers
// come from the real binary; this one only explains them.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"os"
	rpprof "runtime/pprof"
	"sync"
	"time"

	"github.com/awareness/awareness/bench/internal/serve"
	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/wsgorilla"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "serve" {
		args = args[1:]
	}
	fs := flag.NewFlagSet("profserve", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:8091", "listen address")
	db := fs.String("db", "./bench.db", "SQLite database file")
	level := fs.String("log-level", "warn", "log level")
	rateLimit := fs.Float64("rate-limit", 0, "writes per second per remote address; 0 sets no limit (as serve's flag)")
	queryRate := fs.Float64("query-rate", 0, "query points per second per remote address; 0 sets no limit (as serve's flag)")
	maxStreams := fs.Int("max-streams", 0, "open streams per remote address; 0 sets no cap (as serve's flag)")
	wsPing := fs.Duration("ws-ping-interval", 0, "WebSocket ping cadence; 0 is the default (as serve's flag)")
	_ = fs.Parse(args)
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(*level))
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))

	ctx, stop := serve.SignalContext()
	defer stop()
	store, err := models.OpenSQLite(ctx, *db, models.Options{Logger: log})
	if err != nil {
		log.Error("open", "err", err)
		os.Exit(1)
	}
	defer store.Close()
	hub := awareness.NewHub()
	limits := budget.DefaultLimits()
	limits.WritesPerSecond, limits.PointsPerSecond, limits.MaxStreams = *rateLimit, *queryRate, *maxStreams
	bud := budget.New(limits)
	svc := awareness.NewService(awareness.Config{Store: store, Hub: hub, Logger: log, Streams: bud})
	if _, err := svc.Sweep(ctx); err != nil {
		log.Error("sweep", "err", err)
		os.Exit(1)
	}
	streams, endStreams := context.WithCancel(context.Background())
	defer endStreams()

	mux := http.NewServeMux()
	// WebSockets are tracked and closed at shutdown as server.go does (which also
	// serves each connection on a goroutine of its own: wsgorilla.Transport).
	conns := &wsgorilla.Conns{}
	query := graph.NewHandler(graph.Config{Service: svc, Logger: log, Budget: bud, WSConns: conns, WSPingPongInterval: *wsPing})
	mux.Handle("/query", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			query.ServeHTTP(w, r)
			return
		}
		rctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(streams, cancel)()
		query.ServeHTTP(w, r.WithContext(rctx))
	}))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := store.Ping(r.Context()); err != nil {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/stats", func(w http.ResponseWriter, _ *http.Request) {
		notices, events := hub.Subscribers()
		serve.WriteStats(w, notices+events, nil)
	})
	var profMu sync.Mutex
	var profFile *os.File
	mux.HandleFunc("POST /debug/cpuprofile/start", func(w http.ResponseWriter, r *http.Request) {
		profMu.Lock()
		defer profMu.Unlock()
		if profFile != nil {
			http.Error(w, "already profiling", http.StatusConflict)
			return
		}
		f, err := os.Create(r.URL.Query().Get("file"))
		if err == nil {
			err = rpprof.StartCPUProfile(f)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		profFile = f
	})
	mux.HandleFunc("POST /debug/cpuprofile/stop", func(w http.ResponseWriter, r *http.Request) {
		profMu.Lock()
		defer profMu.Unlock()
		if profFile != nil {
			rpprof.StopCPUProfile()
			profFile.Close()
			profFile = nil
		}
	})
	closeStreams := func() {
		conns.CloseAll(wsgorilla.CloseServiceRestart, "service restart")
		endStreams()
	}
	if err := serve.Run(ctx, *addr, mux, 5*time.Second, closeStreams); err != nil {
		log.Error("listen", "err", err)
		os.Exit(1)
	}
	hub.Close()
}
