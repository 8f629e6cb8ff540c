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
	// DefaultCheckpointFrames is SQLite's own auto-checkpoint threshold (1,000 pages).
	DefaultCheckpointFrames = 1000
)

// besideTries bounds the background checkpoints of one pass: while the writer commits
// beside them, each copies what the last one could not, until one finds the log quiet.
const besideTries = 3

// minCommitsPerPass bounds how often commits start a pass: at most every 8th commit,
// even when single commits write more than Frames pages.
const minCommitsPerPass = 8

// CheckpointConfig configures the SQLite store's checkpointer.
type CheckpointConfig struct {
	// InCommit leaves checkpoints to SQLite: its auto-checkpoint runs inside the commit
	// that crosses 1,000 log pages, and no checkpointer runs. The default (false) is
	// the Checkpointer.
	InCommit bool
	// Interval between passes (DefaultCheckpointInterval when zero). A tick with no
	// commit since the last complete checkpoint does nothing.
	Interval time.Duration
	// Frames is the log's length, in pages, at which commits start a pass
	// (DefaultCheckpointFrames when zero): the checkpointer learns the pages per commit
	// from each pass and is woken after the commit that should reach it.
	Frames int
	// MaxWALBytes bounds the write-ahead log file (DefaultMaxWALBytes when zero): when
	// it is larger after a pass (readers kept the log from being reused), a TRUNCATE
	// checkpoint waits for the readers, copies the rest and empties the file. After
	// every restart of the log SQLite also trims the file to a quarter of it
	// (journal_size_limit).
	MaxWALBytes int64
}

func (cfg CheckpointConfig) withDefaults() CheckpointConfig {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultCheckpointInterval
	}
	if cfg.MaxWALBytes <= 0 {
		cfg.MaxWALBytes = DefaultMaxWALBytes
	}
	if cfg.Frames <= 0 {
		cfg.Frames = DefaultCheckpointFrames
	}
	return cfg
}

// journalSizeLimit is the write connection's journal_size_limit: the size SQLite trims
// the log file to when it restarts the log.
func (cfg CheckpointConfig) journalSizeLimit() int64 { return cfg.withDefaults().MaxWALBytes / 4 }

// CheckpointResult is what one checkpointer pass did.
type CheckpointResult struct {
	// Skipped: no commit since the last complete checkpoint.
	Skipped bool
	// LogFrames and Checkpointed are SQLite's answer to the background checkpoint:
	// the frames in the log and how many of them are in the database file now.
	LogFrames, Checkpointed int
	// Finished: the checkpoint with the writer held copied frames the background
	// ones had left (the writer committed beside them).
	Finished bool
	// Complete: every frame of the log is in the database file, so that the next
	// commit starts the log from its beginning.
	Complete bool
	// Tries is how many background checkpoints ran (up to besideTries), Beside how
	// long they took, Held how long the pass then held the write connection (a writer
	// arriving meanwhile waited for it).
	Tries        int
	Beside, Held time.Duration
	// WALBytes is the size of the log file after the pass.
	WALBytes int64
	// Truncated: the log was over MaxWALBytes and a TRUNCATE checkpoint ran.
	Truncated bool
}

// Checkpointer moves SQLite's write-ahead log into the database file off the commit
// path. The store's write connection runs with wal_autocheckpoint=0, so that no commit
// pays for a checkpoint (SQLite's default runs one inside the commit that crosses 1,000
// pages, about every hundred notifying appends).
//
// A pass copies the log beside the writer and then, for SQLite to reuse the log, holds
// the writer for a moment. PASSIVE checkpoints on the checkpointer's own connection
// wait for nobody, but each answers about the log as it was when it began, and SQLite
// starts the log from its beginning again only for a write transaction that begins
// with every frame copied; under a steady writer, checkpoints beside it alone never
// let the log be reused. The file then grows by every commit (to 200 MB in a 2-second
// single-writer benchmark), and every commit's fsync also extends the file, which
// made a single writer about half as fast as with SQLite's auto-checkpoint. So:
//
//   - up to besideTries PASSIVE checkpoints beside the writer, each copying what the
//     last could not, until one ran with no commit beside it (quiet); a next one only
//     while the writer is between transactions;
//   - then the store's one write connection is taken from its pool, between two write
//     transactions, and a PASSIVE checkpoint runs on it: after a quiet one there is
//     nothing left to copy and it returns at once; when the writer never paused, it
//     copies the frames committed during the last one (a writer arriving meanwhile
//     waits for that copy and its fsyncs: measured here 0.02–0.9 ms, up to 22 ms with
//     a disk writer beside). The next commit restarts the log.
//
// The log file is bounded by a TRUNCATE checkpoint when readers kept it growing past
// MaxWALBytes, and trimmed by SQLite after a restart (journal_size_limit).
//
// Durability is the writer's (synchronous=FULL: a commit is durable once its frames
// are fsynced in the log); a checkpoint only copies committed frames and fsyncs the
// database file before the log can be reused (both connections run synchronous=FULL).
//
// The SQLite store creates and starts one (OpenSQLite) and stops it in Close. It owns
// one goroutine between Start and Stop.
type Checkpointer struct {
	db      *sql.DB // the checkpointer's connection
	writer  *sql.DB // the store's write pool (one connection)
	walPath string
	commits *atomic.Uint64 // the store's commit counter
	cfg     CheckpointConfig
	log     *slog.Logger

	// seen is the commit count at the last complete checkpoint (owned by RunOnce's
	// caller: the goroutine, or a test between Stop and Start).
	seen uint64
	// next is the commit count that wakes the goroutine for a pass.
	next   atomic.Uint64
	passes atomic.Int64
	kick   chan struct{} // a pass is due (committed); capacity 1

	// beside, for tests, runs before the background checkpoint, and what it returns
	// after it.
	beside func() (after func())

	lifecycle startstop.Base
}

