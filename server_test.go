package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/mcpserver"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/syncbuf"
)

// syncBuffer collects a child process's or logger's output (see syncbuf).
type syncBuffer = syncbuf.Buffer

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func waitReady(t *testing.T, client *http.Client, base string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			t.Fatal("the server exited before it was ready")
		default:
		}
		resp, err := client.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the server never became ready")
}

// postQuery is post for a query that must succeed: it fails the test on errors and
// returns the data.
func postQuery(t *testing.T, client *http.Client, base, query string) map[string]any {
	t.Helper()
	out := post(t, client, base, query)
	if out["errors"] != nil {
		t.Fatalf("errors: %v", out["errors"])
	}
	return out["data"].(map[string]any)
}

// TestServeStartsServesAndShutsDown runs the composition root in-process on a fresh
// database file and a free port: it becomes ready, answers GraphQL, ends an open
// WebSocket at shutdown, exits 0, leaves the database file, and leaks no goroutine.
func TestServeStartsServesAndShutsDown(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	db := filepath.Join(dir, "awareness.db")
	addr := freeAddr(t)
	base := "http://" + addr
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	exited := make(chan struct{})
	code := -1
	go func() {
		defer close(exited)
		code = run(ctx, []string{"serve", "--addr", addr, "--db", db, "--prune-interval", "1h"}, &stdout, &stderr)
	}()
	waitReady(t, client, base, exited)

	data := postQuery(t, client, base, `mutation { recordEvent(input: {sessionKey: "agent:main:subagent:child", kind: human_direct_message, actorType: human, channel: "telegram"}) { stateVersion } }`)
	if diff := cmp.Diff(map[string]any{"recordEvent": map[string]any{"stateVersion": 1.0}}, data); diff != "" {
		t.Errorf("recordEvent (-want +got):\n%s", diff)
	}
	for path, want := range map[string]int{"/healthz": 200, "/": 200, "/playground": 200, "/nope": 404} {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s = %d, want %d", path, resp.StatusCode, want)
		}
	}

	// An open subscription must not hold shutdown up.
	ws, _, err := (&websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}}).Dial("ws://"+addr+"/query", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.Close()
	if err := ws.WriteJSON(map[string]any{"type": "connection_init"}); err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteJSON(map[string]any{"type": "subscribe", "id": "1", "payload": map[string]any{"query": `subscription { staleNotices { text } }`}}); err != nil {
		t.Fatal(err)
	}

	cancel()
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("run did not return after cancel; log:\n%s", stderr.String())
	}
	if code != exitOK {
		t.Errorf("exit code = %d, want 0; log:\n%s", code, stderr.String())
	}
	// The WebSocket was closed with 1012 (service restart), which default graphql-ws
	// clients reconnect on (1000 would make them give up).
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Errorf("the WebSocket is still open after shutdown")
			} else if !websocket.IsCloseError(err, websocket.CloseServiceRestart) {
				t.Errorf("WebSocket ended with %v, want close code 1012", err)
			}
			break
		}
	}
	if _, err := os.Stat(db); err != nil {
		t.Errorf("database file: %v", err)
	}
	log := stderr.String()
	for _, step := range []string{"msg=starting", "startup sweep done", "msg=listening",
		"shutdown: WebSocket connections closed with 1012", "shutdown: WebSocket and SSE streams cancelled",
		"shutdown: http server stopped", "shutdown: pruner stopped", "shutdown: upstream monitor stopped", "shutdown: notice hub closed", "shutdown: database closed", "shutdown complete"} {
		if !strings.Contains(log, step) {
			t.Errorf("log lacks %q:\n%s", step, log)
		}
	}
}

// TestServeBinarySIGTERM builds the real binary, configures it through the environment,
// and stops it with SIGTERM.
func TestServeBinarySIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "awareness")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	db := filepath.Join(dir, "state.db")
	addr := freeAddr(t)
	var stderr syncBuffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "AWARENESS_ADDR="+addr, "AWARENESS_DB="+db, "AWARENESS_LOG_LEVEL=debug")
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	defer func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	waitReady(t, client, "http://"+addr, exited)
	data := postQuery(t, client, "http://"+addr, `{ sessionStatus(sessionKey: "global") { stateVersion agentId } }`)
	if diff := cmp.Diff(map[string]any{"sessionStatus": map[string]any{"stateVersion": 0.0, "agentId": "main"}}, data); diff != "" {
		t.Errorf("sessionStatus (-want +got):\n%s", diff)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("no exit after SIGTERM; log:\n%s", stderr.String())
	}
	if waitErr != nil {
		t.Errorf("exit: %v; log:\n%s", waitErr, stderr.String())
	}
	if _, err := os.Stat(db); err != nil {
		t.Errorf("database file: %v", err)
	}
	if !strings.Contains(stderr.String(), "shutdown complete") {
		t.Errorf("log lacks the shutdown:\n%s", stderr.String())
	}
}

