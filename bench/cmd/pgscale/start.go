package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The start phase (issue 32's first item): a process starting beside a serving one,
// over a database holding -pending pending notices of other watchers among
// -start-cursors cursors in all (the rest synced). For each binary of -start-bins, in
// interleaved rounds:
//
//   - scans: the cursors table's sequential scans (pg_stat_user_tables.seq_scan) and
//     rows they read, and its index scans, over one start of process B while process A
//     is idle (nothing else reads the table meanwhile);
//   - ack delay: process A answers exact ackNotices, one after another, for
//     -start-baseline, then while B starts and for a second after it is ready (its
//     pruner's first pass, its listener's first scan); the acknowledgements of that
//     window against those before it, and the same with a process starting on
//     another, empty database instead (the control: what a start costs A through the
//     machine's CPU alone, with no row in common); and, sampled every 5 ms, how long
//     some backend of A's database waited on a lock (a row lock of B's sweep is what
//     held acknowledgements up);
//   - memory: B's resident set 5 s after it is ready, over that database and over an
//     empty one (the difference is what the pending notices of the deployment cost a
//     process that serves none of them).

// startResult is one round of one binary.
type startResult struct {
	bin                    string
	seqScans, seqRows, idx int64
	ready                  time.Duration
	base, during           dist
	nBase, nDuring         int
	rssLoaded, rssEmpty    int64
	// ctlBase and ctlDuring are the control: A's acknowledgements while a process
	// starts on another (empty) database.
	ctlBase, ctlDuring dist
	// lockBefore and lockDuring are how long a backend of A's database was seen
	// waiting on a lock, before B's start and during it.
	lockBefore, lockDuring time.Duration
}

func (r *runner) startPhase(ctx context.Context, rep *bytes.Buffer) error {
	bins := strings.Split(r.cfg.startBins, ",")
	if r.cfg.startBins == "" {
		bins = []string{r.cfg.bin}
	}
	var res []startResult
	for round := range r.cfg.rounds {
		for _, bin := range bins {
			x, err := r.startRun(ctx, bin)
			if err != nil {
				return fmt.Errorf("%s, round %d: %w", bin, round, err)
			}
			logf("start %s round %d: seq scans %d (%d rows), index scans %d; acks p50/p99/max %s/%s/%s before, %s/%s/%s during (control max %s → %s); RSS %d vs %d KiB",
				bin, round, x.seqScans, x.seqRows, x.idx, ms(x.base.p50), ms(x.base.p99), ms(x.base.max),
				ms(x.during.p50), ms(x.during.p99), ms(x.during.max), ms(x.ctlBase.max), ms(x.ctlDuring.max), x.rssLoaded>>10, x.rssEmpty>>10)
			res = append(res, x)
		}
	}
	fmt.Fprintf(rep, "### Start: a process starting beside a serving one, %d pending notices of other watchers among %d cursors\n\n",
		r.cfg.pending, r.cfg.startCursors)
	fmt.Fprintf(rep, "| binary | B ready after | cursors: seq scans (rows read) during B's start | cursors: index scans | A's exact acks before B: n, p50 / p99 / max | during B's start: n, p50 / p99 / max | delay (max during − max before) | control, a start on another database: max before / max during (delay) | lock waits seen on A's database (every 5 ms): before / during | B's RSS 5 s after ready: loaded / empty database (difference) |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range res {
		fmt.Fprintf(rep, "| %s | %s | %d (%d) | %d | %d, %s / %s / %s | %d, %s / %s / %s | %s | %s / %s (%s) | %v / %v | %.1f / %.1f MiB (%+.1f MiB) |\n",
			x.bin, ms(x.ready), x.seqScans, x.seqRows, x.idx,
			x.nBase, ms(x.base.p50), ms(x.base.p99), ms(x.base.max),
			x.nDuring, ms(x.during.p50), ms(x.during.p99), ms(x.during.max), ms(max(0, x.during.max-x.base.max)),
			ms(x.ctlBase.max), ms(x.ctlDuring.max), ms(max(0, x.ctlDuring.max-x.ctlBase.max)), x.lockBefore, x.lockDuring,
			float64(x.rssLoaded)/(1<<20), float64(x.rssEmpty)/(1<<20), float64(x.rssLoaded-x.rssEmpty)/(1<<20))
	}
	fmt.Fprintf(rep, "\n")
	return nil
}

// startRun is one round of one binary (see the phase's comment).
func (r *runner) startRun(ctx context.Context, bin string) (startResult, error) {
	x := startResult{bin: bin}
	// The empty database first: B's memory without any pending notice.
	empty, dropEmpty, err := r.freshDB(ctx)
	if err != nil {
		return x, err
	}
	defer dropEmpty()
	b, err := r.startBin(ctx, bin, 1, empty)
	if err != nil {
		return x, err
	}
	time.Sleep(5 * time.Second)
	x.rssEmpty = b.RSSKB() << 10
	b.stop()

	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return x, err
	}
	defer drop()
	a, err := r.startBin(ctx, bin, 0, dsn, "--notice-poll", "10m", "--rate-limit", "0")
	if err != nil {
		return x, err
	}
	defer a.stop()
	const ackers = 20000
	if err := seedStart(ctx, dsn, r.cfg.pending, r.cfg.startCursors, ackers); err != nil {
		return x, err
	}
	time.Sleep(r.cfg.settle)

	// Scans: B starts while A is idle.
	s0, err := cursorScans(ctx, dsn)
	if err != nil {
		return x, err
	}
	b, err = r.startBin(ctx, bin, 1, dsn, "--notice-poll", "10m")
	if err != nil {
		return x, err
	}
	x.ready = b.ReadyAfter
	time.Sleep(5 * time.Second)
	x.rssLoaded = b.RSSKB() << 10
	b.stop()
	time.Sleep(r.cfg.settle)
	s1, err := cursorScans(ctx, dsn)
	if err != nil {
		return x, err
	}
	x.seqScans, x.seqRows, x.idx = s1.seq-s0.seq, s1.seqRows-s0.seqRows, s1.idx-s0.idx

	// Ack delay: A acknowledges exactly, one after another, while B starts on A's
	// database, then (the control: a process start's CPU on this machine, no shared
	// rows) while a process starts on the empty one.
	next := 0
	w, err := r.ackWindow(ctx, bin, a, dsn, dsn, &next, ackers)
	if err != nil {
		return x, err
	}
	x.base, x.during, x.nBase, x.nDuring, x.lockBefore, x.lockDuring = w.before, w.during, w.nBefore, w.nDuring, w.lockBefore, w.lockDuring
	if w, err = r.ackWindow(ctx, bin, a, dsn, empty, &next, ackers); err != nil {
		return x, err
	}
	x.ctlBase, x.ctlDuring = w.before, w.during
	return x, nil
}

