package graph_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/awareness"
)

// authPost runs one GraphQL request over HTTP with a token and extra headers.
func authPost(t *testing.T, url, token string, header http.Header, query string, vars map[string]any) gqlResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := http.DefaultClient.Do(req)
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

type ackRecordJSON struct {
	Watcher         string  `json:"watcher"`
	Target          string  `json:"target"`
	TargetAgentID   string  `json:"targetAgentId"`
	ChangesSince    int     `json:"changesSince"`
	NotifiedVersion int     `json:"notifiedVersion"`
	OpenedAt        string  `json:"openedAt"`
	AcknowledgedAt  string  `json:"acknowledgedAt"`
	Form            string  `json:"form"`
	FollowUpVersion *int    `json:"followUpVersion"`
	Principal       *string `json:"principal"`
	Role            *string `json:"role"`
	Transport       string  `json:"transport"`
	Client          *string `json:"client"`
}

const ackHistoryDoc = `query($w: String, $t: String, $a: String, $first: Int, $after: String) {
  ackHistory(watcher: $w, target: $t, agentId: $a, first: $first, after: $after) {
    records { watcher target targetAgentId changesSince notifiedVersion openedAt acknowledgedAt form followUpVersion principal role transport client }
    pageInfo { hasNextPage endCursor } } }`

func readHistory(t *testing.T, e *authEnv, token string, vars map[string]any) ([]ackRecordJSON, string) {
	t.Helper()
	r := authPost(t, e.url, token, nil, ackHistoryDoc, vars)
	if len(r.Errors) > 0 {
		t.Fatalf("ackHistory %v: %+v", vars, r.Errors)
	}
	var d struct {
		AckHistory struct {
			Records  []ackRecordJSON `json:"records"`
			PageInfo struct {
				HasNextPage bool    `json:"hasNextPage"`
				EndCursor   *string `json:"endCursor"`
			} `json:"pageInfo"`
		} `json:"ackHistory"`
	}
	if err := json.Unmarshal(r.Data, &d); err != nil {
		t.Fatal(err)
	}
	next := ""
	if d.AckHistory.PageInfo.HasNextPage && d.AckHistory.PageInfo.EndCursor != nil {
		next = *d.AckHistory.PageInfo.EndCursor
	}
	return d.AckHistory.Records, next
}

