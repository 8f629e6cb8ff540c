// Package mcpserver serves the awareness service to agents over the Model Context
// Protocol (CLT-3), with the official Go SDK: the tools session_status,
// sessions_list, session_watch, session_unwatch, pending_notices and ack_notices, and
// one subscribable resource per watcher's pending notices,
// awareness://notices/{watcher}.
//
// Every tool runs one GraphQL operation on the service through package client, with
// the caller's own credentials (the Authorization header of the MCP request over
// streamable HTTP; the configured token over stdio), so the answers, the errors and
// the agent isolation (CLT-1) are those of GraphQL, byte for byte: a tool's
// structuredContent is the GraphQL answer's data — the value of the operation's field
// when it is an object (sessionStatus, sessionsList, watch), the data object itself
// when the field is a list or a boolean ({"pendingNotices": […]}, {"ackNotices": […]},
// {"unwatch": true}), as MCP wants an object there.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/client"
)

// NoticesURIPrefix starts the URI of a watcher's pending-notices resource; the
// watcher's session key follows, path-escaped.
const NoticesURIPrefix = "awareness://notices/"

// NoticesURI returns the resource URI of watcher's pending notices.
func NoticesURI(watcher string) string { return NoticesURIPrefix + url.PathEscape(watcher) }

// Config wires New.
type Config struct {
	// Client reaches the service's GraphQL endpoint. Its token is used when a request
	// carries no Authorization header of its own (stdio).
	Client *client.Client
	// ForwardAuthorization makes each MCP request run with its own HTTP Authorization
	// header (streamable HTTP on the service's listener).
	ForwardAuthorization bool
	Logger               *slog.Logger
	// Version is reported in the MCP server info.
	Version string
}

// Server is the MCP server. Close ends its resource feeds.
type Server struct {
	cfg Config
	log *slog.Logger
	mcp *mcp.Server

	mu       sync.Mutex
	closed   bool
	feeds    map[feedKey]*feed
	sessions map[*mcp.ServerSession]bool // sessions with subscriptions, watched for their end
	wg       sync.WaitGroup
}

type feedKey struct{ uri, authorization string }

// feed follows one watcher's notices for the sessions subscribed to its resource.
type feed struct {
	w        *client.Watcher
	sessions map[*mcp.ServerSession]bool
}

// New builds the MCP server.
func New(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	s := &Server{cfg: cfg, log: cfg.Logger, feeds: map[feedKey]*feed{}, sessions: map[*mcp.ServerSession]bool{}}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: "awareness", Title: "Session state awareness", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: "Tools of the session state awareness service. When a stale notice tells you a session " +
			"changed, call session_status with its sessionKey (and agentId) and changesSince before acting.",
		SubscribeHandler:   s.subscribe,
		UnsubscribeHandler: s.unsubscribe,
		Logger:             cfg.Logger,
	})
	s.addTools()
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: NoticesURIPrefix + "{+watcher}", // reserved expansion: session keys hold colons
		Name:        "pending-notices",
		Title:       "Pending stale notices of a watcher session",
		Description: "The watcher's pending stale notices (the pendingNotices query), as JSON. Subscribe to be told when one opens or closes.",
		MIMEType:    "application/json",
	}, s.readNotices)
	return s
}

// MCP is the SDK server (for transports).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// HTTPHandler serves streamable HTTP. The caller authenticates the request first.
func (s *Server) HTTPHandler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		Logger: s.log,
	})
}

// Run serves one client over t (stdio) until it disconnects or ctx ends.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error { return s.mcp.Run(ctx, t) }

// Close ends the resource feeds and the sessions that subscribed. Idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	feeds := s.feeds
	s.feeds = map[feedKey]*feed{}
	sessions := s.sessions
	s.mu.Unlock()
	for _, f := range feeds {
		_ = f.w.Close()
	}
	for ss := range sessions {
		_ = ss.Close()
	}
	s.wg.Wait()
}

