package client

import (
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// Validate checks ev with the service's own rules, the core's ValidateRecord: key
// grammar, vocabularies, payload whitelist, summary and text (SIG-1..5, KEY-1..4,
// ERR-3). It returns the *Error the service would answer, or nil. Record calls it
// first (CLT-5). The token's role it cannot know: FORBIDDEN (CLT-1) comes at delivery.
func (ev Event) Validate() error {
	_, err := awareness.ValidateRecord(ev.input(), time.Now())
	if err != nil {
		return &Error{Code: awareness.ErrorCode(err), Message: awareness.ErrorMessage(err)}
	}
	return nil
}

// input is ev as the service decodes it: the JSON encoding omits empty fields, which
// the service sees as absent.
func (ev Event) input() awareness.RecordInput {
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	in := awareness.RecordInput{
		SessionKey: ev.SessionKey, AgentID: opt(ev.AgentID),
		Kind: awareness.EventKind(ev.Kind), ActorType: awareness.ActorType(ev.ActorType),
		ActorID: opt(ev.ActorID), Summary: opt(ev.Summary), RunID: opt(ev.RunID),
		Channel: opt(ev.Channel), DedupeKey: opt(ev.DedupeKey), Watchers: ev.Watchers,
	}
	if !ev.OccurredAt.IsZero() {
		t := ev.OccurredAt
		in.OccurredAt = &t
	}
	if ev.Outcome != "" {
		o := awareness.RunOutcome(ev.Outcome)
		in.Outcome = &o
	}
	if ev.Turns != 0 {
		t := ev.Turns
		in.Turns = &t
	}
	return in
}
