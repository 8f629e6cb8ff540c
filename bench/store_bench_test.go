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

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

// appendSessions is how many sessions the append benchmarks rotate over.
const appendSessions = 64

// The raw baseline runs the store's own statements (internal/models/store.go, Append
// of a log-only kind): the head upsert that assigns the sequence, then the event
// insert, in one write transaction; prepared once, as database/sql code would.
const (
	rawHeadUpsert = `
INSERT INTO sessions (agent_id, session_key, kind, state_version, compaction_count, created_at, updated_at)
VALUES (?, ?, ?, 1, ?, ?, ?)
ON CONFLICT (agent_id, session_key) DO UPDATE SET
    kind = excluded.kind,
    state_version = sessions.state_version + 1,
    compaction_count = sessions.compaction_count + excluded.compaction_count,
    created_at = CASE WHEN sessions.deleted_at IS NULL THEN sessions.created_at ELSE excluded.created_at END,
    updated_at = excluded.updated_at,
    deleted_at = NULL
RETURNING state_version`
	rawEventInsert = `INSERT INTO events (agent_id, session_key, sequence, kind, actor_type, actor_id, summary,
occurred_at, run_id, payload_json, dedupe_key, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// rawAppender appends with database/sql only.
type rawAppender struct {
	db             *sql.DB
	upsert, insert *sql.Stmt
	kinds          []string // session kind of each bench session
}

func newRawAppender(tb testing.TB, h dbHandle) *rawAppender {
	db := h.rawWrite(tb)
	up, err := db.Prepare(h.rebind(rawHeadUpsert))
	if err != nil {
		tb.Fatal(err)
	}
	ins, err := db.Prepare(h.rebind(rawEventInsert))
	if err != nil {
		tb.Fatal(err)
	}
	ra := &rawAppender{db: db, upsert: up, insert: ins}
	for i := range appendSessions {
		ra.kinds = append(ra.kinds, string(awareness.ClassifyKey(benchKey(i))))
	}
	return ra
}

// appendBatch appends n log-only events, to sessions first, first+1, …, in one
// transaction.
func (ra *rawAppender) appendBatch(ctx context.Context, first, n int) error {
	tx, err := ra.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	up, ins := tx.Stmt(ra.upsert), tx.Stmt(ra.insert)
	for k := range n {
		i := (first + k) % appendSessions
		key := benchKey(i)
		now := time.Now().UnixNano()
		var seq int64
		if err := up.QueryRowContext(ctx, "bench", key, ra.kinds[i], 0, now, now).Scan(&seq); err != nil {
			return err
		}
		if _, err := ins.ExecContext(ctx, "bench", key, seq, "run_completed", "agent", benchActor,
			"child run completed", now, nil, nil, nil, now); err != nil {
			return err
		}
	}
	return tx.Commit()
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
// notifying event on a target nobody watches; impl=store is Store.Append alone.
func BenchmarkAppendOne(b *testing.B) {
	ctx := context.Background()
	for _, be := range backends {
		b.Run("impl=raw/db="+be.name, func(b *testing.B) {
			ra := newRawAppender(b, be.fresh(b))
			b.ResetTimer()
			for i := range b.N {
				if err := ra.appendBatch(ctx, i, 1); err != nil {
					b.Fatal(err)
				}
			}
			reportAppends(b, nil)
		})
		for _, notify := range []bool{false, true} {
			name := "impl=svc"
			if notify {
				name = "impl=svc-notify"
			}
			b.Run(name+"/db="+be.name, func(b *testing.B) {
				svc, cs := newService(be.fresh(b).store(b))
				b.ResetTimer()
				for i := range b.N {
					if _, err := svc.RecordEvent(ctx, recordInput(i, notify)); err != nil {
						b.Fatal(err)
					}
				}
				reportAppends(b, cs)
			})
		}
		b.Run("impl=store/db="+be.name, func(b *testing.B) {
			store := be.fresh(b).store(b)
			b.ResetTimer()
			for i := range b.N {
				now := time.Now()
				ne, err := awareness.ValidateRecord(recordInput(i, false), now)
				if err != nil {
					b.Fatal(err)
				}
				if err := store.Append(ctx, []*awareness.AppendOp{{New: ne, Now: now}}); err != nil {
					b.Fatal(err)
				}
			}
			reportAppends(b, nil)
		})
	}
}

// BenchmarkAppendOneInterleaved is B1 with its baseline in the same moments: one op is
// one durable append by each of raw (database/sql, as in BenchmarkAppendOne),
// svc/ckpt=commit (Service.RecordEvent of the same log-only event, SQLite's
// auto-checkpoint inside the commit) and svc/ckpt=background (the same with the store's
// checkpointer, the default), each on its own database, taking turns in chunks of 50
// appends in a rotating order, so that the shared machine's load falls on all three
// alike. It reports each one's appends/s and the two ratios to raw.
func BenchmarkAppendOneInterleaved(b *testing.B) {
	const chunk = 50
	ctx := context.Background()
	ra := newRawAppender(b, freshSQLiteWith(b, models.CheckpointConfig{}))
	commit, _ := newService(freshSQLiteWith(b, models.CheckpointConfig{InCommit: true}).store(b))
	background, _ := newService(freshSQLiteWith(b, models.CheckpointConfig{}).store(b))
	svc := func(s *awareness.Service) func(i int) error {
		return func(i int) error { _, err := s.RecordEvent(ctx, recordInput(i, false)); return err }
	}
	impls := []func(i int) error{func(i int) error { return ra.appendBatch(ctx, i, 1) }, svc(commit), svc(background)}
	var took [3]time.Duration
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
	b.ReportMetric(rate(took[1]), "commit-appends/s")
	b.ReportMetric(rate(took[2]), "background-appends/s")
	b.ReportMetric(rate(took[1])/rate(took[0]), "commit/raw")
	b.ReportMetric(rate(took[2])/rate(took[0]), "background/raw")
}

// concurrentWriters is B3's number of concurrent appenders.
const concurrentWriters = 16

// BenchmarkAppendConcurrent is B3: durable appends under concurrency. impl=raw is the
// ceiling: one database/sql writer batching 100 appends per transaction; impl=svc is
// 16 goroutines calling Service.RecordEvent, batched by the group committer (ops/tx
// is the mean batch).
func BenchmarkAppendConcurrent(b *testing.B) {
	ctx := context.Background()
	for _, be := range backends {
		b.Run("impl=raw/db="+be.name, func(b *testing.B) {
			ra := newRawAppender(b, be.fresh(b))
			b.ResetTimer()
			for done := 0; done < b.N; done += 100 {
				if err := ra.appendBatch(ctx, done, min(100, b.N-done)); err != nil {
					b.Fatal(err)
				}
			}
			reportAppends(b, nil)
			b.ReportMetric(100, "ops/tx")
		})
		b.Run(fmt.Sprintf("impl=svc/db=%s", be.name), func(b *testing.B) {
			svc, cs := newService(be.fresh(b).store(b))
			var next atomic.Int64
			var failed atomic.Value
			var wg sync.WaitGroup
			b.ResetTimer()
			for range concurrentWriters {
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
			reportAppends(b, cs)
		})
	}
}

// BenchmarkAppendConcurrentInterleaved is B3 with both checkpoint modes in the same
// moments: one op is one durable append by each of svc/ckpt=commit and
// svc/ckpt=background (16 goroutines calling Service.RecordEvent, as in
// BenchmarkAppendConcurrent), each on its own database, taking turns in chunks of 800
// appends, so that the shared machine's load falls on both alike. It reports each
// one's appends/s and their ratio.
func BenchmarkAppendConcurrentInterleaved(b *testing.B) {
	const chunk = 800
	ctx := context.Background()
	modes := []models.CheckpointConfig{{InCommit: true}, {}}
	var svcs []*awareness.Service
	for _, cfg := range modes {
		svc, _ := newService(freshSQLiteWith(b, cfg).store(b))
		svcs = append(svcs, svc)
	}
	var took [2]time.Duration
	b.ResetTimer()
	for first, turn := 0, 0; first < b.N; first, turn = first+chunk, turn+1 {
		end := min(first+chunk, b.N)
		for k := range svcs {
			j := (turn + k) % len(svcs)
			var next atomic.Int64
			next.Store(int64(first))
			var failed atomic.Value
			var wg sync.WaitGroup
			t0 := time.Now()
			for range concurrentWriters {
				wg.Go(func() {
					for {
						i := int(next.Add(1) - 1)
						if i >= end {
							return
						}
						if _, err := svcs[j].RecordEvent(ctx, recordInput(i, false)); err != nil {
							failed.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			took[j] += time.Since(t0)
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	rate := func(d time.Duration) float64 { return float64(b.N) / d.Seconds() }
	b.ReportMetric(rate(took[0]), "commit-appends/s")
	b.ReportMetric(rate(took[1]), "background-appends/s")
	b.ReportMetric(rate(took[1])/rate(took[0]), "background/commit")
}

// Restart fixture (B7): 100k cursors (1,000 targets × 100 watchers), 10k of them
// pending (every tenth). refreeze=none: the pending ones are frozen (N = M), the sweep
// only reads and republishes; refreeze=all: each has M > N, the sweep rewrites it.
const (
	restartTargets  = 1000
	restartWatchers = 100
	pendingEvery    = 10
)

// BenchmarkRestart is B7: from a closed database to a ready service. impl=svc is what
// serve does before it listens: models.OpenSQLite (migrations check, pools, ping),
// awareness.NewService, Service.Sweep. impl=raw opens a read pool and selects the
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
				if err != nil || n != restartTargets*restartWatchers/pendingEvery {
					b.Fatalf("sweep: %d notices, %v", n, err)
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
