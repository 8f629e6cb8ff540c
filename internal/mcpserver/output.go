package mcpserver

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/awareness/awareness/internal/awareness"
)

// The structured results of the tools. Each holds the GraphQL answer's fields, by the
// same names with the same values (CLT-3), then the agent-facing text: summary, which
// harnesses that drop text content still pass to the model, and watcherNotices, the
// named watcher's pending-notice digest. Nullable GraphQL fields are pointers without
// omitempty: null is written, as GraphQL writes it.

// eventOut is a StateEvent.
type eventOut struct {
	Sequence   int64               `json:"sequence"`
	Kind       awareness.EventKind `json:"kind"`
	ActorType  awareness.ActorType `json:"actorType"`
	ActorID    *string             `json:"actorId"`
	Summary    string              `json:"summary"`
	OccurredAt time.Time           `json:"occurredAt"`
	RunID      *string             `json:"runId"`
	Payload    payloadOut          `json:"payload" jsonschema:"outcome, channel and turns, when the event has them"`
}

// payloadOut is an event payload as the JSON scalar writes it: an object, or null.
type payloadOut struct{ p awareness.Payload }

func (p payloadOut) MarshalJSON() ([]byte, error) {
	if p.p.IsZero() {
		return []byte("null"), nil
	}
	return p.p.AppendJSON(nil), nil
}

func eventOf(e awareness.Event) eventOut {
	return eventOut{
		Sequence: e.Sequence, Kind: e.Kind, ActorType: e.ActorType, ActorID: optional(e.ActorID),
		Summary: e.Summary, OccurredAt: e.OccurredAt.UTC(), RunID: optional(e.RunID), Payload: payloadOut{e.Payload},
	}
}

// changesOut is a StateChanges.
type changesOut struct {
	Events                    []eventOut `json:"events"`
	HistoryGap                bool       `json:"historyGap" jsonschema:"true when changes after changesSince were pruned: refresh the whole session state instead of applying the delta"`
	Truncated                 bool       `json:"truncated" jsonschema:"true when more changes follow: call again with nextChangesSince"`
	EarliestAvailableSequence int64      `json:"earliestAvailableSequence"`
	NextChangesSince          int64      `json:"nextChangesSince"`
}

// statusOut is session_status's result: a SessionStatus.
type statusOut struct {
	SessionKey   string      `json:"sessionKey"`
	AgentID      string      `json:"agentId"`
	StateVersion int64       `json:"stateVersion"`
	StateChanges *changesOut `json:"stateChanges" jsonschema:"the changes after changesSince; null without changesSince"`
	agentText
}

// agentText is what every result adds to the GraphQL answer.
type agentText struct {
	Summary        string     `json:"summary" jsonschema:"what the result means and what to do next, in sentences"`
	WatcherNotices *digestOut `json:"watcherNotices,omitempty" jsonschema:"the pending stale notices of the watcher the call named"`
}

func statusOf(st awareness.Status) statusOut {
	out := statusOut{SessionKey: st.Ref.Key, AgentID: st.Ref.AgentID, StateVersion: st.StateVersion}
	if ch := st.Changes; ch != nil {
		c := &changesOut{Events: make([]eventOut, 0, len(ch.Events)), HistoryGap: ch.HistoryGap, Truncated: ch.Truncated,
			EarliestAvailableSequence: ch.Earliest, NextChangesSince: ch.NextChangesSince}
		for _, e := range ch.Events {
			c.Events = append(c.Events, eventOf(e))
		}
		out.StateChanges = c
	}
	out.Summary = statusSummary(out)
	return out
}

// statusSummary is the agent text of session_status, the sentences the REC rules ask
// an agent to act on.
func statusSummary(st statusOut) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Session %q (agent %s) is at state version %d.", st.SessionKey, st.AgentID, st.StateVersion)
	ch := st.StateChanges
	if ch == nil {
		return b.String()
	}
	if len(ch.Events) == 0 {
		b.WriteString(" Session state changes: none.")
	} else {
		fmt.Fprintf(&b, " Session state changes: %d.", len(ch.Events))
	}
	for _, e := range ch.Events {
		actor := string(e.ActorType)
		if e.ActorID != nil {
			actor += " " + *e.ActorID
		}
		fmt.Fprintf(&b, "\n#%d %s by %s at %s: %s", e.Sequence, e.Kind, actor, e.OccurredAt.Format(time.RFC3339), e.Summary)
	}
	if ch.HistoryGap {
		fmt.Fprintf(&b, "\nHistory gap: changes before #%d were pruned; refresh the whole session state instead of applying this delta.", ch.EarliestAvailableSequence)
	}
	if ch.Truncated {
		fmt.Fprintf(&b, "\nMore changes follow: call session_status again with changesSince %d.", ch.NextChangesSince)
	}
	return b.String()
}

