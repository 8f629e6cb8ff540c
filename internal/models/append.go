// The append path of the store: one event or a unit of events in one transaction, the
// session's head and derived material state, the cursors an event seeds or moves, the
// notices it opens and the hints it sends.

package models

import (
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

// The append path's statements, cached by the write pool (dialectSQL.writeStatements).
// Cursor reads are built by cursorQuery.
const (
	headSelectSQL = "SELECT state_version FROM sessions WHERE agent_id = ? AND session_key = ?"
	headLockSQL   = `
INSERT INTO sessions (agent_id, session_key, kind, state_version, compaction_count, created_at, updated_at)
VALUES (?, ?, ?, 0, 0, ?, ?)
ON CONFLICT (agent_id, session_key) DO UPDATE SET state_version = sessions.state_version
RETURNING state_version`
	// headBumpSQL bumps a session's head and returns its new state version;
	// headBumpSetSQL is the same without the RETURNING clause (SQLite's first
	// append to a session, see appendOne). headBumpUpdate is the bump of an existing head, shared by them and
	// headBumpMaterialSQL.
	headBumpUpdate = `
ON CONFLICT (agent_id, session_key) DO UPDATE SET
    kind = excluded.kind,
    state_version = sessions.state_version + 1,
    compaction_count = sessions.compaction_count + excluded.compaction_count,
    created_at = CASE WHEN sessions.deleted_at IS NULL THEN sessions.created_at ELSE excluded.created_at END,
    updated_at = excluded.updated_at,
    deleted_at = NULL`
	headBumpSetSQL = `
INSERT INTO sessions (agent_id, session_key, kind, state_version, compaction_count, created_at, updated_at)
VALUES (?, ?, ?, 1, ?, ?, ?)` + headBumpUpdate
	headBumpSQL = headBumpSetSQL + "\nRETURNING state_version"
	// headBumpMaterialSQL is headBumpSetSQL for a notifying event: the same bump,
	// which also records the event on the head, its sequence being the new state
	// version. SET reads the row as it was: when the actor is the head's
	// material_actor, the latest sequence by another actor stays; otherwise it
	// becomes the previous latest. SQLite runs it for the first append to a session;
	// PostgreSQL inside eventBumpMaterialInsertSQL. Arguments: headBumpSetSQL's, then
	// the event's actor ("" for none) and the append's time.
	headBumpMaterialSQL = `
INSERT INTO sessions (agent_id, session_key, kind, state_version, compaction_count, created_at, updated_at,
    material_actor, material_seq, material_at)
VALUES (?, ?, ?, 1, ?, ?, ?, ?, 1, ?)` + headBumpUpdate + `,
    material_other_seq = CASE WHEN sessions.material_actor = excluded.material_actor THEN sessions.material_other_seq ELSE sessions.material_seq END,
    material_other_at = CASE WHEN sessions.material_actor = excluded.material_actor THEN sessions.material_other_at ELSE sessions.material_at END,
    material_actor = excluded.material_actor,
    material_seq = sessions.state_version + 1,
    material_at = excluded.material_at`
	// headUpdateSQL is the bump of an existing head as a plain UPDATE returning the
	// new state version (SQLite, see appendOne): the head read folded into the bump.
	// Arguments: the kind, the compactions, the append's time twice, the session's
	// agent and key. headUpdateMaterialSQL is the same for a notifying event, which
	// it also records on the head as headBumpMaterialSQL does; its arguments add the
	// event's actor ("" for none) three times and the time after the compactions.
	headUpdateSet = `UPDATE sessions SET
    kind = ?,
    state_version = state_version + 1,
    compaction_count = compaction_count + ?,
    created_at = CASE WHEN deleted_at IS NULL THEN created_at ELSE ? END,
    updated_at = ?,
    deleted_at = NULL`
	headUpdateWhere       = "\nWHERE agent_id = ? AND session_key = ?\nRETURNING state_version"
	headUpdateSQL         = headUpdateSet + headUpdateWhere
	headUpdateMaterialSQL = headUpdateSet + `,
    material_other_seq = CASE WHEN material_actor = ? THEN material_other_seq ELSE material_seq END,
    material_other_at = CASE WHEN material_actor = ? THEN material_other_at ELSE material_at END,
    material_actor = ?,
    material_seq = state_version + 1,
    material_at = ?` + headUpdateWhere
	eventInsertSQL = "INSERT INTO events (" + eventColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	// eventBumpInsertSQL is headBumpSQL and eventInsertSQL in one round trip
	// (dialectSQL.bumpInsert); eventBumpMaterialInsertSQL is the same with
	// headBumpMaterialSQL (dialectSQL.bumpMaterialInsert). Both return the new
	// sequence, and then the columns of returnMore.
	eventBumpInsertSQL         = "WITH head AS (" + headBumpSQL + ")\n" + eventFromHeadSQL
	eventBumpMaterialInsertSQL = "WITH head AS (" + headBumpMaterialSQL + "\nRETURNING state_version)\n" + eventFromHeadSQL
	eventFromHeadSQL           = "INSERT INTO events (" + eventColumns + ") " +
		"SELECT ?, ?, state_version, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM head RETURNING sequence"
	dedupeSelectSQL = "SELECT " + eventColumns + " FROM events WHERE agent_id = ? AND session_key = ? AND dedupe_key = ?"
	cursorSaveSQL   = `
INSERT INTO cursors (` + cursorColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (watcher_key, target_agent_id, target_key) DO UPDATE SET
    l = excluded.l, n = excluded.n, m = excluded.m,
    opened_at = excluded.opened_at, updated_at = excluded.updated_at,
    target_gen = excluded.target_gen, retired = excluded.retired, kinds = excluded.kinds`
	cursorOfPairWhere = "watcher_key = ? AND target_agent_id = ? AND target_key = ?"
	// selectingWhere finds the live cursors of a target with a selection of their own
	// (LIF-3): dialectSQL.selecting.
	selectingWhere = "target_agent_id = ? AND target_key = ? AND kinds <> '' AND retired = 0"
)

// Append applies ops in one write transaction, in order (SIG-3, SIG-4, NTC-2, WAT-2,
// WAT-4). It writes what each op says: a recorded op adds its Compactions to the
// session's compaction count (REG-3), its session row takes op.New.SessionKind, and its
// watchers are op.New.Watchers as given. A batch awareness.CheckAppendOps refuses
// fails as a whole with INVALID_ARGUMENT. On any error nothing is committed and every
// op's result fields are zeroed, so no notice of a rolled-back append can be
// published. On PostgreSQL the transaction sends one hint naming the watchers of the
// notices it opened and the events it recorded (notify.go).
func (s *Store) Append(ctx context.Context, ops []*awareness.AppendOp) error {
	reset := func() {
		for _, op := range ops {
			if op != nil {
				op.Event, op.Recorded, op.Version, op.Opened, op.Closed = awareness.Event{}, false, 0, nil, nil
			}
		}
	}
	reset()
	if len(ops) == 0 {
		return nil
	}
	if err := awareness.CheckAppendOps(ops); err != nil {
		return err
	}
	err := s.writeTx(ctx, "Append", func(t *tx, h *hint) error {
		reset() // a retried transaction starts over
		if err := s.lockBatch(t, ops); err != nil {
			return err
		}
		for _, op := range ops {
			if err := s.appendOne(t, op); err != nil {
				return err
			}
			if s.d.notify {
				addAppendHint(h, op)
			}
		}
		return nil
	})
	if err != nil {
		reset()
		return err
	}
	return nil
}

// addAppendHint adds what an append op recorded, opened and closed to h.
func addAppendHint(h *hint, op *awareness.AppendOp) {
	if op.Recorded {
		h.addEvent(op.Event.Session, op.Event.Sequence)
	}
	for _, n := range op.Opened {
		h.addWatcher(n.Watcher)
	}
	h.addClosed(op.Closed...)
}

// lockBatch takes, on PostgreSQL, the locks of a batch that touches more than one
// session up front and in a global order: every head in (agent, key) order, then every
// cursor on those sessions in primary-key order. Without it two batches (or a batch and
// an Ack) that meet the same rows in opposite orders could deadlock. A single-session
// batch needs none: its first statement locks the head, which every transaction that
// could wait on the target's cursors while holding one takes first (openNoticesSQL).
// A batch of log-only kinds locks no cursor, since it
// touches none. The statements are dialectSQL.lockHeads and lockTargetsCursors.
func (s *Store) lockBatch(t *tx, ops []*awareness.AppendOp) error {
	if s.d.sql.lockHeads == "" {
		return nil
	}
	kinds := make(map[awareness.SessionRef]awareness.SessionKind, len(ops))
	var refs []awareness.SessionRef
	cursors := false
	for _, op := range ops {
		if r := op.New.Event.Session; kinds[r] == "" {
			kinds[r] = op.New.SessionKind
			refs = append(refs, r)
		}
		cursors = cursors || op.New.Event.Kind.TouchesCursors()
	}
	if len(refs) < 2 {
		return nil
	}
	slices.SortFunc(refs, func(a, b awareness.SessionRef) int {
		if c := strings.Compare(a.AgentID, b.AgentID); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	now := nanos(normTime(ops[0].Now))
	agents, keys, kindNames := make([]string, len(refs)), make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		agents[i], keys[i], kindNames[i] = r.AgentID, r.Key, string(kinds[r])
	}
	// One multi-row upsert locks the heads in (agent, key) order: what lockHead does
	// for one head, without a round trip each.
	if _, err := t.exec(s.d.sql.lockHeads, now, now, agents, keys, kindNames); err != nil {
		return err
	}
	if !cursors {
		return nil
	}
	_, err := t.exec(s.d.sql.lockTargetsCursors, agents, keys)
	return err
}

func (s *Store) appendOne(t *tx, op *awareness.AppendOp) error {
	now := normTime(op.Now)
	ev := op.New.Event
	ref := ev.Session

	if ev.DedupeKey != "" {
		// Lock the head before looking the key up, so that on PostgreSQL two appends
		// with one dedupe key serialise on the head row instead of racing (SIG-4), even
		// when the session has no head yet. SQLite's immediate transaction holds the
		// write lock already: it reads the head only for a duplicate.
		var version int64
		if s.d.sql.headLock != "" {
			v, err := s.lockHead(t, ref, op.New.SessionKind, now)
			if err != nil {
				return err
			}
			version = v
		}
		first, found, err := t.dedupe(ref, ev.DedupeKey)
		if err != nil {
			return err
		}
		if found {
			if s.d.sql.headLock == "" {
				if version, _, err = s.head(t, ref, false); err != nil {
					return err
				}
			}
			op.Event, op.Recorded, op.Version = first, false, version
			return nil
		}
	}

	ev.OccurredAt = normTime(ev.OccurredAt)
	ev.RecordedAt = now
	row, err := eventRowOf(ev)
	if err != nil {
		return err
	}
	// The bump of a notifying event also records it on the head (headBumpMaterialSQL),
	// which notifyWatchers then skips.
	material := notifies(ev.Kind)
	compactions, kind, at := op.Compactions, string(op.New.SessionKind), nanos(now)
	if s.d.sql.bumpInsert != "" {
		q, args := s.d.sql.bumpInsert, []any{ref.AgentID, ref.Key, kind, compactions, at, at}
		if material {
			q, args = s.d.sql.bumpMaterialInsert, append(args, ev.ActorID, at)
		}
		dest := []any{&ev.Sequence}
		if s.d.sql.returnMore != "" {
			dest = append(dest, &t.xid)
		}
		found, err := t.scanRow(dest, q, append(args,
			row.AgentID, row.SessionKey, row.Kind, row.ActorType, row.ActorID, row.Summary,
			row.OccurredAt, row.RunID, row.PayloadJSON, row.DedupeKey, row.RecordedAt)...)
		if err == nil && !found {
			err = errors.New("head upsert returned no row")
		}
		if err != nil {
			return err
		}
	} else {
		// SQLite: the bump of an existing head as an UPDATE returning the new version,
		// then the event insert. The first append of a session, which finds no head
		// to update, runs the UPSERT and knows its version is 1: the transaction
		// holds the write lock. (An UPSERT with RETURNING was once measured at three
		// times an UPSERT and a read; the UPDATE measured as the two, within a wide
		// spread.)
		var found bool
		if material {
			found, err = t.scanRow([]any{&ev.Sequence}, headUpdateMaterialSQL, kind, compactions, at, at,
				ev.ActorID, ev.ActorID, ev.ActorID, at, ref.AgentID, ref.Key)
		} else {
			found, err = t.scanRow([]any{&ev.Sequence}, headUpdateSQL, kind, compactions, at, at, ref.AgentID, ref.Key)
		}
		if err == nil && !found {
			ev.Sequence = 1
			if material {
				_, err = t.exec(headBumpMaterialSQL, ref.AgentID, ref.Key, kind, compactions, at, at, ev.ActorID, at)
			} else {
				_, err = t.exec(headBumpSetSQL, ref.AgentID, ref.Key, kind, compactions, at, at)
			}
		}
		if err != nil {
			return err
		}
		if _, err := t.exec(eventInsertSQL,
			row.AgentID, row.SessionKey, ev.Sequence, row.Kind, row.ActorType, row.ActorID, row.Summary,
			row.OccurredAt, row.RunID, row.PayloadJSON, row.DedupeKey, row.RecordedAt); err != nil {
			return err
		}
	}
	op.Event, op.Recorded, op.Version = ev, true, ev.Sequence

	switch {
	case ev.Kind.SeedsWatchers():
		return s.seedWatchers(t, op, now)
	case ev.Kind.StartsIncarnation():
		return s.resetSession(t, op, now)
	case ev.Kind.Notifies():
		if err := s.notifyWatchers(t, op, now); err != nil {
			return err
		}
		if ev.Kind.Retires() {
			return s.deleteSessionRows(t, op, now)
		}
		return nil
	}
	return nil // log-only kinds never touch cursors (NTC-4)
}

// generation reads a session's generation (LIF-2): 1 for a session without a head.
func (s *Store) generation(t *tx, ref awareness.SessionRef) (int64, error) {
	gen := int64(1)
	_, err := t.scanRow([]any{&gen}, "SELECT generation FROM sessions WHERE agent_id = ? AND session_key = ?", ref.AgentID, ref.Key)
	return gen, err
}

// born gives a cursor the store creates the generations of its pair (LIF-2): the
// target's and the watcher's current ones.
func (s *Store) born(t *tx, c awareness.Cursor) (awareness.Cursor, error) {
	var err error
	if c.TargetGeneration == 0 {
		if c.TargetGeneration, err = s.generation(t, c.Target); err != nil {
			return c, err
		}
	}
	if c.WatcherGeneration == 0 {
		c.WatcherGeneration = 1
		if w, werr := awareness.ResolveWatcher(c.Watcher); werr == nil {
			if c.WatcherGeneration, err = s.generation(t, w); err != nil {
				return c, err
			}
		}
	}
	return c, nil
}

// resetSession applies a reset event (LIF-1, LIF-2) after its append: the session's
// generation moves up by one, the cursors it holds as a watcher are deleted (WAT-5),
// and every cursor on it goes through awareness.ResetCursor: its pending notice
// closes, and a watcher that selects reset gets one notice for the new incarnation.
// The cursors on the session are read with their derived M and locked in primary-key
// order.
func (s *Store) resetSession(t *tx, op *awareness.AppendOp, now time.Time) error {
	ev := op.Event
	ref := ev.Session
	if _, err := t.exec("UPDATE sessions SET generation = generation + 1 WHERE agent_id = ? AND session_key = ?", ref.AgentID, ref.Key); err != nil {
		return err
	}
	gen, err := s.generation(t, ref)
	if err != nil {
		return err
	}
	if ref.Qualified() {
		_, closed, err := s.deleteCursors(t, "watcher_key = ?", ref.Key)
		if err != nil {
			return err
		}
		op.Closed = append(op.Closed, closed...)
	}
	curs, err := t.findCursors("target_agent_id = ? AND target_key = ?", []any{ref.AgentID, ref.Key}, "", s.d.sql.forUpdate)
	if err != nil {
		return err
	}
	for _, c := range curs {
		next, closed, opened := awareness.ResetCursor(c, ev.Sequence, ev.ActorID, gen, now)
		if next == c {
			continue
		}
		if err := t.saveCursor(next); err != nil {
			return err
		}
		if n, ok := s.notices.Notice(c); ok && closed {
			op.Closed = append(op.Closed, awareness.ClosedNotice(n))
		}
		if n, ok := s.notices.Notice(next); ok && opened {
			op.Opened = append(op.Opened, n)
		}
	}
	return nil
}

// deleteSessionRows is what follows a deleted event once it notified the session's
// watchers (LIF-1): the cursors the session holds are deleted (their pending notices
// closed), the cursors on it are retired, those with nothing pending deleted at once
// (the pending ones, the deletion's notice among them, go when acknowledged); its
// upstream link and acknowledgement records are deleted, its events before the
// deleted one too, and the head stays, marked deleted, with its registry fields
// cleared and PrunedThrough just below the deleted event, which stays in the log for
// the watchers' reconciliation.
func (s *Store) deleteSessionRows(t *tx, op *awareness.AppendOp, now time.Time) error {
	ref, seq := op.Event.Session, op.Event.Sequence
	if ref.Qualified() {
		_, closed, err := s.deleteCursors(t, "watcher_key = ?", ref.Key)
		if err != nil {
			return err
		}
		op.Closed = append(op.Closed, closed...)
	}
	onTarget := "target_agent_id = ? AND target_key = ?"
	if err := materialise(t, onTarget, ref.AgentID, ref.Key); err != nil {
		return err
	}
	if _, err := t.exec("DELETE FROM cursors WHERE "+onTarget+" AND n = l", ref.AgentID, ref.Key); err != nil {
		return err
	}
	if _, err := t.exec("UPDATE cursors SET retired = 1 WHERE "+onTarget, ref.AgentID, ref.Key); err != nil {
		return err
	}
	if err := s.dropSessionLinks(t, ref); err != nil {
		return err
	}
	if _, err := t.exec("DELETE FROM events WHERE agent_id = ? AND session_key = ? AND sequence < ?", ref.AgentID, ref.Key, seq); err != nil {
		return err
	}
	_, err := t.exec(`
UPDATE sessions SET
    pruned_through = ?, compaction_count = 0, registered = ?,
    session_id = NULL, parent_session_key = NULL, chat_type = NULL, provider = NULL, display_name = NULL,
    input_tokens = NULL, output_tokens = NULL, total_tokens = NULL, context_tokens = NULL,
    memory_flush_at = NULL, memory_flush_compaction_count = NULL, extra_json = NULL,
    updated_at = ?, deleted_at = ?
WHERE agent_id = ? AND session_key = ?`, seq-1, false, nanos(now), nanos(now), ref.AgentID, ref.Key)
	return err
}

// dropSessionLinks deletes a session's upstream link and its acknowledgement records
// (as target, and as watcher for an agent-qualified key).
func (s *Store) dropSessionLinks(t *tx, ref awareness.SessionRef) error {
	if err := deleteUpstream(t, ref); err != nil {
		return err
	}
	acks, acksArgs := "target_agent_id = ? AND target_key = ?", []any{ref.AgentID, ref.Key}
	if ref.Qualified() {
		acks, acksArgs = acks+" OR watcher_key = ?", append(acksArgs, ref.Key)
	}
	_, err := t.exec("DELETE FROM ack_log WHERE "+acks, acksArgs...)
	return err
}

// notifies reports whether appendOne calls notifyWatchers for an event of kind k.
func notifies(k awareness.EventKind) bool { return !k.SeedsWatchers() && k.Notifies() }

// dedupe returns the session's event with the dedupe key, if any.
func (t *tx) dedupe(ref awareness.SessionRef, key string) (awareness.Event, bool, error) {
	evs, err := scanAll(t, scanEvent, dedupeSelectSQL, ref.AgentID, ref.Key, key)
	if err != nil || len(evs) == 0 {
		return awareness.Event{}, false, err
	}
	return evs[0], true, nil
}

// head reads a session's state version (0 when it has no head). lock takes the row lock
// on dialects that need one.
func (s *Store) head(t *tx, ref awareness.SessionRef, lock bool) (version int64, found bool, err error) {
	q := headSelectSQL
	if lock {
		q = s.d.sql.headForUpdate
	}
	found, err = t.scanRow([]any{&version}, q, ref.AgentID, ref.Key)
	return version, found, err
}

// lockHead returns a session's state version holding its head for the rest of the
// transaction. On PostgreSQL it creates a version-0 head when there is none (the next
// head bump of the transaction moves it to 1, or the rollback removes it), so that
// concurrent first appends of a session find a row to wait on; an existing head is
// left unchanged (a no-op update takes its row lock). SQLite's immediate transaction
// already holds the database write lock, so there it only reads.
func (s *Store) lockHead(t *tx, ref awareness.SessionRef, kind awareness.SessionKind, now time.Time) (int64, error) {
	if s.d.sql.headLock == "" {
		version, _, err := s.head(t, ref, false)
		return version, err
	}
	var version int64
	found, err := t.scanRow([]any{&version}, s.d.sql.headLock,
		ref.AgentID, ref.Key, string(kind), nanos(now), nanos(now))
	if err == nil && !found {
		err = errors.New("head lock upsert returned no row")
	}
	return version, err
}

// The head bump (headBumpSetSQL, then a read of the head, on SQLite; eventBumpInsertSQL
// with the event insert on PostgreSQL) assigns the next dense sequence of a session
// (SIG-3): it creates the head at 1 or increments it, in one statement that holds the
// head row for the rest of the transaction (a row lock on PostgreSQL, the database write
// lock on SQLite). It also revives a deleted session and adds the op's compactions.

// seedWatchers applies child_spawned to the producer-passed watchers (WAT-2).
func (s *Store) seedWatchers(t *tx, op *awareness.AppendOp, now time.Time) error {
	ev := op.Event
	for _, wr := range op.New.Watchers {
		w := wr.Key
		cur, err := s.getCursor(t, w, ev.Session)
		if err != nil {
			return err
		}
		next, changed := awareness.SeedCursor(cur, w, ev.Session, ev.Sequence, now)
		if changed {
			if next, err = s.born(t, next); err != nil {
				return err
			}
			if err := t.saveCursor(next); err != nil {
				return err
			}
		}
	}
	return nil
}

// notifyWatchers applies a notifying event to every cursor on the target and to the
// producer-passed watchers (NTC-2, WAT-4), collecting the notices it opens.
//
// It is awareness.ApplyMaterial over the target's cursors. M is not stored per cursor:
// the head keeps the target's latest notifying sequence and actor and the latest one
// by any other actor (headBumpMaterialSQL), from which every cursor's M is read
// (cursorSelect), so a cursor whose notice is already pending is not written at all.
// Then one UPDATE (openNoticesSQL) opens the notices of the synced cursors behind the
// event whose watcher is not the actor: N = M := s, an opening time. Only the watcher
// and L of each come back (eachOpened), which with the event make the notice. The
// producer-passed watchers then go through ApplyMaterial one by one: a watcher that
// already holds a cursor on the target was covered by the head (its M reads s), so it
// changes nothing there, and one that does not gets its cursor created (L = 0).
//
// The head bump has recorded the event on the head already (headBumpMaterialSQL and
// its kin).
func (s *Store) notifyWatchers(t *tx, op *awareness.AppendOp, now time.Time) error {
	ev := op.Event
	at := nanos(now)
	var (
		count  int
		opened sql.NullString
	)
	args := []any{at, at, ev.Sequence, ev.Sequence, ev.Session.AgentID, ev.Session.Key, ev.Sequence, ev.ActorID}
	if q := s.d.sql.openNotices; q != "" {
		_, err := t.scanRow([]any{&count, &opened}, q, args...)
		if err != nil {
			return err
		}
	} else {
		n, err := t.exec(openNoticesSQL, args...)
		if err != nil {
			return err
		}
		if n > 0 {
			if _, err := t.scanRow([]any{&count, &opened}, openedNoticesSQL, ev.Session.AgentID, ev.Session.Key, ev.Sequence); err != nil {
				return err
			}
		}
	}
	op.Opened = slices.Grow(op.Opened, count+len(op.New.Watchers))
	c := awareness.Cursor{Target: ev.Session, N: ev.Sequence, M: ev.Sequence, OpenedAt: now, UpdatedAt: now}
	texts := s.notices.TextsOn(ev.Session)
	err := eachOpened(opened.String, func(watcher string, l, targetGen, watcherGen int64) {
		c.Watcher, c.L, c.TargetGeneration, c.WatcherGeneration = watcher, l, targetGen, watcherGen
		if n, ok := texts.Notice(c); ok {
			op.Opened = append(op.Opened, n)
		}
	})
	if err != nil {
		return err
	}
	// The cursors with a selection of their own (LIF-3) keep their M in the row and
	// go through ApplyMaterial one by one, when they select the event's kind.
	selecting, err := scanAll(t, scanCursor, s.d.sql.selecting, ev.Session.AgentID, ev.Session.Key)
	if err != nil {
		return err
	}
	for _, cur := range selecting {
		if cur.Watcher == ev.Session.Key || !strings.HasPrefix(cur.Watcher, "agent:") || !cur.Selects(ev.Kind) {
			continue
		}
		next, changed, opened := awareness.ApplyMaterial(&cur, cur.Watcher, ev.Session, ev.Sequence, ev.ActorID, now)
		if changed {
			if err := t.saveCursor(next); err != nil {
				return err
			}
		}
		if opened {
			if n, ok := s.notices.Notice(next); ok {
				op.Opened = append(op.Opened, n)
			}
		}
	}
	// The statement returns rows in no defined order; notices are collected in
	// watcher order, as a per-row pass over the target's cursors would.
	byWatcher := func(a, b awareness.Notice) int { return strings.Compare(a.Watcher, b.Watcher) }
	if !slices.IsSortedFunc(op.Opened, byWatcher) {
		slices.SortFunc(op.Opened, byWatcher)
	}
	var seen map[string]bool
	for _, wr := range op.New.Watchers {
		w := wr.Key
		if seen[w] || w == ev.ActorID {
			continue
		}
		if seen == nil {
			seen = make(map[string]bool, len(op.New.Watchers))
		}
		seen[w] = true
		cur, err := s.getCursor(t, w, ev.Session)
		if err != nil {
			return err
		}
		if cur != nil && (cur.Retired || cur.Kinds != "") {
			continue // retired, or applied above with its own selection
		}
		next, changed, opened := awareness.ApplyMaterial(cur, w, ev.Session, ev.Sequence, ev.ActorID, now)
		if changed {
			if next, err = s.born(t, next); err != nil {
				return err
			}
			if err := t.saveCursor(next); err != nil {
				return err
			}
		}
		if opened {
			if n, ok := s.notices.Notice(next); ok {
				op.Opened = append(op.Opened, n)
			}
		}
	}
	return nil
}

// The derived M.
//
// materialOf is a cursor's M as ApplyMaterial has moved it since the row was written:
// the head's latest notifying sequence by an actor other than the watcher, where the
// cursor is one a notice reaches (openNoticesSQL's rule of who watches) and it is
// above the row's own m; materialAtOf is then that event's time, the cursor's
// updated_at. Both are NULL (the row's own value stands) otherwise, and when the target
// has no head. They are written over the sessions alias h joined to cursors.
const (
	materialHeadSeq = "CASE WHEN cursors.watcher_key = h.material_actor THEN h.material_other_seq ELSE h.material_seq END"
	materialHeadAt  = "CASE WHEN cursors.watcher_key = h.material_actor THEN h.material_other_at ELSE h.material_at END"
	materialLags    = "cursors.watcher_key <> cursors.target_key AND substr(cursors.watcher_key, 1, 6) = 'agent:' AND " +
		"cursors.retired = 0 AND cursors.kinds = '' AND " + materialHeadSeq + " > cursors.m"
	materialOf   = "CASE WHEN " + materialLags + " THEN " + materialHeadSeq + " END"
	materialAtOf = "CASE WHEN " + materialLags + " THEN " + materialHeadAt + " END"
	// cursorSelect reads cursorColumns with the derived M and updated_at.
	cursorSelect = "SELECT cursors.watcher_key, cursors.target_agent_id, cursors.target_key, cursors.l, cursors.n, " +
		"COALESCE(" + materialOf + ", cursors.m), cursors.opened_at, COALESCE(" + materialAtOf + ", cursors.updated_at), " +
		"cursors.target_gen, cursors.watcher_gen, cursors.retired, cursors.kinds " +
		"FROM cursors LEFT JOIN sessions h ON h.agent_id = cursors.target_agent_id AND h.session_key = cursors.target_key"
	// materialiseSQL writes the derived M and updated_at into the lagging cursors
	// matching a condition appended to it, so that a statement that reads or returns
	// the rows' own columns (a delete, the sweep, expiry) sees the cursors' values.
	// Only a pending cursor can lag: a notifying event by another actor opens every
	// synced cursor it reaches.
	materialiseSQL = "UPDATE cursors SET m = " + materialHeadSeq + ", updated_at = " + materialHeadAt +
		" FROM sessions h WHERE cursors.n > cursors.l AND h.agent_id = cursors.target_agent_id AND " +
		"h.session_key = cursors.target_key AND " + materialLags
)

// materialise writes the derived M into the lagging cursors matching where (all when
// empty); see materialiseSQL.
func materialise(t *tx, where string, args ...any) error {
	q := materialiseSQL
	if where != "" {
		q += " AND (" + where + ")"
	}
	_, err := t.exec(q, args...)
	return err
}

// openNoticesSQL is the opening half of the set-based ApplyMaterial of notifyWatchers.
// Its arguments, in text order: the opening time, the update time, the event's
// sequence s (for N, then M), the target's agent and key, s (the filter), the event's
// actor ("" for none).
//
// The filter is ApplyMaterial's for a synced cursor (N = L; its M is its own m, since
// every notifying event either opened it or was the watcher's own): M < s (an older or
// equal sequence moves nothing) and the watcher is not the actor (self-suppression).
// The rule of who can watch is spelled in SQL too: the target's own key never watches
// it, and a watcher must be an agent-qualified key (every path that writes a cursor
// checks the full grammar in the core; this keeps a row written by other means from
// being notified).
//
// On PostgreSQL the UPDATE locks the rows it writes in its plan's order, with no
// locking pass in primary-key order before it: at 10,000 rows that pass cost a sixth
// of the update. No deadlock follows from that order: every transaction that holds
// a cursor of this target while it waits for another row (Ack, Sweep, Watch, a
// batch's lockBatch) takes the target's head first, which the append holds
// exclusively. The others (Unwatch locks one row; expiry and ResetWatcher lock in
// any order) can meet it in a cycle as they can meet each other, and the write
// helper retries a deadlock.
//
// The notices opened come back as their count and one string (openedList), not as a row each: reading
// 10,000 rows through database/sql and the SQLite driver costs more than the update
// itself (a cgo call per row and per column), and SQLite's RETURNING more again.
// SQLite reads them after the update (openedNoticesSQL: the cursors of the target
// with N = s and N > L are exactly those it opened, s being new); PostgreSQL returns
// them from the update (openNoticesReturnSQL, dialectSQL.openNotices), in watcher
// order as SQLite's scan of its primary key gives them. The order is in bytes (the "C"
// collation, whatever the database's), as Go compares strings, so that the notices are
// found sorted and not sorted again.
const (
	openNoticesSQL = `UPDATE cursors
SET opened_at = ?, updated_at = ?, n = ?, m = ?
WHERE target_agent_id = ? AND target_key = ? AND n = l AND m < ? AND watcher_key <> ?
  AND watcher_key <> target_key AND substr(watcher_key, 1, 6) = 'agent:' AND retired = 0 AND kinds = ''`
	// openedList is an opened cursor's item of the string: L, the target's and the
	// watcher's generations, the watcher key's length in bytes, the key; eachOpened
	// reads it.
	openedList       = "l || ' ' || target_gen || ' ' || watcher_gen || ' ' || octet_length(watcher_key) || ' ' || watcher_key"
	openedNoticesSQL = "SELECT count(*), group_concat(" + openedList + ", '') FROM cursors " +
		"WHERE target_agent_id = ? AND target_key = ? AND n = ? AND n > l"
	openNoticesReturnSQL = "WITH opened AS (" + openNoticesSQL + "\nRETURNING watcher_key, l, target_gen, watcher_gen)\n" +
		"SELECT count(*), string_agg(" + openedList + ", '' ORDER BY watcher_key COLLATE \"C\") FROM opened"
)

// eachOpened calls f with the watcher, L and generations (LIF-2) of every opened
// cursor in list, a string of openedList items.
func eachOpened(list string, f func(watcher string, l, targetGen, watcherGen int64)) error {
	for list != "" {
		var nums [3]int64
		rest := list
		ok := true
		for i := range nums {
			var s string
			var cut bool
			s, rest, cut = strings.Cut(rest, " ")
			v, err := strconv.ParseInt(s, 10, 64)
			if !cut || err != nil {
				ok = false
				break
			}
			nums[i] = v
		}
		ns, rest, ok2 := strings.Cut(rest, " ")
		n, err := strconv.Atoi(ns)
		if !ok || !ok2 || err != nil || n < 0 || n > len(rest) {
			return fmt.Errorf("opened notices: malformed list at %.40q", list)
		}
		f(rest[:n], nums[0], nums[1], nums[2])
		list = rest[n:]
	}
	return nil
}