func newCheckpointer(db, writer *sql.DB, walPath string, commits *atomic.Uint64, cfg CheckpointConfig, log *slog.Logger) *Checkpointer {
	c := &Checkpointer{db: db, writer: writer, walPath: walPath, commits: commits, cfg: cfg.withDefaults(), log: log,
		seen: ^uint64(0), kick: make(chan struct{}, 1)}
	c.next.Store(commits.Load() + minCommitsPerPass)
	return c
}

// committed is called by the store after each commit, with the commit count: the
// commit that should bring the log to Frames pages wakes the goroutine (never blocking
// the committer).
func (c *Checkpointer) committed(n uint64) {
	if n < c.next.Load() {
		return
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Start runs a pass every Interval, and when commits filled the log, until Stop.
// Starting a started checkpointer does nothing.
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
			if c.commits.Load() < c.next.Load() {
				continue // a kick left from before the last pass
			}
		}
		if _, err := c.RunOnce(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("checkpoint failed", "err", err)
		}
	}
}

// RunOnce runs one pass: nothing if nothing was committed since the last complete
// checkpoint; else PASSIVE checkpoints beside the writer until one finds no commit
// beside it (at most besideTries); then a PASSIVE checkpoint of what is left with the
// write connection held, and a TRUNCATE
// checkpoint if the log file is over the bound. It must not run concurrently with itself (the goroutine
// is its caller between Start and Stop).
func (c *Checkpointer) RunOnce(ctx context.Context) (res CheckpointResult, err error) {
	commits := c.commits.Load()
	if commits == c.seen {
		res.Skipped = true
		return res, nil
	}
	defer func() {
		c.passes.Add(1)
		c.log.Debug("checkpoint", "frames", res.LogFrames, "copied_beside", res.Checkpointed, "tries", res.Tries,
			"beside", res.Beside, "held", res.Held, "complete", res.Complete, "wal_bytes", res.WALBytes)
	}()
	var bg CheckpointResult
	var quiet bool
	t0 := time.Now()
	for try := 1; ; try++ {
		after := func() {}
		if c.beside != nil {
			after = c.beside()
		}
		before := c.commits.Load()
		var busy int
		busy, err = checkpoint(ctx, c.db, "PASSIVE", &bg)
		after()
		if try == 1 {
			res.LogFrames, res.Checkpointed = bg.LogFrames, bg.Checkpointed
			c.schedule(commits, bg.LogFrames)
		}
		res.Tries = try
		// Quiet: no commit beside it, so that the step with the writer held finds
		// nothing to copy (and no fsync to wait for).
		quiet = busy == 0 && bg.LogFrames == bg.Checkpointed && c.commits.Load() == before
		// Try again only while the writer is between transactions: a writer that
		// never pauses would not leave a quiet moment, and every try costs two fsyncs.
		if err != nil || quiet || try == besideTries || c.writer.Stats().InUse > 0 {
			break
		}
	}
	res.Beside = time.Since(t0)
	if err != nil {
		return res, err
	}
	// The background checkpoints' answer is about the log as it was when the last
	// began: a transaction that began before it ended does not restart the log. So
	// the pass finishes with the writer held: after a quiet background checkpoint
	// there is nothing (or a commit's frames) left to copy; after a writer that never
	// paused, the frames it committed during the last one.
	conn, err := c.writer.Conn(ctx)
	if err != nil {
		return res, fmt.Errorf("checkpoint: write connection: %w", err)
	}
	held := time.Now()
	defer func() {
		conn.Close()
		res.Held = time.Since(held)
	}()
	commits = c.commits.Load() // no commit while conn is held
	var fin CheckpointResult
	busy, err := checkpoint(ctx, conn, "PASSIVE", &fin)
	if err != nil {
		return res, err
	}
	res.Finished = fin.LogFrames != bg.LogFrames || fin.Checkpointed != bg.Checkpointed
	// A reader of an old snapshot can keep frames from being copied.
	res.Complete = busy == 0 && fin.LogFrames == fin.Checkpointed
	if res.Complete {
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
	// Over the bound: wait (busy timeout) for the readers of old snapshots, copy the
	// rest and empty the file.
	var tr CheckpointResult
	if busy, err = checkpoint(ctx, conn, "TRUNCATE", &tr); err != nil {
		return res, err
	}
	res.Truncated = busy == 0
	if res.Truncated {
		res.Complete = true
		c.seen = commits
	}
	c.log.Info("write-ahead log over its bound: truncated", "bytes", size, "bound", c.cfg.MaxWALBytes, "done", res.Truncated)
	if res.WALBytes, err = c.walSize(); err != nil {
		return res, err
	}
	return res, nil
}

// schedule sets the commit count that wakes the next pass: the log had frames pages
// after the commits since the last complete checkpoint (from which the log restarted).
func (c *Checkpointer) schedule(commits uint64, frames int) {
	since := commits - c.seen
	if c.seen == ^uint64(0) || since == 0 || frames <= 0 {
		c.next.Store(commits + minCommitsPerPass)
		return
	}
	every := uint64(c.cfg.Frames) * since / uint64(frames)
	c.next.Store(commits + max(every, minCommitsPerPass))
}

// checkpoint runs PRAGMA wal_checkpoint(mode) on q and returns SQLite's busy flag.
func checkpoint(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, mode string, res *CheckpointResult) (busy int, err error) {
	if err := q.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &res.LogFrames, &res.Checkpointed); err != nil {
		return 0, fmt.Errorf("%s checkpoint: %w", mode, err)
	}
	return busy, nil
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
