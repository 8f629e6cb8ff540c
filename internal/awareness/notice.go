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
	// Closed is true on the item that tells a subscriber asking for closed notices
	// (SubscribeNotices with includeClosed) that this notice was acknowledged or its
	// cursor removed. Stores and queries only ever return open notices.
	Closed bool
}

// NoticeText is the exact text of a stale notice (NTC-1), byte for byte.
func NoticeText(target string, changesSince int64) string {
	return `Session "` + target + `" changed (other actor). Reconcile before acting: session_status sessionKey "` +
		target + `" changesSince ` + strconv.FormatInt(changesSince, 10) + `.`
}

// NoticeTextOf is the text of a notice on target (NTC-1). A canonical key carries its
// agent and keeps the seeds' text byte for byte; a bare key (KEY-3) does not, so the
// instruction also names the agent, and following it literally reaches that session:
// `… session_status sessionKey "global" agentId "worker" changesSince 0.`
func NoticeTextOf(target SessionRef, changesSince int64) string {
	if target.Qualified() {
		return NoticeText(target.Key, changesSince)
	}
	return `Session "` + target.Key + `" changed (other actor). Reconcile before acting: session_status sessionKey "` +
		target.Key + `" agentId "` + target.AgentID + `" changesSince ` + strconv.FormatInt(changesSince, 10) + `.`
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
		Text:            NoticeTextOf(c.Target, c.L),
		Wake:            WakeFor(c.Watcher),
		OpenedAt:        c.OpenedAt,
	}, true
}

// ClosedNotice is n as the item that reports it closed (acknowledged, or its cursor
// removed): the same notice with Closed set.
func ClosedNotice(n Notice) Notice {
	n.Closed = true
	return n
}

// ID identifies one opened notice. Successive notices of a pair differ in L (an ack
// moves L forward) or in their opening time (a pair deleted and created again), so a
// subscriber can drop a notice it already delivered, whatever path brought it twice.
// The opening time counts in whole milliseconds: a notice published from memory
// (nanoseconds) and the same notice read back from a store that keeps microseconds
// (PostgreSQL) or milliseconds must have the same ID. The item that reports a notice
// closed has an ID of its own (the notice's, marked), so that it is not taken for a
// repeat of the open one.
func (n Notice) ID() string {
	id := n.Watcher + "\x00" + n.Target.AgentID + "\x00" + n.Target.Key + "\x00" +
		strconv.FormatInt(n.ChangesSince, 10) + "\x00" + strconv.FormatInt(n.OpenedAt.UnixMilli(), 10)
	if n.Closed {
		id += "\x00closed"
	}
	return id
}

// TargetKey and TargetAgentID spell the target as the API does (see Event.OptActorID
// for why these are methods).
func (n *Notice) TargetKey() string { return n.Target.Key }

// TargetAgentID returns the agent of the notice's target.
func (n *Notice) TargetAgentID() string { return n.Target.AgentID }
