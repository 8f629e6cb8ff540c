package graph

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	_ "github.com/mattn/go-sqlite3" // a row the fast path cannot write, behind the store's back

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/models/pgtest"
	"github.com/awareness/awareness/internal/testenv"
)

// REC-1, REC-6: the EventPage fast path writes a reconciliation page byte for byte as
// gqlgen's own execution does, for every selection shape a client may send: all
// fields, subsets, aliases, repeated fields, __typename, named and inline fragments,
// @skip/@include driven by variables, several aliased sessionStatus calls, an empty
// page, and events with every optional field present or absent and text that needs
// escaping.
func TestEventPageMatchesGqlgen(t *testing.T) {
	ctx := context.Background()
	store, err := models.OpenSQLite(ctx, filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	svc := awareness.NewService(awareness.Config{Store: store})
	fast, fp := newHandler(Config{Service: svc})
	plain := NewHandler(Config{Service: svc, gqlgenEventPages: true})

	const key = "agent:main:subagent:page"
	str := func(s string) *string { return &s }
	num := func(n int) *int { return &n }
	outcome := func(o awareness.RunOutcome) *awareness.RunOutcome { return &o }
	at := time.Now().Add(-time.Hour).Truncate(time.Microsecond).Add(123 * time.Nanosecond)
	for _, in := range []awareness.RecordInput{
		{Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, ActorID: str("+15550100"), Channel: str("telegram")},
		{Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, Channel: str("slack"), Turns: num(3),
			Summary: str(`quote " backslash \ angle <b>&amp;</b>`)},
		{Kind: awareness.GoalChanged, ActorType: awareness.ActorHuman, Summary: str("é漢字🙂 tab-free, ünïcödé")},
		{Kind: awareness.RunCompleted, ActorType: awareness.ActorAgent, ActorID: str("agent:main:main"), RunID: str(`run "7"`)},
		{Kind: awareness.RunFailed, ActorType: awareness.ActorAgent, RunID: str("run-8"), Outcome: outcome(awareness.OutcomeTimeout)},
		{Kind: awareness.RunFailed, ActorType: awareness.ActorSystem, Outcome: outcome(awareness.OutcomeError), OccurredAt: &at},
		{Kind: awareness.Compacted, ActorType: awareness.ActorSystem},
		{Kind: awareness.UpstreamMissing, ActorType: awareness.ActorSystem, Channel: str("codex")},
		{Kind: awareness.Adopted, ActorType: awareness.ActorHuman, ActorID: str("user:bob")},
		{Kind: awareness.ChildSpawned, ActorType: awareness.ActorAgent, Watchers: []string{"agent:main:main"}},
	} {
		in.SessionKey = key
		if _, err := svc.RecordEvent(ctx, in); err != nil {
			t.Fatalf("record %s: %v", in.Kind, err)
		}
	}

	all := `sequence kind actorType actorId summary occurredAt runId payload sessionKey agentId __typename`
	// Every query declares the same variables and fragment (GraphQL rejects unused
	// ones), so each also carries a call that uses them.
	const extra = `extra: sessionStatus(sessionKey: $k, changesSince: 6) @include(if: $inc) @skip(if: $skip) {
  stateChanges { events { ...F } } } }
fragment F on StateEvent { summary payload }`
	status := func(sel string) string {
		return `query($k: String!, $s: Int, $skip: Boolean!, $inc: Boolean!) {
  sessionStatus(sessionKey: $k, changesSince: $s) { stateVersion stateChanges { events { ` + sel + ` } truncated } }
` + extra
	}
	queries := map[string]string{
		"all fields":   status(all),
		"reconcile":    status(`sequence kind actorType actorId summary occurredAt runId payload`),
		"one field":    status(`summary`),
		"aliases":      status(`n: sequence k: kind sequence who: actorId`),
		"repeats":      status(`sequence sequence kind summary kind`),
		"typename":     status(`__typename`),
		"fragments":    status(`...F sequence ... on StateEvent { kind runId } ...F`),
		"skip/include": status(`sequence @skip(if: $skip) kind @include(if: $inc) summary @include(if: $skip) payload`),
		"two calls": `query($k: String!, $s: Int, $skip: Boolean!, $inc: Boolean!) {
  a: sessionStatus(sessionKey: $k, changesSince: $s) { stateChanges { events { sequence summary } } }
  b: sessionStatus(sessionKey: $k, changesSince: 4) { stateChanges { events { kind @skip(if: $skip) occurredAt } } }
` + extra,
	}
	for name, q := range queries {
		for _, vars := range []map[string]any{
			{"k": key, "s": 0, "skip": false, "inc": true},
			{"k": key, "s": 3, "skip": true, "inc": false},
			{"k": key, "s": 9, "skip": false, "inc": false}, // empty page
			{"k": key, "s": nil, "skip": true, "inc": true}, // no page asked for
		} {
			before := fp.PagesWritten()
			got, want := post(t, fast, q, vars), post(t, plain, q, vars)
			if !bytes.Equal(got, want) {
				t.Errorf("%s %v:\nfast path: %s\ngqlgen:    %s", name, vars, got, want)
			}
			if strings.Contains(string(want), `"errors"`) {
				t.Errorf("%s %v: %s", name, vars, want)
			}
			// Without changesSince there is no page (stateChanges is null).
			if vars["s"] != nil && fp.PagesWritten() == before {
				t.Errorf("%s %v: the fast path did not write the page", name, vars)
			}
		}
	}
}

func post(t *testing.T, h http.Handler, query string, vars map[string]any) []byte {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// NTC-5, NTC-7: the subscriptions written by the fast path carry, frame by frame, the
// same payload bytes as gqlgen's own execution, including the items gqlgen would null
// (a notice without an opening time, an event without a time, an unknown enum value).
func TestEventPageStreamsMatchGqlgen(t *testing.T) {
	ctx := context.Background()
	store, err := models.OpenSQLite(ctx, filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hub := awareness.NewHub()
	t.Cleanup(func() { hub.Close(); store.Close() })
	svc := awareness.NewService(awareness.Config{Store: store, Hub: hub})
	fastH, fp := newHandler(Config{Service: svc})
	fastSrv := httptest.NewServer(fastH)
	plainSrv := httptest.NewServer(NewHandler(Config{Service: svc, gqlgenEventPages: true}))
	t.Cleanup(fastSrv.Close)
	t.Cleanup(plainSrv.Close)

	subs := map[string]string{
		"notices": `subscription { staleNotices { watcher target targetAgentId changesSince notifiedVersion
  materialVersion text wake openedAt targetGeneration watcherGeneration __typename } }`,
		"notices aliased":     `subscription { n: staleNotices(watcher: "agent:main:main") { t: text w: wake ... on StaleNotice { openedAt } } }`,
		"notices with closed": `subscription { staleNotices(includeClosed: true) { watcher target notifiedVersion closed c2: closed text } }`,
		"events": `subscription { stateEvents { sequence kind actorType actorId summary occurredAt runId payload
  sessionKey agentId __typename } }`,
		"events of one session": `subscription { e: stateEvents(sessionKey: "agent:main:subagent:s1") { ...F } }
fragment F on StateEvent { summary kind k2: kind payload }`,
	}
	type pair struct{ fast, plain *websocket.Conn }
	conns := map[string]pair{}
	for name, q := range subs {
		conns[name] = pair{subscribe(t, fastSrv.URL, q), subscribe(t, plainSrv.URL, q)}
	}
	// Subscriptions are live once the hub counts them (each pair twice).
	for deadline := time.Now().Add(5 * time.Second); ; {
		n, e := hub.Subscribers()
		if n == 6 && e == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("hub has %d notice and %d event subscribers, want 6 and 4", n, e)
		}
		time.Sleep(5 * time.Millisecond)
	}

	before := fp.ItemsWritten()
	summary := `say "hi" \ <b>`
	for i, key := range []string{"agent:main:subagent:s1", "agent:main:subagent:s2", "agent:main:subagent:s1"} {
		actor := "+1555010" + strconv.Itoa(i)
		if _, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: key, Kind: awareness.HumanDirectMessage,
			ActorType: awareness.ActorHuman, ActorID: &actor, Summary: &summary, Watchers: []string{"agent:main:main"}}); err != nil {
			t.Fatal(err)
		}
	}
	// Items gqlgen nulls or blanks, published straight to the hub.
	hub.PublishNotices(awareness.Notice{Watcher: "agent:main:main", Target: awareness.SessionRef{AgentID: "main", Key: "agent:main:subagent:s9"},
		ChangesSince: 1, NotifiedVersion: 2, MaterialVersion: 2, Text: "no opening time"})
	hub.PublishEvents(awareness.Event{Session: awareness.SessionRef{AgentID: "main", Key: "agent:main:subagent:s1"}, Sequence: 9,
		Kind: "bogus", ActorType: awareness.ActorSystem, Summary: "unknown kind", OccurredAt: time.Now()},
		awareness.Event{Session: awareness.SessionRef{AgentID: "main", Key: "agent:main:subagent:s1"}, Sequence: 10,
			Kind: awareness.Compacted, ActorType: awareness.ActorSystem, Summary: "no time"})

	// An exact acknowledgement: the closed item (includeClosed only), then the follow-up.
	if _, err := svc.AckNotices(ctx, "agent:main:main", nil, nil,
		[]awareness.NoticeRef{{Target: "agent:main:subagent:s1", NotifiedVersion: 1}}); err != nil {
		t.Fatal(err)
	}

	want := map[string]int{"notices": 4, "notices aliased": 4, "notices with closed": 5, "events": 5, "events of one session": 4}
	for name, n := range want {
		c := conns[name]
		for i := range n {
			got, exp := nextPayload(t, c.fast), nextPayload(t, c.plain)
			if !bytes.Equal(got, exp) {
				t.Errorf("%s item %d:\nfast path: %s\ngqlgen:    %s", name, i, got, exp)
			}
		}
	}
	if fp.ItemsWritten() == before {
		t.Error("the fast path wrote no subscription item")
	}
}

