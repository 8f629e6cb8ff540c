// Cursors: the rows (read, found, saved) and what watchers do with them: watch, unwatch,
// acknowledge, list pending notices, reset, and the startup sweep.

package models

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

func (s *Store) getCursor(t *tx, watcher string, target awareness.SessionRef) (*awareness.Cursor, error) {
	curs, err := scanAll(t, scanCursor, s.d.sql.cursorOfPair, watcher, target.AgentID, target.Key)
	if err != nil || len(curs) == 0 {
		return nil, err
	}
	return &curs[0], nil
}

// cursorQuery selects cursors matching where, ordered by orderBy (primary key order
// when empty), with lock appended (as a lock of the cursor rows only). It reads M and
// updated_at as derived from the target's head (cursorSelect); where and orderBy name
// columns of cursors (sessions, joined as h, shares only updated_at).
func cursorQuery(where, orderBy, lock string) string {
	if orderBy == "" {
		orderBy = "watcher_key, target_agent_id, target_key"
	}
	q := cursorSelect
	if where != "" {
		q += " WHERE " + where
	}
	if lock != "" {
		lock += " OF cursors" // the head is locked by the caller (or needs no lock)
	}
	return q + " ORDER BY " + orderBy + lock
}

// findCursors selects cursors matching where, ordered by orderBy (primary key order
// when empty). lock is appended to the query: pass the dialect's forUpdate when the
// cursors are read to be rewritten in the same transaction.
func (t *tx) findCursors(where string, args []any, orderBy, lock string) ([]awareness.Cursor, error) {
	return scanAll(t, scanCursor, cursorQuery(where, orderBy, lock), args...)
}

// saveCursor writes a cursor, creating it when absent.
func (t *tx) saveCursor(c awareness.Cursor) error {
	if !c.Valid() {
		return fmt.Errorf("cursor %s on %s/%s breaks L <= N <= M: %d, %d, %d",
			c.Watcher, c.Target.AgentID, c.Target.Key, c.L, c.N, c.M)
	}
	_, err := t.exec(cursorSaveSQL, cursorArgs(c)...)
	return err
}

// cursorArgs are a cursor's values in cursorColumns order.
func cursorArgs(c awareness.Cursor) []any {
	retired := 0
	if c.Retired {
		retired = 1
	}
	return []any{c.Watcher, c.Target.AgentID, c.Target.Key, c.L, c.N, c.M, nullNanos(c.OpenedAt), nanos(c.UpdatedAt),
		max(c.TargetGeneration, 1), max(c.WatcherGeneration, 1), retired, string(c.Kinds)}
}

// Watch registers watcher on target at the target's current version (WAT-3). The
// version of a deleted target's head counts: history never notifies. The store does not
// judge the pair (self-watch, bare watcher); the service does.
func (s *Store) Watch(ctx context.Context, watcher string, target awareness.SessionRef, kinds awareness.KindSelection, now time.Time) (awareness.Cursor, bool, error) {
	if err := checkNow("Watch", now); err != nil {
		return awareness.Cursor{}, false, err
	}
	now = normTime(now)
	var (
		c       awareness.Cursor
		created bool
	)
	err := s.write(ctx, "Watch", func(t *tx) error {
		version, _, err := s.head(t, target, true)
		if err != nil {
			return err
		}
		cur, err := s.getCursor(t, watcher, target)
		if err != nil {
			return err
		}
		c, created = awareness.WatchCursor(cur, watcher, target, version, now)
		if !created {
			if kinds == "" || kinds == c.Kinds {
				return nil
			}
			// A new selection (LIF-3); the row takes the derived M it was read with.
			c.Kinds = kinds
			return t.saveCursor(c)
		}
		if c, err = s.born(t, c); err != nil {
			return err
		}
		c.Kinds = kinds
		// Insert only if still absent: on PostgreSQL a concurrent Watch of a target
		// without a head row has nothing to lock, and must not clobber the winner.
		n, err := t.exec("INSERT INTO cursors ("+cursorColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "+
			"ON CONFLICT (watcher_key, target_agent_id, target_key) DO NOTHING", cursorArgs(c)...)
		if err != nil || n == 1 {
			return err
		}
		cur, err = s.getCursor(t, watcher, target)
		if err != nil {
			return err
		}
		if cur == nil {
			return errors.New("watch: cursor vanished after a conflicting insert")
		}
		c, created = *cur, false
		return nil
	})
	if err != nil {
		return awareness.Cursor{}, false, err
	}
	return c, created, nil
}

