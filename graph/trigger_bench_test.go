package graph_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
)

// benchStore is the store of the handler benchmarks: in memory, so that they measure
// the service above the store (HTTP decoding, gqlgen, resolvers, the service, the hub).
// Append records every event and opens one notice for benchWatcher on each notifying
// one; ReadStatus answers a page of benchPage events. Any other call panics (the
// embedded interface is nil).
type benchStore struct {
	awareness.Store
	mu   sync.Mutex
	seq  map[awareness.SessionRef]int64
	page []awareness.Event
}

const (
	benchWatcher = "agent:main:main"
	benchPage    = 200
)

func newBenchStore() *benchStore {
	s := &benchStore{seq: map[awareness.SessionRef]int64{}}
	ref := awareness.SessionRef{AgentID: "main", Key: "agent:main:status"}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range benchPage {
		s.page = append(s.page, awareness.Event{Session: ref, Sequence: int64(i + 1), Kind: awareness.RunCompleted,
			ActorType: awareness.ActorAgent, ActorID: "agent:main:worker", Summary: "run " + strconv.Itoa(i) + " completed",
			OccurredAt: at, RecordedAt: at, RunID: "run-" + strconv.Itoa(i), Payload: awareness.Payload{Outcome: awareness.RunOutcome("ok"), Turns: i}})
	}
	return s
}

func (s *benchStore) Append(_ context.Context, ops []*awareness.AppendOp) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, op := range ops {
		ref := op.New.Event.Session
		s.seq[ref]++
		op.Event = op.New.Event
		op.Event.Sequence = s.seq[ref]
		op.Event.RecordedAt = op.Now
		op.Recorded, op.Version = true, s.seq[ref]
		if op.New.Event.Kind.Notifies() {
			op.Opened = []awareness.Notice{{Watcher: benchWatcher, Target: ref, ChangesSince: op.Version - 1,
				NotifiedVersion: op.Version, MaterialVersion: op.Version, Text: awareness.NoticeTextOf(ref, op.Version-1),
				Wake: true, OpenedAt: op.Now}}
		}
	}
	return nil
}

func (s *benchStore) Pending(context.Context, string) ([]awareness.Notice, error) { return nil, nil }

func (s *benchStore) ReadStatus(_ context.Context, ref awareness.SessionRef, after int64, limit int) (awareness.Changes, *awareness.Session, error) {
	return awareness.Changes{Head: awareness.Head{Version: benchPage}, Events: s.page[:min(limit, len(s.page))], Earliest: 1}, nil, nil
}

// benchHandler is the /query handler over a benchStore, with one notice subscriber of
// benchWatcher (a push stream that counts what it is handed) when subscribe is set.
func benchHandler(b *testing.B, subscribe bool) (http.Handler, *atomic.Int64) {
	hub := awareness.NewHub()
	svc := awareness.NewService(awareness.Config{Store: newBenchStore(), Hub: hub})
	var got atomic.Int64
	if subscribe {
		w := benchWatcher
		unsub, err := svc.SubscribeNoticesTo(context.Background(), &w, false, awareness.Sink[awareness.Notice]{
			Push: func(*awareness.Notice, bool) bool { got.Add(1); return true },
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(unsub)
	}
	b.Cleanup(hub.Close)
	return graph.NewHandler(graph.Config{Service: svc}), &got
}

// reportCPU reports the process's CPU time per op since start (cpu-ns/op, the
// collector's included): on a shared machine it varies less than the wall time.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}

// benchPosts times b.N POSTs of bodies, in turn, to h, with allocations and
// cpu-ns/op.
func benchPosts(b *testing.B, h http.Handler, bodies ...[]byte) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime(b)
	for i := range b.N {
		benchPost(b, h, bodies[i%len(bodies)])
	}
	b.StopTimer()
	reportCPU(b, cpu)
}

func benchPost(b *testing.B, h http.Handler, body []byte) {
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || bytes.Contains(rec.Body.Bytes(), []byte(`"errors"`)) {
		b.Fatalf("HTTP %d: %s", rec.Code, rec.Body.Bytes())
	}
}

// BenchmarkRecordEventHTTP is the trigger of an own notice above the store: the
// recordEvent mutation (bench/cmd/wsload's) over HTTP, opening one notice for a
// subscribed watcher, through the /query handler and the hub.
func BenchmarkRecordEventHTTP(b *testing.B) {
	const mutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded noticesOpened } }`
	for _, sub := range []bool{false, true} {
		b.Run("subscriber="+strconv.FormatBool(sub), func(b *testing.B) {
			h, got := benchHandler(b, sub)
			bodies := make([][]byte, 64)
			for i := range bodies {
				bodies[i], _ = json.Marshal(map[string]any{"query": mutation, "variables": map[string]any{"in": map[string]any{
					"sessionKey": "agent:main:target" + strconv.Itoa(i), "kind": "human_direct_message",
					"actorType": "human", "actorId": "user:bench"}}})
			}
			benchPosts(b, h, bodies...)
			if sub {
				for deadline := time.Now().Add(5 * time.Second); got.Load() < int64(b.N) && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				if got.Load() != int64(b.N) {
					b.Fatalf("the subscriber got %d notices of %d", got.Load(), b.N)
				}
			}
		})
	}
}

// BenchmarkSessionStatusHTTP is L3's request above the store: sessionStatus with a
// page of 200 events (bench/cmd/wsload's query) over HTTP.
func BenchmarkSessionStatusHTTP(b *testing.B) {
	const query = `query($k: String!, $s: Int) { sessionStatus(sessionKey: $k, changesSince: $s) {
  sessionKey agentId stateVersion
  stateChanges { events { sequence kind actorType actorId summary occurredAt runId payload }
    historyGap truncated earliestAvailableSequence nextChangesSince } } }`
	h, _ := benchHandler(b, false)
	body, _ := json.Marshal(map[string]any{"query": query, "variables": map[string]any{"k": "agent:main:status", "s": 0}})
	benchPosts(b, h, body)
}
