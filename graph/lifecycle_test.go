package graph_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// The lifecycle over the API, on both databases (LIF-1, LIF-2, LIF-3): the generations
// notices carry, the exact acknowledgement of an earlier generation refused with
// STALE_GENERATION, a target's reset and deletion, and watch's selection of kinds with
// its refusals.

const (
	lifWatcher = "agent:main:main"
	lifTarget  = "agent:main:subagent:life"
	lifOther   = "agent:main:subagent:other"
)

type lifNotice struct {
	Target            string `json:"target"`
	ChangesSince      int64  `json:"changesSince"`
	NotifiedVersion   int64  `json:"notifiedVersion"`
	TargetGeneration  int64  `json:"targetGeneration"`
	WatcherGeneration int64  `json:"watcherGeneration"`
	Text              string `json:"text"`
}

func lifPending(t *testing.T, e *env, watcher string) []lifNotice {
	t.Helper()
	var got struct {
		PendingNotices []lifNotice `json:"pendingNotices"`
	}
	data := e.mustPost(t, `query($w: String!) { pendingNotices(watcher: $w) { target changesSince notifiedVersion targetGeneration watcherGeneration text } }`,
		map[string]any{"w": watcher})
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	return got.PendingNotices
}

func lifHuman(t *testing.T, e *env, key string) {
	t.Helper()
	e.record(t, map[string]any{"sessionKey": key, "kind": "human_direct_message", "actorType": "human"})
}

func lifWatch(t *testing.T, e *env, watcher, target string, kinds any) gqlResponse {
	t.Helper()
	vars := map[string]any{"in": map[string]any{"watcher": watcher, "target": target}}
	q := `mutation($in: WatchInput!) { watch(input: $in) { watched cursor { targetGeneration watcherGeneration retired kinds } } }`
	if kinds != nil {
		vars["k"] = kinds
		q = `mutation($in: WatchInput!, $k: [EventKind!]) { watch(input: $in, kinds: $k) { watched cursor { targetGeneration watcherGeneration retired kinds } } }`
	}
	_, r, _ := e.post(t, q, vars)
	return r
}

func lifEnvs(t *testing.T, fn func(t *testing.T, e *env)) {
	for _, b := range dbBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			d := b.open(t)
			fn(t, &env{url: d.url, store: d.store, svc: d.svc})
		})
	}
}