func subscribe(t *testing.T, base, query string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws"+strings.TrimPrefix(base, "http")+"/query", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.WriteJSON(map[string]any{"type": "connection_init"}); err != nil {
		t.Fatal(err)
	}
	if f := readFrame(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	if err := c.WriteJSON(map[string]any{"type": "subscribe", "id": "1", "payload": map[string]any{"query": query}}); err != nil {
		t.Fatal(err)
	}
	return c
}

type wsFrame struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Payload json.RawMessage `json:"payload"`
}

func readFrame(t *testing.T, c *websocket.Conn) wsFrame {
	t.Helper()
	for {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var f wsFrame
		if err := c.ReadJSON(&f); err != nil {
			t.Fatalf("read: %v", err)
		}
		if f.Type == "ping" || f.Type == "pong" || f.Type == "ka" {
			continue
		}
		return f
	}
}

// nextPayload returns the payload of the next frame, which must be a next frame.
func nextPayload(t *testing.T, c *websocket.Conn) []byte {
	t.Helper()
	f := readFrame(t, c)
	if f.Type != "next" {
		t.Fatalf("got %s frame %s, want next", f.Type, f.Payload)
	}
	return f.Payload
}

// REC-1: on both databases, a page whose selection has one events key is written
// straight from the rows (PagesStreamed), byte for byte as gqlgen writes it; two events
// keys are written from the page's events instead, and a page with a row the fast path
// cannot write (an unknown kind in the database) is read again into events in the same
// transaction and left to gqlgen, with the same bytes.
func TestStreamedPageMatchesGqlgen(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			ctx := context.Background()
			var (
				store *models.Store
				exec  func(q string)
				err   error
			)
			switch backend {
			case "sqlite":
				path := filepath.Join(t.TempDir(), "awareness.db")
				store, err = models.OpenSQLite(ctx, path, models.Options{})
				exec = func(q string) { ExecSQLite(t, path, q) }
			case "postgres":
				if os.Getenv(pgtest.EnvVar) == "" {
					testenv.Missing(t, "streamed pages on PostgreSQL", pgtest.EnvVar+" is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
				}
				dsn := pgtest.NewDatabase(t)
				store, err = models.OpenPostgres(ctx, dsn, models.Options{})
				exec = func(q string) {
					if err := pgtest.Exec(dsn, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { store.Close() })
			svc := awareness.NewService(awareness.Config{Store: store})
			fast, fp := newHandler(Config{Service: svc})
			plain := NewHandler(Config{Service: svc, gqlgenEventPages: true})

			const key = "agent:main:subagent:streamed"
			str := func(s string) *string { return &s }
			num := func(n int) *int { return &n }
			for _, in := range []awareness.RecordInput{
				{Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, ActorID: str("+15550100"), Channel: str("telegram"), Turns: num(2)},
				{Kind: awareness.GoalChanged, ActorType: awareness.ActorHuman, Summary: str("é漢字🙂 \"quoted\" \\ <b>&amp; and a summary longer than thirty-two bytes")},
				{Kind: awareness.RunCompleted, ActorType: awareness.ActorAgent, ActorID: str("agent:main:main"), RunID: str("run-7")},
				{Kind: awareness.Compacted, ActorType: awareness.ActorSystem},
			} {
				in.SessionKey = key
				if _, err := svc.RecordEvent(ctx, in); err != nil {
					t.Fatalf("record %s: %v", in.Kind, err)
				}
			}
			const all = `sequence kind actorType actorId summary occurredAt runId payload sessionKey agentId __typename`
			one := `query($k: String!, $s: Int) { sessionStatus(sessionKey: $k, changesSince: $s, limit: 3) {
  stateVersion stateChanges { historyGap events { ` + all + ` } truncated nextChangesSince } } }`
			two := `query($k: String!, $s: Int) { sessionStatus(sessionKey: $k, changesSince: $s) {
  stateChanges { events { sequence summary } again: events { kind } } } }`
			check := func(name, q string, s int, streamed, written int64) {
				t.Helper()
				vars := map[string]any{"k": key, "s": s}
				streamedBefore, writtenBefore := fp.PagesStreamed(), fp.PagesWritten()
				got, want := post(t, fast, q, vars), post(t, plain, q, vars)
				if !bytes.Equal(got, want) {
					t.Errorf("%s since %d:\nfast path: %s\ngqlgen:    %s", name, s, got, want)
				}
				if got := fp.PagesStreamed() - streamedBefore; got != streamed {
					t.Errorf("%s since %d: %d pages streamed, want %d", name, s, got, streamed)
				}
				if got := fp.PagesWritten() - writtenBefore; got != written {
					t.Errorf("%s since %d: %d pages written, want %d", name, s, got, written)
				}
			}
			for _, s := range []int{0, 1, 4} {
				check("one events key", one, s, 1, 1)
				check("two events keys", two, s, 0, 2)
			}
			exec("UPDATE events SET kind = 'not_a_kind' WHERE session_key = '" + key + "' AND sequence = 2")
			check("an unknown kind", one, 0, 0, 0)
			check("after the unknown kind", one, 2, 1, 1)
		})
	}
}

