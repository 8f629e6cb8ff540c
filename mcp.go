package main

// The Model Context Protocol front of the service, from internal/mcpserver (CLT-3,
// CLT-6): streamable HTTP at /mcp on the service's own listener, in process, and
// `awareness mcp`, a stdio server in front of a running service's /mcp.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/mcpserver"
	"github.com/awareness/awareness/internal/wsgorilla"
)

// mcpPath is the route of the streamable HTTP MCP endpoint.
const mcpPath = "/mcp"

// mcpConfig is serve's MCP configuration.
type mcpConfig struct {
	Toolsets         []string
	ReadOnly         bool
	SessionIdle      time.Duration
	MaxSessions      int
	MaxSubscriptions int
}

const (
	toolsetsHelp = "comma-separated MCP toolsets to serve: sessions (session_status, sessions_list), notices (pending_notices, wait_for_notices, ack_notices, the notices resource), write (record_event, session_watch, session_unwatch), or all"
	readOnlyHelp = "serve only the MCP tools that change nothing, whatever the toolsets"
)

// mcpFlags defines serve's MCP flags on fs; the returned function reads them once fs
// is parsed.
func mcpFlags(fs *flagSet) func() (mcpConfig, error) {
	toolsets := envFlag(fs, fs.String, "mcp-toolsets", "all", "AWARENESS_MCP_TOOLSETS", toolsetsHelp)
	readOnly := envFlag(fs, fs.Bool, "mcp-read-only", false, "AWARENESS_MCP_READ_ONLY", readOnlyHelp)
	idle := envFlag(fs, fs.Duration, "mcp-session-idle", mcpserver.DefaultSessionIdle, "AWARENESS_MCP_SESSION_IDLE", "an MCP session that receives no request for this long is closed, with its subscriptions (clients that only listen should ping)")
	sessions := envFlag(fs, fs.Int, "mcp-max-sessions", mcpserver.DefaultMaxSessions, "AWARENESS_MCP_MAX_SESSIONS", "MCP sessions one token may hold at once; past it a new session replaces the token's least recently used one idle for a minute, or gets RATE_LIMITED")
	subs := envFlag(fs, fs.Int, "mcp-max-subscriptions", mcpserver.DefaultMaxSubscriptions, "AWARENESS_MCP_MAX_SUBSCRIPTIONS", "MCP resource subscriptions and wait_for_notices calls one token may hold at once; beyond it RATE_LIMITED")
	return func() (mcpConfig, error) {
		ts, err := mcpserver.ParseToolsets(*toolsets)
		if err != nil {
			return mcpConfig{}, fmt.Errorf("--mcp-toolsets: %v", err)
		}
		if *idle < time.Second {
			return mcpConfig{}, fmt.Errorf("--mcp-session-idle %s: want at least 1s", *idle)
		}
		if *sessions < 1 || *subs < 1 {
			return mcpConfig{}, errors.New("--mcp-max-sessions and --mcp-max-subscriptions must be at least 1")
		}
		return mcpConfig{Toolsets: ts, ReadOnly: *readOnly, SessionIdle: *idle, MaxSessions: *sessions, MaxSubscriptions: *subs}, nil
	}
}

// mountMCP serves /mcp in front of next, in process: the tools call svc with the
// caller's principal and draw from the caller's budget, as /query does. With
// --auth-file a request needs a token. The edge.Hosts allowlist is in front of every
// route, /mcp included. Close the returned server after the HTTP server stopped.
func mountMCP(next http.Handler, cfg serveConfig, log *slog.Logger, svc *awareness.Service, bud *budget.Budget) (http.Handler, *mcpserver.Server) {
	srv := mcpserver.New(mcpserver.Config{
		Service: svc, Logger: log.With("component", "mcp"),
		Toolsets: cfg.MCP.Toolsets, ReadOnly: cfg.MCP.ReadOnly,
		SessionIdle: cfg.MCP.SessionIdle, MaxSessions: cfg.MCP.MaxSessions, MaxSubscriptions: cfg.MCP.MaxSubscriptions,
		Charge: func(ctx context.Context, points, writes int) error {
			return bud.Charge(budget.CallerOf(ctx), budget.Cost{Points: points, Writes: writes})
		},
	})
	hc := mcpserver.HTTPConfig{
		OriginAllowed: func(origin, host string) bool { return wsgorilla.OriginAllowed(origin, host, cfg.AllowedOrigins) },
		MaxBodyBytes:  graph.MaxRequestBytes,
		HostChecked:   true, // hosts.Guard in openHTTP
	}
	if cfg.Auth != nil {
		hc.Authenticate = cfg.Auth.Authenticate
	}
	h := srv.Handler(hc)
	log.Info("mcp served", "path", mcpPath, "tools", srv.Tools(), "read_only", cfg.MCP.ReadOnly, "session_idle", cfg.MCP.SessionIdle,
		"max_sessions", cfg.MCP.MaxSessions, "max_subscriptions", cfg.MCP.MaxSubscriptions)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != mcpPath {
			next.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}), srv
}

