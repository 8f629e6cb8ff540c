package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/bus"
	"github.com/awareness/awareness/internal/models"
)

// The store phase: the append path without HTTP and GraphQL, so that the database's
// side (the NOTIFY commit lock among it) is what limits. P child processes (pgscale
// itself, -child store) each open the store as serve does (its pools, a hub, a
// listener, the service with its group commit) and run -writers×4 closed-loop
// RecordEvent calls between them for -duration. appends/s in all, per hint transport,
// in interleaved rounds. The lock phase is the commit lock alone: 16 connections
// commit a one-row UPDATE with a NOTIFY inside the transaction, after it, or none.

// childStore is the body of a child process: it prints one JSON line {"appends": n}.
func childStore(dsn, mode, natsURL string, writers int, warm, dur time.Duration) error {
	ctx := context.Background()
	opts := models.Options{}
	var b *bus.Bus
	switch mode {
	case "bus":
		var err error
		if b, err = bus.Open(bus.Config{URL: natsURL}); err != nil {
			return err
		}
		defer b.Close()
		opts.Bus = b
	default:
		opts.Hints = models.HintMode(mode)
	}
	st, err := models.OpenPostgres(ctx, dsn, opts)
	if err != nil {
		return err
	}
	defer st.Close()
	hub := awareness.NewHub()
	defer hub.Close()
	lc := models.ListenerConfig{Store: st, Hub: hub, Poll: 10 * time.Minute}
	if b != nil {
		lc.Bus = b
	}
	l, err := models.NewListener(lc)
	if err != nil {
		return err
	}
	l.Start(ctx)
	defer l.Stop()
	svc := awareness.NewService(awareness.Config{Store: st, Hub: hub})
	var (
		count atomic.Int64
		on    atomic.Bool
		stop  atomic.Bool
		wg    sync.WaitGroup
		errs  atomic.Int64
	)
	pid := os.Getpid()
	for w := range writers {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				_, err := svc.RecordEvent(ctx, awareness.RecordInput{
					SessionKey: fmt.Sprintf("agent:main:subagent:s%d-%d-%d", pid, w, i), Kind: awareness.HumanDirectMessage,
					ActorType: awareness.ActorHuman, Watchers: []string{watcherKey(rand32(w, i, 100))}})
				if err != nil {
					errs.Add(1)
					continue
				}
				if on.Load() {
					count.Add(1)
				}
			}
		})
	}
	time.Sleep(warm)
	on.Store(true)
	time.Sleep(dur)
	on.Store(false)
	stop.Store(true)
	wg.Wait()
	return json.NewEncoder(os.Stdout).Encode(map[string]int64{"appends": count.Load(), "errors": errs.Load()})
}

type storeResult struct {
	rate   float64
	errors int64
	load   string
}

func (r *runner) storePhase(ctx context.Context, rep *bytes.Buffer) error {
	modes := []string{"commit", "after-commit", "bus", "off"}
	type conf struct {
		mode  string
		procs int
	}
	var confs []conf
	for _, m := range modes {
		for _, P := range r.cfg.procs {
			confs = append(confs, conf{m, P})
		}
	}
	runs := map[conf][]storeResult{}
	for round := range r.cfg.rounds {
		for _, c := range confs {
			x, err := r.storeRun(ctx, c.mode, c.procs)
			if err != nil {
				return fmt.Errorf("round %d %s P=%d: %w", round, c.mode, c.procs, err)
			}
			logf("store %s P=%d round %d: %.0f appends/s (%d errors)", c.mode, c.procs, round, x.rate, x.errors)
			runs[c] = append(runs[c], x)
		}
	}
	fmt.Fprintf(rep, "### Store: appends/s through the service in process (no HTTP), %d writers spread over P processes, each with its listener (median of %d interleaved rounds)\n\n", 4*r.cfg.writers, r.cfg.rounds)
	fmt.Fprintf(rep, "| hints | P | appends/s (median; every round) | errors | against NOTIFY in the commit, same P (median of per-round ratios) | load (median round) |\n|---|---|---|---|---|---|\n")
	for _, c := range confs {
		xs := slices.Clone(runs[c])
		slices.SortFunc(xs, func(a, b storeResult) int { return int(a.rate - b.rate) })
		x := xs[len(xs)/2]
		var all []string
		var ratios []float64
		for k, y := range runs[c] {
			all = append(all, fmt.Sprintf("%.0f", y.rate))
			ratios = append(ratios, y.rate/max(1, runs[conf{"commit", c.procs}][k].rate))
		}
		slices.Sort(ratios)
		fmt.Fprintf(rep, "| %s | %d | %.0f (%s) | %d | %.2f× | %s |\n", c.mode, c.procs, x.rate, strings.Join(all, ", "), x.errors, ratios[len(ratios)/2], x.load)
	}
	fmt.Fprintf(rep, "\n")
	return nil
}

