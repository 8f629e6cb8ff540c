// Sessions as rows: one read, the list, and the deletion of a session.

package models

import (
	"context"
	"database/sql"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/awareness/awareness/internal/awareness"
)

// Session returns one session row; ok is false when there is none or it was deleted.
func (s *Store) Session(ctx context.Context, ref awareness.SessionRef) (awareness.Session, bool, error) {
	if s.closed.Load() {
		return awareness.Session{}, false, s.wrapErr(errClosed)
	}
	sess, err := scanAll(s.reader(ctx), scanSession, "SELECT "+sessionColumns+" FROM sessions "+
		"WHERE agent_id = ? AND session_key = ? AND deleted_at IS NULL", ref.AgentID, ref.Key)
	if err != nil || len(sess) == 0 {
		return awareness.Session{}, false, s.wrapErr(err)
	}
	return sess[0], true, nil
}

// ListSessions returns up to q.Limit sessions, all when q.Limit <= 0, strictly after
// q.After in agentId, key order, excluding deleted ones. UpdatedSince is inclusive.
// KeyPrefix is compared byte-wise with canonical keys, as a key range, so LIKE
// wildcards in it have no special meaning.
func (s *Store) ListSessions(ctx context.Context, q awareness.SessionQuery) ([]awareness.Session, error) {
	if s.closed.Load() {
		return nil, s.wrapErr(errClosed)
	}
	where := []string{"deleted_at IS NULL"}
	var args []any
	if q.AgentID != "" {
		where = append(where, "agent_id = ?")
		args = append(args, q.AgentID)
	}
	if len(q.Kinds) > 0 {
		kinds := make([]string, len(q.Kinds))
		for i, k := range q.Kinds {
			kinds[i] = string(k)
		}
		where = append(where, "kind IN ?")
		args = append(args, kinds)
	}
	if !q.UpdatedSince.IsZero() {
		where = append(where, "updated_at >= ?")
		args = append(args, nanos(q.UpdatedSince))
	}
	if q.KeyPrefix != "" {
		where = append(where, "session_key >= ?")
		args = append(args, q.KeyPrefix)
		if end, ok := prefixEnd(q.KeyPrefix); ok {
			where = append(where, "session_key < ?")
			args = append(args, end)
		}
	}
	if q.After != nil {
		where = append(where, "(agent_id > ? OR (agent_id = ? AND session_key > ?))")
		args = append(args, q.After.AgentID, q.After.AgentID, q.After.Key)
	}
	sqlText := "SELECT " + sessionColumns + " FROM sessions WHERE " + strings.Join(where, " AND ") +
		" ORDER BY agent_id, session_key"
	if q.Limit > 0 {
		sqlText += " LIMIT ?"
		args = append(args, q.Limit)
	}
	out, err := scanAll(s.reader(ctx), scanSession, sqlText, args...)
	if err != nil {
		return nil, s.wrapErr(err)
	}
	return out, nil
}

// prefixEnd returns the smallest string greater than every string with the given
// prefix in code point order, which is byte order for UTF-8: the prefix with its last
// rune incremented. It stays valid UTF-8, so PostgreSQL accepts it as a parameter. ok
// is false when no such string exists.
func prefixEnd(prefix string) (string, bool) {
	rs := []rune(strings.ToValidUTF8(prefix, string(utf8.RuneError)))
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i] + 1
		if r >= 0xD800 && r <= 0xDFFF {
			r = 0xE000
		}
		if r <= utf8.MaxRune {
			rs[i] = r
			return string(rs[:i+1]), true
		}
	}
	return "", false
}

// DeleteSession records a deleted event on a live session (LIF-1) through appendOne,
// whose deleted branch notifies the session's watchers, retires their cursors and
// deletes the rest with deleteSessionRows, in one transaction. A session without a
// row, or deleted already, records nothing and returns a nil op: the cursors in both
// directions, its upstream link and acknowledgement records are deleted even then,
// since a watcher that never logged anything has no row but may hold cursors.
func (s *Store) DeleteSession(ctx context.Context, ref awareness.SessionRef, now time.Time) (*awareness.AppendOp, []awareness.Notice, error) {
	if err := checkNow("DeleteSession", now); err != nil {
		return nil, nil, err
	}
	op, err := awareness.LifecycleOp(ref, awareness.Deleted, normTime(now))
	if err != nil {
		return nil, nil, err
	}
	var (
		live   bool
		closed []awareness.Notice
	)
	err = s.writeTx(ctx, "DeleteSession", func(t *tx, h *hint) error {
		live, closed = false, nil
		op.Event, op.Recorded, op.Version, op.Opened, op.Closed = awareness.Event{}, false, 0, nil, nil
		var deleted sql.NullInt64
		found, err := t.scanRow([]any{&deleted},
			"SELECT deleted_at FROM sessions WHERE agent_id = ? AND session_key = ?"+s.d.sql.forUpdate, ref.AgentID, ref.Key)
		if err != nil {
			return err
		}
		if found && !deleted.Valid {
			if err := s.appendOne(t, op); err != nil {
				return err
			}
			live = true
			addAppendHint(h, op)
			return nil
		}
		where, args := "target_agent_id = ? AND target_key = ?", []any{ref.AgentID, ref.Key}
		if ref.Qualified() {
			where, args = "(target_agent_id = ? AND target_key = ?) OR watcher_key = ?", append(args, ref.Key)
		}
		_, gone, err := s.deleteCursors(t, where, args...)
		if err != nil {
			return err
		}
		closed = gone
		h.addClosed(closed...)
		return s.dropSessionLinks(t, ref)
	})
	if err != nil {
		return nil, nil, err
	}
	if !live {
		return nil, closed, nil
	}
	return op, nil, nil
}
