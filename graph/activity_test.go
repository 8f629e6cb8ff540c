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

// TestNoticeActivityQuery: noticeActivity counts the notices this process opened and
// acknowledged in the current minute, about one target or all, and refuses a window
// outside 1..1440 minutes.
func TestNoticeActivityQuery(t *testing.T) {
	e := newEnv(t)
	e.record(t, map[string]any{"sessionKey": child, "kind": "child_spawned", "actorType": "agent", "actorId": parent, "watchers": []string{parent}})
	e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "actorId": "telegram:ana"})
	e.mustPost(t, `mutation($w: String!, $n: [NoticeRef!]) { ackNotices(watcher: $w, notices: $n) { target } }`,
		map[string]any{"w": parent, "n": []any{map[string]any{"target": child, "notifiedVersion": 2}}})
	type bucket struct {
		Minute       string
		Opened       int
		Acknowledged int
	}
	read := func(q string, vars map[string]any) (opened, acked int) {
		t.Helper()
		var d struct{ NoticeActivity []bucket }
		if err := json.Unmarshal(e.mustPost(t, q, vars), &d); err != nil {
			t.Fatal(err)
		}
		for _, b := range d.NoticeActivity {
			if m, err := time.Parse(time.RFC3339, b.Minute); err != nil || time.Since(m) > 2*time.Minute {
				t.Errorf("bucket minute %q is not this minute (%v)", b.Minute, err)
			}
			opened += b.Opened
			acked += b.Acknowledged
		}
		return opened, acked
	}
	if o, a := read(`{ noticeActivity { minute opened acknowledged } }`, nil); o != 1 || a != 1 {
		t.Errorf("every session: opened %d acknowledged %d, want 1 and 1", o, a)
	}
	if o, a := read(`query($k: String) { noticeActivity(sessionKey: $k) { minute opened acknowledged } }`, map[string]any{"k": child}); o != 1 || a != 1 {
		t.Errorf("about %s: opened %d acknowledged %d, want 1 and 1", child, o, a)
	}
	if o, a := read(`query($k: String) { noticeActivity(sessionKey: $k) { minute opened acknowledged } }`, map[string]any{"k": parent}); o != 0 || a != 0 {
		t.Errorf("about %s: opened %d acknowledged %d, want none", parent, o, a)
	}
	if _, r, raw := e.post(t, `{ noticeActivity(sinceMinutes: 0) { opened } }`, nil); r.code() != "INVALID_ARGUMENT" {
		t.Errorf("sinceMinutes 0: want INVALID_ARGUMENT, got %s", raw)
	}
}
