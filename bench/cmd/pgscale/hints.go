package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/bench/internal/proc"
)

// The hints phase: what a hint of no interest costs the processes that receive it.
// P (the largest of -procs) processes, no subscriber anywhere; -writers×4 closed-loop
// writers append through process 0 only for -duration, after a window of the same
// length with no appends (the baseline: timers, GC, the pool's housekeeping). For
// processes 1..P-1 the difference of their CPU, and of their PostgreSQL listen
// backends' (NOTIFY), is what the hints cost them; it is given per append of process 0
// and per hint each received (awareness_pg_listener_hints_total). Rounds interleave
// the configurations.

type hintCostResult struct {
	hc               string
	appends          int64
	hintsPerProc     float64
	idle, idleBase   time.Duration // processes 1..P-1, all of them, in the window
	lbe, lbeBase     time.Duration // their listen backends
	writerCPU        time.Duration // process 0, per append
	window, baseline time.Duration
	load             string
}

func (r *runner) hintCost(ctx context.Context, rep *bytes.Buffer) error {
	P := slices.Max(r.cfg.procs)
	if P < 2 {
		return fmt.Errorf("the hints phase needs -procs of 2 or more")
	}
	hcs := r.hintConfigs(false)
	runs := make([][]hintCostResult, len(hcs))
	for round := range r.cfg.rounds {
		for i, hc := range hcs {
			x, err := r.hintCostRun(ctx, hc, P)
			if err != nil {
				return fmt.Errorf("round %d %s: %w", round, hc.label, err)
			}
			logf("hints %s round %d: %d appends, %.0f hints per process, idle CPU %v (base %v), listen backends %v (base %v)",
				hc.label, round, x.appends, x.hintsPerProc, x.idle, x.idleBase, x.lbe, x.lbeBase)
			runs[i] = append(runs[i], x)
		}
	}
	fmt.Fprintf(rep, "### Hints of no interest: %d processes, appends through process 0 only, no subscriber (median of %d interleaved rounds)\n\n", P, r.cfg.rounds)
	fmt.Fprintf(rep, "| hints | appends/s of process 0 | hints received per other process | CPU of another process per 1000 appends (above its idle baseline) | per hint received | its listen backend's CPU per hint | process 0's CPU per append | load |\n|---|---|---|---|---|---|---|---|\n")
	for i, hc := range hcs {
		xs := slices.Clone(runs[i])
		per := func(x hintCostResult) float64 { // ms per 1000 appends per other process
			return float64(max(0, x.idle-x.idleBase)) / float64(P-1) / float64(max(1, x.appends)) * 1000 / 1e6
		}
		slices.SortFunc(xs, func(a, b hintCostResult) int {
			switch pa, pb := per(a), per(b); {
			case pa < pb:
				return -1
			case pa > pb:
				return 1
			}
			return 0
		})
		x := xs[len(xs)/2]
		var all []string
		for _, y := range runs[i] {
			all = append(all, fmt.Sprintf("%.1f", per(y)))
		}
		perHint, lbe := "—", "—"
		if x.hintsPerProc > 0 {
			perHint = fmt.Sprintf("%.3f ms", float64(max(0, x.idle-x.idleBase))/float64(P-1)/x.hintsPerProc/1e6)
			lbe = fmt.Sprintf("%.3f ms", float64(max(0, x.lbe-x.lbeBase))/float64(P-1)/x.hintsPerProc/1e6)
		}
		fmt.Fprintf(rep, "| %s | %.0f | %.0f | %.1f ms (rounds: %s) | %s | %s | %s | %s |\n", hc.label,
			float64(x.appends)/x.window.Seconds(), x.hintsPerProc, per(x), joinStr(all), perHint, lbe, ms(x.writerCPU), x.load)
	}
	fmt.Fprintf(rep, "\n")
	return nil
}