// clientFor returns the client that runs a request with its caller's credentials.
func (s *Server) clientFor(extra *mcp.RequestExtra) (*client.Client, string) {
	if s.cfg.ForwardAuthorization && extra != nil && extra.Header != nil {
		a := extra.Header.Get("Authorization")
		return s.cfg.Client.WithAuthorization(a), a
	}
	return s.cfg.Client, ""
}

// errorResult reports a refused call in the tool result, as MCP asks, with the
// service's code.
func errorResult(err error) *mcp.CallToolResult {
	msg := err.Error()
	if e, ok := errors.AsType[*client.Error](err); ok {
		msg = e.Message
		if e.Code != "" {
			msg = e.Code + ": " + e.Message
		}
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

func text(s string) []mcp.Content { return []mcp.Content{&mcp.TextContent{Text: s}} }

// field returns the value of data's only field.
func field(data json.RawMessage, name string) (json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	v, ok := m[name]
	if !ok {
		return nil, fmt.Errorf("the answer has no %s", name)
	}
	return v, nil
}

// parseNoticesURI returns the watcher of an awareness://notices/{watcher} URI.
func parseNoticesURI(uri string) (string, bool) {
	rest, ok := strings.CutPrefix(uri, NoticesURIPrefix)
	if !ok || rest == "" {
		return "", false
	}
	w, err := url.PathUnescape(rest)
	if err != nil || w == "" {
		return "", false
	}
	return w, true
}

const pendingQuery = `query($w: String!) { pendingNotices(watcher: $w) {
  watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt } }`

func (s *Server) readNotices(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	watcher, ok := parseNoticesURI(req.Params.URI)
	if !ok {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	c, _ := s.clientFor(req.Extra)
	data, err := c.DoRaw(ctx, pendingQuery, map[string]any{"w": watcher})
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
		URI: req.Params.URI, MIMEType: "application/json", Text: string(data),
	}}}, nil
}

// subscribe authorizes the caller on the watcher (the pendingNotices query with its
// credentials) and starts, or joins, the feed of that resource.
func (s *Server) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	watcher, ok := parseNoticesURI(req.Params.URI)
	if !ok {
		return mcp.ResourceNotFoundError(req.Params.URI)
	}
	c, authz := s.clientFor(req.Extra)
	if _, err := c.DoRaw(ctx, pendingQuery, map[string]any{"w": watcher}); err != nil {
		return err
	}
	key := feedKey{req.Params.URI, authz}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("the MCP server is shutting down")
	}
	f := s.feeds[key]
	if f == nil {
		uri := req.Params.URI
		w, err := c.Watch([]string{watcher}, client.WatcherOptions{
			OnChange: func(client.Notice) {
				if err := s.mcp.ResourceUpdated(context.Background(), &mcp.ResourceUpdatedNotificationParams{URI: uri}); err != nil {
					s.log.Debug("resource updated notification", "uri", uri, "err", err)
				}
			},
		})
		if err != nil {
			return err
		}
		f = &feed{w: w, sessions: map[*mcp.ServerSession]bool{}}
		s.feeds[key] = f
	}
	f.sessions[req.Session] = true
	if !s.sessions[req.Session] {
		s.sessions[req.Session] = true
		ss := req.Session
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			_ = ss.Wait()
			s.dropSession(ss)
		}()
	}
	return nil
}

func (s *Server) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.mu.Lock()
	var stop []*client.Watcher
	for k, f := range s.feeds {
		if k.uri == req.Params.URI && f.sessions[req.Session] {
			delete(f.sessions, req.Session)
			if len(f.sessions) == 0 {
				delete(s.feeds, k)
				stop = append(stop, f.w)
			}
		}
	}
	s.mu.Unlock()
	for _, w := range stop {
		_ = w.Close()
	}
	return nil
}

// dropSession ends the subscriptions of a session that ended.
func (s *Server) dropSession(ss *mcp.ServerSession) {
	s.mu.Lock()
	delete(s.sessions, ss)
	var stop []*client.Watcher
	for k, f := range s.feeds {
		delete(f.sessions, ss)
		if len(f.sessions) == 0 {
			delete(s.feeds, k)
			stop = append(stop, f.w)
		}
	}
	s.mu.Unlock()
	for _, w := range stop {
		_ = w.Close()
	}
}
