package bench

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/awareness/awareness/bench/internal/rawappend"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

// SQLite connection settings of the raw baselines: the store's (see rawappend).
const (
	sqliteWriteParams = rawappend.SQLiteWriteParams
	sqliteReadParams  = rawappend.SQLiteReadParams
)

// backend is one database the store and the raw baselines run on.
type backend struct {
	name string
	// fresh returns a handle on an empty, migrated database of its own.
	fresh func(tb testing.TB) dbHandle
}

// dbHandle is one fresh database: open the store, or raw pools with the store's
// settings.
type dbHandle struct {
	// store opens the product store over the database.
	store func(tb testing.TB) *models.Store
	// rawWrite and rawRead open database/sql pools with the store's settings.
	rawWrite, rawRead func(tb testing.TB) *sql.DB
	// rebind turns ? placeholders into the driver's.
	rebind func(string) string
}

// backends lists the databases: SQLite always; PostgreSQL is added by pg_test.go.
var backends = []backend{{name: "sqlite", fresh: freshSQLite}}

// benchDir is where SQLite files go: $BENCH_DIR (must be on a real disk: fsync cost is
// the point) or the test's temporary directory.
func benchDir(tb testing.TB) string {
	if d := os.Getenv("BENCH_DIR"); d != "" {
		dir, err := os.MkdirTemp(d, "bench-")
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { os.RemoveAll(dir) })
		return dir
	}
	return tb.TempDir()
}

func sqliteURI(path, params string) string { return rawappend.SQLiteURI(path, params) }

// freshSQLite is a new SQLite database with the store's schema, for the store and for
// the raw baselines.
func freshSQLite(tb testing.TB) dbHandle {
	path := filepath.Join(benchDir(tb), "bench.db")
	// The store creates the schema (the same migrations for raw and svc).
	s := openSQLiteStore(tb, path)
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	return dbHandle{
		store: func(tb testing.TB) *models.Store { return openSQLiteStore(tb, path) },
		rawWrite: func(tb testing.TB) *sql.DB {
			db := openRaw(tb, "sqlite3", sqliteURI(path, sqliteWriteParams))
			db.SetMaxOpenConns(1)
			db.SetMaxIdleConns(1)
			checkSQLitePragmas(tb, db)
			return db
		},
		rawRead: func(tb testing.TB) *sql.DB {
			db := openRaw(tb, "sqlite3", sqliteURI(path, sqliteReadParams))
			db.SetMaxOpenConns(4)
			db.SetMaxIdleConns(4)
			return db
		},
		rebind: func(q string) string { return q },
	}
}

func openSQLiteStore(tb testing.TB, path string) *models.Store {
	tb.Helper()
	s, err := models.OpenSQLite(context.Background(), path, models.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

func openRaw(tb testing.TB, driver, dsn string) *sql.DB {
	tb.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	if err := db.Ping(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// checkSQLitePragmas fails unless the raw write pool runs WAL with synchronous=FULL.
func checkSQLitePragmas(tb testing.TB, db *sql.DB) {
	tb.Helper()
	if err := rawappend.CheckSQLitePragmas(db); err != nil {
		tb.Fatal(err)
	}
}

// rebindDollar turns ? placeholders into $1, $2, … (PostgreSQL).
func rebindDollar(q string) string {
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// newService wires a service over store (through a batch-counting wrapper).
func newService(store awareness.Store) (*awareness.Service, *countingStore) {
	cs := &countingStore{Store: store}
	return awareness.NewService(awareness.Config{Store: cs}), cs
}

// countingStore counts Append transactions and the ops they carried, to report the
// group committer's batch size. It adds two atomic adds per transaction.
type countingStore struct {
	awareness.Store
	batches, ops atomic.Int64
}

func (c *countingStore) Append(ctx context.Context, ops []*awareness.AppendOp) error {
	c.batches.Add(1)
	c.ops.Add(int64(len(ops)))
	return c.Store.Append(ctx, ops)
}

// latencies collects per-operation durations of one benchmark run.
type latencies []time.Duration

// report adds p50-ns and p99-ns to the benchmark's metrics.
func (l latencies) report(b *testing.B) {
	if len(l) == 0 {
		return
	}
	s := slices.Clone(l)
	slices.Sort(s)
	b.ReportMetric(float64(pct(s, 50)), "p50-ns")
	b.ReportMetric(float64(pct(s, 99)), "p99-ns")
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := len(sorted) * p / 100
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// opMeter measures the ops of one benchmark run: each op's duration (p50-ns, p99-ns)
// and the process's CPU time over the run per op (cpu-ns/op: the op's own CPU, the
// database's included, and whatever runs beside it in the process, GC and background
// checkpoints).
type opMeter struct {
	lat  latencies
	cpu0 time.Duration
}

// start begins the run; call it right after b.ResetTimer.
func (m *opMeter) start(b *testing.B) {
	m.lat = make(latencies, 0, b.N)
	m.cpu0 = processCPU(b)
}

// op runs f as one measured op.
func (m *opMeter) op(f func() error) error {
	t0 := time.Now()
	err := f()
	m.lat = append(m.lat, time.Since(t0))
	return err
}

// report adds the metrics; call it after the loop.
func (m *opMeter) report(b *testing.B) {
	b.ReportMetric(float64(processCPU(b)-m.cpu0)/float64(b.N), "cpu-ns/op")
	m.lat.report(b)
}

// benchKey is the i-th session of the append benchmarks.
func benchKey(i int) string { return "agent:bench:s" + strconv.Itoa(i) }

var benchActor = rawappend.Actor
