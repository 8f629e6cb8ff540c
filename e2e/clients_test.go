package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// The GraphQL-over-HTTP audit suite of the npm graphql-http package (serverAudits)
// against the real binary: no MUST and no SHOULD fails.
func TestGraphQLOverHTTPAudit(t *testing.T) {
	t.Parallel()
	node, dir := nodeClient(t)
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	ctx := withTimeout(t, wait)
	cmd := exec.CommandContext(ctx, node, "audit.mjs", s.base+"/query")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("audit: %v\n%s", err, out)
	}
	var r struct {
		Must, Should, May struct{ OK, Failed int }
		Failures          []struct{ ID, Name, Reason string }
	}
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("audit output %q: %v", out, err)
	}
	t.Logf("graphql-http audit: MUST %d passed %d failed, SHOULD %d passed %d failed, MAY %d passed %d failed",
		r.Must.OK, r.Must.Failed, r.Should.OK, r.Should.Failed, r.May.OK, r.May.Failed)
	for _, f := range r.Failures {
		t.Logf("  %s %s: %s", f.ID, f.Name, f.Reason)
	}
	if r.Must.Failed != 0 || r.Should.Failed != 0 || r.Must.OK == 0 || r.Should.OK == 0 {
		t.Errorf("audit: %d MUST and %d SHOULD failures, want none", r.Must.Failed, r.Should.Failed)
	}
}

// A legacy graphql-ws (subscriptions-transport-ws) connection that sent
// connection_init stays open past the init timeout: the timer stops at
// connection_init on both protocols (it used to close such connections with 4408).
func TestLegacyProtocol_StaysOpenPastInitTimeout(t *testing.T) {
	t.Parallel()
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--ws-init-timeout", "500ms"}})
	d := websocket.Dialer{Subprotocols: []string{"graphql-ws"}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial(s.wsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteJSON(frame{Type: "connection_init"}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var f frame
	if err := c.ReadJSON(&f); err != nil || f.Type != "connection_ack" {
		t.Fatalf("got %+v, %v; want connection_ack", f, err)
	}
	// Three init timeouts later, the connection still serves a subscription.
	_ = c.SetReadDeadline(time.Now().Add(1500*time.Millisecond + 5*time.Second))
	time.Sleep(1500 * time.Millisecond)
	if err := c.WriteJSON(frame{Type: "start", ID: "1", Payload: json.RawMessage(`{"query":"subscription { staleNotices(watcher: \"` + mainWatcher + `\") { text } }"}`)}); err != nil {
		t.Fatal(err)
	}
	s.spawn(t, "agent:main:subagent:legacy", mainWatcher)
	s.humanTurn(t, "agent:main:subagent:legacy")
	for {
		if err := c.ReadJSON(&f); err != nil {
			t.Fatalf("the legacy connection ended after connection_ack: %v", err)
		}
		if f.Type == "data" && f.ID == "1" {
			break
		}
		if f.Type != "ka" {
			t.Fatalf("got %+v, want data for 1", f)
		}
	}
	// And one that never initialises is closed with 4408.
	c2, _, err := d.Dial(s.wsURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if code, _ := closeCodeOf(t, c2, 5*time.Second); code != 4408 {
		t.Errorf("uninitialised legacy connection closed with %d, want 4408", code)
	}
}

// CORS for --allowed-origins: a preflight and a cross-origin POST from an allowed
// origin succeed with the Access-Control headers; from another origin both are
// refused with 403 FORBIDDEN. A same-origin page and a request without Origin need no
// configuration.
func TestCORS_AllowedOriginOnly(t *testing.T) {
	t.Parallel()
	const allowed, foreign = "https://dash.example.com", "https://evil.example.net"
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--allowed-origins", allowed}})
	do := func(method, origin string, h map[string]string, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), method, s.base+"/query", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	preflight := map[string]string{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}
	post := map[string]string{"Content-Type": "application/json"}
	const q = `{"query":"{ __typename }"}`

	r := do(http.MethodOptions, allowed, preflight, "")
	if r.StatusCode/100 != 2 || r.Header.Get("Access-Control-Allow-Origin") != allowed ||
		!strings.Contains(strings.ToLower(r.Header.Get("Access-Control-Allow-Headers")), "authorization") ||
		!strings.Contains(r.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("preflight from the allowed origin: %d %v", r.StatusCode, r.Header)
	}
	if r.Header.Get("Access-Control-Allow-Credentials") != "" {
		t.Errorf("preflight allows credentials (%q); tokens travel in Authorization only", r.Header.Get("Access-Control-Allow-Credentials"))
	}
	if r := do(http.MethodPost, allowed, post, q); r.StatusCode != 200 || r.Header.Get("Access-Control-Allow-Origin") != allowed {
		t.Errorf("POST from the allowed origin: %d, Access-Control-Allow-Origin %q", r.StatusCode, r.Header.Get("Access-Control-Allow-Origin"))
	}
	for _, tc := range []struct {
		method string
		h      map[string]string
		body   string
	}{{http.MethodOptions, preflight, ""}, {http.MethodPost, post, q}} {
		if r := do(tc.method, foreign, tc.h, tc.body); r.StatusCode != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s from a foreign origin: %d, Access-Control-Allow-Origin %q; want 403 without it", tc.method, r.StatusCode, r.Header.Get("Access-Control-Allow-Origin"))
		}
	}
	if r := do(http.MethodPost, s.base, post, q); r.StatusCode != 200 {
		t.Errorf("POST from the service's own origin: %d", r.StatusCode)
	}
	if r := do(http.MethodPost, "", post, q); r.StatusCode != 200 {
		t.Errorf("POST without Origin: %d", r.StatusCode)
	}
}

// A query string over 1 MiB gets the coded 414 of the handler, not net/http's
// plain-text 431: the server's header limit (graph.MaxHeaderBytes) is above it.
func TestOverlongQueryStringIsCoded(t *testing.T) {
	t.Parallel()
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	resp, err := s.client.Get(s.base + "/query?query=" + strings.Repeat("a", 1<<20+512<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r gqlResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("%d: the body is not the GraphQL error shape: %v", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusRequestURITooLong || len(r.Errors) != 1 || r.Errors[0].Extensions["code"] != "INVALID_ARGUMENT" {
		t.Errorf("got %d %+v, want 414 INVALID_ARGUMENT", resp.StatusCode, r.Errors)
	}
}
