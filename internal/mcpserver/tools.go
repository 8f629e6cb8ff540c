package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Inputs of the tools; their JSON schemas are inferred from these types.
type (
	statusIn struct {
		SessionKey   string `json:"sessionKey" jsonschema:"the session key, e.g. agent:main:subagent:ab12, or a bare key such as global"`
		AgentID      string `json:"agentId,omitempty" jsonschema:"the agent of a bare key (default: the agent of a canonical key, else main)"`
		ChangesSince *int64 `json:"changesSince,omitempty" jsonschema:"return the events after this version (the notice's changesSince)"`
		Limit        *int   `json:"limit,omitempty" jsonschema:"at most this many events (default and maximum 200)"`
	}
	listIn struct {
		AgentID       string   `json:"agentId,omitempty" jsonschema:"only this agent's sessions"`
		Kinds         []string `json:"kinds,omitempty" jsonschema:"only these kinds (main, subagent, acp, direct, group, room, channel, cron, hook, global, other)"`
		ActiveMinutes *int     `json:"activeMinutes,omitempty" jsonschema:"only sessions updated in the last N minutes"`
		KeyPrefix     string   `json:"keyPrefix,omitempty" jsonschema:"only keys starting with this prefix"`
		First         *int     `json:"first,omitempty" jsonschema:"page size (default 50)"`
		After         string   `json:"after,omitempty" jsonschema:"the endCursor of the previous page"`
	}
	watchIn struct {
		Watcher       string `json:"watcher" jsonschema:"the watching session (agent-qualified key)"`
		Target        string `json:"target" jsonschema:"the watched session's key"`
		TargetAgentID string `json:"targetAgentId,omitempty" jsonschema:"the target's agent for a bare key"`
	}
	pendingIn struct {
		Watcher string `json:"watcher" jsonschema:"the watching session (agent-qualified key)"`
	}
	noticeRefIn struct {
		Target          string `json:"target" jsonschema:"the notice's target"`
		TargetAgentID   string `json:"targetAgentId,omitempty" jsonschema:"the notice's targetAgentId"`
		NotifiedVersion int64  `json:"notifiedVersion" jsonschema:"the notice's notifiedVersion"`
	}
	ackIn struct {
		Watcher string        `json:"watcher" jsonschema:"the watching session"`
		Notices []noticeRefIn `json:"notices" jsonschema:"exactly the notices your turn consumed; one opened since stays pending"`
	}
)

const (
	statusOp = `query($k: String!, $a: String, $s: Int, $l: Int) { sessionStatus(sessionKey: $k, agentId: $a, changesSince: $s, limit: $l) {
  sessionKey agentId stateVersion stateChanges { events { sequence kind actorType actorId summary occurredAt runId payload }
  historyGap truncated earliestAvailableSequence nextChangesSince } } }`
	listOp = `query($f: SessionFilter, $n: Int, $after: String) { sessionsList(filter: $f, first: $n, after: $after) {
  sessions { sessionKey agentId kind sessionId parentSessionKey chatType provider displayName updatedAt stateVersion compactionCount }
  pageInfo { hasNextPage endCursor } } }`
	watchOp = `mutation($in: WatchInput!) { watch(input: $in) { watched reason
  cursor { watcher target targetAgentId lastAcked notified material pending updatedAt } } }`
	unwatchOp = `mutation($w: String!, $t: String!, $a: String) { unwatch(watcher: $w, target: $t, targetAgentId: $a) }`
	ackOp     = `mutation($w: String!, $n: [NoticeRef!]) { ackNotices(watcher: $w, notices: $n) {
  watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt } }`
)

// Tool names (CLT-3); the notice text names session_status (NTC-1).
const (
	ToolSessionStatus  = "session_status"
	ToolSessionsList   = "sessions_list"
	ToolSessionWatch   = "session_watch"
	ToolSessionUnwatch = "session_unwatch"
	ToolPendingNotices = "pending_notices"
	ToolAckNotices     = "ack_notices"
)

// Tools lists the tool names in the order tools/list gives them.
var Tools = []string{ToolSessionStatus, ToolSessionsList, ToolSessionWatch, ToolSessionUnwatch, ToolPendingNotices, ToolAckNotices}

func setIf(vars map[string]any, name, v string) {
	if v != "" {
		vars[name] = v
	}
}

