package models

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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
	wstmts *stmtCache      // the write pool's hot statements (the append path)
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
	wstmts, err := newStmtCache(ctx, w, wdb, d.prepare, d.sql.writeStatements()...)
	if err != nil {
		return nil, err
	}
	rstmts, err := newStmtCache(ctx, r, rdb, d.prepare, readStatements()...)
	if err != nil {
		wstmts.close()
		return nil, err
	}
	return &Store{d: d, w: w, r: r, wsql: wdb, rsql: rdb, wstmts: wstmts, rstmts: rstmts, status: status, log: log,
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
	var xid int64
	if s.d.sql.txid != "" {
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
// Append

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
	// headBumpSetSQL is the same without the RETURNING clause (SQLite, see
	// appendOne). headBumpUpdate is the bump of an existing head, shared by them and
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
	// headBumpMaterialSQL is headBumpSetSQL for a notifying event on SQLite: the same
	// bump, which also records the event on the head as materialSQL does (its
	// sequence is the new state version), so that a notifying append updates its
	// head in one statement instead of two. Arguments: headBumpSetSQL's, then the
	// event's actor ("" for none).
	headBumpMaterialSQL = `
INSERT INTO sessions (agent_id, session_key, kind, state_version, compaction_count, created_at, updated_at,
    material_actor, material_seq, material_at)
VALUES (?, ?, ?, 1, ?, ?, ?, ?, 1, ?)` + headBumpUpdate + `,
    material_other_seq = CASE WHEN sessions.material_actor = excluded.material_actor THEN sessions.material_other_seq ELSE sessions.material_seq END,
    material_other_at = CASE WHEN sessions.material_actor = excluded.material_actor THEN sessions.material_other_at ELSE sessions.material_at END,
    material_actor = excluded.material_actor,
    material_seq = sessions.state_version + 1,
    material_at = excluded.material_at`
	eventInsertSQL = "INSERT INTO events (" + eventColumns + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
	// eventBumpInsertSQL is headBumpSQL and eventInsertSQL in one round trip
	// (dialectSQL.bumpInsert).
	eventBumpInsertSQL = "WITH head AS (" + headBumpSQL + ")\n" +
		"INSERT INTO events (" + eventColumns + ") " +
		"SELECT ?, ?, state_version, ?, ?, ?, ?, ?, ?, ?, ?, ? FROM head RETURNING sequence"
	dedupeSelectSQL = "SELECT " + eventColumns + " FROM events WHERE agent_id = ? AND session_key = ? AND dedupe_key = ?"
	cursorSaveSQL   = `
INSERT INTO cursors (` + cursorColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (watcher_key, target_agent_id, target_key) DO UPDATE SET
    l = excluded.l, n = excluded.n, m = excluded.m,
    opened_at = excluded.opened_at, updated_at = excluded.updated_at,
    target_gen = excluded.target_gen, retired = excluded.retired, kinds = excluded.kinds`
	cursorOfPairWhere = "watcher_key = ? AND target_agent_id = ? AND target_key = ?"
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
// batch needs none: its first statement locks the head, and a target's cursors are
// read in primary-key order. A batch of log-only kinds locks no cursor, since it
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
		// when the session has no head yet.
		version, err := s.lockHead(t, ref, op.New.SessionKind, now)
		if err != nil {
			return err
		}
		first, found, err := t.dedupe(ref, ev.DedupeKey)
		if err != nil {
			return err
		}
		if found {
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
	compactions, kind, at := op.Compactions, string(op.New.SessionKind), nanos(now)
	if s.d.sql.bumpInsert != "" {
		found, err := t.scanRow([]any{&ev.Sequence}, s.d.sql.bumpInsert,
			ref.AgentID, ref.Key, kind, compactions, at, at,
			row.AgentID, row.SessionKey, row.Kind, row.ActorType, row.ActorID, row.Summary,
			row.OccurredAt, row.RunID, row.PayloadJSON, row.DedupeKey, row.RecordedAt)
		if err == nil && !found {
			err = errors.New("head upsert returned no row")
		}
		if err != nil {
			return err
		}
	} else {
		// SQLite: the bump, then a read of the head it wrote. SQLite runs an UPSERT
		// with RETURNING through a result table of its own, which cost three times
		// what the bump and the read cost as two statements (about 15 µs against 5,
		// measured on the bench schema). The bump of a notifying event also records
		// it on the head (headBumpMaterialSQL), which notifyWatchers then skips.
		var err error
		if notifies(ev.Kind) {
			_, err = t.exec(headBumpMaterialSQL, ref.AgentID, ref.Key, kind, compactions, at, at, ev.ActorID, at)
		} else {
			_, err = t.exec(headBumpSetSQL, ref.AgentID, ref.Key, kind, compactions, at, at)
		}
		if err != nil {
			return err
		}
		found, err := t.scanRow([]any{&ev.Sequence}, headSelectSQL, ref.AgentID, ref.Key)
		if err == nil && !found {
			err = errors.New("head upsert returned no row")
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
		if err := s.notifyWatchers(t, op, now, s.d.sql.bumpInsert == ""); err != nil {
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
// by any other actor (materialSQL), from which every cursor's M is read
// (cursorSelect), so a cursor whose notice is already pending is not written at all.
// Then one UPDATE (openNoticesSQL) opens the notices of the synced cursors behind the
// event whose watcher is not the actor: N = M := s, an opening time. Only the watcher
// and L of each come back (eachOpened), which with the event make the notice. The
// producer-passed watchers then go through ApplyMaterial one by one: a watcher that
// already holds a cursor on the target was covered by the head (its M reads s), so it
// changes nothing there, and one that does not gets its cursor created (L = 0).
//
// recorded says the head bump recorded the event on the head already
// (headBumpMaterialSQL, SQLite); otherwise materialSQL does.
func (s *Store) notifyWatchers(t *tx, op *awareness.AppendOp, now time.Time, recorded bool) error {
	ev := op.Event
	at := nanos(now)
	if !recorded {
		if _, err := t.exec(materialSQL, ev.ActorID, ev.ActorID, ev.ActorID, ev.Sequence, at,
			ev.Session.AgentID, ev.Session.Key); err != nil {
			return err
		}
	}
	if q := s.d.sql.lockTargetCursors; q != "" {
		var locked int64
		if _, err := t.scanRow([]any{&locked}, q, ev.Session.AgentID, ev.Session.Key); err != nil {
			return err
		}
	}
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
	err := eachOpened(opened.String, func(watcher string, l, targetGen, watcherGen int64) {
		c.Watcher, c.L, c.TargetGeneration, c.WatcherGeneration = watcher, l, targetGen, watcherGen
		if n, ok := s.notices.Notice(c); ok {
			op.Opened = append(op.Opened, n)
		}
	})
	if err != nil {
		return err
	}
	// The cursors with a selection of their own (LIF-3) keep their M in the row and
	// go through ApplyMaterial one by one, when they select the event's kind.
	selecting, err := t.findCursors("target_agent_id = ? AND target_key = ? AND kinds <> '' AND retired = 0",
		[]any{ev.Session.AgentID, ev.Session.Key}, "", s.d.sql.forUpdate)
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
	slices.SortFunc(op.Opened, func(a, b awareness.Notice) int { return strings.Compare(a.Watcher, b.Watcher) })
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

// The derived M. materialSQL records a notifying event on its head; its arguments, in
// text order: the event's actor ("" for none) twice, the actor, the event's sequence,
// the append's time, the session's agent and key. SET reads the row as it was: when the
// actor is the head's material_actor, the latest sequence by another actor stays;
// otherwise it becomes the previous latest.
//
// materialOf is a cursor's M as ApplyMaterial has moved it since the row was written:
// the head's latest notifying sequence by an actor other than the watcher, where the
// cursor is one a notice reaches (openNoticesSQL's rule of who watches) and it is
// above the row's own m; materialAtOf is then that event's time, the cursor's
// updated_at. Both are NULL (the row's own value stands) otherwise, and when the target
// has no head. They are written over the sessions alias h joined to cursors.
const (
	materialSQL = `UPDATE sessions SET
    material_other_seq = CASE WHEN material_actor = ? THEN material_other_seq ELSE material_seq END,
    material_other_at = CASE WHEN material_actor = ? THEN material_other_at ELSE material_at END,
    material_actor = ?, material_seq = ?, material_at = ?
WHERE agent_id = ? AND session_key = ?`
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
// being notified). On PostgreSQL the target's synced cursors are first locked in
// primary-key order (the order Ack, Sweep and lockBatch use) by
// dialectSQL.lockTargetCursors, then updated.
//
// The notices opened come back as their count and one string (openedList), not as a row each: reading
// 10,000 rows through database/sql and the SQLite driver costs more than the update
// itself (a cgo call per row and per column), and SQLite's RETURNING more again.
// SQLite reads them after the update (openedNoticesSQL: the cursors of the target
// with N = s and N > L are exactly those it opened, s being new); PostgreSQL returns
// them from the update (openNoticesReturnSQL, dialectSQL.openNotices).
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
		"SELECT count(*), string_agg(" + openedList + ", '') FROM opened"
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

// ---------------------------------------------------------------------------------------
// Cursor rows

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

// ---------------------------------------------------------------------------------------
// Reads

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

// ListSessions returns up to q.Limit sessions (all when q.Limit <= 0) strictly after
// q.After in (agentId, key) order, excluding deleted ones. UpdatedSince is inclusive.
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

// prefixEnd returns the smallest string greater than every string with the given prefix
// (in code point order, which is byte order for UTF-8): the prefix with its last rune
// incremented. It stays valid UTF-8, so PostgreSQL accepts it as a parameter. ok is
// false when no such string exists.
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

// ---------------------------------------------------------------------------------------
// Deletion

// DeleteSession records a deleted event on a live session (LIF-1) through appendOne,
// whose deleted branch notifies the session's watchers, retires their cursors and
// deletes the rest (deleteSessionRows), in one transaction. A session without a row,
// or deleted already, records nothing (op nil): the cursors in both directions, its
// upstream link and acknowledgement records are deleted even then, since a watcher
// that never logged anything has no row but may hold cursors.
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

// ---------------------------------------------------------------------------------------
// Cursors

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
// after its commit, and hints their watchers to the other processes. It reads such
// cursors through the partial index cursors_unopened (migration 00005), which holds
// none of the table's other rows, in pages of awareness.SweepPage in primary-key order,
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
// cursors_unopened, written as it is there so that both databases use the index;
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

// ---------------------------------------------------------------------------------------
// Retention

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
// to s before the rows are deleted. So the retained events of a session are exactly
// (PrunedThrough, Version], history gaps are exact (REC-2), and heads never move.
//
//   - Age (MaxAge): events with occurred_at < now−MaxAge. occurred_at is the caller's
//     time clamped into [recorded−24h, recorded] (SIG-5), so the prefix rule removes, at
//     worst, events up to 24 hours younger than MaxAge that precede an old one.
//   - Row cap (MaxRows), applied after the age rule: the oldest rows in recorded order
//     (recorded_at, agent_id, session_key, sequence) beyond MaxRows. Recorded order is
//     sequence order within a session while the service clock does not step back, and
//     then exactly MaxRows rows remain; if it did step back, the prefix rule may remove
//     a few more.
//   - Cursors (CursorTTL): cursors with updated_at < now−CursorTTL, unless the last
//     expiry (meta.last_expiry_at, any process's) is less than ExpireEvery ago.
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
				// The notice holds of pairs without a cursor (unwatched, reset, deleted,
				// expired) go with the expiry (RDL-1, RDL-2).
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
	if err := s.wsql.PingContext(ctx); err != nil {
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
		s.closeErr = errors.Join(s.wstmts.close(), s.rstmts.close(), s.rsql.Close(), s.wsql.Close())
	})
	return s.closeErr
}
