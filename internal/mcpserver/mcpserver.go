// Package mcpserver serves the awareness service to agents over the Model Context
// Protocol (CLT-3, CLT-6), with the official Go SDK, in the service's own process:
// every tool calls awareness.Service directly with the caller's Principal, and a
// watcher's notices resource, awareness://notices/{watcher}, is fed by one hub
// subscription per MCP session and watcher, with no goroutine while it is idle.
//
// Tools come in toolsets, as in the GitHub MCP server: sessions with session_status
// and sessions_list; notices with pending_notices, wait_for_notices, ack_notices and
// the notices resource; write with record_event, session_watch and session_unwatch.
// Config.ReadOnly keeps only the tools that change nothing, whatever the toolsets.
// Every tool has an input and an output schema, annotations, and a description that
// tells an agent when to call it. A tool's structuredContent holds the GraphQL
// answer's fields by the same names and values, plus summary, the sentences its text
// content says, which harnesses that drop text content still pass to the model, and,
// when the call names a watcher, watcherNotices, that watcher's pending-notice digest.
//
// Over streamable HTTP a session belongs to the token that opened it and expires
// after Config.SessionIdle without a request; each token holds at most
// Config.MaxSessions sessions and Config.MaxSubscriptions subscriptions and waits.
// `awareness mcp` serves stdio through Proxy, a client of the service's /mcp.
package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/internal/awareness"
)

// NoticesURIPrefix starts the URI of a watcher's pending-notices resource; the
// watcher's session key follows, path-escaped or not.
const NoticesURIPrefix = "awareness://notices/"

// Toolsets.
const (
	ToolsetSessions = "sessions"
	ToolsetNotices  = "notices"
	ToolsetWrite    = "write"
)

// AllToolsets lists the toolsets, in the order tools/list gives their tools.
var AllToolsets = []string{ToolsetSessions, ToolsetNotices, ToolsetWrite}

// Tool names (CLT-3); the notice text names session_status (NTC-1).
const (
	ToolSessionStatus  = "session_status"
	ToolSessionsList   = "sessions_list"
	ToolPendingNotices = "pending_notices"
	ToolWaitForNotices = "wait_for_notices"
	ToolAckNotices     = "ack_notices"
	ToolRecordEvent    = "record_event"
	ToolSessionWatch   = "session_watch"
	ToolSessionUnwatch = "session_unwatch"
)

// Defaults of Config.
const (
	DefaultSessionIdle      = 30 * time.Minute
	DefaultMaxSessions      = 64
	DefaultMaxSubscriptions = 128
	DefaultEvictIdle        = time.Minute
	// MaxBatchMessages bounds the messages of one JSON-RPC batch of protocol
	// 2025-03-26; later versions have no batches, and the SDK refuses them.
	MaxBatchMessages = 20
	// MaxWait is the longest wait_for_notices.
	MaxWait = 30 * time.Second
)

// Config wires New.
type Config struct {
	Service *awareness.Service
	Logger  *slog.Logger
	// Version is reported in the MCP server info.
	Version string
	// Toolsets are the toolsets served, AllToolsets when empty; ReadOnly then drops
	// every tool that changes state.
	Toolsets []string
	ReadOnly bool
	// SessionIdle closes a session that received no request for that long.
	// MaxSessions and MaxSubscriptions bound what one token, or one caller without
	// authentication, holds at once. Zero means the Default of each.
	SessionIdle      time.Duration
	MaxSessions      int
	MaxSubscriptions int
	// EvictIdle: past MaxSessions, a token's least recently used session without a
	// request for this long is closed for its new one; DefaultEvictIdle when zero.
	EvictIdle time.Duration
	// Charge, when set, draws a call's cost from the budget of ctx's caller before the
	// call runs (ERR-4): query points and writes, priced as GraphQL prices the same
	// operation. Its error refuses the call; an error with a Code method gives its
	// code, and one with RetryAfterMs its retry hint.
	Charge func(ctx context.Context, points, writes int) error
}

// Server is the MCP server of one service. Close ends its sessions and feeds.
type Server struct {
	cfg   Config
	svc   *awareness.Service
	log   *slog.Logger
	mcp   *mcp.Server
	tools []string

	mu       sync.Mutex
	closed   bool
	sessions map[*mcp.ServerSession]*session
	byID     map[string]*session // the sessions with an id (streamable HTTP)
	// owners counts the sessions and subscriptions of each caller (CLT-6).
	owners map[string]*ownerCount

	stopSweep chan struct{}
	swept     sync.WaitGroup
}

type ownerCount struct{ sessions, subscriptions int }

