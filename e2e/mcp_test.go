package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/internal/testenv"
)

// The MCP front (CLT-3, CLT-6) of the real binary: the official conformance suite and
// the official TypeScript SDK client (e2e/mcp), the Go SDK client for auth and stdio,
// raw HTTP and raw stdio for what a client must not be able to do.

var mcpNPM struct {
	once sync.Once
	err  error
}

// mcpNode returns node and e2e/mcp with its npm packages installed.
func mcpNode(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "MCP (TypeScript SDK, conformance)", "node >= 20 is not installed (apt-get install nodejs)")
	}
	dir = filepath.Join(repoRoot, "e2e", "mcp")
	mcpNPM.once.Do(func() {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err == nil {
			return
		}
		npm, err := exec.LookPath("npm")
		if err != nil {
			mcpNPM.err = errors.New("e2e/mcp/node_modules is missing and npm is not installed")
			return
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			mcpNPM.err = errors.New("npm ci in e2e/mcp: " + err.Error() + "\n" + tail(string(out), 2000))
		}
	})
	if mcpNPM.err != nil {
		testenv.Missing(t, "MCP (TypeScript SDK, conformance)", mcpNPM.err.Error())
	}
	return node, dir
}

func TestMCP_TypeScriptSDKClient_StructuredContentEqualsGraphQL_CLT3(t *testing.T) {
	node, dir := mcpNode(t)
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "sdk-client.test.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "AWARENESS_URL="+s.base)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test sdk-client.test.mjs:\n%s", tail(string(out), 6000))
	if err != nil {
		t.Fatalf("the TypeScript SDK client test failed: %v", err)
	}
}

func TestMCP_ConformanceSuite_CLT3(t *testing.T) {
	node, dir := mcpNode(t)
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js"),
		"server", "--url", s.base+"/mcp", "--expected-failures", filepath.Join(dir, "conformance-baseline.yml"))
	cmd.Dir = t.TempDir() // it writes results/ there
	out, err := cmd.CombinedOutput()
	summary := string(out)
	if i := strings.Index(summary, "=== SUMMARY ==="); i >= 0 {
		summary = summary[i:]
	}
	t.Logf("conformance suite:\n%s", tail(summary, 6000))
	if m := regexp.MustCompile(`Total: (\d+) passed, (\d+) failed`).FindStringSubmatch(string(out)); m != nil {
		t.Logf("conformance: %s checks passed, %s failed (the failures are the baseline's fixture scenarios)", m[1], m[2])
	} else {
		t.Errorf("no summary line in the suite's output")
	}
	if err != nil {
		t.Fatalf("the conformance suite failed beyond its baseline (e2e/mcp/conformance-baseline.yml): %v", err)
	}
}

// bearer adds a token to every request of an HTTP client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpConnect(t *testing.T, url, token string) *mcp.ClientSession {
	t.Helper()
	hc := &http.Client{Timeout: 30 * time.Second}
	if token != "" {
		hc.Transport = bearer{token}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("mcp connect %s: %v", url, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func toolText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// Agent tokens apply to MCP exactly as to GraphQL (CLT-1): no token is 401 before
// MCP, an agent token reads its own agent's sessions and is refused another's with
// the same code and message as GraphQL.
func TestMCP_AgentTokensAsGraphQL_CLT1_CLT3(t *testing.T) {
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--auth-file", writeAuthFile(t, 0o600)}})
	resp, err := http.Post(s.base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("POST /mcp without a token: %d %q, want 401 with WWW-Authenticate", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	cs := mcpConnect(t, s.base+"/mcp", opsToken)
	for _, key := range []string{"agent:ops:main", "agent:main:main"} {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_status", Arguments: map[string]any{"sessionKey": key}})
		if err != nil {
			t.Fatal(err)
		}
		g := s.do(opsToken, `query($k: String!) { sessionStatus(sessionKey: $k) { sessionKey agentId stateVersion stateChanges { historyGap } } }`, map[string]any{"k": key})
		if g.err != nil {
			t.Fatal(g.err)
		}
		if len(g.resp.Errors) > 0 {
			want := g.code() + ": " + g.resp.Errors[0].Message
			if !r.IsError || toolText(r) != want {
				t.Errorf("%s: MCP %v %q, GraphQL refused %q", key, r.IsError, toolText(r), want)
			}
			continue
		}
		got := gqlPart(t, r)
		var d struct{ SessionStatus json.RawMessage }
		_ = json.Unmarshal(g.resp.Data, &d)
		if r.IsError || !jsonEqual(got, d.SessionStatus) {
			t.Errorf("%s: MCP %s (error %v), GraphQL %s", key, got, r.IsError, d.SessionStatus)
		}
	}
}

func TestMCP_ResourceSubscriptionNeedsTheWatchersAgent_CLT1_CLT3(t *testing.T) {
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{"--auth-file", writeAuthFile(t, 0o600)}})
	cs := mcpConnect(t, s.base+"/mcp", opsToken)
	ctx := context.Background()
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "awareness://notices/agent:main:main"}); err == nil {
		t.Error("an agent:ops token subscribed to agent:main:main's notices")
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "awareness://notices/agent:main:main"}); err == nil {
		t.Error("an agent:ops token read agent:main:main's notices")
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "awareness://notices/agent:ops:main"}); err != nil {
		t.Errorf("an agent:ops token could not subscribe to its own watcher: %v", err)
	}
}

