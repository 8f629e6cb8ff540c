package models

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/awareness/awareness/internal/awareness"
)

// Cross-process wake-up hints (PostgreSQL).
//
// A write transaction that opens notices (Append, Ack, Sweep) or records events
// (Append) sends at most one NOTIFY on hintChannel, inside the transaction, so the hint
// is delivered when and only when the transaction commits, after its rows are visible.
// A hint is not data: it names the watchers whose pending notices changed and the
// session sequences that were recorded, and every Listener reads the rows themselves.
// NOTIFY takes a global lock at commit, so a transaction sends one small hint, never
// one per event. A hint that would exceed maxHintBytes asks for a rescan of every
// pending notice instead of naming watchers, and drops the event spans that do not fit
// (the live event stream is best effort; changesSince is the durable path).
const (
	hintChannel  = "awareness_hints"
	maxHintBytes = 7000 // PostgreSQL refuses payloads of 8000 bytes and more
)

// hint collects what one write transaction has to announce.
type hint struct {
	watchers map[string]struct{}
	events   map[awareness.SessionRef][2]int64 // first and last recorded sequence
	// closed are the notices the transaction acknowledged or whose cursors it deleted:
	// they are no longer in the database, so the hint carries them (closedNotice).
	closed []awareness.Notice
}

// addClosed adds notices the transaction closed.
func (h *hint) addClosed(ns ...awareness.Notice) { h.closed = append(h.closed, ns...) }

func (h *hint) addWatcher(w string) {
	if h.watchers == nil {
		h.watchers = map[string]struct{}{}
	}
	h.watchers[w] = struct{}{}
}

func (h *hint) addEvent(r awareness.SessionRef, seq int64) {
	if h.events == nil {
		h.events = map[awareness.SessionRef][2]int64{}
	}
	span, ok := h.events[r]
	if !ok {
		span = [2]int64{seq, seq}
	}
	span[0], span[1] = min(span[0], seq), max(span[1], seq)
	h.events[r] = span
}

func (h *hint) empty() bool { return len(h.watchers) == 0 && len(h.events) == 0 && len(h.closed) == 0 }

// hintPayload is the JSON text of a hint.
type hintPayload struct {
	// Origin is the sending store instance; a Listener skips the events of its own.
	Origin string `json:"o"`
	// All asks for a rescan of every pending notice.
	All      bool        `json:"a,omitempty"`
	Watchers []string    `json:"w,omitempty"`
	Events   []eventSpan `json:"e,omitempty"`
	// Closed are notices closed by the transaction, for includeClosed subscribers of
	// other processes. Best effort like Events: those that do not fit are left out.
	Closed []closedNotice `json:"c,omitempty"`
}

// closedNotice is a closed notice in a hint: everything but its text, which follows
// from the target and L.
type closedNotice struct{ n awareness.Notice }

func (c closedNotice) MarshalJSON() ([]byte, error) {
	n := c.n
	return json.Marshal([]any{n.Watcher, n.Target.AgentID, n.Target.Key, n.ChangesSince, n.NotifiedVersion,
		n.MaterialVersion, n.OpenedAt.UnixNano()})
}

func (c *closedNotice) UnmarshalJSON(b []byte) error {
	var v []json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if len(v) != 7 {
		return fmt.Errorf("closed notice: want 7 elements, got %d", len(v))
	}
	var (
		cur    awareness.Cursor
		opened int64
	)
	for i, dst := range []any{&cur.Watcher, &cur.Target.AgentID, &cur.Target.Key, &cur.L, &cur.N, &cur.M, &opened} {
		if err := json.Unmarshal(v[i], dst); err != nil {
			return err
		}
	}
	cur.OpenedAt = fromNanos(opened)
	n, ok := awareness.NoticeOf(cur)
	if !ok {
		return fmt.Errorf("closed notice: nothing pending (L=%d, N=%d)", cur.L, cur.N)
	}
	c.n = awareness.ClosedNotice(n)
	return nil
}

// eventSpan is the sequences From..To of one session, recorded by one transaction.
type eventSpan struct {
	Ref      awareness.SessionRef
	From, To int64
}

func (e eventSpan) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{e.Ref.AgentID, e.Ref.Key, e.From, e.To})
}

