package models

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/awareness/awareness/internal/awareness"
)

// A COMMIT whose answer never arrives, because the server shut down or crashed, the
// backend was terminated or the network failed, may have committed or not. Answering
// UNAVAILABLE would then be a lie half the time: the caller retries an append that is
// already in the log, a duplicate unless it carries a dedupeKey, or believes a
// rejected call wrote nothing (ERR-2) when it did. So on PostgreSQL every write
// transaction learns its id first with txid_current, and when its COMMIT fails the
// store asks the server, on a fresh connection, what became of it with txid_status,
// which survives a restart: committed means the write succeeded; aborted means nothing
// was written and the transaction can simply run again; no answer within
// commitCheckWait means nobody can know yet, and the caller is told so.

// defaultCommitCheckWait bounds how long a write waits for the server to say what
// became of a transaction whose COMMIT answer was lost. It covers a fast restart of
// the server, about a second, with room to spare, and is short enough that a caller
// still waiting for its answer gets one.
const defaultCommitCheckWait = 10 * time.Second

// outcome is what the server says became of a transaction.
type outcome int

const (
	outcomeUnknown   outcome = iota // could not ask, or too old to tell
	outcomeCommitted                // durable: the write succeeded
	outcomeAborted                  // rolled back: nothing was written
)

// commitRolledBack is the error of a write whose COMMIT failed and which the server
// says rolled back: the transaction may run again.
type commitRolledBack struct{ err error }

func (e *commitRolledBack) Error() string { return "commit rolled back: " + e.err.Error() }
func (e *commitRolledBack) Unwrap() error { return e.err }

// errOutcomeUnknown is the caller-facing error for a write whose fate the store could
// not learn within the bound.
func errOutcomeUnknown(cause error) error {
	return &awareness.Error{
		Code: awareness.EUNAVAILABLE,
		Message: "the state database connection was lost while committing and the outcome is unknown: " +
			"the write may or may not have been applied; read before retrying, or retry with the same dedupeKey",
		Err: cause,
	}
}

// xactStatus asks what became of transaction xid, on a connection other than the one
// that failed, retrying while the database is unreachable or the transaction is still
// finishing, until wait passes, ctx ends or the store closes.
func (s *Store) xactStatus(ctx context.Context, xid int64, wait time.Duration) outcome {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	defer cancel()
	pause := 20 * time.Millisecond
	for {
		var status sql.NullString
		_, err := onPoolQuiet(ctx, s.w).scanRow([]any{&status}, s.d.sql.txidStatus, xid)
		switch {
		case err == nil && status.String == "committed":
			return outcomeCommitted
		case err == nil && status.String == "aborted":
			return outcomeAborted
		case err == nil && !status.Valid:
			// Too old for the commit log: cannot happen for a transaction that just
			// ran, unless the server lost its history to a restore from a backup.
			return outcomeUnknown
		case xidInFuture(err):
			// The server crashed before any WAL that names xid reached its disk, so
			// after recovery the id is not even assigned yet: its commit record, which
			// is flushed before COMMIT is answered, was never written.
			return outcomeAborted
		}
		// "in progress", as the backend has not yet noticed its client is gone, or an
		// error while the server is still down: ask again.
		if s.closed.Load() {
			return outcomeUnknown
		}
		select {
		case <-ctx.Done():
			return outcomeUnknown
		case <-time.After(pause):
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// xidInFuture reports txid_status's "transaction ID … is in the future": 22023
// invalid_parameter_value, the only error it raises for a bigint argument.
func xidInFuture(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "22023"
}
