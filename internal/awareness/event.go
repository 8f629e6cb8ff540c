package awareness

import (
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limits on event fields (SIG-2).
const (
	MaxSummaryRunes     = 200
	MaxActorIDBytes     = 512
	MaxRunIDBytes       = 256
	MaxChannelBytes     = 64
	MaxDedupeKeyBytes   = 512
	MaxWatchersPerEvent = 32
	// MaxClockSkew is how far in the past a caller's occurredAt may lie (SIG-5).
	MaxClockSkew = 24 * time.Hour
)

// Event is one entry of a session's signal log (SIG-2).
type Event struct {
	Session    SessionRef
	Sequence   int64
	Kind       EventKind
	ActorType  ActorType
	ActorID    string
	Summary    string
	OccurredAt time.Time
	RunID      string
	Payload    Payload
	DedupeKey  string
	RecordedAt time.Time
}

// RecordInput is what a producer asks to append, before validation.
type RecordInput struct {
	SessionKey string
	AgentID    *string
	Kind       EventKind
	ActorType  ActorType
	ActorID    *string
	Summary    *string
	OccurredAt *time.Time
	RunID      *string
	Outcome    *RunOutcome
	Channel    *string
	Turns      *int
	DedupeKey  *string
	Watchers   []string
}

// NewEvent is a validated append request: the event without its sequence, with every
// reference in it resolved once, so that a store never parses a key again.
type NewEvent struct {
	Event Event
	// SessionKind is the kind of Event.Session's key (KEY-2).
	SessionKind SessionKind
	// Actor is the canonical key and agent of the session an agent-qualified
	// Event.ActorID names; zero when the actor is a person or system, not a session.
	Actor SessionRef
	// Watchers are the producer-passed watchers (WAT-2, WAT-4) that can watch the
	// session: agent-qualified, canonical, not the session itself, de-duplicated, in
	// input order. A store gives each a cursor without checking them again.
	Watchers []SessionRef
	// Skipped are the producer-passed watchers that cannot watch, in input order (WAT-4).
	Skipped []SkippedWatcher
}

// SkippedWatcher is a producer-passed watcher that was not given a cursor (WAT-4): a
// bare key, the session itself or a malformed key. Watcher is as the producer passed it.
type SkippedWatcher struct {
	Watcher string
	Reason  string
}

// ValidateRecord checks a RecordInput against SIG-1..5 and KEY-1..4 and returns the
// event to append. now is the service clock; occurredAt is clamped into
// [now-24h, now]. Nothing is written by a rejected input (ERR-2): validation happens
// entirely before the store is touched.
func ValidateRecord(in RecordInput, now time.Time) (NewEvent, error) {
	ref, kind, err := resolveSession(in.SessionKey, in.AgentID)
	if err != nil {
		return NewEvent{}, err
	}
	if !in.Kind.Valid() {
		return NewEvent{}, Errorf(EINVALID, "kind %q is not an event kind", truncateForMessage(string(in.Kind)))
	}
	if !in.ActorType.Valid() {
		return NewEvent{}, Errorf(EINVALID, "actorType %q is not %s", truncateForMessage(string(in.ActorType)), oneOf(AllActorTypes))
	}
	ev := Event{Session: ref, Kind: in.Kind, ActorType: in.ActorType, RecordedAt: now}
	var ne NewEvent

	if in.ActorID != nil {
		a := strings.TrimSpace(*in.ActorID)
		if err := checkLine("actorId", a, MaxActorIDBytes); err != nil {
			return NewEvent{}, err
		}
		// Canonicalise agent actors so that self-suppression compares identities,
		// not spellings: reference §11.14.
		var actor SessionRef
		if p, ok := ParseSessionKey(a); ok {
			a = p.String()
			if len(a) > MaxActorIDBytes {
				return NewEvent{}, Errorf(EINVALID, "actorId is %d bytes once lowercased; the limit is %d", len(a), MaxActorIDBytes)
			}
			actor = SessionRef{AgentID: p.AgentID, Key: a}
		}
		ev.ActorID = a
		ne.Actor = actor
	}
	if in.RunID != nil {
		r := strings.TrimSpace(*in.RunID)
		if err := checkLine("runId", r, MaxRunIDBytes); err != nil {
			return NewEvent{}, err
		}
		ev.RunID = r
	}
	if in.DedupeKey != nil {
		d := *in.DedupeKey
		if d == "" {
			return NewEvent{}, Errorf(EINVALID, "dedupeKey is empty; omit it instead")
		}
		if err := checkLine("dedupeKey", d, MaxDedupeKeyBytes); err != nil {
			return NewEvent{}, err
		}
		ev.DedupeKey = d
	}

	// Payload whitelist (SIG-2).
	if in.Outcome != nil {
		if !in.Kind.TakesOutcome() {
			return NewEvent{}, Errorf(EINVALID, "outcome is only allowed on %s, not on %s", oneOf(outcomeKinds()), in.Kind)
		}
		if !in.Outcome.Valid() {
			return NewEvent{}, Errorf(EINVALID, "outcome %q is not %s", truncateForMessage(string(*in.Outcome)), oneOf(AllRunOutcomes))
		}
		ev.Payload.Outcome = *in.Outcome
	}
	if in.Channel != nil {
		c := strings.ToLower(strings.TrimSpace(*in.Channel))
		if c == "" {
			return NewEvent{}, Errorf(EINVALID, "channel is empty; omit it instead")
		}
		if err := checkLine("channel", c, MaxChannelBytes); err != nil {
			return NewEvent{}, err
		}
		ev.Payload.Channel = c
	}
	if in.Turns != nil {
		if *in.Turns < 1 || int64(*in.Turns) > maxJSONInt {
			return NewEvent{}, Errorf(EINVALID, "turns must be between 1 and %d, got %d", int64(maxJSONInt), *in.Turns)
		}
		ev.Payload.Turns = *in.Turns
	}

	if in.Summary != nil {
		s := strings.TrimSpace(*in.Summary)
		if s == "" {
			return NewEvent{}, Errorf(EINVALID, "summary is empty; omit it to get the canonical summary")
		}
		if err := checkSummary(s); err != nil {
			return NewEvent{}, err
		}
		ev.Summary = s
	} else {
		ev.Summary = CanonicalSummary(in.Kind, ev.Payload)
	}

	ev.OccurredAt = ClampOccurredAt(in.OccurredAt, now)

	seen := map[string]bool{}
	var watchers []SessionRef
	if len(in.Watchers) > MaxWatchersPerEvent {
		return NewEvent{}, Errorf(EINVALID, "at most %d watchers per event, got %d", MaxWatchersPerEvent, len(in.Watchers))
	}
	var skipped []SkippedWatcher
	for _, w := range in.Watchers {
		// A watcher that cannot watch is skipped and reported, never a reason to
		// refuse the event (WAT-4, SIG-7): only an invalid event is refused.
		wr, err := ResolveWatcher(w)
		if err != nil {
			skipped = append(skipped, SkippedWatcher{Watcher: w, Reason: ErrorMessage(err)})
			continue
		}
		if wr.Key == ref.Key && wr.AgentID == ref.AgentID {
			skipped = append(skipped, SkippedWatcher{Watcher: w, Reason: "the watcher is the session itself; a session cannot watch itself"})
			continue
		}
		if !seen[wr.Key] {
			seen[wr.Key] = true
			watchers = append(watchers, wr)
		}
	}
	ne.Event, ne.SessionKind, ne.Watchers, ne.Skipped = ev, kind, watchers, skipped
	return ne, nil
}

// ClampOccurredAt clamps a caller's time into [now-24h, now]; nil means now (SIG-5).
func ClampOccurredAt(t *time.Time, now time.Time) time.Time {
	if t == nil || t.IsZero() {
		return now.UTC()
	}
	v := t.UTC()
	if v.After(now) {
		return now.UTC()
	}
	if min := now.Add(-MaxClockSkew); v.Before(min) {
		return min.UTC()
	}
	return v
}

func checkSummary(s string) error {
	if !utf8.ValidString(s) {
		return Errorf(EINVALID, "summary is not valid UTF-8")
	}
	if strings.ContainsAny(s, "\r\n\u2028\u2029") {
		return Errorf(EINVALID, "summary must be one line")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return Errorf(EINVALID, "summary contains a control character")
		}
	}
	if n := utf8.RuneCountInString(s); n > MaxSummaryRunes {
		return Errorf(EINVALID, "summary is %d characters; the limit is %d", n, MaxSummaryRunes)
	}
	return nil
}

