package graph_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// sseStream reads one SSE request's events.
type sseStream struct {
	t      *testing.T
	events chan sseEvent
}

type sseEvent struct{ event, id, data string }

// openSSE POSTs query (with vars) as an SSE request, with Last-Event-ID when lastID
// is not empty.
func (e *env) openSSE(t *testing.T, query string, vars map[string]any, lastID string) *sseStream {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	s := &sseStream{t: t, events: make(chan sseEvent, 256)}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "":
				if ev.event != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.event = line[len("event: "):]
			case strings.HasPrefix(line, "id: "):
				ev.id = line[len("id: "):]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[len("data: "):]
			}
		}
	}()
	return s
}

func (s *sseStream) next() (sseEvent, bool) {
	s.t.Helper()
	select {
	case ev, ok := <-s.events:
		return ev, ok
	case <-time.After(10 * time.Second):
		s.t.Fatal("no SSE event within 10s")
		return sseEvent{}, false
	}
}

// sequences decodes the stateEvents sequence of an item.
func sequenceOf(t *testing.T, data []byte) int64 {
	t.Helper()
	var r struct {
		Data struct {
			StateEvents struct{ Sequence int64 } `json:"stateEvents"`
		} `json:"data"`
		Errors []gqlError `json:"errors"`
	}
	if err := json.Unmarshal(data, &r); err != nil || len(r.Errors) > 0 {
		t.Fatalf("item %s: %v", data, err)
	}
	return r.Data.StateEvents.Sequence
}

// FEED-1, FEED-2: stateEvents(afterSequence:) replays the session's log after the
// sequence, then goes live, over WebSocket and SSE; over SSE each event's id is its
// sequence and Last-Event-ID wins over the request's afterSequence (a graphql-sse
// client retries with the same body). A stream of every session has no ids and
// ignores the header; a malformed one is refused with INVALID_ARGUMENT.
func TestStateEventsResume_FEED1_FEED2(t *testing.T) {
	e := newEnv(t)
	for range 5 {
		e.record(t, map[string]any{"sessionKey": child, "kind": "run_completed", "actorType": "agent"})
	}
	const q = `subscription($k: String, $after: Int) { stateEvents(sessionKey: $k, afterSequence: $after) { sequence } }`

	w := e.dialWS(t, "graphql-transport-ws")
	payload, _ := json.Marshal(map[string]any{"query": q, "variables": map[string]any{"k": child, "after": 2}})
	w.send(wsFrame{Type: "subscribe", ID: "1", Payload: payload})
	resumed := e.openSSE(t, q, map[string]any{"k": child, "after": 1}, "3")
	waitUntil(t, "both subscribed", func() bool { _, n := e.hub.Subscribers(); return n == 2 })
	e.record(t, map[string]any{"sessionKey": child, "kind": "run_completed", "actorType": "agent"})
	for want := int64(3); want <= 6; want++ {
		f := w.next()
		if got := sequenceOf(t, f.Payload); got != want {
			t.Fatalf("WebSocket: sequence %d, want %d", got, want)
		}
	}
	for want := int64(4); want <= 6; want++ {
		ev, _ := resumed.next()
		if got := sequenceOf(t, []byte(ev.data)); got != want || ev.id != fmt.Sprint(want) {
			t.Fatalf("SSE after Last-Event-ID 3: sequence %d id %q, want %d", got, ev.id, want)
		}
	}

	all := e.openSSE(t, `subscription { stateEvents { sequence } }`, nil, "3")
	waitUntil(t, "every session's stream subscribed", func() bool { _, n := e.hub.Subscribers(); return n == 3 })
	e.record(t, map[string]any{"sessionKey": child, "kind": "run_completed", "actorType": "agent"})
	if ev, _ := all.next(); ev.id != "" || sequenceOf(t, []byte(ev.data)) != 7 {
		t.Fatalf("every session's stream: %+v, want sequence 7 without an id", ev)
	}

	bad := e.openSSE(t, q, map[string]any{"k": child}, "3x")
	ev, _ := bad.next()
	var r gqlResponse
	if err := json.Unmarshal([]byte(ev.data), &r); err != nil || r.code() != awareness.EINVALID || !strings.Contains(r.Errors[0].Message, "Last-Event-ID") {
		t.Fatalf("Last-Event-ID 3x: %s, want INVALID_ARGUMENT naming the header", ev.data)
	}
	if ev, _ := bad.next(); ev.event != "complete" {
		t.Fatalf("after the refusal: %+v, want complete", ev)
	}
}

// refusal is one transport's answer to a refused subscription: its first error.
type refusal struct {
	Message    string
	Code       string
	Extensions map[string]any
}

