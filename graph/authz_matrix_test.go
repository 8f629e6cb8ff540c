package graph_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/graph/generated"
	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/upstream"
)

// Tokens of the matrix: the caller is agent dev (own agent) or admin; ops is the other
// agent.
const (
	mxAdmin  = "matrix-admin-0123456789abcdef0123456789"
	mxDev    = "matrix-dev-0123456789abcdef0123456789ab"
	mxOpsTok = "matrix-ops-0123456789abcdef0123456789ab"
)

// authEnv is the /query handler with authentication over a fresh SQLite file, seeded
// with sessions, cursors and pending notices of agents dev and ops.
type authEnv struct {
	url   string
	store *models.Store
	svc   *awareness.Service
}

func newAuthEnv(t *testing.T, grants string) *authEnv {
	t.Helper()
	k, err := auth.Parse([]byte(`{"tokens":[
	  {"name":"admin","role":"admin","token":"` + mxAdmin + `"},
	  {"name":"dev","role":"agent:dev","token":"` + mxDev + `"},
	  {"name":"ops","role":"agent:ops","token":"` + mxOpsTok + `"}]` + grants + `}`))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	store, err := models.OpenSQLite(context.Background(), filepath.Join(dir, "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "t1.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cat, err := upstream.NewDirCatalog("cat", dir)
	if err != nil {
		t.Fatal(err)
	}
	svc := awareness.NewService(awareness.Config{Store: store, Grants: k.Grants(), Catalogs: []awareness.Catalog{cat}})
	hs := httptest.NewServer(graph.NewHandler(graph.Config{Service: svc, Auth: k}))
	t.Cleanup(func() {
		hs.Close()
		svc.Hub().Close()
		store.Close()
	})
	e := &authEnv{url: hs.URL + "/query", store: store, svc: svc}
	e.seed(t)
	return e
}

// seed gives each agent a registered main session, a sub-agent its main session
// watches with a pending notice, a bare `global` session, and an adopted session.
func (e *authEnv) seed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	for _, a := range []string{"dev", "ops"} {
		for _, k := range []string{"agent:" + a + ":main", "agent:" + a + ":subagent:w"} {
			if _, err := e.svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: k}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: "global", AgentID: &a}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Watch(ctx, "agent:"+a+":main", "agent:"+a+":subagent:w", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := e.svc.Watch(ctx, "agent:"+a+":main", "global", &a); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"agent:" + a + ":subagent:w", "global"} {
			if _, err := e.svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: k, AgentID: &a, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.svc.AdoptSession(ctx, "agent:"+a+":adopted", nil, "cat", "t1"); err != nil {
			t.Fatal(err)
		}
	}
}

// The four callers of the matrix: the dev token on its own sessions, on
// another agent's, on a bare key of another agent, and the admin token.
type mxCase int

const (
	mxOwn mxCase = iota
	mxOther
	mxBare
	mxAsAdmin
)

func (c mxCase) String() string {
	return [...]string{"own agent", "other agent", "bare key of another agent", "admin"}[c]
}

// served reports whether the case's calls are to be served. Only these get a trigger:
// a refused call must write nothing, and the trigger writes.
func (c mxCase) served() bool { return c == mxOwn || c == mxAsAdmin }

func (c mxCase) token() string {
	if c == mxAsAdmin {
		return mxAdmin
	}
	return mxDev
}

// mxSubject names what a case acts on: a session (key and agentId argument), a
// watcher and a target.
type mxSubject struct {
	key, watcher, target string
	agent                any // the agentId argument: nil or a string
}

func (c mxCase) subject() mxSubject {
	switch c {
	case mxOwn:
		return mxSubject{key: "agent:dev:main", watcher: "agent:dev:main", target: "agent:dev:subagent:w"}
	case mxOther:
		return mxSubject{key: "agent:ops:main", watcher: "agent:ops:main", target: "agent:ops:subagent:w"}
	case mxBare:
		return mxSubject{key: "global", agent: "ops", watcher: "global", target: "global"}
	default:
		return mxSubject{key: "agent:ops:main", watcher: "agent:ops:main", target: "agent:ops:subagent:w"}
	}
}

// mxOp is one operation of the schema in the matrix: its document and the variables of
// each case. crossWatch makes the other-agent case watch another agent's target from
// the caller's own watcher (a leak once), rather than act as another
// agent's watcher.
type mxOp struct {
	field string // "Query.sessionStatus"
	// variant names a further row of the same field (its subtest's suffix).
	variant string
	doc     string
	vars    func(c mxCase, s mxSubject) map[string]any
	// trigger, for a subscription, makes something arrive for an allowed caller (it
	// runs for served cases only).
	trigger func(e *authEnv, c mxCase, s mxSubject)
	// code, when set, is the refusal's code read from the answer's data, for a field
	// that refuses each item of its input on its own (recordEvents); "" when served.
	code func(data json.RawMessage) string
}

func mxOps() []mxOp {
	keyVars := func(_ mxCase, s mxSubject) map[string]any { return map[string]any{"k": s.key, "a": s.agent} }
	watcherVars := func(_ mxCase, s mxSubject) map[string]any { return map[string]any{"w": s.watcher} }
	// The watch of a caller's own watcher on the case's target: the target is
	// another agent's in the other and bare cases.
	watchVars := func(c mxCase, s mxSubject) map[string]any {
		w := "agent:dev:main"
		if c == mxAsAdmin {
			w = "agent:ops:main"
		}
		return map[string]any{"w": w, "t": s.target, "ta": s.agent}
	}
	return []mxOp{
		{field: "Query.sessionStatus", vars: keyVars,
			doc: `query($k: String!, $a: String) { sessionStatus(sessionKey: $k, agentId: $a, changesSince: 0) { sessionKey agentId stateVersion stateChanges { events { sequence summary } } session { sessionKey agentId } } }`},
		{field: "Query.sessionsList", vars: func(c mxCase, s mxSubject) map[string]any {
			switch c {
			case mxOther:
				return map[string]any{"f": map[string]any{"agentId": "ops"}}
			case mxBare:
				return map[string]any{"f": map[string]any{"keyPrefix": "global"}}
			}
			return map[string]any{"f": map[string]any{}}
		}, doc: `query($f: SessionFilter) { sessionsList(filter: $f, first: 100) { sessions { sessionKey agentId } } }`},
		{field: "Query.pendingNotices", vars: watcherVars,
			doc: `query($w: String!) { pendingNotices(watcher: $w) { watcher target targetAgentId text } }`},
		{field: "Query.watches", vars: func(c mxCase, s mxSubject) map[string]any {
			if c == mxOwn || c == mxAsAdmin {
				return map[string]any{"w": s.watcher}
			}
			return map[string]any{"t": s.target} // other: ops's target; bare: `global`, main's by KEY-3
		}, doc: `query($w: String, $t: String) { watches(watcher: $w, target: $t) { watcher target targetAgentId lastAcked } }`},
		{field: "Query.upstreamLinks", vars: func(c mxCase, _ mxSubject) map[string]any {
			if c == mxOther || c == mxBare {
				return map[string]any{"a": "ops"}
			}
			return map[string]any{}
		}, doc: `query($a: String) { upstreamLinks(agentId: $a) { sessionKey agentId } }`},
		{field: "Query.activity", vars: keyVars,
			doc: `query($k: String, $a: String) { activity(sessionKey: $k, agentId: $a) { minute kind count } }`},
		{field: "Query.noticeActivity", vars: keyVars,
			doc: `query($k: String, $a: String) { noticeActivity(sessionKey: $k, agentId: $a) { minute opened acknowledged } }`},
		{field: "Query.viewer", vars: func(mxCase, mxSubject) map[string]any { return nil },
			doc: `{ viewer { authenticated admin role agentId name } }`},
		{field: "Query.eventKinds", vars: func(mxCase, mxSubject) map[string]any { return nil },
			doc: `{ eventKinds { kind role takesOutcome } }`},
		{field: "Query.ackHistory", vars: func(c mxCase, s mxSubject) map[string]any {
			if c == mxBare {
				return map[string]any{"t": "global", "ta": "ops"}
			}
			return map[string]any{"w": s.watcher}
		}, doc: `query($w: String, $t: String, $ta: String) { ackHistory(watcher: $w, target: $t, targetAgentId: $ta) { records { watcher target targetAgentId } } }`},
		{field: "Query.sessionTree", vars: func(c mxCase, _ mxSubject) map[string]any {
			if c == mxOther || c == mxBare {
				return map[string]any{"a": "ops"}
			}
			return map[string]any{}
		}, doc: `query($a: String) { sessionTree(agentId: $a) { nodes { sessionKey agentId parentSessionKey } } }`},
		{field: "Query.compactionPolicy", vars: keyVars,
			doc: `query($k: String!, $a: String) { compactionPolicy(sessionKey: $k, agentId: $a, contextWindow: 100000) { compactionDue } }`},

		{field: "Mutation.recordEvent", vars: func(c mxCase, s mxSubject) map[string]any {
			in := map[string]any{"sessionKey": s.key, "agentId": s.agent, "kind": "goal_changed", "actorType": "agent"}
			if c == mxOther {
				// Dev's own session, credited to ops's: actorId spoofing.
				in = map[string]any{"sessionKey": "agent:dev:main", "kind": "goal_changed", "actorType": "agent", "actorId": "agent:ops:main"}
			}
			return map[string]any{"in": in}
		}, doc: `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded event { sessionKey agentId actorId } } }`},
		// An agent actor must be one of the token's sessions: not a lookalike of
		// another agent's key (Cyrillic о), nor a bare key; admin may credit anyone.
		{field: "Mutation.recordEvent", variant: "agent actor", vars: func(c mxCase, _ mxSubject) map[string]any {
			actor := map[mxCase]string{mxOwn: "agent:dev:subagent:w", mxOther: "agent:\u043eps:main", mxBare: "global", mxAsAdmin: "agent:\u043eps:main"}[c]
			key := "agent:dev:main"
			if c == mxAsAdmin {
				key = "agent:ops:main"
			}
			return map[string]any{"in": map[string]any{"sessionKey": key, "kind": "human_direct_message", "actorType": "agent", "actorId": actor}}
		}, doc: `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded event { sessionKey agentId actorId } } }`},
		{field: "Mutation.recordEvents", vars: func(c mxCase, s mxSubject) map[string]any {
			in := map[string]any{"sessionKey": s.key, "agentId": s.agent, "kind": "goal_changed", "actorType": "agent"}
			if c == mxOther {
				in = map[string]any{"sessionKey": "agent:dev:main", "kind": "goal_changed", "actorType": "agent", "actorId": "agent:ops:main"}
			}
			return map[string]any{"ins": []any{in}}
		}, doc: `mutation($ins: [RecordEventInput!]!) { recordEvents(inputs: $ins) { index result { recorded event { sessionKey agentId actorId } } error { code message } } }`,
			code: batchCode},
		// The agent actor rule holds for each input of a batch.
		{field: "Mutation.recordEvents", variant: "agent actor", vars: func(c mxCase, _ mxSubject) map[string]any {
			actor := map[mxCase]string{mxOwn: "agent:dev:subagent:w", mxOther: "agent:\u043eps:main", mxBare: "cron:nightly", mxAsAdmin: "agent:\u043eps:main"}[c]
			key := "agent:dev:main"
			if c == mxAsAdmin {
				key = "agent:ops:main"
			}
			return map[string]any{"ins": []any{map[string]any{"sessionKey": key, "kind": "human_direct_message", "actorType": "agent", "actorId": actor}}}
		}, doc: `mutation($ins: [RecordEventInput!]!) { recordEvents(inputs: $ins) { index result { recorded event { sessionKey agentId actorId } } error { code message } } }`,
			code: batchCode},
		{field: "Mutation.watch", vars: watchVars,
			doc: `mutation($w: String!, $t: String!, $ta: String) { watch(input: {watcher: $w, target: $t, targetAgentId: $ta}) { watched reason cursor { watcher target targetAgentId lastAcked } } }`},
		{field: "Mutation.unwatch", vars: func(c mxCase, s mxSubject) map[string]any {
			return map[string]any{"w": s.watcher, "t": "agent:" + map[bool]string{true: "dev", false: "ops"}[c == mxOwn] + ":subagent:w"}
		}, doc: `mutation($w: String!, $t: String!) { unwatch(watcher: $w, target: $t) }`},
		{field: "Mutation.ackNotices", vars: watcherVars,
			doc: `mutation($w: String!) { ackNotices(watcher: $w) { watcher target targetAgentId } }`},
		{field: "Mutation.acknowledgeNotices", vars: func(_ mxCase, s mxSubject) map[string]any {
			return map[string]any{"w": s.watcher, "n": []any{map[string]any{"target": s.target, "targetAgentId": s.agent, "notifiedVersion": 1}}}
		}, doc: `mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) { watcher target targetAgentId outcome followUp { target } pending { target } } }`},
		{field: "Mutation.drainNotices", vars: watcherVars,
			doc: `mutation($w: String!) { drainNotices(watcher: $w) { watcher target targetAgentId redelivered } }`},
		{field: "Mutation.releaseNotices", vars: func(_ mxCase, s mxSubject) map[string]any {
			return map[string]any{"w": s.watcher, "n": []any{map[string]any{"target": s.target, "targetAgentId": s.agent, "notifiedVersion": 1}}}
		}, doc: `mutation($w: String!, $n: [NoticeRef!]!) { releaseNotices(watcher: $w, notices: $n) { watcher target } }`},
		{field: "Mutation.snoozeNotice", vars: func(_ mxCase, s mxSubject) map[string]any {
			return map[string]any{"w": s.watcher, "t": s.target, "ta": s.agent, "u": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}
		}, doc: `mutation($w: String!, $t: String!, $ta: String, $u: Time!) { snoozeNotice(watcher: $w, target: $t, targetAgentId: $ta, notifiedVersion: 1, until: $u) { watcher target } }`},
		{field: "Mutation.dismissNotice", vars: func(_ mxCase, s mxSubject) map[string]any {
			return map[string]any{"w": s.watcher, "t": s.target, "ta": s.agent}
		}, doc: `mutation($w: String!, $t: String!, $ta: String) { dismissNotice(watcher: $w, target: $t, targetAgentId: $ta, notifiedVersion: 1) { watcher target outcome dismissed } }`},
		{field: "Mutation.resetSession", vars: keyVars,
			doc: `mutation($k: String!, $a: String) { resetSession(sessionKey: $k, agentId: $a) }`},
		{field: "Mutation.deleteSession", vars: keyVars,
			doc: `mutation($k: String!, $a: String) { deleteSession(sessionKey: $k, agentId: $a) }`},
		{field: "Mutation.upsertSession", vars: func(_ mxCase, s mxSubject) map[string]any {
			return map[string]any{"in": map[string]any{"sessionKey": s.key, "agentId": s.agent, "displayName": "renamed"}}
		}, doc: `mutation($in: SessionInput!) { upsertSession(input: $in) { sessionKey agentId displayName } }`},
		{field: "Mutation.importSessions", vars: func(c mxCase, _ mxSubject) map[string]any {
			a := map[bool]string{true: "dev", false: "ops"}[c == mxOwn]
			return map[string]any{"a": a, "j": `{"agent:` + a + `:imported":{"sessionId":"s1","updatedAt":1767225600000}}`}
		}, doc: `mutation($a: String!, $j: String!) { importSessions(agentId: $a, sessionsJson: $j) }`},
		{field: "Mutation.adoptSession", vars: func(_ mxCase, s mxSubject) map[string]any {
			return map[string]any{"in": map[string]any{"sessionKey": s.key, "agentId": s.agent, "catalogId": "cat", "threadId": "t1"}}
		}, doc: `mutation($in: AdoptInput!) { adoptSession(input: $in) { sessionKey agentId } }`},
		{field: "Mutation.recordOwnPrompt", vars: func(c mxCase, s mxSubject) map[string]any {
			k := "agent:dev:adopted"
			if c != mxOwn {
				k = "agent:ops:adopted"
			}
			if c == mxBare {
				k = "global"
			}
			return map[string]any{"k": k, "a": s.agent}
		}, doc: `mutation($k: String!, $a: String) { recordOwnPrompt(sessionKey: $k, agentId: $a, text: "hello") }`},
		{field: "Mutation.recordMemoryFlush", vars: keyVars,
			doc: `mutation($k: String!, $a: String) { recordMemoryFlush(sessionKey: $k, agentId: $a) { sessionKey agentId } }`},

		{field: "Subscription.staleNotices", vars: watcherVars,
			doc: `subscription($w: String) { staleNotices(watcher: $w) { watcher target targetAgentId text } }`},
		{field: "Subscription.stateEvents", vars: keyVars,
			doc: `subscription($k: String, $a: String) { stateEvents(sessionKey: $k, agentId: $a) { sequence sessionKey agentId } }`,
			trigger: func(e *authEnv, _ mxCase, s mxSubject) {
				var a *string
				if s.agent != nil {
					v := s.agent.(string)
					a = &v
				}
				_, _ = e.svc.RecordEvent(context.Background(), awareness.RecordInput{SessionKey: s.key, AgentID: a, Kind: awareness.GoalChanged, ActorType: awareness.ActorAgent})
			}},
		{field: "Subscription.staleNoticeFeed", vars: watcherVars,
			doc: `subscription($w: String) { staleNoticeFeed(watcher: $w) { __typename ... on StaleNotice { watcher target targetAgentId text } ... on FeedSynced { replayed } } }`},
		{field: "Subscription.stateEventFeed", vars: func(c mxCase, s mxSubject) map[string]any {
			v := keyVars(c, s)
			v["after"] = 0
			return v
		}, doc: `subscription($k: String, $a: String, $after: Int) { stateEventFeed(sessionKey: $k, agentId: $a, afterSequence: $after) {
  __typename ... on StateEvent { sequence sessionKey agentId } ... on FeedSynced { lastSequence replayed } } }`},
	}
}

// batchCode is the code of the one input of a recordEvents answer ("" when appended).
func batchCode(data json.RawMessage) string {
	var d struct {
		RecordEvents []struct {
			Error *struct{ Code string } `json:"error"`
		} `json:"recordEvents"`
	}
	_ = json.Unmarshal(data, &d)
	if len(d.RecordEvents) == 1 && d.RecordEvents[0].Error != nil {
		return d.RecordEvents[0].Error.Code
	}
	return ""
}

// mxTransport runs one operation as a token. Adding a transport (SSE) is one entry of
// mxTransports.
type mxTransport struct {
	name string
	// subscriptions reports whether the transport carries subscriptions.
	subscriptions bool
	do            func(t *testing.T, e *authEnv, op mxOp, c mxCase, vars map[string]any) gqlResponse
}

var mxTransports = []mxTransport{
	{name: "http", do: mxHTTP},
	{name: "websocket", subscriptions: true, do: mxWebSocket},
	{name: "sse", subscriptions: true, do: mxSSE},
}

// mxSSE runs a subscription over Server-Sent Events (graphql-sse, distinct connections)
// and returns its first result: the first next event's payload, or the refusal the
// request is answered with. It calls the trigger until something arrives. graphql-sse
// carries queries and mutations too (one next event), so every operation runs here.
func mxSSE(t *testing.T, e *authEnv, op mxOp, c mxCase, vars map[string]any) gqlResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": op.doc, "variables": vars})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+c.token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r gqlResponse
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatalf("SSE refusal %d: %v", resp.StatusCode, err)
		}
		return r
	}
	data := make(chan string, 1)
	go func() {
		defer close(data)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "" {
				data <- d
				return
			}
		}
	}()
	d := awaitFirst(t, op.field+" over SSE", data, func() { op.trigger(e, c, c.subject()) }, op.trigger != nil && c.served())
	if err := json.Unmarshal([]byte(d), &r); err != nil {
		t.Fatalf("%s: SSE data %q: %v", op.field, d, err)
	}
	return r
}

