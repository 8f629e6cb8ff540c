package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/mcpserver"
	"github.com/awareness/awareness/internal/models"
)

const (
	adminToken = "admin-0123456789abcdef0123456789abcdef"
	opsToken   = "ops-0123456789abcdef0123456789abcdef00"
	ops2Token  = "ops2-0123456789abcdef0123456789abcdef0"
	devToken   = "dev-0123456789abcdef0123456789abcdef00"
)

// env is one service with /mcp on an httptest server, authenticated by a keyring of
// four tokens: admin, two of agent ops, one of agent dev.
type env struct {
	svc   *awareness.Service
	store *models.Store
	mcp   *mcpserver.Server
	url   string
}

func newEnv(t *testing.T, cfg mcpserver.Config) *env {
	t.Helper()
	store, err := models.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := awareness.NewService(awareness.Config{Store: store})
	keys, err := auth.Parse([]byte(`{"tokens":[{"name":"admin","role":"admin","token":"` + adminToken + `"},
	  {"name":"ops","role":"agent:ops","token":"` + opsToken + `"},{"name":"ops2","role":"agent:ops","token":"` + ops2Token + `"},
	  {"name":"dev","role":"agent:dev","token":"` + devToken + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Service = svc
	srv := mcpserver.New(cfg)
	hs := httptest.NewServer(srv.Handler(mcpserver.HTTPConfig{Authenticate: keys.Authenticate, MaxBodyBytes: 1 << 20}))
	t.Cleanup(func() {
		hs.CloseClientConnections()
		srv.Close()
		hs.Close()
		svc.Hub().Close()
		store.Close()
	})
	return &env{svc: svc, store: store, mcp: srv, url: hs.URL}
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// connect opens an MCP session with the official Go SDK client.
func (e *env) connect(t *testing.T, token string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: e.url,
		HTTPClient: &http.Client{Transport: bearer{token}, Timeout: time.Minute}}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// human records a human message into key, which opens notices for its watchers.
func (e *env) human(t *testing.T, key string) {
	t.Helper()
	ch := "webchat"
	if _, err := e.svc.RecordEvent(context.Background(), awareness.RecordInput{SessionKey: key, Kind: awareness.HumanDirectMessage,
		ActorType: awareness.ActorHuman, Channel: &ch}); err != nil {
		t.Fatal(err)
	}
	e.svc.Flush()
}

func (e *env) watch(t *testing.T, watcher, target string) {
	t.Helper()
	if _, err := e.svc.Watch(context.Background(), watcher, target, nil); err != nil {
		t.Fatal(err)
	}
}

// call calls a tool and checks its structured result against the tool's output
// schema.
func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if !r.IsError {
		checkOutput(t, cs, name, r)
	}
	return r
}

func checkOutput(t *testing.T, cs *mcp.ClientSession, name string, r *mcp.CallToolResult) {
	t.Helper()
	var tool *mcp.Tool
	for tl, err := range cs.Tools(context.Background(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tl.Name == name {
			tool = tl
		}
	}
	if tool == nil || tool.OutputSchema == nil {
		t.Fatalf("%s has no output schema", name)
	}
	raw, _ := json.Marshal(tool.OutputSchema)
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatalf("%s: output schema: %v", name, err)
	}
	var v any
	b, _ := json.Marshal(r.StructuredContent)
	_ = json.Unmarshal(b, &v)
	if err := rs.Validate(v); err != nil {
		t.Errorf("%s: structuredContent %s does not match its output schema: %v", name, b, err)
	}
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

func structured(t *testing.T, r *mcp.CallToolResult, into any) {
	t.Helper()
	b, _ := json.Marshal(r.StructuredContent)
	if err := json.Unmarshal(b, into); err != nil {
		t.Fatalf("structuredContent %s: %v", b, err)
	}
}

// post sends one raw JSON-RPC body to /mcp.
func (e *env) post(t *testing.T, token, session, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// rpcCode returns the ERR-1 code (data.code) of a JSON-RPC error answer, SSE or JSON.
func rpcCode(body string) string {
	if i := strings.Index(body, "data: "); i >= 0 && strings.HasPrefix(body, "event:") {
		body = strings.TrimSpace(body[i+6:])
	}
	var m struct {
		Error struct {
			Data struct {
				Code string `json:"code"`
			} `json:"data"`
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(body), &m)
	return m.Error.Data.Code
}

func initialize(t *testing.T, e *env, token string) string {
	t.Helper()
	resp, body := e.post(t, token, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	e.post(t, token, id, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return id
}

// recorder is a minimal http.ResponseWriter for handler tests.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: http.Header{}} }

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.body.Write(b)
}
func (r *recorder) Flush() {}
