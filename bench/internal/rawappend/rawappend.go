// Package rawappend is the raw durable append of the benchmarks: the store's own two
// statements of a log-only append (internal/models/append.go) — the head upsert that
// assigns the sequence, then the event insert — in one write transaction, prepared
// once, as database/sql code would write it. It is B1's and B3's baseline
// (bench/store_bench_test.go) and the durable step of the stock-gqlgen peer with
// -durable (bench/cmd/wsgqlgen): what a user would assemble from stock parts.
package rawappend

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	_ "github.com/mattn/go-sqlite3" // the store's SQLite driver

	"github.com/awareness/awareness/internal/models"
)

// SQLite connection settings, copied from internal/models/sqlite.go so that the raw
// baselines run on exactly the store's pragmas (WAL, synchronous=FULL, immediate write
// transactions; deferred, query-only reads).
const (
	SQLiteWriteParams = "_journal_mode=WAL&_foreign_keys=on&_busy_timeout=10000&_synchronous=FULL&_txlock=immediate"
	SQLiteReadParams  = "_foreign_keys=on&_busy_timeout=10000&_txlock=deferred&_query_only=on"
)

// The two statements, with ? placeholders.
const (
	HeadUpsert = `
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
	EventInsert = `INSERT INTO events (agent_id, session_key, sequence, kind, actor_type, actor_id, summary,
occurred_at, run_id, payload_json, dedupe_key, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// Actor is the actor of the appended events (a run_completed by an agent).
const Actor = "agent:bench:main"

// Session is the session one append goes to: agent, key and the key's session kind.
type Session struct{ Agent, Key, Kind string }

// Appender appends log-only events with database/sql only.
type Appender struct {
	db             *sql.DB
	upsert, insert *sql.Stmt
}

// New prepares the two statements on db (a write pool), rebind turning ? placeholders
// into the driver's (nil: none).
func New(db *sql.DB, rebind func(string) string) (*Appender, error) {
	if rebind == nil {
		rebind = func(q string) string { return q }
	}
	up, err := db.Prepare(rebind(HeadUpsert))
	if err != nil {
		return nil, err
	}
	ins, err := db.Prepare(rebind(EventInsert))
	if err != nil {
		up.Close()
		return nil, err
	}
	return &Appender{db: db, upsert: up, insert: ins}, nil
}

// Append appends n run_completed events, the k-th to session(k), in one transaction,
// and returns when it is committed.
func (a *Appender) Append(ctx context.Context, n int, session func(k int) Session) error {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	up, ins := tx.Stmt(a.upsert), tx.Stmt(a.insert)
	for k := range n {
		s := session(k)
		now := time.Now().UnixNano()
		var seq int64
		if err := up.QueryRowContext(ctx, s.Agent, s.Key, s.Kind, 0, now, now).Scan(&seq); err != nil {
			return err
		}
		if _, err := ins.ExecContext(ctx, s.Agent, s.Key, seq, "run_completed", "agent", Actor,
			"child run completed", now, nil, nil, nil, now); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// SQLiteURI is the database/sql name of the SQLite file path with params.
func SQLiteURI(path, params string) string {
	abs, _ := filepath.Abs(path)
	return "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + params
}

// OpenSQLite opens the SQLite file path for raw appends: the store creates (or
// checks) the schema, then one write connection with the store's pragmas, checked to
// run WAL with synchronous=FULL. The caller closes the returned pool.
func OpenSQLite(ctx context.Context, path string) (*Appender, *sql.DB, error) {
	s, err := models.OpenSQLite(ctx, path, models.Options{})
	if err != nil {
		return nil, nil, err
	}
	if err := s.Close(); err != nil {
		return nil, nil, err
	}
	db, err := sql.Open("sqlite3", SQLiteURI(path, SQLiteWriteParams))
	if err != nil {
		return nil, nil, err
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if err := CheckSQLitePragmas(db); err != nil {
		db.Close()
		return nil, nil, err
	}
	a, err := New(db, nil)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return a, db, nil
}

// CheckSQLitePragmas fails unless db runs WAL with synchronous=FULL.
func CheckSQLitePragmas(db *sql.DB) error {
	var mode string
	var sync int
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		return err
	}
	if err := db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
		return err
	}
	if mode != "wal" || sync != 2 {
		return fmt.Errorf("raw SQLite pool: journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
	return nil
}