// ParseToolsets reads a comma-separated list of toolsets; "all" names every one.
func ParseToolsets(s string) ([]string, error) {
	var out []string
	for _, t := range strings.Split(s, ",") {
		t = strings.ToLower(strings.TrimSpace(t))
		switch {
		case t == "":
		case t == "all":
			out = append(out, AllToolsets...)
		case slices.Contains(AllToolsets, t):
			out = append(out, t)
		default:
			return nil, fmt.Errorf("toolset %q: want a comma-separated list of %s, or all", t, strings.Join(AllToolsets, ", "))
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no toolset: want a comma-separated list of %s, or all", strings.Join(AllToolsets, ", "))
	}
	// In AllToolsets' order, each once.
	return slices.DeleteFunc(slices.Clone(AllToolsets), func(t string) bool { return !slices.Contains(out, t) }), nil
}

// New builds the MCP server.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if len(cfg.Toolsets) == 0 {
		cfg.Toolsets = AllToolsets
	}
	if cfg.SessionIdle <= 0 {
		cfg.SessionIdle = DefaultSessionIdle
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.MaxSubscriptions <= 0 {
		cfg.MaxSubscriptions = DefaultMaxSubscriptions
	}
	if cfg.EvictIdle <= 0 {
		cfg.EvictIdle = DefaultEvictIdle
	}
	s := &Server{cfg: cfg, svc: cfg.Service, log: cfg.Logger, sessions: map[*mcp.ServerSession]*session{}, byID: map[string]*session{},
		owners: map[string]*ownerCount{}, stopSweep: make(chan struct{})}
	notices := slices.Contains(cfg.Toolsets, ToolsetNotices)
	opts := &mcp.ServerOptions{
		Instructions: instructions,
		// The SDK logs session ids at info; they are credentials of a kind (CLT-6).
		Logger: slog.New(demote{cfg.Logger.Handler()}),
	}
	if notices {
		opts.SubscribeHandler = s.subscribe
		opts.UnsubscribeHandler = s.unsubscribe
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "awareness", Title: "Session state awareness", Version: cfg.Version}, opts)
	s.mcp.AddReceivingMiddleware(s.receive)
	s.mcp.AddSendingMiddleware(s.send)
	for _, d := range s.toolDefs() {
		if !slices.Contains(cfg.Toolsets, d.toolset) || (cfg.ReadOnly && !d.tool.Annotations.ReadOnlyHint) {
			continue
		}
		s.mcp.AddTool(d.tool, d.handler)
		s.tools = append(s.tools, d.tool.Name)
	}
	if notices {
		s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
			URITemplate: NoticesURIPrefix + "{+watcher}", // reserved expansion: session keys hold colons
			Name:        "pending-notices",
			Title:       "Pending stale notices of a watcher session",
			Description: "Your session's pending stale notices (what pending_notices answers), as JSON. Subscribe to be " +
				"told (notifications/resources/updated) when one opens or closes, then read it.",
			MIMEType: "application/json",
		}, s.readNotices)
	}
	s.swept.Add(1)
	go s.sweep()
	return s
}

const instructions = "Tools of the session state awareness service, which tells your session when another actor " +
	"(a person, another agent) changed a session you depend on. When a stale notice says a session changed, call " +
	"session_status with the sessionKey, agentId and changesSince it names before you act, then ack_notices with the " +
	"notices you took into account. Name your own session as watcher in any call to get your pending notices with " +
	"the result (watcherNotices); wait_for_notices waits for one."

// Tools lists the names of the tools served, in tools/list order.
func (s *Server) Tools() []string { return slices.Clone(s.tools) }

// MCP is the SDK server.
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Close ends every session and its feeds. Idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.stopSweep)
	var all []*session
	for _, st := range s.sessions {
		all = append(all, st)
	}
	s.mu.Unlock()
	s.swept.Wait()
	for ss := range s.mcp.Sessions() {
		_ = ss.Close()
	}
	for _, st := range all {
		s.dropSession(st.ss)
	}
}

// sweepInterval is how often ended sessions are looked for: their feeds and counts go
// within it of the end. DELETE and Close drop them at once.
const sweepInterval = 5 * time.Second

func (s *Server) sweep() {
	defer s.swept.Done()
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stopSweep:
			return
		case <-t.C:
			s.dropEnded()
		}
	}
}

// dropEnded drops the state of the sessions the SDK no longer holds after idle
// expiry, DELETE or a failed initialization.
func (s *Server) dropEnded() {
	live := map[*mcp.ServerSession]bool{}
	for ss := range s.mcp.Sessions() {
		live[ss] = true
	}
	s.mu.Lock()
	var ended []*mcp.ServerSession
	for ss := range s.sessions {
		if !live[ss] {
			ended = append(ended, ss)
		}
	}
	s.mu.Unlock()
	for _, ss := range ended {
		s.dropSession(ss)
	}
}

// result builds a tool's successful result: out as structuredContent, and its
// summary, then its digest, as the text content.
func result(out any, at *agentText) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: at.Summary + at.WatcherNotices.text()}},
		StructuredContent: json.RawMessage(b)}, nil
}

// demote logs the SDK's info records at debug: they name session ids.
type demote struct{ slog.Handler }

func (d demote) Enabled(ctx context.Context, l slog.Level) bool {
	if l == slog.LevelInfo {
		l = slog.LevelDebug
	}
	return d.Handler.Enabled(ctx, l)
}

func (d demote) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		r.Level = slog.LevelDebug
	}
	return d.Handler.Handle(ctx, r)
}

func (d demote) WithAttrs(as []slog.Attr) slog.Handler { return demote{d.Handler.WithAttrs(as)} }
func (d demote) WithGroup(g string) slog.Handler       { return demote{d.Handler.WithGroup(g)} }