// window is what ackWindow measured: the acknowledgements before the start and
// during it, and how long some backend of the database waited on a lock (sampled
// every lockSample) in each.
type window struct {
	before, during         dist
	nBefore, nDuring       int
	lockBefore, lockDuring time.Duration
}

// lockSample is the period at which ackWindow looks for backends waiting on a lock.
const lockSample = 5 * time.Millisecond

// ackWindow has a acknowledge the notices of acker from *next on, one after another,
// for -start-baseline, then while a process of bin starts on startDSN and for a
// second after it is ready (its pruner's first pass, its listener's first scan).
func (r *runner) ackWindow(ctx context.Context, bin string, a *server, aDSN, startDSN string, next *int, ackers int) (window, error) {
	type ack struct {
		at, took time.Duration
		err      error
	}
	var (
		mu    sync.Mutex
		acks  []ack
		stop  = make(chan struct{})
		wg    sync.WaitGroup
		begin = time.Now()
	)
	var waits []time.Duration // when a backend was seen waiting on a lock
	lockConn, err := pgx.Connect(ctx, aDSN)
	if err != nil {
		return window{}, err
	}
	defer lockConn.Close(context.Background())
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(lockSample):
			}
			var n int
			if err := lockConn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err == nil && n > 0 {
				waits = append(waits, time.Since(begin))
			}
		}
	})
	wg.Go(func() {
		for ; *next < ackers; *next++ {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			err := r.ackExact(ctx, a, "agent:main:subagent:acker", fmt.Sprintf("agent:main:subagent:ack%d", *next))
			mu.Lock()
			acks = append(acks, ack{at: t0.Sub(begin), took: time.Since(t0), err: err})
			mu.Unlock()
		}
	})
	time.Sleep(r.cfg.startBaseline)
	started := time.Since(begin)
	b, err := r.startBin(ctx, bin, 2, startDSN, "--notice-poll", "10m")
	if err != nil {
		close(stop)
		wg.Wait()
		return window{}, err
	}
	readyAt := time.Since(begin)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	b.stop()
	var (
		before, during []time.Duration
		failed         int
		firstErr       error
	)
	for _, k := range acks {
		if k.err != nil {
			failed++
			firstErr = cmpErr(firstErr, k.err)
			continue
		}
		switch end := k.at + k.took; {
		case end < started:
			before = append(before, k.took)
		case k.at < readyAt+time.Second:
			during = append(during, k.took)
		}
	}
	if failed > 0 {
		return window{}, fmt.Errorf("%d acknowledgements failed, the first: %w", failed, firstErr)
	}
	w := window{before: summarize(before), during: summarize(during), nBefore: len(before), nDuring: len(during)}
	for _, at := range waits {
		if at < started {
			w.lockBefore += lockSample
		} else {
			w.lockDuring += lockSample
		}
	}
	return w, nil
}

