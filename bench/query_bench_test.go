package bench

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/awareness/awareness/bench/internal/rawappend"
	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
)

// Query fixture (B4): querySessions sessions of queryEvents events each; every query
// asks for changesSince in [0, queryEvents-200] and so gets a full page of 200.
const (
	querySessions = 20
	queryEvents   = 1000
	queryPage     = awareness.MaxChangesLimit
)

// statusQuery is the GraphQL operation of B4 and L3: every field of a page of events.
const statusQuery = `query($k: String!, $s: Int) { sessionStatus(sessionKey: $k, changesSince: $s) {
  sessionKey agentId stateVersion
  stateChanges { events { sequence kind actorType actorId summary occurredAt runId payload }
    historyGap truncated earliestAvailableSequence nextChangesSince } } }`

func queryKey(i int) string { return "agent:bench:q" + strconv.Itoa(i) }

// seedQuery writes the B4 fixture with raw SQL in one transaction (fast, so that every
// interleaved run can afford a fresh one): the events ValidateRecord makes of a mix of
// kinds, actors, run ids and payloads, stored as the store stores them, and the heads.
func seedQuery(tb testing.TB, h dbHandle) {
	tb.Helper()
	db := h.rawWrite(tb)
	tx, err := db.Begin()
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback()
	head, err := tx.Prepare(h.rebind("INSERT INTO sessions (agent_id, session_key, kind, state_version, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)"))
	if err != nil {
		tb.Fatal(err)
	}
	ins, err := tx.Prepare(h.rebind(rawappend.EventInsert))
	if err != nil {
		tb.Fatal(err)
	}
	human, channel := "user:alice", "webchat"
	timeout := awareness.OutcomeTimeout
	now := time.Now()
	for s := range querySessions {
		key := queryKey(s)
		if _, err := head.Exec("bench", key, string(awareness.ClassifyKey(key)), queryEvents, now.UnixNano(), now.UnixNano()); err != nil {
			tb.Fatal(err)
		}
		for i := range queryEvents {
			in := awareness.RecordInput{SessionKey: key}
			run := "run-" + strconv.Itoa(i)
			switch i % 4 {
			case 0:
				in.Kind, in.ActorType, in.ActorID, in.RunID = awareness.RunCompleted, awareness.ActorAgent, &benchActor, &run
			case 1:
				in.Kind, in.ActorType, in.ActorID, in.Channel = awareness.HumanDirectMessage, awareness.ActorHuman, &human, &channel
			case 2:
				in.Kind, in.ActorType, in.ActorID, in.RunID, in.Outcome = awareness.RunFailed, awareness.ActorAgent, &benchActor, &run, &timeout
			default:
				in.Kind, in.ActorType = awareness.GoalChanged, awareness.ActorHuman
			}
			ne, err := awareness.ValidateRecord(in, now)
			if err != nil {
				tb.Fatal(err)
			}
			ev := ne.Event
			var payload any
			if !ev.Payload.IsZero() {
				b, _ := json.Marshal(ev.Payload)
				payload = string(b)
			}
			if _, err := ins.Exec("bench", key, i+1, string(ev.Kind), string(ev.ActorType), nullable(ev.ActorID), ev.Summary,
				ev.OccurredAt.UnixNano(), nullable(ev.RunID), payload, nil, now.UnixNano()); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := tx.Commit(); err != nil {
		tb.Fatal(err)
	}
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// rawEvent is the JSON of one event as the GraphQL response spells it.
type rawEvent struct {
	Sequence   int64           `json:"sequence"`
	Kind       string          `json:"kind"`
	ActorType  string          `json:"actorType"`
	ActorID    *string         `json:"actorId"`
	Summary    string          `json:"summary"`
	OccurredAt time.Time       `json:"occurredAt"`
	RunID      *string         `json:"runId"`
	Payload    json.RawMessage `json:"payload"`
}

const rawRangeScan = `SELECT sequence, kind, actor_type, actor_id, summary, occurred_at, run_id, payload_json
FROM events WHERE agent_id = ? AND session_key = ? AND sequence > ? ORDER BY sequence LIMIT ?`

// rawStatus is B4's baseline: the range scan with a prepared statement, then
// encoding/json of the rows.
func rawStatus(ctx context.Context, stmt *sql.Stmt, key string, after int64) ([]byte, int, error) {
	rows, err := stmt.QueryContext(ctx, "bench", key, after, queryPage)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	evs := make([]rawEvent, 0, queryPage)
	for rows.Next() {
		var (
			e        rawEvent
			occurred int64
			payload  sql.NullString
		)
		if err := rows.Scan(&e.Sequence, &e.Kind, &e.ActorType, &e.ActorID, &e.Summary, &occurred, &e.RunID, &payload); err != nil {
			return nil, 0, err
		}
		e.OccurredAt = time.Unix(0, occurred).UTC()
		if payload.Valid {
			e.Payload = json.RawMessage(payload.String)
		}
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, err
	}
	out, err := json.Marshal(struct {
		Events []rawEvent `json:"events"`
	}{evs})
	return out, len(evs), err
}

func statusBody(key string, after int64) []byte {
	b, _ := json.Marshal(map[string]any{"query": statusQuery, "variables": map[string]any{"k": key, "s": after}})
	return b
}

// BenchmarkSessionStatus is B4: sessionStatus(changesSince) returning 200 events.
// impl=raw is the range scan + encoding/json; impl=svc is the GraphQL handler
// (graph.NewHandler, a POST served in process, no network); impl=svc-nogql is
// Service.SessionStatus; impl=store is Store.ReadChanges. Each reports p50-ns and
// p99-ns over its iterations. The service's reads run under a cancellable context, as
// a server's requests do (net/http cancels a request's context when its connection
// ends); the raw scan is the floor and keeps context.Background.
func BenchmarkSessionStatus(b *testing.B) {
	ctx := context.Background()
	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, be := range backends {
		h := be.fresh(b)
		seedQuery(b, h)
		store := h.store(b)
		rng := func() (string, int64) {
			return queryKey(rand.IntN(querySessions)), int64(rand.IntN(queryEvents - queryPage + 1))
		}
		run := func(b *testing.B, op func(key string, after int64) error) {
			lat := make(latencies, 0, b.N)
			b.ResetTimer()
			for range b.N {
				key, after := rng()
				t0 := time.Now()
				if err := op(key, after); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			lat.report(b)
		}
		b.Run("impl=raw/db="+be.name, func(b *testing.B) {
			stmt, err := h.rawRead(b).Prepare(h.rebind(rawRangeScan))
			if err != nil {
				b.Fatal(err)
			}
			defer stmt.Close()
			run(b, func(key string, after int64) error {
				_, n, err := rawStatus(ctx, stmt, key, after)
				if err == nil && n != queryPage {
					b.Fatalf("raw scan returned %d rows", n)
				}
				return err
			})
		})
		svc := awareness.NewService(awareness.Config{Store: store})
		handler := graph.NewHandler(graph.Config{Service: svc})
		b.Run("impl=svc/db="+be.name, func(b *testing.B) {
			checkStatusResponse(b, handler)
			run(b, func(key string, after int64) error {
				rec := httptest.NewRecorder()
				req := httptest.NewRequestWithContext(reqCtx, http.MethodPost, "/query", bytes.NewReader(statusBody(key, after)))
				req.Header.Set("Content-Type", "application/json")
				handler.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
				}
				return nil
			})
		})
		b.Run("impl=svc-nogql/db="+be.name, func(b *testing.B) {
			run(b, func(key string, after int64) error {
				st, err := svc.SessionStatus(reqCtx, key, nil, &after, nil)
				if err == nil && len(st.Changes.Events) != queryPage {
					b.Fatalf("SessionStatus returned %d events", len(st.Changes.Events))
				}
				return err
			})
		})
		b.Run("impl=store/db="+be.name, func(b *testing.B) {
			run(b, func(key string, after int64) error {
				ch, err := store.ReadChanges(reqCtx, awareness.SessionRef{AgentID: "bench", Key: key}, after, queryPage)
				if err == nil && len(ch.Events) != queryPage {
					b.Fatalf("ReadChanges returned %d events", len(ch.Events))
				}
				return err
			})
		})
	}
}

// checkStatusResponse checks once that the handler answers B4's query with a full
// page and no errors.
func checkStatusResponse(tb testing.TB, handler http.Handler) {
	tb.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(statusBody(queryKey(0), 7)))
	req.Header.Set("Content-Type", "application/json")
	handler.ServeHTTP(rec, req)
	var resp struct {
		Data struct {
			SessionStatus struct {
				StateChanges struct {
					Events []rawEvent `json:"events"`
				} `json:"stateChanges"`
			} `json:"sessionStatus"`
		} `json:"data"`
		Errors []json.RawMessage `json:"errors"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil || len(resp.Errors) > 0 {
		tb.Fatalf("HTTP %d: %v %s", rec.Code, err, rec.Body)
	}
	if evs := resp.Data.SessionStatus.StateChanges.Events; len(evs) != queryPage || evs[0].Sequence != 8 {
		tb.Fatalf("got %d events, want %d from sequence 8", len(evs), queryPage)
	}
}
