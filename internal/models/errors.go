package models

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"

	"github.com/mattn/go-sqlite3"

	"github.com/awareness/awareness/internal/awareness"
)

// errClosed is the cause of every call made after Close.
var errClosed = errors.New("models: store is closed")

// wrapErr maps a storage failure to an *awareness.Error: UNAVAILABLE when retrying may
// help, as for a full disk, a locked database or a lost connection; INTERNAL
// otherwise. *awareness.Error values pass through. The caller-facing message is
// generic; the driver error, never SQL text, travels in Err for the log.
func (s *Store) wrapErr(err error) error {
	if err == nil {
		return nil
	}
	var ae *awareness.Error
	if errors.As(err, &ae) {
		return ae
	}
	if transient(err) || s.d.unavailable(err) {
		return awareness.Unavailable(err)
	}
	return awareness.Internal(err)
}

// causeOf is err, or the context's error when the context ended before it: a caller
// that went away, such as a subscription cut during its replay, closes the rows under
// the scan, whose "sql: Rows are closed" is not the store's failure.
func causeOf(ctx context.Context, err error) error {
	var ae *awareness.Error
	if err != nil && ctx.Err() != nil && !errors.As(err, &ae) {
		return context.Cause(ctx)
	}
	return err
}

// transient reports failures that are retryable whatever the database.
func transient(err error) bool {
	return errors.Is(err, errClosed) ||
		errors.Is(err, context.Canceled) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, sql.ErrConnDone)
}

// sqliteUnavailable reports SQLite result codes that mean "the database cannot serve
// this now" rather than "this statement is wrong".
func sqliteUnavailable(err error) bool {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code {
	case sqlite3.ErrBusy, sqlite3.ErrLocked, sqlite3.ErrNomem, sqlite3.ErrReadonly,
		sqlite3.ErrIoErr, sqlite3.ErrFull, sqlite3.ErrCantOpen, sqlite3.ErrProtocol:
		return true
	}
	return false
}
