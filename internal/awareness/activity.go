package awareness

import (
	"context"
	"slices"
	"strings"
	"sync"
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
	q, err := s.activityQuery(ctx, key, agentID, sinceMinutes)
	if err != nil {
		return nil, err
	}
	out, err := s.store.Activity(ctx, q)
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []ActivityBucket{}
	}
	return out, nil
}

// activityQuery checks and scopes an activity window (ERR-2: a refused call reads
// nothing).
func (s *Service) activityQuery(ctx context.Context, key, agentID *string, sinceMinutes int) (ActivityQuery, error) {
	if sinceMinutes < 1 || sinceMinutes > MaxActivityMinutes {
		return ActivityQuery{}, Errorf(EINVALID, "sinceMinutes must be between 1 and %d, got %d", MaxActivityMinutes, sinceMinutes)
	}
	var q ActivityQuery
	if key != nil {
		ref, err := ResolveSession(*key, agentID)
		if err != nil {
			return ActivityQuery{}, err
		}
		if err := s.authorize(ctx, ref.AgentID); err != nil {
			return ActivityQuery{}, err
		}
		q.Session = &ref
	} else {
		a := ""
		if agentID != nil {
			a = strings.ToLower(strings.TrimSpace(*agentID))
			if !ValidAgentID(a) {
				return ActivityQuery{}, Errorf(EINVALID, "agentId %q is not a valid agent id", truncateForMessage(*agentID))
			}
		}
		scoped, err := s.scopeAgent(ctx, a)
		if err != nil {
			return ActivityQuery{}, err
		}
		q.AgentID = scoped
	}
	end := s.Now().Truncate(time.Minute).Add(time.Minute)
	q.Until = end
	q.Since = end.Add(-time.Duration(sinceMinutes) * time.Minute)
	return q, nil
}

// NoticeActivityBucket is how many stale notices opened and how many were acknowledged
// in one minute, counted by this process (see Service.NoticeActivity).
type NoticeActivityBucket struct {
	// Minute is the start of the minute, UTC.
	Minute       time.Time
	Opened       int64
	Acknowledged int64
}

// noticeTally counts the notices this process opened and acknowledged, per minute and
// target, for the last MaxActivityMinutes. It is not stored: the counts start empty at
// every start, and a notice another process (PostgreSQL deployments) opened or
// acknowledged is not counted here.
type noticeTally struct {
	mu     sync.Mutex
	counts map[tallyKey]*[2]int64 // [opened, acknowledged]
	swept  int64                  // the minute of the last sweep of old entries
}

type tallyKey struct {
	minute int64
	target SessionRef
}

func (t *noticeTally) add(now time.Time, ns []Notice, acked bool) {
	if len(ns) == 0 {
		return
	}
	m := now.Unix() / 60
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = map[tallyKey]*[2]int64{}
	}
	if m != t.swept {
		t.swept = m
		for k := range t.counts {
			if k.minute <= m-MaxActivityMinutes {
				delete(t.counts, k)
			}
		}
	}
	i := 0
	if acked {
		i = 1
	}
	for _, n := range ns {
		k := tallyKey{minute: m, target: n.Target}
		c := t.counts[k]
		if c == nil {
			c = new([2]int64)
			t.counts[k] = c
		}
		c[i]++
	}
}

func (t *noticeTally) read(q ActivityQuery) []NoticeActivityBucket {
	from, until := q.Since.Unix()/60, q.Until.Unix()/60
	byMinute := map[int64]*NoticeActivityBucket{}
	t.mu.Lock()
	for k, c := range t.counts {
		if k.minute < from || k.minute >= until {
			continue
		}
		if q.Session != nil && k.target != *q.Session || q.Session == nil && q.AgentID != "" && k.target.AgentID != q.AgentID {
			continue
		}
		b := byMinute[k.minute]
		if b == nil {
			b = &NoticeActivityBucket{Minute: time.Unix(k.minute*60, 0).UTC()}
			byMinute[k.minute] = b
		}
		b.Opened += c[0]
		b.Acknowledged += c[1]
	}
	t.mu.Unlock()
	out := make([]NoticeActivityBucket, 0, len(byMinute))
	for _, b := range byMinute {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b NoticeActivityBucket) int { return a.Minute.Compare(b.Minute) })
	return out
}

// NoticeActivity counts the stale notices opened and acknowledged per minute over the
// last sinceMinutes minutes (1..MaxActivityMinutes), about one session (key given, as
// in Activity: the notices whose target it is), about one agent's sessions, or about
// every session. The counts are this process's since it started (not stored).
func (s *Service) NoticeActivity(ctx context.Context, key, agentID *string, sinceMinutes int) ([]NoticeActivityBucket, error) {
	q, err := s.activityQuery(ctx, key, agentID, sinceMinutes)
	if err != nil {
		return nil, err
	}
	return s.tally.read(q), nil
}