// gqlPart is a tool's structuredContent without what MCP adds to the GraphQL answer:
// summary (the agent text) and watcherNotices (the named watcher's digest).
func gqlPart(t *testing.T, r *mcp.CallToolResult) []byte {
	t.Helper()
	b, _ := json.Marshal(r.StructuredContent)
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
	if _, ok := m["summary"]; !ok && !r.IsError {
		t.Errorf("structuredContent %s has no summary", b)
	}
	delete(m, "summary")
	delete(m, "watcherNotices")
	out, _ := json.Marshal(m)
	return out
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	ja, _ := json.Marshal(x)
	jb, _ := json.Marshal(y)
	return string(ja) == string(jb)
}

// awareness mcp --url: the stdio server in front of a running service's /mcp answers
// as GraphQL does, and narrows the tools with --read-only.
func TestMCP_StdioServer_CLT3(t *testing.T) {
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	s.humanTurn(t, "agent:main:subagent:stdio")
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	cmd := exec.Command(serverBin, "mcp", "--url", s.base) // the base URL means its /mcp
	cs, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools.Tools) != 8 {
		t.Fatalf("stdio lists %d tools, want 8", len(tools.Tools))
	}
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_status",
		Arguments: map[string]any{"sessionKey": "agent:main:subagent:stdio", "changesSince": 0}})
	if err != nil {
		t.Fatal(err)
	}
	var d struct{ SessionStatus json.RawMessage }
	s.mustGQL(t, `{ sessionStatus(sessionKey: "agent:main:subagent:stdio", changesSince: 0) { sessionKey agentId stateVersion
	  stateChanges { events { sequence kind actorType actorId summary occurredAt runId payload } historyGap truncated earliestAvailableSequence nextChangesSince } } }`, nil, &d)
	if got := gqlPart(t, r); !jsonEqual(got, d.SessionStatus) {
		t.Errorf("stdio session_status %s, GraphQL %s", got, d.SessionStatus)
	}
	if !strings.Contains(toolText(r), "Session state changes: 1.") {
		t.Errorf("text %q", toolText(r))
	}

	ro, err := c.Connect(context.Background(), &mcp.CommandTransport{Command: exec.Command(serverBin, "mcp", "--url", s.base+"/mcp", "--read-only")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	tools, err = ro.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if !tl.Annotations.ReadOnlyHint {
			t.Errorf("awareness mcp --read-only offers %s", tl.Name)
		}
	}
	if len(tools.Tools) != 4 {
		t.Errorf("awareness mcp --read-only offers %d tools, want 4", len(tools.Tools))
	}
}

// A graceful shutdown ends the MCP sessions, their event streams and resource feeds
// promptly, with exit status 0.
func TestMCP_GracefulShutdownEndsSessions(t *testing.T) {
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	cs := mcpConnect(t, s.base+"/mcp", "")
	if err := cs.Subscribe(context.Background(), &mcp.SubscribeParams{URI: "awareness://notices/agent:main:main"}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	st := s.stop(syscall.SIGTERM)
	if !st.Success() || time.Since(t0) > 5*time.Second {
		t.Fatalf("shutdown with an MCP session open: %v after %v\n%s", st, time.Since(t0), tail(s.logs.String(), 3000))
	}
	if !strings.Contains(s.logs.String(), "shutdown: mcp server closed") {
		t.Error("the shutdown log does not say the MCP server closed")
	}
}
