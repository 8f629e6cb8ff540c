// Temporary dev server for the dashboard work; deleted before handing back.
package main

import (
	"context"
	"flag"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/demo"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/web"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "")
	db := flag.String("db", "/tmp/scratch.db", "")
	withDemo := flag.Bool("demo", true, "")
	pace := flag.Duration("pace", 3*time.Second, "")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	store, err := models.OpenSQLite(ctx, *db, models.Options{})
	if err != nil {
		panic(err)
	}
	svc := awareness.NewService(awareness.Config{Store: store, Hub: awareness.NewHub(), Logger: log})
	mux := http.NewServeMux()
	mux.Handle("/query", graph.NewHandler(graph.Config{Service: svc, Logger: log}))
	mux.Handle("GET /playground", web.Playground())
	mux.Handle("/", http.FileServerFS(web.FS))
	if *withDemo {
		go func() {
			if err := demo.Run(ctx, svc, log, *pace); err != nil {
				log.Error("demo", "err", err)
			}
		}()
	}
	srv := &http.Server{Addr: *addr, Handler: mux}
	go func() { <-ctx.Done(); srv.Close() }()
	log.Info("listening", "addr", *addr)
	_ = srv.ListenAndServe()
}
