package graph_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/jsontext"
	"github.com/awareness/awareness/internal/mcpserver"
)

// hostileMCP is a hostile input given to an MCP tool and, with the same values, to
// the GraphQL operation that does what the tool does.
type hostileMCP struct {
	name  string
	tool  string
	args  map[string]any
	query string
	vars  map[string]any
	code  string // "" when it must be served
}

func hostileMCPInputs() []hostileMCP {
	nul := "a\x00b"
	record := `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded } }`
	ev := func(field string, v any) (map[string]any, map[string]any) {
		in := map[string]any{"sessionKey": "agent:main:subagent:h", "kind": "run_failed", "actorType": "agent"}
		in[field] = v
		return in, map[string]any{"in": in}
	}
	rec := func(name, field string, v any, code string) hostileMCP {
		args, vars := ev(field, v)
		return hostileMCP{name, mcpserver.ToolRecordEvent, args, record, vars, code}
	}
	list := `query($f: SessionFilter, $after: String) { sessionsList(filter: $f, after: $after) { sessions { sessionKey } } }`
	status := `query($k: String!, $s: Int) { sessionStatus(sessionKey: $k, changesSince: $s) { stateVersion } }`
	pending := `query($w: String!) { pendingNotices(watcher: $w) { target } }`
	return []hostileMCP{
		{"sessionKey with NUL", mcpserver.ToolSessionStatus, map[string]any{"sessionKey": "agent:main:" + nul}, status, map[string]any{"k": "agent:main:" + nul}, awareness.EINVALID},
		{"sessionKey with ESC", mcpserver.ToolSessionStatus, map[string]any{"sessionKey": "agent:main:\x1b[31m"}, status, map[string]any{"k": "agent:main:\x1b[31m"}, awareness.EINVALID},
		{"sessionKey empty", mcpserver.ToolSessionStatus, map[string]any{"sessionKey": ""}, status, map[string]any{"k": ""}, awareness.EINVALID},
		{"sessionKey over 512 bytes", mcpserver.ToolSessionStatus, map[string]any{"sessionKey": "agent:main:" + strings.Repeat("x", 600)}, status, map[string]any{"k": "agent:main:" + strings.Repeat("x", 600)}, awareness.EINVALID},
		{"changesSince far ahead", mcpserver.ToolSessionStatus, map[string]any{"sessionKey": "agent:main:main", "changesSince": 2147483647}, status, map[string]any{"k": "agent:main:main", "s": 2147483647}, awareness.ECURSORAHEAD},
		{"changesSince negative", mcpserver.ToolSessionStatus, map[string]any{"sessionKey": "agent:main:main", "changesSince": -1}, status, map[string]any{"k": "agent:main:main", "s": -1}, awareness.EINVALID},
		{"keyPrefix with NUL", mcpserver.ToolSessionsList, map[string]any{"keyPrefix": nul}, list, map[string]any{"f": map[string]any{"keyPrefix": nul}}, awareness.EINVALID},
		{"keyPrefix with a control character", mcpserver.ToolSessionsList, map[string]any{"keyPrefix": "agent:\x07"}, list, map[string]any{"f": map[string]any{"keyPrefix": "agent:\x07"}}, awareness.EINVALID},
		{"after naming a key with NUL", mcpserver.ToolSessionsList, map[string]any{"after": base64.RawURLEncoding.EncodeToString([]byte("main\x00a\x00b"))}, list,
			map[string]any{"after": base64.RawURLEncoding.EncodeToString([]byte("main\x00a\x00b"))}, awareness.EINVALID},
		{"activeMinutes 2147483647 is clamped", mcpserver.ToolSessionsList, map[string]any{"activeMinutes": 2147483647}, list, map[string]any{"f": map[string]any{"activeMinutes": 2147483647}}, ""},
		{"record: sessionKey with NUL", mcpserver.ToolRecordEvent, map[string]any{"sessionKey": "agent:main:" + nul, "kind": "goal_changed", "actorType": "agent"}, record,
			map[string]any{"in": map[string]any{"sessionKey": "agent:main:" + nul, "kind": "goal_changed", "actorType": "agent"}}, awareness.EINVALID},
		rec("summary with NUL", "summary", nul, awareness.EINVALID),
		rec("summary over 200 characters", "summary", strings.Repeat("s", 201), awareness.EINVALID),
		rec("summary with a newline", "summary", "two\nlines", awareness.EINVALID),
		rec("actorId with NUL", "actorId", nul, awareness.EINVALID),
		rec("runId with NUL", "runId", nul, awareness.EINVALID),
		rec("channel with NUL", "channel", nul, awareness.EINVALID),
		rec("dedupeKey with NUL", "dedupeKey", nul, awareness.EINVALID),
		rec("turns zero", "turns", 0, awareness.EINVALID),
		rec("an outcome on a kind without one", "outcome", "timeout", ""),
		rec("watcher with NUL is skipped (WAT-4)", "watchers", []string{"agent:main:" + nul}, ""),
		{"watch target with NUL", mcpserver.ToolSessionWatch, map[string]any{"watcher": "agent:main:main", "target": "agent:main:" + nul},
			`mutation($t: String!) { watch(input: {watcher: "agent:main:main", target: $t}) { watched } }`, map[string]any{"t": "agent:main:" + nul}, awareness.EINVALID},
		{"watch by a bare watcher", mcpserver.ToolSessionWatch, map[string]any{"watcher": "global", "target": "agent:main:main"},
			`mutation { watch(input: {watcher: "global", target: "agent:main:main"}) { watched } }`, nil, ""},
		{"unwatch target with NUL", mcpserver.ToolSessionUnwatch, map[string]any{"watcher": "agent:main:main", "target": "agent:main:" + nul},
			`mutation($t: String!) { unwatch(watcher: "agent:main:main", target: $t) }`, map[string]any{"t": "agent:main:" + nul}, awareness.EINVALID},
		{"ack target with NUL", mcpserver.ToolAckNotices, map[string]any{"watcher": "agent:main:main", "notices": []any{map[string]any{"target": nul, "notifiedVersion": 1}}},
			`mutation($n: [NoticeRef!]!) { acknowledgeNotices(watcher: "agent:main:main", notices: $n) { outcome } }`, map[string]any{"n": []any{map[string]any{"target": nul, "notifiedVersion": 1}}}, awareness.EINVALID},
		{"ack by a watcher with NUL", mcpserver.ToolAckNotices, map[string]any{"watcher": "agent:main:" + nul, "notices": []any{map[string]any{"target": "agent:main:x", "notifiedVersion": 1}}},
			`mutation($w: String!) { acknowledgeNotices(watcher: $w, notices: [{target: "agent:main:x", notifiedVersion: 1}]) { outcome } }`, map[string]any{"w": "agent:main:" + nul}, awareness.EINVALID},
		{"pending of a watcher with NUL", mcpserver.ToolPendingNotices, map[string]any{"watcher": "agent:main:" + nul}, pending, map[string]any{"w": "agent:main:" + nul}, awareness.EINVALID},
		{"pending of a bare watcher", mcpserver.ToolPendingNotices, map[string]any{"watcher": "cron:nightly"}, pending, map[string]any{"w": "cron:nightly"}, awareness.EINVALID},
		{"wait of a watcher with NUL", mcpserver.ToolWaitForNotices, map[string]any{"watcher": "agent:main:" + nul, "timeoutMs": 0}, pending, map[string]any{"w": "agent:main:" + nul}, awareness.EINVALID},
		{"the digest of a watcher with NUL", mcpserver.ToolSessionStatus, map[string]any{"sessionKey": "agent:main:main", "watcher": "agent:main:" + nul}, pending, map[string]any{"w": "agent:main:" + nul}, awareness.EINVALID},
	}
}

