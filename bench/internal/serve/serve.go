// Package serve is what the bench's servers (bench/cmd/wsbaseline, wsgqlgen and
// profserve) share: serving until SIGINT or SIGTERM, the health routes, and
// /debug/stats, the runtime counters bench/cmd/wsload reads at RSS0 and RSS1.
package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// SignalContext returns a context that ends on SIGINT or SIGTERM (how wsload and
// pgscale stop a server), and its stop function.
func SignalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// Run serves h on addr until ctx ends; then it calls onStop, if set, and shuts the
// server down, giving requests in flight grace. It returns nil after a shutdown and
// the listener's error otherwise.
func Run(ctx context.Context, addr string, h http.Handler, grace time.Duration, onStop func()) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		if onStop != nil {
			onStop()
		}
		sctx, cancel := context.WithTimeout(context.Background(), grace)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Health answers GET /readyz and GET /healthz with "ok" (a server that is ready once
// it listens).
func Health(mux *http.ServeMux) {
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }
	mux.HandleFunc("GET /readyz", ok)
	mux.HandleFunc("GET /healthz", ok)
}

// WriteStats answers /debug/stats: the goroutines, heap_inuse, stack_inuse and sys of
// this process, the server's live subscriptions, and extra counters.
func WriteStats(w http.ResponseWriter, subscriptions int, extra map[string]any) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m := map[string]any{
		"goroutines": runtime.NumGoroutine(), "heap_inuse": ms.HeapInuse, "stack_inuse": ms.StackInuse,
		"sys": ms.Sys, "subscriptions": subscriptions,
	}
	maps.Copy(m, extra)
	_ = json.NewEncoder(w).Encode(m)
}
