package graph_test

import (
	"encoding/json"
	"testing"
	"time"
)

// TestActivityQuery: activity counts the events recorded now in the current minute by
// kind, of one session or of all, and refuses a window outside 1..1440 minutes with
// INVALID_ARGUMENT.
func TestActivityQuery(t *testing.T) {
	e := newEnv(t)
	e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana"})
	e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana"})
	e.record(t, map[string]any{"sessionKey": parent, "kind": "goal_changed", "actorType": "human"})
	// Two hours ago is outside the default window of 60 minutes.
	e.record(t, map[string]any{"sessionKey": parent, "kind": "run_completed", "actorType": "system",
		"occurredAt": time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)})

	type bucket struct {
		Minute string
		Kind   string
		Count  int
	}
	read := func(q string, vars map[string]any, window time.Duration) map[string]int {
		t.Helper()
		var d struct{ Activity []bucket }
		if err := json.Unmarshal(e.mustPost(t, q, vars), &d); err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, b := range d.Activity {
			m, err := time.Parse(time.RFC3339, b.Minute)
			if err != nil || m.Second() != 0 || m.Nanosecond() != 0 {
				t.Errorf("minute %q is not the start of a minute (%v)", b.Minute, err)
			}
			if time.Since(m) > window+time.Minute {
				t.Errorf("bucket %v is outside the window", b)
			}
			out[b.Kind] += b.Count
		}
		return out
	}
	all := read(`{ activity { minute kind count } }`, nil, time.Hour)
	if all["human_direct_message"] != 2 || all["goal_changed"] != 1 || all["run_completed"] != 0 {
		t.Errorf("activity of every session = %v", all)
	}
	one := read(`query($k: String) { activity(sessionKey: $k) { minute kind count } }`, map[string]any{"k": child}, time.Hour)
	if len(one) != 1 || one["human_direct_message"] != 2 {
		t.Errorf("activity of %s = %v", child, one)
	}
	day := read(`{ activity(sinceMinutes: 1440) { minute kind count } }`, nil, 24*time.Hour)
	if day["run_completed"] != 1 {
		t.Errorf("activity of the last day = %v, want the run_completed of two hours ago", day)
	}
	for _, bad := range []string{`{ activity(sinceMinutes: 0) { count } }`, `{ activity(sinceMinutes: 1441) { count } }`,
		`{ activity(agentId: "Not Valid!") { count } }`, `{ activity(sessionKey: "") { count } }`} {
		if _, r, raw := e.post(t, bad, nil); r.code() != "INVALID_ARGUMENT" {
			t.Errorf("%s: want INVALID_ARGUMENT, got %s", bad, raw)
		}
	}
}
