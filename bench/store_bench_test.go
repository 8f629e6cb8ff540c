package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/awareness/awareness/bench/internal/rawappend"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

// appendSessions is how many sessions the append benchmarks rotate over.
const appendSessions = 64

// rawAppender is the raw baseline (rawappend: the store's own head upsert and event
// insert in one write transaction, prepared once, with database/sql only) over the
// bench sessions.
type rawAppender struct {
	*rawappend.Appender
	sessions []rawappend.Session // the bench sessions, with their session kinds
}

func newRawAppender(tb testing.TB, h dbHandle) *rawAppender {
	a, err := rawappend.New(h.rawWrite(tb), h.rebind)
	if err != nil {
		tb.Fatal(err)
	}
	ra := &rawAppender{Appender: a}
	for i := range appendSessions {
		key := benchKey(i)
		ra.sessions = append(ra.sessions, rawappend.Session{Agent: "bench", Key: key, Kind: string(awareness.ClassifyKey(key))})
	}
	return ra
}

// appendBatch appends n log-only events, to sessions first, first+1, …, in one
// transaction.
func (ra *rawAppender) appendBatch(ctx context.Context, first, n int) error {
	return ra.Append(ctx, n, func(k int) rawappend.Session { return ra.sessions[(first+k)%appendSessions] })
}

// recordInput is the service's append: log-only (run_completed, the same rows the raw
// baseline writes) or notifying (human_direct_message: also reads the target's
// cursors, of which there are none).
func recordInput(i int, notify bool) awareness.RecordInput {
	in := awareness.RecordInput{SessionKey: benchKey(i % appendSessions), Kind: awareness.RunCompleted,
		ActorType: awareness.ActorAgent, ActorID: &benchActor}
	if notify {
		in.Kind, in.ActorType = awareness.HumanDirectMessage, awareness.ActorHuman
	}
	return in
}

func reportAppends(b *testing.B, cs *countingStore) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "appends/s")
	if cs != nil && cs.batches.Load() > 0 {
		b.ReportMetric(float64(cs.ops.Load())/float64(cs.batches.Load()), "ops/tx")
	}
}

