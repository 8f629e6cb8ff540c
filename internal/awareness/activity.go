package awareness

import (
	"context"
	"strings"
	"time"
)

// MaxActivityMinutes bounds the window of an activity query: one day of one-minute
// buckets.
const MaxActivityMinutes = 1440

// ActivityQuery selects the events counted by Store.Activity: those that occurred in
// [Since, Until), of one session (Session set), of one agent's sessions (AgentID set),
// or of every session.
type ActivityQuery struct {
	Session *SessionRef
	AgentID string
	Since   time.Time
	Until   time.Time
}

// ActivityBucket is how many events of one kind occurred in one minute.
type ActivityBucket struct {
	// Minute is the start of the minute, UTC.
	Minute time.Time
	Kind   EventKind
	Count  int64
}

// Activity counts the events per minute and kind over the last sinceMinutes minutes
// (1..MaxActivityMinutes), up to the end of the current minute: of one session when key
// is given (agentID qualifies it as keys do, KEY-3), else of agentID's sessions, else
// of every session. Minutes without an event have no bucket; buckets are ordered by
// minute, then kind. The counts are by occurredAt, the time the producer gave.
func (s *Service) Activity(ctx context.Context, key, agentID *string, sinceMinutes int) ([]ActivityBucket, error) {
	if sinceMinutes < 1 || sinceMinutes > MaxActivityMinutes {
		return nil, Errorf(EINVALID, "sinceMinutes must be between 1 and %d, got %d", MaxActivityMinutes, sinceMinutes)
	}
	var q ActivityQuery
	if key != nil {
		ref, err := ResolveSession(*key, agentID)
		if err != nil {
			return nil, err
		}
		if err := s.authorize(ctx, ref.AgentID); err != nil {
			return nil, err
		}
		q.Session = &ref
	} else {
		a := ""
		if agentID != nil {
			a = strings.ToLower(strings.TrimSpace(*agentID))
			if !ValidAgentID(a) {
				return nil, Errorf(EINVALID, "agentId %q is not a valid agent id", truncateForMessage(*agentID))
			}
		}
		scoped, err := s.scopeAgent(ctx, a)
		if err != nil {
			return nil, err
		}
		q.AgentID = scoped
	}
	end := s.Now().Truncate(time.Minute).Add(time.Minute)
	q.Until = end
	q.Since = end.Add(-time.Duration(sinceMinutes) * time.Minute)
	out, err := s.store.Activity(ctx, q)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []ActivityBucket{}
	}
	return out, nil
}
