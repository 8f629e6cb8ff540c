package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

// handlerEnv is the real /query handler over a fresh SQLite file, called in-process
// (no network) by fuzz targets.
type handlerEnv struct {
	h     http.Handler
	store *models.Store
	svc   *awareness.Service
}

func newHandlerEnv(tb testing.TB) *handlerEnv {
	tb.Helper()
	store, err := models.OpenSQLite(context.Background(), filepath.Join(tb.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		tb.Fatalf("open store: %v", err)
	}
	svc := awareness.NewService(awareness.Config{Store: store})
	tb.Cleanup(func() {
		svc.Hub().Close()
		store.Close()
	})
	return &handlerEnv{h: graph.NewHandler(graph.Config{Service: svc}), store: store, svc: svc}
}

func (e *handlerEnv) do(tb testing.TB, body []byte) (int, gqlResponse) {
	tb.Helper()
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	e.h.ServeHTTP(rec, req)
	var r gqlResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		tb.Fatalf("HTTP %d: the response is not JSON: %v\n%.300s", rec.Code, err, rec.Body.Bytes())
	}
	return rec.Code, r
}

// TestDepthLimit: gqlgen has no depth limit of its own; DepthLimit refuses an
// operation nested deeper than MaxQueryDepth (fragments included), and lets the
// standard introspection query through (TestIntrospectionEnabledAndLimitsEnforced).
func TestDepthLimit(t *testing.T) {
	t.Parallel()
	e := newHandlerEnv(t)
	nested := func(levels int, viaFragment bool) string {
		// __schema { types { fields { type { ofType { ofType … { name } } } } } }
		inner := strings.Repeat("ofType { ", levels-5) + "name" + strings.Repeat(" }", levels-5)
		if viaFragment {
			return `query { __schema { types { fields { type { ...T } } } } } fragment T on __Type { ` + inner + ` }`
		}
		return `{ __schema { types { fields { type { ` + inner + ` } } } } }`
	}
	for _, frag := range []bool{false, true} {
		body, _ := json.Marshal(map[string]any{"query": nested(graph.MaxQueryDepth, frag)})
		if _, r := e.do(t, body); len(r.Errors) > 0 {
			t.Errorf("depth %d (fragment %v) refused: %+v", graph.MaxQueryDepth, frag, r.Errors)
		}
		body, _ = json.Marshal(map[string]any{"query": nested(graph.MaxQueryDepth+1, frag)})
		_, r := e.do(t, body)
		if r.code() != "GRAPHQL_VALIDATION_FAILED" || !strings.Contains(r.Errors[0].Message, "levels deep") {
			t.Errorf("depth %d (fragment %v): %+v, want GRAPHQL_VALIDATION_FAILED about depth", graph.MaxQueryDepth+1, frag, r.Errors)
		}
	}
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// A subscriber that never reads its socket does not make the server hold every event
// for it: the hub's bounded buffer drops it (SubscriberBuffer), the socket's write
// deadline ends it (wsgorilla.WriteTimeout), and the heap stays flat while the log
// grows by tens of thousands of events. Appends do not wait for it.
func TestNonReadingSubscriberMemoryBounded(t *testing.T) {
	e := newHandlerEnv(t)
	hs := httptest.NewServer(e.h)
	t.Cleanup(hs.Close)
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, ReadBufferSize: 1024, WriteBufferSize: 1024}
	c, _, err := d.Dial("ws"+strings.TrimPrefix(hs.URL, "http")+"/query", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// The smallest receive window: the server's writes block as soon as possible.
	if tc, ok := c.UnderlyingConn().(interface{ SetReadBuffer(int) error }); ok {
		_ = tc.SetReadBuffer(1024)
	}
	for _, f := range []string{
		`{"type":"connection_init"}`,
		`{"type":"subscribe","id":"e","payload":{"query":"subscription { stateEvents { sequence kind summary sessionKey agentId occurredAt } }"}}`,
		`{"type":"subscribe","id":"n","payload":{"query":"subscription { staleNotices { watcher target text } }"}}`,
	} {
		if err := c.WriteMessage(websocket.TextMessage, []byte(f)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // the subscriptions are registered
	summary := strings.Repeat("s", awareness.MaxSummaryRunes-10)
	batch := func(round, n int) time.Duration {
		start := time.Now()
		ins := make([]awareness.RecordInput, 0, 100)
		for i := range n {
			s := fmt.Sprintf("%s %d", summary, i)
			ins = append(ins, awareness.RecordInput{
				SessionKey: fmt.Sprintf("agent:main:subagent:c%d", i%50), Kind: awareness.HumanDirectMessage,
				ActorType: awareness.ActorHuman, Summary: &s,
			})
			if len(ins) == cap(ins) {
				if _, err := e.svc.RecordEvents(context.Background(), ins); err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				ins = ins[:0]
			}
		}
		return time.Since(start)
	}
	batch(0, 1000) // warm up: caches, prepared statements, the subscriber's buffers
	before := heapInUse()
	const n = 4000
	took := batch(1, n)
	after := heapInUse()
	growth := int64(after) - int64(before)
	t.Logf("%d events (~%d KiB of frames) with a non-reading subscriber: heap %d KiB → %d KiB (%+d KiB), appends took %v",
		n, n*(awareness.MaxSummaryRunes+150)/1024, before/1024, after/1024, growth/1024, took)
	// Holding the events for the subscriber would take more than n × 500 bytes (the
	// event and its frame); the limit is half of that.
	if limit := int64(n * 500 / 2); growth > limit {
		t.Errorf("heap grew by %d KiB while %d events were appended, want < %d KiB (no growth proportional to events)", growth/1024, n, limit/1024)
	}
}

const fuzzRecordMutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) {
  recorded stateVersion noticesOpened event { sequence kind actorType actorId summary occurredAt runId payload } } }`

// FuzzRecordEventArgs drives recordEvent's arguments through the real handler over a
// real SQLite file: whatever the input, the answer is never a 5xx or an INTERNAL
// error (a panic would be one, through RecoverFunc), and a rejected input writes
// nothing (ERR-1, ERR-2, KEY-4, SIG-2).
func FuzzRecordEventArgs(f *testing.F) {
	all := uint16(0x1fff)
	f.Add("agent:main:subagent:x", "", "human_direct_message", "human", "user:alice", "", "webchat", "", "", "", int64(2), "", "agent:main:main", all)
	f.Add("agent:main:subagent:x", "", "child_spawned", "agent", "agent:main:main", "", "", "run-1", "d1", "2026-01-01T00:00:00Z", int64(0), "", "agent:main:main", uint16(0x0f))
	f.Add("global", "ops", "compacted", "system", "", "session compacted", "", "", "", "", int64(0), "", "", uint16(0x0b))
	f.Add("cron:job:run:1", "Ops!", "run_failed", "system", "", "", "", "", "", "", int64(0), "timeout", "", uint16(0x80f))
	f.Add("agent:main:", "", "goal_changed", "robot", "", "two\nlines", "", "", "", "yesterday", int64(-1), "boom", "global", all)
	f.Add("agent:main:x\x00y", "main", "nope", "human", strings.Repeat("a", 600), strings.Repeat("ü", 201), "c\x7f", "", "", "9999-12-31T23:59:59Z", int64(1)<<40, "cancelled", "agent:main:main", all)
	f.Add("AGENT:Main:Main", "", "upstream_missing", "system", "", "", "", "", "", "", int64(0), "", "agent:main:main", uint16(0x0f))
	e := newHandlerEnv(f)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, key, agentID, kind, actorType, actorID, summary, channel, runID, dedupe, occurredAt string, turns int64, outcome, watcher string, present uint16) {
		in := map[string]any{}
		for i, kv := range []struct {
			name string
			v    any
		}{
			{"sessionKey", key}, {"kind", kind}, {"actorType", actorType}, {"agentId", agentID},
			{"actorId", actorID}, {"summary", summary}, {"channel", channel}, {"runId", runID},
			{"dedupeKey", dedupe}, {"occurredAt", occurredAt}, {"turns", turns}, {"outcome", outcome},
			{"watchers", []string{watcher}},
		} {
			if present&(1<<i) != 0 {
				in[kv.name] = kv.v
			}
		}
		body, err := json.Marshal(map[string]any{"query": fuzzRecordMutation, "variables": map[string]any{"in": in}})
		if err != nil {
			t.Skip()
		}
		before, err := e.store.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		status, r := e.do(t, body)
		if status >= 500 {
			t.Fatalf("HTTP %d for %v: %+v", status, in, r.Errors)
		}
		for _, ge := range r.Errors {
			if ge.Extensions["code"] == awareness.EINTERNAL || ge.Extensions["code"] == nil {
				t.Fatalf("error without a client code for %v: %+v", in, ge)
			}
		}
		if len(r.Errors) == 0 {
			return
		}
		after, err := e.store.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if before.Events != after.Events || before.Sessions != after.Sessions || before.Cursors != after.Cursors || before.PendingNotices != after.PendingNotices {
			t.Fatalf("a rejected input (%+v) wrote: %+v → %+v", r.Errors, before, after)
		}
	})
}
