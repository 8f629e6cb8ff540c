// The phases X1 (cross-process latency, with X2 and X5), X3 (appends/s), X4 (memory)
// and the bare NOTIFY floor of X2.

package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/bench/internal/proc"
)

func watcherKey(i int) string { return fmt.Sprintf("agent:main:subagent:w%03d", i) }

type appendRec struct {
	target   string
	proc     int
	answered time.Time
}

// appendAll makes n appends named by prefix, round-robin over ps, writers at a time;
// onDone runs after the i-th append answered.
func (r *runner) appendAll(ctx context.Context, ps []*server, prefix string, n, watchers int, onDone func(i int)) ([]appendRec, error) {
	recs := make([]appendRec, n)
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range r.cfg.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				p := ps[i%len(ps)]
				t := fmt.Sprintf("agent:main:subagent:%s-%d", prefix, i)
				at, err := r.record(ctx, p, t, watcherKey(i%watchers))
				if err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
				}
				recs[i] = appendRec{target: t, proc: p.idx, answered: at}
				if onDone != nil {
					onDone(i)
				}
			}
		}()
	}
	wg.Wait()
	return recs, firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

type x1Result struct {
	hc                  string
	bus                 bool
	procs               int
	delivered           int
	rows, scans         int64
	same, cross         dist
	nSame, nCross       int
	lost, dupes         int
	faultLost, faultDup int
	killed              int
	tables              string
	// hints and hintBytes are the hints sent over the measured appends (NOTIFY
	// payloads, or bus messages published); deliveries the copies received (NOTIFY:
	// every listener's; the bus: the subscribers').
	hints, hintBytes, deliveries int64
	// stmts are pg_stat_statements' counts by role over the measured appends.
	stmts map[string]stmtStat
	load  string
}

func (r *runner) x1(ctx context.Context, rep *bytes.Buffer) error {
	var res []x1Result
	for _, hc := range r.hintConfigs(false) {
		for _, P := range r.cfg.procs {
			x, err := r.x1Run(ctx, hc, P)
			if err != nil {
				return fmt.Errorf("%s with %d processes: %w", hc.label, P, err)
			}
			res = append(res, x)
		}
	}
	fmt.Fprintf(rep, "### X1, X2, X5: subscribers on process 0 only, appends round-robin over P processes\n\n")
	fmt.Fprintf(rep, "| hints | P | notices delivered | rows read per notice | index/seq scans per notice | X2 same-process p50 / p99 | X2 across p50 / p99 | X5 lost / dupes | X5 under a fault: lost / dupes (fault) | hints per append, bytes per hint | copies received per append | load |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range res {
		cross := "—"
		if x.nCross > 0 {
			cross = ms(x.cross.p50) + " / " + ms(x.cross.p99)
		}
		fault := fmt.Sprintf("listener killed ×%d", x.killed)
		if x.bus {
			fault = "NATS server killed and restarted"
		}
		n := float64(max(1, x.delivered))
		fmt.Fprintf(rep, "| %s | %d | %d | %.2f | %.2f | %s / %s | %s | %d / %d | %d / %d (%s) | %.2f, %.0f | %.2f | %s |\n", x.hc, x.procs, x.delivered,
			float64(x.rows)/n, float64(x.scans)/n, ms(x.same.p50), ms(x.same.p99), cross, x.lost, x.dupes, x.faultLost, x.faultDup, fault,
			float64(x.hints)/float64(r.cfg.appends), float64(x.hintBytes)/float64(max(1, x.hints)), float64(x.deliveries)/float64(r.cfg.appends), x.load)
	}
	fmt.Fprintf(rep, "\nRows read per notice by table:\n\n")
	for _, x := range res {
		fmt.Fprintf(rep, "- %s, P=%d: %s\n", x.hc, x.procs, x.tables)
	}
	if r.roles {
		fmt.Fprintf(rep, "\nStatements per notice by process (pg_stat_statements, a role per process): statements / rows returned / execution ms, and the reads of pending notices by watcher among them (calls / rows):\n\n")
		for _, x := range res {
			fmt.Fprintf(rep, "- %s, P=%d:", x.hc, x.procs)
			n := float64(max(1, x.delivered))
			for i := range x.procs {
				st := x.stmts[roleName(i)]
				fmt.Fprintf(rep, " p%d %.2f / %.2f / %.3f (reads %.2f / %.2f);", i, float64(st.calls)/n, float64(st.rows)/n, st.ms/n,
					float64(st.readCalls)/n, float64(st.readRows)/n)
			}
			fmt.Fprintf(rep, "\n")
		}
	}
	fmt.Fprintf(rep, "\nX2 across p99 against its goal, 2 × same-process p99 + 2 ms:")
	for _, x := range res {
		if x.nCross > 0 {
			fmt.Fprintf(rep, " %s P=%d %s vs %s;", x.hc, x.procs, ms(x.cross.p99), ms(2*x.same.p99+2*time.Millisecond))
		}
	}
	fmt.Fprintf(rep, "\n\n")
	return nil
}