// Unwatch removes one cursor; ok is false when there was none. closed holds its
// pending notice, if it had one.
func (s *Store) Unwatch(ctx context.Context, watcher string, target awareness.SessionRef) (bool, []awareness.Notice, error) {
	var (
		n      int64
		closed []awareness.Notice
	)
	err := s.writeTx(ctx, "Unwatch", func(t *tx, h *hint) (err error) {
		n, closed, err = s.deleteCursors(t, cursorOfPairWhere, watcher, target.AgentID, target.Key)
		h.addClosed(closed...)
		return err
	})
	if err != nil {
		return false, nil, err
	}
	return n > 0, closed, nil
}

// deleteCursors deletes the cursors matching where and returns how many, and the
// pending notices among them as closed notices (DELETE … RETURNING: SQLite 3.35 and
// PostgreSQL both have it).
func (s *Store) deleteCursors(t *tx, where string, args ...any) (int64, []awareness.Notice, error) {
	if err := materialise(t, where, args...); err != nil {
		return 0, nil, err
	}
	curs, err := scanAll(t, scanCursor, "DELETE FROM cursors WHERE "+where+" RETURNING "+cursorColumns, args...)
	if err != nil {
		return 0, nil, err
	}
	return int64(len(curs)), s.closedNotices(curs), nil
}

// closedNotices returns the pending notices of curs as closed notices, in (watcher,
// target agent, target key) order.
func (s *Store) closedNotices(curs []awareness.Cursor) []awareness.Notice {
	var out []awareness.Notice
	for _, c := range curs {
		if n, ok := s.notices.Notice(c); ok {
			out = append(out, awareness.ClosedNotice(n))
		}
	}
	slices.SortFunc(out, func(a, b awareness.Notice) int {
		return cmp.Or(strings.Compare(a.Watcher, b.Watcher), strings.Compare(a.Target.AgentID, b.Target.AgentID),
			strings.Compare(a.Target.Key, b.Target.Key))
	})
	return out
}

