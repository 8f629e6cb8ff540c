package graph

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
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
	fast := NewHandler(Config{Service: svc})
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
			before := eventPagesWritten.Load()
			got, want := post(t, fast, q, vars), post(t, plain, q, vars)
			if !bytes.Equal(got, want) {
				t.Errorf("%s %v:\nfast path: %s\ngqlgen:    %s", name, vars, got, want)
			}
			if strings.Contains(string(want), `"errors"`) {
				t.Errorf("%s %v: %s", name, vars, want)
			}
			// Without changesSince there is no page (stateChanges is null).
			if vars["s"] != nil && eventPagesWritten.Load() == before {
				t.Errorf("%s %v: the fast path did not write the page", name, vars)
			}
		}
	}
}

// A selection the fast path does not know is left to gqlgen (which then reports the
// error it would anyway).
func TestEventPageLeavesUnknownSelectionsToGqlgen(t *testing.T) {
	cols, ok := eventColumns(nil)
	if !ok || len(cols) != 0 {
		t.Fatalf("empty selection: %v %v", cols, ok)
	}
	if writable(&awareness.Event{Kind: "bogus", ActorType: awareness.ActorHuman, OccurredAt: time.Now()}) {
		t.Error("an event of an unknown kind counts as writable")
	}
	if writable(&awareness.Event{Kind: awareness.GoalChanged, ActorType: awareness.ActorHuman}) {
		t.Error("an event without a time counts as writable")
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