// SIG-4, REC-6: the fast path writes recordEvent's answer byte for byte as gqlgen's own
// execution does: every field, aliases, fragments, @skip/@include, skipped watchers, a
// deduplicated append, two mutation fields in one request, and a refused input. The
// two handlers serve two services with the same clock and their own databases, which
// the same mutations keep identical.
func TestRecordEventMatchesGqlgen(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	var svcs [2]*awareness.Service
	for i := range svcs {
		store, err := models.OpenSQLite(ctx, filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		svcs[i] = awareness.NewService(awareness.Config{Store: store, Now: func() time.Time { return now }})
		t.Cleanup(svcs[i].Hub().Close)
	}
	fast, fp := newHandler(Config{Service: svcs[0]})
	plain := NewHandler(Config{Service: svcs[1], gqlgenEventPages: true})

	const ev = `sequence kind actorType actorId summary occurredAt runId payload sessionKey agentId __typename`
	const vars = `($in: RecordEventInput!, $skip: Boolean!)`
	queries := []struct {
		name, q string
		written int64
	}{
		{"all fields", `mutation` + vars + ` { recordEvent(input: $in) { recorded stateVersion noticesOpened __typename
  event { ` + ev + ` } skippedWatchers { watcher reason __typename } } }`, 1},
		{"aliases", `mutation` + vars + ` { r: recordEvent(input: $in) { v: stateVersion recorded e: event { n: sequence summary }
  event { kind } s: skippedWatchers { reason } } }`, 1},
		{"fragments", `mutation` + vars + ` { recordEvent(input: $in) { ...R ... on RecordEventResult { noticesOpened @skip(if: $skip) }
  event @include(if: $skip) { kind } } } fragment R on RecordEventResult { recorded event { ...E summary } } fragment E on StateEvent { sequence occurredAt }`, 1},
		{"two fields", `mutation` + vars + ` { a: recordEvent(input: $in) { recorded event { sequence } }
  b: recordEvent(input: $in) @skip(if: $skip) { stateVersion skippedWatchers { watcher } } }`, 2},
	}
	for i, in := range []map[string]any{
		{"kind": "human_direct_message", "actorType": "human", "actorId": "+15550100", "channel": "telegram", "turns": 2,
			"summary": `é漢字🙂 "quoted" \ <b>&amp;</b>`},
		{"kind": "run_failed", "actorType": "agent", "runId": "run-7", "outcome": "timeout",
			"watchers": []string{"agent:main:main", "main", "agent:main:subagent:rec"}},
		{"kind": "goal_changed", "actorType": "human", "dedupeKey": "once", "summary": "first"},
		{"kind": "goal_changed", "actorType": "human", "dedupeKey": "once", "summary": "deduplicated"},
		{"kind": "goal_changed", "actorType": "human", "summary": "bad\x01summary"}, // refused
	} {
		in["sessionKey"] = "agent:main:subagent:rec"
		for _, q := range queries {
			for _, skip := range []bool{false, true} {
				vars := map[string]any{"in": in, "skip": skip}
				before := fp.ResultsWritten()
				got, want := post(t, fast, q.q, vars), post(t, plain, q.q, vars)
				if !bytes.Equal(got, want) {
					t.Errorf("%s, input %d, skip %v:\nfast path: %s\ngqlgen:    %s", q.name, i, skip, got, want)
				}
				written := q.written
				if skip && q.name == "two fields" {
					written = 1
				}
				if strings.Contains(string(want), `"errors"`) {
					written = 0
				}
				if got := fp.ResultsWritten() - before; got != written {
					t.Errorf("%s, input %d, skip %v: the fast path wrote %d answers, want %d: %s", q.name, i, skip, got, written, want)
				}
			}
		}
	}
}

// ExecSQLite runs q on the SQLite database at path behind the store's back (for the
// tests of package graph_test too).
func ExecSQLite(t *testing.T, path, q string) {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=5000")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
