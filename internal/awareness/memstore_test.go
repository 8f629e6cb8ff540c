package awareness_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// memStore is an awareness.Store (with the registry and the upstream links) held in
// memory: a mutex and maps, with every rule taken from the core (the cursor
// transitions applied cursor by cursor, MergeSessionWrite, AdoptLink, the Check
// functions). It passes the conformance suites of internal/models/storetest, which
// shows that the rules live in the core and a store only stores; the Service tests
// run on it.
//
// Every method takes the one lock, so each is one serialisable transaction; a write
// validates and computes everything that can fail before it changes anything, so a
// refused call writes nothing. Close ends this handle only: reopen returns a new
// handle on the same data, as a restarted process opens the same database file.
type memStore struct {
	db     *memDB
	closed atomic.Bool
}

// memDB is the data behind memStore handles.
type memDB struct {
	mu         sync.Mutex
	sessions   map[awareness.SessionRef]*memSession
	events     map[awareness.SessionRef][]awareness.Event // ascending sequences, a pruned prefix gone
	cursors    map[memPair]awareness.Cursor
	links      map[awareness.SessionRef]awareness.UpstreamLink
	prompts    map[awareness.SessionRef][]string
	salt       []byte
	lastPrune  time.Time
	lastExpiry time.Time
	eventCount int64
	acks       []awareness.AckRecord // the acknowledgement history, ascending IDs
	ackID      int64
	holds      map[memPair]awareness.NoticeHold // RDL-1, RDL-2
}

// memSession is a session row: head and registry entry in one, kept when deleted.
type memSession struct {
	awareness.Session
	deleted bool
	// generation is the session's incarnation (LIF-2): 1, one more per reset.
	generation int64
}

type memPair struct {
	watcher string
	target  awareness.SessionRef
}

var (
	_ awareness.Store         = (*memStore)(nil)
	_ awareness.RegistryStore = (*memStore)(nil)
	_ awareness.UpstreamStore = (*memStore)(nil)
)

func newMemStore() *memStore {
	return &memStore{db: &memDB{
		sessions: map[awareness.SessionRef]*memSession{},
		events:   map[awareness.SessionRef][]awareness.Event{},
		cursors:  map[memPair]awareness.Cursor{},
		links:    map[awareness.SessionRef]awareness.UpstreamLink{},
		prompts:  map[awareness.SessionRef][]string{},
	}}
}

// reopen returns a new handle on the same data (a restart).
func (s *memStore) reopen() *memStore { return &memStore{db: s.db} }

var errMemClosed = errors.New("the store is closed")

// write is lock for a write: under awareness.WithCheckOnly it refuses, as the SQL
// stores do.
func (s *memStore) write(ctx context.Context) (*memDB, error) {
	if err := awareness.RefuseCheckOnly(ctx); err != nil {
		return nil, err
	}
	return s.lock(ctx)
}