// run executes op and returns the structured content (field's value, or the whole
// data when whole) with the text describe writes from it.
func (s *Server) run(ctx context.Context, req *mcp.CallToolRequest, op string, vars map[string]any, name string, whole bool,
	describe func(json.RawMessage) string) (*mcp.CallToolResult, any, error) {
	c, _ := s.clientFor(req.Extra)
	data, err := c.DoRaw(ctx, op, vars)
	if err != nil {
		return errorResult(err), nil, nil
	}
	v, err := field(data, name)
	if err != nil {
		return nil, nil, err
	}
	out := v
	if whole {
		out = data
	}
	return &mcp.CallToolResult{Content: text(describe(v))}, out, nil
}

func (s *Server) addTools() {
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  ToolSessionStatus,
		Title: "Session status and changes",
		Description: "A session's state version and, with changesSince, the exact changes after it (REC-1): call it when a stale " +
			"notice says a session changed, with the notice's sessionKey, agentId and changesSince, before acting.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in statusIn) (*mcp.CallToolResult, any, error) {
		vars := map[string]any{"k": in.SessionKey}
		setIf(vars, "a", in.AgentID)
		if in.ChangesSince != nil {
			vars["s"] = *in.ChangesSince
		}
		if in.Limit != nil {
			vars["l"] = *in.Limit
		}
		return s.run(ctx, req, statusOp, vars, "sessionStatus", false, describeStatus)
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        ToolSessionsList,
		Title:       "List sessions",
		Description: "Sessions of the registry with their state versions (REC-5), filtered and paged.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, any, error) {
		f := map[string]any{}
		setIf(f, "agentId", in.AgentID)
		setIf(f, "keyPrefix", in.KeyPrefix)
		if len(in.Kinds) > 0 {
			f["kinds"] = in.Kinds
		}
		if in.ActiveMinutes != nil {
			f["activeMinutes"] = *in.ActiveMinutes
		}
		vars := map[string]any{}
		if len(f) > 0 {
			vars["f"] = f
		}
		if in.First != nil {
			vars["n"] = *in.First
		}
		setIf(vars, "after", in.After)
		return s.run(ctx, req, listOp, vars, "sessionsList", false, describeList)
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  ToolSessionWatch,
		Title: "Watch a session",
		Description: "Register the watcher session on a target at its current version (WAT-3): the watcher gets one stale " +
			"notice when another actor changes the target.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in watchIn) (*mcp.CallToolResult, any, error) {
		w := map[string]any{"watcher": in.Watcher, "target": in.Target}
		setIf(w, "targetAgentId", in.TargetAgentID)
		return s.run(ctx, req, watchOp, map[string]any{"in": w}, "watch", false, describeWatch)
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        ToolSessionUnwatch,
		Title:       "Stop watching a session",
		Description: "Remove the watcher's cursor on the target (WAT-5).",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in watchIn) (*mcp.CallToolResult, any, error) {
		vars := map[string]any{"w": in.Watcher, "t": in.Target}
		setIf(vars, "a", in.TargetAgentID)
		return s.run(ctx, req, unwatchOp, vars, "unwatch", true, func(v json.RawMessage) string {
			if string(v) == "true" {
				return fmt.Sprintf("%s no longer watches %s.", in.Watcher, in.Target)
			}
			return fmt.Sprintf("%s did not watch %s: nothing removed.", in.Watcher, in.Target)
		})
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:        ToolPendingNotices,
		Title:       "Pending stale notices",
		Description: "The watcher's pending stale notices, without acknowledging them (NTC-7).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in pendingIn) (*mcp.CallToolResult, any, error) {
		return s.run(ctx, req, pendingQuery, map[string]any{"w": in.Watcher}, "pendingNotices", true, func(v json.RawMessage) string {
			return describeNotices(v, "No pending notices.", "pending notice")
		})
	})
	mcp.AddTool(s.mcp, &mcp.Tool{
		Name:  ToolAckNotices,
		Title: "Acknowledge stale notices",
		Description: "Acknowledge exactly the notices your turn consumed, each named by target, targetAgentId and " +
			"notifiedVersion (NTC-3); a notice opened since stays pending. Returns the follow-up notices opened.",
	}, func(ctx context.Context, req *mcp.CallToolRequest, in ackIn) (*mcp.CallToolResult, any, error) {
		refs := make([]map[string]any, 0, len(in.Notices))
		for _, n := range in.Notices {
			r := map[string]any{"target": n.Target, "notifiedVersion": n.NotifiedVersion}
			setIf(r, "targetAgentId", n.TargetAgentID)
			refs = append(refs, r)
		}
		return s.run(ctx, req, ackOp, map[string]any{"w": in.Watcher, "n": refs}, "ackNotices", true, func(v json.RawMessage) string {
			return "Acknowledged. " + describeNotices(v, "No follow-up notice opened.", "follow-up notice")
		})
	})
}

