package graph_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/models"
)

// rateEnv serves /query with a budget of writes that never refills during a test
// (one per 1000 s) and a burst of 2, and unlimited query points.
func rateEnv(t *testing.T, k *auth.Keyring) (string, *models.Store) {
	t.Helper()
	store, err := models.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := awareness.NewService(awareness.Config{Store: store})
	hs := httptest.NewServer(graph.NewHandler(graph.Config{Service: svc, Auth: k, Budget: budget.New(budget.Limits{WritesPerSecond: 0.001, WritesBurst: 2})}))
	t.Cleanup(func() {
		hs.Close()
		svc.Hub().Close()
		store.Close()
	})
	return hs.URL + "/query", store
}

// oneConn is an HTTP client that keeps one connection.
func oneConn() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
}

func postAs(t *testing.T, c *http.Client, url, token, query string) gqlResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
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

const rateMutation = `mutation { recordEvent(input: {sessionKey: "agent:main:subagent:r", kind: goal_changed, actorType: agent}) { recorded } }`

// TestRateLimit_ERR4: mutations and subscriptions beyond the writes of one remote
// address (unauthenticated) or one token are refused with RATE_LIMITED and a retry
// hint, before anything is written; queries draw from the points, not the writes; a
// new connection, HTTP or WebSocket, of the same address or token gets no new budget.
func TestRateLimit_ERR4(t *testing.T) {
	t.Parallel()
	url, store := rateEnv(t, nil)
	c := oneConn()
	for i := range 2 {
		if r := postAs(t, c, url, "", rateMutation); len(r.Errors) > 0 {
			t.Fatalf("mutation %d: %+v", i+1, r.Errors)
		}
	}
	before, _ := store.Stats(context.Background())
	r := postAs(t, c, url, "", rateMutation)
	if r.code() != awareness.ERATELIMITED || r.Errors[0].Extensions["retryAfterMs"] == nil {
		t.Fatalf("third mutation: %+v, want RATE_LIMITED with retryAfterMs", r.Errors)
	}
	if after, _ := store.Stats(context.Background()); !sameCounts(before, after) {
		t.Errorf("a rate-limited mutation wrote: %+v → %+v", before, after)
	}
	for range 5 {
		if r := postAs(t, c, url, "", `{ sessionStatus(sessionKey: "agent:main:main") { stateVersion } }`); len(r.Errors) > 0 {
			t.Fatalf("query refused: %+v", r.Errors)
		}
	}

	// A new connection of the same address starts with nothing either: the first
	// mutation of a new HTTP connection and the first subscription of a WebSocket are
	// refused (gqlgen sends it as a next with errors, then complete), and the
	// connection stays.
	if r := postAs(t, oneConn(), url, "", rateMutation); r.code() != awareness.ERATELIMITED {
		t.Fatalf("a new connection of the same address: %+v, want RATE_LIMITED", r.Errors)
	}
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(url, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	send := func(v any) {
		if err := ws.WriteJSON(v); err != nil {
			t.Fatal(err)
		}
	}
	read := func() wsFrame {
		for {
			_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
			var f wsFrame
			if err := ws.ReadJSON(&f); err != nil {
				t.Fatalf("read: %v", err)
			}
			if f.Type != "ping" {
				return f
			}
		}
	}
	send(map[string]any{"type": "connection_init"})
	if f := read(); f.Type != "connection_ack" {
		t.Fatalf("%+v", f)
	}
	send(map[string]any{"type": "subscribe", "id": "1", "payload": map[string]any{"query": `subscription { stateEvents(sessionKey: "agent:main:main") { sequence } }`}})
	f := read()
	if (f.Type != "error" && f.Type != "next") || f.ID != "1" || !strings.Contains(string(f.Payload), awareness.ERATELIMITED) || !strings.Contains(string(f.Payload), "retryAfterMs") {
		t.Fatalf("got %s %s %s, want the subscription's RATE_LIMITED error with retryAfterMs", f.Type, f.ID, f.Payload)
	}
	send(map[string]any{"type": "ping"})
	for f := read(); f.Type != "pong"; f = read() {
		if f.Type != "complete" || f.ID != "1" {
			t.Fatalf("after the refusal: %+v, want complete of 1, then the pong of a live connection", f)
		}
	}

	// With a token, the budget is the token's, across connections.
	k, err := auth.Parse([]byte(`{"tokens":[{"role":"agent:main","token":"` + mxDev + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	url, _ = rateEnv(t, k)
	for i := range 3 {
		r := postAs(t, oneConn(), url, mxDev, rateMutation)
		if i < 2 && len(r.Errors) > 0 {
			t.Fatalf("mutation %d: %+v", i+1, r.Errors)
		}
		if i == 2 && r.code() != awareness.ERATELIMITED {
			t.Fatalf("third mutation of the token on a new connection: %+v, want RATE_LIMITED", r.Errors)
		}
	}
}