func (r *runner) storeRun(ctx context.Context, mode string, P int) (storeResult, error) {
	x := storeResult{}
	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return x, err
	}
	defer drop()
	// The schema first, once.
	st, err := models.OpenPostgres(ctx, dsn, models.Options{})
	if err != nil {
		return x, err
	}
	st.Close()
	self, err := os.Executable()
	if err != nil {
		return x, err
	}
	writers := 4 * r.cfg.writers
	warm := 2 * time.Second
	var (
		outs []*bytes.Buffer
		cmds []*exec.Cmd
	)
	for i := range P {
		w := writers / P
		if i < writers%P {
			w++
		}
		cmd := exec.CommandContext(ctx, self, "-child", "store", "-child-dsn", r.roleDSN(dsn, i), "-child-mode", mode,
			"-child-nats", r.nats.url, "-child-writers", strconv.Itoa(w), "-duration", r.cfg.duration.String(), "-child-warm", warm.String())
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, os.Stderr
		if err := cmd.Start(); err != nil {
			return x, err
		}
		outs, cmds = append(outs, &out), append(cmds, cmd)
	}
	time.Sleep(warm)
	x.load = loadavg()
	var total int64
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			return x, fmt.Errorf("child %d: %w", i, err)
		}
		var res struct{ Appends, Errors int64 }
		if err := json.Unmarshal(outs[i].Bytes(), &res); err != nil {
			return x, fmt.Errorf("child %d said %q: %w", i, outs[i].String(), err)
		}
		total += res.Appends
		x.errors += res.Errors
	}
	x.rate = float64(total) / r.cfg.duration.Seconds()
	return x, nil
}

// lockPhase measures the NOTIFY commit lock alone: 16 connections, each committing
// a one-row UPDATE in a closed loop for -duration: with a NOTIFY of a hint's size
// inside the transaction, right after it, or none. Interleaved rounds.
func (r *runner) lockPhase(ctx context.Context, rep *bytes.Buffer) error {
	modes := []string{"inside", "after", "none"}
	runs := map[string][]float64{}
	for range r.cfg.rounds {
		for _, m := range modes {
			tps, err := r.lockRun(ctx, m)
			if err != nil {
				return fmt.Errorf("lock %s: %w", m, err)
			}
			logf("lock %s: %.0f commits/s", m, tps)
			runs[m] = append(runs[m], tps)
		}
	}
	fmt.Fprintf(rep, "### The NOTIFY commit lock: 16 connections committing a one-row UPDATE (median of %d interleaved rounds)\n\n", r.cfg.rounds)
	fmt.Fprintf(rep, "| NOTIFY | commits/s (median; every round) | against none |\n|---|---|---|\n")
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	for _, m := range modes {
		var all []string
		for _, v := range runs[m] {
			all = append(all, fmt.Sprintf("%.0f", v))
		}
		fmt.Fprintf(rep, "| %s | %.0f (%s) | %.2f× |\n", m, med(runs[m]), strings.Join(all, ", "), med(runs[m])/med(runs["none"]))
	}
	fmt.Fprintf(rep, "\n")
	return nil
}

func (r *runner) lockRun(ctx context.Context, mode string) (float64, error) {
	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return 0, err
	}
	defer drop()
	setup, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	_, err = setup.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t SELECT i, 0 FROM generate_series(1, 1000) i; LISTEN awareness_hints`)
	if err != nil {
		setup.Close(ctx)
		return 0, err
	}
	// A listener that drains the queue, as every process's listener does.
	lctx, lcancel := context.WithCancel(ctx)
	ldone := make(chan struct{})
	go func() {
		defer close(ldone)
		for lctx.Err() == nil {
			if _, err := setup.WaitForNotification(lctx); err != nil && lctx.Err() == nil {
				return
			}
		}
	}()
	defer func() { lcancel(); <-ldone; setup.Close(context.Background()) }()
	payload := strings.Repeat("x", 150)
	var (
		count atomic.Int64
		on    atomic.Bool
		stop  atomic.Bool
		wg    sync.WaitGroup
		first error
		mu    sync.Mutex
	)
	for c := range 16 {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return 0, err
		}
		wg.Go(func() {
			defer conn.Close(context.Background())
			for i := 0; !stop.Load(); i++ {
				id := 1 + (c*7919+i*104729)%1000
				err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, "UPDATE t SET v = v + 1 WHERE id = $1", id); err != nil {
						return err
					}
					if mode == "inside" {
						_, err := tx.Exec(ctx, "SELECT pg_notify('awareness_hints', $1)", payload)
						return err
					}
					return nil
				})
				if err == nil && mode == "after" {
					_, err = conn.Exec(ctx, "SELECT pg_notify('awareness_hints', $1)", payload)
				}
				if err != nil {
					mu.Lock()
					first = cmpErr(first, err)
					mu.Unlock()
					return
				}
				if on.Load() {
					count.Add(1)
				}
			}
		})
	}
	time.Sleep(time.Second)
	on.Store(true)
	t0 := time.Now()
	time.Sleep(r.cfg.duration)
	on.Store(false)
	el := time.Since(t0)
	stop.Store(true)
	wg.Wait()
	if first != nil {
		return 0, first
	}
	return float64(count.Load()) / el.Seconds(), nil
}
