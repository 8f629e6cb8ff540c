package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// scrape reads /metrics with the bearer token and returns every sample, by series
// as the text format writes it (name{label="v",…}, labels sorted by name).
func scrape(t *testing.T, client *http.Client, base, token string) map[string]float64 {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d: %s", resp.StatusCode, body)
	}
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// post sends one GraphQL request and returns the decoded answer, errors included.
func post(t *testing.T, client *http.Client, base, query string) map[string]any {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	resp, err := client.Post(base+"/query", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST /query: %v", err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMetricsCountKnownOperations runs the service, performs known operations and
// checks that every metric of the write and notice paths and of the database moved by
// exactly what they did; the output passes the client library's lint, and /metrics
// needs the token of --metrics-token-file.
func TestMetricsCountKnownOperations(t *testing.T) {
	dir := t.TempDir()
	token := strings.Repeat("m", 40)
	tokenFile := filepath.Join(dir, "metrics-token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	base := "http://" + addr
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		run(ctx, []string{"serve", "--addr", addr, "--db", filepath.Join(dir, "a.db"), "--metrics-token-file", tokenFile}, &stdout, &stderr)
	}()
	defer func() { cancel(); <-exited }()
	waitReady(t, client, base, exited)

	// Without the token: 401.
	resp, err := client.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token = %d, want 401", resp.StatusCode)
	}

	before := scrape(t, client, base, token)
	const child, manager = "agent:main:subagent:child", "agent:main:main"
	post(t, client, base, `mutation { recordEvent(input:{sessionKey:"`+child+`", kind: child_spawned, actorType: agent, actorId:"`+manager+`", watchers:["`+manager+`"]}) { recorded } }`)

	ws, _, err := (&websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}}).Dial("ws://"+addr+"/query", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := ws.WriteJSON(map[string]any{"type": "connection_init"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ws.ReadMessage(); err != nil { // connection_ack
		t.Fatal(err)
	}
	if err := ws.WriteJSON(map[string]any{"type": "subscribe", "id": "1", "payload": map[string]any{"query": `subscription { staleNotices(watcher:"` + manager + `") { text } }`}}); err != nil {
		t.Fatal(err)
	}
	// The subscription is live once the gauge says so.
	deadline := time.Now().Add(10 * time.Second)
	for scrape(t, client, base, token)[`awareness_subscribers{stream="notices",transport="websocket"}`] != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the subscription never showed in awareness_subscribers")
		}
		time.Sleep(20 * time.Millisecond)
	}

	post(t, client, base, `mutation { recordEvent(input:{sessionKey:"`+child+`", kind: human_direct_message, actorType: human, channel:"telegram"}) { noticesOpened } }`)
	for range 2 {
		post(t, client, base, `mutation { recordEvent(input:{sessionKey:"`+child+`", kind: run_completed, actorType: agent, dedupeKey:"run-1"}) { recorded } }`)
	}
	if out := post(t, client, base, `mutation { recordEvent(input:{sessionKey:"agent:BAD KEY", kind: goal_changed, actorType: human}) { recorded } }`); out["errors"] == nil {
		t.Fatalf("a bad key was accepted: %v", out)
	}
	var frame struct{ Type string }
	if err := ws.ReadJSON(&frame); err != nil || frame.Type != "next" {
		t.Fatalf("notice frame: %+v %v", frame, err)
	}
	mid := scrape(t, client, base, token)
	post(t, client, base, `mutation { ackNotices(watcher:"`+manager+`") { text } }`)
	after := scrape(t, client, base, token)

	delta := func(m map[string]float64, series string) float64 { return m[series] - before[series] }
	for series, want := range map[string]float64{
		`awareness_events_appended_total{kind="child_spawned"}`:                                1,
		`awareness_events_appended_total{kind="human_direct_message"}`:                         1,
		`awareness_events_appended_total{kind="run_completed"}`:                                1,
		`awareness_events_appended_total{kind="goal_changed"}`:                                 0,
		`awareness_events_deduplicated_total`:                                                  1,
		`awareness_append_errors_total{code="INVALID_ARGUMENT"}`:                               1,
		`awareness_notices_opened_total`:                                                       1,
		`awareness_notices_delivered_total`:                                                    1,
		`awareness_notices_acknowledged_total`:                                                 1,
		`awareness_store_group_commit_size_count`:                                              4,
		`awareness_store_group_commit_size_sum`:                                                4,
		`awareness_store_transaction_duration_seconds_count{result="ok",transaction="Append"}`: 4,
		`awareness_store_transaction_duration_seconds_count{result="ok",transaction="Ack"}`:    1,
		`awareness_subscribers_dropped_total{stream="notices"}`:                                0,
	} {
		if got := delta(after, series); got != want {
			t.Errorf("%s moved by %v, want %v", series, got, want)
		}
	}
	if got := mid[`awareness_notices_pending`]; got != 1 {
		t.Errorf("awareness_notices_pending before the ack = %v, want 1", got)
	}
	if got := after[`awareness_notices_pending`]; got != 0 {
		t.Errorf("awareness_notices_pending after the ack = %v, want 0", got)
	}
	if _, ok := after[`go_goroutines`]; !ok {
		t.Error("the Go runtime collector is missing")
	}

	ws.Close()
	deadline = time.Now().Add(10 * time.Second)
	for scrape(t, client, base, token)[`awareness_subscribers{stream="notices",transport="websocket"}`] != 0 {
		if time.Now().After(deadline) {
			t.Fatal("awareness_subscribers did not go back to 0 after the WebSocket closed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
