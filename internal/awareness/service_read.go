// Reading: a session's status with its changes since a version (REC-1) and the sessions list.

package awareness

import (
	"context"
	"encoding/base64"
	"strconv"
	"strings"
	"time"
)

// StatusChanges is the delta of a sessionStatus call (REC-1, REC-2).
type StatusChanges struct {
	Events           []Event
	HistoryGap       bool
	Truncated        bool
	Earliest         int64
	NextChangesSince int64
	// Streamed is the sink that took the page's events as they were read (see
	// WithPageSink); Events is then empty. Nil when Events holds them.
	Streamed PageSink
}

// PageRow is one event of a changes page as the store reads it, before it becomes an
// Event: the texts, and the strings of Payload, are the driver's bytes, valid only
// until PageSink.Row returns (ActorID and RunID nil when unset).
type PageRow struct {
	Sequence                                 int64
	Kind, ActorType, ActorID, Summary, RunID []byte
	OccurredAt                               time.Time
	Payload                                  Payload
}

// PageSink takes the events of a changes page as the store reads them, in place of
// StatusChanges.Events: the GraphQL fast path writes its response straight from the
// rows instead of building the page as []Event first (REC-1 is the hot read).
type PageSink interface {
	// Row takes the next event of ref's page. It returns false when it cannot take
	// it (a value it cannot write); the store then reads the whole page into Events
	// instead, in the same read transaction, and the sink's rows are not used.
	Row(ref SessionRef, r *PageRow) bool
}

// PageStreamer is a Store that can read a changes page into a PageSink: ReadStatus,
// the page's events handed to sink instead of returned in Changes.Events. streamed
// tells whether they were (Changes.Events is then nil); when it is false, Events
// holds the page as ReadStatus returns it. count and last are the number of events
// sink took and the sequence of the last.
type PageStreamer interface {
	ReadStatusTo(ctx context.Context, ref SessionRef, after int64, limit int, sink PageSink) (ch Changes, sess *Session, streamed bool, count int, last int64, err error)
}

type pageSinkKey struct{}

// WithPageSink returns a context under which SessionStatus hands the events of its
// changes page to sink as the store reads them, when the store is a PageStreamer.
// The transport that writes the response sets it (graph/fastpath); the page's answer
// then carries it in StatusChanges.Streamed.
func WithPageSink(ctx context.Context, sink PageSink) context.Context {
	return context.WithValue(ctx, pageSinkKey{}, sink)
}

// Status is the answer of sessionStatus.
type Status struct {
	Ref          SessionRef
	StateVersion int64
	// Generation is the session's generation (LIF-2).
	Generation int64
	Changes    *StatusChanges
	Session    *Session
}

// SessionStatus answers reconciliation (REC-1..4). changesSince nil returns the version
// only. It never moves a cursor (REC-4).
func (s *Service) SessionStatus(ctx context.Context, key string, agentID *string, changesSince *int64, limit *int) (Status, error) {
	ref, err := ResolveSession(key, agentID)
	if err != nil {
		return Status{}, err
	}
	if err := s.authorize(ctx, ref.AgentID); err != nil {
		return Status{}, err
	}
	lim := MaxChangesLimit
	if limit != nil {
		// A limit above MaxChangesLimit is clamped, not refused (REC-1): the page says
		// truncated and nextChangesSince continues it.
		if *limit < 1 {
			return Status{}, Errorf(EINVALID, "limit must be at least 1, got %d", *limit)
		}
		lim = min(*limit, MaxChangesLimit)
	}
	var after int64
	if changesSince != nil {
		if *changesSince < 0 {
			return Status{}, Errorf(EINVALID, "changesSince must be 0 or more, got %d", *changesSince)
		}
		after = *changesSince
	} else {
		lim = 0
	}
	var (
		ch       Changes
		sess     *Session
		streamed bool
		count    int
		last     int64
	)
	sink, _ := ctx.Value(pageSinkKey{}).(PageSink)
	if ps, ok := s.store.(PageStreamer); ok && sink != nil && changesSince != nil {
		ch, sess, streamed, count, last, err = ps.ReadStatusTo(ctx, ref, after, lim, sink)
	} else {
		ch, sess, err = s.store.ReadStatus(ctx, ref, after, lim)
	}
	if err != nil {
		return Status{}, err
	}
	if !streamed {
		count = len(ch.Events)
		if count > 0 {
			last = ch.Events[count-1].Sequence
		}
	}
	st := Status{Ref: ref, StateVersion: ch.Head.Version, Generation: max(ch.Head.Generation, 1)}
	if sess != nil && sess.Registered {
		st.Session = sess
	}
	if changesSince == nil {
		return st, nil
	}
	if after > ch.Head.Version {
		return Status{}, &Error{Code: ECURSORAHEAD, Message: "changesSince " + strconv.FormatInt(after, 10) + " is ahead of the session's stateVersion " + strconv.FormatInt(ch.Head.Version, 10) + "; the cursor belongs to another session or a deleted incarnation: refresh the whole session state"}
	}
	next := after
	if count > 0 {
		next = last
	} else if !ch.More {
		next = ch.Head.Version
	}
	st.Changes = &StatusChanges{
		Events:           ch.Events,
		HistoryGap:       after < ch.Head.PrunedThrough,
		Truncated:        ch.More,
		Earliest:         ch.Earliest,
		NextChangesSince: next,
	}
	if streamed {
		st.Changes.Streamed = sink
	}
	if st.Changes.Events == nil {
		st.Changes.Events = []Event{}
	}
	return st, nil
}