// TestAckHistoryRecordsWhoAndClient_NTC3_CLT1: every acknowledgement is in the history
// with the acknowledging token's name and role, its transport and client name (the
// X-Awareness-Client header, else the User-Agent, cleaned to one line of at most 128
// bytes): over HTTP and WebSocket. An agent token reads its own agent's history only
// (CLT-1): another agent's records are never in its answer, and naming another agent's
// watcher is FORBIDDEN. Pages follow the keyset.
func TestAckHistoryRecordsWhoAndClient_NTC3_CLT1(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, "") // dev and ops: main watches subagent:w and global, each pending
	const ackDoc = `mutation($w: String!, $n: [NoticeRef!]) { ackNotices(watcher: $w, notices: $n) { target } }`

	// dev over HTTP, named by the header (which wins over the User-Agent).
	r := authPost(t, e.url, mxDev, http.Header{"X-Awareness-Client": {"gateway-x/1.2 (\ttab\u200bzw\xff)"}, "User-Agent": {"Go-http-client"}}, ackDoc,
		map[string]any{"w": "agent:dev:main", "n": []any{map[string]any{"target": "agent:dev:subagent:w", "notifiedVersion": 1}}})
	if len(r.Errors) > 0 {
		t.Fatal(r.Errors)
	}
	// ops over WebSocket, named by a long User-Agent of the upgrade.
	longUA := "ws-client/3 " + strings.Repeat("é", 100)
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	conn, _, err := d.Dial("ws"+strings.TrimPrefix(e.url, "http"), http.Header{"User-Agent": {longUA}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	w := &wsClient{t: t, c: conn}
	w.send(wsFrame{Type: "connection_init", Payload: json.RawMessage(`{"Authorization":"Bearer ` + mxOpsTok + `"}`)})
	if f := w.next(); f.Type != "connection_ack" {
		t.Fatalf("got %+v", f)
	}
	payload, _ := json.Marshal(map[string]any{"query": `mutation { ackNotices(watcher: "agent:ops:main") { target } }`})
	w.send(wsFrame{Type: "subscribe", ID: "1", Payload: payload})
	if f := w.next(); f.Type != "next" || strings.Contains(string(f.Payload), "errors") {
		t.Fatalf("ack over WebSocket: %+v %s", f, f.Payload)
	}

	str := func(p *string) string {
		if p == nil {
			return "<nil>"
		}
		return *p
	}
	all, next := readHistory(t, e, mxAdmin, map[string]any{})
	if next != "" || len(all) != 3 {
		t.Fatalf("admin reads %d records (next %q), want 3: %+v", len(all), next, all)
	}
	// Newest first: ops's two (one acknowledgement, (agent, key) order reversed), then dev's.
	ops, dev := all[0], all[2]
	if ops.Watcher != "agent:ops:main" || all[1].Watcher != "agent:ops:main" || dev.Watcher != "agent:dev:main" {
		t.Fatalf("order: %+v", all)
	}
	if dev.Target != "agent:dev:subagent:w" || dev.ChangesSince != 0 || dev.NotifiedVersion != 1 || dev.Form != "exact" ||
		str(dev.Principal) != "dev" || str(dev.Role) != "agent:dev" || dev.Transport != "http" ||
		str(dev.Client) != "gateway-x/1.2 ( tab zw)" || dev.FollowUpVersion != nil {
		t.Errorf("dev's record: %+v (principal %s, role %s, client %q)", dev, str(dev.Principal), str(dev.Role), str(dev.Client))
	}
	opened, err1 := time.Parse(time.RFC3339Nano, dev.OpenedAt)
	acked, err2 := time.Parse(time.RFC3339Nano, dev.AcknowledgedAt)
	if err1 != nil || err2 != nil || acked.Before(opened) || time.Since(acked) > time.Minute {
		t.Errorf("dev's record times: opened %s, acknowledged %s", dev.OpenedAt, dev.AcknowledgedAt)
	}
	if ops.Form != "all" || str(ops.Principal) != "ops" || ops.Transport != "websocket" {
		t.Errorf("ops's record: %+v", ops)
	}
	if c := str(ops.Client); len(c) > awareness.MaxClientNameBytes || !strings.HasPrefix(c, "ws-client/3 éé") || !strings.HasSuffix(c, "é") {
		t.Errorf("ops's client name is %d bytes: %q, want the User-Agent cut at a rune boundary within %d", len(c), c, awareness.MaxClientNameBytes)
	}

	// CLT-1: each agent reads its own; another agent's watcher is refused.
	for _, tc := range []struct {
		token, own string
		want       int
	}{{mxDev, "dev", 1}, {mxOpsTok, "ops", 2}} {
		got, _ := readHistory(t, e, tc.token, map[string]any{})
		if len(got) != tc.want {
			t.Errorf("agent %s reads %d records, want %d", tc.own, len(got), tc.want)
		}
		for _, rec := range got {
			if !strings.HasPrefix(rec.Watcher, "agent:"+tc.own+":") {
				t.Errorf("agent %s reads another agent's record: %+v", tc.own, rec)
			}
		}
	}
	if r := authPost(t, e.url, mxDev, nil, ackHistoryDoc, map[string]any{"w": "agent:ops:main"}); r.code() != awareness.EFORBIDDEN {
		t.Errorf("dev reads ops's watcher: %+v %s, want FORBIDDEN", r.Errors, r.Data)
	}
	if r := authPost(t, e.url, mxDev, nil, ackHistoryDoc, map[string]any{"a": "ops"}); r.code() != awareness.EFORBIDDEN {
		t.Errorf("dev reads agent ops's history: %+v %s, want FORBIDDEN", r.Errors, r.Data)
	}
	if r := authPost(t, e.url, mxAdmin, nil, ackHistoryDoc, map[string]any{"w": "agent:ops:main", "a": "ops"}); r.code() != awareness.EINVALID {
		t.Errorf("watcher with agentId: %+v, want INVALID_ARGUMENT", r.Errors)
	}
	if r := authPost(t, e.url, mxAdmin, nil, ackHistoryDoc, map[string]any{"after": "bm90LWEtY3Vyc29y"}); r.code() != awareness.EINVALID {
		t.Errorf("a foreign cursor: %+v, want INVALID_ARGUMENT", r.Errors)
	}

	// Keyset pages.
	page1, cur := readHistory(t, e, mxAdmin, map[string]any{"first": 2})
	page2, end := readHistory(t, e, mxAdmin, map[string]any{"first": 2, "after": cur})
	if len(page1) != 2 || cur == "" || len(page2) != 1 || end != "" || page2[0].Watcher != dev.Watcher || page2[0].AcknowledgedAt != dev.AcknowledgedAt {
		t.Errorf("pages: %+v (next %q), %+v (next %q)", page1, cur, page2, end)
	}

	// acknowledgeNotices (an answer per notice) is recorded too; a name that is not
	// acknowledged now (alreadyAcknowledged) is not.
	r = authPost(t, e.url, mxDev, http.Header{"User-Agent": {"gw-dev/9"}}, `mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) { outcome } }`,
		map[string]any{"w": "agent:dev:main", "n": []any{
			map[string]any{"target": "global", "targetAgentId": "dev", "notifiedVersion": 1},
			map[string]any{"target": "agent:dev:subagent:w", "notifiedVersion": 1}}})
	if len(r.Errors) > 0 || !strings.Contains(string(r.Data), `"acknowledged"`) || !strings.Contains(string(r.Data), `"alreadyAcknowledged"`) {
		t.Fatalf("acknowledgeNotices: %s %+v", r.Data, r.Errors)
	}
	got, _ := readHistory(t, e, mxAdmin, map[string]any{"w": "agent:dev:main"})
	if len(got) != 2 || got[0].Target != "global" || got[0].Form != "exact" || str(got[0].Client) != "gw-dev/9" || str(got[0].Principal) != "dev" {
		t.Errorf("after acknowledgeNotices: %+v", got)
	}
}

// TestViewer_CLT1: viewer names the caller as the service authorizes it: the token's
// name, role and agent; without an auth file every caller is an unauthenticated admin.
func TestViewer_CLT1(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, "")
	const doc = `{ viewer { authenticated admin role agentId name } }`
	for _, tc := range []struct{ token, want string }{
		{mxDev, `{"viewer":{"authenticated":true,"admin":false,"role":"agent:dev","agentId":"dev","name":"dev"}}`},
		{mxAdmin, `{"viewer":{"authenticated":true,"admin":true,"role":"admin","agentId":null,"name":"admin"}}`},
	} {
		if r := authPost(t, e.url, tc.token, nil, doc, nil); string(r.Data) != tc.want || len(r.Errors) > 0 {
			t.Errorf("viewer = %s %+v, want %s", r.Data, r.Errors, tc.want)
		}
	}
	open := newEnv(t)
	if got := string(open.mustPost(t, doc, nil)); got != `{"viewer":{"authenticated":false,"admin":true,"role":"admin","agentId":null,"name":null}}` {
		t.Errorf("viewer without an auth file = %s", got)
	}
}