func describeStatus(v json.RawMessage) string {
	var st struct {
		SessionKey   string `json:"sessionKey"`
		AgentID      string `json:"agentId"`
		StateVersion int64  `json:"stateVersion"`
		StateChanges *struct {
			Events []struct {
				Sequence   int64   `json:"sequence"`
				Kind       string  `json:"kind"`
				ActorType  string  `json:"actorType"`
				ActorID    *string `json:"actorId"`
				Summary    string  `json:"summary"`
				OccurredAt string  `json:"occurredAt"`
			} `json:"events"`
			HistoryGap                bool  `json:"historyGap"`
			Truncated                 bool  `json:"truncated"`
			EarliestAvailableSequence int64 `json:"earliestAvailableSequence"`
			NextChangesSince          int64 `json:"nextChangesSince"`
		} `json:"stateChanges"`
	}
	_ = json.Unmarshal(v, &st)
	var b strings.Builder
	fmt.Fprintf(&b, "Session %q (agent %s) is at state version %d.", st.SessionKey, st.AgentID, st.StateVersion)
	if ch := st.StateChanges; ch != nil {
		if len(ch.Events) == 0 {
			b.WriteString("\nSession state changes: none.")
		} else {
			fmt.Fprintf(&b, "\nSession state changes: %d.", len(ch.Events))
		}
		for _, e := range ch.Events {
			actor := e.ActorType
			if e.ActorID != nil {
				actor += " " + *e.ActorID
			}
			fmt.Fprintf(&b, "\n#%d %s by %s at %s: %s", e.Sequence, e.Kind, actor, e.OccurredAt, e.Summary)
		}
		if ch.HistoryGap {
			fmt.Fprintf(&b, "\nHistory gap: changes before #%d were pruned; refresh the whole session state instead of applying this delta.", ch.EarliestAvailableSequence)
		}
		if ch.Truncated {
			fmt.Fprintf(&b, "\nMore changes follow: call session_status again with changesSince %d.", ch.NextChangesSince)
		}
	}
	return b.String()
}

func describeList(v json.RawMessage) string {
	var l struct {
		Sessions []struct {
			SessionKey   string `json:"sessionKey"`
			AgentID      string `json:"agentId"`
			Kind         string `json:"kind"`
			StateVersion *int64 `json:"stateVersion"`
		} `json:"sessions"`
		PageInfo struct {
			HasNextPage bool    `json:"hasNextPage"`
			EndCursor   *string `json:"endCursor"`
		} `json:"pageInfo"`
	}
	_ = json.Unmarshal(v, &l)
	var b strings.Builder
	fmt.Fprintf(&b, "%d sessions.", len(l.Sessions))
	for _, s := range l.Sessions {
		ver := "no logged changes"
		if s.StateVersion != nil {
			ver = fmt.Sprintf("state version %d", *s.StateVersion)
		}
		fmt.Fprintf(&b, "\n%s (agent %s, %s): %s", s.SessionKey, s.AgentID, s.Kind, ver)
	}
	if l.PageInfo.HasNextPage && l.PageInfo.EndCursor != nil {
		fmt.Fprintf(&b, "\nMore sessions: call sessions_list again with after %q.", *l.PageInfo.EndCursor)
	}
	return b.String()
}

func describeWatch(v json.RawMessage) string {
	var w struct {
		Watched bool    `json:"watched"`
		Reason  *string `json:"reason"`
		Cursor  *struct {
			Watcher  string `json:"watcher"`
			Target   string `json:"target"`
			LastAck  int64  `json:"lastAcked"`
			Material int64  `json:"material"`
		} `json:"cursor"`
	}
	_ = json.Unmarshal(v, &w)
	if !w.Watched {
		reason := "no reason given"
		if w.Reason != nil {
			reason = *w.Reason
		}
		return "Not watched: " + reason
	}
	if w.Cursor == nil {
		return "Watched."
	}
	return fmt.Sprintf("%s watches %s from version %d: changes by other actors open one stale notice.", w.Cursor.Watcher, w.Cursor.Target, w.Cursor.LastAck)
}

func describeNotices(v json.RawMessage, none, noun string) string {
	var ns []struct {
		Text            string `json:"text"`
		NotifiedVersion int64  `json:"notifiedVersion"`
		Wake            bool   `json:"wake"`
	}
	_ = json.Unmarshal(v, &ns)
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
		fmt.Fprintf(&b, "\n%s (notifiedVersion %d)", n.Text, n.NotifiedVersion)
	}
	return b.String()
}