func joinStr(s []string) string {
	var b bytes.Buffer
	for i, v := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(v)
	}
	return b.String()
}

// listenBackends returns the pids of the listen backends of the processes ps.
func listenBackends(ctx context.Context, dsn string, ps []*server) ([]int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var names []string
	for _, p := range ps {
		names = append(names, "awareness-listener/"+strconv.Itoa(p.Pid()))
	}
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = ANY($1)`, names)
	if err != nil {
		return nil, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out, err
}

func cpuOf(ps []*server, backends []int) (srv, be time.Duration) {
	for _, p := range ps {
		srv += proc.CPUPrecise(p.Pid())
	}
	for _, pid := range backends {
		be += proc.CPUPrecise(pid)
	}
	return srv, be
}

func (r *runner) hintCostRun(ctx context.Context, hc hintConfig, P int) (hintCostResult, error) {
	x := hintCostResult{hc: hc.label}
	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return x, err
	}
	defer drop()
	var ps []*server
	defer func() { stopAll(ps) }()
	for i := range P {
		p, err := r.startHC(ctx, hc, i, dsn, "--notice-poll", "10m")
		if err != nil {
			return x, err
		}
		ps = append(ps, p)
	}
	others := ps[1:]
	var backends []int
	if !hc.bus {
		// The listen backends of the others; wait until every one is there.
		for deadline := time.Now().Add(10 * time.Second); ; {
			if backends, err = listenBackends(ctx, dsn, others); err != nil {
				return x, err
			}
			if len(backends) == len(others) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	hints := func() (float64, error) {
		var sum float64
		for _, p := range others {
			v, err := r.metric(ctx, p, "awareness_pg_listener_hints_total")
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	}
	var (
		wg    sync.WaitGroup
		on    atomic.Bool
		count atomic.Int64
		stop  = make(chan struct{})
	)
	for w := range 4 * r.cfg.writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if !on.Load() {
					time.Sleep(5 * time.Millisecond)
					continue
				}
				if _, err := r.record(ctx, ps[0], fmt.Sprintf("agent:main:subagent:h-%d-%d", w, i), watcherKey(rand32(w, i, r.cfg.watchers))); err == nil {
					count.Add(1)
				}
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	// Warm-up, then the baseline window without appends, then the window with them.
	on.Store(true)
	time.Sleep(time.Second)
	on.Store(false)
	time.Sleep(500 * time.Millisecond)
	s0, b0 := cpuOf(others, backends)
	t0 := time.Now()
	time.Sleep(r.cfg.duration)
	x.baseline = time.Since(t0)
	s1, b1 := cpuOf(others, backends)
	h0, err := hints()
	if err != nil {
		return x, err
	}
	w0 := proc.CPUPrecise(ps[0].Pid())
	c0 := count.Load()
	x.load = loadavg()
	on.Store(true)
	t1 := time.Now()
	time.Sleep(r.cfg.duration)
	on.Store(false)
	x.window = time.Since(t1)
	c1 := count.Load()
	time.Sleep(300 * time.Millisecond) // the hints of the last appends
	s2, b2 := cpuOf(others, backends)
	w1 := proc.CPUPrecise(ps[0].Pid())
	h1, err := hints()
	if err != nil {
		return x, err
	}
	x.appends = c1 - c0
	scale := func(d time.Duration) time.Duration { // the baseline over the window's length
		return time.Duration(float64(d) * float64(x.window+300*time.Millisecond) / float64(x.baseline))
	}
	x.idle, x.idleBase = s2-s1, scale(s1-s0)
	x.lbe, x.lbeBase = b2-b1, scale(b1-b0)
	x.hintsPerProc = (h1 - h0) / float64(len(others))
	x.writerCPU = (w1 - w0) / time.Duration(max(1, x.appends))
	return x, nil
}

// rand32 picks a watcher for append i of writer w, spread over n.
func rand32(w, i, n int) int { return (w*7919 + i*104729) % n }
