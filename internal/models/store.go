package models

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"
	"gorm.io/gorm"

	"github.com/awareness/awareness/internal/awareness"
)

// dialect holds what differs between the SQLite and PostgreSQL stores: their SQL
// where it differs (dialectSQL) and how they behave.
type dialect struct {
	name  string
	goose goose.Dialect
	// sql holds the statements whose text differs (dialectsql.go).
	sql dialectSQL
	// readTx opens the read transactions that must see one snapshot (ReadChanges, Stats).
	// PostgreSQL needs REPEATABLE READ for that; SQLite gives it to any transaction.
	readTx *sql.TxOptions
	// unavailable reports driver errors that map to UNAVAILABLE.
	unavailable func(error) bool
	// retryable reports errors after which the whole write transaction is run again
	// (serialization failures and deadlocks on PostgreSQL); nil: none.
	retryable func(error) bool
	// notify: write transactions that open notices or record events send one
	// wake-up hint to the other processes (PostgreSQL NOTIFY, see notify.go).
	notify bool
	// gorm wraps an open pool in the dialect's GORM dialector.
	gorm func(*sql.DB) gorm.Dialector
	// prepare prepares statements on the pools: the hot statements of the statement
	// caches (stmtCache) and, through GORM's PrepareStmt, the read pool's single reads
	// (tx.reader). PostgreSQL leaves it off: pgx already prepares every statement once
	// per connection and reuses it, while GORM re-prepares (and pgx then deallocates) a
	// statement first used inside a transaction on every use, three round trips
	// instead of one.
	prepare bool
	// detachStatements runs a transaction's statements under a context that is never
	// cancelled (see beginWrite and beginRead): SQLite.
	detachStatements bool
	// pinWrite runs every write transaction on one connection the store holds, with
	// explicit BEGIN IMMEDIATE and COMMIT (pinnedConn): SQLite.
	pinWrite bool
}