// mcpCmd runs `awareness mcp`: an MCP server on stdin/stdout in front of a running
// service's /mcp.
func mcpCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	fs := newFlagSet("mcp")
	fs.SetOutput(stderr)
	rawURL := envFlag(fs, fs.String, "url", "http://127.0.0.1:8080/mcp", "AWARENESS_URL", "the running service: its /mcp endpoint, or its base URL (a /query path is read as /mcp)")
	token := envFlag(fs, fs.String, "token", "", "AWARENESS_TOKEN", "bearer token for the service, when it runs with --auth-file (prefer --token-file)")
	tokenFile := envFlag(fs, fs.String, "token-file", "", "AWARENESS_TOKEN_FILE", "file holding the bearer token")
	toolsets := envFlag(fs, fs.String, "toolsets", "all", "AWARENESS_MCP_TOOLSETS", "comma-separated toolsets to offer of those the service serves: sessions, notices, write, or all")
	readOnly := envFlag(fs, fs.Bool, "read-only", false, "AWARENESS_MCP_READ_ONLY", "offer only the tools that change nothing, whatever the toolsets")
	keepAlive := envFlag(fs, fs.Duration, "keep-alive", mcpserver.DefaultProxyKeepAlive, "AWARENESS_MCP_KEEP_ALIVE", "ping cadence that keeps the service's MCP session alive while this process runs; below the service's --mcp-session-idle")
	logLevel := envFlag(fs, fs.String, "log-level", "warn", "AWARENESS_LOG_LEVEL", "debug, info, warn or error; logs go to stderr")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: awareness mcp [--url URL] [--token-file FILE] [--toolsets LIST] [--read-only]\n\n"+
			"Serve the Model Context Protocol on stdin/stdout in front of a running service: every request goes to\n"+
			"the service's /mcp (one MCP session, kept alive by pings, reopened after the service restarts), so what\n"+
			"a call may do and what it answers are the service's.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if _, err := fs.parse(args, lookupEnv, false); err != nil {
		if err == flag.ErrHelp {
			return exitOK
		}
		return exitUsage
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "awareness mcp: "+format+"\n", a...)
		return exitUsage
	}
	level, err := parseLogLevel(*logLevel)
	if err != nil {
		return usage("%v", err)
	}
	endpoint, err := mcpEndpoint(*rawURL)
	if err != nil {
		return usage("--url: %v", err)
	}
	ts, err := mcpserver.ParseToolsets(*toolsets)
	if err != nil {
		return usage("--toolsets: %v", err)
	}
	if len(ts) == len(mcpserver.AllToolsets) {
		ts = nil // every tool the service serves
	}
	tok := strings.TrimSpace(*token)
	if f := strings.TrimSpace(*tokenFile); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return usage("--token-file: %v", err)
		}
		tok = strings.TrimSpace(string(b))
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	err = mcpserver.RunProxy(ctx, mcpserver.ProxyConfig{URL: endpoint, Token: tok, Toolsets: ts, ReadOnly: *readOnly,
		KeepAlive: *keepAlive, Logger: log.With("component", "mcp")}, stdin, stdout)
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "awareness mcp: %v\n", err)
		return exitError
	}
	return exitOK
}

// mcpEndpoint reads --url: a base URL or a /query URL means its /mcp.
func mcpEndpoint(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q: want an http:// or https:// URL such as http://127.0.0.1:8080/mcp", raw)
	}
	switch strings.TrimSuffix(u.Path, "/") {
	case "", "/query":
		u.Path = mcpPath
	}
	return u.String(), nil
}