func TestParseServeConfig(t *testing.T) {
	dir := t.TempDir()
	defaults := serveConfig{
		Addr: "127.0.0.1:8080", DB: "./awareness.db", Retention: 720 * time.Hour, MaxRows: 50000,
		PruneInterval: time.Hour, ShutdownTimeout: 10 * time.Second,
		DemoPace: 3 * time.Second, UpstreamFirstCheck: 15 * time.Second, UpstreamInterval: time.Minute,
		WSPingInterval: 20 * time.Second, WSInitTimeout: 10 * time.Second, NoticePoll: 30 * time.Second,
		FeedBookmark: 30 * time.Second, Budget: budget.DefaultLimits(), NoticeTool: awareness.DefaultNoticeTool,
		Holds: awareness.DefaultHoldPolicy, HoldPoll: time.Second,
		MCP: mcpConfig{Toolsets: mcpserver.AllToolsets, SessionIdle: mcpserver.DefaultSessionIdle,
			MaxSessions: mcpserver.DefaultMaxSessions, MaxSubscriptions: mcpserver.DefaultMaxSubscriptions},
	}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(c *serveConfig)
		wantErr string
	}{
		{name: "defaults", want: func(c *serveConfig) {}},
		{
			name: "flags",
			args: []string{"--addr", ":9000", "--insecure", "--db", filepath.Join(dir, "x.db"), "--retention", "48h", "--max-rows", "10", "--prune-interval", "5m", "--allowed-origins", " a.example.com, https://*.b.org ,", "--log-level", "debug"},
			want: func(c *serveConfig) {
				c.Insecure = true
				c.Addr, c.DB, c.Retention, c.MaxRows, c.PruneInterval = ":9000", filepath.Join(dir, "x.db"), 48*time.Hour, 10, 5*time.Minute
				c.AllowedOrigins, c.LogLevel = []string{"a.example.com", "https://*.b.org"}, -4
			},
		},
		{
			name: "environment",
			env:  map[string]string{"AWARENESS_ADDR": "0.0.0.0:81", "AWARENESS_INSECURE": "true", "AWARENESS_RETENTION": "0", "AWARENESS_MAX_ROWS": "0", "AWARENESS_ALLOWED_ORIGINS": "x.org"},
			want: func(c *serveConfig) {
				c.Insecure = true
				c.Addr, c.Retention, c.MaxRows, c.AllowedOrigins = "0.0.0.0:81", 0, 0, []string{"x.org"}
			},
		},
		{
			name: "flag beats environment",
			args: []string{"--max-rows", "7"},
			env:  map[string]string{"AWARENESS_MAX_ROWS": "9"},
			want: func(c *serveConfig) { c.MaxRows = 7 },
		},
		{name: "bad environment value", env: map[string]string{"AWARENESS_RETENTION": "a month"}, wantErr: "AWARENESS_RETENTION"},
		{name: "bad addr", args: []string{"--addr", "8080"}, wantErr: "--addr"},
		{name: "non-loopback without auth", args: []string{"--addr", "0.0.0.0:9000"}, wantErr: "--auth-file"},
		{name: "all interfaces without auth", args: []string{"--addr", ":9000"}, wantErr: "--insecure"},
		{name: "missing auth file", args: []string{"--auth-file", filepath.Join(dir, "none.json")}, wantErr: "--auth-file"},
		{name: "short ws ping interval", args: []string{"--ws-ping-interval", "1ms"}, wantErr: "--ws-ping-interval"},
		{name: "bad port", args: []string{"--addr", "localhost:http"}, wantErr: "port"},
		{name: "negative retention", args: []string{"--retention", "-1h"}, wantErr: "--retention"},
		{name: "negative max rows", args: []string{"--max-rows", "-1"}, wantErr: "--max-rows"},
		{name: "zero prune interval", args: []string{"--prune-interval", "0s"}, wantErr: "--prune-interval"},
		{name: "bad origin pattern", args: []string{"--allowed-origins", "[a"}, wantErr: "--allowed-origins"},
		{name: "missing db directory", args: []string{"--db", filepath.Join(dir, "no", "such", "x.db")}, wantErr: "does not exist"},
		{name: "db is a directory", args: []string{"--db", dir}, wantErr: "not a regular file"},
		{name: "memory db", args: []string{"--db", ":memory:"}, wantErr: "--db"},
		{name: "negative rate limit", args: []string{"--rate-limit", "-1"}, wantErr: "--rate-limit"},
		{name: "rate limit without burst", args: []string{"--rate-burst", "0"}, wantErr: "--rate-burst"},
		{
			name: "rate limit from the environment, off by flag",
			args: []string{"--rate-limit", "0"},
			env:  map[string]string{"AWARENESS_RATE_LIMIT": "5", "AWARENESS_RATE_BURST": "7"},
			want: func(c *serveConfig) { c.Budget.WritesPerSecond, c.Budget.WritesBurst = 0, 7 },
		},
		{
			name: "query budget, streams and hosts",
			args: []string{"--query-rate", "0", "--max-streams", "5", "--allowed-hosts", "awareness.example.com, *.corp.example"},
			env:  map[string]string{"AWARENESS_QUERY_BURST": "30000", "AWARENESS_ALLOWED_HOSTS": "ignored.example"},
			want: func(c *serveConfig) {
				c.Budget.PointsPerSecond, c.Budget.PointsBurst, c.Budget.MaxStreams = 0, 30000, 5
				c.AllowedHosts = []string{"awareness.example.com", "*.corp.example"}
			},
		},
		{
			name: "hosts from the environment",
			env:  map[string]string{"AWARENESS_ALLOWED_HOSTS": "*"},
			want: func(c *serveConfig) { c.AllowedHosts = []string{"*"} },
		},
		{name: "bad host pattern", args: []string{"--allowed-hosts", "https://awareness.example.com"}, wantErr: "--allowed-hosts"},
		{name: "query burst below one request", args: []string{"--query-burst", "100"}, wantErr: "--query-burst"},
		{name: "negative query rate", args: []string{"--query-rate", "-5"}, wantErr: "--query-rate"},
		{name: "negative max streams", args: []string{"--max-streams", "-1"}, wantErr: "--max-streams"},
		{
			name: "postgres db and notice poll",
			args: []string{"--db", "postgres://u:pw@db.example:5432/aw?sslmode=disable", "--notice-poll", "2s"},
			want: func(c *serveConfig) {
				c.DB, c.NoticePoll = "postgres://u:pw@db.example:5432/aw?sslmode=disable", 2*time.Second
			},
		},
		{
			name: "postgres without hints",
			args: []string{"--db", "postgres://u:pw@db.example:5432/aw?sslmode=disable", "--pg-hints", "off"},
			want: func(c *serveConfig) {
				c.DB, c.Hints = "postgres://u:pw@db.example:5432/aw?sslmode=disable", models.HintsOff
			},
		},
		{
			name: "postgres hints after commit, the default",
			args: []string{"--db", "postgres://u:pw@db.example:5432/aw?sslmode=disable", "--pg-hints", "after-commit"},
			want: func(c *serveConfig) {
				c.DB = "postgres://u:pw@db.example:5432/aw?sslmode=disable"
			},
		},
		{
			name: "postgres hints in the commit",
			args: []string{"--db", "postgres://u:pw@db.example:5432/aw?sslmode=disable", "--pg-hints", "commit"},
			want: func(c *serveConfig) {
				c.DB, c.Hints = "postgres://u:pw@db.example:5432/aw?sslmode=disable", models.HintsInCommit
			},
		},
		{name: "bad hint mode", args: []string{"--pg-hints", "maybe"}, wantErr: "--pg-hints"},
		{
			name: "postgres with a bus",
			args: []string{"--db", "postgres://u:pw@db.example:5432/aw?sslmode=disable", "--bus", "nats://127.0.0.1:4222"},
			want: func(c *serveConfig) {
				c.DB, c.Bus = "postgres://u:pw@db.example:5432/aw?sslmode=disable", "nats://127.0.0.1:4222"
			},
		},
		{
			name: "bus from the environment",
			args: []string{"--db", "postgres://u:pw@db.example:5432/aw?sslmode=disable"},
			env:  map[string]string{"AWARENESS_BUS": "nats://a:4222,nats://b:4222"},
			want: func(c *serveConfig) {
				c.DB, c.Bus = "postgres://u:pw@db.example:5432/aw?sslmode=disable", "nats://a:4222,nats://b:4222"
			},
		},
		{name: "bus on sqlite", args: []string{"--bus", "nats://127.0.0.1:4222"}, wantErr: "--bus needs a PostgreSQL --db"},
		{name: "bus not a nats url", args: []string{"--db", "postgres://u@h/aw", "--bus", "http://h:4222"}, wantErr: "--bus"},
		{name: "bus password not echoed", args: []string{"--db", "postgres://u@h/aw", "--bus", "http://u:hunter2@h:4222"}, wantErr: "xxxxx"},
		{name: "bus and pg-hints", args: []string{"--db", "postgres://u@h/aw", "--bus", "nats://h:4222", "--pg-hints", "commit"}, wantErr: "--pg-hints and --bus"},
		{name: "bus and pg-hints from the environment", args: []string{"--db", "postgres://u@h/aw", "--bus", "nats://h:4222"},
			env: map[string]string{"AWARENESS_PG_HINTS": "off"}, wantErr: "--pg-hints and --bus"},
		{name: "bad postgres url", args: []string{"--db", "postgres://u:pw@[::1/aw"}, wantErr: "--db"},
		{name: "short notice poll", args: []string{"--notice-poll", "1ms"}, wantErr: "--notice-poll"},
		{
			name: "feed bookmark from the environment (FEED-3)",
			env:  map[string]string{"AWARENESS_FEED_BOOKMARK": "200ms"},
			want: func(c *serveConfig) { c.FeedBookmark = 200 * time.Millisecond },
		},
		{name: "feed bookmark too short (FEED-3)", args: []string{"--feed-bookmark", "1ms"}, wantErr: "--feed-bookmark"},
		{name: "feed bookmark beyond 30s (FEED-3)", args: []string{"--feed-bookmark", "1m"}, wantErr: "--feed-bookmark"},
		{
			name: "notice tool from the environment (NTC-1)",
			env:  map[string]string{"AWARENESS_NOTICE_TOOL": "awareness_status"},
			want: func(c *serveConfig) { c.NoticeTool = "awareness_status" },
		},
		{
			name: "notice tool flag beats environment (NTC-1)",
			args: []string{"--notice-tool", "mcp__awareness__session_status"},
			env:  map[string]string{"AWARENESS_NOTICE_TOOL": "awareness_status"},
			want: func(c *serveConfig) { c.NoticeTool = "mcp__awareness__session_status" },
		},
		{name: "notice tool with a space", args: []string{"--notice-tool", "session status"}, wantErr: "--notice-tool"},
		{name: "empty notice tool", env: map[string]string{"AWARENESS_NOTICE_TOOL": ""}, wantErr: "--notice-tool"},
		{name: "bad log level", args: []string{"--log-level", "loud"}, wantErr: "--log-level"},
		{
			name: "mcp toolsets, read-only, idle time and caps",
			args: []string{"--mcp-toolsets", "sessions, notices", "--mcp-read-only", "--mcp-session-idle", "90s", "--mcp-max-sessions", "3"},
			env:  map[string]string{"AWARENESS_MCP_MAX_SUBSCRIPTIONS": "7"},
			want: func(c *serveConfig) {
				c.MCP = mcpConfig{Toolsets: []string{"sessions", "notices"}, ReadOnly: true, SessionIdle: 90 * time.Second, MaxSessions: 3, MaxSubscriptions: 7}
			},
		},
		{name: "unknown mcp toolset", args: []string{"--mcp-toolsets", "admin"}, wantErr: "--mcp-toolsets"},
		{name: "short mcp idle time", args: []string{"--mcp-session-idle", "10ms"}, wantErr: "--mcp-session-idle"},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"--port", "1"}, wantErr: "flag provided but not defined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseOrRefuse(t, tt.args, tt.env, tt.wantErr)
			if !ok {
				return
			}
			want := defaults
			tt.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRunUsageErrorsExit2AndOpenNothing(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "awareness.db")
	for _, args := range [][]string{
		{"frobnicate"},
		{"serve", "--db", db, "--retention", "-5m"},
		{"--db", db, "--addr", "nohost"},
	} {
		var stderr bytes.Buffer
		if got := run(context.Background(), args, io.Discard, &stderr); got != exitUsage {
			t.Errorf("run(%q) = %d, want %d", args, got, exitUsage)
		}
		if stderr.Len() == 0 {
			t.Errorf("run(%q) printed no message", args)
		}
		if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("run(%q) created the database (stat: %v)", args, err)
		}
	}
	if got := run(context.Background(), []string{"serve", "-h"}, io.Discard, io.Discard); got != exitOK {
		t.Errorf("serve -h = %d, want 0", got)
	}
	if got := run(context.Background(), []string{"help"}, io.Discard, io.Discard); got != exitOK {
		t.Errorf("help = %d, want 0", got)
	}
}

// parseOrRefuse parses serve flags with env as the environment. With wantErr set it
// checks the refusal names it and returns false; otherwise it returns the config.
func parseOrRefuse(t *testing.T, args []string, env map[string]string, wantErr string) (serveConfig, bool) {
	t.Helper()
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	got, err := parseServeConfig(args, lookup, io.Discard)
	if wantErr != "" {
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Fatalf("err = %v, want one mentioning %q", err, wantErr)
		}
		return serveConfig{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return got, true
}
