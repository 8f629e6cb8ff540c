package bench

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// wideWatchers is how many watchers the target of BenchmarkNotifyWide has (P2).
const wideWatchers = 10000

var wideTarget = awareness.SessionRef{AgentID: "bench", Key: "agent:bench:wide"}

// processCPU is the process's user and system CPU time so far. On a shared machine it
// is steadier than wall time: it does not count the time other processes hold the
// cores (the database server's CPU on PostgreSQL is not in it).
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkNotifyWide is P2: Store.Append of one notifying event (a human message) to a
// target with 10,000 watchers, one transaction, durable. state=open: every cursor is
// synced before each append (outside the timer), so the append opens 10,000 notices;
// state=pending: the notices are already open, so the append only moves M. Besides
// ns/op (the commit time) it reports the write-ahead log written per append
// (wal-B/op: on SQLite the size of the WAL file, emptied by a TRUNCATE checkpoint
// before each append; on PostgreSQL the WAL insert position's advance) and per
// notice opened (wal-B/notice, state=open).
func BenchmarkNotifyWide(b *testing.B) {
	ctx := context.Background()
	for _, be := range backends {
		for _, state := range []string{"open", "pending"} {
			b.Run(fmt.Sprintf("state=%s/db=%s", state, be.name), func(b *testing.B) {
				h := be.fresh(b)
				raw := h.rawWrite(b)
				raw.SetMaxOpenConns(1)
				seedWide(b, raw, h.rebind)
				store := h.store(b)
				wal := newWALMeter(b, be.name, raw)
				op := func() *awareness.AppendOp {
					now := time.Now()
					ne, err := awareness.ValidateRecord(awareness.RecordInput{SessionKey: wideTarget.Key,
						Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}, now)
					if err != nil {
						b.Fatal(err)
					}
					return &awareness.AppendOp{New: ne, Now: now}
				}
				if state == "pending" { // open them once
					if err := store.Append(ctx, []*awareness.AppendOp{op()}); err != nil {
						b.Fatal(err)
					}
				}
				var walBytes, opened int64
				var cpu time.Duration
				b.ResetTimer()
				for range b.N {
					b.StopTimer()
					if state == "open" {
						if _, err := raw.Exec(h.rebind("UPDATE cursors SET l = m, n = m, opened_at = NULL WHERE target_key = ?"), wideTarget.Key); err != nil {
							b.Fatal(err)
						}
					}
					wal.reset()
					o := op()
					c0 := processCPU(b)
					b.StartTimer()
					if err := store.Append(ctx, []*awareness.AppendOp{o}); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					cpu += processCPU(b) - c0
					walBytes += wal.written()
					opened += int64(len(o.Opened))
					b.StartTimer()
				}
				b.StopTimer()
				if state == "open" && opened != int64(b.N)*wideWatchers {
					b.Fatalf("opened %d notices in %d appends, want %d each", opened, b.N, wideWatchers)
				}
				b.ReportMetric(float64(walBytes)/float64(b.N), "wal-B/op")
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
				if opened > 0 {
					b.ReportMetric(float64(walBytes)/float64(opened), "wal-B/notice")
				}
			})
		}
	}
}

// seedWide inserts the wide target's cursors, synced at 0, in one transaction.
func seedWide(tb testing.TB, db *sql.DB, rebind func(string) string) {
	tb.Helper()
	tx, err := db.Begin()
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback()
	st, err := tx.Prepare(rebind(`INSERT INTO cursors (watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at)
VALUES (?, ?, ?, 0, 0, 0, NULL, ?)`))
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now().UnixNano()
	for i := range wideWatchers {
		if _, err := st.Exec(fmt.Sprintf("agent:w%05d:main", i), wideTarget.AgentID, wideTarget.Key, now); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
}

// walMeter measures the write-ahead log one append writes.
type walMeter struct {
	tb      testing.TB
	dialect string
	raw     *sql.DB
	path    string // SQLite: the WAL file
	mark    int64  // PostgreSQL: the WAL insert position at reset
}

func newWALMeter(tb testing.TB, backend string, raw *sql.DB) *walMeter {
	m := &walMeter{tb: tb, dialect: backend, raw: raw}
	if backend == "sqlite" {
		var seq int
		var name, file string
		if err := raw.QueryRow("PRAGMA database_list").Scan(&seq, &name, &file); err != nil {
			tb.Fatal(err)
		}
		m.path = file + "-wal"
	}
	return m
}

// reset empties the SQLite WAL (a TRUNCATE checkpoint) or notes PostgreSQL's position.
func (m *walMeter) reset() {
	if m.dialect == "sqlite" {
		// A checkpoint in a commit may hold the checkpoint lock for a moment.
		for try := 0; ; try++ {
			var busy, log, done int
			if err := m.raw.QueryRow("PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &log, &done); err != nil {
				m.tb.Fatal(err)
			}
			if busy == 0 {
				return
			}
			if try == 100 {
				m.tb.Fatal("wal_checkpoint(TRUNCATE) stayed blocked")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := m.raw.QueryRow("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").Scan(&m.mark); err != nil {
		m.tb.Fatal(err)
	}
}

// written returns the WAL bytes written since reset.
func (m *walMeter) written() int64 {
	if m.dialect == "sqlite" {
		fi, err := os.Stat(m.path)
		if err != nil {
			m.tb.Fatal(err)
		}
		return fi.Size()
	}
	var now int64
	if err := m.raw.QueryRow("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint").Scan(&now); err != nil {
		m.tb.Fatal(err)
	}
	return now - m.mark
}

// BenchmarkOwnNoticeTail is the store side of P3: Service.RecordEvent of a notifying
// event that opens one notice (its watcher's own target), one writer, back to back,
// 3,000 appends per iteration, on SQLite. It reports the append's p50, p99 and max,
// and how many per 10,000 took over 5 ms (over5ms/10k): SQLite's auto-checkpoint runs
// inside the commit that crosses 1,000 log pages, which showed as bursts of slow
// appends.
func BenchmarkOwnNoticeTail(b *testing.B) {
	const appends = 3000
	ctx := context.Background()
	for _, be := range backends {
		if be.name != "sqlite" {
			continue
		}
		b.Run("db="+be.name, func(b *testing.B) {
			svc, _ := newService(be.fresh(b).store(b))
			var lat latencies
			var over int
			b.ResetTimer()
			for range b.N {
				for i := range appends {
					in := awareness.RecordInput{SessionKey: fmt.Sprintf("agent:bench:subagent:t%d", i%1000),
						Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman,
						Watchers: []string{fmt.Sprintf("agent:w%d:main", i%1000)}}
					t0 := time.Now()
					if _, err := svc.RecordEvent(ctx, in); err != nil {
						b.Fatal(err)
					}
					d := time.Since(t0)
					lat = append(lat, d)
					if d > 5*time.Millisecond {
						over++
					}
				}
			}
			b.StopTimer()
			lat.report(b)
			b.ReportMetric(float64(slices.Max(lat).Nanoseconds()), "max-ns")
			b.ReportMetric(float64(over)*10000/float64(appends*b.N), "over5ms/10k")
		})
	}
}