// ackExact acknowledges watcher's notice on target exactly (notifiedVersion 1).
func (r *runner) ackExact(ctx context.Context, p *server, watcher, target string) error {
	body, _ := json.Marshal(map[string]any{
		"query":     `mutation($w: String!, $t: String!) { ackNotices(watcher: $w, notices: [{target: $t, notifiedVersion: 1}]) { notifiedVersion } }`,
		"variables": map[string]any{"w": watcher, "t": target}})
	req, err := http.NewRequestWithContext(ctx, "POST", p.Base+"/query", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var out struct {
		Errors []struct{ Message string } `json:"errors"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return err
	}
	if len(out.Errors) > 0 {
		return fmt.Errorf("ackNotices: %s", out.Errors[0].Message)
	}
	return nil
}

// seedStart inserts the start phase's cursors: pending notices of 1,000 other watchers
// (seedPending's), ackers pending notices of the watcher acker, one per target, and
// synced cursors up to cursors in all; then analyzes.
func seedStart(ctx context.Context, dsn string, pending, cursors, ackers int) error {
	if err := seedPending(ctx, dsn, pending-ackers, 0); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	now := time.Now().UnixNano()
	if _, err := conn.Exec(ctx, `INSERT INTO cursors (watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at)
SELECT 'agent:main:subagent:acker', 'main', 'agent:main:subagent:ack' || i, 0, 1, 1, $1::bigint + i, $1::bigint
FROM generate_series(0, $2::int - 1) AS i`, now, ackers); err != nil {
		return err
	}
	if synced := cursors - pending; synced > 0 {
		if _, err := conn.Exec(ctx, `INSERT INTO cursors (watcher_key, target_agent_id, target_key, l, n, m, updated_at)
SELECT 'agent:main:subagent:synced' || (i % 1000), 'main', 'agent:main:subagent:st' || (i / 1000), 1, 1, 1, $1::bigint
FROM generate_series(0, $2::int - 1) AS i`, now, synced); err != nil {
			return err
		}
	}
	_, err = conn.Exec(ctx, "VACUUM ANALYZE")
	return err
}

type scans struct{ seq, seqRows, idx int64 }

// cursorScans reads the cursors table's scan counters.
func cursorScans(ctx context.Context, dsn string) (scans, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return scans{}, err
	}
	defer conn.Close(context.Background())
	var s scans
	err = conn.QueryRow(ctx, `SELECT coalesce(seq_scan, 0), coalesce(seq_tup_read, 0), coalesce(idx_scan, 0)
FROM pg_stat_user_tables WHERE relname = 'cursors'`).Scan(&s.seq, &s.seqRows, &s.idx)
	return s, err
}
