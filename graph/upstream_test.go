package graph_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/upstream"
)

// newUpstreamEnv is the /query handler over a fresh SQLite file with one catalog,
// "claude", over a temporary directory (returned).
func newUpstreamEnv(t *testing.T) (*env, string) {
	t.Helper()
	dir := t.TempDir()
	cdir := filepath.Join(dir, "claude")
	if err := os.Mkdir(cdir, 0o755); err != nil {
		t.Fatal(err)
	}
	cat, err := upstream.NewDirCatalog("claude", cdir)
	if err != nil {
		t.Fatal(err)
	}
	store, err := models.OpenSQLite(context.Background(), filepath.Join(dir, "awareness.db"), models.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	hub := awareness.NewHub()
	svc := awareness.NewService(awareness.Config{Store: store, Hub: hub, Catalogs: []awareness.Catalog{cat}})
	hs := httptest.NewServer(graph.NewHandler(graph.Config{Service: svc}))
	t.Cleanup(func() {
		hs.Close()
		hub.Close()
		store.Close()
	})
	return &env{url: hs.URL + "/query", dir: dir, store: store, hub: hub, svc: svc}, cdir
}

const adoptMutation = `mutation($in: AdoptInput!) { adoptSession(input: $in) {
  sessionKey agentId catalogId threadId marker consecutiveMisses lastCheckedAt blockedReason } }`

func TestUPS1AdoptSessionAndUpstreamLinks(t *testing.T) {
	e, cdir := newUpstreamEnv(t)
	history := `{"type":"user","message":{"role":"user","content":"hello"}}` + "\n"
	if err := os.WriteFile(filepath.Join(cdir, "t1.jsonl"), []byte(history), 0o644); err != nil {
		t.Fatal(err)
	}
	in := map[string]any{"sessionKey": "agent:main:acp:ext", "catalogId": "claude", "threadId": "t1"}
	data := e.mustPost(t, adoptMutation, map[string]any{"in": in})
	want := `{"adoptSession":{"sessionKey":"agent:main:acp:ext","agentId":"main","catalogId":"claude","threadId":"t1",` +
		`"marker":` + itoa(len(history)) + `,"consecutiveMisses":0,"lastCheckedAt":null,"blockedReason":null}}`
	if d := cmp.Diff(want, string(data)); d != "" {
		t.Errorf("adoptSession (-want +got):\n%s", d)
	}

	var got struct {
		UpstreamLinks []map[string]any `json:"upstreamLinks"`
	}
	raw := e.mustPost(t, `{ upstreamLinks(agentId: "main") { sessionKey threadId marker } }`, nil)
	if err := json.Unmarshal(raw, &got); err != nil || len(got.UpstreamLinks) != 1 {
		t.Fatalf("upstreamLinks = %s, %v", raw, err)
	}
	if raw := e.mustPost(t, `{ upstreamLinks(agentId: "ops") { sessionKey } }`, nil); string(raw) != `{"upstreamLinks":[]}` {
		t.Errorf("upstreamLinks(ops) = %s", raw)
	}

	data = e.mustPost(t, `mutation { recordOwnPrompt(sessionKey: "agent:main:acp:ext", text: "  do the thing ") }`, nil)
	if string(data) != `{"recordOwnPrompt":true}` {
		t.Errorf("recordOwnPrompt = %s", data)
	}
	data = e.mustPost(t, `mutation { recordOwnPrompt(sessionKey: "agent:main:acp:other", text: "x") }`, nil)
	if string(data) != `{"recordOwnPrompt":false}` {
		t.Errorf("recordOwnPrompt on an unadopted session = %s", data)
	}
}

func TestUPS1AdoptSessionErrors(t *testing.T) {
	e, cdir := newUpstreamEnv(t)
	os.WriteFile(filepath.Join(cdir, "t1.jsonl"), nil, 0o644)
	for _, tt := range []struct {
		name string
		in   map[string]any
		code string
	}{
		{"unknown catalog", map[string]any{"sessionKey": "agent:main:acp:x", "catalogId": "codex", "threadId": "t1"}, awareness.EINVALID},
		{"missing thread", map[string]any{"sessionKey": "agent:main:acp:x", "catalogId": "claude", "threadId": "nope"}, awareness.ENOTFOUND},
		{"path traversal", map[string]any{"sessionKey": "agent:main:acp:x", "catalogId": "claude", "threadId": "../../etc/passwd"}, awareness.EINVALID},
		{"bad key", map[string]any{"sessionKey": "agent:", "catalogId": "claude", "threadId": "t1"}, awareness.EINVALID},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, r, raw := e.post(t, adoptMutation, map[string]any{"in": tt.in})
			if got := r.code(); got != tt.code {
				t.Fatalf("code = %q, want %q: %s", got, tt.code, raw)
			}
			if strings.Contains(string(raw), cdir) {
				t.Errorf("the error names the catalog directory: %s", raw)
			}
		})
	}
	if raw := e.mustPost(t, `{ upstreamLinks { sessionKey } }`, nil); string(raw) != `{"upstreamLinks":[]}` {
		t.Errorf("failed adoptions left links: %s", raw)
	}
	if _, r, raw := e.post(t, `{ upstreamLinks(agentId: "Not Valid") { sessionKey } }`, nil); r.code() != awareness.EINVALID {
		t.Errorf("upstreamLinks(bad agent) = %s", raw)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