func (r *runner) x1Run(ctx context.Context, hc hintConfig, P int) (x1Result, error) {
	x := x1Result{hc: hc.label, bus: hc.bus, procs: P}
	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return x, err
	}
	defer drop()
	// A database of some size (-seed sessions, and as many pending notices of other
	// watchers, analyzed) before the processes start, so that the plans are those of
	// production, index scans: the foreign-key checks' plans are made once per
	// connection, and over a table of a few rows they are sequential scans whose row
	// counts would swamp everything else.
	p, err := r.startHC(ctx, hc, 0, dsn)
	if err != nil {
		return x, err
	}
	p.stop()
	if err := seedPending(ctx, dsn, r.cfg.seed, r.cfg.seed); err != nil {
		return x, err
	}
	var ps []*server
	defer func() { stopAll(ps) }()
	for i := range P {
		// No safety poll inside the run: rescans are x4's subject; a reconnect scans.
		p, err := r.startHC(ctx, hc, i, dsn, "--notice-poll", "10m")
		if err != nil {
			return x, err
		}
		ps = append(ps, p)
	}
	var watchers []string
	for i := range r.cfg.watchers {
		watchers = append(watchers, watcherKey(i))
	}
	ws, err := subscribe(ctx, ps[0], watchers)
	if err != nil {
		return x, err
	}
	defer ws.c.Close()
	// Warm-up: one append per watcher, round-robin over the processes, until every
	// frame came (this also proves every subscription live). One per watcher whatever
	// P: a hint costs a read of the named watcher's pending notices, so every P starts
	// with the same number pending.
	recs, err := r.appendAll(ctx, ps, "warm", r.cfg.watchers, r.cfg.watchers, nil)
	if err != nil {
		return x, err
	}
	ws.waitFor(targetsOf(recs), r.cfg.wait)
	if lost, _ := ws.count(targetsOf(recs)); lost > 0 {
		return x, fmt.Errorf("warm-up: %d notices did not arrive", lost)
	}
	logf("x1 %s P=%d: warm; settling %v for the statistics", hc.label, P, r.cfg.settle)
	time.Sleep(r.cfg.settle)
	s0, err := readStats(ctx, dsn)
	if err != nil {
		return x, err
	}
	if err := r.resetStatements(ctx, dsn); err != nil {
		return x, err
	}
	var (
		notes *notifyCounter
		v0    natsVarz
	)
	if hc.bus {
		if v0, err = r.nats.varz(ctx); err != nil {
			return x, err
		}
	} else if notes, err = countNotifies(ctx, dsn); err != nil {
		return x, err
	}
	x.load = loadavg()
	d0 := ws.n.Load()
	recs, err = r.appendAll(ctx, ps, "m", r.cfg.appends, r.cfg.watchers, nil)
	if err != nil {
		return x, err
	}
	targets := targetsOf(recs)
	ws.waitFor(targets, r.cfg.wait)
	x.delivered = int(ws.n.Load() - d0)
	x.lost, x.dupes = ws.count(targets)
	if hc.bus {
		v1, err := r.nats.varz(ctx)
		if err != nil {
			return x, err
		}
		x.hints, x.hintBytes, x.deliveries = v1.InMsgs-v0.InMsgs, v1.InBytes-v0.InBytes, v1.OutMsgs-v0.OutMsgs
	} else {
		x.hints, x.hintBytes = notes.stop()
		x.deliveries = x.hints * int64(P) // every listener receives every hint
	}
	var same, cross []time.Duration
	for _, rc := range recs {
		if at, ok := ws.first(rc.target); ok {
			if rc.proc == 0 {
				same = append(same, at.Sub(rc.answered))
			} else {
				cross = append(cross, at.Sub(rc.answered))
			}
		}
	}
	x.same, x.cross, x.nSame, x.nCross = summarize(same), summarize(cross), len(same), len(cross)
	if x.stmts, err = r.statements(ctx, dsn); err != nil {
		return x, err
	}
	logf("x1 %s P=%d: %d appends delivered %d; settling %v", hc.label, P, len(recs), x.delivered, r.cfg.settle)
	time.Sleep(r.cfg.settle)
	s1, err := readStats(ctx, dsn)
	if err != nil {
		return x, err
	}
	x.rows, x.scans = s1.rows-s0.rows, s1.scans-s0.scans
	var names []string
	for n := range s1.tables {
		if s1.tables[n] > s0.tables[n] {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		x.tables += fmt.Sprintf("%s %.1f, ", n, float64(s1.tables[n]-s0.tables[n])/float64(max(1, x.delivered)))
	}
	x.tables = strings.TrimSuffix(x.tables, ", ")

	// X5 under a fault: process 0's listener connection is killed a quarter in
	// (NOTIFY); the NATS server is killed a quarter in and started again half way (bus).
	pid0 := ps[0].Pid()
	var faultErr error
	frecs, err := r.appendAll(ctx, ps, "f", r.cfg.faultN, r.cfg.watchers, func(i int) {
		switch {
		case hc.bus && i == r.cfg.faultN/4:
			r.nats.kill()
		case hc.bus && i == r.cfg.faultN/2:
			faultErr = r.nats.start()
		case !hc.bus && i == r.cfg.faultN/4:
			n, err := terminateListener(ctx, dsn, pid0)
			if err != nil {
				logf("terminate: %v", err)
			}
			x.killed += n
		}
	})
	if err != nil {
		return x, err
	}
	if faultErr != nil {
		return x, faultErr
	}
	ft := targetsOf(frecs)
	ws.waitFor(ft, r.cfg.wait)
	time.Sleep(300 * time.Millisecond) // late duplicates
	x.faultLost, x.faultDup = ws.count(ft)
	x.lost, x.dupes = ws.count(targets)
	if e := ws.err.Load(); e != nil {
		return x, fmt.Errorf("subscriber: %v", e)
	}
	logf("x1 %s P=%d: rows %d per notice %.2f; X2 same p99 %s across p99 %s; lost %d dupes %d; fault lost %d dupes %d (killed %d)", hc.label, P, x.rows,
		float64(x.rows)/float64(max(1, x.delivered)), ms(x.same.p99), ms(x.cross.p99), x.lost, x.dupes, x.faultLost, x.faultDup, x.killed)
	return x, nil
}