// Ack acknowledges the watcher's pending notices as req says (NTC-3; see
// awareness.AckRequest): the exact form is awareness.AckNamed over the watcher's
// cursors on the named pairs, the others apply awareness.AckCursor to every pending
// pair selected. Targets are agent-qualified pairs. It returns the notices it closed
// and the follow-ups it opened, in (target agent, target key) order (and, for the
// exact form, what it did with each named notice), and hints their watcher to the
// other processes.
func (s *Store) Ack(ctx context.Context, req awareness.AckRequest) (awareness.AckResult, error) {
	if err := checkNow("Ack", req.Now); err != nil {
		return awareness.AckResult{}, err
	}
	if (req.Targets != nil && len(req.Targets) == 0) || (req.Exact != nil && len(req.Exact) == 0) {
		return awareness.AckResult{}, nil
	}
	now := normTime(req.Now)
	var refs []awareness.SessionRef
	switch {
	case req.Exact != nil:
		for _, e := range req.Exact {
			refs = append(refs, e.Target)
		}
	case req.Targets != nil:
		refs = slices.Clone(req.Targets)
	}
	// The pairs in (agent, key) order: with the one watcher, the cursors' primary-key
	// order, in which they are locked.
	slices.SortFunc(refs, refOrder)
	refs = slices.Compact(refs)
	var pairs [][]any
	for _, r := range refs {
		pairs = append(pairs, []any{r.AgentID, r.Key})
	}
	var res awareness.AckResult
	err := s.writeTx(ctx, "Ack", func(t *tx, h *hint) error {
		res = awareness.AckResult{}
		if err := s.lockAckHeads(t, req.Watcher, pairs); err != nil {
			return err
		}
		var changed []awareness.Cursor
		if req.Exact != nil {
			gen := int64(1)
			if w, err := awareness.ResolveWatcher(req.Watcher); err == nil {
				if gen, err = s.generation(t, w); err != nil {
					return err
				}
			}
			if err := awareness.CheckAckGeneration(req.Exact, gen); err != nil {
				return err
			}
			var curs []awareness.Cursor
			for c := range slices.Chunk(pairs, 500) {
				some, err := t.findCursors("watcher_key = ? AND (target_agent_id, target_key) IN ?",
					[]any{req.Watcher, c}, "", s.d.sql.forUpdate)
				if err != nil {
					return err
				}
				curs = append(curs, some...)
			}
			changed, res = s.notices.AckNamed(req.Watcher, curs, req.Exact, now)
		} else {
			where, args := "watcher_key = ? AND n > l", []any{req.Watcher}
			var curs []awareness.Cursor
			if pairs == nil {
				all, err := t.findCursors(where, args, "", s.d.sql.forUpdate)
				if err != nil {
					return err
				}
				curs = all
			}
			for c := range slices.Chunk(pairs, 500) {
				some, err := t.findCursors(where+" AND (target_agent_id, target_key) IN ?",
					append(args, c), "", s.d.sql.forUpdate)
				if err != nil {
					return err
				}
				curs = append(curs, some...)
			}
			slices.SortFunc(curs, func(a, b awareness.Cursor) int { return refOrder(a.Target, b.Target) })
			for _, c := range curs {
				next, changedOne, opened := awareness.AckCursor(c, now)
				if !changedOne {
					continue
				}
				changed = append(changed, next)
				if n, ok := s.notices.Notice(c); ok {
					res.Closed = append(res.Closed, awareness.ClosedNotice(n))
				}
				if n, ok := s.notices.Notice(next); ok && opened {
					res.Opened = append(res.Opened, n)
				}
			}
		}
		for _, c := range changed {
			if err := t.saveCursor(c); err != nil {
				return err
			}
		}
		// A retired cursor goes once nothing is pending (LIF-1).
		if _, err := t.exec("DELETE FROM cursors WHERE watcher_key = ? AND retired <> 0 AND n = l", req.Watcher); err != nil {
			return err
		}
		for _, n := range res.Closed {
			h.addClosed(n)
		}
		for _, n := range res.Opened {
			h.addWatcher(n.Watcher)
		}
		return insertAckRecords(t, awareness.AckRecords(req, res))
	})
	if err != nil {
		return awareness.AckResult{}, err
	}
	if len(res.Closed) > 0 {
		s.obs.NoticesAcknowledged(len(res.Closed))
	}
	return res, nil
}

// refOrder orders session references by (agent, key).
func refOrder(a, b awareness.SessionRef) int {
	return cmp.Or(strings.Compare(a.AgentID, b.AgentID), strings.Compare(a.Key, b.Key))
}

