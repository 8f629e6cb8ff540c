package mcpserver

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/internal/awareness"
)

// The arguments of the tools. Their JSON schemas are inferred from these types; a
// field without omitempty is required. Integers are int32: the GraphQL Int.
type (
	statusIn struct {
		SessionKey   string  `json:"sessionKey" jsonschema:"the session key, e.g. agent:main:subagent:ab12, or a bare key such as global"`
		AgentID      *string `json:"agentId,omitempty" jsonschema:"the agent of a bare key (default: the agent of a canonical key, else main)"`
		ChangesSince *int32  `json:"changesSince,omitempty" jsonschema:"return the changes after this version: the notice's changesSince"`
		Limit        *int32  `json:"limit,omitempty" jsonschema:"at most this many changes (default and maximum 200)"`
		Watcher      *string `json:"watcher,omitempty" jsonschema:"your own session key: the result then carries its pending stale notices"`
	}
	listIn struct {
		AgentID       *string          `json:"agentId,omitempty" jsonschema:"only this agent's sessions"`
		Kinds         []sessionKindArg `json:"kinds,omitempty" jsonschema:"only these kinds (main, subagent, acp, direct, group, room, channel, cron, hook, global, other)"`
		ActiveMinutes *int32           `json:"activeMinutes,omitempty" jsonschema:"only sessions updated in the last N minutes"`
		KeyPrefix     *string          `json:"keyPrefix,omitempty" jsonschema:"only keys starting with this prefix"`
		First         *int32           `json:"first,omitempty" jsonschema:"page size (default 50, at most 500)"`
		After         *string          `json:"after,omitempty" jsonschema:"the pageInfo.endCursor of the previous page"`
		Watcher       *string          `json:"watcher,omitempty" jsonschema:"your own session key: the result then carries its pending stale notices"`
	}
	watchIn struct {
		Watcher       string         `json:"watcher" jsonschema:"your own session: the watching session (agent-qualified key)"`
		Target        string         `json:"target" jsonschema:"the session you depend on"`
		TargetAgentID *string        `json:"targetAgentId,omitempty" jsonschema:"the target's agent, for a bare key"`
		Kinds         []eventKindArg `json:"kinds,omitempty" jsonschema:"the kinds that open a notice for you (LIF-3): any of human_direct_message, upstream_missing, goal_changed, deleted and reset (default: all but reset)"`
	}
	pendingIn struct {
		Watcher string `json:"watcher" jsonschema:"your own session: the watching session (agent-qualified key)"`
	}
	waitIn struct {
		Watcher   string `json:"watcher" jsonschema:"your own session: the watching session (agent-qualified key)"`
		TimeoutMs *int32 `json:"timeoutMs,omitempty" jsonschema:"how long to wait for a notice, in milliseconds (default and maximum 30000)"`
	}
	noticeRefIn struct {
		Target          string  `json:"target" jsonschema:"the notice's target"`
		TargetAgentID   *string `json:"targetAgentId,omitempty" jsonschema:"the notice's targetAgentId"`
		NotifiedVersion int32   `json:"notifiedVersion" jsonschema:"the notice's notifiedVersion"`
		// WatcherGeneration (LIF-2): an earlier generation than the watcher's is refused.
		WatcherGeneration *int32 `json:"watcherGeneration,omitempty" jsonschema:"the notice's watcherGeneration: a notice from before your session was reset is then refused (STALE_GENERATION)"`
	}
	ackIn struct {
		Watcher string        `json:"watcher" jsonschema:"your own session: the watching session"`
		Notices []noticeRefIn `json:"notices" jsonschema:"exactly the notices your turn took into account, as you received them"`
	}
	recordIn struct {
		SessionKey string       `json:"sessionKey" jsonschema:"the session the event happened to"`
		AgentID    *string      `json:"agentId,omitempty" jsonschema:"the agent of a bare key"`
		Kind       eventKindArg `json:"kind" jsonschema:"what happened: human_direct_message, upstream_missing, goal_changed and deleted notify the session's watchers (deleted also deletes the session); child_spawned starts the watchers' cursors; reset starts a new incarnation of the session; the others are kept in the log only"`
		ActorType  actorTypeArg `json:"actorType" jsonschema:"who did it"`
		ActorID    *string      `json:"actorId,omitempty" jsonschema:"a person's sender id, or the session key of the acting agent (your own session: you get no notice of your own change)"`
		Summary    *string      `json:"summary,omitempty" jsonschema:"one line, at most 200 characters, never message content (default: the kind's canonical summary)"`
		OccurredAt *string      `json:"occurredAt,omitempty" jsonschema:"when it happened, RFC 3339 (default: now; clamped to the last 24 hours)"`
		RunID      *string      `json:"runId,omitempty" jsonschema:"the run it belongs to"`
		Outcome    *outcomeArg  `json:"outcome,omitempty" jsonschema:"how a run_failed run ended"`
		Channel    *string      `json:"channel,omitempty" jsonschema:"the channel of a human_direct_message"`
		Turns      *int32       `json:"turns,omitempty" jsonschema:"how many turns a human_direct_message stands for"`
		DedupeKey  *string      `json:"dedupeKey,omitempty" jsonschema:"makes the call idempotent: a second call with the same key records nothing"`
		Watchers   []string     `json:"watchers,omitempty" jsonschema:"sessions to tell (or, for child_spawned, to start watching), typically the parent"`
		Watcher    *string      `json:"watcher,omitempty" jsonschema:"your own session key: the result then carries its pending stale notices"`
	}
)

