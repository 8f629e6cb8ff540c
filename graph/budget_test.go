package graph_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/models"
)

// budgetEnv serves /query over a fresh SQLite file with the tokens of the
// authorization matrix (admin, dev, ops) and the budget of limits, which also admits
// the service's streams.
type budgetEnv struct {
	url    string
	h      http.Handler
	svc    *awareness.Service
	store  *models.Store
	budget *budget.Budget
}

func newBudgetEnv(t *testing.T, limits budget.Limits, withAuth bool) *budgetEnv {
	t.Helper()
	var k *auth.Keyring
	if withAuth {
		var err error
		k, err = auth.Parse([]byte(`{"tokens":[
		  {"name":"admin","role":"admin","token":"` + mxAdmin + `"},
		  {"name":"dev","role":"agent:dev","token":"` + mxDev + `"},
		  {"name":"ops","role":"agent:ops","token":"` + mxOpsTok + `"}]}`))
		if err != nil {
			t.Fatal(err)
		}
	}
	store, err := models.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := budget.New(limits)
	svc := awareness.NewService(awareness.Config{Store: store, Streams: b})
	h := graph.NewHandler(graph.Config{Service: svc, Auth: k, Budget: b})
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		svc.Hub().Close()
		store.Close()
	})
	return &budgetEnv{url: hs.URL + "/query", h: h, svc: svc, store: store, budget: b}
}

// sse opens a graphql-sse stream of query as token and returns the first data
// event's payload and a function that ends the stream.
func (e *budgetEnv) sse(t *testing.T, token, query string) (first gqlResponse, end func()) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	end = func() { cancel(); resp.Body.Close() }
	data := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && d != "" {
				data <- d
				return
			}
		}
		close(data)
	}()
	select {
	case d, ok := <-data:
		if ok {
			_ = json.Unmarshal([]byte(d), &first)
		}
	case <-time.After(500 * time.Millisecond):
		// A live stream with nothing pending sends nothing: it is open.
	}
	return first, end
}

// wsAs dials protocol and initialises the connection with token.
func (e *budgetEnv) wsAs(t *testing.T, protocol, token string) *wsClient {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{protocol}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws"+strings.TrimPrefix(e.url, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	w := &wsClient{t: t, c: c}
	payload, _ := json.Marshal(map[string]any{"Authorization": "Bearer " + token})
	w.send(wsFrame{Type: "connection_init", Payload: payload})
	if f := w.next(); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	return w
}

// waitStreams polls until caller holds n streams.
func (e *budgetEnv) waitStreams(t *testing.T, caller budget.Caller, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); e.budget.Streams(caller) != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d streams, want %d", caller, e.budget.Streams(caller), n)
		}
	}
}

// errorsOf returns the errors a WebSocket frame carries (an error frame, or a next
// with errors).
func errorsOf(f wsFrame) gqlResponse {
	var r gqlResponse
	if f.Type == "error" {
		_ = json.Unmarshal(f.Payload, &r.Errors)
		return r
	}
	_ = json.Unmarshal(f.Payload, &r)
	return r
}

