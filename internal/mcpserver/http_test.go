package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/mcpserver"
	"github.com/awareness/awareness/internal/syncbuf"
)

// updates collects the resources/updated notifications one client receives.
type updates struct {
	mu   sync.Mutex
	uris []string
}

func (u *updates) opts() *mcp.ClientOptions {
	return &mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
		u.mu.Lock()
		u.uris = append(u.uris, r.Params.URI)
		u.mu.Unlock()
	}}
}

func (u *updates) n() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.uris)
}

func raw(t *testing.T, e *env, method, token, session, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, e.url, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, b.String()
}

// A session belongs to the token that opened it (CLT-6): another token on its id, of
// another agent or of the same one, gets on GET, POST and DELETE the answer an
// unknown id gets, the session goes on, and no notification reaches another session.
func TestSessionBoundToItsToken_CLT6(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	ctx := context.Background()
	const w, target = "agent:ops:main", "agent:ops:subagent:c"
	e.watch(t, w, target)
	var opsU, adminU, devU, ops2U updates
	ops := e.connect(t, opsToken, opsU.opts())
	admin := e.connect(t, adminToken, adminU.opts())
	dev := e.connect(t, devToken, devU.opts())
	ops2 := e.connect(t, ops2Token, ops2U.opts())
	uri := mcpserver.NoticesURIPrefix + w
	for _, cs := range []*mcp.ClientSession{ops, admin} {
		if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	if err := dev.Subscribe(ctx, &mcp.SubscribeParams{URI: mcpserver.NoticesURIPrefix + "agent:dev:main"}); err != nil {
		t.Fatal(err)
	}
	if err := ops2.Subscribe(ctx, &mcp.SubscribeParams{URI: mcpserver.NoticesURIPrefix + "agent:ops:other"}); err != nil {
		t.Fatal(err)
	}
	if err := dev.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err == nil {
		t.Error("agent:dev subscribed to agent:ops:main's notices")
	}

	id := ops.ID()
	_, unknownBody := raw(t, e, http.MethodPost, devToken, "no-such-session", `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
	for _, tok := range []string{devToken, ops2Token, adminToken} {
		for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
			body := ""
			if m == http.MethodPost {
				body = `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`
			}
			resp, got := raw(t, e, m, tok, id, body)
			if resp.StatusCode != http.StatusNotFound || rpcCode(got) != awareness.ENOTFOUND || got != unknownBody {
				t.Errorf("%s with another token's session id: %d %s, want the 404 of an unknown id %s", m, resp.StatusCode, got, unknownBody)
			}
		}
	}
	// The session is intact: it answers, and hears of its watcher's notice.
	call(t, ops, "pending_notices", map[string]any{"watcher": w})
	e.human(t, target)
	waitFor(t, "ops's and admin's notifications", func() bool { return opsU.n() >= 1 && adminU.n() >= 1 })
	time.Sleep(200 * time.Millisecond)
	if devU.n() != 0 || ops2U.n() != 0 {
		t.Errorf("notifications crossed sessions: dev got %v, ops2 %v", devU.uris, ops2U.uris)
	}
	if opsU.uris[0] != uri {
		t.Errorf("ops was told of %q", opsU.uris[0])
	}
}

// An idle session is closed after SessionIdle with its feed (a client that vanished
// frees its hub subscription), and the token may open a new one (CLT-6).
func TestSessionIdleExpiryFreesFeeds_CLT6(t *testing.T) {
	e := newEnv(t, mcpserver.Config{SessionIdle: 300 * time.Millisecond, MaxSessions: 1})
	cs := e.connect(t, opsToken, nil)
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: mcpserver.NoticesURIPrefix + "agent:ops:main"}); err != nil {
		t.Fatal(err)
	}
	if n, _ := e.svc.Hub().Subscribers(); n != 1 {
		t.Fatalf("%d hub subscriptions after subscribe, want 1", n)
	}
	id := cs.ID()
	waitFor(t, "the idle session's feed to end", func() bool { n, _ := e.svc.Hub().Subscribers(); return n == 0 })
	resp, body := raw(t, e, http.MethodPost, opsToken, id, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
	if resp.StatusCode != http.StatusNotFound || rpcCode(body) != awareness.ENOTFOUND {
		t.Errorf("a request on an expired session: %d %s", resp.StatusCode, body)
	}
	e.connect(t, opsToken, nil) // the expired session no longer counts
}

// One token holds at most MaxSessions sessions and MaxSubscriptions subscriptions and
// waits; another token has its own (CLT-6).
func TestSessionAndSubscriptionCaps_CLT6(t *testing.T) {
	e := newEnv(t, mcpserver.Config{MaxSessions: 2, MaxSubscriptions: 2})
	ctx := context.Background()
	a := e.connect(t, opsToken, nil)
	initialize(t, e, opsToken)
	resp, body := raw(t, e, http.MethodPost, opsToken, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if resp.StatusCode != http.StatusTooManyRequests || rpcCode(body) != awareness.ERATELIMITED || resp.Header.Get("Mcp-Session-Id") != "" {
		t.Errorf("a third session of one token: %d %s", resp.StatusCode, body)
	}
	other := e.connect(t, ops2Token, nil) // another token of the same agent
	if resp, _ := raw(t, e, http.MethodDelete, opsToken, a.ID(), ""); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	b := e.connect(t, opsToken, nil) // the deleted session no longer counts

	for _, w := range []string{"agent:ops:w1", "agent:ops:w2"} {
		if err := b.Subscribe(ctx, &mcp.SubscribeParams{URI: mcpserver.NoticesURIPrefix + w}); err != nil {
			t.Fatal(err)
		}
	}
	// Subscribing again to the same URI costs nothing.
	if err := b.Subscribe(ctx, &mcp.SubscribeParams{URI: mcpserver.NoticesURIPrefix + "agent:ops:w1"}); err != nil {
		t.Errorf("resubscribing: %v", err)
	}
	err := b.Subscribe(ctx, &mcp.SubscribeParams{URI: mcpserver.NoticesURIPrefix + "agent:ops:w3"})
	if err == nil || !strings.Contains(err.Error(), "MCP subscriptions and waits") {
		t.Errorf("a third subscription: %v", err)
	}
	r := call(t, b, "wait_for_notices", map[string]any{"watcher": "agent:ops:w4", "timeoutMs": 10})
	if !r.IsError || !strings.HasPrefix(text(r), awareness.ERATELIMITED+": ") {
		t.Errorf("a wait past the cap: %s", text(r))
	}
	if err := other.Subscribe(ctx, &mcp.SubscribeParams{URI: mcpserver.NoticesURIPrefix + "agent:ops:w3"}); err != nil {
		t.Errorf("another token's subscription: %v", err)
	}
	if err := b.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: mcpserver.NoticesURIPrefix + "agent:ops:w2"}); err != nil {
		t.Fatal(err)
	}
	if r := call(t, b, "wait_for_notices", map[string]any{"watcher": "agent:ops:w4", "timeoutMs": 10}); r.IsError {
		t.Errorf("a wait after an unsubscribe: %s", text(r))
	}
	if n, _ := e.svc.Hub().Subscribers(); n != 2 {
		t.Errorf("%d hub subscriptions, want 2 (w1 of one session, w3 of another)", n)
	}
}

// A JSON-RPC batch is bounded before any call runs (ERR-4): more than
// MaxBatchMessages messages, or a body over the /query limit, is refused with a code.
func TestBatchesBounded_ERR4(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	id := initialize(t, e, adminToken)
	batch := func(n int) string {
		msgs := make([]string, n)
		for i := range msgs {
			msgs[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"session_status","arguments":{"sessionKey":"agent:main:main"}}}`, i+10)
		}
		return "[" + strings.Join(msgs, ",") + "]"
	}
	resp, body := raw(t, e, http.MethodPost, adminToken, id, batch(mcpserver.MaxBatchMessages+1), "Mcp-Protocol-Version", "2025-03-26")
	if resp.StatusCode != http.StatusRequestEntityTooLarge || rpcCode(body) != awareness.ECOMPLEXITY {
		t.Errorf("a batch of %d: %d %s", mcpserver.MaxBatchMessages+1, resp.StatusCode, body)
	}
	huge := batch(26418) // 3.9 MiB
	resp, body = raw(t, e, http.MethodPost, adminToken, id, huge, "Mcp-Protocol-Version", "2025-03-26")
	if resp.StatusCode != http.StatusRequestEntityTooLarge || rpcCode(body) != awareness.EINVALID {
		t.Errorf("a %d-byte batch: %d %s", len(huge), resp.StatusCode, body)
	}
	resp, body = raw(t, e, http.MethodPost, adminToken, id, batch(3), "Mcp-Protocol-Version", "2025-03-26")
	if resp.StatusCode != http.StatusOK || strings.Count(body, `"stateVersion"`) != 3 {
		t.Errorf("a batch of 3 (protocol 2025-03-26): %d %s", resp.StatusCode, body)
	}
	// Later protocol versions have no batches: the SDK's refusal, with a code.
	resp, body = raw(t, e, http.MethodPost, adminToken, id, batch(2), "Mcp-Protocol-Version", "2025-06-18")
	if resp.StatusCode != http.StatusBadRequest || rpcCode(body) != awareness.EINVALID {
		t.Errorf("a batch on 2025-06-18: %d %s", resp.StatusCode, body)
	}
}