// TestExactAckOfAnEarlierGeneration_LIF2: a notice carries both generations; after the
// watcher's reset, an exact acknowledgement of a notice drained before it is refused
// with STALE_GENERATION on both acknowledgement mutations, nothing acknowledged (the new
// incarnation's notice stays pending, byte-identical); a generation above the
// watcher's is INVALID_ARGUMENT; the current one acknowledges.
func TestExactAckOfAnEarlierGeneration_LIF2(t *testing.T) {
	lifEnvs(t, func(t *testing.T, e *env) {
		if r := lifWatch(t, e, lifWatcher, lifTarget, nil); len(r.Errors) > 0 {
			t.Fatalf("watch: %+v", r.Errors)
		}
		lifHuman(t, e, lifTarget)
		drained := lifPending(t, e, lifWatcher)
		if len(drained) != 1 || drained[0].WatcherGeneration != 1 || drained[0].TargetGeneration != 1 || drained[0].NotifiedVersion != 1 {
			t.Fatalf("first notice: %+v, want one at N 1, generations 1 and 1", drained)
		}
		e.mustPost(t, `mutation($k: String!) { resetSession(sessionKey: $k) }`, map[string]any{"k": lifWatcher})
		if got := lifPending(t, e, lifWatcher); len(got) != 0 {
			t.Fatalf("pending after the watcher's reset: %+v", got)
		}
		lifWatch(t, e, lifWatcher, lifTarget, nil)
		lifHuman(t, e, lifTarget)
		fresh := lifPending(t, e, lifWatcher)
		if len(fresh) != 1 || fresh[0].WatcherGeneration != 2 || fresh[0].NotifiedVersion != 2 {
			t.Fatalf("the new incarnation's notice: %+v, want N 2, watcher generation 2", fresh)
		}
		before := e.snapshot(t)
		stale := []map[string]any{{"target": lifTarget, "notifiedVersion": 2, "watcherGeneration": 1}}
		for _, q := range []string{
			`mutation($w: String!, $n: [NoticeRef!]) { ackNotices(watcher: $w, notices: $n) { target } }`,
			`mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) { outcome } }`,
		} {
			if _, r, raw := e.post(t, q, map[string]any{"w": lifWatcher, "n": stale}); r.code() != awareness.ESTALEGENERATION {
				t.Errorf("stale exact ack: got %s, want %s", raw, awareness.ESTALEGENERATION)
			}
			ahead := []map[string]any{{"target": lifTarget, "notifiedVersion": 2, "watcherGeneration": 3}}
			if _, r, raw := e.post(t, q, map[string]any{"w": lifWatcher, "n": ahead}); r.code() != awareness.EINVALID {
				t.Errorf("exact ack of a generation to come: got %s, want %s", raw, awareness.EINVALID)
			}
		}
		if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
			t.Errorf("a refused acknowledgement wrote (-before +after):\n%s", diff)
		}
		if got := lifPending(t, e, lifWatcher); !cmp.Equal(got, fresh) {
			t.Errorf("the new incarnation's notice changed: %+v, want %+v", got, fresh)
		}
		current := []map[string]any{{"target": lifTarget, "notifiedVersion": 2, "watcherGeneration": 2}}
		var acked struct {
			AcknowledgeNotices []struct{ Outcome string } `json:"acknowledgeNotices"`
		}
		data := e.mustPost(t, `mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) { outcome } }`,
			map[string]any{"w": lifWatcher, "n": current})
		if err := json.Unmarshal(data, &acked); err != nil || len(acked.AcknowledgeNotices) != 1 || acked.AcknowledgeNotices[0].Outcome != "acknowledged" {
			t.Errorf("exact ack of the current generation: %s", data)
		}
	})
}

// TestTargetResetAndDelete_LIF1_LIF2: a reset of the target closes its pending notice
// and, for a watcher that selects reset, opens one for the new incarnation (the reset
// itself, target generation 2); a deletion notifies each watcher once and retires its
// cursor, which goes once acknowledged.
func TestTargetResetAndDelete_LIF1_LIF2(t *testing.T) {
	lifEnvs(t, func(t *testing.T, e *env) {
		lifWatch(t, e, lifWatcher, lifTarget, nil)
		lifWatch(t, e, lifOther, lifTarget, []string{"human_direct_message", "reset", "deleted"})
		lifHuman(t, e, lifTarget)
		if got := lifPending(t, e, lifWatcher); len(got) != 1 {
			t.Fatalf("pending before the reset: %+v", got)
		}
		e.mustPost(t, `mutation($k: String!) { resetSession(sessionKey: $k) }`, map[string]any{"k": lifTarget})
		if got := string(e.mustPost(t, `query($k: String!) { sessionStatus(sessionKey: $k) { stateVersion generation } }`,
			map[string]any{"k": lifTarget})); got != `{"sessionStatus":{"stateVersion":2,"generation":2}}` {
			t.Errorf("sessionStatus after the reset: %s, want version 2, generation 2", got)
		}
		if got := lifPending(t, e, lifWatcher); len(got) != 0 {
			t.Errorf("the default selection after the target's reset: %+v, want nothing pending", got)
		}
		want := []lifNotice{{Target: lifTarget, ChangesSince: 1, NotifiedVersion: 2, TargetGeneration: 2, WatcherGeneration: 1,
			Text: awareness.NoticeText(lifTarget, 1)}}
		if diff := cmp.Diff(want, lifPending(t, e, lifOther)); diff != "" {
			t.Errorf("the reset's notice for a watcher selecting reset (-want +got):\n%s", diff)
		}
		ok := e.mustPost(t, `mutation($k: String!) { deleteSession(sessionKey: $k) }`, map[string]any{"k": lifTarget})
		if string(ok) != `{"deleteSession":true}` {
			t.Fatalf("deleteSession: %s", ok)
		}
		got := lifPending(t, e, lifWatcher)
		if len(got) != 1 || got[0].NotifiedVersion != 3 || got[0].ChangesSince != 2 {
			t.Fatalf("the deletion's notice: %+v, want N 3 changesSince 2", got)
		}
		var ws struct {
			Watches []struct{ Retired bool } `json:"watches"`
		}
		data := e.mustPost(t, `query($w: String!) { watches(watcher: $w) { retired } }`, map[string]any{"w": lifWatcher})
		if err := json.Unmarshal(data, &ws); err != nil || len(ws.Watches) != 1 || !ws.Watches[0].Retired {
			t.Fatalf("the watcher's cursor after the deletion: %s, want one, retired", data)
		}
		e.mustPost(t, `mutation($w: String!, $n: [NoticeRef!]!) { acknowledgeNotices(watcher: $w, notices: $n) { outcome } }`,
			map[string]any{"w": lifWatcher, "n": []map[string]any{{"target": lifTarget, "notifiedVersion": 3}}})
		data = e.mustPost(t, `query($w: String!) { watches(watcher: $w) { retired } }`, map[string]any{"w": lifWatcher})
		if string(data) != `{"watches":[]}` {
			t.Errorf("watches after acknowledging the deletion: %s, want none", data)
		}
	})
}