// lock takes the data lock, or fails as a closed or cancelled store does.
func (s *memStore) lock(ctx context.Context) (*memDB, error) {
	if s.closed.Load() {
		return nil, awareness.Unavailable(errMemClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, awareness.Unavailable(err)
	}
	s.db.mu.Lock()
	return s.db, nil
}

// norm is a time as a store that keeps nanoseconds gives it back.
func norm(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

func refOrder(a, b awareness.SessionRef) int {
	return cmp.Or(strings.Compare(a.AgentID, b.AgentID), strings.Compare(a.Key, b.Key))
}

// pairOrder is the cursors' primary-key order: (watcher, target agent, target key).
func pairOrder(a, b awareness.Cursor) int {
	return cmp.Or(strings.Compare(a.Watcher, b.Watcher), refOrder(a.Target, b.Target))
}

// pendingOrder is Pending's order: (opened at, watcher, target agent, target key).
func pendingOrder(a, b awareness.Notice) int {
	return cmp.Or(a.OpenedAt.Compare(b.OpenedAt), strings.Compare(a.Watcher, b.Watcher), refOrder(a.Target, b.Target))
}

// sortedCursors returns the cursors keep selects, in primary-key order.
func (db *memDB) sortedCursors(keep func(awareness.Cursor) bool) []awareness.Cursor {
	var out []awareness.Cursor
	for _, c := range db.cursors {
		if keep(c) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, pairOrder)
	return out
}

func (db *memDB) cursor(watcher string, target awareness.SessionRef) *awareness.Cursor {
	if c, ok := db.cursors[memPair{watcher, target}]; ok {
		return &c
	}
	return nil
}

func (db *memDB) save(c awareness.Cursor) { db.cursors[memPair{c.Watcher, c.Target}] = c }

// deleteCursors deletes the cursors keep selects and returns how many, and the closed
// notices of the pending ones in primary-key order.
func (db *memDB) deleteCursors(keep func(awareness.Cursor) bool) (int64, []awareness.Notice) {
	var closed []awareness.Notice
	gone := db.sortedCursors(keep)
	for _, c := range gone {
		delete(db.cursors, memPair{c.Watcher, c.Target})
		if n, ok := awareness.NoticeOf(c); ok {
			closed = append(closed, awareness.ClosedNotice(n))
		}
	}
	return int64(len(gone)), closed
}

// gen is a session's generation (LIF-2): 1 for a session without a row.
func (db *memDB) gen(ref awareness.SessionRef) int64 {
	if r := db.sessions[ref]; r != nil {
		return r.generation
	}
	return 1
}

// watcherGen is the generation of the watcher session key names.
func (db *memDB) watcherGen(key string) int64 {
	w, err := awareness.ResolveWatcher(key)
	if err != nil {
		return 1
	}
	return db.gen(w)
}

// born gives a cursor the store creates its generations (LIF-2).
func (db *memDB) born(c awareness.Cursor) awareness.Cursor {
	if c.TargetGeneration == 0 {
		c.TargetGeneration = db.gen(c.Target)
	}
	if c.WatcherGeneration == 0 {
		c.WatcherGeneration = db.watcherGen(c.Watcher)
	}
	return c
}

func (db *memDB) head(ref awareness.SessionRef) int64 {
	if r := db.sessions[ref]; r != nil {
		return r.StateVersion
	}
	return 0
}

// ---------------------------------------------------------------------------------------
// The log

func (s *memStore) Append(ctx context.Context, ops []*awareness.AppendOp) error {
	for _, op := range ops {
		if op != nil {
			op.Event, op.Recorded, op.Version, op.Opened, op.Closed = awareness.Event{}, false, 0, nil, nil
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if err := awareness.CheckAppendOps(ops); err != nil {
		return err
	}
	db, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer db.mu.Unlock()
	// Nothing below can fail: the batch commits as a whole.
	for _, op := range ops {
		db.append(op)
	}
	return nil
}

func (db *memDB) append(op *awareness.AppendOp) {
	now, ev := norm(op.Now), op.New.Event
	ref := ev.Session
	if ev.DedupeKey != "" {
		for _, e := range db.events[ref] {
			if e.DedupeKey == ev.DedupeKey {
				op.Event, op.Recorded, op.Version = e, false, db.head(ref)
				return
			}
		}
	}
	row := db.sessions[ref]
	if row == nil {
		row = &memSession{Session: awareness.Session{Ref: ref, CreatedAt: now}, generation: 1}
		db.sessions[ref] = row
	} else if row.deleted {
		row.deleted, row.CreatedAt = false, now // revived (WAT-5)
	}
	row.Kind = op.New.SessionKind
	row.StateVersion++
	row.CompactionCount += op.Compactions
	row.UpdatedAt = now

	ev.Sequence, ev.OccurredAt, ev.RecordedAt = row.StateVersion, norm(ev.OccurredAt), now
	db.events[ref] = append(db.events[ref], ev)
	db.eventCount++
	op.Event, op.Recorded, op.Version = ev, true, ev.Sequence

	switch {
	case ev.Kind.SeedsWatchers():
		for _, w := range op.New.Watchers {
			if next, changed := awareness.SeedCursor(db.cursor(w.Key, ref), w.Key, ref, ev.Sequence, now); changed {
				db.save(db.born(next))
			}
		}
	case ev.Kind.StartsIncarnation():
		// A new incarnation (LIF-2): the generation moves up, the cursors the
		// session holds are dropped (WAT-5) and those on it move to the reset.
		row.generation++
		if ref.Qualified() {
			_, closed := db.deleteCursors(func(c awareness.Cursor) bool { return c.Watcher == ref.Key })
			op.Closed = append(op.Closed, closed...)
		}
		for _, c := range db.sortedCursors(func(c awareness.Cursor) bool { return c.Target == ref }) {
			next, closed, opened := awareness.ResetCursor(c, ev.Sequence, ev.ActorID, row.generation, now)
			if next == c {
				continue
			}
			db.save(next)
			if n, ok := awareness.NoticeOf(c); ok && closed {
				op.Closed = append(op.Closed, awareness.ClosedNotice(n))
			}
			if n, ok := awareness.NoticeOf(next); ok && opened {
				op.Opened = append(op.Opened, n)
			}
		}
	case ev.Kind.Notifies():
		// Every cursor on the target, in watcher order, then the producer-passed
		// watchers (a new one gets its cursor at L = 0). A cursor row that could never
		// have been written by a watch (the target itself, a bare key) is not notified,
		// as the SQL stores' statement does not notify it.
		onTarget := db.sortedCursors(func(c awareness.Cursor) bool {
			return c.Target == ref && c.Watcher != ref.Key && strings.HasPrefix(c.Watcher, "agent:") && !c.Retired
		})
		for _, c := range onTarget {
			db.material(op, &c, c.Watcher, now)
		}
		for _, w := range op.New.Watchers {
			if c := db.cursor(w.Key, ref); c == nil || !c.Retired {
				db.material(op, c, w.Key, now)
			}
		}
		if ev.Kind.Retires() {
			db.deleteSession(op, now)
		}
	}
}

// deleteSession is what follows a deleted event once it notified (LIF-1): the cursors
// the session holds are deleted, those on it retired (deleted at once when nothing is
// pending), its earlier events, link, prompts, acknowledgement records and registry
// entry are deleted, and the head stays marked deleted.
func (db *memDB) deleteSession(op *awareness.AppendOp, now time.Time) {
	ref, s := op.Event.Session, op.Event.Sequence
	if ref.Qualified() {
		_, closed := db.deleteCursors(func(c awareness.Cursor) bool { return c.Watcher == ref.Key })
		op.Closed = append(op.Closed, closed...)
	}
	for _, c := range db.sortedCursors(func(c awareness.Cursor) bool { return c.Target == ref }) {
		if !c.Pending() {
			delete(db.cursors, memPair{c.Watcher, c.Target})
			continue
		}
		c.Retired = true
		db.save(c)
	}
	db.dropSession(ref)
	evs := db.events[ref]
	db.eventCount -= int64(len(evs) - 1)
	db.events[ref] = []awareness.Event{evs[len(evs)-1]}
	row := db.sessions[ref]
	row.PrunedThrough, row.CompactionCount, row.Registered = s-1, 0, false
	row.Entry, row.UpdatedAt, row.deleted = awareness.SessionEntry{}, now, true
}

// dropSession deletes a session's upstream link, prompts and acknowledgement records
// (as target, and as watcher for an agent-qualified key).
func (db *memDB) dropSession(ref awareness.SessionRef) {
	qualified := ref.Qualified()
	delete(db.links, ref)
	delete(db.prompts, ref)
	db.acks = slices.DeleteFunc(db.acks, func(r awareness.AckRecord) bool {
		return r.Target == ref || qualified && r.Watcher == ref.Key
	})
}

// material applies op's notifying event to one watcher's cursor (NTC-2).
func (db *memDB) material(op *awareness.AppendOp, cur *awareness.Cursor, watcher string, now time.Time) {
	ev := op.Event
	if cur != nil && !cur.Selects(ev.Kind) {
		return // outside the cursor's selection: moves nothing (LIF-3)
	}
	next, changed, opened := awareness.ApplyMaterial(cur, watcher, ev.Session, ev.Sequence, ev.ActorID, now)
	if changed {
		next = db.born(next)
		db.save(next)
	}
	if opened {
		if n, ok := awareness.NoticeOf(next); ok {
			op.Opened = append(op.Opened, n)
		}
	}
}

func (s *memStore) ReadChanges(ctx context.Context, ref awareness.SessionRef, after int64, limit int) (awareness.Changes, error) {
	ch, _, err := s.ReadStatus(ctx, ref, after, limit)
	return ch, err
}

func (s *memStore) ReadStatus(ctx context.Context, ref awareness.SessionRef, after int64, limit int) (awareness.Changes, *awareness.Session, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return awareness.Changes{}, nil, err
	}
	defer db.mu.Unlock()
	ch := awareness.Changes{Head: awareness.Head{Session: ref, Generation: 1}, Events: []awareness.Event{}}
	row := db.sessions[ref]
	if row != nil {
		ch.Head.Version, ch.Head.PrunedThrough, ch.Head.UpdatedAt = row.StateVersion, row.PrunedThrough, row.UpdatedAt
		ch.Head.Generation = row.generation
	}
	ch.Earliest = ch.Head.PrunedThrough + 1
	evs := db.events[ref]
	if len(evs) > 0 {
		ch.Earliest = evs[0].Sequence
	}
	for _, e := range evs {
		if e.Sequence <= after {
			continue
		}
		if len(ch.Events) == max(limit, 0) {
			ch.More = true
			break
		}
		ch.Events = append(ch.Events, e)
	}
	var sess *awareness.Session
	if row != nil && !row.deleted {
		v := cloneSession(row.Session)
		sess = &v
	}
	return ch, sess, nil
}

// cloneSession copies what a caller could change through a Session's pointers.
func cloneSession(s awareness.Session) awareness.Session {
	if s.Entry.Extra != nil {
		s.Entry.Extra = maps.Clone(s.Entry.Extra)
	}
	return s
}

// ---------------------------------------------------------------------------------------
// Sessions

func (s *memStore) Session(ctx context.Context, ref awareness.SessionRef) (awareness.Session, bool, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return awareness.Session{}, false, err
	}
	defer db.mu.Unlock()
	row := db.sessions[ref]
	if row == nil || row.deleted {
		return awareness.Session{}, false, nil
	}
	return cloneSession(row.Session), true, nil
}

func (s *memStore) ListSessions(ctx context.Context, q awareness.SessionQuery) ([]awareness.Session, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	var out []awareness.Session
	for ref, row := range db.sessions {
		switch {
		case row.deleted,
			q.AgentID != "" && ref.AgentID != q.AgentID,
			len(q.Kinds) > 0 && !slices.Contains(q.Kinds, row.Kind),
			!q.UpdatedSince.IsZero() && row.UpdatedAt.Before(q.UpdatedSince),
			!strings.HasPrefix(ref.Key, q.KeyPrefix),
			q.After != nil && refOrder(ref, *q.After) <= 0:
			continue
		}
		out = append(out, cloneSession(row.Session))
	}
	slices.SortFunc(out, func(a, b awareness.Session) int { return refOrder(a.Ref, b.Ref) })
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[:q.Limit]
	}
	return out, nil
}

func (s *memStore) DeleteSession(ctx context.Context, ref awareness.SessionRef, now time.Time) (*awareness.AppendOp, []awareness.Notice, error) {
	if err := awareness.CheckClock("DeleteSession", now); err != nil {
		return nil, nil, err
	}
	op, err := awareness.LifecycleOp(ref, awareness.Deleted, now)
	if err != nil {
		return nil, nil, err
	}
	db, err := s.write(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer db.mu.Unlock()
	if row := db.sessions[ref]; row != nil && !row.deleted {
		db.append(op) // the deleted event's append does the rest (LIF-1)
		return op, nil, nil
	}
	qualified := ref.Qualified()
	_, closed := db.deleteCursors(func(c awareness.Cursor) bool {
		return c.Target == ref || qualified && c.Watcher == ref.Key
	})
	db.dropSession(ref)
	return nil, closed, nil
}

// ---------------------------------------------------------------------------------------
// Cursors

func (s *memStore) Watch(ctx context.Context, watcher string, target awareness.SessionRef, kinds awareness.KindSelection, now time.Time) (awareness.Cursor, bool, error) {
	if err := awareness.CheckClock("Watch", now); err != nil {
		return awareness.Cursor{}, false, err
	}
	db, err := s.write(ctx)
	if err != nil {
		return awareness.Cursor{}, false, err
	}
	defer db.mu.Unlock()
	c, created := awareness.WatchCursor(db.cursor(watcher, target), watcher, target, db.head(target), norm(now))
	if created {
		c = db.born(c)
	}
	if kinds != "" {
		c.Kinds = kinds
	}
	if created || kinds != "" {
		db.save(c)
	}
	return c, created, nil
}

func (s *memStore) Unwatch(ctx context.Context, watcher string, target awareness.SessionRef) (bool, []awareness.Notice, error) {
	db, err := s.write(ctx)
	if err != nil {
		return false, nil, err
	}
	defer db.mu.Unlock()
	n, closed := db.deleteCursors(func(c awareness.Cursor) bool { return c.Watcher == watcher && c.Target == target })
	return n > 0, closed, nil
}

func (s *memStore) Ack(ctx context.Context, req awareness.AckRequest) (awareness.AckResult, error) {
	if err := awareness.CheckClock("Ack", req.Now); err != nil {
		return awareness.AckResult{}, err
	}
	db, err := s.write(ctx)
	if err != nil {
		return awareness.AckResult{}, err
	}
	defer db.mu.Unlock()
	now := norm(req.Now)
	defer db.dropRetired(req.Watcher)
	if req.Exact != nil {
		if err := awareness.CheckAckGeneration(req.Exact, db.watcherGen(req.Watcher)); err != nil {
			return awareness.AckResult{}, err
		}
		named := map[awareness.SessionRef]bool{}
		for _, e := range req.Exact {
			named[e.Target] = true
		}
		curs := db.sortedCursors(func(c awareness.Cursor) bool { return c.Watcher == req.Watcher && named[c.Target] })
		changed, res := awareness.AckNamed(req.Watcher, curs, req.Exact, now)
		for _, c := range changed {
			db.save(c)
		}
		db.addAcks(req, res)
		return res, nil
	}
	var res awareness.AckResult
	for _, c := range db.sortedCursors(func(c awareness.Cursor) bool {
		return c.Watcher == req.Watcher && c.Pending() && (req.Targets == nil || slices.Contains(req.Targets, c.Target))
	}) {
		next, changed, opened := awareness.AckCursor(c, now)
		if !changed {
			continue
		}
		db.save(next)
		if n, ok := awareness.NoticeOf(c); ok {
			res.Closed = append(res.Closed, awareness.ClosedNotice(n))
		}
		if n, ok := awareness.NoticeOf(next); ok && opened {
			res.Opened = append(res.Opened, n)
		}
	}
	db.addAcks(req, res)
	return res, nil
}

// dropRetired deletes the watcher's retired cursors with nothing pending (LIF-1).
func (db *memDB) dropRetired(watcher string) {
	for _, c := range db.sortedCursors(func(c awareness.Cursor) bool { return c.Watcher == watcher && c.Retired && !c.Pending() }) {
		delete(db.cursors, memPair{c.Watcher, c.Target})
	}
}

// addAcks adds an acknowledgement's records to the history.
func (db *memDB) addAcks(req awareness.AckRequest, res awareness.AckResult) {
	for _, r := range awareness.AckRecords(req, res) {
		db.ackID++
		r.ID, r.AckedAt, r.OpenedAt = db.ackID, norm(r.AckedAt), norm(r.OpenedAt)
		db.acks = append(db.acks, r)
	}
}

func (s *memStore) AckHistory(ctx context.Context, q awareness.AckHistoryQuery) ([]awareness.AckRecord, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	var out []awareness.AckRecord
	for _, r := range slices.Backward(db.acks) {
		switch {
		case q.Before > 0 && r.ID >= q.Before,
			q.Watcher != "" && r.Watcher != q.Watcher,
			q.WatcherAgent != "" && !strings.HasPrefix(r.Watcher, "agent:"+q.WatcherAgent+":"),
			q.Target != nil && r.Target != *q.Target,
			q.TargetAgents != nil && !slices.Contains(q.TargetAgents, r.Target.AgentID):
			continue
		}
		out = append(out, r)
		if q.Limit > 0 && len(out) == q.Limit {
			break
		}
	}
	return out, nil
}

func (s *memStore) Spawns(ctx context.Context, agentID string) ([]awareness.Spawn, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	var out []awareness.Spawn
	for ref, evs := range db.events {
		if agentID != "" && ref.AgentID != agentID {
			continue
		}
		for _, e := range evs {
			if e.Kind == awareness.ChildSpawned && e.ActorID != "" && strings.HasPrefix(e.ActorID, "agent:") {
				out = append(out, awareness.Spawn{Child: ref, Parent: e.ActorID})
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b awareness.Spawn) int { return refOrder(a.Child, b.Child) })
	return out, nil
}

func (s *memStore) Cursors(ctx context.Context, q awareness.CursorQuery) ([]awareness.Cursor, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	return db.sortedCursors(func(c awareness.Cursor) bool {
		return (q.Watcher == "" || c.Watcher == q.Watcher) && (q.TargetAgent == "" || c.Target.AgentID == q.TargetAgent) &&
			(q.TargetKey == "" || c.Target.Key == q.TargetKey)
	}), nil
}

func (s *memStore) Pending(ctx context.Context, watcher string) ([]awareness.Notice, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	return db.pending(watcher), nil
}

func (db *memDB) pending(watcher string) []awareness.Notice {
	out := []awareness.Notice{}
	for _, c := range db.cursors {
		if n, ok := awareness.NoticeOf(c); ok && (watcher == "" || c.Watcher == watcher) {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, pendingOrder)
	return out
}

func (s *memStore) ResetWatcher(ctx context.Context, watcher string) (int64, []awareness.Notice, error) {
	db, err := s.write(ctx)
	if err != nil {
		return 0, nil, err
	}
	defer db.mu.Unlock()
	n, closed := db.deleteCursors(func(c awareness.Cursor) bool { return c.Watcher == watcher })
	return n, closed, nil
}

func (s *memStore) Sweep(ctx context.Context, now time.Time, opened func([]awareness.Notice)) (int, error) {
	if err := awareness.CheckClock("Sweep", now); err != nil {
		return 0, err
	}
	db, err := s.write(ctx)
	if err != nil {
		return 0, err
	}
	var all []awareness.Notice
	for _, c := range db.sortedCursors(func(c awareness.Cursor) bool { return true }) {
		if next, ok := awareness.SweepCursor(c, norm(now)); ok {
			db.save(next)
			if n, ok := awareness.NoticeOf(next); ok {
				all = append(all, n)
			}
		}
	}
	db.mu.Unlock()
	for page := range slices.Chunk(all, awareness.SweepPage) {
		opened(page)
	}
	return len(all), nil
}

// ---------------------------------------------------------------------------------------
// Retention and health

func (s *memStore) Prune(ctx context.Context, p awareness.RetentionPolicy, now time.Time) (awareness.PruneResult, error) {
	if err := awareness.CheckClock("Prune", now); err != nil {
		return awareness.PruneResult{}, err
	}
	db, err := s.write(ctx)
	if err != nil {
		return awareness.PruneResult{}, err
	}
	defer db.mu.Unlock()
	now = norm(now)
	var res awareness.PruneResult
	stamped := map[awareness.SessionRef]bool{}
	// cut prunes a session's log through sequence seq, stamping its watermark first.
	cut := func(ref awareness.SessionRef, seq int64) {
		if row := db.sessions[ref]; row != nil && row.PrunedThrough < seq {
			row.PrunedThrough = seq
			if !stamped[ref] {
				stamped[ref] = true
				res.SessionsStamped++
			}
		}
		evs := db.events[ref]
		i, _ := slices.BinarySearchFunc(evs, seq+1, func(e awareness.Event, s int64) int { return cmp.Compare(e.Sequence, s) })
		db.events[ref] = slices.Clone(evs[i:])
		res.EventsDeleted += int64(i)
		db.eventCount -= int64(i)
	}
	if p.MaxAge > 0 {
		for ref, evs := range db.events {
			var last int64
			for _, e := range evs {
				if e.OccurredAt.Before(now.Add(-p.MaxAge)) {
					last = e.Sequence
				}
			}
			if last > 0 {
				cut(ref, last)
			}
		}
	}
	if excess := db.eventCount - int64(p.MaxRows); p.MaxRows > 0 && excess > 0 {
		var all []awareness.Event
		for _, evs := range db.events {
			all = append(all, evs...)
		}
		slices.SortFunc(all, func(a, b awareness.Event) int {
			return cmp.Or(a.RecordedAt.Compare(b.RecordedAt), refOrder(a.Session, b.Session), cmp.Compare(a.Sequence, b.Sequence))
		})
		cuts := map[awareness.SessionRef]int64{}
		for _, e := range all[:excess] {
			cuts[e.Session] = max(cuts[e.Session], e.Sequence)
		}
		for ref, seq := range cuts {
			cut(ref, seq)
		}
	}
	before := len(db.acks)
	if p.MaxAge > 0 {
		db.acks = slices.DeleteFunc(db.acks, func(r awareness.AckRecord) bool { return r.AckedAt.Before(now.Add(-p.MaxAge)) })
	}
	if p.MaxRows > 0 && len(db.acks) > p.MaxRows {
		db.acks = slices.Clone(db.acks[len(db.acks)-p.MaxRows:])
	}
	res.AcksDeleted = int64(before - len(db.acks))
	switch {
	case p.CursorTTL == 0:
	case !db.lastExpiry.IsZero() && p.ExpireEvery > 0 && now.Sub(db.lastExpiry) < p.ExpireEvery:
		res.ExpirySkipped = true
	default:
		res.CursorsExpired, res.Closed = db.deleteCursors(func(c awareness.Cursor) bool {
			return c.UpdatedAt.Before(now.Add(-p.CursorTTL))
		})
		for p := range db.holds { // the holds of pairs without a cursor go with the expiry
			if _, ok := db.cursors[p]; !ok {
				delete(db.holds, p)
			}
		}
		db.lastExpiry = now
	}
	db.lastPrune = now
	return res, nil
}

func (s *memStore) Stats(ctx context.Context) (awareness.Stats, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return awareness.Stats{}, err
	}
	defer db.mu.Unlock()
	var st awareness.Stats
	for _, row := range db.sessions {
		if !row.deleted {
			st.Sessions++
		}
	}
	for _, evs := range db.events {
		for _, e := range evs {
			st.Events++
			if st.OldestEvent == nil || e.OccurredAt.Before(*st.OldestEvent) {
				t := e.OccurredAt
				st.OldestEvent = &t
			}
		}
	}
	for _, c := range db.cursors {
		st.Cursors++
		if c.Pending() {
			st.PendingNotices++
		}
	}
	if !db.lastPrune.IsZero() {
		t := db.lastPrune
		st.LastPruneAt = &t
	}
	return st, nil
}

func (s *memStore) Activity(ctx context.Context, q awareness.ActivityQuery) ([]awareness.ActivityBucket, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	type bucket struct {
		minute int64
		kind   awareness.EventKind
	}
	counts := map[bucket]int64{}
	for ref, evs := range db.events {
		if q.Session != nil && ref != *q.Session || q.AgentID != "" && ref.AgentID != q.AgentID {
			continue
		}
		for _, e := range evs {
			if !e.OccurredAt.Before(q.Since) && e.OccurredAt.Before(q.Until) {
				counts[bucket{e.OccurredAt.UnixNano() / int64(time.Minute), e.Kind}]++
			}
		}
	}
	var out []awareness.ActivityBucket
	for b, n := range counts {
		out = append(out, awareness.ActivityBucket{Minute: time.Unix(0, b.minute*int64(time.Minute)).UTC(), Kind: b.kind, Count: n})
	}
	slices.SortFunc(out, func(a, b awareness.ActivityBucket) int {
		return cmp.Or(a.Minute.Compare(b.Minute), strings.Compare(string(a.Kind), string(b.Kind)))
	})
	return out, nil
}

func (s *memStore) Digests(ctx context.Context, ranges []awareness.DigestRange) ([]awareness.NoticeDigest, error) {
	if err := awareness.CheckDigestRanges(ranges); err != nil {
		return nil, err
	}
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	out := make([]awareness.NoticeDigest, len(ranges))
	for i, r := range ranges {
		out[i] = awareness.DigestOf(r, db.events[r.Target])
	}
	return out, nil
}

func (s *memStore) Ping(context.Context) error {
	if s.closed.Load() {
		return awareness.Unavailable(errMemClosed)
	}
	return nil
}

func (s *memStore) Close() error {
	s.closed.Store(true)
	return nil
}

// ---------------------------------------------------------------------------------------
// Registry

func (s *memStore) UpsertSessions(ctx context.Context, ws []awareness.SessionWrite, now time.Time) ([]awareness.Session, error) {
	if err := awareness.CheckSessionWrites(ws, now); err != nil {
		return nil, err
	}
	if len(ws) == 0 {
		return nil, nil
	}
	db, err := s.write(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	now = norm(now)
	// Merge into copies first; write them only when every write merged.
	rows := map[awareness.SessionRef]awareness.RegistryRow{}
	out := make([]awareness.Session, 0, len(ws))
	for _, w := range ws {
		row, ok := rows[w.Ref]
		if !ok {
			if cur := db.sessions[w.Ref]; cur != nil {
				row = awareness.RegistryRow{Session: cloneSession(cur.Session), Deleted: cur.deleted}
			} else {
				row = awareness.RegistryRow{Session: awareness.Session{Ref: w.Ref, CreatedAt: now, UpdatedAt: now}, New: true}
			}
		}
		next, err := awareness.MergeSessionWrite(row, w, now)
		if err != nil {
			return nil, err
		}
		rows[w.Ref] = next
		out = append(out, cloneSession(next.Session))
	}
	for ref, row := range rows {
		db.sessions[ref] = &memSession{Session: row.Session}
	}
	return out, nil
}

func (s *memStore) RecordMemoryFlush(ctx context.Context, ref awareness.SessionRef, now time.Time) (awareness.Session, bool, error) {
	if err := awareness.CheckClock("RecordMemoryFlush", now); err != nil {
		return awareness.Session{}, false, err
	}
	db, err := s.write(ctx)
	if err != nil {
		return awareness.Session{}, false, err
	}
	defer db.mu.Unlock()
	row := db.sessions[ref]
	if row == nil || row.deleted || !row.Registered {
		return awareness.Session{}, false, nil
	}
	at, count := norm(now), row.CompactionCount
	row.Entry.MemoryFlushAt, row.Entry.MemoryFlushCompactionCount = &at, &count
	return cloneSession(row.Session), true, nil
}

// ---------------------------------------------------------------------------------------
// Upstream links

func (s *memStore) AdoptUpstream(ctx context.Context, l awareness.UpstreamLink, now time.Time) (awareness.UpstreamLink, bool, error) {
	if err := awareness.CheckClock("AdoptUpstream", now); err != nil {
		return awareness.UpstreamLink{}, false, err
	}
	if err := awareness.CheckUpstreamLink(l); err != nil {
		return awareness.UpstreamLink{}, false, err
	}
	db, err := s.write(ctx)
	if err != nil {
		return awareness.UpstreamLink{}, false, err
	}
	defer db.mu.Unlock()
	var cur *awareness.UpstreamLink
	if c, ok := db.links[l.Session]; ok {
		cur = &c
	}
	next, created := awareness.AdoptLink(cur, l, norm(now))
	db.links[l.Session] = next
	return next, created, nil
}

func (s *memStore) UpstreamLink(ctx context.Context, ref awareness.SessionRef) (awareness.UpstreamLink, bool, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return awareness.UpstreamLink{}, false, err
	}
	defer db.mu.Unlock()
	l, ok := db.links[ref]
	return l, ok, nil
}

func (s *memStore) UpstreamLinks(ctx context.Context, q awareness.UpstreamQuery) ([]awareness.UpstreamLink, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	var out []awareness.UpstreamLink
	for ref, l := range db.links {
		if q.AgentID != "" && ref.AgentID != q.AgentID || q.Watched && !db.watched(ref) {
			continue
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b awareness.UpstreamLink) int {
		return cmp.Or(strings.Compare(a.CatalogID, b.CatalogID), refOrder(a.Session, b.Session))
	})
	return out, nil
}

// watched reports whether a cursor targets ref.
func (db *memDB) watched(ref awareness.SessionRef) bool {
	for p := range db.cursors {
		if p.target == ref {
			return true
		}
	}
	return false
}

func (s *memStore) SettleUpstream(ctx context.Context, checks []awareness.UpstreamCheck) ([]bool, error) {
	if err := awareness.CheckUpstreamChecks(checks); err != nil {
		return nil, err
	}
	applied := make([]bool, len(checks))
	if len(checks) == 0 {
		return applied, nil
	}
	db, err := s.write(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	for i, c := range checks {
		cur, ok := db.links[c.Expect.Session]
		if !ok || !c.Applies(cur) {
			continue
		}
		cur.Marker, cur.ConsecutiveMisses, cur.LastCheckedAt, cur.BlockedReason = c.Marker, c.ConsecutiveMisses, norm(c.CheckedAt), c.BlockedReason
		db.links[c.Expect.Session] = cur
		applied[i] = true
	}
	return applied, nil
}

func (s *memStore) UpstreamRecordedEnd(ctx context.Context, ref awareness.SessionRef, linkID string, start int64) (int64, bool, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return 0, false, err
	}
	defer db.mu.Unlock()
	prefix := awareness.UpstreamDedupePrefix(linkID, start)
	var (
		end   int64
		found bool
	)
	for _, e := range db.events[ref] {
		if end1, ok := awareness.ParseUpstreamDedupeEnd(e.DedupeKey, prefix); ok && end1 > start && (!found || end1 > end) {
			end, found = end1, true
		}
	}
	return end, found, nil
}

func (s *memStore) RemoveUpstream(ctx context.Context, expect awareness.UpstreamLink) (bool, error) {
	db, err := s.write(ctx)
	if err != nil {
		return false, err
	}
	defer db.mu.Unlock()
	cur, ok := db.links[expect.Session]
	if !ok || cur.ID != expect.ID || !cur.UpdatedAt.Equal(expect.UpdatedAt) {
		return false, nil
	}
	delete(db.links, expect.Session)
	return true, nil
}

func (s *memStore) ForgetUnwatchedMisses(ctx context.Context) (int64, error) {
	db, err := s.write(ctx)
	if err != nil {
		return 0, err
	}
	defer db.mu.Unlock()
	var n int64
	for ref, l := range db.links {
		if l.ConsecutiveMisses > 0 && !db.watched(ref) {
			l.ConsecutiveMisses = 0
			db.links[ref] = l
			n++
		}
	}
	return n, nil
}

func (s *memStore) UpstreamSalt(ctx context.Context) ([]byte, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	if db.salt == nil {
		db.salt = make([]byte, 32)
		if _, err := rand.Read(db.salt); err != nil {
			db.salt = nil
			return nil, awareness.Internal(err)
		}
	}
	return slices.Clone(db.salt), nil
}

func (s *memStore) AddOwnPrompt(ctx context.Context, ref awareness.SessionRef, hash string, now time.Time, keep int) (bool, error) {
	if err := awareness.CheckOwnPrompt(hash, now, keep); err != nil {
		return false, err
	}
	db, err := s.write(ctx)
	if err != nil {
		return false, err
	}
	defer db.mu.Unlock()
	if _, ok := db.links[ref]; !ok {
		return false, nil
	}
	ps := append(db.prompts[ref], hash)
	db.prompts[ref] = slices.Clone(ps[max(0, len(ps)-keep):])
	return true, nil
}

func (s *memStore) OwnPrompts(ctx context.Context, ref awareness.SessionRef) ([]string, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	return slices.Clone(db.prompts[ref]), nil
}

// ---------------------------------------------------------------------------------------
// Notice holds (RDL-1, RDL-2)

var _ awareness.HoldStore = (*memStore)(nil)

func (s *memStore) UpdateHolds(ctx context.Context, q awareness.HoldQuery, fn func([]awareness.HoldView) ([]awareness.NoticeHold, error)) error {
	db, err := s.write(ctx)
	if err != nil {
		return err
	}
	defer db.mu.Unlock()
	if db.holds == nil {
		db.holds = map[memPair]awareness.NoticeHold{}
	}
	var vs []awareness.HoldView
	seen := map[memPair]bool{}
	view := func(p memPair, h awareness.NoticeHold) {
		v := awareness.HoldView{Hold: h}
		if c, ok := db.cursors[p]; ok {
			v.Cursor = &c
		}
		vs = append(vs, v)
		seen[p] = true
	}
	for p, h := range db.holds {
		if q.Watcher != "" && p.watcher == q.Watcher || q.Watcher == "" && !h.DueAt.IsZero() && !h.DueAt.After(q.DueBy) {
			view(p, h)
		}
	}
	if q.Watcher != "" {
		for p, c := range db.cursors {
			if p.watcher == q.Watcher && c.Pending() && !seen[p] {
				view(p, awareness.NoticeHold{Watcher: p.watcher, Target: p.target, MaxRedeliver: awareness.DefaultMaxRedeliver})
			}
		}
	}
	slices.SortFunc(vs, func(a, b awareness.HoldView) int {
		return cmp.Or(strings.Compare(a.Hold.Watcher, b.Hold.Watcher), refOrder(a.Hold.Target, b.Hold.Target))
	})
	write, err := fn(vs)
	if err != nil {
		return err
	}
	for _, h := range write {
		h.DrainedAt, h.SnoozedUntil, h.DueAt = norm(h.DrainedAt), norm(h.SnoozedUntil), norm(h.DueAt)
		db.holds[memPair{h.Watcher, h.Target}] = h
	}
	return nil
}

func (s *memStore) Holds(ctx context.Context, watcher string) ([]awareness.NoticeHold, error) {
	db, err := s.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer db.mu.Unlock()
	var out []awareness.NoticeHold
	for p, h := range db.holds {
		c, ok := db.cursors[p]
		if (watcher == "" || p.watcher == watcher) && h.N != 0 && ok && c.N == h.N && c.Pending() {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b awareness.NoticeHold) int {
		return cmp.Or(strings.Compare(a.Watcher, b.Watcher), refOrder(a.Target, b.Target))
	})
	return out, nil
}