// A resource URI with a control character (raw, escaped or percent-encoded) is
// refused with INVALID_ARGUMENT, in valid JSON, and the session goes on (ERR-3).
func TestURIWithControlCharacterRefused_ERR3(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	id := initialize(t, e, adminToken)
	for i, uri := range []string{`awareness://notices/agent:main:ma\u0000in`, `awareness://notices/agent:main:\u0007`,
		`awareness://notices/agent:main:%00x`, `awareness://notices/agent:main:\u007f`, `awareness://notices/agent:main:\u0085x`,
		`awareness://notices/\u001b[31m`} {
		for _, method := range []string{"resources/read", "resources/subscribe", "resources/unsubscribe"} {
			resp, body := raw(t, e, http.MethodPost, adminToken, id, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"uri":"%s"}}`, 100+i, method, uri))
			if rpcCode(body) != awareness.EINVALID || strings.ContainsAny(body, "\x00\x07\x1b\x7f") {
				t.Errorf("%s %s: %d %q", method, uri, resp.StatusCode, body)
			}
		}
	}
	resp, body := raw(t, e, http.MethodPost, adminToken, id, `{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"test://other"}}`)
	if rpcCode(body) != awareness.ENOTFOUND {
		t.Errorf("an unknown resource: %d %s", resp.StatusCode, body)
	}
	resp, body = raw(t, e, http.MethodPost, adminToken, id, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"pending_notices","arguments":{"watcher":"agent:main:main"}}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `pendingNotices`) {
		t.Errorf("the session after the refusals: %d %s", resp.StatusCode, body)
	}
}

// Every refusal before a tool runs carries an ERR-1 code and no Go internals.
func TestRefusalsCoded_ERR1(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	id := initialize(t, e, adminToken)
	for _, c := range []struct {
		name, method, token, session, body string
		header                             []string
		status                             int
		code                               string
	}{
		{"no token", http.MethodPost, "", "", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil, 401, awareness.EUNAUTHENTICATED},
		{"bad token", http.MethodPost, "x" + adminToken, "", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil, 401, awareness.EUNAUTHENTICATED},
		{"invalid UTF-8", http.MethodPost, adminToken, id, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"pending_notices\",\"arguments\":{\"watcher\":\"agent:main:\xff\"}}}", nil, 400, awareness.EINVALID},
		{"lone surrogate", http.MethodPost, adminToken, id, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pending_notices","arguments":{"watcher":"agent:main:\ud800"}}}`, nil, 400, awareness.EINVALID},
		{"not JSON", http.MethodPost, adminToken, id, `{"jsonrpc":`, nil, 400, awareness.EINVALID},
		{"no Accept", http.MethodPost, adminToken, id, `{"jsonrpc":"2.0","id":1,"method":"ping"}`, []string{"Accept", "text/html"}, 400, awareness.EINVALID},
		{"GET without a session", http.MethodGet, adminToken, "", "", []string{"Accept", "text/event-stream"}, 400, awareness.EINVALID},
		{"unknown session", http.MethodPost, adminToken, "nope", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil, 404, awareness.ENOTFOUND},
		{"PUT", http.MethodPut, adminToken, "", "", nil, 405, awareness.EINVALID},
		{"foreign host", http.MethodPost, adminToken, "", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, []string{"Origin", "http://evil.example"}, 403, awareness.EFORBIDDEN},
	} {
		resp, body := raw(t, e, c.method, c.token, c.session, c.body, c.header...)
		if resp.StatusCode != c.status || rpcCode(body) != c.code || !json.Valid([]byte(body)) {
			t.Errorf("%s: %d %s, want %d with %s", c.name, resp.StatusCode, body, c.status, c.code)
		}
		if c.code == awareness.EUNAUTHENTICATED && resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no WWW-Authenticate", c.name)
		}
	}
	cs := e.connect(t, adminToken, nil)
	for _, c := range []struct {
		tool string
		args any
		want string
	}{
		{"session_status", map[string]any{"sessionKey": "agent:main:main", "changesSince": "abc"}, "INVALID_ARGUMENT: changesSince must be a whole number, not a JSON string"},
		{"session_status", map[string]any{"sessionKey": "agent:main:main", "changesSince": 1.5}, "INVALID_ARGUMENT: changesSince must be a whole number from -2147483648 to 2147483647 (32 bits), got 1.5"},
		{"session_status", map[string]any{"sessionKey": "agent:main:main", "changesSince": 1 << 40}, "INVALID_ARGUMENT: changesSince must be a whole number from -2147483648 to 2147483647 (32 bits), got 1099511627776"},
		{"session_status", map[string]any{"sessionKey": 7}, "INVALID_ARGUMENT: sessionKey must be a string, not a JSON number"},
		{"session_status", map[string]any{}, "INVALID_ARGUMENT: session_status needs the argument sessionKey"},
		{"session_status", map[string]any{"sessionKey": nil}, "INVALID_ARGUMENT: argument sessionKey of session_status must not be null"},
		{"session_status", map[string]any{"sessionKey": "agent:main:main", "bogus": 1}, `INVALID_ARGUMENT: session_status takes no argument "bogus"; its arguments are sessionKey, agentId, changesSince, limit, watcher`},
		{"session_status", []any{1}, "INVALID_ARGUMENT: the arguments of session_status must be a JSON object"},
		{"ack_notices", map[string]any{"watcher": "agent:main:main", "notices": []any{map[string]any{"target": "x", "notifiedVersion": 1, "extra": 1}}}, `INVALID_ARGUMENT: ack_notices takes no argument "extra" inside a list or object`},
		{"ack_notices", map[string]any{"watcher": "agent:main:main", "notices": "x"}, "INVALID_ARGUMENT: notices must be a list, not a JSON string"},
		{"record_event", map[string]any{"sessionKey": "agent:main:main", "kind": "bogus", "actorType": "agent"}, "INVALID_ARGUMENT: kind \"bogus\" is not one of " + kindList()},
		{"record_event", map[string]any{"sessionKey": "agent:main:main", "kind": "goal_changed", "actorType": "agent", "occurredAt": "yesterday"}, "INVALID_ARGUMENT: occurredAt must be an RFC 3339 timestamp such as 2026-01-02T15:04:05Z"},
		{"session_status", map[string]any{"sessionKey": "agent:main:main", "changesSince": 99}, "CURSOR_AHEAD: "},
	} {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s %v: %v", c.tool, c.args, err)
		}
		got := text(r)
		if !r.IsError || !strings.HasPrefix(got, c.want) || (strings.HasSuffix(c.want, ": ") == false && got != c.want) {
			t.Errorf("%s %v: %v %q, want %q", c.tool, c.args, r.IsError, got, c.want)
		}
		if code, _ := r.Meta[mcpserver.MetaCode].(string); !strings.HasPrefix(got, code+": ") {
			t.Errorf("%s: _meta code %q for %q", c.tool, code, got)
		}
		for _, internal := range []string{"json:", "Go struct", "mcpserver.", "unmarshal"} {
			if strings.Contains(got, internal) {
				t.Errorf("%s: the refusal shows Go internals: %q", c.tool, got)
			}
		}
	}
}

