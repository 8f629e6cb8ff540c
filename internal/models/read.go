package models

import (
	"context"
	"database/sql"

	"github.com/awareness/awareness/internal/awareness"
)

// The reconciliation read (REC-1) is the hot query of the service: every agent turn
// that got a notice asks for its delta. It runs on database/sql with plain scans, two
// statements in one read transaction: the head with the lowest retained sequence, then
// the page. GORM's reflection-driven Scan of a 200-event page cost more than the
// query itself. ReadStatus reads the whole session row in place of the head.
const (
	changesHeadSQL = "SELECT state_version, pruned_through, updated_at, " + earliestSQL +
		"FROM sessions s WHERE agent_id = ? AND session_key = ?"
	statusHeadSQL = "SELECT " + sessionColumns + ", " + earliestSQL +
		"FROM sessions s WHERE agent_id = ? AND session_key = ?"
	earliestSQL    = "(SELECT MIN(sequence) FROM events e WHERE e.agent_id = s.agent_id AND e.session_key = s.session_key) "
	changesPageSQL = "SELECT " + eventColumns + " FROM events WHERE agent_id = ? AND session_key = ? AND sequence > ? " +
		"ORDER BY sequence LIMIT ?"
)

// ReadChanges returns the head and up to limit events after `after`, in one read
// transaction (REC-1). limit <= 0 returns no events, with More telling whether any exist.
func (s *Store) ReadChanges(ctx context.Context, ref awareness.SessionRef, after int64, limit int) (_ awareness.Changes, err error) {
	if s.closed.Load() {
		return awareness.Changes{}, s.wrapErr(errClosed)
	}
	ctx, end := s.obs.Transaction(ctx, "ReadChanges")
	defer func() { end(err) }()
	ch, _, err := s.readChanges(ctx, ref, after, limit, false)
	if err != nil {
		return awareness.Changes{}, s.wrapErr(err)
	}
	return ch, nil
}

// ReadStatus is ReadChanges and Session in one read transaction (REC-1): the session
// row is read in place of the head. sess is nil when the session has no row or was
// deleted.
func (s *Store) ReadStatus(ctx context.Context, ref awareness.SessionRef, after int64, limit int) (_ awareness.Changes, _ *awareness.Session, err error) {
	if s.closed.Load() {
		return awareness.Changes{}, nil, s.wrapErr(errClosed)
	}
	// The reconciliation read keeps its transaction name (metrics, spans) whichever of
	// the two methods runs it.
	ctx, end := s.obs.Transaction(ctx, "ReadChanges")
	defer func() { end(err) }()
	ch, sess, err := s.readChanges(ctx, ref, after, limit, true)
	if err != nil {
		return awareness.Changes{}, nil, s.wrapErr(err)
	}
	return ch, sess, nil
}

func (s *Store) readChanges(ctx context.Context, ref awareness.SessionRef, after int64, limit int, withSession bool) (awareness.Changes, *awareness.Session, error) {
	tx, err := s.rsql.BeginTx(ctx, s.d.readTx)
	if err != nil {
		return awareness.Changes{}, nil, err
	}
	defer tx.Rollback() // read-only: nothing to commit

	ch := awareness.Changes{Head: awareness.Head{Session: ref}}
	var (
		r        SessionRow
		earliest sql.NullInt64
		sess     *awareness.Session
	)
	if withSession {
		err = tx.QueryRowContext(ctx, s.stmts.rebind(statusHeadSQL), ref.AgentID, ref.Key).Scan(
			&r.AgentID, &r.SessionKey, &r.Kind, &r.StateVersion, &r.PrunedThrough, &r.CompactionCount, &r.Registered,
			&r.SessionID, &r.ParentSessionKey, &r.ChatType, &r.Provider, &r.DisplayName, &r.InputTokens, &r.OutputTokens,
			&r.TotalTokens, &r.ContextTokens, &r.MemoryFlushAt, &r.MemoryFlushCompactionCount, &r.ExtraJSON,
			&r.CreatedAt, &r.UpdatedAt, &r.DeletedAt, &earliest)
	} else {
		err = tx.QueryRowContext(ctx, s.stmts.rebind(changesHeadSQL), ref.AgentID, ref.Key).
			Scan(&r.StateVersion, &r.PrunedThrough, &r.UpdatedAt, &earliest)
	}
	switch {
	case err == sql.ErrNoRows:
	case err != nil:
		return awareness.Changes{}, nil, err
	default:
		ch.Head.Version, ch.Head.PrunedThrough, ch.Head.UpdatedAt = r.StateVersion, r.PrunedThrough, fromNanos(r.UpdatedAt)
		if withSession && r.DeletedAt == nil {
			v, err := r.session()
			if err != nil {
				return awareness.Changes{}, nil, err
			}
			sess = &v
		}
	}
	ch.Earliest = ch.Head.PrunedThrough + 1
	if earliest.Valid {
		ch.Earliest = earliest.Int64
	}
	if err == sql.ErrNoRows {
		// No head, no log (events are only written with their head).
		ch.Events = []awareness.Event{}
		return ch, nil, nil
	}

	page := max(limit, 0)
	rows, err := tx.QueryContext(ctx, s.stmts.rebind(changesPageSQL), ref.AgentID, ref.Key, after, page+1)
	if err != nil {
		return awareness.Changes{}, nil, err
	}
	defer rows.Close()
	ch.Events = make([]awareness.Event, 0, min(page, 256))
	for rows.Next() {
		if len(ch.Events) == page {
			ch.More = true
			break
		}
		var r EventRow
		if err := rows.Scan(&r.AgentID, &r.SessionKey, &r.Sequence, &r.Kind, &r.ActorType, &r.ActorID, &r.Summary,
			&r.OccurredAt, &r.RunID, &r.PayloadJSON, &r.DedupeKey, &r.RecordedAt); err != nil {
			return awareness.Changes{}, nil, err
		}
		ev, err := r.event()
		if err != nil {
			return awareness.Changes{}, nil, err
		}
		ch.Events = append(ch.Events, ev)
	}
	if err := rows.Err(); err != nil {
		return awareness.Changes{}, nil, err
	}
	return ch, sess, nil
}
