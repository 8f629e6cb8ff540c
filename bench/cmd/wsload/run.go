package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awareness/awareness/bench/internal/proc"
	"github.com/awareness/awareness/bench/internal/wsresult"
)

// runner is one run: the server under test, the clients and the result.
type runner struct {
	cfg  config
	res  *wsresult.Result
	srv  *proc.Server
	http *http.Client

	clients []*wsClient
	rec     *recorder

	frameBytes, frames atomic.Int64
}

// run is the sequence of the command's doc: start (and, for the service, set up and
// restart) the server, connect the clients in two steps measuring memory, and run
// the phases of -phases.
func (r *runner) run(ctx context.Context) error {
	r.http = &http.Client{Timeout: 120 * time.Second, Transport: &http.Transport{
		MaxIdleConns: 512, MaxIdleConnsPerHost: 512, IdleConnTimeout: time.Minute,
	}}
	r.rec = newRecorder(r.cfg)
	var err error
	if r.cfg.pg != "" {
		if r.cfg.db, err = createPGDB(ctx, r.cfg.pg); err != nil {
			return fmt.Errorf("create the PostgreSQL database: %w", err)
		}
		logf("service on PostgreSQL, a fresh database")
	}
	if r.cfg.mode == "service" && r.cfg.fromTemplate != "" {
		if err := copyDB(r.cfg.fromTemplate, r.cfg.db); err != nil {
			return err
		}
		if r.srv, err = r.start(ctx); err != nil {
			return err
		}
		r.res.RestartReadyMS = float64(r.srv.ReadyAfter.Microseconds()) / 1e3
	} else if r.srv, err = r.start(ctx); err != nil {
		return err
	}
	if r.cfg.mode == "service" && r.cfg.fromTemplate == "" {
		if err := r.setup(ctx); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		// Restart: the memory baseline is a fresh process, and restart → ready is measured
		// with the cursors of the run in place.
		r.srv.Stop(stopGrace)
		if r.cfg.saveTemplate != "" {
			if err := copyDB(r.cfg.db, r.cfg.saveTemplate); err != nil {
				return err
			}
		}
		if r.srv, err = r.start(ctx); err != nil {
			return err
		}
		r.res.RestartReadyMS = float64(r.srv.ReadyAfter.Microseconds()) / 1e3
	}
	settle(ctx, 2*time.Second)
	r.res.RSS0KB = r.srv.RSSKB()
	r.res.Stats0 = r.stats(ctx)
	logf("RSS0 %d kB", r.res.RSS0KB)

	t0 := time.Now()
	if err := r.connect(ctx, 0, r.cfg.small); err != nil {
		return err
	}
	settle(ctx, time.Second)
	r.res.RSSSmallKB = r.srv.RSSKB()
	if r.cfg.phases["b_small"] {
		if err := r.broadcastPhase(ctx, "b_small", 'c', r.cfg.roundsSmall, r.cfg.small); err != nil {
			return err
		}
	}
	t1 := time.Now()
	if err := r.connect(ctx, r.cfg.small, r.cfg.subs); err != nil {
		return err
	}
	r.res.ConnectSeconds = (time.Since(t1) + t1.Sub(t0)).Seconds()
	settle(ctx, 3*time.Second)
	r.res.RSS1KB = r.srv.RSSKB()
	r.res.Stats1 = r.stats(ctx)
	r.res.PerSubKB = float64(r.res.RSS1KB-r.res.RSS0KB) / float64(r.cfg.subs)
	logf("RSS1 %d kB with %d subscribers: %.1f kB each", r.res.RSS1KB, r.cfg.subs, r.res.PerSubKB)
	r.heapProfile(ctx, "idle")

	if r.cfg.phases["b_big"] {
		if err := r.broadcastPhase(ctx, "b_big", 'b', r.cfg.roundsBig, r.cfg.subs); err != nil {
			return err
		}
	}
	if r.cfg.phases["a"] {
		if err := r.ownTargetPhase(ctx, "a", 'a', false); err != nil {
			return err
		}
	}
	if r.cfg.phases["a_l3"] && !r.cfg.noA2 && r.cfg.mode == "service" {
		if err := r.ownTargetPhase(ctx, "a_l3", 'u', true); err != nil {
			return err
		}
	}
	if n := r.frames.Load(); n > 0 {
		r.res.FrameBytes = float64(r.frameBytes.Load()) / float64(n)
	}
	// Counted before b_none, which closes every client on purpose.
	r.rec.endedMu.Lock()
	r.res.ClientsEnded, r.res.FirstEnd = r.rec.endedN, r.rec.endedFirst
	r.rec.endedMu.Unlock()
	r.res.Unexpected, r.res.BadFrames = r.rec.unexpected.Load(), r.rec.bad.Load()
	if r.cfg.phases["b_none"] {
		if err := r.noSubscriberPhase(ctx, "b_none", 'b', r.cfg.roundsBig, r.cfg.subs); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// copyDB copies a closed SQLite database (and its WAL, if one was left).
func copyDB(from, to string) error {
	for _, suffix := range []string{"", "-wal"} {
		os.Remove(to + suffix)
		data, err := os.ReadFile(from + suffix)
		if err != nil {
			if suffix != "" && os.IsNotExist(err) {
				continue
			}
			return err
		}
		if err := os.WriteFile(to+suffix, data, 0o644); err != nil {
			return err
		}
	}
	os.Remove(to + "-shm")
	return nil
}

// settle waits d, or less when ctx ends.
func settle(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// shutdown stops the server, then closes every client.
func (r *runner) shutdown() {
	if r.srv != nil {
		// The server goes first, so that the TIME_WAIT sockets are on its side.
		r.srv.Stop(stopGrace)
	}
	var wg sync.WaitGroup
	for _, c := range r.clients {
		wg.Go(c.close)
	}
	wg.Wait()
	if r.cfg.pg != "" && r.cfg.db != "" {
		dropPGDB(r.cfg.pg, r.cfg.db)
	}
}