// TestHostileInputsSameOverMCP_ERR3: every hostile input gets, from its MCP tool, the
// same code and message as from GraphQL, on SQLite and PostgreSQL, and a refused one
// writes nothing; request text that is not valid (jsontext) is refused by /mcp with
// the message /query gives.
func TestHostileInputsSameOverMCP_ERR3(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			store := b.open(t)
			svc := awareness.NewService(awareness.Config{Store: store})
			gq := httptest.NewServer(graph.NewHandler(graph.Config{Service: svc}))
			ms := mcpserver.New(mcpserver.Config{Service: svc})
			mh := httptest.NewServer(ms.Handler(mcpserver.HTTPConfig{MaxBodyBytes: graph.MaxRequestBytes}))
			t.Cleanup(func() {
				mh.CloseClientConnections()
				ms.Close()
				mh.Close()
				gq.Close()
				svc.Hub().Close()
				store.Close()
			})
			ctx := context.Background()
			if _, err := svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: "agent:main:main"}); err != nil {
				t.Fatal(err)
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "hostile", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: mh.URL}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			for _, in := range hostileMCPInputs() {
				before, err := store.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: in.tool, Arguments: in.args})
				if err != nil {
					t.Fatalf("%s: %v", in.name, err)
				}
				after, err := store.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if in.code != "" && !sameCounts(before, after) {
					t.Errorf("%s: a refused MCP call wrote: %+v → %+v", in.name, before, after)
				}
				g := postGraphQL(t, gq.URL, in.query, in.vars)
				want := ""
				if len(g.Errors) > 0 {
					want = g.code() + ": " + g.Errors[0].Message
				}
				got := ""
				if r.IsError {
					for _, c := range r.Content {
						if tc, ok := c.(*mcp.TextContent); ok {
							got += tc.Text
						}
					}
				}
				if g.code() != in.code || got != want {
					t.Errorf("%s: MCP answers %q, GraphQL %q (want code %q)", in.name, got, want, in.code)
				}
			}
			// Text that is not valid: the edge's refusal, word for word, on both.
			for _, body := range []string{
				"{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"pending_notices\",\"arguments\":{\"watcher\":\"agent:main:\xff\"}}}",
				`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"pending_notices","arguments":{"watcher":"agent:main:\ud83d"}}}`,
			} {
				req, _ := http.NewRequest(http.MethodPost, mh.URL, strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				req.Header.Set("Mcp-Session-Id", cs.ID())
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				var m struct {
					Error struct {
						Message string
						Data    struct{ Code string }
					}
				}
				_ = json.Unmarshal(b, &m)
				if resp.StatusCode != http.StatusBadRequest || m.Error.Data.Code != awareness.EINVALID || m.Error.Message != jsontext.Message {
					t.Errorf("invalid text over /mcp: %d %s", resp.StatusCode, b)
				}
			}
		})
	}
}

func postGraphQL(t *testing.T, url, query string, vars map[string]any) gqlResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	resp, err := http.Post(url+"/query", "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r gqlResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r
}