// TestWatchKinds_LIF3: a selection is stored on the cursor and answered in order; a
// kind outside it moves nothing; an empty selection, a kind that cannot open a notice
// and a name that is no kind are refused with a code, and nothing is written.
func TestWatchKinds_LIF3(t *testing.T) {
	lifEnvs(t, func(t *testing.T, e *env) {
		for _, c := range []struct {
			name  string
			kinds any
			code  string
		}{
			{"empty", []string{}, awareness.EINVALID},
			{"log-only kind", []string{"goal_changed", "run_completed"}, awareness.EINVALID},
			{"seeding kind", []string{"child_spawned"}, awareness.EINVALID},
			{"created", []string{"created"}, awareness.EINVALID},
			{"no kind", []string{"human_typed"}, "GRAPHQL_VALIDATION_FAILED"},
		} {
			before := e.snapshot(t)
			if r := lifWatch(t, e, lifWatcher, lifTarget, c.kinds); r.code() != c.code {
				t.Errorf("%s: got %+v, want %s", c.name, r.Errors, c.code)
			}
			if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
				t.Errorf("%s: a refused watch wrote (-before +after):\n%s", c.name, diff)
			}
		}
		r := lifWatch(t, e, lifWatcher, lifTarget, []string{"goal_changed", "goal_changed", "deleted"})
		if len(r.Errors) > 0 || !json.Valid(r.Data) {
			t.Fatalf("watch with kinds: %+v", r.Errors)
		}
		var w struct {
			Watch struct {
				Cursor struct{ Kinds []string } `json:"cursor"`
			} `json:"watch"`
		}
		if err := json.Unmarshal(r.Data, &w); err != nil || !cmp.Equal(w.Watch.Cursor.Kinds, []string{"goal_changed", "deleted"}) {
			t.Errorf("the cursor's kinds: %s, want [goal_changed deleted]", r.Data)
		}
		lifHuman(t, e, lifTarget)
		if got := lifPending(t, e, lifWatcher); len(got) != 0 {
			t.Errorf("a kind outside the selection opened %+v", got)
		}
		e.record(t, map[string]any{"sessionKey": lifTarget, "kind": "goal_changed", "actorType": "human"})
		if got := lifPending(t, e, lifWatcher); len(got) != 1 || got[0].ChangesSince != 0 || got[0].NotifiedVersion != 2 {
			t.Errorf("a selected kind: %+v, want one notice at N 2 from 0", got)
		}
		// The default selection (no kinds) of another watcher answers the notifying kinds.
		r = lifWatch(t, e, lifOther, lifTarget, nil)
		if err := json.Unmarshal(r.Data, &w); err != nil || !cmp.Equal(w.Watch.Cursor.Kinds, []string{"human_direct_message", "upstream_missing", "goal_changed", "deleted"}) {
			t.Errorf("the default kinds: %s", r.Data)
		}
	})
}