func targetsOf(recs []appendRec) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.target
	}
	return out
}

type x3Result struct {
	procs   int
	hints   string
	appends int
	rate    float64
	lat     dist
	errors  int
	// CPU per append, of the servers and of their PostgreSQL backends
	srvCPU, pgCPU time.Duration
	load          string
}

func (r *runner) x3(ctx context.Context, rep *bytes.Buffer) error {
	hcs := r.hintConfigs(true)
	type conf struct {
		hc    int
		procs int
	}
	var confs []conf
	for i := range hcs {
		for _, P := range r.cfg.procs {
			confs = append(confs, conf{i, P})
		}
	}
	runs := map[conf][]x3Result{}
	// Interleaved rounds: the machine's drift (and the other users of the PostgreSQL
	// server) hit every configuration alike; the median round is reported.
	for round := range r.cfg.rounds {
		for _, c := range confs {
			x, err := r.x3Run(ctx, hcs[c.hc], c.procs)
			if err != nil {
				return fmt.Errorf("round %d P=%d hints=%s: %w", round, c.procs, hcs[c.hc].label, err)
			}
			runs[c] = append(runs[c], x)
		}
	}
	med := map[conf]x3Result{}
	for c, xs := range runs {
		s := slices.Clone(xs)
		slices.SortFunc(s, func(a, b x3Result) int { return int(a.rate - b.rate) })
		med[c] = s[len(s)/2]
	}
	fmt.Fprintf(rep, "### X3: appends/s, %d closed-loop writers spread over P processes, no subscribers (median of %d interleaved rounds)\n\n", 4*r.cfg.writers, r.cfg.rounds)
	fmt.Fprintf(rep, "| hints | P | appends/s (median; every round) | recordEvent p50 | p99 | errors | server CPU per append | PostgreSQL backends' CPU per append | load (median round) |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range confs {
		x := med[c]
		var all []string
		for _, y := range runs[c] {
			all = append(all, fmt.Sprintf("%.0f", y.rate))
		}
		fmt.Fprintf(rep, "| %s | %d | %.0f (%s) | %s | %s | %d | %s | %s | %s |\n", x.hints, x.procs, x.rate, strings.Join(all, ", "),
			ms(x.lat.p50), ms(x.lat.p99), x.errors, ms(x.srvCPU), ms(x.pgCPU), x.load)
	}
	// Ratios against NOTIFY in the commit at the same P, round by round (the rounds
	// are interleaved, so a round's configurations shared the machine's state).
	base := -1
	for i, hc := range hcs {
		if hc.label == "notify commit" {
			base = i
		}
	}
	if base >= 0 {
		fmt.Fprintf(rep, "\nAgainst NOTIFY in the commit at the same P (median of the per-round ratios):")
		for i, hc := range hcs {
			if i == base {
				continue
			}
			for _, P := range r.cfg.procs {
				var ratios []float64
				for k := range runs[conf{i, P}] {
					ratios = append(ratios, runs[conf{i, P}][k].rate/max(1, runs[conf{base, P}][k].rate))
				}
				slices.Sort(ratios)
				fmt.Fprintf(rep, " %s P=%d %.2f×;", hc.label, P, ratios[len(ratios)/2])
			}
		}
		fmt.Fprintf(rep, "\n\n")
	}
	return nil
}