// TestStreamsCappedPerToken_ERR4: one token holds at most MaxStreams subscriptions at
// once, over every transport and connection together (SSE streams, graphql-transport-ws
// and graphql-ws subscriptions); the next is refused with RATE_LIMITED and a retry
// hint, another token is not affected, and a stream that ends frees its slot.
func TestStreamsCappedPerToken_ERR4(t *testing.T) {
	t.Parallel()
	e := newBudgetEnv(t, budget.Limits{MaxStreams: 3}, true)
	ops := budget.Caller("token agent:ops ops")
	const notices = `subscription { staleNotices(watcher: "agent:ops:main") { text } }`
	_, end1 := e.sse(t, mxOpsTok, notices)
	defer end1()
	_, end2 := e.sse(t, mxOpsTok, notices)
	defer end2()
	w := e.wsAs(t, "graphql-transport-ws", mxOpsTok)
	w.subscribe("1", `subscription { stateEvents(sessionKey: "agent:ops:main") { sequence } }`)
	e.waitStreams(t, ops, 3)

	r, end4 := e.sse(t, mxOpsTok, notices)
	end4()
	if r.code() != awareness.ERATELIMITED || r.Errors[0].Extensions["retryAfterMs"] == nil {
		t.Errorf("a fourth stream over SSE: %+v, want RATE_LIMITED with retryAfterMs", r.Errors)
	}
	legacy := e.wsAs(t, "graphql-ws", mxOpsTok)
	legacy.subscribe("9", notices)
	if f := legacy.next(); errorsOf(f).code() != awareness.ERATELIMITED {
		t.Errorf("a fourth stream on another WebSocket: %s %s, want RATE_LIMITED", f.Type, f.Payload)
	}
	if got := e.budget.Streams(ops); got != 3 {
		t.Errorf("after two refusals ops holds %d streams, want 3", got)
	}
	// Another token has its own slots.
	_, endDev := e.sse(t, mxDev, `subscription { staleNotices(watcher: "agent:dev:main") { text } }`)
	defer endDev()
	e.waitStreams(t, "token agent:dev dev", 1)

	// A stream that ends gives its slot back, whichever transport it was.
	end1()
	e.waitStreams(t, ops, 2)
	w.send(wsFrame{Type: "complete", ID: "1"})
	e.waitStreams(t, ops, 1)
	legacy.subscribe("10", notices)
	e.waitStreams(t, ops, 2)
	legacy.c.Close()
	e.waitStreams(t, ops, 1)
}

// TestBudgetPerRemoteAddress_ERR4: without authentication a caller is its remote
// address: every connection of one address draws from one bucket of query points (a
// new connection does not refill it), another address has its own, and a request
// that needs more than the bucket ever holds is refused for good
// (COMPLEXITY_LIMIT_EXCEEDED), not told to retry.
func TestBudgetPerRemoteAddress_ERR4(t *testing.T) {
	t.Parallel()
	e := newBudgetEnv(t, budget.Limits{PointsPerSecond: 0.001, PointsBurst: 1000}, false)
	const page = `{ sessionStatus(sessionKey: "agent:main:main", changesSince: 0, limit: 200) { stateChanges { events { sequence } } } }`
	cost := graph.OperationCost(mustValidate(t, page).Operations[0], nil) // 403
	ask := func(remote, q string) gqlResponse {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"query": q})
		req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = remote
		rec := httptest.NewRecorder()
		e.h.ServeHTTP(rec, req)
		var r gqlResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", rec.Body, err)
		}
		return r
	}
	// Parsing the new document, then two pages: 2 + 2 × 403 of 1000 points.
	for i, port := range []string{"40001", "40002"} {
		if r := ask("192.0.2.7:"+port, page); len(r.Errors) > 0 {
			t.Fatalf("page %d: %+v", i+1, r.Errors)
		}
	}
	r := ask("192.0.2.7:40003", page) // a third connection of the address
	if r.code() != awareness.ERATELIMITED || r.Errors[0].Extensions["retryAfterMs"] == nil {
		t.Fatalf("a third page (cost %d) from a new connection of the address: %+v, want RATE_LIMITED with retryAfterMs", cost, r.Errors)
	}
	if r := ask("[::ffff:192.0.2.7]:1", page); r.code() != awareness.ERATELIMITED {
		t.Errorf("the address in its IPv6 form: %+v, want the same budget", r.Errors)
	}
	if r := ask("192.0.2.8:40001", page); len(r.Errors) > 0 {
		t.Errorf("another address: %+v, want its own budget", r.Errors)
	}
	huge := `{ sessionsList(first: 500) { sessions { sessionKey agentId } } }` // 1 + 500 + 1 + 1000
	if r := ask("192.0.2.9:1", huge); r.code() != awareness.ECOMPLEXITY || r.Errors[0].Extensions["retryAfterMs"] != nil {
		t.Errorf("a request above the burst: %+v, want COMPLEXITY_LIMIT_EXCEEDED without retryAfterMs", r.Errors)
	}
	if r := ask("192.0.2.9:1", `{ sessionStatus(sessionKey: "agent:main:main") { stateVersion } }`); len(r.Errors) > 0 {
		t.Errorf("a refusal for good took points: %+v", r.Errors)
	}
}

