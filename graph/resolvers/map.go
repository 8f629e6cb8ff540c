package resolvers

import (
	"github.com/awareness/awareness/graph/gqlmodel"
	"github.com/awareness/awareness/internal/awareness"
)

// defaultSessionsFirst is the page size of sessionsList when a client passes first: null
// (the schema default, 50, covers an omitted argument).
const defaultSessionsFirst = 50

func recordInput(in gqlmodel.RecordEventInput) awareness.RecordInput {
	return awareness.RecordInput{
		SessionKey: in.SessionKey,
		AgentID:    in.AgentID,
		Kind:       in.Kind,
		ActorType:  in.ActorType,
		ActorID:    in.ActorID,
		Summary:    in.Summary,
		OccurredAt: in.OccurredAt,
		RunID:      in.RunID,
		Outcome:    in.Outcome,
		Channel:    in.Channel,
		Turns:      in.Turns,
		DedupeKey:  in.DedupeKey,
		Watchers:   in.Watchers,
	}
}

func recordEventResult(res awareness.RecordResult) gqlmodel.RecordEventResult {
	return gqlmodel.RecordEventResult{
		Recorded:        res.Recorded,
		Event:           &res.Event,
		StateVersion:    int(res.StateVersion),
		NoticesOpened:   res.NoticesOpened,
		SkippedWatchers: nonNilSlice(res.SkippedWatchers),
	}
}

// recordEventsItems maps a batch's items; a refused input's error keeps its code and
// message as the error presenter would show them (ERR-1).
func recordEventsItems(items []awareness.BatchItem) []gqlmodel.RecordEventsItem {
	out := make([]gqlmodel.RecordEventsItem, len(items))
	for i, it := range items {
		out[i].Index = i
		if it.Err != nil {
			code, msg := awareness.ErrorCode(it.Err), awareness.ErrorMessage(it.Err)
			if code == awareness.EINTERNAL || msg == "" {
				msg = internalMessage
			}
			out[i].Error = &gqlmodel.InputError{Code: code, Message: msg}
			continue
		}
		r := recordEventResult(*it.Result)
		out[i].Result = &r
	}
	return out
}

func sessionStatus(st awareness.Status) gqlmodel.SessionStatus {
	out := gqlmodel.SessionStatus{
		SessionKey:   st.Ref.Key,
		AgentID:      st.Ref.AgentID,
		StateVersion: int(st.StateVersion),
		StateChanges: st.Changes,
		Generation:   int(st.Generation),
	}
	if st.Session != nil {
		s := session(*st.Session)
		out.Session = &s
	}
	return out
}

func sessionFilter(f *gqlmodel.SessionFilter) awareness.SessionFilter {
	if f == nil {
		return awareness.SessionFilter{}
	}
	return awareness.SessionFilter{
		AgentID:       f.AgentID,
		Kinds:         f.Kinds,
		ActiveMinutes: f.ActiveMinutes,
		KeyPrefix:     f.KeyPrefix,
	}
}

func sessionList(p awareness.SessionPage) gqlmodel.SessionList {
	out := gqlmodel.SessionList{
		Sessions: make([]gqlmodel.Session, 0, len(p.Sessions)),
		PageInfo: &gqlmodel.PageInfo{HasNextPage: p.HasNextPage, EndCursor: optString(p.EndCursor)},
	}
	for _, s := range p.Sessions {
		out.Sessions = append(out.Sessions, session(s))
	}
	return out
}

// session maps a registry/head row. stateVersion is null for a session that never
// logged a change (REC-5).
func session(s awareness.Session) gqlmodel.Session {
	kind := s.Kind
	if kind == "" {
		kind = awareness.ClassifyKey(s.Ref.Key)
	}
	out := gqlmodel.Session{
		SessionKey:                 s.Ref.Key,
		AgentID:                    s.Ref.AgentID,
		Kind:                       kind,
		SessionID:                  s.Entry.SessionID,
		ParentSessionKey:           s.Entry.ParentSessionKey,
		ChatType:                   s.Entry.ChatType,
		Provider:                   s.Entry.Provider,
		DisplayName:                s.Entry.DisplayName,
		UpdatedAt:                  s.UpdatedAt,
		InputTokens:                intPtr(s.Entry.InputTokens),
		OutputTokens:               intPtr(s.Entry.OutputTokens),
		TotalTokens:                intPtr(s.Entry.TotalTokens),
		ContextTokens:              intPtr(s.Entry.ContextTokens),
		CompactionCount:            int(s.CompactionCount),
		MemoryFlushAt:              s.Entry.MemoryFlushAt,
		MemoryFlushCompactionCount: intPtr(s.Entry.MemoryFlushCompactionCount),
		Extra:                      extraMap(s.Entry.Extra),
	}
	if s.StateVersion > 0 {
		v := int(s.StateVersion)
		out.StateVersion = &v
	}
	return out
}

// optString maps "" (absent in the domain) to null.
func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func int64Ptr(v *int) *int64 {
	if v == nil {
		return nil
	}
	n := int64(*v)
	return &n
}

func intPtr(v *int64) *int {
	if v == nil {
		return nil
	}
	n := int(*v)
	return &n
}

// nonNil turns a nil slice into an empty one: the schema's lists are non-null.
func nonNil[T any](s []T, err error) ([]T, error) {
	if err != nil {
		return nil, err
	}
	if s == nil {
		s = []T{}
	}
	return s, nil
}

// nonNilSlice returns s, or an empty slice for nil: a non-null list field.
func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// activityMinutes is the window of an activity query: sinceMinutes, 60 when null.
func activityMinutes(sinceMinutes *int) int {
	if sinceMinutes == nil {
		return 60
	}
	return *sinceMinutes
}
