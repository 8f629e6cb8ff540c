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
	v := []any{n.Watcher, n.Target.AgentID, n.Target.Key, n.ChangesSince, n.NotifiedVersion,
		n.MaterialVersion, n.OpenedAt.UnixNano()}
	if n.TargetGeneration > 1 || n.WatcherGeneration > 1 {
		// The generations (LIF-2) ride along only when one is not the first, so a
		// process that predates them reads every first-generation notice still.
		v = append(v, n.TargetGeneration, n.WatcherGeneration)
	}
	return json.Marshal(v)
}

func (c *closedNotice) UnmarshalJSON(b []byte) error {
	var v []json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if len(v) != 7 && len(v) != 9 {
		return fmt.Errorf("closed notice: want 7 or 9 elements, got %d", len(v))
	}
	var (
		cur    awareness.Cursor
		opened int64
	)
	cur.TargetGeneration, cur.WatcherGeneration = 1, 1
	dsts := []any{&cur.Watcher, &cur.Target.AgentID, &cur.Target.Key, &cur.L, &cur.N, &cur.M, &opened,
		&cur.TargetGeneration, &cur.WatcherGeneration}
	for i, dst := range dsts[:len(v)] {
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
	// Each watcher takes at least its length and three bytes (quotes, comma) of the
	// text: when they alone cannot fit, the hint asks for a rescan without listing,
	// sorting and marshalling the rest (an event opening 10,000 notices).
	size := 0
	for w := range h.watchers {
		if size += len(w) + 3; size > maxHintBytes {
			p.All, p.Watchers = true, nil
			break
		}
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
	// every process serialise: 16 connections committed 3.9 times fewer one-row
	// transactions with it than without (bench/SCALE-RESULTS.md).
	HintsInCommit HintMode = "commit"
	// HintsAfterCommit sends it after the commit, in a statement of its own on the
	// write pool: that transaction writes nothing, so the global lock is held for
	// microseconds, not across a WAL flush. The rows are committed before the hint
	// goes, so the listen-then-read rule is unchanged; a hint lost to a crash or an
	// error between the two is found by the next --notice-poll rescan. The default.
	HintsAfterCommit HintMode = "after-commit"
	// HintsOff sends none: other processes see this one's notices at their
	// --notice-poll rescans only, and its events not at all. For measurements.
	HintsOff HintMode = "off"
)

// DefaultHints is the hint mode of a PostgreSQL store without a bus when
// Options.Hints is "": after the commit, which keeps the instance-wide NOTIFY lock
// off the commits of every process sharing the database.
const DefaultHints = HintsAfterCommit

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

// HintBus carries the hints of a PostgreSQL deployment between its processes in place
// of NOTIFY and LISTEN (Options.Bus, ListenerConfig.Bus; internal/bus implements it on
// NATS). A store with a bus publishes each committed transaction's hint after the
// commit, one message per watcher and per session it names, on that watcher's or
// session's subject (noticeSubject, eventSubject); a Listener subscribes to the
// subjects of its interest only. The bus, like NOTIFY, carries wake-up hints: the rows
// are read from PostgreSQL.
type HintBus interface {
	// Publish sends data on subject; it does not wait for the server.
	Publish(subject string, data []byte) error
	// Subscribe and Unsubscribe add and remove a subject (NATS wildcards allowed)
	// whose messages Messages delivers. They do not wait for the server.
	Subscribe(subject string) error
	Unsubscribe(subject string) error
	// Sync returns once the server has every earlier subscription (when one was made
	// since the last Sync, or force), or at once with an error while disconnected.
	Sync(ctx context.Context, force bool) error
	// Messages delivers the data of the messages received.
	Messages() <-chan []byte
	// Gaps receives a value after every (re)connect and every loss of messages: the
	// listener then rescans.
	Gaps() <-chan struct{}
}

// The bus's subjects: busPrefix.w.<watcher> carries the hints of one watcher's
// notices (opened, and closed ones for includeClosed subscribers), and
// busPrefix.e.<agent>.<key> those of one session's events. Keys are escaped into one
// subject token each (subjectToken).
const busPrefix = "awareness.hint"

// noticeSubject is the subject of watcher's hints; "" is every watcher's (a wildcard).
func noticeSubject(watcher string) string {
	if watcher == "" {
		return busPrefix + ".w.>"
	}
	return busPrefix + ".w." + subjectToken(watcher)
}

// eventSubject is the subject of a session's event hints: nil is every session's, an
// empty AgentID the key's under every agent (wildcards).
func eventSubject(ref *awareness.SessionRef) string {
	switch {
	case ref == nil:
		return busPrefix + ".e.>"
	case ref.AgentID == "":
		return busPrefix + ".e.*." + subjectToken(ref.Key)
	}
	return busPrefix + ".e." + subjectToken(ref.AgentID) + "." + subjectToken(ref.Key)
}

// subjectToken escapes s into one NATS subject token: ASCII letters, digits, '-',
// '_' and ':' stay (a canonical key reads as itself), every other byte becomes %XX.
// Distinct strings give distinct tokens.
func subjectToken(s string) string {
	const hex = "0123456789ABCDEF"
	if s == "" {
		return "%"
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == ':':
			b.WriteByte(c)
		default:
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	return b.String()
}

// busMessage is one message of a transaction's hint on the bus: its subject and its
// payload, a hintPayload naming one watcher (with the notices of that watcher the
// transaction closed) or one session's event span.
type busMessage struct {
	subject string
	payload []byte
}

// busMessages splits h into its bus messages, sorted by subject.
func (h *hint) busMessages(origin string) []busMessage {
	closed := map[string][]closedNotice{}
	for _, n := range h.closed {
		closed[n.Watcher] = append(closed[n.Watcher], closedNotice{n})
	}
	watchers := make([]string, 0, len(h.watchers)+len(closed))
	for w := range h.watchers {
		watchers = append(watchers, w)
	}
	for w := range closed {
		if _, ok := h.watchers[w]; !ok {
			watchers = append(watchers, w)
		}
	}
	slices.Sort(watchers)
	out := make([]busMessage, 0, len(watchers)+len(h.events))
	for _, w := range watchers {
		p := hintPayload{Origin: origin, Closed: closed[w]}
		if _, ok := h.watchers[w]; ok {
			p.Watchers = []string{w}
		}
		b, _ := json.Marshal(p)
		out = append(out, busMessage{noticeSubject(w), b})
	}
	var spans []eventSpan
	for r, span := range h.events {
		spans = append(spans, eventSpan{Ref: r, From: span[0], To: span[1]})
	}
	slices.SortFunc(spans, func(a, b eventSpan) int {
		return cmp.Or(strings.Compare(a.Ref.AgentID, b.Ref.AgentID), strings.Compare(a.Ref.Key, b.Ref.Key))
	})
	for _, e := range spans {
		b, _ := json.Marshal(hintPayload{Origin: origin, Events: []eventSpan{e}})
		out = append(out, busMessage{eventSubject(&e.Ref), b})
	}
	return out
}

// publishHint publishes a committed transaction's hint on the bus. A failure is
// logged, not returned: the write is committed, and the listeners' rescans (after a
// reconnect, and every --notice-poll) find the change.
func (s *Store) publishHint(h *hint) {
	if h.empty() {
		return
	}
	for _, m := range h.busMessages(s.origin) {
		if err := s.bus.Publish(m.subject, m.payload); err != nil {
			s.log.Warn("hint not published on the bus; other processes find the change at their next rescan", "err", err)
			return
		}
	}
}
