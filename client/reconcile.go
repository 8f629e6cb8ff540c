package client

import (
	"context"
	"encoding/json"
	"time"
)

// StateEvent is one event of a session's log: the GraphQL StateEvent.
type StateEvent struct {
	Sequence   int64           `json:"sequence"`
	Kind       string          `json:"kind"`
	ActorType  string          `json:"actorType"`
	ActorID    *string         `json:"actorId"`
	Summary    string          `json:"summary"`
	OccurredAt time.Time       `json:"occurredAt"`
	RunID      *string         `json:"runId"`
	Payload    json.RawMessage `json:"payload"`
}

// Target names a session: its key, and for a bare key its agent (KEY-3). An empty
// agent means the agent of a canonical key, else main.
type Target struct {
	SessionKey string
	AgentID    string
}

// Reconciliation is the delta of a session since a version.
type Reconciliation struct {
	// Events are the session's events after changesSince, ascending, complete unless
	// FullRefresh.
	Events []StateEvent
	// StateVersion is the session's version when the last page was read.
	StateVersion int64
	// FullRefresh says the delta cannot be applied: part of it was pruned, historyGap
	// (REC-2), or changesSince is ahead of the session, CURSOR_AHEAD (REC-3). The
	// caller refreshes the whole session state instead; Reason says why.
	FullRefresh bool
	Reason      string
}

const statusQuery = `query($k: String!, $a: String, $s: Int, $l: Int) { sessionStatus(sessionKey: $k, agentId: $a, changesSince: $s, limit: $l) {
  stateVersion stateChanges { events { sequence kind actorType actorId summary occurredAt runId payload }
  historyGap truncated earliestAvailableSequence nextChangesSince } } }`

// reconcilePage is the page size Reconcile asks for: the service's maximum.
const reconcilePage = 200

// maxRetryAfter is the longest RATE_LIMITED wait Reconcile takes by itself; a longer
// one is returned to the caller.
const maxRetryAfter = 5 * time.Second

// Reconcile reads every change of target after changesSince, following
// nextChangesSince across truncated pages (REC-1). A page refused with RATE_LIMITED
// by the token's query budget is asked again after its retryAfterMs, up to 5 s. It
// never moves a cursor (REC-4).
func (c *Client) Reconcile(ctx context.Context, target Target, changesSince int64) (Reconciliation, error) {
	var out Reconciliation
	since := changesSince
	for {
		vars := map[string]any{"k": target.SessionKey, "s": since, "l": reconcilePage}
		if target.AgentID != "" {
			vars["a"] = target.AgentID
		}
		var res struct {
			SessionStatus struct {
				StateVersion int64 `json:"stateVersion"`
				StateChanges struct {
					Events           []StateEvent `json:"events"`
					HistoryGap       bool         `json:"historyGap"`
					Truncated        bool         `json:"truncated"`
					NextChangesSince int64        `json:"nextChangesSince"`
				} `json:"stateChanges"`
			} `json:"sessionStatus"`
		}
		err := c.Do(ctx, statusQuery, vars, &res)
		if d := RetryAfter(err); d > 0 && d <= maxRetryAfter {
			// The token's query budget (ERR-4) is spent: the page after the wait asked.
			t := time.NewTimer(d)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return out, ctx.Err()
			}
		}
		if ErrorCode(err) == CodeCursorAhead {
			out.FullRefresh, out.Reason = true, "changesSince is ahead of the session's version (CURSOR_AHEAD): its history was reset or deleted"
			return out, nil
		}
		if err != nil {
			return out, err
		}
		st := res.SessionStatus
		out.StateVersion = st.StateVersion
		out.Events = append(out.Events, st.StateChanges.Events...)
		if st.StateChanges.HistoryGap {
			out.FullRefresh, out.Reason = true, "part of the delta was pruned (historyGap)"
		}
		if !st.StateChanges.Truncated || st.StateChanges.NextChangesSince <= since {
			return out, nil
		}
		since = st.StateChanges.NextChangesSince
	}
}
