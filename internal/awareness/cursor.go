package awareness

import "time"

// Cursor is one watcher's position on one target (WAT-1). All three watermarks are
// sequences of the target, with L ≤ N ≤ M:
//
//   - L, LastAcked: the watcher has been told about, and consumed, changes up to and
//     including L. Its notices say `changesSince L`.
//   - N, Notified: the frozen watermark the pending notice covers; N > L means a
//     notice is pending.
//   - M, Material: the latest notifying event by another actor.
//
// The transitions below are pure; stores apply them inside their write transactions
// so that a notice is never published before its cursor row commits (NTC-7).
type Cursor struct {
	Watcher   string
	Target    SessionRef
	L, N, M   int64
	OpenedAt  time.Time // when the pending notice opened; zero when none is pending
	UpdatedAt time.Time
	// TargetGeneration is the target's generation the cursor follows, WatcherGeneration
	// the watcher's generation that holds it (LIF-2); both start at 1. The transitions
	// below keep them; a store sets them when it creates a cursor, 0 standing for 1
	// until then, and ResetCursor moves TargetGeneration on a reset of the target.
	// A reset of the watcher deletes its cursors (WAT-5), so WatcherGeneration never
	// changes on a stored cursor.
	TargetGeneration, WatcherGeneration int64
	// Retired is set on the cursors of a deleted target (LIF-1): a retired cursor
	// takes no further event; its pending notice, the deletion's, stays until it is
	// acknowledged, and the cursor is deleted once nothing is pending.
	Retired bool
	// Kinds is the selection of kinds that open a notice for this cursor (LIF-3);
	// "" is the default selection, DefaultWatchKinds.
	Kinds KindSelection
}

// Pending reports whether a notice is pending: N > L.
func (c Cursor) Pending() bool { return c.N > c.L }

// Valid reports whether the invariant L ≤ N ≤ M holds.
func (c Cursor) Valid() bool { return 0 <= c.L && c.L <= c.N && c.N <= c.M }

// SeedCursor applies a child_spawned event at sequence s naming the watcher (WAT-2).
// An absent cursor is created synced at s. A synced cursor moves to s. A cursor with
// a pending notice is left alone: a repeated spawn never swallows a notice, where
// OpenClaw overwrites it (reference §3.2). changed is false when nothing is to be
// written.
func SeedCursor(cur *Cursor, watcher string, target SessionRef, s int64, now time.Time) (next Cursor, changed bool) {
	if cur == nil {
		return Cursor{Watcher: watcher, Target: target, L: s, N: s, M: s, UpdatedAt: now}, true
	}
	if cur.Pending() || cur.L >= s {
		return *cur, false
	}
	next = *cur
	next.L, next.N, next.M = s, s, s
	next.OpenedAt = time.Time{}
	next.UpdatedAt = now
	return next, true
}

// ApplyMaterial applies a notifying event at sequence s to the watcher's cursor
// (NTC-2). cur is nil when the watcher holds no cursor yet; the caller only passes nil
// for producer-passed watchers (WAT-4), which start at L = 0. actorID equal to the
// watcher suppresses the event for that watcher: changed and opened are false.
// Otherwise M := s and, when no notice is pending, N := s and a notice opens.
func ApplyMaterial(cur *Cursor, watcher string, target SessionRef, s int64, actorID string, now time.Time) (next Cursor, changed, opened bool) {
	if actorID != "" && actorID == watcher {
		if cur == nil {
			return Cursor{}, false, false
		}
		return *cur, false, false
	}
	if cur == nil {
		next = Cursor{Watcher: watcher, Target: target}
	} else {
		next = *cur
	}
	if s <= next.M {
		// An older or equal sequence can never move a watermark back.
		return next, false, false
	}
	next.M = s
	if next.N == next.L {
		next.N = s
		next.OpenedAt = now
		opened = true
	}
	next.UpdatedAt = now
	return next, true, opened
}

// AckCursor acknowledges a drained notice (NTC-3): L := N, the frozen watermark,
// never the head. When events arrived after the notice opened, M > N, exactly one
// follow-up opens: N := M. Acknowledging a cursor with nothing pending changes nothing.
func AckCursor(cur Cursor, now time.Time) (next Cursor, changed, opened bool) {
	if !cur.Pending() {
		return cur, false, false
	}
	next = cur
	next.L = cur.N
	next.OpenedAt = time.Time{}
	if next.M > next.N {
		next.N = next.M
		next.OpenedAt = now
		opened = true
	}
	next.UpdatedAt = now
	return next, true, opened
}

// AckExact is the exact form of AckCursor (NTC-3): it acknowledges the drained notice
// only while it is still the cursor's pending notice. notified is the NotifiedVersion
// N of the notice the watcher consumed. A cursor whose pending notice is another one,
// a follow-up or a notice opened after the drain, or that has nothing pending is left
// alone. N names a notice of a pair uniquely: a new notice freezes N at a sequence
// above every earlier one, and sequences are never reused (SIG-3).
func AckExact(cur Cursor, notified int64, now time.Time) (next Cursor, changed, opened bool) {
	if !cur.Pending() || cur.N != notified {
		return cur, false, false
	}
	return AckCursor(cur, now)
}

// SweepCursor is the startup sweep's transition (NTC-5): a cursor with M > N == L
// opens its notice, N := M opened now. No committed write leaves such a cursor
// behind: an append opens the notice of every synced cursor it moves, and an
// acknowledgement opens its follow-up. Every other cursor, a pending one above all,
// is left exactly as it is: a pending notice keeps its N, text, opening time and so
// its ID across restarts, and an exact acknowledgement from before still matches it.
func SweepCursor(cur Cursor, now time.Time) (next Cursor, opened bool) {
	if cur.Pending() || cur.M <= cur.N {
		return cur, false
	}
	next = cur
	next.N = cur.M
	next.OpenedAt = now
	next.UpdatedAt = now
	return next, true
}

// WatchCursor is an explicit watch at the target's current head (WAT-3). An existing
// cursor keeps its state: re-watching never clobbers a pending notice.
func WatchCursor(cur *Cursor, watcher string, target SessionRef, head int64, now time.Time) (next Cursor, created bool) {
	if cur != nil {
		return *cur, false
	}
	return Cursor{Watcher: watcher, Target: target, L: head, N: head, M: head, UpdatedAt: now}, true
}

// ResetCursor applies a reset of the target at sequence s (LIF-2): the target's new
// incarnation has generation gen. A pending notice closes, and closed is true for the
// caller to report the cursor as it was. When the watcher selects reset (LIF-3) and is
// not the event's actor, the cursor opens one notice for the new incarnation, the
// reset itself: L := s−1, N = M := s. Otherwise it moves to the event with nothing
// pending: L = N = M := s. A retired cursor is left alone.
func ResetCursor(cur Cursor, s int64, actorID string, gen int64, now time.Time) (next Cursor, closed, opened bool) {
	if cur.Retired || s <= cur.L {
		return cur, false, false
	}
	next = cur
	closed = cur.Pending()
	next.TargetGeneration = gen
	next.UpdatedAt = now
	next.OpenedAt = time.Time{}
	next.L, next.N, next.M = s, s, s
	if (actorID == "" || actorID != cur.Watcher) && cur.Selects(Reset) {
		next.L = s - 1
		next.OpenedAt = now
		opened = true
	}
	return next, closed, opened
}

// TargetKey and TargetAgentID spell the target as the API does; see Event.OptActorID.
func (c *Cursor) TargetKey() string { return c.Target.Key }

// TargetAgentID returns the agent of the cursor's target.
func (c *Cursor) TargetAgentID() string { return c.Target.AgentID }
