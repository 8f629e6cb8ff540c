package models

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/awareness/awareness/internal/startstop"
)

// Checkpoint defaults of the SQLite store.
const (
	DefaultCheckpointInterval = time.Second
	DefaultMaxWALBytes        = 64 << 20
	DefaultCheckpointCommits  = 1000
)

// CheckpointConfig configures the SQLite store's checkpointer.
type CheckpointConfig struct {
	// Enabled turns the checkpointer on, and SQLite's auto-checkpoint on the write
	// connection off. Off by default: measured on ext4 under load (bench/PEERS.md), the
	// writer's commits got slower with checkpoints beside them (single-writer appends
	// at 50–70% of raw instead of 80–100%) and the own-append tail did not improve, so
	// SQLite's own auto-checkpoint inside the commit stays the default.
	Enabled bool
	// Interval between passive checkpoints (DefaultCheckpointInterval when zero). A
	// tick with no commit since the last complete checkpoint does nothing.
	Interval time.Duration
	// EveryCommits also starts a pass after this many commits
	// (DefaultCheckpointCommits when zero), so that under a steady write load the log
	// stays about as short as SQLite's auto-checkpoint keeps it, without a commit
	// paying for the checkpoint.
	EveryCommits uint64
	// MaxWALBytes bounds the write-ahead log file (DefaultMaxWALBytes when zero): when
	// it is larger after a passive checkpoint (readers kept the log from being
	// reused), a TRUNCATE checkpoint waits for the readers and the writer, copies the
	// rest and empties the file.
	MaxWALBytes int64
}

// CheckpointResult is what one checkpointer pass did.
type CheckpointResult struct {
	// Skipped: no commit since the last complete checkpoint.
	Skipped bool
	// LogFrames and Checkpointed are SQLite's answer to the passive checkpoint: the
	// frames in the log and how many of them are in the database file now.
	LogFrames, Checkpointed int
	// WALBytes is the size of the log file after the pass.
	WALBytes int64
	// Truncated: the log was over MaxWALBytes and a TRUNCATE checkpoint ran.
	Truncated bool
}

// Checkpointer moves SQLite's write-ahead log into the database file off the commit
// path. The store's write connection runs with wal_autocheckpoint=0, so that no commit
// pays for a checkpoint (SQLite's default runs one inside the commit that crosses 1,000
// pages, about every hundred appends); the checkpointer runs PASSIVE checkpoints on a
// connection of its own (every Interval, and after every EveryCommits commits), which
// never wait for the writer or the readers, and bounds the
// log file with a TRUNCATE checkpoint when readers kept it growing past MaxWALBytes.
// Durability is the writer's (synchronous=FULL: a commit is durable once its frames
// are fsynced in the log); a checkpoint only copies committed frames.
//
// The SQLite store creates and starts one (OpenSQLite) and stops it in Close. It owns
// one goroutine between Start and Stop.
type Checkpointer struct {
	db      *sql.DB
	walPath string
	commits *atomic.Uint64 // the store's commit counter
	cfg     CheckpointConfig
	log     *slog.Logger

	// seen is the commit count at the last complete checkpoint (owned by RunOnce's
	// caller: the goroutine, or a test between Stop and Start).
	seen   uint64
	passes atomic.Int64
	kick   chan struct{} // a pass is due (committed); capacity 1

	lifecycle startstop.Base
}

func newCheckpointer(db *sql.DB, walPath string, commits *atomic.Uint64, cfg CheckpointConfig, log *slog.Logger) *Checkpointer {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultCheckpointInterval
	}
	if cfg.MaxWALBytes <= 0 {
		cfg.MaxWALBytes = DefaultMaxWALBytes
	}
	if cfg.EveryCommits == 0 {
		cfg.EveryCommits = DefaultCheckpointCommits
	}
	return &Checkpointer{db: db, walPath: walPath, commits: commits, cfg: cfg, log: log, seen: ^uint64(0),
		kick: make(chan struct{}, 1)}
}

// committed is called by the store after each commit, with the commit count: every
// EveryCommits-th commit wakes the goroutine (never blocking the committer).
func (c *Checkpointer) committed(n uint64) {
	if n%c.cfg.EveryCommits != 0 {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Start runs a pass every Interval until Stop. Starting a started checkpointer does
// nothing.
func (c *Checkpointer) Start(ctx context.Context) { c.lifecycle.Start(ctx, c.loop) }

// Stop ends the goroutine and waits for it (a pass in flight finishes first). It is
// safe to call more than once and without Start.
func (c *Checkpointer) Stop() { c.lifecycle.Stop() }

// Passes returns how many passes ran a checkpoint (skipped ones not counted).
func (c *Checkpointer) Passes() int64 { return c.passes.Load() }

func (c *Checkpointer) loop(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		if _, err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("checkpoint failed", "err", err)
		}
	}
}

// RunOnce runs one pass: a PASSIVE checkpoint unless nothing was committed since the
// last complete one, then a TRUNCATE checkpoint if the log file is over the bound. It
// must not run concurrently with itself (the goroutine is its caller between Start and
// Stop).
func (c *Checkpointer) RunOnce(ctx context.Context) (CheckpointResult, error) {
	var res CheckpointResult
	commits := c.commits.Load()
	if commits == c.seen {
		res.Skipped = true
		return res, nil
	}
	c.passes.Add(1)
	var busy int
	if err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &res.LogFrames, &res.Checkpointed); err != nil {
		return res, fmt.Errorf("passive checkpoint: %w", err)
	}
	if busy == 0 && res.LogFrames == res.Checkpointed {
		c.seen = commits
	}
	size, err := c.walSize()
	if err != nil {
		return res, err
	}
	res.WALBytes = size
	if size <= c.cfg.MaxWALBytes {
		return res, nil
	}
	// Over the bound: wait (busy timeout) for the readers of old snapshots and the
	// writer, copy the rest and empty the file.
	if err := c.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &res.LogFrames, &res.Checkpointed); err != nil {
		return res, fmt.Errorf("truncate checkpoint: %w", err)
	}
	res.Truncated = busy == 0
	if res.Truncated {
		c.seen = commits
	}
	c.log.Info("write-ahead log over its bound: truncated", "bytes", size, "bound", c.cfg.MaxWALBytes, "done", res.Truncated)
	if res.WALBytes, err = c.walSize(); err != nil {
		return res, err
	}
	return res, nil
}

func (c *Checkpointer) walSize() (int64, error) {
	fi, err := os.Stat(c.walPath)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("write-ahead log: %w", err)
	}
	return fi.Size(), nil
}

// sqliteConnector opens mattn/go-sqlite3 connections of one DSN with a hook run on each
// new connection (sql.OpenDB: no driver registered under a global name).
type sqliteConnector struct {
	dsn string
	drv *sqlite3.SQLiteDriver
}

func newSQLiteConnector(dsn string, pragmas ...string) *sqliteConnector {
	return &sqliteConnector{dsn: dsn, drv: &sqlite3.SQLiteDriver{ConnectHook: func(conn *sqlite3.SQLiteConn) error {
		for _, p := range pragmas {
			if _, err := conn.Exec(p, nil); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	}}}
}

func (c *sqliteConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }

func (c *sqliteConnector) Driver() driver.Driver { return c.drv }