// BenchmarkAppendOne is B1: durable appends from one writer, one transaction each.
// impl=raw is database/sql (head upsert + event insert, prepared); impl=svc is
// Service.RecordEvent of a log-only event (the same rows); impl=svc-notify is a
// notifying event on a target nobody watches; impl=store is Store.Append alone. Each
// reports its latency per append (p50-ns, p99-ns) and the process's CPU per append
// (cpu-ns/op): raw's are the floor of a durable append that P3 and P4 state beside the
// in-memory peers.
func BenchmarkAppendOne(b *testing.B) {
	ctx := context.Background()
	for _, be := range backends {
		b.Run("impl=raw/db="+be.name, func(b *testing.B) {
			ra := newRawAppender(b, be.fresh(b))
			var m opMeter
			b.ResetTimer()
			m.start(b)
			for i := range b.N {
				if err := m.op(func() error { return ra.appendBatch(ctx, i, 1) }); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			m.report(b)
			reportAppends(b, nil)
		})
		for _, notify := range []bool{false, true} {
			name := "impl=svc"
			if notify {
				name = "impl=svc-notify"
			}
			b.Run(name+"/db="+be.name, func(b *testing.B) {
				svc, cs := newService(be.fresh(b).store(b))
				var m opMeter
				b.ResetTimer()
				m.start(b)
				for i := range b.N {
					if err := m.op(func() error { _, err := svc.RecordEvent(ctx, recordInput(i, notify)); return err }); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				m.report(b)
				reportAppends(b, cs)
			})
		}
		b.Run("impl=store/db="+be.name, func(b *testing.B) {
			store := be.fresh(b).store(b)
			var m opMeter
			b.ResetTimer()
			m.start(b)
			for i := range b.N {
				err := m.op(func() error {
					now := time.Now()
					ne, err := awareness.ValidateRecord(recordInput(i, false), now)
					if err != nil {
						return err
					}
					return store.Append(ctx, []*awareness.AppendOp{{New: ne, Now: now}})
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			m.report(b)
			reportAppends(b, nil)
		})
	}
}

// BenchmarkAppendOneInterleaved is B1 with its baseline in the same moments: one op is
// one durable append by each of raw (database/sql, as in BenchmarkAppendOne) and svc
// (Service.RecordEvent of the same log-only event), each on its own database, taking
// turns in chunks of 50 appends in a rotating order, so that the shared machine's load
// falls on both alike. It reports each one's appends/s and their ratio.
func BenchmarkAppendOneInterleaved(b *testing.B) {
	const chunk = 50
	ctx := context.Background()
	ra := newRawAppender(b, freshSQLite(b))
	svc, _ := newService(freshSQLite(b).store(b))
	impls := []func(i int) error{
		func(i int) error { return ra.appendBatch(ctx, i, 1) },
		func(i int) error { _, err := svc.RecordEvent(ctx, recordInput(i, false)); return err },
	}
	var took [2]time.Duration
	b.ResetTimer()
	for first, turn := 0, 0; first < b.N; first, turn = first+chunk, turn+1 {
		n := min(chunk, b.N-first)
		for k := range impls {
			j := (turn + k) % len(impls)
			t0 := time.Now()
			for i := first; i < first+n; i++ {
				if err := impls[j](i); err != nil {
					b.Fatal(err)
				}
			}
			took[j] += time.Since(t0)
		}
	}
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(b.N) / d.Seconds() }
	b.ReportMetric(rate(took[0]), "raw-appends/s")
	b.ReportMetric(rate(took[1]), "svc-appends/s")
	b.ReportMetric(rate(took[1])/rate(took[0]), "svc/raw")
}

// concurrentWriters is B3's number of concurrent appenders.
const concurrentWriters = 16

// The writer sweep of B3: the service with more writers, and the raw appender with as
// many appends per transaction (the most a group commit of that many writers can put
// in one), so that the report can say where 5× B1 is reached and what bounds it.
var (
	sweepWriters = []int{32, 64}
	sweepBatches = []int{16, 32, 64}
)

// BenchmarkAppendConcurrent is B3: durable appends under concurrency. impl=raw is the
// ceiling: one database/sql writer batching 100 appends per transaction; impl=svc is
// 16 goroutines calling Service.RecordEvent, batched by the group committer (ops/tx
// is the mean batch). The sweep: impl=svc-wN is N goroutines (32, 64); impl=raw-txN is
// the raw writer with N appends per transaction (16, 32, 64). Every case reports
// cpu-ns/op (the process's CPU per append).
func BenchmarkAppendConcurrent(b *testing.B) {
	ctx := context.Background()
	raw := func(be backend, perTx int) func(b *testing.B) {
		return func(b *testing.B) {
			ra := newRawAppender(b, be.fresh(b))
			b.ResetTimer()
			cpu0 := processCPU(b)
			for done := 0; done < b.N; done += perTx {
				if err := ra.appendBatch(ctx, done, min(perTx, b.N-done)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			reportAppends(b, nil)
			b.ReportMetric(float64(perTx), "ops/tx")
		}
	}
	svc := func(be backend, writers int) func(b *testing.B) {
		return func(b *testing.B) {
			svc, cs := newService(be.fresh(b).store(b))
			var next atomic.Int64
			var failed atomic.Value
			var wg sync.WaitGroup
			b.ResetTimer()
			cpu0 := processCPU(b)
			for range writers {
				wg.Go(func() {
					for {
						i := int(next.Add(1) - 1)
						if i >= b.N {
							return
						}
						if _, err := svc.RecordEvent(ctx, recordInput(i, false)); err != nil {
							failed.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
			reportAppends(b, cs)
		}
	}
	for _, be := range backends {
		b.Run("impl=raw/db="+be.name, raw(be, 100))
		b.Run("impl=svc/db="+be.name, svc(be, concurrentWriters))
		for _, w := range sweepWriters {
			b.Run(fmt.Sprintf("impl=svc-w%d/db=%s", w, be.name), svc(be, w))
		}
		for _, n := range sweepBatches {
			b.Run(fmt.Sprintf("impl=raw-tx%d/db=%s", n, be.name), raw(be, n))
		}
	}
}

// Restart fixture (B7): 100k cursors (1,000 targets × 100 watchers), 10k of them
// pending (every tenth). refreeze=none: the pending ones have N = M; refreeze=all:
// each has M > N, which the sweep rewrote (N := M) before NTC-5 kept pending notices
// unchanged. Either way the sweep now reads only its index of cursors with
// M > N == L (none here) and opens nothing.
const (
	restartTargets  = 1000
	restartWatchers = 100
	pendingEvery    = 10
)

// BenchmarkRestart is B7: from a closed database to a ready service. impl=svc is what
// serve does before it listens: models.OpenSQLite (migrations check, pools, ping),
// awareness.NewService, Service.Sweep (which opens no notice here). impl=raw opens a read pool and selects the
// whole cursor table into structs. The database file is restored from a template
// before each iteration (outside the timer), so every iteration sweeps the same state.
func BenchmarkRestart(b *testing.B) {
	ctx := context.Background()
	for _, refreeze := range []bool{false, true} {
		mode := "none"
		if refreeze {
			mode = "all"
		}
		dir := benchDir(b)
		template := filepath.Join(dir, "template-"+mode+".db")
		seedRestart(b, template, refreeze)
		work := filepath.Join(dir, "work.db")
		restore := func() {
			for _, suffix := range []string{"", "-wal", "-shm"} {
				os.Remove(work + suffix)
			}
			if err := copyFile(template, work); err != nil {
				b.Fatal(err)
			}
		}
		b.Run("impl=raw/db=sqlite/refreeze="+mode, func(b *testing.B) {
			b.StopTimer()
			for range b.N {
				restore()
				b.StartTimer()
				db, err := sql.Open("sqlite3", sqliteURI(work, sqliteReadParams))
				if err != nil {
					b.Fatal(err)
				}
				n, err := selectCursors(ctx, db)
				b.StopTimer()
				db.Close()
				if err != nil || n != restartTargets*restartWatchers {
					b.Fatalf("raw select: %d rows, %v", n, err)
				}
			}
		})
		b.Run("impl=svc/db=sqlite/refreeze="+mode, func(b *testing.B) {
			b.StopTimer()
			for range b.N {
				restore()
				b.StartTimer()
				store, err := models.OpenSQLite(ctx, work, models.Options{})
				if err != nil {
					b.Fatal(err)
				}
				svc := awareness.NewService(awareness.Config{Store: store})
				n, err := svc.Sweep(ctx)
				b.StopTimer()
				store.Close()
				if err != nil || n != 0 {
					b.Fatalf("sweep: opened %d notices, %v; want none", n, err)
				}
			}
		})
	}
}

// selectCursors is the raw baseline of B7: every cursor row, scanned.
func selectCursors(ctx context.Context, db *sql.DB) (int, error) {
	rows, err := db.QueryContext(ctx, "SELECT watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at FROM cursors")
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	type cursor struct {
		watcher, agent, key string
		l, n, m             int64
		opened              sql.NullInt64
		updated             int64
	}
	var out []cursor
	for rows.Next() {
		var c cursor
		if err := rows.Scan(&c.watcher, &c.agent, &c.key, &c.l, &c.n, &c.m, &c.opened, &c.updated); err != nil {
			return 0, err
		}
		out = append(out, c)
	}
	return len(out), rows.Err()
}

// seedRestart writes the B7 fixture: the store's schema, then heads and cursors in one
// raw transaction, then closes (checkpointing the WAL into the file).
func seedRestart(tb testing.TB, path string, refreeze bool) {
	tb.Helper()
	s, err := models.OpenSQLite(context.Background(), path, models.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	s.Close()
	db, err := sql.Open("sqlite3", sqliteURI(path, sqliteWriteParams))
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback()
	now := time.Now().UnixNano()
	opened := now - int64(time.Hour)
	head, err := tx.Prepare("INSERT INTO sessions (agent_id, session_key, kind, state_version, created_at, updated_at) VALUES (?, ?, ?, 5, ?, ?)")
	if err != nil {
		tb.Fatal(err)
	}
	cur, err := tx.Prepare("INSERT INTO cursors (watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)")
	if err != nil {
		tb.Fatal(err)
	}
	for t := range restartTargets {
		key := "agent:bench:t" + fmt.Sprint(t)
		if _, err := head.Exec("bench", key, string(awareness.ClassifyKey(key)), now, now); err != nil {
			tb.Fatal(err)
		}
		for w := range restartWatchers {
			l, n, m, op := int64(5), int64(5), int64(5), any(nil)
			if (t*restartWatchers+w)%pendingEvery == 0 {
				l, n, op = 3, 5, opened
				if refreeze {
					n = 4
				}
			}
			if _, err := cur.Exec(fmt.Sprintf("agent:w%d:main", w), "bench", key, l, n, m, op, now); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
