package models

import (
	"context"
	"database/sql"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

var _ awareness.HoldStore = (*Store)(nil)

// Notice holds (RDL-1, RDL-2) from migration 00008: one row per watcher and target,
// read and written by the service's pure transitions awareness.DrainHold, Redeliver
// and WakeHold inside UpdateHolds' transaction. A watcher's holds are a range of the
// primary key; the due ones are read through the partial index holds_due.
const (
	holdColumns = "watcher_key, target_agent_id, target_key, max_redeliver, n, drained_at, turns, redeliveries, " +
		"deliveries, snoozed_until, dismissed, due_at"
	holdSaveSQL = "INSERT INTO notice_holds (" + holdColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)\n" +
		"ON CONFLICT (watcher_key, target_agent_id, target_key) DO UPDATE SET max_redeliver = excluded.max_redeliver, " +
		"n = excluded.n, drained_at = excluded.drained_at, turns = excluded.turns, redeliveries = excluded.redeliveries, " +
		"deliveries = excluded.deliveries, snoozed_until = excluded.snoozed_until, dismissed = excluded.dismissed, " +
		"due_at = excluded.due_at"
)

// pruneHoldsSQL deletes the holds of pairs that have no cursor.
const pruneHoldsSQL = "DELETE FROM notice_holds WHERE NOT EXISTS (SELECT 1 FROM cursors c WHERE c.watcher_key = notice_holds.watcher_key " +
	"AND c.target_agent_id = notice_holds.target_agent_id AND c.target_key = notice_holds.target_key)"

// heldOfPendingSQL reads the holds that describe their pair's pending notice.
const heldOfPendingSQL = "SELECT ho.watcher_key, ho.target_agent_id, ho.target_key, ho.max_redeliver, ho.n, ho.drained_at, ho.turns, " +
	"ho.redeliveries, ho.deliveries, ho.snoozed_until, ho.dismissed, ho.due_at FROM notice_holds ho JOIN cursors c ON " +
	"c.watcher_key = ho.watcher_key AND c.target_agent_id = ho.target_agent_id AND c.target_key = ho.target_key " +
	"AND c.n = ho.n AND c.n > c.l WHERE ho.n > 0"

func scanHold(rows *sql.Rows) (awareness.NoticeHold, error) {
	var (
		h                     awareness.NoticeHold
		drained, snoozed, due sql.NullInt64
	)
	err := rows.Scan(&h.Watcher, &h.Target.AgentID, &h.Target.Key, &h.MaxRedeliver, &h.N, &drained, &h.Turns,
		&h.Redeliveries, &h.Deliveries, &snoozed, &h.Dismissed, &due)
	h.DrainedAt, h.SnoozedUntil, h.DueAt = nullTime(drained), nullTime(snoozed), nullTime(due)
	return h, err
}

func nullTime(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromNanos(n.Int64)
}

// UpdateHolds reads the holds q selects and their cursors in one write transaction,
// calls fn and writes the holds it returns (RDL-1, RDL-2).
func (s *Store) UpdateHolds(ctx context.Context, q awareness.HoldQuery, fn func([]awareness.HoldView) ([]awareness.NoticeHold, error)) error {
	if err := awareness.RefuseCheckOnly(ctx); err != nil {
		return err
	}
	if q.Watcher == "" {
		// The hold poll asks every second: without a due hold, the usual answer from
		// one read of the index holds_due, it opens no write transaction.
		if s.closed.Load() {
			return s.wrapErr(errClosed)
		}
		due, err := s.reader(ctx).scanRow([]any{new(int)}, "SELECT 1 FROM notice_holds WHERE due_at IS NOT NULL AND due_at <= ? LIMIT 1", nanos(q.DueBy))
		if err != nil {
			return s.wrapErr(err)
		}
		if !due {
			if write, err := fn(nil); err != nil || len(write) == 0 {
				return err
			}
		}
	}
	return s.writeTx(ctx, "UpdateHolds", func(t *tx, hn *hint) error {
		var (
			hs  []awareness.NoticeHold
			err error
		)
		if q.Watcher != "" {
			hs, err = scanAll(t, scanHold, "SELECT "+holdColumns+" FROM notice_holds WHERE watcher_key = ? "+
				"ORDER BY watcher_key, target_agent_id, target_key"+s.d.sql.forUpdate, q.Watcher)
		} else {
			hs, err = scanAll(t, scanHold, "SELECT "+holdColumns+" FROM notice_holds WHERE due_at IS NOT NULL AND due_at <= ? "+
				"ORDER BY watcher_key, target_agent_id, target_key LIMIT 500"+s.d.sql.forUpdate, nanos(q.DueBy))
		}
		if err != nil {
			return err
		}
		byPair := map[holdPair]int{}
		vs := make([]awareness.HoldView, 0, len(hs))
		for _, h := range hs {
			byPair[holdPair{h.Watcher, h.Target}] = len(vs)
			vs = append(vs, awareness.HoldView{Hold: h})
		}
		var curs []awareness.Cursor
		if q.Watcher != "" {
			curs, err = t.findCursors("watcher_key = ?", []any{q.Watcher}, "", "")
			if err != nil {
				return err
			}
		} else {
			for _, h := range hs {
				cs, err := t.findCursors(cursorOfPairWhere, []any{h.Watcher, h.Target.AgentID, h.Target.Key}, "", "")
				if err != nil {
					return err
				}
				curs = append(curs, cs...)
			}
		}
		for _, c := range curs {
			i, ok := byPair[holdPair{c.Watcher, c.Target}]
			if !ok {
				if !c.Pending() {
					continue
				}
				i = len(vs)
				vs = append(vs, awareness.HoldView{Hold: awareness.NoticeHold{Watcher: c.Watcher, Target: c.Target,
					MaxRedeliver: awareness.DefaultMaxRedeliver}})
			}
			vs[i].Cursor = &c
		}
		write, err := fn(vs)
		if err != nil {
			return err
		}
		for _, h := range write {
			// A notice handed out again by a redelivery or a snooze's end wakes the
			// other processes' listeners for its watcher, as an opened notice does.
			if i, ok := byPair[holdPair{h.Watcher, h.Target}]; !ok || h.Deliveries > vs[i].Hold.Deliveries {
				if h.Deliveries > 0 {
					hn.addWatcher(h.Watcher)
				}
			}
			if _, err := t.exec(holdSaveSQL, h.Watcher, h.Target.AgentID, h.Target.Key, h.MaxRedeliver, h.N,
				nullNanos(h.DrainedAt), h.Turns, h.Redeliveries, h.Deliveries, nullNanos(h.SnoozedUntil), h.Dismissed,
				nullNanos(h.DueAt)); err != nil {
				return err
			}
		}
		return nil
	})
}

type holdPair struct {
	watcher string
	target  awareness.SessionRef
}

// Holds reads the holds of a watcher, or of every watcher for "", that describe
// their pair's pending notice.
func (s *Store) Holds(ctx context.Context, watcher string) ([]awareness.NoticeHold, error) {
	if s.closed.Load() {
		return nil, s.wrapErr(errClosed)
	}
	q, args := heldOfPendingSQL, []any(nil)
	if watcher != "" {
		q, args = q+" AND ho.watcher_key = ?", []any{watcher}
	}
	hs, err := scanAll(s.reader(ctx), scanHold, q+" ORDER BY ho.watcher_key, ho.target_agent_id, ho.target_key", args...)
	return hs, s.wrapErr(err)
}
