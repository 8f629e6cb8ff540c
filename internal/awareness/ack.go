package awareness

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// AckOutcome is what an exact acknowledgement did with one named notice (NTC-3).
type AckOutcome string

// The outcomes of a named notice (acknowledgeNotices).
const (
	// AckAcknowledged: this call acknowledged the notice (L := N); a follow-up opened
	// when M > N.
	AckAcknowledged AckOutcome = "acknowledged"
	// AckAlreadyAcknowledged: the pair's L is at or past the named version, so the
	// notice was acknowledged before; nothing changed.
	AckAlreadyAcknowledged AckOutcome = "alreadyAcknowledged"
	// AckSuperseded: the pair's pending notice is another one, and the named one was
	// never acknowledged; nothing changed.
	AckSuperseded AckOutcome = "superseded"
	// AckNotPending: the pair has no cursor, or nothing pending and the named version
	// was never acknowledged; nothing changed.
	AckNotPending AckOutcome = "notPending"
)

// NoticeAck is the answer about one named notice of an exact acknowledgement.
type NoticeAck struct {
	Watcher         string
	Target          SessionRef
	NotifiedVersion int64
	Outcome         AckOutcome
	// FollowUp is, with AckAcknowledged, the notice that opened for the changes after
	// N (NTC-3); nil when none did.
	FollowUp *Notice
	// Pending is, with AckAlreadyAcknowledged or AckSuperseded, the pair's pending
	// notice after the call; nil when none.
	Pending *Notice
	// Dismissed is true when dismissNotice acknowledged the notice without
	// reconciling (RDL-2).
	Dismissed bool
}

// TargetKey and TargetAgentID spell the target as the API does (see Event.OptActorID).
func (a *NoticeAck) TargetKey() string { return a.Target.Key }

// TargetAgentID returns the agent of the named notice's target.
func (a *NoticeAck) TargetAgentID() string { return a.Target.AgentID }

// AckNamed is the exact form of an acknowledgement (NTC-3) over one watcher's cursors:
// curs are the watcher's cursors on the named targets, in any state (a pair without a
// cursor is absent), and named the notices the watcher's turn consumed, in the order
// it named them. Each named notice is acknowledged (AckCursor) only while it is still
// its pair's pending notice; a follow-up the call itself opened is never acknowledged
// by it, since no turn can have seen it. It returns the cursors to write, in
// primary-key order, and the result: one NoticeAck per named notice in order (Acks),
// and the notices closed and opened, each in (target agent, target key) order, their
// texts naming the default tool (NoticeTool.AckNamed names a deployment's).
func AckNamed(watcher string, curs []Cursor, named []AckTarget, now time.Time) (changed []Cursor, res AckResult) {
	return NoticeTool("").AckNamed(watcher, curs, named, now)
}

// AckNamed is AckNamed with the notices' texts naming t (NTC-1).
func (t NoticeTool) AckNamed(watcher string, curs []Cursor, named []AckTarget, now time.Time) (changed []Cursor, res AckResult) {
	state := make(map[SessionRef]*Cursor, len(curs))
	for i := range curs {
		c := curs[i]
		state[c.Target] = &c
	}
	openedHere := map[SessionRef]bool{}
	dirty := map[SessionRef]bool{}
	acks := make([]NoticeAck, len(named))
	for i, n := range named {
		a := NoticeAck{Watcher: watcher, Target: n.Target, NotifiedVersion: n.NotifiedVersion, Outcome: AckNotPending}
		c := state[n.Target]
		switch {
		case c == nil:
		case c.Pending() && c.N == n.NotifiedVersion && !openedHere[n.Target]:
			before := *c
			next, _, opened := AckCursor(before, now)
			*c = next
			dirty[n.Target] = true
			a.Outcome = AckAcknowledged
			if closed, ok := t.Notice(before); ok {
				res.Closed = append(res.Closed, ClosedNotice(closed))
			}
			if follow, ok := t.Notice(next); ok && opened {
				openedHere[n.Target] = true
				res.Opened = append(res.Opened, follow)
				a.FollowUp = &follow
			}
		case c.L >= n.NotifiedVersion:
			a.Outcome = AckAlreadyAcknowledged
		case c.Pending():
			a.Outcome = AckSuperseded
		}
		acks[i] = a
	}
	for i := range acks {
		a := &acks[i]
		if a.Outcome != AckAlreadyAcknowledged && a.Outcome != AckSuperseded {
			continue
		}
		if p, ok := t.Notice(*state[a.Target]); ok {
			a.Pending = &p
		}
	}
	for t := range dirty {
		changed = append(changed, *state[t])
	}
	slices.SortFunc(changed, func(a, b Cursor) int { return targetOrder(a.Target, b.Target) })
	byTarget := func(a, b Notice) int { return targetOrder(a.Target, b.Target) }
	slices.SortFunc(res.Closed, byTarget)
	slices.SortFunc(res.Opened, byTarget)
	res.Acks = acks
	return changed, res
}

// targetOrder orders session references by (agent, key).
func targetOrder(a, b SessionRef) int {
	return cmp.Or(strings.Compare(a.AgentID, b.AgentID), strings.Compare(a.Key, b.Key))
}
