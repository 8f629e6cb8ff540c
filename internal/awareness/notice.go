package awareness

import (
	"strconv"
	"time"
)

// Notice is a pending stale notice (NTC-1..7): the view of a cursor with N > L.
type Notice struct {
	Watcher         string
	Target          SessionRef
	ChangesSince    int64 // L
	NotifiedVersion int64 // N
	MaterialVersion int64 // M
	Text            string
	Wake            bool
	OpenedAt        time.Time
}

// NoticeText is the exact text of a stale notice (NTC-1), byte for byte.
func NoticeText(target string, changesSince int64) string {
	return `Session "` + target + `" changed (other actor). Reconcile before acting: session_status sessionKey "` +
		target + `" changesSince ` + strconv.FormatInt(changesSince, 10) + `.`
}

// WakeFor reports whether notices for this watcher should wake it now (NTC-6): true for
// main (non-sub-agent) watchers, false for nested sub-agents.
func WakeFor(watcher string) bool {
	p, ok := ParseSessionKey(watcher)
	return ok && !p.IsSubagent()
}

// NoticeOf returns the notice of a pending cursor. ok is false when none is pending.
func NoticeOf(c Cursor) (n Notice, ok bool) {
	if !c.Pending() {
		return Notice{}, false
	}
	return Notice{
		Watcher:         c.Watcher,
		Target:          c.Target,
		ChangesSince:    c.L,
		NotifiedVersion: c.N,
		MaterialVersion: c.M,
		Text:            NoticeText(c.Target.Key, c.L),
		Wake:            WakeFor(c.Watcher),
		OpenedAt:        c.OpenedAt,
	}, true
}

// ID identifies one opened notice. Successive notices of a pair differ in L (an ack
// moves L forward) or in their opening time (a pair deleted and created again), so a
// subscriber can drop a notice it already delivered, whatever path brought it twice.
// The opening time counts in whole milliseconds: a notice published from memory
// (nanoseconds) and the same notice read back from a store that keeps microseconds
// (PostgreSQL) or milliseconds must have the same ID.
func (n Notice) ID() string {
	return n.Watcher + "\x00" + n.Target.AgentID + "\x00" + n.Target.Key + "\x00" +
		strconv.FormatInt(n.ChangesSince, 10) + "\x00" + strconv.FormatInt(n.OpenedAt.UnixMilli(), 10)
}

// TargetKey and TargetAgentID spell the target as the API does (see Event.OptActorID
// for why these are methods).
func (n *Notice) TargetKey() string { return n.Target.Key }

// TargetAgentID returns the agent of the notice's target.
func (n *Notice) TargetAgentID() string { return n.Target.AgentID }