// toolDef is one tool, its toolset and its handler.
type toolDef struct {
	toolset string
	tool    *mcp.Tool
	handler mcp.ToolHandler
}

func boolp(b bool) *bool { return &b }

// Annotations of the three kinds of tool. No tool reaches outside the service.
var (
	readOnly   = mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: boolp(false), OpenWorldHint: boolp(false)}
	additive   = mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: boolp(false), OpenWorldHint: boolp(false)}
	appendOnly = mcp.ToolAnnotations{DestructiveHint: boolp(false), OpenWorldHint: boolp(false)}
	removing   = mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: boolp(true), OpenWorldHint: boolp(false)}
)

// agentTexter is every result type: its agentText is promoted.
type agentTexter interface{ agent() *agentText }

func (a *agentText) agent() *agentText { return a }

// define builds a tool from its argument and result types: the schemas from the
// types, and a handler that decodes the arguments with decodeArgs, runs with the
// caller's principal, and writes the result or, by toolError, the refusal.
func define[In, Out any](s *Server, toolset string, t mcp.Tool, ann mcp.ToolAnnotations, run func(ctx context.Context, req *mcp.CallToolRequest, in In) (Out, error)) toolDef {
	t.InputSchema = inputSchema[In]()
	t.OutputSchema = outputSchema[Out]()
	t.Annotations = &ann
	t.Annotations.Title = t.Title
	t.Meta = mcp.Meta{MetaToolset: toolset}
	name := t.Name
	h := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx = callerContext(ctx, req.Extra)
		in, err := decodeArgs[In](name, req.Params.Arguments)
		if err != nil {
			return s.toolError(ctx, name, err), nil
		}
		points, writes := any(in).(coster).cost()
		if err := s.charge(ctx, points, writes); err != nil {
			return s.toolError(ctx, name, err), nil
		}
		out, err := run(ctx, req, in)
		if err != nil {
			return s.toolError(ctx, name, err), nil
		}
		return result(&out, any(&out).(agentTexter).agent())
	}
	return toolDef{toolset: toolset, tool: &t, handler: h}
}

// toolError reports a refused call in the tool result, as MCP asks: the text
// "CODE: message", with the GraphQL error's extensions.code and message, and the code
// in _meta. An INTERNAL error reads "internal error" and is logged here.
func (s *Server) toolError(ctx context.Context, tool string, err error) *mcp.CallToolResult {
	code, msg := coded(err)
	switch code {
	case awareness.EINTERNAL:
		level := slog.LevelError
		if errors.Is(err, context.Canceled) {
			level = slog.LevelDebug
		}
		s.log.Log(ctx, level, "mcp tool failed", "tool", tool, "code", code, "err", err)
	case awareness.EUNAVAILABLE:
		s.log.Warn("mcp tool failed", "tool", tool, "code", code, "err", err)
	}
	meta := mcp.Meta{MetaCode: code}
	if ms := retryAfterMs(err); ms > 0 {
		meta[MetaRetryAfterMs] = ms
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: code + ": " + msg}}, Meta: meta}
}

