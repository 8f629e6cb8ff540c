package graph_test

import (
	"encoding/json"
	"regexp"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Tests of the notice protocol's edges through the real /query handler: bare targets of two agents
// (NTC-1, KEY-3, NTC-3), producer-passed watchers that cannot watch (WAT-4) and the
// clamped limit (REC-1).

type gqlNotice struct {
	Watcher         string `json:"watcher"`
	Target          string `json:"target"`
	TargetAgentID   string `json:"targetAgentId"`
	ChangesSince    int64  `json:"changesSince"`
	NotifiedVersion int64  `json:"notifiedVersion"`
	Text            string `json:"text"`
	Closed          bool   `json:"closed"`
}

const gqlNoticeFields = `watcher target targetAgentId changesSince notifiedVersion text closed`

func (e *env) pendingOf(t *testing.T, watcher string) []gqlNotice {
	t.Helper()
	var d struct {
		PendingNotices []gqlNotice `json:"pendingNotices"`
	}
	decode(t, e.mustPost(t, `query($w: String!) { pendingNotices(watcher: $w) { `+gqlNoticeFields+` } }`, map[string]any{"w": watcher}), &d)
	return d.PendingNotices
}

func decode(t *testing.T, raw json.RawMessage, dst any) {
	t.Helper()
	if err := json.Unmarshal(raw, dst); err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
}

// textCall is what a notice's text tells an agent to run (NTC-1).
var textCall = regexp.MustCompile(`^Session "([^"]+)" changed \(other actor\)\. Reconcile before acting: session_status sessionKey "([^"]+)"(?: agentId "([^"]+)")? changesSince (\d+)\.$`)

// followText runs exactly the sessionStatus call a notice's text names and returns the
// agent it reached and the sequences of the events it got.
func (e *env) followText(t *testing.T, text string) (agent string, seqs []int64) {
	t.Helper()
	m := textCall.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("notice text %q does not have the NTC-1 form", text)
	}
	since, _ := strconv.ParseInt(m[4], 10, 64)
	vars := map[string]any{"k": m[2], "c": since}
	if m[3] != "" {
		vars["a"] = m[3]
	}
	var d struct {
		SessionStatus struct {
			AgentID      string `json:"agentId"`
			StateChanges struct {
				Events []struct {
					Sequence int64 `json:"sequence"`
				} `json:"events"`
			} `json:"stateChanges"`
		} `json:"sessionStatus"`
	}
	decode(t, e.mustPost(t, `query($k: String!, $a: String, $c: Int) { sessionStatus(sessionKey: $k, agentId: $a, changesSince: $c) {
  agentId stateChanges { events { sequence } } } }`, vars), &d)
	for _, ev := range d.SessionStatus.StateChanges.Events {
		seqs = append(seqs, ev.Sequence)
	}
	return d.SessionStatus.AgentID, seqs
}

