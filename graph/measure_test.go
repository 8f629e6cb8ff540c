package graph_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/introspection"

	"github.com/awareness/awareness/graph"
)

// cpuTime is the CPU time (user + system) this process has used.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestMeasureHostileCPU prints the CPU time the handler spends on each hostile
// document. It measures, it asserts nothing about time (the regression tests count
// work instead); run it with AWARENESS_MEASURE=1 for the numbers of the README.
func TestMeasureHostileCPU(t *testing.T) {
	if os.Getenv("AWARENESS_MEASURE") == "" {
		t.Skip("set AWARENESS_MEASURE=1 to measure the CPU time of the hostile documents")
	}
	e := newHandlerEnv(t)
	// Seed the session the aliased reads ask for with a full page of events.
	for i := range 200 {
		body, _ := json.Marshal(map[string]any{"query": fmt.Sprintf(`mutation { recordEvent(input: {sessionKey: "agent:main:main", kind: goal_changed, actorType: agent, summary: "goal number %d of the seeded session, long enough to weigh"}) { recorded } }`, i)})
		if _, r := e.do(t, body); len(r.Errors) > 0 {
			t.Fatal(r.Errors)
		}
	}
	// The most expensive documents the limits still accept, to bound the worst case
	// after the change.
	var worst strings.Builder
	worst.WriteString("{")
	for i := range graph.MaxExpandedSelections / graph.MaxIdenticalFields {
		worst.WriteString(strings.Repeat(fmt.Sprintf(" a%d: __typename", i), graph.MaxIdenticalFields))
	}
	worst.WriteString(" }")
	nested := "{" + strings.Repeat(` s: sessionStatus(sessionKey: "agent:main:main") { sessionKey agentId stateVersion session { sessionKey agentId kind sessionId parentSessionKey chatType provider displayName updatedAt stateVersion inputTokens outputTokens totalTokens contextTokens compactionCount memoryFlushAt memoryFlushCompactionCount extra } stateChanges { truncated historyGap } }`, graph.MaxIdenticalFields) + " }"
	var frags strings.Builder
	frags.WriteString("{")
	for i := range 50 {
		fmt.Fprintf(&frags, " ...F%d", i)
	}
	frags.WriteString(" }")
	for i := range 50 {
		fmt.Fprintf(&frags, " fragment F%d on Query {", i)
		for j := range 19 {
			fmt.Fprintf(&frags, " f%d_%d: __typename", i, j)
		}
		frags.WriteString(" }")
	}
	docs := append(hostileDocs(),
		hostileDoc{"accepted: 20 identical nested fields", nested},
		hostileDoc{"accepted: 50 fragments × 19 fields", frags.String()},
		hostileDoc{"accepted: 100 names × 20 identical", worst.String()},
		hostileDoc{"accepted: introspection", introspection.Query})
	for _, d := range docs {
		if f := os.Getenv("AWARENESS_MEASURE"); f != "1" && !strings.Contains(d.name, f) {
			continue
		}
		body, _ := json.Marshal(map[string]any{"query": d.query})
		start, wall := cpuTime(t), time.Now()
		_, r := e.do(t, body)
		cpu := cpuTime(t) - start
		msg := ""
		if len(r.Errors) > 0 {
			msg = r.Errors[0].Message
			if len(msg) > 90 {
				msg = msg[:90]
			}
		}
		t.Logf("%-40s %6d bytes  cpu %-12v wall %-12v code %q %s (data %d bytes)", d.name, len(d.query), cpu, time.Since(wall).Round(time.Millisecond), r.code(), msg, len(r.Data))
	}
}

// TestMeasureActivityCPU prints the CPU time of the activity documents of the abuse
// report, sent as an agent token over its 50,000 events (the default --max-rows):
// each alone, four at once, and an admin's query while the four run. It measures and
// asserts nothing; run it with AWARENESS_MEASURE=1 (the README's numbers).
func TestMeasureActivityCPU(t *testing.T) {
	if os.Getenv("AWARENESS_MEASURE") == "" {
		t.Skip("set AWARENESS_MEASURE=1 to measure the CPU time of the activity documents")
	}
	e := newMeasureEnv(t)
	seedEvents(t, e.svc, "ops", 50_000)
	post := func(token, q string) (gqlResponse, time.Duration) {
		body, _ := json.Marshal(map[string]any{"query": q})
		req := httptest.NewRequest(http.MethodPost, "/query", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		start := time.Now()
		e.h.ServeHTTP(rec, req)
		var r gqlResponse
		_ = json.Unmarshal(rec.Body.Bytes(), &r)
		return r, time.Since(start)
	}
	outcome := func(r gqlResponse) string {
		if c := r.code(); c != "" {
			return c
		}
		return fmt.Sprintf("answered, %d bytes", len(r.Data))
	}
	docs := []hostileDoc{
		{"1000 × activity(1440) { count }", aliasedActivity(1000, "")},
		{"500 × activity(1..500) { count }", aliasedActivity(500, "varied")},
		{"activity(1440) { minute kind count }", `{ activity(sinceMinutes: 1440) { minute kind count } }`},
		{"activity(60) and noticeActivity (the chart)", `{ activity { minute kind count } noticeActivity { minute opened } }`},
	}
	for _, d := range docs {
		cpu := cpuTime(t)
		r, wall := post(mxOpsTok, d.query)
		t.Logf("%-45s %6d bytes  cpu %-10v wall %-10v %s (load %s)", d.name, len(d.query), (cpuTime(t) - cpu).Round(10*time.Microsecond), wall.Round(10*time.Microsecond), outcome(r), loadAverage())
	}
	_, idle := post(mxAdmin, `{ sessionsList(first: 20) { sessions { sessionKey stateVersion } } }`)
	var wg sync.WaitGroup
	cpu := cpuTime(t)
	outcomes := make([]string, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, _ := post(mxOpsTok, aliasedActivity(500, "varied")+strings.Repeat(" ", i)) // four documents, none cached
			outcomes[i] = outcome(r)
		}()
	}
	_, during := post(mxAdmin, `{ sessionsList(first: 20) { sessions { sessionKey stateVersion } } }`)
	wg.Wait()
	t.Logf("4 × 500 × activity at once: cpu %v in all, %v each, %v; admin query %v idle, %v meanwhile (load %s)",
		(cpuTime(t) - cpu).Round(10*time.Microsecond), ((cpuTime(t) - cpu) / 4).Round(10*time.Microsecond), outcomes, idle.Round(10*time.Microsecond), during.Round(10*time.Microsecond), loadAverage())
}
