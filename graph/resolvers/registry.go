package resolvers

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/awareness/awareness/graph/gqlmodel"
	"github.com/awareness/awareness/internal/awareness"
)

// The sessions registry (REG-1..3): argument decoding and result mapping for
// upsertSession, importSessions, recordMemoryFlush and compactionPolicy.

func upsertSession(ctx context.Context, svc *awareness.Service, in gqlmodel.SessionInput) (gqlmodel.Session, error) {
	extra, err := extraOf(in.Extra)
	if err != nil {
		return gqlmodel.Session{}, err
	}
	sess, err := svc.UpsertSession(ctx, awareness.SessionInput{
		SessionKey: in.SessionKey,
		AgentID:    in.AgentID,
		Entry: awareness.SessionEntry{
			SessionID:        in.SessionID,
			ParentSessionKey: in.ParentSessionKey,
			ChatType:         in.ChatType,
			Provider:         in.Provider,
			DisplayName:      in.DisplayName,
			InputTokens:      int64Ptr(in.InputTokens),
			OutputTokens:     int64Ptr(in.OutputTokens),
			TotalTokens:      int64Ptr(in.TotalTokens),
			ContextTokens:    int64Ptr(in.ContextTokens),
			Extra:            extra,
		},
	})
	if err != nil {
		return gqlmodel.Session{}, err
	}
	return session(sess), nil
}

func importSessions(ctx context.Context, svc *awareness.Service, agentID, sessionsJSON string) (int, error) {
	return svc.ImportSessions(ctx, agentID, []byte(sessionsJSON))
}

func recordMemoryFlush(ctx context.Context, svc *awareness.Service, sessionKey string, agentID *string) (gqlmodel.Session, error) {
	sess, err := svc.RecordMemoryFlush(ctx, sessionKey, agentID)
	if err != nil {
		return gqlmodel.Session{}, err
	}
	return session(sess), nil
}

func compactionPolicy(ctx context.Context, svc *awareness.Service, sessionKey string, agentID *string, contextWindow int, reserveTokens, softThresholdTokens *int) (gqlmodel.CompactionPolicy, error) {
	q := awareness.CompactionQuery{
		SessionKey:          sessionKey,
		AgentID:             agentID,
		ContextWindow:       int64(contextWindow),
		ReserveTokens:       awareness.DefaultReserveTokens,
		SoftThresholdTokens: awareness.DefaultSoftThresholdTokens,
	}
	// An explicit null takes the default too.
	if reserveTokens != nil {
		q.ReserveTokens = int64(*reserveTokens)
	}
	if softThresholdTokens != nil {
		q.SoftThresholdTokens = int64(*softThresholdTokens)
	}
	p, err := svc.CompactionPolicy(ctx, q)
	if err != nil {
		return gqlmodel.CompactionPolicy{}, err
	}
	return gqlmodel.CompactionPolicy{
		ContextTokens:              int(p.ContextTokens),
		MemoryFlushDue:             p.MemoryFlushDue,
		CompactionDue:              p.CompactionDue,
		CompactionCount:            int(p.CompactionCount),
		MemoryFlushThreshold:       int(p.MemoryFlushThreshold),
		CompactionThreshold:        int(p.CompactionThreshold),
		MemoryFlushCompactionCount: intPtr(p.MemoryFlushCompactionCount),
	}, nil
}

// extraOf encodes the extra object of an upsert, field by field. A nil map is nil
// (nothing to merge); a null field stays JSON null (remove the field).
func extraOf(m map[string]any) (map[string]json.RawMessage, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, awareness.Errorf(awareness.EINVALID, "extra.%s is not a JSON value", k)
		}
		out[k] = b
	}
	return out, nil
}

// extraMap decodes a session's extra fields for the JSON scalar; numbers keep their
// exact text.
func extraMap(extra map[string]json.RawMessage) map[string]any {
	if len(extra) == 0 {
		return nil
	}
	out := make(map[string]any, len(extra))
	for k, raw := range extra {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			continue // the store only keeps valid JSON
		}
		out[k] = v
	}
	return out
}