// /mcp serves browser origins by the /query rule (CLT-6); the Host allowlist is the
// server's, in front of every route (edge.Hosts).
func TestOriginChecked_CLT6(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	h := e.mcp.Handler(mcpserver.HTTPConfig{
		OriginAllowed: func(origin, host string) bool { return origin == "http://"+host || origin == "https://dash.example" }})
	for _, c := range []struct {
		host, origin string
		status       int
	}{
		{"127.0.0.1:8080", "", 200},
		{"localhost:9", "http://localhost:9", 200},
		{"localhost:9", "https://dash.example", 200},
		{"127.0.0.1:8080", "http://evil.example", 403},
		{"127.0.0.1:8080", "null", 403},
	} {
		req, _ := http.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`))
		req.Host = c.host
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if c.origin != "" {
			req.Header.Set("Origin", c.origin)
		}
		rec := newRecorder()
		h.ServeHTTP(rec, req)
		if rec.status != c.status || (c.status == 403 && rpcCode(rec.body.String()) != awareness.EFORBIDDEN) {
			t.Errorf("Host %q Origin %q: %d %s, want %d", c.host, c.origin, rec.status, rec.body.String(), c.status)
		}
	}
}

// Session ids are never logged at info (CLT-6): they let whoever reads the log reach
// the session's requests, were it not bound to its token.
func TestSessionIDNotLoggedAtInfo_CLT6(t *testing.T) {
	var logs syncbuf.Buffer
	e := newEnv(t, mcpserver.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	cs := e.connect(t, opsToken, nil)
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: mcpserver.NoticesURIPrefix + "agent:ops:main"}); err != nil {
		t.Fatal(err)
	}
	call(t, cs, "pending_notices", map[string]any{"watcher": "agent:ops:main"})
	id := cs.ID()
	_ = cs.Close()
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(logs.String(), id) {
		t.Errorf("the session id is in the info log:\n%s", logs.String())
	}
}

// Past MaxSessions, a token's least recently used session left without a request for
// EvictIdle (a client gone without DELETE) makes room for its new one; a session in
// use is never replaced (CLT-6).
func TestIdleSessionReplacedPastTheCap_CLT6(t *testing.T) {
	e := newEnv(t, mcpserver.Config{MaxSessions: 2, EvictIdle: 3 * time.Second})
	old := initialize(t, e, opsToken)
	time.Sleep(3200 * time.Millisecond)
	used := initialize(t, e, opsToken)
	fresh := initialize(t, e, opsToken) // replaces old, idle for 3.2 s
	if resp, body := raw(t, e, http.MethodPost, opsToken, old, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`); resp.StatusCode != http.StatusNotFound || rpcCode(body) != awareness.ENOTFOUND {
		t.Errorf("the replaced session: %d %s", resp.StatusCode, body)
	}
	for _, id := range []string{used, fresh} {
		if resp, body := raw(t, e, http.MethodPost, opsToken, id, `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`); resp.StatusCode != http.StatusOK {
			t.Errorf("a session in use: %d %s", resp.StatusCode, body)
		}
	}
	// Both were just used: a third is refused.
	resp, body := raw(t, e, http.MethodPost, opsToken, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if resp.StatusCode != http.StatusTooManyRequests || rpcCode(body) != awareness.ERATELIMITED {
		t.Errorf("a session past the cap, none idle: %d %s", resp.StatusCode, body)
	}
}

// A client told nothing of what was pending when it subscribed would wait for the
// next change: the pending notice is announced once. And a notice opened at once
// after Subscribe returns (a subscriptions/listen client's Subscribe returns before
// the SDK has registered the subscription) is announced too.
func TestSubscribeAnnouncesPendingAndImmediateNotices_NTC7(t *testing.T) {
	e := newEnv(t, mcpserver.Config{})
	e.watch(t, "agent:ops:main", "agent:ops:subagent:a")
	e.watch(t, "agent:ops:main", "agent:ops:subagent:b")
	e.human(t, "agent:ops:subagent:a")
	for round := range 20 {
		var u updates
		cs := e.connect(t, opsToken, u.opts())
		if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: mcpserver.NoticesURIPrefix + "agent:ops:main"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("round %d: the pending notice's announcement", round), func() bool { return u.n() == 1 })
		_ = cs.Close()
	}
	var u updates
	cs := e.connect(t, opsToken, u.opts())
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: mcpserver.NoticesURIPrefix + "agent:ops:main"}); err != nil {
		t.Fatal(err)
	}
	e.human(t, "agent:ops:subagent:b")
	waitFor(t, "an announcement of the pending notice or of the new one", func() bool { return u.n() >= 1 })
	time.Sleep(300 * time.Millisecond)
	if n := u.n(); n > 2 {
		t.Errorf("%d announcements for one pending and one new notice", n)
	}
}

// kindList is the event kinds as a refusal lists them, from the core's table.
func kindList() string {
	ks := make([]string, len(awareness.AllEventKinds))
	for i, k := range awareness.AllEventKinds {
		ks[i] = string(k)
	}
	return strings.Join(ks, ", ")
}