func (r *runner) x3Run(ctx context.Context, hc hintConfig, P int) (x3Result, error) {
	x := x3Result{procs: P, hints: hc.label}
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
	writers := 4 * r.cfg.writers
	var (
		mu       sync.Mutex
		lat      []time.Duration
		errs     int
		firstErr error
		wg       sync.WaitGroup
		measure  atomic.Bool
	)
	stop := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[w%P]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return // the run's -timeout: not an error of the server's to count
				default:
				}
				t0 := time.Now()
				_, err := r.record(ctx, p, fmt.Sprintf("agent:main:subagent:x3-%d-%d", w, i), watcherKey(rand.N(r.cfg.watchers)))
				d := time.Since(t0)
				if measure.Load() {
					mu.Lock()
					if err != nil {
						if errs++; firstErr == nil {
							firstErr = err
						}
					} else {
						lat = append(lat, d)
					}
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(time.Second) // warm-up
	srv0, pg0 := time.Duration(0), time.Duration(0)
	for _, p := range ps {
		srv0 += proc.CPUPrecise(p.Pid())
	}
	pg0, _ = backendCPU(ctx, dsn)
	x.load = loadavg()
	measure.Store(true)
	t0 := time.Now()
	time.Sleep(r.cfg.duration)
	measure.Store(false)
	el := time.Since(t0)
	srv1 := time.Duration(0)
	for _, p := range ps {
		srv1 += proc.CPUPrecise(p.Pid())
	}
	pg1, _ := backendCPU(ctx, dsn)
	close(stop)
	wg.Wait()
	x.appends, x.errors, x.lat = len(lat), errs, summarize(lat)
	x.rate = float64(len(lat)) / el.Seconds()
	if len(lat) > 0 {
		x.srvCPU, x.pgCPU = (srv1-srv0)/time.Duration(len(lat)), (pg1-pg0)/time.Duration(len(lat))
	}
	logf("x3 %s P=%d: %.0f appends/s p99 %s errors %d", hc.label, P, x.rate, ms(x.lat.p99), errs)
	if firstErr != nil {
		logf("x3 %s P=%d: the first error: %.300v", hc.label, P, firstErr)
	}
	return x, nil
}