// TestWritesPerToken_ERR4: every mutation field is a write of its token, and so is a
// subscription started; a token past its writes is refused with RATE_LIMITED and a
// retry hint and writes nothing, over HTTP and WebSocket alike, while its queries,
// which spend points, go on.
func TestWritesPerToken_ERR4(t *testing.T) {
	t.Parallel()
	e := newBudgetEnv(t, budget.Limits{WritesPerSecond: 0.001, WritesBurst: 30}, true)
	var b strings.Builder
	b.WriteString("mutation {")
	for i := range graph.MaxMutationFields {
		fmt.Fprintf(&b, ` r%d: recordEvent(input: {sessionKey: "agent:ops:subagent:w%d", kind: goal_changed, actorType: agent}) { recorded }`, i, i)
	}
	ten := b.String() + " }"
	for i := range 3 {
		if r := postAs(t, http.DefaultClient, e.url, mxOpsTok, ten); len(r.Errors) > 0 {
			t.Fatalf("request %d of 10 writes: %+v", i+1, r.Errors)
		}
	}
	before, _ := e.store.Stats(context.Background())
	r := postAs(t, http.DefaultClient, e.url, mxOpsTok, rateMutation)
	if r.code() != awareness.ERATELIMITED || r.Errors[0].Extensions["retryAfterMs"] == nil {
		t.Fatalf("the 31st write: %+v, want RATE_LIMITED with retryAfterMs", r.Errors)
	}
	if after, _ := e.store.Stats(context.Background()); !sameCounts(before, after) {
		t.Errorf("a refused write wrote: %+v → %+v", before, after)
	}
	// A subscription is a write too: the exhausted token cannot start one.
	w := e.wsAs(t, "graphql-transport-ws", mxOpsTok)
	w.subscribe("1", `subscription { stateEvents(sessionKey: "agent:ops:main") { sequence } }`)
	if f := w.next(); errorsOf(f).code() != awareness.ERATELIMITED {
		t.Errorf("a subscription of a token out of writes: %s %s, want RATE_LIMITED", f.Type, f.Payload)
	}
	// Queries do not spend writes.
	if r := postAs(t, http.DefaultClient, e.url, mxOpsTok, `{ sessionStatus(sessionKey: "agent:ops:main") { stateVersion } }`); len(r.Errors) > 0 {
		t.Errorf("a query of a token out of writes: %+v", r.Errors)
	}
}

// TestAdminAnswersDuringAgentFlood_ERR4: an agent token flooding the service with the
// most expensive documents it may send (one activity over a day of its events per
// request, from eight connections at once) spends its query points and is refused;
// meanwhile an admin's query answers about as fast as on an idle service. The bound
// is generous (the machine may be loaded): the median during the flood within ten
// times the idle median plus 100 ms; without the budget the same flood keeps every
// core busy for as long as it lasts.
func TestAdminAnswersDuringAgentFlood_ERR4(t *testing.T) {
	e := newBudgetEnv(t, budget.DefaultLimits(), true)
	seedEvents(t, e.svc, "ops", 20_000)
	adminQuery := `{ sessionsList(first: 20) { sessions { sessionKey stateVersion } } }`
	median := func(n int) time.Duration {
		var ds []time.Duration
		for range n {
			start := time.Now()
			if r := postAs(t, http.DefaultClient, e.url, mxAdmin, adminQuery); len(r.Errors) > 0 {
				t.Fatalf("admin: %+v", r.Errors)
			}
			ds = append(ds, time.Since(start))
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	median(5) // warm the query cache and the connections
	idle := median(31)

	var (
		stop              atomic.Bool
		wg                sync.WaitGroup
		answered, refused atomic.Int64
	)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 8, MaxIdleConnsPerHost: 8}}
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				q := fmt.Sprintf(`{ a%d_%d: activity(sinceMinutes: 1440) { count } }`, g, i%50)
				code, err := tryPost(client, e.url, mxOpsTok, q)
				switch {
				case err != nil:
					t.Errorf("flood: %v", err)
					return
				case code == "":
					answered.Add(1)
				case code == awareness.ERATELIMITED:
					refused.Add(1)
				default:
					t.Errorf("flood: code %s", code)
					return
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond) // the flood's burst is spent by now
	start := time.Now()
	during := median(31)
	stop.Store(true)
	wg.Wait()
	flood := time.Since(start)
	t.Logf("admin median %v idle, %v during the flood (load %s); the agent's flood: %d answered, %d refused in %v",
		idle, during, loadAverage(), answered.Load(), refused.Load(), flood.Round(time.Millisecond))
	if refused.Load() == 0 {
		t.Error("the flood was never refused")
	}
	// Answered at most its burst and its rate over the flood's time, in documents.
	perDoc := float64(graph.ActivityReadCost + 3)
	if most := (budget.DefaultPointsBurst+budget.DefaultPointsPerSecond*(flood.Seconds()+0.5))/perDoc + 2; float64(answered.Load()) > most {
		t.Errorf("the flood got %d documents answered, more than its budget allows (%.0f)", answered.Load(), most)
	}
	if limit := 10*idle + 100*time.Millisecond; during > limit {
		t.Errorf("admin median during the flood %v, over %v (ten times the idle %v, plus 100 ms)", during, limit, idle)
	}
}