// Store is the awareness.Store of this package, on SQLite (OpenSQLite) or PostgreSQL
// (OpenPostgres).
//
// Lock order. Every write is one transaction on the write pool. Inside it, an append
// touches rows in this order: the session heads, the new events, then the cursors.
// A head is locked by the upsert that assigns the sequence, or, for an append with a
// dedupe key, by lockHead, which creates a version-0 head when there is none so that two
// first appends of one session serialise on a row instead of racing into a unique
// violation. On PostgreSQL a batch that touches several sessions first locks all their
// heads in (agent, key) order and then all their cursors in primary-key order, the
// order Ack and Sweep use, so two batches, or a batch and an Ack, cannot deadlock on
// each other. Watch and DeleteSession also take the head first. On SQLite the
// immediate transaction serialises all writers anyway. What remains (a producer-passed
// watcher's new cursor row, registry and upstream rows) is covered by the write
// helper: a deadlock or serialization failure runs the transaction again, a bounded
// number of times, and after that maps to UNAVAILABLE.
//
// Times are INTEGER unix nanoseconds UTC. Reads that must be consistent (ReadChanges,
// Stats) run in one read transaction on the read pool.
//
// All SQL runs through the tx type (tx.go), on GORM sessions over the two pools.
type Store struct {
	d      dialect
	w, r   *gorm.DB // write pool (one connection on SQLite) and read pool
	wsql   *sql.DB
	rsql   *sql.DB
	wstmts *stmtCache // the write pool's hot statements (the append path); nil with pin
	// pin is the pinned write connection every write transaction runs on (SQLite);
	// nil on PostgreSQL.
	pin    *pinnedConn
	rstmts *stmtCache      // the read pool's (the reconciliation read)
	status *goose.Provider // migration status, on the read pool, for Ping
	log    *slog.Logger
	obs    awareness.Observer
	// origin identifies this store instance in the hints it sends (notify.go).
	origin string
	// notices builds every notice the store returns, its text naming the
	// deployment's reconcile tool (NTC-1).
	notices awareness.NoticeTool
	// pg is the parsed connection configuration of a PostgreSQL store (nil on SQLite),
	// from which the Listener opens its own connection.
	pg *pgx.ConnConfig

	// hintsAfterCommit sends each transaction's hint after its commit, outside it
	// (HintsAfterCommit).
	hintsAfterCommit bool
	// bus, when set, carries the hints in place of NOTIFY, published after each
	// commit (HintBus).
	bus HintBus

	// commitCheckWait bounds the resolution of a lost COMMIT answer (outcome.go).
	commitCheckWait time.Duration

	// count, when set (tests), counts the statements of write transactions
	// (tx.count).
	count *stmtCount

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

var _ awareness.Store = (*Store)(nil)

func newStore(ctx context.Context, d dialect, wdb, rdb *sql.DB, log *slog.Logger, obs awareness.Observer) (*Store, error) {
	w, err := openGorm(d, wdb, log)
	if err != nil {
		return nil, err
	}
	r, err := openGorm(d, rdb, log)
	if err != nil {
		return nil, err
	}
	status, err := newMigrator(d, rdb, log)
	if err != nil {
		return nil, err
	}
	var (
		wstmts *stmtCache
		pin    *pinnedConn
	)
	if d.pinWrite {
		pin = newPinnedConn(w, wdb, d.sql.writeStatements())
		if err := pin.ping(ctx); err != nil {
			return nil, err
		}
	} else if wstmts, err = newStmtCache(ctx, w, wdb, d.prepare, d.sql.writeStatements()...); err != nil {
		return nil, err
	} else {
		wstmts.lazy = !d.prepare
	}
	rstmts, err := newStmtCache(ctx, r, rdb, d.prepare, readStatements()...)
	if err != nil {
		wstmts.close()
		if pin != nil {
			pin.close()
		}
		return nil, err
	}
	return &Store{d: d, w: w, r: r, wsql: wdb, rsql: rdb, wstmts: wstmts, pin: pin, rstmts: rstmts, status: status, log: log,
		obs: awareness.ObserverOr(obs), origin: newOrigin(), commitCheckWait: defaultCommitCheckWait}, nil
}

// Dialect returns "sqlite" or "postgres".
func (s *Store) Dialect() string { return s.d.name }

// Write retries (PostgreSQL): a transaction that failed with a deadlock or a
// serialization failure runs again, at most maxWriteAttempts times in all, after a
// jittered, doubling pause starting at retryBaseDelay.
const (
	maxWriteAttempts = 5
	retryBaseDelay   = 5 * time.Millisecond
)

// write runs fn in one write transaction and maps its error. fn may run more than once
// (see maxWriteAttempts): it must set its results afresh on every run.
// name names the transaction for the observer (Observer.Transaction).
func (s *Store) write(ctx context.Context, name string, fn func(t *tx) error) error {
	return s.writeTx(ctx, name, func(t *tx, _ *hint) error { return fn(t) })
}

// writeTx is write for transactions that wake other processes: fn adds to a fresh hint
// on every run, and the hint is sent inside the transaction, after fn, so that it is
// delivered if and only if the transaction commits.
func (s *Store) writeTx(ctx context.Context, name string, fn func(t *tx, h *hint) error) (err error) {
	if s.closed.Load() {
		return s.wrapErr(errClosed)
	}
	if err := awareness.RefuseCheckOnly(ctx); err != nil {
		return err
	}
	ctx, end := s.obs.Transaction(ctx, name)
	defer func() { end(err) }()
	for attempt := 1; ; attempt++ {
		err := s.runWrite(ctx, fn)
		var rolledBack *commitRolledBack
		if errors.As(err, &rolledBack) && attempt < maxWriteAttempts {
			// The connection died at COMMIT and the server says the transaction rolled
			// back: nothing was written, so it simply runs again.
			s.log.Warn("commit lost with its connection and rolled back; running the transaction again", "attempt", attempt, "err", rolledBack.err)
			continue
		}
		if err == nil || attempt == maxWriteAttempts || s.d.retryable == nil || !s.d.retryable(err) {
			return s.wrapErr(err)
		}
		s.log.Debug("write transaction conflicted; retrying", "attempt", attempt, "err", err)
		pause := retryBaseDelay << (attempt - 1)
		pause += time.Duration(rand.Int64N(int64(pause)))
		select {
		case <-ctx.Done():
			return s.wrapErr(ctx.Err())
		case <-time.After(pause):
		}
	}
}

// runWrite runs fn and sends its hint in one write transaction, committed when both
// succeed and rolled back otherwise (also when fn panics).
func (s *Store) runWrite(ctx context.Context, fn func(t *tx, h *hint) error) (err error) {
	t, err := s.beginWrite(ctx)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			t.rollback()
		}
	}()
	var h hint
	if err := fn(t, &h); err != nil {
		return err
	}
	switch {
	case s.bus != nil:
		defer func() {
			if err == nil {
				s.publishHint(&h)
			}
		}()
	case s.hintsAfterCommit:
		defer func() {
			if err == nil {
				s.sendHintAfter(ctx, &h)
			}
		}()
	default:
		if err := s.sendHint(t, &h); err != nil {
			return err
		}
	}
	xid := t.xid
	if s.d.sql.txid != "" && xid == 0 {
		if _, err := t.scanRow([]any{&xid}, s.d.sql.txid); err != nil {
			return err
		}
	}
	done = true
	err = t.commit()
	if err == nil || xid == 0 {
		return err
	}
	// The COMMIT failed, and it may have failed after the server made it durable
	// (outcome.go): ask what became of it.
	switch s.xactStatus(ctx, xid, s.commitCheckWait) {
	case outcomeCommitted:
		s.obs.CommitResolved("committed")
		s.log.Warn("commit answer lost with its connection; the server says it committed", "err", err)
		return nil
	case outcomeAborted:
		s.obs.CommitResolved("aborted")
		return &commitRolledBack{err: err}
	default:
		s.obs.CommitResolved("unknown")
		return errOutcomeUnknown(err)
	}
}

