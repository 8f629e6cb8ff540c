package graph_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/jsontext"
)

// Strict Int (32-bit), String and Time: each loose value of the issue is refused with
// INVALID_ARGUMENT (or gqlgen's validation code for a literal), and nothing is written.
func TestStrictScalarsRefused_ERR2(t *testing.T) {
	e := newEnv(t)
	const key = "agent:main:strict"
	status := `query($k: String!, $l: Int) { sessionStatus(sessionKey: $k, limit: $l) { stateVersion } }`
	tests := []struct {
		name  string
		query string
		vars  map[string]any
	}{
		{"Int as a string", status, map[string]any{"k": key, "l": "1"}},
		{"Int over 32 bits", status, map[string]any{"k": key, "l": 2147483648}},
		{"Int literal over 32 bits", `{ sessionStatus(sessionKey: "` + key + `", limit: 2147483648) { stateVersion } }`, nil},
		{"String as a number", status, map[string]any{"k": 12345}},
		{"turns over 2^53", `mutation { recordEvent(input: {sessionKey: "` + key + `", kind: run_completed, actorType: agent, turns: 9007199254740993}) { stateVersion } }`, nil},
		{"empty occurredAt", `mutation { recordEvent(input: {sessionKey: "` + key + `", kind: run_completed, actorType: agent, occurredAt: ""}) { stateVersion } }`, nil},
		{"empty occurredAt variable", `mutation($t: Time) { recordEvent(input: {sessionKey: "` + key + `", kind: run_completed, actorType: agent, occurredAt: $t}) { stateVersion } }`, map[string]any{"t": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, r, raw := e.post(t, tt.query, tt.vars)
			if c := r.code(); c != awareness.EINVALID && c != "GRAPHQL_VALIDATION_FAILED" {
				t.Errorf("code = %q, want INVALID_ARGUMENT: %s", c, raw)
			}
		})
	}
	var got struct {
		SessionStatus struct{ StateVersion int } `json:"sessionStatus"`
	}
	if err := json.Unmarshal(e.mustPost(t, status, map[string]any{"k": key}), &got); err != nil {
		t.Fatal(err)
	}
	if got.SessionStatus.StateVersion != 0 {
		t.Errorf("stateVersion = %d after refused calls, want 0 (nothing written)", got.SessionStatus.StateVersion)
	}
}

// Refusals before GraphQL: the GraphQL error shape with INVALID_ARGUMENT, the status
// the GraphQL-over-HTTP spec names, and never an echo of the body.
func TestHTTPRefusalsAreCoded(t *testing.T) {
	e := newEnv(t)
	secret := strings.Repeat("SECRET", 1000)
	tests := []struct {
		name, method, ctype, accept, body, query string
		status                                   int
		allow, msg                               string
	}{
		{"GET mutation", "GET", "", "", "", "query=" + `mutation{ackNotices(watcher:"agent:main:main"){text}}`, 405, "POST", "send the mutation as POST"},
		{"PUT", "PUT", "application/json", "", `{"query":"{__typename}"}`, "", 405, "GET, POST, OPTIONS", "not allowed"},
		{"text/plain", "POST", "text/plain", "", `{"query":"{__typename}"}`, "", 415, "", "send Content-Type: application/json"},
		{"form", "POST", "application/x-www-form-urlencoded", "", "query=x", "", 415, "", "send Content-Type: application/json"},
		{"no content type", "POST", "", "", `{"query":"{__typename}"}`, "", 415, "", "send Content-Type: application/json"},
		{"batch", "POST", "application/json", "", `[{"query":"{__typename}"}]`, "", 400, "", "one operation per request"},
		{"malformed", "POST", "application/json", "", `{"query": "` + secret + `", x}`, "", 400, "", "at byte"},
		{"no query", "POST", "application/json", "", `{"qeury":"{__typename}"}`, "", 400, "", "no query"},
		{"variables not an object", "POST", "application/json", "", `{"query":"{__typename}","variables":"x"}`, "", 400, "", "must be a JSON object"},
		{"unacceptable Accept", "POST", "application/json", "text/html", `{"query":"{__typename}"}`, "", 406, "", "application/json"},
		{"over-long query string", "GET", "", "", "", "query=" + strings.Repeat("a", 1<<20+1), 414, "", "larger than 1 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := e.url
			if tt.query != "" {
				url += "?" + tt.query
			}
			req, _ := http.NewRequest(tt.method, url, strings.NewReader(tt.body))
			if tt.ctype != "" {
				req.Header.Set("Content-Type", tt.ctype)
			}
			if tt.accept != "" {
				req.Header.Set("Accept", tt.accept)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var r gqlResponse
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatalf("status %d, body is not the GraphQL shape: %v: %.200s", resp.StatusCode, err, raw)
			}
			if resp.StatusCode != tt.status || r.code() != awareness.EINVALID || !strings.Contains(r.Errors[0].Message, tt.msg) {
				t.Errorf("got %d %s, want %d INVALID_ARGUMENT with %q", resp.StatusCode, raw, tt.status, tt.msg)
			}
			if got := resp.Header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow = %q, want %q", got, tt.allow)
			}
			if bytes.Contains(raw, []byte("SECRET")) || bytes.Contains(raw, []byte(`"data"`)) {
				t.Errorf("the refusal echoes the body or carries data: %.300s", raw)
			}
		})
	}
}

