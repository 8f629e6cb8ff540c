// Retention: the pruning of events past their age or count, and the expiry of cursors.

package models

import (
	"context"
	"database/sql"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// pruneCut is the highest sequence of one session that a retention rule removes.
type pruneCut struct {
	ref      awareness.SessionRef
	sequence int64
}

// scanPruneCut scans a row of agent_id, session_key, sequence.
func scanPruneCut(rows *sql.Rows) (pruneCut, error) {
	var c pruneCut
	err := rows.Scan(&c.ref.AgentID, &c.ref.Key, &c.sequence)
	return c, err
}

// Prune applies retention (SIG-6) and cursor expiry (WAT-5) in one write transaction.
//
// A session's log is always pruned as a prefix: when a rule selects sequence s of a
// session, every lower sequence of that session goes too, and pruned_through is raised
// to s before the rows are deleted. So a session retains exactly the events after
// PrunedThrough up to Version, history gaps are exact (REC-2), and heads never move.
//
//   - MaxAge: events with occurred_at < now−MaxAge. occurred_at is the caller's time
//     clamped into [recorded−24h, recorded] (SIG-5), so the prefix rule removes, at
//     worst, events up to 24 hours younger than MaxAge that precede an old one.
//   - MaxRows, applied after the age rule: the oldest rows beyond MaxRows by
//     recorded_at, agent_id, session_key, sequence. That is sequence order within a
//     session while the service clock does not step back, and then exactly MaxRows
//     rows remain; if it did step back, the prefix rule may remove a few more.
//   - CursorTTL: cursors with updated_at < now−CursorTTL, unless any process's last
//     expiry, meta.last_expiry_at, is less than ExpireEvery ago.
func (s *Store) Prune(ctx context.Context, p awareness.RetentionPolicy, now time.Time) (awareness.PruneResult, error) {
	if err := checkNow("Prune", now); err != nil {
		return awareness.PruneResult{}, err
	}
	now = normTime(now)
	var res awareness.PruneResult
	err := s.writeTx(ctx, "Prune", func(t *tx, h *hint) error {
		res = awareness.PruneResult{}
		stamped := map[awareness.SessionRef]bool{}
		if p.MaxAge > 0 {
			cuts, err := scanAll(t, scanPruneCut, `
SELECT agent_id, session_key, MAX(sequence) AS sequence FROM events
WHERE occurred_at < ?
GROUP BY agent_id, session_key ORDER BY agent_id, session_key`, nanos(now.Add(-p.MaxAge)))
			if err != nil {
				return err
			}
			if err := prunePrefixes(t, cuts, stamped, &res); err != nil {
				return err
			}
		}
		if p.MaxRows > 0 {
			var total int64
			if _, err := t.scanRow([]any{&total}, "SELECT COUNT(*) FROM events"); err != nil {
				return err
			}
			if excess := total - int64(p.MaxRows); excess > 0 {
				cuts, err := scanAll(t, scanPruneCut, `
SELECT agent_id, session_key, MAX(sequence) AS sequence FROM (
    SELECT agent_id, session_key, sequence FROM events
    ORDER BY recorded_at, agent_id, session_key, sequence LIMIT ?
) oldest
GROUP BY agent_id, session_key ORDER BY agent_id, session_key`, excess)
				if err != nil {
					return err
				}
				if err := prunePrefixes(t, cuts, stamped, &res); err != nil {
					return err
				}
			}
		}
		var ackCutoff *int64
		if p.MaxAge > 0 {
			c := nanos(now.Add(-p.MaxAge))
			ackCutoff = &c
		}
		acks, err := pruneAckLog(t, ackCutoff, p.MaxRows)
		if err != nil {
			return err
		}
		res.AcksDeleted = acks
		if p.CursorTTL > 0 {
			var last sql.NullInt64
			if _, err := t.scanRow([]any{&last}, "SELECT last_expiry_at FROM meta WHERE id = 1"+s.d.sql.forUpdate); err != nil {
				return err
			}
			if last.Valid && p.ExpireEvery > 0 && now.Sub(fromNanos(last.Int64)) < p.ExpireEvery {
				res.ExpirySkipped = true
			} else {
				n, closed, err := s.deleteCursors(t, "cursors.updated_at < ?", nanos(now.Add(-p.CursorTTL)))
				if err != nil {
					return err
				}
				res.CursorsExpired, res.Closed = n, closed
				h.addClosed(closed...)
				// The notice holds of pairs left without a cursor go with the expiry
				// (RDL-1, RDL-2).
				if _, err := t.exec(pruneHoldsSQL); err != nil {
					return err
				}
				if _, err := t.exec("UPDATE meta SET last_expiry_at = ? WHERE id = 1", nanos(now)); err != nil {
					return err
				}
			}
		}
		_, err = t.exec("UPDATE meta SET last_prune_at = ? WHERE id = 1", nanos(now))
		return err
	})
	if err != nil {
		return awareness.PruneResult{}, err
	}
	return res, nil
}

// prunePrefixes stamps each session's watermark, then deletes its prefix.
func prunePrefixes(t *tx, cuts []pruneCut, stamped map[awareness.SessionRef]bool, res *awareness.PruneResult) error {
	for _, c := range cuts {
		n, err := t.exec("UPDATE sessions SET pruned_through = ? WHERE agent_id = ? AND session_key = ? AND pruned_through < ?",
			c.sequence, c.ref.AgentID, c.ref.Key, c.sequence)
		if err != nil {
			return err
		}
		if n > 0 && !stamped[c.ref] {
			stamped[c.ref] = true
			res.SessionsStamped++
		}
		n, err = t.exec("DELETE FROM events WHERE agent_id = ? AND session_key = ? AND sequence <= ?",
			c.ref.AgentID, c.ref.Key, c.sequence)
		if err != nil {
			return err
		}
		res.EventsDeleted += n
	}
	return nil
}