// sessionOut is a Session, with the fields sessions_list selects.
type sessionOut struct {
	SessionKey       string                `json:"sessionKey"`
	AgentID          string                `json:"agentId"`
	Kind             awareness.SessionKind `json:"kind"`
	SessionID        *string               `json:"sessionId"`
	ParentSessionKey *string               `json:"parentSessionKey"`
	ChatType         *string               `json:"chatType"`
	Provider         *string               `json:"provider"`
	DisplayName      *string               `json:"displayName"`
	UpdatedAt        time.Time             `json:"updatedAt"`
	StateVersion     *int64                `json:"stateVersion" jsonschema:"null when the session never logged a change"`
	CompactionCount  int64                 `json:"compactionCount"`
}

type pageInfoOut struct {
	HasNextPage bool    `json:"hasNextPage"`
	EndCursor   *string `json:"endCursor"`
}

// listOut is sessions_list's result: a SessionList.
type listOut struct {
	Sessions []sessionOut `json:"sessions"`
	PageInfo pageInfoOut  `json:"pageInfo"`
	agentText
}

func listOf(p awareness.SessionPage) listOut {
	out := listOut{Sessions: make([]sessionOut, 0, len(p.Sessions)), PageInfo: pageInfoOut{HasNextPage: p.HasNextPage, EndCursor: optional(p.EndCursor)}}
	for _, s := range p.Sessions {
		kind := s.Kind
		if kind == "" {
			kind = awareness.ClassifyKey(s.Ref.Key)
		}
		so := sessionOut{
			SessionKey: s.Ref.Key, AgentID: s.Ref.AgentID, Kind: kind, SessionID: s.Entry.SessionID,
			ParentSessionKey: s.Entry.ParentSessionKey, ChatType: s.Entry.ChatType, Provider: s.Entry.Provider,
			DisplayName: s.Entry.DisplayName, UpdatedAt: s.UpdatedAt.UTC(), CompactionCount: s.CompactionCount,
		}
		if s.StateVersion > 0 {
			v := s.StateVersion
			so.StateVersion = &v
		}
		out.Sessions = append(out.Sessions, so)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d sessions.", len(out.Sessions))
	for _, s := range out.Sessions {
		ver := "no logged changes"
		if s.StateVersion != nil {
			ver = fmt.Sprintf("state version %d", *s.StateVersion)
		}
		fmt.Fprintf(&b, "\n%s (agent %s, %s): %s", s.SessionKey, s.AgentID, s.Kind, ver)
	}
	if out.PageInfo.HasNextPage && out.PageInfo.EndCursor != nil {
		fmt.Fprintf(&b, "\nMore sessions: call sessions_list again with after %q.", *out.PageInfo.EndCursor)
	}
	out.Summary = b.String()
	return out
}

// noticeOut is a StaleNotice, with the fields of the pendingNotices query.
type noticeOut struct {
	Watcher         string    `json:"watcher"`
	Target          string    `json:"target"`
	TargetAgentID   string    `json:"targetAgentId"`
	ChangesSince    int64     `json:"changesSince"`
	NotifiedVersion int64     `json:"notifiedVersion"`
	MaterialVersion int64     `json:"materialVersion"`
	Text            string    `json:"text" jsonschema:"the notice, to act on as written (NTC-1)"`
	Wake            bool      `json:"wake"`
	OpenedAt        time.Time `json:"openedAt"`
	// The generations of the pair (LIF-2): name watcherGeneration when acknowledging.
	TargetGeneration  int64 `json:"targetGeneration"`
	WatcherGeneration int64 `json:"watcherGeneration"`
}

func noticesOf(ns []awareness.Notice) []noticeOut {
	out := make([]noticeOut, 0, len(ns))
	for _, n := range ns {
		out = append(out, noticeOf(n))
	}
	return out
}

func noticeOf(n awareness.Notice) noticeOut {
	return noticeOut{
		Watcher: n.Watcher, Target: n.Target.Key, TargetAgentID: n.Target.AgentID, ChangesSince: n.ChangesSince,
		NotifiedVersion: n.NotifiedVersion, MaterialVersion: n.MaterialVersion, Text: n.Text, Wake: n.Wake, OpenedAt: n.OpenedAt.UTC(),
		TargetGeneration: n.TargetGeneration, WatcherGeneration: n.WatcherGeneration,
	}
}

// noticesSummary lists notices with their exact texts.
func noticesSummary(ns []noticeOut, none, noun string) string {
	if len(ns) == 0 {
		return none
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", len(ns), noun)
	if len(ns) > 1 {
		b.WriteString("s")
	}
	b.WriteString(":")
	for _, n := range ns {
		fmt.Fprintf(&b, "\n%s (target %s, targetAgentId %s, notifiedVersion %d)", n.Text, n.Target, n.TargetAgentID, n.NotifiedVersion)
	}
	return b.String()
}

// pendingOut is pending_notices's result: {"pendingNotices": […]} as GraphQL's data.
type pendingOut struct {
	PendingNotices []noticeOut `json:"pendingNotices"`
	agentText
}

// waitOut is wait_for_notices's result.
type waitOut struct {
	PendingNotices []noticeOut `json:"pendingNotices"`
	TimedOut       bool        `json:"timedOut" jsonschema:"true when no notice was pending and none opened before timeoutMs"`
	agentText
}

// ackOut is ack_notices's result: {"acknowledgeNotices": […]} as GraphQL's data, an
// answer per named notice (NTC-3).
type ackOut struct {
	AcknowledgeNotices []noticeAckOut `json:"acknowledgeNotices"`
	agentText
}

// noticeAckOut is a NoticeAck.
type noticeAckOut struct {
	Watcher         string               `json:"watcher"`
	Target          string               `json:"target"`
	TargetAgentID   string               `json:"targetAgentId"`
	NotifiedVersion int64                `json:"notifiedVersion"`
	Outcome         awareness.AckOutcome `json:"outcome" jsonschema:"acknowledged; alreadyAcknowledged, superseded or notPending: nothing changed"`
	FollowUp        *noticeOut           `json:"followUp" jsonschema:"with acknowledged: the notice that opened for the changes made meanwhile"`
	Pending         *noticeOut           `json:"pending" jsonschema:"with alreadyAcknowledged or superseded: the pair's pending notice now"`
}

func ackOf(acks []awareness.NoticeAck) ackOut {
	out := ackOut{AcknowledgeNotices: make([]noticeAckOut, 0, len(acks))}
	var b strings.Builder
	for i, a := range acks {
		o := noticeAckOut{Watcher: a.Watcher, Target: a.Target.Key, TargetAgentID: a.Target.AgentID, NotifiedVersion: a.NotifiedVersion, Outcome: a.Outcome}
		if a.FollowUp != nil {
			n := noticeOf(*a.FollowUp)
			o.FollowUp = &n
		}
		if a.Pending != nil {
			n := noticeOf(*a.Pending)
			o.Pending = &n
		}
		out.AcknowledgeNotices = append(out.AcknowledgeNotices, o)
		if i > 0 {
			b.WriteString("\n")
		}
		which := fmt.Sprintf("the notice on %q at notifiedVersion %d", o.Target, o.NotifiedVersion)
		switch o.Outcome {
		case awareness.AckAcknowledged:
			fmt.Fprintf(&b, "Acknowledged %s.", which)
			if o.FollowUp != nil {
				fmt.Fprintf(&b, " Changes were made meanwhile; a follow-up notice opened: %s", o.FollowUp.Text)
			}
		case awareness.AckAlreadyAcknowledged:
			fmt.Fprintf(&b, "%s was acknowledged before: nothing changed.", capitalize(which))
		case awareness.AckSuperseded:
			fmt.Fprintf(&b, "%s was replaced by another notice, not acknowledged: nothing changed.", capitalize(which))
		default:
			fmt.Fprintf(&b, "%s is not pending: nothing changed.", capitalize(which))
		}
		if o.Pending != nil {
			fmt.Fprintf(&b, " Pending for this session: %s", o.Pending.Text)
		}
	}
	out.Summary = b.String()
	return out
}

// ackOutcomes are the AckOutcome values, in the schema's order.
var ackOutcomes = []awareness.AckOutcome{awareness.AckAcknowledged, awareness.AckAlreadyAcknowledged, awareness.AckSuperseded, awareness.AckNotPending}

func capitalize(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

// cursorOut is a WatchCursor.
type cursorOut struct {
	Watcher       string    `json:"watcher"`
	Target        string    `json:"target"`
	TargetAgentID string    `json:"targetAgentId"`
	LastAcked     int64     `json:"lastAcked"`
	Notified      int64     `json:"notified"`
	Material      int64     `json:"material"`
	Pending       bool      `json:"pending"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// watchOut is session_watch's result: a WatchResult.
type watchOut struct {
	Watched bool       `json:"watched"`
	Reason  *string    `json:"reason" jsonschema:"why the watch was not registered; null when it was"`
	Cursor  *cursorOut `json:"cursor"`
	agentText
}

func watchOf(w awareness.WatchResult) watchOut {
	out := watchOut{Watched: w.Watched, Reason: optional(w.Reason)}
	if c := w.Cursor; c != nil {
		out.Cursor = &cursorOut{Watcher: c.Watcher, Target: c.Target.Key, TargetAgentID: c.Target.AgentID,
			LastAcked: c.L, Notified: c.N, Material: c.M, Pending: c.Pending(), UpdatedAt: c.UpdatedAt.UTC()}
	}
	switch {
	case !out.Watched && out.Reason != nil:
		out.Summary = "Not watched: " + *out.Reason
	case !out.Watched:
		out.Summary = "Not watched."
	case out.Cursor == nil:
		out.Summary = "Watched."
	default:
		out.Summary = fmt.Sprintf("%s watches %s from version %d: a change by another actor opens one stale notice.",
			out.Cursor.Watcher, out.Cursor.Target, out.Cursor.LastAcked)
	}
	return out
}

// unwatchOut is session_unwatch's result: {"unwatch": bool} as GraphQL's data.
type unwatchOut struct {
	Unwatch bool `json:"unwatch" jsonschema:"true when a cursor was removed"`
	agentText
}

// recordOut is record_event's result: a RecordEventResult.
type recordOut struct {
	Recorded        bool                `json:"recorded" jsonschema:"false when dedupeKey named an event already recorded (SIG-4)"`
	Event           eventOut            `json:"event"`
	StateVersion    int64               `json:"stateVersion"`
	NoticesOpened   int                 `json:"noticesOpened"`
	SkippedWatchers []skippedWatcherOut `json:"skippedWatchers"`
	agentText
}

type skippedWatcherOut struct {
	Watcher string `json:"watcher"`
	Reason  string `json:"reason"`
}

func recordOf(r awareness.RecordResult) recordOut {
	out := recordOut{Recorded: r.Recorded, Event: eventOf(r.Event), StateVersion: r.StateVersion, NoticesOpened: r.NoticesOpened,
		SkippedWatchers: make([]skippedWatcherOut, 0, len(r.SkippedWatchers))}
	for _, s := range r.SkippedWatchers {
		out.SkippedWatchers = append(out.SkippedWatchers, skippedWatcherOut{s.Watcher, s.Reason})
	}
	var b strings.Builder
	if out.Recorded {
		fmt.Fprintf(&b, "Recorded %s as #%d of %q; it opened %d stale notice", out.Event.Kind, out.Event.Sequence, r.Event.Session.Key, out.NoticesOpened)
		if out.NoticesOpened != 1 {
			b.WriteString("s")
		}
		b.WriteString(".")
	} else {
		fmt.Fprintf(&b, "Already recorded under this dedupeKey as #%d of %q: nothing changed.", out.Event.Sequence, r.Event.Session.Key)
	}
	for _, s := range out.SkippedWatchers {
		fmt.Fprintf(&b, "\nWatcher %q skipped: %s", s.Watcher, s.Reason)
	}
	out.Summary = b.String()
	return out
}

// digestOut is the pending-notice digest a result carries when its call names a
// watcher: how many notices are pending and, for the first maxDigestNotices, their
// exact texts with what ack_notices needs.
type digestOut struct {
	Watcher string         `json:"watcher"`
	Pending int            `json:"pending" jsonschema:"how many stale notices are pending for the watcher"`
	Notices []digestNotice `json:"notices" jsonschema:"the first pending notices (at most 10), oldest target first"`
}

type digestNotice struct {
	Target          string `json:"target"`
	TargetAgentID   string `json:"targetAgentId"`
	NotifiedVersion int64  `json:"notifiedVersion"`
	Text            string `json:"text"`
}

// maxDigestNotices bounds the notices a digest spells out.
const maxDigestNotices = 10

func digestOf(watcher string, ns []awareness.Notice) *digestOut {
	d := &digestOut{Watcher: watcher, Pending: len(ns), Notices: make([]digestNotice, 0, min(len(ns), maxDigestNotices))}
	for _, n := range ns[:min(len(ns), maxDigestNotices)] {
		d.Notices = append(d.Notices, digestNotice{Target: n.Target.Key, TargetAgentID: n.Target.AgentID, NotifiedVersion: n.NotifiedVersion, Text: n.Text})
	}
	return d
}

// text is the digest's sentences, appended to a result's text content.
func (d *digestOut) text() string {
	if d == nil {
		return ""
	}
	if d.Pending == 0 {
		return fmt.Sprintf("\nNo stale notices are pending for %s.", d.Watcher)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n%d stale notice", d.Pending)
	if d.Pending > 1 {
		b.WriteString("s")
	}
	fmt.Fprintf(&b, " pending for %s:", d.Watcher)
	for _, n := range d.Notices {
		fmt.Fprintf(&b, "\n%s", n.Text)
	}
	if more := d.Pending - len(d.Notices); more > 0 {
		fmt.Fprintf(&b, "\n… and %d more: call pending_notices.", more)
	}
	return b.String()
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// outputSchema is the JSON schema of a result type. Times are RFC 3339 strings, the
// payload an object or null, and the vocabularies enums.
func outputSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: typeSchemas()})
	if err != nil {
		panic(fmt.Sprintf("mcpserver: output schema of %T: %v", *new(T), err))
	}
	return s
}

// inputSchema is the JSON schema of a tool's arguments.
func inputSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](&jsonschema.ForOptions{TypeSchemas: typeSchemas()})
	if err != nil {
		panic(fmt.Sprintf("mcpserver: input schema of %T: %v", *new(T), err))
	}
	return s
}

func typeSchemas() map[reflect.Type]*jsonschema.Schema {
	enum := func(vals ...string) *jsonschema.Schema {
		e := make([]any, len(vals))
		for i, v := range vals {
			e[i] = v
		}
		return &jsonschema.Schema{Type: "string", Enum: e}
	}
	return map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[time.Time]():             {Type: "string", Format: "date-time"},
		reflect.TypeFor[payloadOut]():            {Types: []string{"null", "object"}},
		reflect.TypeFor[awareness.EventKind]():   enum(names(awareness.AllEventKinds)...),
		reflect.TypeFor[eventKindArg]():          enum(names(awareness.AllEventKinds)...),
		reflect.TypeFor[awareness.ActorType]():   enum(names(awareness.AllActorTypes)...),
		reflect.TypeFor[awareness.AckOutcome]():  enum(names(ackOutcomes)...),
		reflect.TypeFor[actorTypeArg]():          enum(names(awareness.AllActorTypes)...),
		reflect.TypeFor[outcomeArg]():            enum(names(awareness.AllRunOutcomes)...),
		reflect.TypeFor[awareness.SessionKind](): enum(names(awareness.AllSessionKinds)...),
		reflect.TypeFor[sessionKindArg]():        enum(names(awareness.AllSessionKinds)...),
		reflect.TypeFor[json.RawMessage]():       {},
	}
}

func names[E ~string](all []E) []string {
	out := make([]string, len(all))
	for i, v := range all {
		out[i] = string(v)
	}
	return out
}