// Request errors (parse, validation, variable coercion) answer 200 under
// application/json and 400 under application/graphql-response+json, without a data
// entry.
func TestHTTPRequestErrorsHaveNoData(t *testing.T) {
	e := newEnv(t)
	for _, accept := range []string{"application/json", "application/graphql-response+json"} {
		for _, body := range []string{`{"query":"{"}`, `{"query":"{ nope }"}`, `{"query":"query($k:String!){ sessionStatus(sessionKey:$k){ stateVersion } }"}`} {
			req, _ := http.NewRequest("POST", e.url, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", accept)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			want := 200
			if accept != "application/json" {
				want = 400
			}
			if resp.StatusCode != want || bytes.Contains(raw, []byte(`"data"`)) || !strings.HasPrefix(resp.Header.Get("Content-Type"), accept) {
				t.Errorf("%s %s: %d %s %s, want %d without data", accept, body, resp.StatusCode, resp.Header.Get("Content-Type"), raw, want)
			}
		}
	}
}

// One text check on every transport (ERR-3): a key escaping a lone surrogate is
// refused over HTTP, WebSocket (both protocols) and SSE with the same message, and
// nothing is recorded.
func TestLoneSurrogateRefusedOnEveryTransport_ERR3(t *testing.T) {
	e := newEnv(t)
	mutation := `mutation { recordEvent(input: {sessionKey: \"agent:main:bad\ud800\", kind: run_completed, actorType: agent}) { stateVersion } }`
	body := `{"query":"` + mutation + `"}`

	status, r, raw := e.postRaw(t, []byte(body))
	if status != 400 || r.code() != awareness.EINVALID || r.Errors[0].Message != jsontext.Message {
		t.Errorf("HTTP: %d %s", status, raw)
	}
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		w := e.dialWS(t, proto)
		typ := "subscribe"
		if proto == "graphql-ws" {
			typ = "start"
		}
		if err := w.c.WriteMessage(websocket.TextMessage, []byte(`{"type":"`+typ+`","id":"1","payload":`+body+`}`)); err != nil {
			t.Fatal(err)
		}
		f := w.next()
		var errs []gqlError
		_ = json.Unmarshal(f.Payload, &errs)
		if f.Type != "error" || f.ID != "1" || len(errs) != 1 || errs[0].Message != jsontext.Message || errs[0].Extensions["code"] != awareness.EINVALID {
			t.Errorf("%s: got %s %s %s, want an INVALID_ARGUMENT error frame", proto, f.Type, f.ID, f.Payload)
		}
	}
	req, _ := http.NewRequest("POST", e.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	_ = json.Unmarshal(raw, &r)
	if resp.StatusCode != 400 || r.code() != awareness.EINVALID || r.Errors[0].Message != jsontext.Message {
		t.Errorf("SSE: %d %s", resp.StatusCode, raw)
	}
	_, r, raw = e.post(t, `{ sessionsList { totalCount } }`, nil)
	if strings.Contains(string(raw), `"totalCount":1`) {
		t.Errorf("a refused call recorded a session: %s", raw)
	}
}

// The text rule of variables holds for the document's string literals too (ERR-3): a
// literal escaping a lone surrogate (the document's own \ud800, not the JSON's) is
// refused with the same message on POST, GET, SSE and both WebSocket protocols, and
// nothing is stored, where gqlparser would have stored U+FFFD. A block string's
// backslash is text, and a surrogate pair is one character.
func TestLoneSurrogateLiteralRefusedOnEveryTransport_ERR3(t *testing.T) {
	e := newEnv(t)
	mutation := `mutation { recordEvent(input: {sessionKey: "agent:main:subagent:bad\ud800", kind: run_completed, actorType: agent}) { stateVersion } }`
	body, _ := json.Marshal(map[string]any{"query": mutation})
	refused := func(what string, r gqlResponse, raw []byte) {
		t.Helper()
		if r.code() != awareness.EINVALID || r.Errors[0].Message != jsontext.Message || bytes.Contains(raw, []byte(`"data":{`)) {
			t.Errorf("%s: %s, want INVALID_ARGUMENT %q without data", what, raw, jsontext.Message)
		}
	}
	_, r, raw := e.postRaw(t, body)
	refused("POST", r, raw)

	resp, err := http.Get(e.url + "?query=" + url.QueryEscape(`{ sessionStatus(sessionKey: "agent:main:subagent:bad\ud800") { stateVersion } }`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	r = gqlResponse{}
	_ = json.Unmarshal(raw, &r)
	refused("GET", r, raw)

	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		w := e.dialWS(t, proto)
		typ := "subscribe"
		if proto == "graphql-ws" {
			typ = "start"
		}
		if err := w.c.WriteMessage(websocket.TextMessage, []byte(`{"type":"`+typ+`","id":"1","payload":`+string(body)+`}`)); err != nil {
			t.Fatal(err)
		}
		f := w.next()
		var errs []gqlError
		if f.Type == "error" {
			_ = json.Unmarshal(f.Payload, &errs)
		} else {
			var p gqlResponse
			_ = json.Unmarshal(f.Payload, &p)
			for _, pe := range p.Errors {
				errs = append(errs, gqlError{Message: pe.Message, Extensions: pe.Extensions})
			}
		}
		if f.ID != "1" || len(errs) != 1 || errs[0].Message != jsontext.Message || errs[0].Extensions["code"] != awareness.EINVALID {
			t.Errorf("%s: got %s %s %s, want an INVALID_ARGUMENT error", proto, f.Type, f.ID, f.Payload)
		}
	}
	req, _ := http.NewRequest("POST", e.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	r = gqlResponse{}
	for line := range bytes.SplitSeq(raw, []byte("\n")) {
		if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			_ = json.Unmarshal(data, &r)
			break
		}
	}
	refused("SSE", r, raw)

	if st, _ := e.store.Stats(context.Background()); st.Events != 0 || st.Sessions != 0 {
		t.Errorf("a refused literal was stored: %+v", st)
	}
	// What the rule lets through: a block string's backslash, an escaped pair.
	for _, q := range []string{
		`mutation { recordEvent(input: {sessionKey: "agent:main:subagent:ok", kind: run_completed, actorType: agent, summary: """a \ud800 b"""}) { event { summary } } }`,
		`mutation { recordEvent(input: {sessionKey: "agent:main:subagent:ok", kind: run_completed, actorType: agent, summary: "\ud83d\ude00"}) { event { summary } } }`,
	} {
		if _, r, raw := e.post(t, q, nil); len(r.Errors) > 0 || !(bytes.Contains(raw, []byte(`a \\ud800 b`)) || bytes.Contains(raw, []byte("😀"))) {
			t.Errorf("%s: %s", q, raw)
		}
	}
}

// SSE (graphql-sse distinct connections): staleNotices sends the pending notice
// first, then live ones, as `next` events.
func TestSSEStaleNoticesPendingFirst(t *testing.T) {
	e := newEnv(t)
	e.record(t, map[string]any{"sessionKey": child, "kind": "child_spawned", "actorType": "agent", "actorId": parent, "watchers": []string{parent}})
	e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human"})
	body := `{"query":"subscription { staleNotices(watcher: \"` + parent + `\") { target changesSince } }"}`
	req, _ := http.NewRequest("POST", e.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("SSE answer %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				lines <- d
			}
		}
		close(lines)
	}()
	next := func() string {
		t.Helper()
		select {
		case l := <-lines:
			return l
		case <-time.After(5 * time.Second):
			t.Fatal("no SSE event")
		}
		return ""
	}
	want := `{"data":{"staleNotices":{"target":"` + child + `","changesSince":1}}}`
	if got := next(); got != want {
		t.Errorf("pending notice = %s, want %s", got, want)
	}
	other := "agent:main:subagent:other"
	e.record(t, map[string]any{"sessionKey": other, "kind": "child_spawned", "actorType": "agent", "actorId": parent, "watchers": []string{parent}})
	e.record(t, map[string]any{"sessionKey": other, "kind": "human_direct_message", "actorType": "human"})
	if got, want := next(), `{"data":{"staleNotices":{"target":"`+other+`","changesSince":1}}}`; got != want {
		t.Errorf("live notice = %s, want %s", got, want)
	}
}