// read runs fn in one read transaction (one snapshot) and maps its error.
func (s *Store) read(ctx context.Context, name string, fn func(t *tx) error) (err error) {
	if s.closed.Load() {
		return s.wrapErr(errClosed)
	}
	ctx, end := s.obs.Transaction(ctx, name)
	defer func() { end(err) }()
	t, err := s.beginRead(ctx)
	if err != nil {
		return s.wrapErr(err)
	}
	defer t.rollback() // read-only: nothing to commit
	return s.wrapErr(causeOf(ctx, fn(t)))
}

func checkNow(what string, now time.Time) error {
	return awareness.CheckClock(what, now)
}

// ---------------------------------------------------------------------------------------
// Health

// Stats summarises the database in one read transaction. Sessions counts rows that are
// not deleted; OldestEvent is the lowest occurred_at (the time age retention uses).
func (s *Store) Stats(ctx context.Context) (awareness.Stats, error) {
	var st awareness.Stats
	err := s.read(ctx, "Stats", func(t *tx) error {
		st = awareness.Stats{}
		var (
			oldest, lastPrune sql.NullInt64
		)
		for _, q := range []struct {
			dest []any
			sql  string
		}{
			{[]any{&st.Sessions}, "SELECT COUNT(*) FROM sessions WHERE deleted_at IS NULL"},
			{[]any{&st.Events, &oldest}, "SELECT COUNT(*), MIN(occurred_at) FROM events"},
			{[]any{&st.Cursors}, "SELECT COUNT(*) FROM cursors"},
			{[]any{&st.PendingNotices}, "SELECT COUNT(*) FROM cursors WHERE n > l"},
			{[]any{&lastPrune}, "SELECT last_prune_at FROM meta WHERE id = 1"},
		} {
			if _, err := t.scanRow(q.dest, q.sql); err != nil {
				return err
			}
		}
		if oldest.Valid {
			t := fromNanos(oldest.Int64)
			st.OldestEvent = &t
		}
		if lastPrune.Valid {
			t := fromNanos(lastPrune.Int64)
			st.LastPruneAt = &t
		}
		return nil
	})
	if err != nil {
		return awareness.Stats{}, err
	}
	return st, nil
}

// Ping checks that both pools answer and that every migration is applied.
func (s *Store) Ping(ctx context.Context) error {
	if s.closed.Load() {
		return s.wrapErr(errClosed)
	}
	if err := s.rsql.PingContext(ctx); err != nil {
		return s.wrapErr(err)
	}
	if s.pin != nil {
		if err := s.pin.ping(ctx); err != nil {
			return s.wrapErr(err)
		}
	} else if err := s.wsql.PingContext(ctx); err != nil {
		return s.wrapErr(err)
	}
	if err := checkMigrated(ctx, s.status); err != nil {
		return awareness.Unavailable(err)
	}
	return nil
}

// Close releases both pools. Calls after the first return the first result; every
// other method then fails with UNAVAILABLE.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		// Closing the pools closes GORM's prepared statements with their connections.
		// SQLite checkpoints the log when its last connection closes.
		if s.pin != nil {
			s.pin.close()
		}
		s.closeErr = errors.Join(s.wstmts.close(), s.rstmts.close(), s.rsql.Close(), s.wsql.Close())
	})
	return s.closeErr
}