// lockAckHeads takes, on PostgreSQL, a share lock on the heads of the targets an Ack
// reads (the named pairs, or every target the watcher holds a cursor on), in (agent,
// key) order, before their cursors: a cursor's M is derived from its head, so an
// append on the target must not commit between the read of M and the write of the
// acknowledged cursor (it would not open the notice of a cursor it saw pending).
func (s *Store) lockAckHeads(t *tx, watcher string, pairs [][]any) error {
	if s.d.sql.forUpdate == "" {
		return nil
	}
	const q = "SELECT 1 FROM sessions h WHERE %s ORDER BY h.agent_id, h.session_key FOR SHARE"
	if pairs == nil {
		_, err := t.exec(fmt.Sprintf(q, "(h.agent_id, h.session_key) IN "+
			"(SELECT target_agent_id, target_key FROM cursors WHERE watcher_key = ?)"), watcher)
		return err
	}
	sorted := slices.Clone(pairs)
	slices.SortFunc(sorted, func(a, b []any) int {
		return cmp.Or(strings.Compare(a[0].(string), b[0].(string)), strings.Compare(a[1].(string), b[1].(string)))
	})
	for c := range slices.Chunk(sorted, 500) {
		if _, err := t.exec(fmt.Sprintf(q, "(h.agent_id, h.session_key) IN ?"), c); err != nil {
			return err
		}
	}
	return nil
}

// Cursors lists cursors, ordered by (watcher, target agent, target key).
func (s *Store) Cursors(ctx context.Context, q awareness.CursorQuery) ([]awareness.Cursor, error) {
	if s.closed.Load() {
		return nil, s.wrapErr(errClosed)
	}
	var (
		where []string
		args  []any
	)
	if q.Watcher != "" {
		where, args = append(where, "watcher_key = ?"), append(args, q.Watcher)
	}
	if q.TargetAgent != "" {
		where, args = append(where, "target_agent_id = ?"), append(args, q.TargetAgent)
	}
	if q.TargetKey != "" {
		where, args = append(where, "target_key = ?"), append(args, q.TargetKey)
	}
	curs, err := s.reader(ctx).findCursors(strings.Join(where, " AND "), args, "", "")
	return curs, s.wrapErr(err)
}

// Pending lists pending notices (N > L) of one watcher, or of every watcher when
// watcher is "", ordered by (opened at, watcher, target agent, target key).
func (s *Store) Pending(ctx context.Context, watcher string) ([]awareness.Notice, error) {
	if s.closed.Load() {
		return nil, s.wrapErr(errClosed)
	}
	where, args := "n > l", []any(nil)
	if watcher != "" {
		where, args = "watcher_key = ? AND n > l", []any{watcher}
	}
	curs, err := s.reader(ctx).findCursors(where, args, "opened_at, watcher_key, target_agent_id, target_key", "")
	if err != nil {
		return nil, s.wrapErr(err)
	}
	out := make([]awareness.Notice, 0, len(curs))
	for _, c := range curs {
		if n, ok := s.notices.Notice(c); ok {
			out = append(out, n)
		}
	}
	return out, nil
}

// ResetWatcher deletes every cursor the watcher holds (WAT-5); n is how many, closed
// their pending notices.
func (s *Store) ResetWatcher(ctx context.Context, watcher string) (int64, []awareness.Notice, error) {
	var (
		n      int64
		closed []awareness.Notice
	)
	err := s.writeTx(ctx, "ResetWatcher", func(t *tx, h *hint) (err error) {
		n, closed, err = s.deleteCursors(t, "watcher_key = ?", watcher)
		h.addClosed(closed...)
		return err
	})
	if err != nil {
		return 0, nil, err
	}
	return n, closed, nil
}

