package awareness

import (
	"fmt"
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
	// TargetGeneration and WatcherGeneration are the generations of the target and of
	// the watcher the notice was opened for (LIF-2): an exact acknowledgement naming an
	// earlier generation of the watcher is refused (STALE_GENERATION).
	TargetGeneration, WatcherGeneration int64
	// Closed is true on the item that tells a subscriber asking for closed notices
	// (SubscribeNotices with includeClosed) that this notice was acknowledged or its
	// cursor removed. Stores and queries only ever return open notices.
	Closed bool
	// Redelivered is true on a notice that came back after a drain that was neither
	// acknowledged nor released (RDL-1), until it is acknowledged.
	Redelivered bool
	// Delivery counts the times this opening was handed out again (a redelivery, the
	// end of a snooze; RDL-1, RDL-2): part of its ID, so that a subscriber that had it
	// gets it again.
	Delivery int
}

// DefaultNoticeTool is the reconcile tool a notice's text names unless a deployment
// names its own (NTC-1).
const DefaultNoticeTool = "session_status"

// NoticeTool is the name of the reconcile tool a notice's text names (NTC-1): a
// deployment inside a gateway whose own tool of the default name reads another log
// names its tool instead. The rest of the text is byte-identical. "" is
// DefaultNoticeTool.
type NoticeTool string

// CheckNoticeTool checks a tool name: 1 to 64 ASCII letters, digits, '_', '-' or
// '.', the characters MCP and the gateways allow in tool names, so that the text stays
// one line a model can follow literally.
func CheckNoticeTool(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%q: want 1 to 64 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return fmt.Errorf("%q: only ASCII letters, digits, '_', '-' and '.' are allowed", name)
		}
	}
	return nil
}

func (t NoticeTool) name() string {
	if t == "" {
		return DefaultNoticeTool
	}
	return string(t)
}

// Text is the exact text of a notice on target (NTC-1), byte for byte, naming t. A
// canonical key carries its agent and keeps the seeds' text; a bare key (KEY-3) does
// not, so the instruction also names the agent, and following it literally reaches
// that session: `… session_status sessionKey "global" agentId "worker" changesSince 0.`
func (t NoticeTool) Text(target SessionRef, changesSince int64) string {
	if target.Qualified() {
		return t.text(target.Key, "", changesSince)
	}
	return t.text(target.Key, target.AgentID, changesSince)
}

// text is NTC-1's text on key, naming agent when it is not "".
func (t NoticeTool) text(key, agent string, changesSince int64) string {
	if agent != "" {
		agent = ` agentId "` + agent + `"`
	}
	return `Session "` + key + `" changed (other actor). Reconcile before acting: ` + t.name() + ` sessionKey "` +
		key + `"` + agent + ` changesSince ` + strconv.FormatInt(changesSince, 10) + `.`
}

// Notice returns the notice of a pending cursor, its text naming t. ok is false when
// none is pending. Stores build every notice they return with their deployment's
// tool through it.
func (t NoticeTool) Notice(c Cursor) (n Notice, ok bool) {
	if !c.Pending() {
		return Notice{}, false
	}
	return c.notice(t.Text(c.Target, c.L)), true
}

// TextsOn memoises the texts of notices on one target by L: the thousands of notices
// one event opens on a target share a handful of L, so each text is built (and held)
// once.
type TextsOn struct {
	tool   NoticeTool
	target SessionRef
	l      int64
	text   string
}

// TextsOn returns a memo of the texts of notices on target.
func (t NoticeTool) TextsOn(target SessionRef) *TextsOn {
	return &TextsOn{tool: t, target: target, l: -1}
}

// Notice is NoticeTool.Notice of a cursor on the memo's target.
func (x *TextsOn) Notice(c Cursor) (n Notice, ok bool) {
	if !c.Pending() {
		return Notice{}, false
	}
	if c.Target != x.target {
		return x.tool.Notice(c)
	}
	if c.L != x.l {
		x.l, x.text = c.L, x.tool.Text(c.Target, c.L)
	}
	return c.notice(x.text), true
}

// notice is the notice of a pending cursor with its text.
func (c Cursor) notice(text string) Notice {
	return Notice{
		Watcher:         c.Watcher,
		Target:          c.Target,
		ChangesSince:    c.L,
		NotifiedVersion: c.N,
		MaterialVersion: c.M,
		Text:            text,
		Wake:            WakeFor(c.Watcher),
		OpenedAt:        c.OpenedAt,

		TargetGeneration:  c.TargetGeneration,
		WatcherGeneration: c.WatcherGeneration,
	}
}

// NoticeText is the exact text of a stale notice on a canonical key (NTC-1) with the
// default tool, byte for byte.
func NoticeText(target string, changesSince int64) string {
	return NoticeTool("").text(target, "", changesSince)
}

// NoticeTextOf is the text of a notice on target with the default tool (NTC-1).
func NoticeTextOf(target SessionRef, changesSince int64) string {
	return NoticeTool("").Text(target, changesSince)
}

// WakeFor reports whether notices for this watcher should wake it now (NTC-6): true for
// main (non-sub-agent) watchers, false for nested sub-agents.
func WakeFor(watcher string) bool {
	p, ok := ParseSessionKey(watcher)
	return ok && !p.IsSubagent()
}

// NoticeOf returns the notice of a pending cursor with the default tool (see
// NoticeTool.Notice). ok is false when none is pending.
func NoticeOf(c Cursor) (n Notice, ok bool) { return NoticeTool("").Notice(c) }

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
	if n.Delivery > 0 {
		id += "\x00d" + strconv.Itoa(n.Delivery)
	}
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