func firstError(t *testing.T, where string, payload []byte) refusal {
	t.Helper()
	var r gqlResponse
	if err := json.Unmarshal(payload, &r); err != nil || len(r.Errors) == 0 {
		// An `error` frame's payload is the list itself.
		var errs []gqlError
		if err := json.Unmarshal(payload, &errs); err != nil || len(errs) == 0 {
			t.Fatalf("%s: %s, want an error", where, payload)
		}
		r.Errors = errs
	}
	e := r.Errors[0]
	code, _ := e.Extensions["code"].(string)
	return refusal{Message: e.Message, Code: code, Extensions: e.Extensions}
}

// FEED-1, ERR-1, ERR-3: a resumed stream below the retained history is refused with
// HISTORY_GAP and extensions.earliestAvailableSequence, above the head with
// CURSOR_AHEAD, without a session with INVALID_ARGUMENT: the same answer on both
// WebSocket subprotocols and SSE, for stateEvents and stateEventFeed alike.
func TestFeedRefusalsOnEveryTransport_FEED1_ERR3(t *testing.T) {
	e := newEnv(t)
	for range 10 {
		e.record(t, map[string]any{"sessionKey": child, "kind": "run_completed", "actorType": "agent"})
	}
	if _, err := e.store.Prune(context.Background(), awareness.RetentionPolicy{MaxRows: 3}, time.Now()); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		vars  map[string]any
		code  string
		extra map[string]any
	}{
		{"pruned", map[string]any{"k": child, "after": 4}, awareness.EHISTORYGAP, map[string]any{"earliestAvailableSequence": 8.0}},
		{"ahead", map[string]any{"k": child, "after": 11}, awareness.ECURSORAHEAD, nil},
		{"every session", map[string]any{"after": 0}, awareness.EINVALID, nil},
		{"negative", map[string]any{"k": child, "after": -1}, awareness.EINVALID, nil},
	}
	docs := map[string]string{
		"stateEvents":    `subscription($k: String, $after: Int) { stateEvents(sessionKey: $k, afterSequence: $after) { sequence } }`,
		"stateEventFeed": `subscription($k: String, $after: Int) { stateEventFeed(sessionKey: $k, afterSequence: $after) { __typename } }`,
	}
	for field, q := range docs {
		for _, c := range cases {
			var answers []refusal
			for i, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
				w := e.dialWS(t, proto)
				typ := map[bool]string{true: "subscribe", false: "start"}[i == 0]
				payload, _ := json.Marshal(map[string]any{"query": q, "variables": c.vars})
				w.send(wsFrame{Type: typ, ID: "1", Payload: payload})
				answers = append(answers, firstError(t, field+" "+c.name+" "+proto, w.next().Payload))
			}
			ev, _ := e.openSSE(t, q, c.vars, "").next()
			answers = append(answers, firstError(t, field+" "+c.name+" SSE", []byte(ev.data)))
			for i, a := range answers {
				if a.Code != c.code {
					t.Errorf("%s %s answer %d: %+v, want %s", field, c.name, i, a, c.code)
				}
				for k, v := range c.extra {
					if a.Extensions[k] != v {
						t.Errorf("%s %s answer %d: extensions %v, want %s %v", field, c.name, i, a.Extensions, k, v)
					}
				}
				if diff := cmp.Diff(answers[0], a); diff != "" {
					t.Errorf("%s %s: answer %d differs from the first (-first +got):\n%s", field, c.name, i, diff)
				}
			}
		}
	}
	if _, n := e.hub.Subscribers(); n != 0 {
		t.Errorf("%d event subscriptions left by refused feeds", n)
	}
}

// FEED-3: idle feed subscriptions on the WebSocket push path hold no goroutine, as the
// contract's subscriptions do; each sent its FeedSynced.
func TestPushIdleFeedsHoldNoGoroutine_FEED3(t *testing.T) {
	e := newEnv(t)
	w := e.dialWS(t, "graphql-transport-ws")
	before := runtime.NumGoroutine()
	const n = 20
	for i := range n {
		q := `subscription { stateEventFeed(sessionKey: "` + child + `", afterSequence: 0) { ... on FeedSynced { replayed } } }`
		if i%2 == 1 {
			q = `subscription { staleNoticeFeed(watcher: "agent:main:main") { __typename } }`
		}
		w.subscribe(fmt.Sprint(i), q)
	}
	for range n {
		if f := w.next(); f.Type != "next" || !strings.Contains(string(f.Payload), "replayed") && !strings.Contains(string(f.Payload), "FeedSynced") {
			t.Fatalf("got %s %s, want a FeedSynced", f.Type, f.Payload)
		}
	}
	waitUntil(t, fmt.Sprintf("at most %d goroutines (had %d before %d feeds, now %d)", before+3, before, n, runtime.NumGoroutine()),
		func() bool { return runtime.NumGoroutine() <= before+3 })
}