// tryPost sends query as token and returns the code of its first error ("" when it
// was answered); it may run on any goroutine.
func tryPost(c *http.Client, url, token, query string) (string, error) {
	body, _ := json.Marshal(map[string]any{"query": query})
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var r gqlResponse
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return "", err
	}
	return r.code(), nil
}

// TestReplayWithinDefaultWriteBudget_ERR4: with a token and the default limits, a
// gateway's outbox of 10,000 spooled events replays at once, in 50 recordEvents of
// MaxRecordBatch inputs (a batch counts its inputs), none refused, on both
// databases; the next batch beyond the burst would wait for the rate. The time is
// logged, not asserted (bench/ measures it).
func TestReplayWithinDefaultWriteBudget_ERR4(t *testing.T) {
	t.Parallel()
	k, err := auth.Parse([]byte(`{"tokens":[{"name":"ops","role":"agent:ops","token":"` + mxOpsTok + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	const events = 10_000
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			store := be.open(t)
			b := budget.New(budget.DefaultLimits())
			svc := awareness.NewService(awareness.Config{Store: store, Streams: b})
			hs := httptest.NewServer(graph.NewHandler(graph.Config{Service: svc, Auth: k, Budget: b}))
			t.Cleanup(func() {
				hs.Close()
				svc.Hub().Close()
				store.Close()
			})
			const doc = `mutation($ins: [RecordEventInput!]!) { recordEvents(inputs: $ins) { index error { code message } } }`
			start := time.Now()
			for batch := range events / awareness.MaxRecordBatch {
				ins := make([]any, awareness.MaxRecordBatch)
				for i := range ins {
					n := batch*awareness.MaxRecordBatch + i
					ins[i] = map[string]any{"sessionKey": fmt.Sprintf("agent:ops:subagent:s%d", n%20), "kind": "run_completed",
						"actorType": "system", "dedupeKey": fmt.Sprintf("outbox-%d", n)}
				}
				body, _ := json.Marshal(map[string]any{"query": doc, "variables": map[string]any{"ins": ins}})
				req, _ := http.NewRequest(http.MethodPost, hs.URL+"/query", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer "+mxOpsTok)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var r struct {
					Errors []gqlError `json:"errors"`
					Data   struct {
						RecordEvents []struct {
							Error *struct{ Code, Message string }
						} `json:"recordEvents"`
					} `json:"data"`
				}
				err = json.NewDecoder(resp.Body).Decode(&r)
				resp.Body.Close()
				if err != nil || len(r.Errors) > 0 || len(r.Data.RecordEvents) != awareness.MaxRecordBatch {
					t.Fatalf("batch %d: %v %+v (%d items)", batch+1, err, r.Errors, len(r.Data.RecordEvents))
				}
				for _, it := range r.Data.RecordEvents {
					if it.Error != nil {
						t.Fatalf("batch %d: an input refused: %+v", batch+1, it.Error)
					}
				}
			}
			elapsed := time.Since(start)
			st, err := store.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.Events != events {
				t.Errorf("%d events stored, want %d", st.Events, events)
			}
			t.Logf("%s: %d events in %d batches replayed in %v with the default limits (load %s)", be.name, events, events/awareness.MaxRecordBatch, elapsed.Round(time.Millisecond), loadAverage())
		})
	}
}