// retryAfterMs is when a RATE_LIMITED refusal may be retried, in milliseconds; 0
// when not said.
func retryAfterMs(err error) int64 {
	if r, ok := errors.AsType[interface {
		error
		RetryAfterMs() int64
	}](err); ok {
		return r.RetryAfterMs()
	}
	return 0
}

// _meta keys: a refused call's ERR-1 code and retry hint, a tool's toolset.
const (
	MetaCode         = "awareness/code"
	MetaRetryAfterMs = "awareness/retryAfterMs"
	MetaToolset      = "awareness/toolset"
)

// coded returns the ERR-1 code and caller-facing message of err, as the GraphQL error
// presenter does: internals read "internal error".
func coded(err error) (code, msg string) {
	if ae, ok := errors.AsType[*awareness.Error](err); ok {
		if ae.Code == awareness.EINTERNAL {
			return ae.Code, "internal error"
		}
		if ae.Message == "" {
			return ae.Code, ae.Code
		}
		return ae.Code, ae.Message
	}
	if c, ok := errors.AsType[interface {
		error
		Code() string
	}](err); ok {
		return c.Code(), err.Error() // a budget refusal (ERR-4)
	}
	return awareness.EINTERNAL, "internal error"
}

// digest reads watcher's pending-notice digest; nil when no watcher is named.
func (s *Server) digest(ctx context.Context, watcher *string) (*digestOut, error) {
	if watcher == nil {
		return nil, nil
	}
	ns, err := s.svc.PendingNotices(ctx, *watcher)
	if err != nil {
		return nil, err
	}
	return digestOf(*watcher, ns), nil
}

// digestAfter is the digest of a watcher the call itself acted for: none when it
// cannot watch, as a bare key's watch answers watched false, not a refusal.
func (s *Server) digestAfter(ctx context.Context, watcher string) *digestOut {
	d, err := s.digest(ctx, &watcher)
	if err != nil {
		return nil
	}
	return d
}