func checkLine(what, s string, maxBytes int) error {
	if s == "" {
		return Errorf(EINVALID, "%s is empty; omit it instead", what)
	}
	return checkText(what, s, maxBytes)
}

// checkText checks what keys and the other one-line fields of the API obey:
// at most maxBytes, valid UTF-8, no control character or line break.
func checkText(what, s string, maxBytes int) error {
	if len(s) > maxBytes {
		return Errorf(EINVALID, "%s is %d bytes; the limit is %d", what, len(s), maxBytes)
	}
	if !utf8.ValidString(s) {
		return Errorf(EINVALID, "%s is not valid UTF-8", what)
	}
	for _, r := range s {
		if unicode.IsControl(r) || isLineSeparator(r) {
			return Errorf(EINVALID, "%s contains a control character or line break", what)
		}
	}
	return nil
}

// SessionKey returns the canonical key of the event's session.
func (e Event) SessionKey() string { return e.Session.Key }

// AgentID returns the agent of the event's session.
func (e Event) AgentID() string { return e.Session.AgentID }

// OptActorID is ActorID with "" as nil, the way the API spells an absent value.
// It and the views below are plain methods so that gqlgen binds them as fields and
// resolves them inline: a field resolver would run in a goroutine of its own for every
// event of a page, and SIG-6 pages hold up to 500 events.
func (e *Event) OptActorID() *string { return optional(e.ActorID) }

// OptRunID is RunID with "" as nil.
func (e *Event) OptRunID() *string { return optional(e.RunID) }

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