func (r *runner) x4(ctx context.Context, rep *bytes.Buffer) error {
	type row struct {
		pending       int
		before        bool
		rss, rssAfter int64
	}
	var res []row
	for _, c := range []row{{0, false, 0, 0}, {r.cfg.pending, false, 0, 0}, {r.cfg.pending, true, 0, 0}} {
		rs, ra, err := r.x4Run(ctx, c.pending, c.before)
		if err != nil {
			return fmt.Errorf("pending=%d: %w", c.pending, err)
		}
		c.rss, c.rssAfter = rs, ra
		res = append(res, c)
	}
	fmt.Fprintf(rep, "### X4: one process, %d local subscribers, pending notices of other watchers in the database\n\n", r.cfg.watchers)
	fmt.Fprintf(rep, "| pending notices of others | when they were written | RSS after subscribing | RSS after 5 rescans (--notice-poll 1s) |\n|---|---|---|---|\n")
	for _, x := range res {
		when := "while the process runs"
		if x.before {
			when = "before the process started (its startup sweep reads them)"
		} else if x.pending == 0 {
			when = "—"
		}
		fmt.Fprintf(rep, "| %d | %s | %.1f MiB | %.1f MiB |\n", x.pending, when, float64(x.rss)/(1<<20), float64(x.rssAfter)/(1<<20))
	}
	d := func(x row) string {
		b := x.rssAfter - res[0].rssAfter
		return fmt.Sprintf("%+.1f MiB (%.0f bytes per pending notice)", float64(b)/(1<<20), float64(b)/float64(max(1, x.pending)))
	}
	fmt.Fprintf(rep, "\nDifference due to the %d pending, steady state: %s; after a startup over them: %s.\n\n", r.cfg.pending, d(res[1]), d(res[2]))
	return nil
}

// seedPending inserts sessions other sessions (none of the run) and pending notices of 1,000 other
// watchers × pending/1000 targets (l < n = m: nothing for a sweep to re-freeze), and
// analyzes the database.
func seedPending(ctx context.Context, dsn string, pending, sessions int) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if sessions > 0 {
		_, err = conn.Exec(ctx, `INSERT INTO sessions (agent_id, session_key, kind, created_at, updated_at)
SELECT 'main', 'agent:main:subagent:seed' || i, 'subagent', $1::bigint, $1::bigint FROM generate_series(1, $2::int) AS i`,
			time.Now().UnixNano(), sessions)
		if err != nil {
			return err
		}
	}
	if pending > 0 {
		now := time.Now().UnixNano()
		_, err = conn.Exec(ctx, `INSERT INTO cursors (watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at)
SELECT 'agent:main:subagent:bulk' || (i % 1000), 'main', 'agent:main:subagent:bt' || (i / 1000), 0, 1, 1, $1::bigint + i, $1::bigint
FROM generate_series(0, $2::int - 1) AS i`, now, pending)
		if err != nil {
			return err
		}
	}
	// VACUUM too: autovacuum would otherwise visit the new rows during a measured
	// window, and its reads would count with the processes'.
	_, err = conn.Exec(ctx, "VACUUM ANALYZE")
	return err
}