// SessionFilter selects sessions for SessionsList.
type SessionFilter struct {
	AgentID       *string
	Kinds         []SessionKind
	ActiveMinutes *int
	KeyPrefix     *string
}

// SessionPage is one page of SessionsList.
type SessionPage struct {
	Sessions    []Session
	HasNextPage bool
	EndCursor   string
}

// SessionsList lists sessions with keyset pagination (REC-5). after is an opaque
// cursor from a previous page's EndCursor.
func (s *Service) SessionsList(ctx context.Context, f SessionFilter, first int, after *string) (SessionPage, error) {
	if first < 1 || first > MaxListLimit {
		return SessionPage{}, Errorf(EINVALID, "first must be between 1 and %d, got %d", MaxListLimit, first)
	}
	q := SessionQuery{Limit: first + 1, Kinds: f.Kinds}
	if f.AgentID != nil {
		a := strings.ToLower(strings.TrimSpace(*f.AgentID))
		if !ValidAgentID(a) {
			return SessionPage{}, Errorf(EINVALID, "filter.agentId %q is not a valid agent id", truncateForMessage(*f.AgentID))
		}
		q.AgentID = a
	}
	scoped, err := s.scopeAgent(ctx, q.AgentID)
	if err != nil {
		return SessionPage{}, err
	}
	q.AgentID = scoped
	for _, k := range f.Kinds {
		if !k.Valid() {
			return SessionPage{}, Errorf(EINVALID, "filter.kinds: %q is not a session kind", truncateForMessage(string(k)))
		}
	}
	if f.ActiveMinutes != nil {
		if *f.ActiveMinutes < 1 {
			return SessionPage{}, Errorf(EINVALID, "filter.activeMinutes must be positive, got %d", *f.ActiveMinutes)
		}
		// Clamped: minutes beyond MaxActiveMinutes would overflow the duration and
		// select nothing; every stored session is more recent anyway.
		q.UpdatedSince = s.Now().Add(-time.Duration(min(*f.ActiveMinutes, MaxActiveMinutes)) * time.Minute)
	}
	if f.KeyPrefix != nil {
		p := strings.ToLower(strings.TrimSpace(*f.KeyPrefix))
		if len(p) > MaxKeyBytes {
			return SessionPage{}, Errorf(EINVALID, "filter.keyPrefix is longer than %d bytes", MaxKeyBytes)
		}
		if p != "" {
			if err := checkLine("filter.keyPrefix", p, MaxKeyBytes); err != nil {
				return SessionPage{}, err
			}
		}
		q.KeyPrefix = p
	}
	if after != nil && *after != "" {
		ref, err := decodeSessionCursor(*after)
		if err != nil {
			return SessionPage{}, err
		}
		q.After = &ref
	}
	rows, err := s.store.ListSessions(ctx, q)
	if err != nil {
		return SessionPage{}, err
	}
	page := SessionPage{Sessions: rows}
	if len(rows) > first {
		page.Sessions = rows[:first]
		page.HasNextPage = true
	}
	if n := len(page.Sessions); n > 0 {
		page.EndCursor = encodeSessionCursor(page.Sessions[n-1].Ref)
	}
	return page, nil
}

func encodeSessionCursor(r SessionRef) string {
	return base64.RawURLEncoding.EncodeToString([]byte(r.AgentID + "\x00" + r.Key))
}

func decodeSessionCursor(c string) (SessionRef, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if a, k, ok := strings.Cut(string(b), "\x00"); ok && ValidAgentID(a) && checkKeyBytes("after", k) == nil {
			return SessionRef{AgentID: a, Key: k}, nil
		}
	}
	return SessionRef{}, Errorf(EINVALID, "after is not a cursor returned by sessionsList")
}
