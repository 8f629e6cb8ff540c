package graph_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	_ "github.com/mattn/go-sqlite3" // the SQLite backend's fault injection (a trigger)

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/models/pgtest"
	"github.com/awareness/awareness/internal/testenv"
)

// The tests of this file run on both databases and over the three transports: the
// mutation answers that never hide a commit (graph.MutationChecks), recordEvents and
// acknowledgeNotices.

// dbEnv is the /query handler over one database, with a way to change its schema
// behind the store's back (fault injection).
type dbEnv struct {
	url   string
	store *models.Store
	svc   *awareness.Service
	exec  func(t *testing.T, sql string)
}

// dbBackend opens a dbEnv on one database.
type dbBackend struct {
	name string
	open func(t *testing.T) *dbEnv
}

func dbBackends() []dbBackend {
	serve := func(t *testing.T, store *models.Store, exec func(t *testing.T, sql string)) *dbEnv {
		svc := awareness.NewService(awareness.Config{Store: store})
		hs := httptest.NewServer(graph.NewHandler(graph.Config{Service: svc}))
		t.Cleanup(func() {
			hs.Close()
			svc.Hub().Close()
			store.Close()
		})
		return &dbEnv{url: hs.URL + "/query", store: store, svc: svc, exec: exec}
	}
	return []dbBackend{
		{"sqlite", func(t *testing.T) *dbEnv {
			path := filepath.Join(t.TempDir(), "awareness.db")
			s, err := models.OpenSQLite(context.Background(), path, models.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return serve(t, s, func(t *testing.T, q string) {
				t.Helper()
				graph.ExecSQLite(t, path, q)
			})
		}},
		{"postgres", func(t *testing.T) *dbEnv {
			if os.Getenv(pgtest.EnvVar) == "" {
				testenv.Missing(t, "mutation answers on PostgreSQL", pgtest.EnvVar+" is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
			}
			dsn := pgtest.NewDatabase(t)
			s, err := models.OpenPostgres(context.Background(), dsn, models.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return serve(t, s, func(t *testing.T, q string) {
				t.Helper()
				if err := pgtest.Exec(dsn, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			})
		}},
	}
}

// failOnSummary makes the database refuse to insert an event whose summary is
// summary: a failure of the database while a request executes.
func failOnSummary(t *testing.T, e *dbEnv, backend, summary string) {
	t.Helper()
	if backend == "sqlite" {
		e.exec(t, `CREATE TRIGGER fail_on_summary BEFORE INSERT ON events WHEN NEW.summary = '`+summary+`'
BEGIN SELECT RAISE(ABORT, 'injected failure'); END`)
		return
	}
	e.exec(t, `CREATE FUNCTION fail_on_summary() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.summary = '`+summary+`' THEN RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$`)
	e.exec(t, `CREATE TRIGGER fail_on_summary BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION fail_on_summary()`)
}

// fullResponse is a GraphQL response with its extensions.
type fullResponse struct {
	Data       json.RawMessage `json:"data"`
	Errors     []gqlError      `json:"errors"`
	Extensions map[string]any  `json:"extensions"`
}

func (r fullResponse) code() string { return gqlResponse{Errors: r.Errors}.code() }

// errorPaths returns each error's path and code, in order.
func (r fullResponse) errorPaths() (paths, codes []string) {
	for _, e := range r.Errors {
		paths = append(paths, fmt.Sprint(e.Path))
		codes = append(codes, fmt.Sprint(e.Extensions["code"]))
	}
	return paths, codes
}

// committed returns extensions.committed, and whether the answer has it.
func (r fullResponse) committed() ([]string, bool) {
	v, ok := r.Extensions[graph.CommittedExtension]
	if !ok {
		return nil, false
	}
	out := []string{}
	for _, k := range v.([]any) {
		out = append(out, k.(string))
	}
	return out, true
}

// wire runs one operation over one transport and returns its (first) answer.
type wire struct {
	name string
	do   func(t *testing.T, url, query string, vars map[string]any) fullResponse
}

var wires = []wire{{"http", httpDo}, {"websocket", wsDo}, {"sse", sseDo}}

func httpDo(t *testing.T, url, query string, vars map[string]any) fullResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	resp, err := http.Post(url, "application/json", strings.NewReader(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r fullResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatalf("HTTP %d: %v", resp.StatusCode, err)
	}
	return r
}

func wsDo(t *testing.T, url, query string, vars map[string]any) fullResponse {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws"+strings.TrimPrefix(url, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	payload, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	for _, f := range []wsFrame{{Type: "connection_init"}, {Type: "subscribe", ID: "1", Payload: payload}} {
		if err := c.WriteJSON(f); err != nil {
			t.Fatal(err)
		}
	}
	for {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var f wsFrame
		if err := c.ReadJSON(&f); err != nil {
			t.Fatalf("websocket: %v", err)
		}
		var r fullResponse
		switch f.Type {
		case "next":
			if err := json.Unmarshal(f.Payload, &r); err != nil {
				t.Fatal(err)
			}
			return r
		case "error":
			if err := json.Unmarshal(f.Payload, &r.Errors); err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
}

func sseDo(t *testing.T, url, query string, vars map[string]any) fullResponse {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r fullResponse
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "" {
			if err := json.Unmarshal([]byte(d), &r); err != nil {
				t.Fatalf("SSE data %q: %v", d, err)
			}
			return r
		}
	}
	t.Fatalf("SSE: no data (%v)", sc.Err())
	return r
}

// forEachBackendAndWire runs fn on a fresh database of each backend, over each
// transport.
func forEachBackendAndWire(t *testing.T, fn func(t *testing.T, backend string, e *dbEnv, w wire)) {
	for _, b := range dbBackends() {
		for _, w := range wires {
			t.Run(b.name+"/"+w.name, func(t *testing.T) {
				t.Parallel()
				fn(t, b.name, b.open(t), w)
			})
		}
	}
}

func stats(t *testing.T, e *dbEnv) awareness.Stats {
	t.Helper()
	st, err := e.store.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestMutationRequestRefusedAsAWhole_ERR2: two recordEvent aliases, the second refused
// by its checks: before, the first was committed and the answer was data null with one
// error. Now every field is checked before the first writes, the request is refused
// with the refused field's error, nothing is written, and extensions.committed says so.
func TestMutationRequestRefusedAsAWhole_ERR2(t *testing.T) {
	t.Parallel()
	forEachBackendAndWire(t, func(t *testing.T, _ string, e *dbEnv, w wire) {
		before := stats(t, e)
		r := w.do(t, e.url, `mutation {
  a: recordEvent(input: {sessionKey: "agent:main:subagent:a", kind: human_direct_message, actorType: human}) { recorded }
  w: watch(input: {watcher: "agent:main:main", target: "agent:main:subagent:a"}) { watched }
  b: recordEvent(input: {sessionKey: "agent:main:", kind: human_direct_message, actorType: human}) { recorded }
  c: recordEvents(inputs: [{sessionKey: "agent:main:subagent:c", kind: goal_changed, actorType: human}]) { index }
  d: ackNotices(watcher: "global") { text }
}`, nil)
		if string(r.Data) != "null" {
			t.Errorf("data = %s, want null", r.Data)
		}
		paths, codes := r.errorPaths()
		if want := []string{"[b]", "[d]"}; !slices.Equal(paths, want) {
			t.Errorf("error paths %v, want %v (%+v)", paths, want, r.Errors)
		}
		if want := []string{awareness.EINVALID, awareness.EINVALID}; !slices.Equal(codes, want) {
			t.Errorf("error codes %v, want %v", codes, want)
		}
		if c, ok := r.committed(); !ok || len(c) != 0 {
			t.Errorf("extensions.committed = %v (present %v), want []", c, ok)
		}
		if after := stats(t, e); !sameCounts(before, after) {
			t.Errorf("a refused request wrote: %+v → %+v", before, after)
		}
		// The same fields, all valid: every one runs, once.
		r = w.do(t, e.url, `mutation {
  a: recordEvent(input: {sessionKey: "agent:main:subagent:a", kind: human_direct_message, actorType: human}) { recorded stateVersion }
  w: watch(input: {watcher: "agent:main:main", target: "agent:main:subagent:a"}) { watched }
  b: recordEvent(input: {sessionKey: "agent:main:subagent:a", kind: human_direct_message, actorType: human}) { recorded stateVersion noticesOpened }
}`, nil)
		if len(r.Errors) > 0 {
			t.Fatalf("valid request: %+v", r.Errors)
		}
		if want := `{"a":{"recorded":true,"stateVersion":1},"w":{"watched":true},"b":{"recorded":true,"stateVersion":2,"noticesOpened":1}}`; string(r.Data) != want {
			t.Errorf("data = %s\nwant %s", r.Data, want)
		}
		if _, ok := r.committed(); ok {
			t.Errorf("a request without errors carries extensions.committed: %v", r.Extensions)
		}
		if st := stats(t, e); st.Events != before.Events+2 || st.PendingNotices != 1 {
			t.Errorf("after the valid request: %+v, want 2 events and 1 notice more", st)
		}
	})
}

// TestMutationFailureAfterCommitNamesTheCommitted_ERR2: a field that fails while
// executing, after fields before it committed (here the database refusing a row, and
// a session that turns out not to be registered), nulls data as GraphQL's non-null
// payloads ask; extensions.committed lists the response keys that committed.
func TestMutationFailureAfterCommitNamesTheCommitted_ERR2(t *testing.T) {
	t.Parallel()
	forEachBackendAndWire(t, func(t *testing.T, backend string, e *dbEnv, w wire) {
		failOnSummary(t, e, backend, "boom")
		r := w.do(t, e.url, `mutation {
  a: recordEvent(input: {sessionKey: "agent:main:subagent:a", kind: goal_changed, actorType: human}) { recorded }
  b: recordEvent(input: {sessionKey: "agent:main:subagent:a", kind: goal_changed, actorType: human, summary: "boom"}) { recorded }
  f: recordMemoryFlush(sessionKey: "agent:main:unregistered") { sessionKey }
  c: recordEvent(input: {sessionKey: "agent:main:subagent:a", kind: goal_changed, actorType: human}) { recorded }
}`, nil)
		if string(r.Data) != "null" {
			t.Errorf("data = %s, want null", r.Data)
		}
		paths, codes := r.errorPaths()
		if want := []string{"[b]", "[f]"}; !slices.Equal(paths, want) {
			t.Errorf("error paths %v, want %v (%+v)", paths, want, r.Errors)
		}
		if codes[1] != awareness.ENOTFOUND {
			t.Errorf("recordMemoryFlush: code %s, want NOT_FOUND", codes[1])
		}
		if c, _ := r.committed(); !slices.Equal(c, []string{"a", "c"}) {
			t.Errorf("extensions.committed = %v, want [a c] (%v)", c, r.Extensions)
		}
		if st := stats(t, e); st.Events != 2 {
			t.Errorf("events = %d, want the 2 that committed", st.Events)
		}
	})
}

const recordEventsDoc = `mutation($ins: [RecordEventInput!]!) { recordEvents(inputs: $ins) {
  index result { recorded stateVersion noticesOpened event { sequence sessionKey summary } skippedWatchers { watcher } } error { code message } } }`

type batchItem struct {
	Index  int `json:"index"`
	Result *struct {
		Recorded      bool `json:"recorded"`
		StateVersion  int  `json:"stateVersion"`
		NoticesOpened int  `json:"noticesOpened"`
		Event         struct {
			Sequence   int    `json:"sequence"`
			SessionKey string `json:"sessionKey"`
			Summary    string `json:"summary"`
		} `json:"event"`
	} `json:"result"`
	Error *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func recordEvents(t *testing.T, e *dbEnv, w wire, ins []map[string]any) ([]batchItem, fullResponse) {
	t.Helper()
	r := w.do(t, e.url, recordEventsDoc, map[string]any{"ins": ins})
	var d struct {
		RecordEvents []batchItem `json:"recordEvents"`
	}
	if len(r.Errors) == 0 {
		if err := json.Unmarshal(r.Data, &d); err != nil {
			t.Fatal(err)
		}
	}
	return d.RecordEvents, r
}

// TestRecordEvents_SIG3_SIG4_PerInput: one batch, appended in one transaction in input
// order (each session's sequences follow it), each input refused on its own with its
// code (an invalid one stops nothing), deduplicated on its own (SIG-4, also against an
// earlier input of the same batch), and its notices published after the commit.
func TestRecordEvents_SIG3_SIG4_PerInput(t *testing.T) {
	t.Parallel()
	forEachBackendAndWire(t, func(t *testing.T, _ string, e *dbEnv, w wire) {
		ctx := context.Background()
		if _, err := e.svc.Watch(ctx, "agent:main:main", "agent:main:subagent:a", nil); err != nil {
			t.Fatal(err)
		}
		notices, stop, err := e.svc.SubscribeNotices(ctx, ptr("agent:main:main"), false)
		if err != nil {
			t.Fatal(err)
		}
		defer stop()
		a, b := "agent:main:subagent:a", "agent:main:subagent:b"
		human := func(key, summary string) map[string]any {
			return map[string]any{"sessionKey": key, "kind": "human_direct_message", "actorType": "human", "summary": summary}
		}
		dup := human(a, "a3")
		dup["dedupeKey"] = "k1"
		ins := []map[string]any{
			human(a, "a1"), human(b, "b1"),
			{"sessionKey": "agent:main:", "kind": "goal_changed", "actorType": "human"}, // malformed key
			human(a, "a2"),
			dup, dup, // the second is the first, deduplicated
			{"sessionKey": b, "kind": "run_failed", "actorType": "system", "outcome": "timeout", "summary": "two\nlines"},
			human(b, "b2"),
		}
		items, r := recordEvents(t, e, w, ins)
		if len(r.Errors) > 0 {
			t.Fatalf("recordEvents: %+v", r.Errors)
		}
		if len(items) != len(ins) {
			t.Fatalf("%d items for %d inputs", len(items), len(ins))
		}
		type want struct {
			seq      int
			key      string
			recorded bool
			code     string
		}
		wants := []want{{1, a, true, ""}, {1, b, true, ""}, {0, "", false, awareness.EINVALID}, {2, a, true, ""},
			{3, a, true, ""}, {3, a, false, ""}, {0, "", false, awareness.EINVALID}, {2, b, true, ""}}
		for i, it := range items {
			wn := wants[i]
			if it.Index != i {
				t.Errorf("item %d has index %d", i, it.Index)
			}
			switch {
			case wn.code != "":
				if it.Result != nil || it.Error == nil || it.Error.Code != wn.code || it.Error.Message == "" {
					t.Errorf("item %d: %+v %+v, want refused with %s", i, it.Result, it.Error, wn.code)
				}
			case it.Error != nil || it.Result == nil:
				t.Errorf("item %d refused: %+v", i, it.Error)
			case it.Result.Event.Sequence != wn.seq || it.Result.Event.SessionKey != wn.key || it.Result.Recorded != wn.recorded:
				t.Errorf("item %d: %+v, want sequence %d of %s recorded %v", i, it.Result, wn.seq, wn.key, wn.recorded)
			}
		}
		if items[0].Result.NoticesOpened != 1 {
			t.Errorf("the first append on a watched target opened %d notices, want 1", items[0].Result.NoticesOpened)
		}
		select {
		case n := <-notices:
			if n.Target.Key != a || n.NotifiedVersion != 1 {
				t.Errorf("published %+v, want the notice of %s at 1", n, a)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the batch's notice was not published")
		}
		if st := stats(t, e); st.Events != 5 {
			t.Errorf("events = %d, want 5", st.Events)
		}
	})
}

// TestRecordEvents_ERR2_WholeCallRefused: more than 200 inputs, or a database that
// fails one append of the batch, refuse the whole call: nothing of it is written.
func TestRecordEvents_ERR2_WholeCallRefused(t *testing.T) {
	t.Parallel()
	forEachBackendAndWire(t, func(t *testing.T, backend string, e *dbEnv, w wire) {
		in := func(summary string) map[string]any {
			return map[string]any{"sessionKey": "agent:main:subagent:a", "kind": "goal_changed", "actorType": "human", "summary": summary}
		}
		var many []map[string]any
		for i := range awareness.MaxRecordBatch + 1 {
			many = append(many, in(fmt.Sprint("s", i)))
		}
		_, r := recordEvents(t, e, w, many)
		if r.code() != awareness.EINVALID || !strings.Contains(r.Errors[0].Message, "at most 200") {
			t.Errorf("201 inputs: %+v, want INVALID_ARGUMENT naming the limit", r.Errors)
		}
		items, r := recordEvents(t, e, w, many[:awareness.MaxRecordBatch])
		if len(r.Errors) > 0 || len(items) != awareness.MaxRecordBatch || items[199].Result.Event.Sequence != 200 {
			t.Fatalf("200 inputs: %+v", r.Errors)
		}
		failOnSummary(t, e, backend, "boom")
		_, r = recordEvents(t, e, w, []map[string]any{in("ok"), in("boom"), in("ok too")})
		if len(r.Errors) != 1 || string(r.Data) != "null" {
			t.Errorf("a failing database: %s %+v, want the call refused", r.Data, r.Errors)
		}
		if st := stats(t, e); st.Events != awareness.MaxRecordBatch {
			t.Errorf("events = %d, want %d: a failed batch wrote", st.Events, awareness.MaxRecordBatch)
		}
	})
}

const acknowledgeDoc = `mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) {
  watcher target targetAgentId notifiedVersion outcome followUp { changesSince notifiedVersion } pending { changesSince notifiedVersion } } }`

// TestAcknowledgeNotices_NTC3_Outcomes: the exact acknowledgement with an answer per
// notice, in the order named, on every transport and both databases; the old
// ackNotices(notices:) answers as it did.
func TestAcknowledgeNotices_NTC3_Outcomes(t *testing.T) {
	t.Parallel()
	forEachBackendAndWire(t, func(t *testing.T, _ string, e *dbEnv, w wire) {
		ctx := context.Background()
		a, b := "agent:main:subagent:a", "agent:main:subagent:b"
		for _, k := range []string{a, b} {
			if _, err := e.svc.Watch(ctx, "agent:main:main", k, nil); err != nil {
				t.Fatal(err)
			}
		}
		human := func(k string) {
			if _, err := e.svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: k, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman}); err != nil {
				t.Fatal(err)
			}
		}
		human(a) // a: N = 1
		human(a) // a: M = 2
		human(b) // b: N = 1
		r := w.do(t, e.url, acknowledgeDoc, map[string]any{"w": "agent:main:main", "n": []any{
			map[string]any{"target": a, "notifiedVersion": 1},
			map[string]any{"target": a, "notifiedVersion": 1},
			map[string]any{"target": b, "notifiedVersion": 4},
			map[string]any{"target": "agent:main:subagent:none", "notifiedVersion": 1},
		}})
		if len(r.Errors) > 0 {
			t.Fatalf("acknowledgeNotices: %+v", r.Errors)
		}
		want := `{"acknowledgeNotices":[` +
			`{"watcher":"agent:main:main","target":"agent:main:subagent:a","targetAgentId":"main","notifiedVersion":1,"outcome":"acknowledged","followUp":{"changesSince":1,"notifiedVersion":2},"pending":null},` +
			`{"watcher":"agent:main:main","target":"agent:main:subagent:a","targetAgentId":"main","notifiedVersion":1,"outcome":"alreadyAcknowledged","followUp":null,"pending":{"changesSince":1,"notifiedVersion":2}},` +
			`{"watcher":"agent:main:main","target":"agent:main:subagent:b","targetAgentId":"main","notifiedVersion":4,"outcome":"superseded","followUp":null,"pending":{"changesSince":0,"notifiedVersion":1}},` +
			`{"watcher":"agent:main:main","target":"agent:main:subagent:none","targetAgentId":"main","notifiedVersion":1,"outcome":"notPending","followUp":null,"pending":null}]}`
		if string(r.Data) != want {
			t.Errorf("answer\n got %s\nwant %s", r.Data, want)
		}
		// Refused as every acknowledgement is: a bare watcher, a bad version.
		for _, vars := range []map[string]any{
			{"w": "global", "n": []any{}},
			{"w": "agent:main:main", "n": []any{map[string]any{"target": a, "notifiedVersion": 0}}},
		} {
			if r := w.do(t, e.url, acknowledgeDoc, vars); r.code() != awareness.EINVALID {
				t.Errorf("%v: %+v, want INVALID_ARGUMENT", vars, r.Errors)
			}
		}
		// The older exact form keeps its answer: the follow-ups.
		r = w.do(t, e.url, `mutation { ackNotices(watcher: "agent:main:main", notices: [{target: "agent:main:subagent:a", notifiedVersion: 2}, {target: "agent:main:subagent:b", notifiedVersion: 1}]) { target } }`, nil)
		if len(r.Errors) > 0 || string(r.Data) != `{"ackNotices":[]}` {
			t.Errorf("ackNotices(notices:): %s %+v", r.Data, r.Errors)
		}
		if st := stats(t, e); st.PendingNotices != 0 {
			t.Errorf("pending after acknowledging all: %d", st.PendingNotices)
		}
	})
}

func ptr[T any](v T) *T { return &v }