// awaitFirst returns the first value results yields, calling trigger (when triggers)
// every 50 ms until it comes: a subscription's allowed caller needs something to
// happen. It fails the test when results closes first.
func awaitFirst[T any](t *testing.T, what string, results <-chan T, trigger func(), triggers bool) T {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case v, ok := <-results:
			if !ok {
				t.Fatalf("%s: ended without a result", what)
			}
			return v
		case <-tick.C:
			if triggers {
				trigger()
			}
		}
	}
}

func mxHTTP(t *testing.T, e *authEnv, op mxOp, c mxCase, vars map[string]any) gqlResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": op.doc, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, e.url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r gqlResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
	}
	return r
}

// mxWebSocket runs the operation over graphql-transport-ws and returns its first
// result: the next frame's payload or the error frame's errors. For a subscription it
// calls the trigger until something arrives.
func mxWebSocket(t *testing.T, e *authEnv, op mxOp, c mxCase, vars map[string]any) gqlResponse {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, _, err := d.Dial("ws"+strings.TrimPrefix(e.url, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.WriteJSON(map[string]any{"type": "connection_init", "payload": map[string]any{"Authorization": "Bearer " + c.token()}}); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var ack wsFrame
	if err := conn.ReadJSON(&ack); err != nil || ack.Type != "connection_ack" {
		t.Fatalf("got %+v, %v; want connection_ack", ack, err)
	}
	if err := conn.WriteJSON(map[string]any{"type": "subscribe", "id": "1", "payload": map[string]any{"query": op.doc, "variables": vars}}); err != nil {
		t.Fatal(err)
	}
	frames := make(chan wsFrame, 1)
	go func() {
		defer close(frames)
		for {
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			var f wsFrame
			if err := conn.ReadJSON(&f); err != nil {
				return
			}
			if f.Type == "next" || f.Type == "error" {
				frames <- f
				return
			}
		}
	}()
	f := awaitFirst(t, op.field+" over WebSocket", frames, func() { op.trigger(e, c, c.subject()) }, op.trigger != nil && c.served())
	var r gqlResponse
	if f.Type == "error" {
		if err := json.Unmarshal(f.Payload, &r.Errors); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if err := json.Unmarshal(f.Payload, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// foreignAgents returns the agents other than own that the response's data names: an
// agentId or targetAgentId field, or the agent of an agent-qualified key.
func foreignAgents(data json.RawMessage, own string) []string {
	var v any
	_ = json.Unmarshal(data, &v)
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, f := range x {
				if s, ok := f.(string); ok {
					if (k == "agentId" || k == "targetAgentId") && s != own {
						out = append(out, k+"="+s)
					}
					if p, ok := awareness.ParseSessionKey(s); ok && p.AgentID != own {
						out = append(out, k+"="+s)
					}
				}
				walk(f)
			}
		case []any:
			for _, f := range x {
				walk(f)
			}
		}
	}
	walk(v)
	return out
}

// TestAuthorizationMatrix_CLT1 runs every query, mutation and subscription of the
// schema as {own agent, other agent, bare key of another agent, admin} over every
// transport (CLT-1, ERR-3): the dev token is refused (FORBIDDEN, or INVALID_ARGUMENT
// where a bare key cannot be what is asked) and writes nothing, or gets results that
// name no other agent; on its own sessions it is served, and so is admin.
func TestAuthorizationMatrix_CLT1(t *testing.T) {
	t.Parallel()
	size := 0
	for _, tr := range mxTransports {
		for _, op := range mxOps() {
			if strings.HasPrefix(op.field, "Subscription.") && !tr.subscriptions {
				continue
			}
			name := tr.name + "/" + op.field
			if op.variant != "" {
				name += "/" + op.variant
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				e := newAuthEnv(t, "")
				// Refusals first, while every seeded row is still there.
				for _, c := range []mxCase{mxOther, mxBare, mxOwn, mxAsAdmin} {
					before, err := e.store.Stats(context.Background())
					if err != nil {
						t.Fatal(err)
					}
					r := tr.do(t, e, op, c, op.vars(c, c.subject()))
					code := r.code()
					if op.code != nil && code == "" {
						code = op.code(r.Data)
					}
					switch c {
					case mxOwn, mxAsAdmin:
						if len(r.Errors) > 0 || code != "" {
							t.Errorf("%s: %+v %s, want served", c, r.Errors, code)
						}
						if leaks := foreignAgents(r.Data, "dev"); c == mxOwn && len(leaks) > 0 {
							t.Errorf("%s: the answer names other agents: %v\n%s", c, leaks, r.Data)
						}
					default:
						refused := code == awareness.EFORBIDDEN || code == awareness.EINVALID
						if !refused && len(r.Errors) > 0 {
							t.Errorf("%s: code %q (%+v), want FORBIDDEN, INVALID_ARGUMENT or filtered results", c, code, r.Errors)
						}
						if leaks := foreignAgents(r.Data, "dev"); len(leaks) > 0 {
							t.Errorf("%s: the answer names other agents: %v\n%s", c, leaks, r.Data)
						}
						if !refused && strings.HasPrefix(op.field, "Mutation.") {
							t.Errorf("%s: a mutation on another agent's state was served: %s", c, r.Data)
						}
						after, err := e.store.Stats(context.Background())
						if err != nil {
							t.Fatal(err)
						}
						if refused && !sameCounts(before, after) {
							t.Errorf("%s: a refused call wrote: %+v → %+v", c, before, after)
						}
					}
				}
			})
			size += 4
		}
	}
	t.Logf("authorization matrix: %d cases (%d operations × 4 callers over %d transports, subscriptions where carried)", size, len(mxOps()), len(mxTransports))
}

// TestAuthorizationMatrixCoversSchema fails when an operation of the executable schema
// is missing from the matrix (or the matrix names one the schema lost).
func TestAuthorizationMatrixCoversSchema(t *testing.T) {
	t.Parallel()
	schema := generated.NewExecutableSchema(generated.Config{}).Schema()
	var inSchema []string
	for _, root := range []*ast.Definition{schema.Query, schema.Mutation, schema.Subscription} {
		if root == nil {
			continue
		}
		for _, f := range root.Fields {
			if !strings.HasPrefix(f.Name, "__") {
				inSchema = append(inSchema, root.Name+"."+f.Name)
			}
		}
	}
	var inMatrix []string
	for _, op := range mxOps() {
		inMatrix = append(inMatrix, op.field)
	}
	for _, f := range inSchema {
		if !slices.Contains(inMatrix, f) {
			t.Errorf("%s is not in the authorization matrix (mxOps): add it with its four callers", f)
		}
	}
	for _, f := range inMatrix {
		if !slices.Contains(inSchema, f) {
			t.Errorf("the matrix names %s, which the schema does not have", f)
		}
	}
}

// TestWatchGrant_CLT1: cross-agent watching is off by default and an explicit grant
// of the auth file turns it on, in the granted direction only, over every transport.
func TestWatchGrant_CLT1(t *testing.T) {
	t.Parallel()
	const doc = `mutation($w: String!, $t: String!) { watch(input: {watcher: $w, target: $t}) { watched cursor { lastAcked } } }`
	op := mxOp{field: "Mutation.watch", doc: doc}
	for _, tr := range mxTransports {
		for _, tc := range []struct {
			grants  string
			allowed bool
		}{
			{``, false},
			{`,"grants":{"watch":{"dev":["ops"]}}`, true},
			{`,"grants":{"watch":{"ops":["dev"]}}`, false},
		} {
			e := newAuthEnv(t, tc.grants)
			r := tr.do(t, e, op, mxOwn, map[string]any{"w": "agent:dev:main", "t": "agent:ops:main"})
			if got := len(r.Errors) == 0; got != tc.allowed {
				t.Errorf("%s, grants %q: dev watches ops: %+v %s, want allowed=%v", tr.name, tc.grants, r.Errors, r.Data, tc.allowed)
			}
			if !tc.allowed && r.code() != awareness.EFORBIDDEN {
				t.Errorf("%s, grants %q: code %q, want FORBIDDEN", tr.name, tc.grants, r.code())
			}
		}
	}
}