func (e *eventSpan) UnmarshalJSON(b []byte) error {
	var v []json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if len(v) != 4 {
		return fmt.Errorf("event span: want 4 elements, got %d", len(v))
	}
	for i, dst := range []any{&e.Ref.AgentID, &e.Ref.Key, &e.From, &e.To} {
		if err := json.Unmarshal(v[i], dst); err != nil {
			return err
		}
	}
	return nil
}

// encode returns the payload text, at most maxHintBytes long, and how many event spans
// (or closed notices) did not fit.
func (h *hint) encode(origin string) (string, int) {
	p := hintPayload{Origin: origin}
	for w := range h.watchers {
		p.Watchers = append(p.Watchers, w)
	}
	slices.Sort(p.Watchers)
	for r, span := range h.events {
		p.Events = append(p.Events, eventSpan{Ref: r, From: span[0], To: span[1]})
	}
	slices.SortFunc(p.Events, func(a, b eventSpan) int {
		return cmp.Or(strings.Compare(a.Ref.AgentID, b.Ref.AgentID), strings.Compare(a.Ref.Key, b.Ref.Key))
	})
	for _, n := range h.closed {
		p.Closed = append(p.Closed, closedNotice{n})
	}
	b, _ := json.Marshal(p)
	if len(b) <= maxHintBytes {
		return string(b), 0
	}
	// Too long: the closed notices go first (best effort, like the event spans).
	if len(p.Closed) > 0 {
		dropped := len(p.Closed)
		p.Closed = nil
		if b, _ = json.Marshal(p); len(b) <= maxHintBytes {
			return string(b), dropped
		}
	}
	if len(p.Watchers) > 0 {
		p.All, p.Watchers = true, nil
	}
	// Keep the event spans that fit (the lengths of the JSON texts add up, plus commas).
	base, _ := json.Marshal(hintPayload{Origin: p.Origin, All: p.All})
	size, keep := len(base)+len(`,"e":[]`), 0
	for _, e := range p.Events {
		eb, _ := json.Marshal(e)
		if size+len(eb)+1 > maxHintBytes {
			break
		}
		size += len(eb) + 1
		keep++
	}
	dropped := len(p.Events) - keep
	p.Events = p.Events[:keep]
	b, _ = json.Marshal(p)
	return string(b), dropped
}

// sendHint sends the transaction's hint, when the dialect has notifications and there
// is something to say.
func (s *Store) sendHint(t *tx, h *hint) error {
	if !s.d.notify || h.empty() {
		return nil
	}
	payload, dropped := h.encode(s.origin)
	if dropped > 0 {
		s.log.Debug("hint too long: event spans left out", "dropped", dropped)
	}
	_, err := t.exec(s.d.sql.notify, hintChannel, payload)
	return err
}

// HintMode is how a PostgreSQL store sends its hints (Options.Hints).
type HintMode string

// The hint modes.
const (
	// HintsInCommit sends the NOTIFY inside the write transaction: delivered exactly
	// when it commits. NOTIFY takes a lock global to the PostgreSQL instance from the
	// commit's start until it ends, its WAL flush included, so NOTIFYing commits of
	// every process serialise. The default.
	HintsInCommit HintMode = "commit"
	// HintsAfterCommit sends it after the commit, in a statement of its own on the
	// write pool: that transaction writes nothing, so the global lock is held for
	// microseconds, not across a WAL flush. The rows are committed before the hint
	// goes, so the listen-then-read rule is unchanged; a hint lost to a crash or an
	// error between the two is found by the next --notice-poll rescan.
	HintsAfterCommit HintMode = "after-commit"
	// HintsOff sends none: other processes see this one's notices at their
	// --notice-poll rescans only, and its events not at all. For measurements.
	HintsOff HintMode = "off"
)

// sendHintAfter sends a committed transaction's hint (HintsAfterCommit). A failure is
// logged, not returned: the write is committed, and the safety poll covers the hint.
func (s *Store) sendHintAfter(ctx context.Context, h *hint) {
	if !s.d.notify || h.empty() {
		return
	}
	payload, dropped := h.encode(s.origin)
	if dropped > 0 {
		s.log.Debug("hint too long: event spans left out", "dropped", dropped)
	}
	// The caller's context may end as soon as the commit returns; the hint is due anyway.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listenerOpTimeout)
	defer cancel()
	if _, err := onPoolQuiet(ctx, s.w).exec(s.d.sql.notify, hintChannel, payload); err != nil {
		s.log.Warn("hint after commit not sent; other processes find the change at their next rescan", "err", err)
	}
}

// newOrigin returns a random identifier of a store instance.
func newOrigin() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
