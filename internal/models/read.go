package models

import (
	"context"
	"database/sql"

	"github.com/awareness/awareness/internal/awareness"
)

// The reconciliation read (REC-1) is the hot query of the service: every agent turn
// that got a notice asks for its delta. It is two statements in one read transaction,
// the head with the lowest retained sequence, then the page, both cached by the read
// pool (readStatements) and scanned without reflection (pageScanner). ReadStatus reads
// the whole session row in place of the head.
const (
	changesHeadSQL = "SELECT state_version, pruned_through, updated_at, generation, " + earliestSQL +
		"FROM sessions s WHERE agent_id = ? AND session_key = ?"
	statusHeadSQL = "SELECT " + sessionColumns + ", generation, " + earliestSQL +
		"FROM sessions s WHERE agent_id = ? AND session_key = ?"
	earliestSQL    = "(SELECT MIN(sequence) FROM events e WHERE e.agent_id = s.agent_id AND e.session_key = s.session_key) "
	changesPageSQL = "SELECT " + pageColumns + " FROM events WHERE agent_id = ? AND session_key = ? AND sequence > ? " +
		"ORDER BY sequence LIMIT ?"
)

// ReadChanges returns the head and up to limit events after `after`, in one read
// transaction (REC-1). limit <= 0 returns no events, with More telling whether any exist.
func (s *Store) ReadChanges(ctx context.Context, ref awareness.SessionRef, after int64, limit int) (awareness.Changes, error) {
	var ch awareness.Changes
	err := s.read(ctx, "ReadChanges", func(t *tx) (err error) {
		ch, _, err = readChanges(t, ref, after, limit, false)
		return err
	})
	if err != nil {
		return awareness.Changes{}, err
	}
	return ch, nil
}

// ReadStatus is ReadChanges and Session in one read transaction (REC-1): the session
// row is read in place of the head. sess is nil when the session has no row or was
// deleted.
func (s *Store) ReadStatus(ctx context.Context, ref awareness.SessionRef, after int64, limit int) (awareness.Changes, *awareness.Session, error) {
	var (
		ch   awareness.Changes
		sess *awareness.Session
	)
	// The reconciliation read keeps its transaction name (metrics, spans) whichever of
	// the two methods runs it.
	err := s.read(ctx, "ReadChanges", func(t *tx) (err error) {
		ch, sess, err = readChanges(t, ref, after, limit, true)
		return err
	})
	if err != nil {
		return awareness.Changes{}, nil, err
	}
	return ch, sess, nil
}

func readChanges(t *tx, ref awareness.SessionRef, after int64, limit int, withSession bool) (awareness.Changes, *awareness.Session, error) {
	ch, sess, found, err := readHead(t, ref, withSession)
	if err != nil || !found {
		return ch, sess, err
	}
	if err := readPage(t, ref, after, limit, &ch); err != nil {
		return awareness.Changes{}, nil, err
	}
	return ch, sess, nil
}

// readHead reads the head of a changes read (with the session row when withSession).
// found is false when the session has no head; ch.Events is then empty.
func readHead(t *tx, ref awareness.SessionRef, withSession bool) (ch awareness.Changes, sess *awareness.Session, found bool, err error) {
	ch = awareness.Changes{Head: awareness.Head{Session: ref, Generation: 1}}
	var (
		r        SessionRow
		gen      int64
		earliest sql.NullInt64
	)
	if withSession {
		found, err = t.scanRow(append(r.columns(), &gen, &earliest), statusHeadSQL, ref.AgentID, ref.Key)
	} else {
		found, err = t.scanRow([]any{&r.StateVersion, &r.PrunedThrough, &r.UpdatedAt, &gen, &earliest},
			changesHeadSQL, ref.AgentID, ref.Key)
	}
	if err != nil {
		return awareness.Changes{}, nil, false, err
	}
	if found {
		ch.Head.Version, ch.Head.PrunedThrough, ch.Head.UpdatedAt = r.StateVersion, r.PrunedThrough, fromNanos(r.UpdatedAt)
		ch.Head.Generation = gen
		if withSession && r.DeletedAt == nil {
			v, err := r.session()
			if err != nil {
				return awareness.Changes{}, nil, false, err
			}
			sess = &v
		}
	}
	ch.Earliest = ch.Head.PrunedThrough + 1
	if earliest.Valid {
		ch.Earliest = earliest.Int64
	}
	if !found {
		// No head, no log (events are only written with their head).
		ch.Events = []awareness.Event{}
		return ch, nil, false, nil
	}
	return ch, sess, true, nil
}

// readPage reads up to limit events after `after` into ch.Events and ch.More.
func readPage(t *tx, ref awareness.SessionRef, after int64, limit int, ch *awareness.Changes) error {
	page := max(limit, 0)
	rows, err := t.query(changesPageSQL, ref.AgentID, ref.Key, after, page+1)
	if err != nil {
		return err
	}
	defer rows.Close()
	ch.Events = make([]awareness.Event, 0, min(page, 256))
	scan := newPageScanner(ref)
	for rows.Next() {
		if len(ch.Events) == page {
			ch.More = true
			break
		}
		ev, err := scan.scan(rows)
		if err != nil {
			return err
		}
		ch.Events = append(ch.Events, ev)
	}
	return rows.Err()
}