// Sweep opens the notice of every cursor with M > N == L (awareness.SweepCursor, NTC-5),
// which no committed write leaves behind, and calls opened with each page's notices
// after its commit, and hints their watchers to the other processes. On SQLite it reads
// such cursors through the partial index cursors_unopened (migration 00005), which
// holds none of the table's other rows; PostgreSQL dropped that index so that an
// append opens its notices in place (migration 00009), and finding none there is one
// scan of the table. It goes in pages of awareness.SweepPage in primary-key order,
// each in a write transaction of its own that locks that page's rows (FOR UPDATE on
// PostgreSQL) and its heads (FOR SHARE, as Ack does: M is derived from them). It
// reads and writes no pending cursor: a pending notice keeps its N, text and opening
// time, so its ID and an exact acknowledgement naming it outlive every restart.
//
// The index holds the rows whose stored m is above n = l. A synced row whose derived M
// (the head's material) is above its m is what an append opens at once
// (openNoticesSQL), so none can be left behind by a committed write either, and the
// sweep does not look for one: that would read every cursor.
func (s *Store) Sweep(ctx context.Context, now time.Time, opened func([]awareness.Notice)) (int, error) {
	if err := checkNow("Sweep", now); err != nil {
		return 0, err
	}
	now = normTime(now)
	var (
		total int
		after []any // the primary key of the last row of the previous page
	)
	for {
		var (
			page []awareness.Notice
			last []any
			rows int
		)
		err := s.writeTx(ctx, "Sweep", func(t *tx, h *hint) error {
			page, last, rows = nil, nil, 0
			// The page's keys first, without a lock (the index alone), then its heads
			// (the lock order: heads before cursors), then its rows, locked and
			// checked again.
			q, args := sweepPageSQL, []any(nil)
			if after != nil {
				q, args = sweepPageAfterSQL, after
			}
			keys, err := scanAll(t, scanCursorKey, q+" LIMIT "+strconv.Itoa(awareness.SweepPage), args...)
			if err != nil || len(keys) == 0 {
				return err
			}
			rows = len(keys)
			last = keys[len(keys)-1]
			if err := s.lockSweepHeads(t, keys); err != nil {
				return err
			}
			curs, err := t.findCursors(sweepWhere+" AND (cursors.watcher_key, cursors.target_agent_id, cursors.target_key) IN ?",
				[]any{keys}, "", s.d.sql.forUpdate)
			if err != nil {
				return err
			}
			for _, c := range curs {
				next, ok := awareness.SweepCursor(c, now)
				if !ok {
					continue
				}
				if err := t.saveCursor(next); err != nil {
					return err
				}
				if n, ok := s.notices.Notice(next); ok {
					page = append(page, n)
					h.addWatcher(n.Watcher)
				}
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		if len(page) > 0 {
			total += len(page)
			opened(page)
		}
		if rows < awareness.SweepPage {
			return total, nil
		}
		after = last
	}
}

// The statements of Sweep. sweepWhere is the predicate of the partial index
// cursors_unopened (SQLite), written as it is there so that SQLite uses the index;
// sweepPageSQL reads a page of the keys it holds in its order (the cursors' primary
// key, watcher first), sweepPageAfterSQL the page after a key.
const (
	sweepWhere        = "n = l AND m > n"
	sweepKeys         = "SELECT watcher_key, target_agent_id, target_key FROM cursors WHERE " + sweepWhere
	sweepOrder        = " ORDER BY watcher_key, target_agent_id, target_key"
	sweepPageSQL      = sweepKeys + sweepOrder
	sweepPageAfterSQL = sweepKeys + " AND (watcher_key, target_agent_id, target_key) > (?, ?, ?)" + sweepOrder
)

// scanCursorKey scans a cursor's primary key as the arguments that name it.
func scanCursorKey(rows *sql.Rows) ([]any, error) {
	var w, a, k string
	err := rows.Scan(&w, &a, &k)
	return []any{w, a, k}, err
}

// lockSweepHeads share-locks, on PostgreSQL, the heads of a sweep page's targets in
// (agent, key) order, as lockAckHeads does for an Ack.
func (s *Store) lockSweepHeads(t *tx, keys [][]any) error {
	if s.d.sql.forUpdate == "" {
		return nil
	}
	refs := make([]awareness.SessionRef, len(keys))
	for i, k := range keys {
		refs[i] = awareness.SessionRef{AgentID: k[1].(string), Key: k[2].(string)}
	}
	slices.SortFunc(refs, refOrder)
	var pairs [][]any
	for _, r := range slices.Compact(refs) {
		pairs = append(pairs, []any{r.AgentID, r.Key})
	}
	return s.lockAckHeads(t, "", pairs)
}