func (r *runner) x4Run(ctx context.Context, pending int, before bool) (int64, int64, error) {
	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer drop()
	// The schema, from a process that then exits.
	p, err := r.start(ctx, 0, dsn)
	if err != nil {
		return 0, 0, err
	}
	p.stop()
	if before {
		if err := seedPending(ctx, dsn, pending, 0); err != nil {
			return 0, 0, err
		}
	}
	p, err = r.start(ctx, 0, dsn, "--notice-poll", "1s")
	if err != nil {
		return 0, 0, err
	}
	defer p.stop()
	if !before {
		if err := seedPending(ctx, dsn, pending, 0); err != nil {
			return 0, 0, err
		}
	}
	var watchers []string
	for i := range r.cfg.watchers {
		watchers = append(watchers, watcherKey(i))
	}
	ws, err := subscribe(ctx, p, watchers)
	if err != nil {
		return 0, 0, err
	}
	defer ws.c.Close()
	// One notice for each subscriber, from a second process (through the listener).
	q, err := r.start(ctx, 1, dsn, "--notice-poll", "10m")
	if err != nil {
		return 0, 0, err
	}
	recs, err := r.appendAll(ctx, []*server{q}, "x4", r.cfg.watchers, r.cfg.watchers, nil)
	q.stop()
	if err != nil {
		return 0, 0, err
	}
	ws.waitFor(targetsOf(recs), r.cfg.wait)
	if lost, _ := ws.count(targetsOf(recs)); lost > 0 {
		return 0, 0, fmt.Errorf("%d notices lost", lost)
	}
	time.Sleep(500 * time.Millisecond)
	r0 := p.RSSKB() << 10
	time.Sleep(5500 * time.Millisecond)
	r1 := p.RSSKB() << 10
	logf("x4 pending=%d: RSS %d → %d KiB", pending, r0>>10, r1>>10)
	return r0, r1, nil
}

func (r *runner) bareNotify(ctx context.Context, rep *bytes.Buffer) error {
	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return err
	}
	defer drop()
	lc, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer lc.Close(context.Background())
	if _, err := lc.Exec(ctx, "LISTEN pgscale"); err != nil {
		return err
	}
	sc, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer sc.Close(context.Background())
	n := r.cfg.appends
	arrived := make([]time.Time, n)
	got := make(chan struct{})
	go func() {
		defer close(got)
		for range n {
			wctx, cancel := context.WithTimeout(ctx, r.cfg.wait)
			note, err := lc.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return
			}
			if i, err := strconv.Atoi(note.Payload); err == nil && i < n {
				arrived[i] = time.Now()
			}
		}
	}()
	answered := make([]time.Time, n)
	for i := range n {
		if _, err := sc.Exec(ctx, "SELECT pg_notify('pgscale', $1)", strconv.Itoa(i)); err != nil {
			return err
		}
		answered[i] = time.Now()
		time.Sleep(3 * time.Millisecond) // about x1's pace
	}
	<-got
	var ds []time.Duration
	lost := 0
	for i := range n {
		if arrived[i].IsZero() {
			lost++
			continue
		}
		ds = append(ds, arrived[i].Sub(answered[i]))
	}
	d := summarize(ds)
	fmt.Fprintf(rep, "### X2's floor: bare NOTIFY → LISTEN, two connections of one process, %d notifications\n\n", n)
	fmt.Fprintf(rep, "From the sender's answer to the receipt: p50 %s, p99 %s, max %s; lost %d.\n\n", ms(d.p50), ms(d.p99), ms(d.max), lost)
	logf("notify: p50 %s p99 %s lost %d", ms(d.p50), ms(d.p99), lost)
	return nil
}
