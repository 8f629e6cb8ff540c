package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/awareness/awareness/internal/awareness"
)

// history reads Store.AckHistory and fails the test on an error.
func (f *fixture) history(q awareness.AckHistoryQuery) []awareness.AckRecord {
	f.t.Helper()
	recs, err := f.s.AckHistory(f.ctx, q)
	if err != nil {
		f.t.Fatalf("AckHistory(%+v): %v", q, err)
	}
	return recs
}

// ignoreID compares records without their store-assigned IDs (checked for order).
var ignoreID = cmpopts.IgnoreFields(awareness.AckRecord{}, "ID")

// testAckHistory: every acknowledged notice gets one history row in the
// acknowledgement's transaction, with its L and N, when it opened and was acknowledged,
// the form, the follow-up it opened and who sent it; an acknowledgement that
// acknowledges nothing writes none. The history reads newest first, by watcher, by
// the watcher's agent, by target, by target agents and from a keyset.
func testAckHistory(t *testing.T, f *fixture) {
	target, child, ops := ref(t, targetKey), ref(t, childKey), ref(t, "agent:ops:subagent:x")
	dash := awareness.AckClient{Principal: "dash", Role: "admin", Transport: "http", Client: "dashboard"}
	gw := awareness.AckClient{Transport: "websocket", Client: "gateway/1.0"}
	f.watch(parentKey, target, t0)
	f.watch(parentKey, child, t0)
	f.watch(opsKey, ops, t0)
	f.append1(t0.Add(time.Second), human(targetKey))
	f.append1(t0.Add(2*time.Second), human(childKey))
	f.append1(t0.Add(3*time.Second), human("agent:ops:subagent:x"))
	f.append1(t0.Add(4*time.Second), human(targetKey)) // M=2 on target: its ack opens a follow-up

	at1, at2, at3 := t0.Add(time.Minute), t0.Add(2*time.Minute), t0.Add(3*time.Minute)
	// Nothing acknowledged, nothing written: a name that is not pending, and an empty list.
	f.ack(awareness.AckRequest{Watcher: parentKey, Exact: []awareness.AckTarget{{Target: target, NotifiedVersion: 9}}, By: dash}, at1)
	f.ack(awareness.AckRequest{Watcher: parentKey, Targets: []awareness.SessionRef{}, By: dash}, at1)
	if got := f.history(awareness.AckHistoryQuery{}); len(got) != 0 {
		t.Fatalf("acknowledgements that acknowledged nothing wrote %+v", got)
	}
	f.ack(awareness.AckRequest{Watcher: parentKey, Exact: []awareness.AckTarget{{Target: target, NotifiedVersion: 1}}, By: dash}, at1)
	f.ack(awareness.AckRequest{Watcher: opsKey, Targets: []awareness.SessionRef{ops}, By: gw}, at2)
	f.ack(awareness.AckRequest{Watcher: parentKey, By: gw}, at3) // all: target's follow-up and child

	all := f.history(awareness.AckHistoryQuery{})
	want := []awareness.AckRecord{
		{Watcher: parentKey, Target: child, ChangesSince: 0, NotifiedVersion: 1, OpenedAt: t0.Add(2 * time.Second), AckedAt: at3, Form: awareness.AckFormAll, By: gw},
		{Watcher: parentKey, Target: target, ChangesSince: 1, NotifiedVersion: 2, OpenedAt: at1, AckedAt: at3, Form: awareness.AckFormAll, By: gw},
		{Watcher: opsKey, Target: ops, ChangesSince: 0, NotifiedVersion: 1, OpenedAt: t0.Add(3 * time.Second), AckedAt: at2, Form: awareness.AckFormTargets, By: gw},
		{Watcher: parentKey, Target: target, ChangesSince: 0, NotifiedVersion: 1, OpenedAt: t0.Add(time.Second), AckedAt: at1, Form: awareness.AckFormExact, FollowUp: 2, By: dash},
	}
	// One acknowledgement's rows are in the order it closed them ((agent, key) order);
	// newest first reverses them.
	if diff := cmp.Diff(want, all, ignoreID); diff != "" {
		t.Errorf("history, newest first (-want +got):\n%s", diff)
	}
	for i := 1; i < len(all); i++ {
		if all[i].ID >= all[i-1].ID {
			t.Errorf("IDs not descending: %d then %d", all[i-1].ID, all[i].ID)
		}
	}
	check := func(name string, q awareness.AckHistoryQuery, want ...awareness.AckRecord) {
		t.Helper()
		if diff := cmp.Diff(want, f.history(q), emptyOK); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	check("by watcher", awareness.AckHistoryQuery{Watcher: opsKey}, all[2])
	check("by watcher agent", awareness.AckHistoryQuery{WatcherAgent: "main"}, all[0], all[1], all[3])
	check("by target", awareness.AckHistoryQuery{Target: &target}, all[1], all[3])
	check("by target agents", awareness.AckHistoryQuery{TargetAgents: []string{"ops"}}, all[2])
	check("no target agent", awareness.AckHistoryQuery{TargetAgents: []string{}})
	check("watcher and target", awareness.AckHistoryQuery{Watcher: parentKey, Target: &child}, all[0])
	check("limit", awareness.AckHistoryQuery{Limit: 2}, all[0], all[1])
	check("keyset", awareness.AckHistoryQuery{Before: all[1].ID, Limit: 1}, all[2])
	check("keyset and filter", awareness.AckHistoryQuery{Before: all[1].ID, WatcherAgent: "main"}, all[3])
}

// testAckHistoryRetention: the history is pruned with the log's retention (SIG-6):
// records acknowledged before now−MaxAge, then the oldest beyond MaxRows; a deleted
// session's records go with it, as target and as watcher (WAT-5); a reset keeps them.
func testAckHistoryRetention(t *testing.T, f *fixture) {
	day := 24 * time.Hour
	keys := []string{childKey, child2Key, targetKey, "agent:main:subagent:c3"}
	for i, k := range keys {
		r := ref(t, k)
		f.watch(parentKey, r, t0)
		f.watch("agent:main:subagent:w", r, t0)
		f.append1(t0.Add(time.Duration(i)*time.Second), human(k))
	}
	// One acknowledgement per day, per target, by parentKey; the last also by w.
	for i, k := range keys {
		f.ack(awareness.AckRequest{Watcher: parentKey, Targets: []awareness.SessionRef{ref(t, k)}}, t0.Add(time.Duration(i)*day))
	}
	f.ack(awareness.AckRequest{Watcher: "agent:main:subagent:w"}, t0.Add(4*day))
	if n := len(f.history(awareness.AckHistoryQuery{})); n != 8 {
		t.Fatalf("history has %d records, want 8", n)
	}
	// Age: records older than 2.5 days at day 4 (days 0 and 1) go.
	res := f.prune(awareness.RetentionPolicy{MaxAge: 2*day + 12*time.Hour}, t0.Add(4*day))
	if res.AcksDeleted != 2 {
		t.Errorf("AcksDeleted by age = %d, want 2", res.AcksDeleted)
	}
	// Rows: at most 5 remain, the newest.
	res = f.prune(awareness.RetentionPolicy{MaxRows: 5}, t0.Add(4*day))
	if res.AcksDeleted != 1 {
		t.Errorf("AcksDeleted by the row cap = %d, want 1", res.AcksDeleted)
	}
	got := f.history(awareness.AckHistoryQuery{})
	if len(got) != 5 || got[4].Watcher != parentKey || !got[4].AckedAt.Equal(t0.Add(3*day)) {
		t.Fatalf("after pruning: %+v, want the 5 newest (the oldest parentKey's of day 3)", got)
	}
	if res := f.prune(awareness.RetentionPolicy{MaxRows: 5, MaxAge: 30 * day}, t0.Add(4*day)); res.AcksDeleted != 0 {
		t.Errorf("a prune within the limits deleted %d records", res.AcksDeleted)
	}
	// A reset of the watcher keeps its history; deleting a target or the watcher does not.
	if _, _, err := f.s.ResetWatcher(f.ctx, "agent:main:subagent:w"); err != nil {
		t.Fatal(err)
	}
	if n := len(f.history(awareness.AckHistoryQuery{Watcher: "agent:main:subagent:w"})); n != 4 {
		t.Errorf("after a reset the watcher's history has %d records, want 4", n)
	}
	target := ref(t, "agent:main:subagent:c3")
	if _, _, err := deleteSession(f.ctx, f.s, target, t0.Add(5*day)); err != nil {
		t.Fatal(err)
	}
	if got := f.history(awareness.AckHistoryQuery{Target: &target}); len(got) != 0 {
		t.Errorf("a deleted target keeps its history: %+v", got)
	}
	if n := len(f.history(awareness.AckHistoryQuery{})); n != 3 {
		t.Errorf("after deleting a target the history has %d records, want w's 3 on the others", n)
	}
	if _, _, err := deleteSession(f.ctx, f.s, ref(t, "agent:main:subagent:w"), t0.Add(5*day)); err != nil {
		t.Fatal(err)
	}
	if got := f.history(awareness.AckHistoryQuery{Watcher: "agent:main:subagent:w"}); len(got) != 0 {
		t.Errorf("a deleted watcher keeps its history: %+v", got)
	}
	if n := len(f.history(awareness.AckHistoryQuery{})); n != 0 {
		t.Errorf("history after the deletions has %d records, want none", n)
	}
}

// testSpawns: a session's parent is the agent-qualified actor of its earliest retained
// child_spawned event (WAT-2): a person's or system's spawn names none, a later spawn
// by another session does not replace it, and the agent filter selects the children's
// agent.
func testSpawns(t *testing.T, f *fixture) {
	f.append(t0,
		byAgent(childKey, awareness.ChildSpawned, parentKey, parentKey),
		byAgent(child2Key, awareness.ChildSpawned, childKey, childKey),
		awareness.RecordInput{SessionKey: "agent:main:subagent:p", Kind: awareness.ChildSpawned, ActorType: awareness.ActorHuman, ActorID: ptr("telegram:ana")},
		byAgent("agent:ops:subagent:o", awareness.ChildSpawned, opsKey),
		human(childKey),
	)
	f.append1(t0.Add(time.Second), byAgent(childKey, awareness.ChildSpawned, "agent:main:other"))
	get := func(agent string) []awareness.Spawn {
		t.Helper()
		sp, err := f.s.Spawns(f.ctx, agent)
		if err != nil {
			t.Fatalf("Spawns(%q): %v", agent, err)
		}
		return sp
	}
	want := []awareness.Spawn{
		{Child: ref(t, childKey), Parent: parentKey},
		{Child: ref(t, child2Key), Parent: childKey},
		{Child: ref(t, "agent:ops:subagent:o"), Parent: opsKey},
	}
	if diff := cmp.Diff(want, get(""), emptyOK); diff != "" {
		t.Errorf("every agent (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[2:], get("ops"), emptyOK); diff != "" {
		t.Errorf("agent ops (-want +got):\n%s", diff)
	}
	// Retention pruned child's first spawn: the next retained one names its parent.
	f.prune(awareness.RetentionPolicy{MaxAge: time.Hour}, t0.Add(time.Hour+time.Millisecond))
	if diff := cmp.Diff([]awareness.Spawn{{Child: ref(t, childKey), Parent: "agent:main:other"}}, get("main"), emptyOK); diff != "" {
		t.Errorf("after pruning (-want +got):\n%s", diff)
	}
}
