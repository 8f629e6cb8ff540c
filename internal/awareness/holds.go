package awareness

import (
	"context"
	"time"
)

// Redelivery and snoozing (RDL-1, RDL-2) keep, per (watcher, target), a NoticeHold:
// the watch's maxRedeliver and what happened to the pair's pending notice beyond
// v1's cursor (it was drained, redelivered, snoozed). A hold's state applies to one
// opening, the notice whose notifiedVersion is N; a new notice of the pair (a larger
// N: sequences are never reused) starts with none, so no hold outlives its notice.
// The holds live beside the cursors, never in them: a cursor's L, N and M, and so
// NTC-1..7, are untouched, and a pair never has two pending notices.

// Redelivery defaults (RDL-1, RDL-2); serve's flags override them.
const (
	// DefaultRedeliverTurns is how many later turns of its watcher (acknowledgements
	// that do not name it) a drained, unacknowledged notice waits before it comes back.
	DefaultRedeliverTurns = 3
	// DefaultRedeliverAfter is how long it waits at most.
	DefaultRedeliverAfter = 10 * time.Minute
	// DefaultMaxRedeliver is a watch's maxRedeliver when its watch names none.
	DefaultMaxRedeliver = 1
	// MaxMaxRedeliver bounds a watch's maxRedeliver.
	MaxMaxRedeliver = 100
	// DefaultMaxSnooze bounds how far ahead snoozeNotice's until may be.
	DefaultMaxSnooze = 7 * 24 * time.Hour
	// DefaultHoldPoll is how often the service wakes the holds that are due.
	DefaultHoldPoll = time.Second
)

// NoticeHold is the redelivery and snooze state of one (watcher, target) pair.
type NoticeHold struct {
	Watcher string
	Target  SessionRef
	// MaxRedeliver is the watch's maxRedeliver: how often one opening may come back.
	MaxRedeliver int
	// N is the notifiedVersion of the notice the fields below describe; 0: none.
	N int64
	// DrainedAt is when the notice was drained and not yet acknowledged, released or
	// redelivered; zero when it is not held as drained.
	DrainedAt time.Time
	// Turns counts the watcher's turns since the drain.
	Turns int
	// Redeliveries is how often notice N came back (at most MaxRedeliver).
	Redeliveries int
	// Deliveries counts the times notice N was handed out again (a redelivery, a
	// snooze that ended): part of the notice's identity (Notice.Delivery), so that a
	// subscriber that had it gets it again.
	Deliveries int
	// SnoozedUntil hides notice N until then; zero when it is not snoozed.
	SnoozedUntil time.Time
	// Dismissed is the notifiedVersion of the pair's last notice dismissed
	// (dismissNotice, RDL-2); 0 when none was.
	Dismissed int64
	// DueAt is when the service must look at the hold again (the snooze ends, the
	// drain's time bound passes); zero when never.
	DueAt time.Time
}

// Of reports whether the hold describes the pending notice n.
func (h NoticeHold) Of(n Notice) bool {
	return h.N != 0 && h.N == n.NotifiedVersion && h.Watcher == n.Watcher && h.Target == n.Target
}

// HoldPolicy is the stated bounds of RDL-1 and RDL-2.
type HoldPolicy struct {
	// RedeliverTurns and RedeliverAfter: a drained notice comes back after this many
	// later turns of its watcher or this long, whichever comes first.
	RedeliverTurns int
	RedeliverAfter time.Duration
	// MaxSnooze bounds snoozeNotice's until.
	MaxSnooze time.Duration
}

// DefaultHoldPolicy is the policy of a service whose configuration names none.
var DefaultHoldPolicy = HoldPolicy{RedeliverTurns: DefaultRedeliverTurns, RedeliverAfter: DefaultRedeliverAfter, MaxSnooze: DefaultMaxSnooze}

// HoldQuery selects holds: a watcher's (Watcher set) or those due by DueBy.
type HoldQuery struct {
	Watcher string
	DueBy   time.Time
}

// HoldView is a hold with its pair's cursor as one transaction read them; Cursor is
// nil when the pair has no cursor. Hold.N is 0 and Hold.MaxRedeliver the default for
// a pair without a hold row.
type HoldView struct {
	Hold   NoticeHold
	Cursor *Cursor
}

// HoldStore is implemented by stores that keep notice holds (RDL-1, RDL-2).
type HoldStore interface {
	// UpdateHolds runs one write transaction: it reads the holds q selects (with
	// Watcher: also a view for each pending cursor of the watcher without a hold row)
	// and their cursors, calls fn with them, and writes every hold fn returns (an
	// upsert by pair). An error from fn rolls back: nothing is written.
	UpdateHolds(ctx context.Context, q HoldQuery, fn func([]HoldView) ([]NoticeHold, error)) error
	// Holds reads the holds of a watcher ("": every watcher) that describe their
	// pair's pending notice (N > 0, the cursor's N, N > L).
	Holds(ctx context.Context, watcher string) ([]NoticeHold, error)
}

// pendingOpening reports whether v's cursor still has notice N pending.
func (v HoldView) pendingOpening() bool {
	return v.Cursor != nil && v.Cursor.Pending() && v.Cursor.N == v.Hold.N && v.Hold.N != 0
}

// Hidden reports whether a pending notice the hold describes is hidden now from
// pendingNotices, the subscriptions and drains: it is snoozed.
func (h NoticeHold) Hidden(now time.Time) bool {
	return !h.SnoozedUntil.IsZero() && now.Before(h.SnoozedUntil)
}

// Held reports whether a drain leaves the notice out: it was drained, is neither
// acknowledged nor released, and waits for its redelivery.
func (h NoticeHold) Held() bool { return !h.DrainedAt.IsZero() }

// DrainHold is a drain of notice n at now (RDL-1): the notice is held until it
// comes back, when the opening may still come back; otherwise (maxRedeliver used
// up, or 0) the drain changes nothing and the next drain hands it out again.
func DrainHold(h NoticeHold, n Notice, p HoldPolicy, now time.Time) (NoticeHold, bool) {
	if h.N != n.NotifiedVersion {
		h = NoticeHold{Watcher: n.Watcher, Target: n.Target, MaxRedeliver: h.MaxRedeliver, N: n.NotifiedVersion}
	}
	if h.Redeliveries >= h.MaxRedeliver || h.Held() {
		return h, false
	}
	h.DrainedAt, h.Turns = now, 0
	h.DueAt = earliest(h.SnoozedUntil, now.Add(p.RedeliverAfter))
	return h, true
}

// Redeliver brings a held notice back (RDL-1): it is handed out again, marked
// redelivered, with a new delivery.
func Redeliver(h NoticeHold) NoticeHold {
	h.DrainedAt, h.Turns = time.Time{}, 0
	h.Redeliveries++
	h.Deliveries++
	h.DueAt = h.SnoozedUntil
	return h
}

// earliest is the earlier of two times, zero ones left out.
func earliest(a, b time.Time) time.Time {
	switch {
	case a.IsZero():
		return b
	case b.IsZero():
		return a
	case b.Before(a):
		return b
	}
	return a
}
