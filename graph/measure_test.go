package graph_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
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
