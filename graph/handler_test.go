package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/introspection"
	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func TestMain(m *testing.M) { goleak.VerifyTestMain(testenv.M(m)) }

// env is the real /query handler over a fresh SQLite file.
type env struct {
	url   string
	dir   string
	store *models.Store
	hub   *awareness.Hub
	svc   *awareness.Service
}

func newEnv(t *testing.T, configure ...func(*graph.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	store, err := models.OpenSQLite(context.Background(), filepath.Join(dir, "awareness.db"), models.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	hub := awareness.NewHub()
	svc := awareness.NewService(awareness.Config{Store: store, Hub: hub})
	cfg := graph.Config{Service: svc}
	for _, f := range configure {
		f(&cfg)
	}
	hs := httptest.NewServer(graph.NewHandler(cfg))
	t.Cleanup(func() {
		hs.Close()
		hub.Close()
		store.Close()
	})
	return &env{url: hs.URL + "/query", dir: dir, store: store, hub: hub, svc: svc}
}

type gqlError struct {
	Message    string         `json:"message"`
	Path       []any          `json:"path"`
	Extensions map[string]any `json:"extensions"`
}

type gqlResponse struct {
	Data   json.RawMessage `json:"data"`
	Errors []gqlError      `json:"errors"`
}

func (r gqlResponse) code() string {
	if len(r.Errors) == 0 {
		return ""
	}
	c, _ := r.Errors[0].Extensions["code"].(string)
	return c
}

// post sends one GraphQL request and returns the HTTP status, the decoded response
// and the raw body.
func (e *env) post(t *testing.T, query string, vars map[string]any) (int, gqlResponse, []byte) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		t.Fatal(err)
	}
	return e.postRaw(t, body)
}

func (e *env) postRaw(t *testing.T, body []byte) (int, gqlResponse, []byte) {
	t.Helper()
	resp, err := http.Post(e.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST /query: %v", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var r gqlResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, raw)
	}
	return resp.StatusCode, r, raw
}

// mustPost fails the test on any GraphQL error.
func (e *env) mustPost(t *testing.T, query string, vars map[string]any) json.RawMessage {
	t.Helper()
	_, r, raw := e.post(t, query, vars)
	if len(r.Errors) > 0 {
		t.Fatalf("unexpected errors: %s", raw)
	}
	return r.Data
}

const recordMutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded stateVersion noticesOpened } }`

func (e *env) record(t *testing.T, in map[string]any) {
	t.Helper()
	e.mustPost(t, recordMutation, map[string]any{"in": in})
}

const (
	child  = "agent:main:subagent:child"
	parent = "agent:main:main"
)

// TestREC6SessionStatusGolden checks that sessionStatus answers in exactly the shape of
// the seeds' example (REC-6): stateVersion, then stateChanges with events of sequence,
// kind, actorType and summary, then historyGap.
func TestREC6SessionStatusGolden(t *testing.T) {
	e := newEnv(t)
	e.record(t, map[string]any{"sessionKey": child, "kind": "child_spawned", "actorType": "agent", "actorId": parent, "watchers": []string{parent}})
	for i := 2; i <= 13; i++ {
		kind := []string{"run_completed", "compacted", "run_failed"}[i%3]
		in := map[string]any{"sessionKey": child, "kind": kind, "actorType": "system"}
		if kind == "run_failed" {
			in["outcome"] = "error"
		}
		e.record(t, in)
	}
	e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "channel": "telegram"})
	e.record(t, map[string]any{"sessionKey": child, "kind": "compacted", "actorType": "system"})
	e.record(t, map[string]any{"sessionKey": child, "kind": "run_completed", "actorType": "system", "runId": "run-16"})
	e.record(t, map[string]any{"sessionKey": child, "kind": "run_failed", "actorType": "system", "outcome": "timeout"})
	e.record(t, map[string]any{"sessionKey": child, "kind": "compacted", "actorType": "system"})
	e.record(t, map[string]any{"sessionKey": child, "kind": "goal_changed", "actorType": "human"})

	_, r, raw := e.post(t, `{ sessionStatus(sessionKey: "agent:main:subagent:child", changesSince: 13) { stateVersion stateChanges { events { sequence kind actorType summary } historyGap } } }`, nil)
	if len(r.Errors) > 0 {
		t.Fatalf("errors: %s", raw)
	}
	var got bytes.Buffer
	if err := json.Indent(&got, raw, "", "  "); err != nil {
		t.Fatal(err)
	}
	got.WriteByte('\n')
	golden := filepath.Join("testdata", "rec6_session_status.golden.json")
	if *update {
		if err := os.WriteFile(golden, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got.String()); diff != "" {
		t.Errorf("sessionStatus JSON differs from %s (-want +got):\n%s", golden, diff)
	}
}

// snapshot is everything a rejected call must leave unchanged (ERR-2).
type snapshot struct {
	Stats   awareness.Stats
	Cursors []awareness.Cursor
	Pending []awareness.Notice
	Status  awareness.Status
}

func (e *env) snapshot(t *testing.T) snapshot {
	t.Helper()
	ctx := context.Background()
	st, err := e.store.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := e.svc.Watches(ctx, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pend, err := e.svc.PendingNotices(ctx, parent)
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	status, err := e.svc.SessionStatus(ctx, child, nil, &zero, nil)
	if err != nil {
		t.Fatal(err)
	}
	return snapshot{Stats: st, Cursors: cur, Pending: pend, Status: status}
}

// TestERR1ERR2BadInputRejectedAndNothingWritten sends bad input through the real handler:
// each request is answered with the expected extensions.code and a message, and the
// database is left exactly as it was.
func TestERR1ERR2BadInputRejectedAndNothingWritten(t *testing.T) {
	e := newEnv(t)
	// Baseline: the parent watches the child and holds a pending notice.
	e.record(t, map[string]any{"sessionKey": child, "kind": "child_spawned", "actorType": "agent", "actorId": parent, "watchers": []string{parent}})
	e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "channel": "telegram"})

	rec := func(over map[string]any) map[string]any {
		in := map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human"}
		for k, v := range over {
			in[k] = v
		}
		return map[string]any{"in": in}
	}
	const status = `query($k: String!, $a: String, $since: Int, $limit: Int) { sessionStatus(sessionKey: $k, agentId: $a, changesSince: $since, limit: $limit) { stateVersion } }`
	const ackExact = `mutation($w: String!, $t: [String!], $a: String, $n: [NoticeRef!]) { ackNotices(watcher: $w, targets: $t, targetAgentId: $a, notices: $n) { text } }`
	watchers := make([]string, awareness.MaxWatchersPerEvent+1)
	for i := range watchers {
		watchers[i] = "agent:main:w" + strings.Repeat("x", i+1)
	}

	tests := []struct {
		name     string
		query    string
		vars     map[string]any
		raw      string // sent as the body verbatim when set
		wantCode string
	}{
		{"KEY-1 malformed key in sessionStatus", status, map[string]any{"k": "agent:main:"}, "", awareness.EINVALID},
		{"KEY-1 malformed key in recordEvent", recordMutation, rec(map[string]any{"sessionKey": "agent::child"}), "", awareness.EINVALID},
		{"KEY-1 agentId contradicts key in recordEvent", recordMutation, rec(map[string]any{"agentId": "ops"}), "", awareness.EINVALID},
		{"KEY-1 agentId contradicts key in sessionStatus", status, map[string]any{"k": child, "a": "ops"}, "", awareness.EINVALID},
		{"KEY-4 oversized key", recordMutation, rec(map[string]any{"sessionKey": "agent:main:" + strings.Repeat("k", awareness.MaxKeyBytes-10)}), "", awareness.EINVALID},
		{"KEY-4 control character in key", recordMutation, rec(map[string]any{"sessionKey": "agent:main:a\tb"}), "", awareness.EINVALID},
		{"KEY-4 invalid agent id", recordMutation, rec(map[string]any{"sessionKey": "global", "agentId": "Not An Agent!"}), "", awareness.EINVALID},
		{"KEY-4 invalid UTF-8 raw bytes", "", nil, `{"query":"` + jsonEscape(recordMutation) + `","variables":{"in":{"sessionKey":"agent:main:` + "\xff\xfe" + `","kind":"human_direct_message","actorType":"human"}}}`, awareness.EINVALID},
		{"KEY-4 lone surrogate escape", "", nil, `{"query":"` + jsonEscape(recordMutation) + `","variables":{"in":{"sessionKey":"agent:main:\ud800x","kind":"human_direct_message","actorType":"human"}}}`, awareness.EINVALID},
		{"KEY-4 lone low surrogate in summary", "", nil, `{"query":"` + jsonEscape(recordMutation) + `","variables":{"in":{"sessionKey":"agent:main:subagent:child","summary":"a\udc00","kind":"human_direct_message","actorType":"human"}}}`, awareness.EINVALID},
		{"SIG-2 multi-line summary", recordMutation, rec(map[string]any{"summary": "line one\nline two"}), "", awareness.EINVALID},
		{"SIG-2 summary of 201 characters", recordMutation, rec(map[string]any{"summary": strings.Repeat("é", awareness.MaxSummaryRunes+1)}), "", awareness.EINVALID},
		{"SIG-2 outcome on a kind other than run_failed", recordMutation, rec(map[string]any{"outcome": "timeout"}), "", awareness.EINVALID},
		{"SIG-2 turns below 1", recordMutation, rec(map[string]any{"turns": 0}), "", awareness.EINVALID},
		{"SIG-5 occurredAt not RFC 3339", recordMutation, rec(map[string]any{"occurredAt": "yesterday"}), "", awareness.EINVALID},
		{"SIG-1 unknown kind", recordMutation, rec(map[string]any{"kind": "human_typed"}), "", "GRAPHQL_VALIDATION_FAILED"},
		{"WAT-4 too many watchers", recordMutation, rec(map[string]any{"watchers": watchers}), "", awareness.EINVALID},
		{"NTC-3 notices together with targets", ackExact, map[string]any{"w": parent, "t": []string{child}, "n": []map[string]any{{"target": child, "notifiedVersion": 1}}}, "", awareness.EINVALID},
		{"NTC-3 notices together with targetAgentId", ackExact, map[string]any{"w": parent, "a": "main", "n": []map[string]any{{"target": child, "notifiedVersion": 1}}}, "", awareness.EINVALID},
		{"NTC-3 notifiedVersion 0", ackExact, map[string]any{"w": parent, "n": []map[string]any{{"target": child, "notifiedVersion": 0}}}, "", awareness.EINVALID},
		{"NTC-3 malformed notice target", ackExact, map[string]any{"w": parent, "n": []map[string]any{{"target": "agent:", "notifiedVersion": 1}}}, "", awareness.EINVALID},
		{"NTC-3 notice target agent contradicts its key", ackExact, map[string]any{"w": parent, "n": []map[string]any{{"target": child, "targetAgentId": "ops", "notifiedVersion": 1}}}, "", awareness.EINVALID},
		{"NTC-3 targetAgentId without targets", ackExact, map[string]any{"w": parent, "a": "ops"}, "", awareness.EINVALID},
		{"KEY-3 watches targetAgentId without target", `query($a: String) { watches(targetAgentId: $a) { target } }`, map[string]any{"a": "ops"}, "", awareness.EINVALID},
		{"KEY-3 bare key as watcher in pendingNotices", `query($w: String!) { pendingNotices(watcher: $w) { text } }`, map[string]any{"w": "cron:nightly"}, "", awareness.EINVALID},
		{"KEY-3 bare key as watcher in ackNotices", `mutation($w: String!) { ackNotices(watcher: $w) { text } }`, map[string]any{"w": "global"}, "", awareness.EINVALID},
		{"KEY-3 bare key as watcher in unwatch", `mutation($w: String!, $t: String!) { unwatch(watcher: $w, target: $t) }`, map[string]any{"w": "hook:1", "t": child}, "", awareness.EINVALID},
		{"WAT-3 malformed watch target", `mutation($in: WatchInput!) { watch(input: $in) { watched } }`, map[string]any{"in": map[string]any{"watcher": parent, "target": "agent:main:"}}, "", awareness.EINVALID},
		{"NTC-3 malformed ack target", `mutation($w: String!, $t: [String!]) { ackNotices(watcher: $w, targets: $t) { text } }`, map[string]any{"w": parent, "t": []string{"agent:"}}, "", awareness.EINVALID},
		{"WAT-5 malformed key in deleteSession", `mutation($k: String!) { deleteSession(sessionKey: $k) }`, map[string]any{"k": "agent:x"}, "", awareness.EINVALID},
		{"WAT-5 malformed key in resetSession", `mutation($k: String!) { resetSession(sessionKey: $k) }`, map[string]any{"k": strings.Repeat("k", awareness.MaxKeyBytes+1)}, "", awareness.EINVALID},
		{"REC-1 negative changesSince", status, map[string]any{"k": child, "since": -1}, "", awareness.EINVALID},
		{"REC-1 limit 0", status, map[string]any{"k": child, "since": 0, "limit": 0}, "", awareness.EINVALID},
		{"REC-3 changesSince past head", status, map[string]any{"k": child, "since": 3}, "", awareness.ECURSORAHEAD},
		{"REC-5 sessionsList first 0", `{ sessionsList(first: 0) { pageInfo { hasNextPage } } }`, nil, "", awareness.EINVALID},
		{"REC-5 sessionsList foreign cursor", `{ sessionsList(after: "not-a-cursor") { pageInfo { hasNextPage } } }`, nil, "", awareness.EINVALID},
		{"REC-5 sessionsList invalid agent filter", `{ sessionsList(filter: {agentId: "BAD AGENT"}) { pageInfo { hasNextPage } } }`, nil, "", awareness.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := e.snapshot(t)
			var (
				r   gqlResponse
				raw []byte
			)
			if tt.raw != "" {
				_, r, raw = e.postRaw(t, []byte(tt.raw))
			} else {
				_, r, raw = e.post(t, tt.query, tt.vars)
			}
			if got := r.code(); got != tt.wantCode {
				t.Fatalf("extensions.code = %q, want %q\nresponse: %s", got, tt.wantCode, raw)
			}
			if r.Errors[0].Message == "" {
				t.Errorf("error without a message: %s", raw)
			}
			if d := string(r.Data); d != "" && d != "null" {
				t.Errorf("data = %s, want null", d)
			}
			if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
				t.Errorf("a rejected call changed the database (-before +after):\n%s", diff)
			}
		})
	}
}

// jsonEscape escapes s for use inside a JSON string literal written by hand.
func jsonEscape(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// TestERR2InvalidUTF8AtServiceLevel covers what JSON cannot carry: a Go string that is
// not valid UTF-8 reaching the service directly.
func TestERR2InvalidUTF8AtServiceLevel(t *testing.T) {
	e := newEnv(t)
	before := e.snapshot(t)
	for _, key := range []string{"agent:main:\xff", "agent:main:\xed\xa0\x80" /* UTF-8 of U+D800 */} {
		_, err := e.svc.RecordEvent(context.Background(), awareness.RecordInput{SessionKey: key, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman})
		if got := awareness.ErrorCode(err); got != awareness.EINVALID {
			t.Errorf("RecordEvent(%q) code = %q, want %q (err %v)", key, got, awareness.EINVALID, err)
		}
	}
	if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
		t.Errorf("a rejected call changed the database (-before +after):\n%s", diff)
	}
}

func TestERR1InternalErrorsDoNotLeak(t *testing.T) {
	e := newEnv(t)
	e.store.Close() // every query now fails inside the store
	_, r, raw := e.post(t, `{ sessionStatus(sessionKey: "agent:main:main", changesSince: 0) { stateVersion } }`, nil)
	switch r.code() {
	case awareness.EINTERNAL, awareness.EUNAVAILABLE:
	default:
		t.Fatalf("code = %q, want INTERNAL or UNAVAILABLE: %s", r.code(), raw)
	}
	for _, leak := range []string{e.dir, "sql", "SELECT", "gorm", "awareness error"} {
		if strings.Contains(strings.ToLower(string(raw)), strings.ToLower(leak)) {
			t.Errorf("response leaks %q: %s", leak, raw)
		}
	}
}

func TestSessionsListAndStatusMapping(t *testing.T) {
	e := newEnv(t)
	e.record(t, map[string]any{"sessionKey": child, "kind": "run_failed", "actorType": "system", "outcome": "timeout", "runId": "r1", "actorId": parent})
	data := e.mustPost(t, `{
	  sessionStatus(sessionKey: "agent:main:subagent:child", changesSince: 0, limit: 1) {
	    sessionKey agentId stateVersion
	    stateChanges { events { sequence kind actorType actorId summary runId payload } historyGap truncated earliestAvailableSequence nextChangesSince }
	  }
	  sessionsList(first: 1) { sessions { sessionKey agentId kind stateVersion compactionCount } pageInfo { hasNextPage endCursor } }
	  watches { watcher }
	}`, nil)
	var got struct {
		SessionStatus map[string]any `json:"sessionStatus"`
		SessionsList  struct {
			Sessions []map[string]any `json:"sessions"`
			PageInfo struct {
				HasNextPage bool    `json:"hasNextPage"`
				EndCursor   *string `json:"endCursor"`
			} `json:"pageInfo"`
		} `json:"sessionsList"`
		Watches []any `json:"watches"`
	}
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	wantStatus := map[string]any{
		"sessionKey": child, "agentId": "main", "stateVersion": 1.0,
		"stateChanges": map[string]any{
			"events": []any{map[string]any{
				"sequence": 1.0, "kind": "run_failed", "actorType": "system", "actorId": parent,
				"summary": "child run timed out", "runId": "r1", "payload": map[string]any{"outcome": "timeout"},
			}},
			"historyGap": false, "truncated": false, "earliestAvailableSequence": 1.0, "nextChangesSince": 1.0,
		},
	}
	if diff := cmp.Diff(wantStatus, got.SessionStatus); diff != "" {
		t.Errorf("sessionStatus (-want +got):\n%s", diff)
	}
	wantSessions := []map[string]any{{"sessionKey": child, "agentId": "main", "kind": "subagent", "stateVersion": 1.0, "compactionCount": 0.0}}
	if diff := cmp.Diff(wantSessions, got.SessionsList.Sessions); diff != "" {
		t.Errorf("sessionsList (-want +got):\n%s", diff)
	}
	if got.SessionsList.PageInfo.EndCursor == nil {
		t.Errorf("pageInfo.endCursor is null on a non-empty page")
	}
	if got.Watches == nil {
		t.Errorf("watches is null, want []")
	}
}

func TestSubscriptionOverPOSTIsRefused(t *testing.T) {
	e := newEnv(t)
	_, r, raw := e.post(t, `subscription { staleNotices { text } }`, nil)
	if got := r.code(); got != awareness.EINVALID {
		t.Fatalf("code = %q, want %q: %s", got, awareness.EINVALID, raw)
	}
}

// wsClient speaks graphql-transport-ws or graphql-ws to the handler.
type wsClient struct {
	t *testing.T
	c *websocket.Conn
}

type wsFrame struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

func (e *env) dialWS(t *testing.T, protocol string) *wsClient {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{protocol}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws"+strings.TrimPrefix(e.url, "http"), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	w := &wsClient{t: t, c: c}
	w.send(wsFrame{Type: "connection_init"})
	if f := w.next(); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	return w
}

func (w *wsClient) send(f wsFrame) {
	w.t.Helper()
	if err := w.c.WriteJSON(f); err != nil {
		w.t.Fatalf("write: %v", err)
	}
}

func (w *wsClient) subscribe(id, query string) {
	w.t.Helper()
	typ := "subscribe"
	if w.c.Subprotocol() == "graphql-ws" {
		typ = "start"
	}
	payload, _ := json.Marshal(map[string]any{"query": query})
	w.send(wsFrame{Type: typ, ID: id, Payload: payload})
}

func (w *wsClient) next() wsFrame {
	w.t.Helper()
	for {
		_ = w.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var f wsFrame
		if err := w.c.ReadJSON(&f); err != nil {
			w.t.Fatalf("read: %v", err)
		}
		if f.Type == "ka" || f.Type == "ping" || f.Type == "pong" {
			continue
		}
		return f
	}
}

// nextData returns the data of the next next/data frame.
func (w *wsClient) nextData() json.RawMessage {
	w.t.Helper()
	f := w.next()
	if f.Type != "next" && f.Type != "data" {
		w.t.Fatalf("got %s frame %s, want next", f.Type, f.Payload)
	}
	var r gqlResponse
	if err := json.Unmarshal(f.Payload, &r); err != nil {
		w.t.Fatal(err)
	}
	if len(r.Errors) > 0 {
		w.t.Fatalf("errors in stream: %s", f.Payload)
	}
	return r.Data
}

// TestNTC5NTC7StaleNoticesSubscription: a subscriber first gets the notice pending now,
// then each notice as it opens (here the follow-up opened by an ack, NTC-3).
func TestNTC5NTC7StaleNoticesSubscription(t *testing.T) {
	e := newEnv(t)
	e.record(t, map[string]any{"sessionKey": child, "kind": "child_spawned", "actorType": "agent", "actorId": parent, "watchers": []string{parent}})
	e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "channel": "telegram"})

	w := e.dialWS(t, "graphql-transport-ws")
	w.subscribe("n", `subscription { staleNotices(watcher: "agent:main:main") { watcher target targetAgentId changesSince notifiedVersion materialVersion text wake } }`)
	type notice struct {
		StaleNotices map[string]any `json:"staleNotices"`
	}
	decode := func(raw json.RawMessage) map[string]any {
		var n notice
		if err := json.Unmarshal(raw, &n); err != nil {
			t.Fatal(err)
		}
		return n.StaleNotices
	}
	want := map[string]any{
		"watcher": parent, "target": child, "targetAgentId": "main",
		"changesSince": 1.0, "notifiedVersion": 2.0, "materialVersion": 2.0,
		"text": `Session "agent:main:subagent:child" changed (other actor). Reconcile before acting: session_status sessionKey "agent:main:subagent:child" changesSince 1.`,
		"wake": true,
	}
	if diff := cmp.Diff(want, decode(w.nextData())); diff != "" {
		t.Fatalf("pending notice (-want +got):\n%s", diff)
	}

	// A change while the notice is pending moves M only; the ack then opens one follow-up.
	e.record(t, map[string]any{"sessionKey": child, "kind": "goal_changed", "actorType": "human"})
	e.mustPost(t, `mutation { ackNotices(watcher: "agent:main:main") { changesSince } }`, nil)
	want["changesSince"], want["notifiedVersion"], want["materialVersion"] = 2.0, 3.0, 3.0
	want["text"] = `Session "agent:main:subagent:child" changed (other actor). Reconcile before acting: session_status sessionKey "agent:main:subagent:child" changesSince 2.`
	if diff := cmp.Diff(want, decode(w.nextData())); diff != "" {
		t.Fatalf("follow-up notice (-want +got):\n%s", diff)
	}
	w.send(wsFrame{Type: "complete", ID: "n"})
}

func TestStateEventsSubscriptionLegacyProtocol(t *testing.T) {
	e := newEnv(t)
	w := e.dialWS(t, "graphql-ws")
	w.subscribe("e", `subscription { stateEvents(sessionKey: "agent:main:subagent:child") { sequence kind actorType summary payload } }`)
	// The subscription is registered asynchronously; record until the first event arrives.
	deadline := time.Now().Add(5 * time.Second)
	got := make(chan json.RawMessage, 1)
	go func() {
		var f wsFrame
		_ = w.c.SetReadDeadline(deadline)
		for {
			if err := w.c.ReadJSON(&f); err != nil {
				close(got)
				return
			}
			if f.Type == "data" {
				got <- f.Payload
				return
			}
		}
	}()
	var payload json.RawMessage
	for payload == nil && time.Now().Before(deadline) {
		e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "channel": "slack", "turns": 2})
		select {
		case p, ok := <-got:
			if !ok {
				t.Fatal("stream ended without data")
			}
			payload = p
		case <-time.After(50 * time.Millisecond):
		}
	}
	var r struct {
		Data struct {
			StateEvents map[string]any `json:"stateEvents"`
		} `json:"data"`
	}
	if err := json.Unmarshal(payload, &r); err != nil {
		t.Fatalf("%v: %s", err, payload)
	}
	want := map[string]any{"kind": "human_direct_message", "actorType": "human", "summary": "human message via slack", "payload": map[string]any{"channel": "slack", "turns": 2.0}}
	delete(r.Data.StateEvents, "sequence")
	if diff := cmp.Diff(want, r.Data.StateEvents); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
}

// TestSubscriptionEndErrorFrame: when the service ends a stream (here: the hub closes at
// shutdown), the client gets an error frame with the reason's code, not a silent complete.
func TestSubscriptionEndErrorFrame(t *testing.T) {
	e := newEnv(t)
	w := e.dialWS(t, "graphql-transport-ws")
	w.subscribe("n", `subscription { staleNotices { text } }`)
	// Wait until the subscription is registered with the hub.
	for deadline := time.Now().Add(5 * time.Second); ; {
		if n, _ := e.hub.Subscribers(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("subscription never registered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	e.hub.Close()
	f := w.next()
	if f.Type != "error" || f.ID != "n" {
		t.Fatalf("got %s frame %s, want error for n", f.Type, f.Payload)
	}
	var errs []gqlError
	if err := json.Unmarshal(f.Payload, &errs); err != nil {
		t.Fatal(err)
	}
	if len(errs) != 1 || errs[0].Extensions["code"] != awareness.EUNAVAILABLE {
		t.Errorf("error payload = %s, want one UNAVAILABLE error", f.Payload)
	}
}

func TestWebSocketForeignOriginRefused(t *testing.T) {
	e := newEnv(t)
	h := http.Header{"Origin": {"https://evil.example.net"}}
	_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(e.url, "http"), h)
	if !errors.Is(err, websocket.ErrBadHandshake) || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("dial from a foreign origin: err %v, resp %v; want 403", err, resp)
	}
}

func TestRequestBodyLimit(t *testing.T) {
	e := newEnv(t)
	body := []byte(`{"query":"{ __typename }","variables":{"pad":"` + strings.Repeat("x", graph.MaxRequestBytes) + `"}}`)
	resp, err := http.Post(e.url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status = %d, want 413", resp.StatusCode)
	}
}

func TestIntrospectionEnabledAndLimitsEnforced(t *testing.T) {
	e := newEnv(t)
	var r gqlResponse
	_, r, raw := e.post(t, introspection.Query, nil)
	if len(r.Errors) > 0 || !bytes.Contains(raw, []byte(`"StaleNotice"`)) {
		t.Fatalf("introspection failed: %.300s", raw)
	}

	var q strings.Builder
	q.WriteString("{")
	// Each alias costs 203: sessionStatus 1 + stateChanges 1 + events 1 + 200 × sequence.
	for i := 0; i*203 <= graph.CostBudget; i++ {
		fmt.Fprintf(&q, ` s%d: sessionStatus(sessionKey: "agent:main:main", changesSince: 0) { stateChanges { events { sequence } } }`, i)
	}
	q.WriteString("}")
	if _, r, raw = e.post(t, q.String(), nil); r.code() != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Errorf("over the complexity limit: code %q, want COMPLEXITY_LIMIT_EXCEEDED: %.300s", r.code(), raw)
	}

	q.Reset()
	q.WriteString("{ __typename")
	for range graph.ParserTokenLimit {
		q.WriteString(" __typename")
	}
	q.WriteString("}")
	if _, r, raw = e.post(t, q.String(), nil); r.code() != "GRAPHQL_PARSE_FAILED" {
		t.Errorf("over the token limit: code %q, want GRAPHQL_PARSE_FAILED: %.300s", r.code(), raw)
	}
}