func (s *Server) toolDefs() []toolDef {
	return []toolDef{
		define(s, ToolsetSessions, mcp.Tool{
			Name:  ToolSessionStatus,
			Title: "Session status and changes",
			Description: "Call this before you act on what you know of another session: when a stale notice says a session " +
				"changed (pass the sessionKey, agentId and changesSince it names), or when you resume work that depends on " +
				"a session. Returns the session's state version and, with changesSince, exactly the changes after it (REC-1). " +
				"If historyGap is true, refresh the whole session state instead of applying the changes; if truncated, call " +
				"again with nextChangesSince. Never moves a cursor: acknowledge with ack_notices.",
		}, readOnly, func(ctx context.Context, _ *mcp.CallToolRequest, in statusIn) (statusOut, error) {
			d, err := s.digest(ctx, in.Watcher)
			if err != nil {
				return statusOut{}, err
			}
			st, err := s.svc.SessionStatus(ctx, in.SessionKey, in.AgentID, int64p(in.ChangesSince), intp(in.Limit))
			if err != nil {
				return statusOut{}, err
			}
			out := statusOf(st)
			out.WatcherNotices = d
			return out, nil
		}),
		define(s, ToolsetSessions, mcp.Tool{
			Name:  ToolSessionsList,
			Title: "List sessions",
			Description: "Call this to find sessions (by agent, kind, recent activity or key prefix) and see which have " +
				"logged changes (stateVersion; null when none, REC-5), e.g. to pick the session to watch or reconcile. Pages " +
				"of 50 by default: continue with after = pageInfo.endCursor while pageInfo.hasNextPage.",
		}, readOnly, func(ctx context.Context, _ *mcp.CallToolRequest, in listIn) (listOut, error) {
			d, err := s.digest(ctx, in.Watcher)
			if err != nil {
				return listOut{}, err
			}
			f := awareness.SessionFilter{AgentID: in.AgentID, ActiveMinutes: intp(in.ActiveMinutes), KeyPrefix: in.KeyPrefix}
			for _, k := range in.Kinds {
				f.Kinds = append(f.Kinds, awareness.SessionKind(k))
			}
			first := defaultListFirst
			if in.First != nil {
				first = int(*in.First)
			}
			page, err := s.svc.SessionsList(ctx, f, first, in.After)
			if err != nil {
				return listOut{}, err
			}
			out := listOf(page)
			out.WatcherNotices = d
			return out, nil
		}),
		define(s, ToolsetNotices, mcp.Tool{
			Name:  ToolPendingNotices,
			Title: "Pending stale notices",
			Description: "Call this at the start of a turn, or whenever you are unsure whether sessions you depend on " +
				"changed: it lists your session's pending stale notices (NTC-7) without acknowledging them. Each notice " +
				"names the session that changed and the session_status call that catches you up; after you took them " +
				"into account, acknowledge exactly those with ack_notices.",
		}, readOnly, func(ctx context.Context, _ *mcp.CallToolRequest, in pendingIn) (pendingOut, error) {
			ns, err := s.svc.PendingNotices(ctx, in.Watcher)
			if err != nil {
				return pendingOut{}, err
			}
			out := pendingOut{PendingNotices: noticesOf(ns)}
			out.Summary = noticesSummary(out.PendingNotices, "No pending notices.", "pending notice")
			out.WatcherNotices = digestOf(in.Watcher, ns)
			return out, nil
		}),
		define(s, ToolsetNotices, mcp.Tool{
			Name:  ToolWaitForNotices,
			Title: "Wait for a stale notice",
			Description: "Call this when you have nothing else to do until another session moves (a sub-agent's work, a " +
				"person's reply): it answers at once with your pending stale notices if there are any, otherwise as soon as " +
				"one opens, or after timeoutMs (at most 30000) with timedOut true; then call it again to keep waiting. It " +
				"acknowledges nothing.",
		}, readOnly, s.waitForNotices),
		define(s, ToolsetNotices, mcp.Tool{
			Name:  ToolAckNotices,
			Title: "Acknowledge stale notices",
			Description: "Call this once your turn has taken notices into account (usually after session_status): name " +
				"each by target, targetAgentId and notifiedVersion exactly as you received it (NTC-3). A notice that opened " +
				"since, or replaced the one you name, stays pending and is not acknowledged unseen. Answers per notice: " +
				"acknowledged (with the follow-up notice that opened for changes made meanwhile, to reconcile next), " +
				"alreadyAcknowledged, superseded (with the notice pending instead) or notPending.",
		}, additive, func(ctx context.Context, _ *mcp.CallToolRequest, in ackIn) (ackOut, error) {
			refs := make([]awareness.NoticeRef, 0, len(in.Notices))
			for _, n := range in.Notices {
				ref := awareness.NoticeRef{Target: n.Target, TargetAgentID: n.TargetAgentID, NotifiedVersion: int64(n.NotifiedVersion)}
				if n.WatcherGeneration != nil {
					ref.WatcherGeneration = new(int64(*n.WatcherGeneration))
				}
				refs = append(refs, ref)
			}
			if len(refs) == 0 {
				return ackOut{}, awareness.Errorf(awareness.EINVALID, "notices is empty: name the notices your turn took into account")
			}
			acks, err := s.svc.AcknowledgeNotices(ctx, in.Watcher, refs)
			if err != nil {
				return ackOut{}, err
			}
			out := ackOf(acks)
			out.WatcherNotices = s.digestAfter(ctx, in.Watcher)
			return out, nil
		}),
		define(s, ToolsetWrite, mcp.Tool{
			Name:  ToolRecordEvent,
			Title: "Record a session event",
			Description: "Call this when something happened to a session that others may depend on and no gateway records " +
				"it for you: a person wrote into it directly (human_direct_message), its goal changed (goal_changed), you " +
				"spawned a child session (child_spawned, naming yourself in watchers), a run ended (run_completed, " +
				"run_failed), it was compacted. Watchers of the session other than the actor get one stale notice. Give " +
				"a dedupeKey to make a retry safe.",
		}, appendOnly, func(ctx context.Context, _ *mcp.CallToolRequest, in recordIn) (recordOut, error) {
			d, err := s.digest(ctx, in.Watcher)
			if err != nil {
				return recordOut{}, err
			}
			rin, err := recordInput(in)
			if err != nil {
				return recordOut{}, err
			}
			res, err := s.svc.RecordEvent(ctx, rin)
			if err != nil {
				return recordOut{}, err
			}
			out := recordOf(res)
			out.WatcherNotices = d
			return out, nil
		}),
		define(s, ToolsetWrite, mcp.Tool{
			Name:  ToolSessionWatch,
			Title: "Watch a session",
			Description: "Call this when you start depending on another session (you sent it work, you read its state): " +
				"your session then gets one stale notice when another actor changes it, instead of you polling. It " +
				"starts at the target's current version (WAT-3); watching again keeps the cursor as it is.",
		}, additive, func(ctx context.Context, _ *mcp.CallToolRequest, in watchIn) (watchOut, error) {
			var kinds []string
			for _, k := range in.Kinds {
				kinds = append(kinds, string(k))
			}
			res, err := s.svc.WatchWith(ctx, in.Watcher, in.Target, in.TargetAgentID, awareness.WatchOptions{Kinds: kinds})
			if err != nil {
				return watchOut{}, err
			}
			out := watchOf(res)
			out.WatcherNotices = s.digestAfter(ctx, in.Watcher)
			return out, nil
		}),
		define(s, ToolsetWrite, mcp.Tool{
			Name:  ToolSessionUnwatch,
			Title: "Stop watching a session",
			Description: "Call this when you no longer depend on a session you watch: its cursor and any pending notice " +
				"about it are removed (WAT-5).",
		}, removing, func(ctx context.Context, _ *mcp.CallToolRequest, in watchIn) (unwatchOut, error) {
			ok, err := s.svc.Unwatch(ctx, in.Watcher, in.Target, in.TargetAgentID)
			if err != nil {
				return unwatchOut{}, err
			}
			out := unwatchOut{Unwatch: ok}
			if ok {
				out.Summary = in.Watcher + " no longer watches " + in.Target + "."
			} else {
				out.Summary = in.Watcher + " did not watch " + in.Target + ": nothing removed."
			}
			out.WatcherNotices = s.digestAfter(ctx, in.Watcher)
			return out, nil
		}),
	}
}

// defaultListFirst is sessions_list's page size when first is not given, as for the
// GraphQL argument.
const defaultListFirst = 50

func recordInput(in recordIn) (awareness.RecordInput, error) {
	out := awareness.RecordInput{
		SessionKey: in.SessionKey, AgentID: in.AgentID, Kind: awareness.EventKind(in.Kind), ActorType: awareness.ActorType(in.ActorType),
		ActorID: in.ActorID, Summary: in.Summary, RunID: in.RunID, Channel: in.Channel, Turns: intp(in.Turns),
		DedupeKey: in.DedupeKey, Watchers: in.Watchers,
	}
	if in.Outcome != nil {
		o := awareness.RunOutcome(*in.Outcome)
		out.Outcome = &o
	}
	if in.OccurredAt != nil {
		t, err := time.Parse(time.RFC3339Nano, *in.OccurredAt)
		if err != nil {
			return out, awareness.Errorf(awareness.EINVALID, "occurredAt must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z")
		}
		out.OccurredAt = &t
	}
	return out, nil
}

func int64p(v *int32) *int64 {
	if v == nil {
		return nil
	}
	n := int64(*v)
	return &n
}

func intp(v *int32) *int {
	if v == nil {
		return nil
	}
	n := int(*v)
	return &n
}