// NTC-1, KEY-3, NTC-3: one watcher watches the bare `global` of agents worker and ops.
// Each notice's text names its agent, following the text reaches exactly that session,
// and watches, ackNotices and unwatch name one agent's pair, never both.
func TestBareTargetsOfTwoAgentsStayPerAgent_NTC1_NTC3_KEY3(t *testing.T) {
	e := newEnv(t)
	const w = "agent:main:main"
	for _, a := range []string{"worker", "ops"} {
		e.mustPost(t, `mutation($w: String!, $a: String) { watch(input: {watcher: $w, target: "global", targetAgentId: $a}) { watched } }`,
			map[string]any{"w": w, "a": a})
	}
	rec := func(agent string) {
		e.record(t, map[string]any{"sessionKey": "global", "agentId": agent, "kind": "goal_changed", "actorType": "human"})
	}
	rec("worker")
	rec("worker")
	rec("ops")
	rec("main") // main's global is not watched: no notice
	got := e.pendingOf(t, w)
	want := []gqlNotice{
		{w, "global", "worker", 0, 1, `Session "global" changed (other actor). Reconcile before acting: session_status sessionKey "global" agentId "worker" changesSince 0.`, false},
		{w, "global", "ops", 0, 1, `Session "global" changed (other actor). Reconcile before acting: session_status sessionKey "global" agentId "ops" changesSince 0.`, false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("pending notices (-want +got):\n%s", diff)
	}
	for _, n := range got {
		agent, seqs := e.followText(t, n.Text)
		wantSeqs := map[string][]int64{"worker": {1, 2}, "ops": {1}}[n.TargetAgentID]
		if agent != n.TargetAgentID || !cmp.Equal(seqs, wantSeqs) {
			t.Errorf("following %q reached agent %s with events %v, want %s with %v", n.Text, agent, seqs, n.TargetAgentID, wantSeqs)
		}
	}
	// A canonical target keeps the seeds' text byte for byte (no agentId).
	e.mustPost(t, `mutation { watch(input: {watcher: "agent:main:main", target: "agent:ops:direct:bob"}) { watched } }`, nil)
	e.record(t, map[string]any{"sessionKey": "agent:ops:direct:bob", "kind": "human_direct_message", "actorType": "human"})
	for _, n := range e.pendingOf(t, w) {
		if n.Target == "agent:ops:direct:bob" {
			if wantT := `Session "agent:ops:direct:bob" changed (other actor). Reconcile before acting: session_status sessionKey "agent:ops:direct:bob" changesSince 0.`; n.Text != wantT {
				t.Errorf("canonical text %q, want %q", n.Text, wantT)
			}
		}
	}

	// watches names one agent's pair; the default is main (no cursor there).
	for agent, wantN := range map[string]int{"worker": 1, "ops": 1, "main": 0} {
		var d struct {
			Watches []struct {
				TargetAgentID string `json:"targetAgentId"`
			} `json:"watches"`
		}
		decode(t, e.mustPost(t, `query($a: String) { watches(watcher: "agent:main:main", target: "global", targetAgentId: $a) { targetAgentId } }`,
			map[string]any{"a": agent}), &d)
		if len(d.Watches) != wantN || (wantN == 1 && d.Watches[0].TargetAgentID != agent) {
			t.Errorf("watches(global, %s) = %+v, want %d of that agent", agent, d.Watches, wantN)
		}
	}
	var dflt struct {
		Watches []json.RawMessage `json:"watches"`
	}
	decode(t, e.mustPost(t, `{ watches(watcher: "agent:main:main", target: "global") { target } }`, nil), &dflt)
	if len(dflt.Watches) != 0 {
		t.Errorf("watches(global) without an agent = %d cursors, want 0 (main's global)", len(dflt.Watches))
	}

	// The targets form: targetAgentId worker acknowledges worker's notice only; the
	// default (main) acknowledges neither.
	e.mustPost(t, `mutation { ackNotices(watcher: "agent:main:main", targets: ["global"]) { target } }`, nil)
	if n := len(e.pendingOf(t, w)); n != 3 {
		t.Fatalf("after acking main's global: %d pending, want 3", n)
	}
	e.mustPost(t, `mutation { ackNotices(watcher: "agent:main:main", targets: ["global"], targetAgentId: "worker") { target } }`, nil)
	since := map[string]int64{}
	for _, n := range e.pendingOf(t, w) {
		if n.Target == "global" {
			since[n.TargetAgentID] = n.ChangesSince
		}
	}
	// worker's notice was acknowledged and its follow-up (event 2) opened; ops's stays.
	if diff := cmp.Diff(map[string]int64{"worker": 1, "ops": 0}, since); diff != "" {
		t.Errorf("changesSince per agent after acking worker's global (-want +got):\n%s", diff)
	}
	// The exact form names ops's notice with its agent.
	rec("ops")
	e.mustPost(t, `mutation { ackNotices(watcher: "agent:main:main", notices: [{target: "global", targetAgentId: "ops", notifiedVersion: 1}]) { target targetAgentId changesSince } }`, nil)
	var globals []gqlNotice
	for _, n := range e.pendingOf(t, w) {
		if n.Target == "global" {
			globals = append(globals, gqlNotice{TargetAgentID: n.TargetAgentID, ChangesSince: n.ChangesSince, NotifiedVersion: n.NotifiedVersion})
		}
	}
	wantG := []gqlNotice{{TargetAgentID: "worker", ChangesSince: 1, NotifiedVersion: 2}, {TargetAgentID: "ops", ChangesSince: 1, NotifiedVersion: 2}}
	if diff := cmp.Diff(wantG, globals); diff != "" {
		t.Errorf("after the exact ack of ops's global (-want +got):\n%s", diff)
	}
	// unwatch removes one agent's pair.
	var un struct {
		Unwatch bool `json:"unwatch"`
	}
	decode(t, e.mustPost(t, `mutation { unwatch(watcher: "agent:main:main", target: "global", targetAgentId: "worker") }`, nil), &un)
	if !un.Unwatch {
		t.Errorf("unwatch of worker's global: false")
	}
	decode(t, e.mustPost(t, `{ watches(watcher: "agent:main:main", target: "global", targetAgentId: "ops") { target } }`, nil), &dflt)
	if len(dflt.Watches) != 1 {
		t.Errorf("unwatching worker's global removed ops's cursor")
	}
}

// WAT-4: producer-passed watchers mixing valid, bare, self and malformed keys: the event
// is recorded, the valid watchers are notified, the rest are reported with a reason.
func TestRecordEventSkipsWatchersThatCannotWatch_WAT4(t *testing.T) {
	e := newEnv(t)
	var d struct {
		RecordEvent struct {
			Recorded        bool `json:"recorded"`
			StateVersion    int  `json:"stateVersion"`
			NoticesOpened   int  `json:"noticesOpened"`
			SkippedWatchers []struct {
				Watcher string `json:"watcher"`
				Reason  string `json:"reason"`
			} `json:"skippedWatchers"`
		} `json:"recordEvent"`
	}
	decode(t, e.mustPost(t, `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded stateVersion noticesOpened skippedWatchers { watcher reason } } }`,
		map[string]any{"in": map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human",
			"watchers": []string{"agent:main:main", "global", child, "cron:nightly", "agent:main:", "agent:ops:main"}}}), &d)
	r := d.RecordEvent
	if !r.Recorded || r.StateVersion != 1 || r.NoticesOpened != 2 {
		t.Fatalf("recordEvent = %+v, want recorded at 1 with 2 notices", r)
	}
	var skipped []string
	for _, s := range r.SkippedWatchers {
		if s.Reason == "" {
			t.Errorf("skipped %q without a reason", s.Watcher)
		}
		skipped = append(skipped, s.Watcher)
	}
	if diff := cmp.Diff([]string{"global", child, "cron:nightly", "agent:main:"}, skipped); diff != "" {
		t.Errorf("skipped watchers (-want +got):\n%s", diff)
	}
	for _, w := range []string{"agent:main:main", "agent:ops:main"} {
		if n := e.pendingOf(t, w); len(n) != 1 || n[0].Target != child {
			t.Errorf("%s: pending %+v, want one notice on the child", w, n)
		}
	}
	// An event without bad watchers reports an empty list, not null.
	raw := e.mustPost(t, `mutation { recordEvent(input: {sessionKey: "agent:main:subagent:child", kind: run_completed, actorType: system}) { skippedWatchers { watcher } } }`, nil)
	if want := `{"recordEvent":{"skippedWatchers":[]}}`; string(raw) != want {
		t.Errorf("got %s, want %s", raw, want)
	}
}

// REC-1: a limit above 200 is clamped to 200, with truncated and nextChangesSince.
func TestSessionStatusLimitAbove200IsClamped_REC1(t *testing.T) {
	e := newEnv(t)
	for range 205 {
		e.record(t, map[string]any{"sessionKey": child, "kind": "run_completed", "actorType": "system"})
	}
	var d struct {
		SessionStatus struct {
			StateChanges struct {
				Events           []json.RawMessage `json:"events"`
				Truncated        bool              `json:"truncated"`
				NextChangesSince int64             `json:"nextChangesSince"`
			} `json:"stateChanges"`
		} `json:"sessionStatus"`
	}
	decode(t, e.mustPost(t, `query($k: String!) { sessionStatus(sessionKey: $k, changesSince: 0, limit: 500) { stateChanges { events { sequence } truncated nextChangesSince } } }`,
		map[string]any{"k": child}), &d)
	c := d.SessionStatus.StateChanges
	if len(c.Events) != 200 || !c.Truncated || c.NextChangesSince != 200 {
		t.Errorf("limit 500: %d events, truncated %v, next %d; want 200, true, 200", len(c.Events), c.Truncated, c.NextChangesSince)
	}
}
