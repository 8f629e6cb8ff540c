package storetest

import (
	"time"

	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// The lifecycle tests (LIF-1, LIF-2, LIF-3), part of Run.
var lifecycleTests = []struct {
	name string
	fn   func(t *testing.T, f *fixture)
}{
	{"LIF-2_target_reset_closes_pending_and_opens_at_most_one", testTargetReset},
	{"LIF-2_watcher_reset_new_generation", testWatcherReset},
	{"LIF-2_exact_ack_of_an_earlier_generation_refused", testStaleGeneration},
	{"LIF-1_deleted_notifies_once_then_retires", testDeletedRetires},
	{"LIF-1_recorded_lifecycle_kinds", testRecordedLifecycle},
	{"LIF-3_kind_selection", testKindSelection},
}

// gens is c with the generations of its pair set.
func gens(c awareness.Cursor, target, watcher int64) awareness.Cursor {
	c.TargetGeneration, c.WatcherGeneration = target, watcher
	return c
}

// testTargetReset: a reset of the target at s moves its generation to 2, closes every
// pending notice on it, moves the default watchers' cursors to s with nothing pending
// and opens one notice (changesSince s−1, the reset itself) for a watcher that selects
// reset; a watcher that is the reset's actor gets none. The reset drops the cursors
// the reset session holds as a watcher.
func testTargetReset(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.watch(parentKey, target, t0)
	if _, _, err := f.s.Watch(f.ctx, opsKey, target, "human_direct_message,reset", t0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.s.Watch(f.ctx, childKey, target, "reset", t0); err != nil {
		t.Fatal(err)
	}
	f.watch(targetKey, ref(t, child2Key), t0) // a cursor the reset session holds
	t1 := t0.Add(time.Second)
	f.append1(t1, human(targetKey))
	if got := len(f.pending("")); got != 2 {
		t.Fatalf("pending before the reset: %d, want 2 (parent's and ops's)", got)
	}
	t2 := t0.Add(time.Minute)
	op := f.append1(t2, byAgent(targetKey, awareness.Reset, childKey))
	if op.Version != 2 {
		t.Fatalf("reset: version %d, want 2", op.Version)
	}
	closed := func(w string) awareness.Notice {
		return awareness.ClosedNotice(notice(w, target, 0, 1, 1, t1))
	}
	wantClosed := []awareness.Notice{closed(parentKey), closed(opsKey)}
	sortNotices(wantClosed)
	sortNotices(op.Closed)
	if diff := cmp.Diff(wantClosed, op.Closed); diff != "" {
		t.Errorf("the reset's closed notices (-want +got):\n%s", diff)
	}
	opened := notice(opsKey, target, 1, 2, 2, t2)
	opened.TargetGeneration = 2
	if diff := cmp.Diff([]awareness.Notice{opened}, op.Opened); diff != "" {
		t.Errorf("the reset's notices (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]awareness.Notice{opened}, f.pending("")); diff != "" {
		t.Errorf("pending after the reset (-want +got):\n%s", diff)
	}
	want := gens(awareness.Cursor{Watcher: parentKey, Target: target, L: 2, N: 2, M: 2, UpdatedAt: t2}, 2, 1)
	if diff := cmp.Diff(want, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("a default watcher's cursor after the reset (-want +got):\n%s", diff)
	}
	if c := f.mustCursor(childKey, target); c.Pending() || c.TargetGeneration != 2 {
		t.Errorf("the reset's actor selecting reset: %+v, want nothing pending at generation 2", c)
	}
	if _, ok := f.cursor(targetKey, ref(t, child2Key)); ok {
		t.Errorf("the reset session's own cursor survived (WAT-5)")
	}
	// The generation is the session's: a new watch follows generation 2, the next
	// change notifies at it, and a second reset moves it to 3.
	if c := f.watch(child2Key, target, t2); c.TargetGeneration != 2 || c.WatcherGeneration != 1 {
		t.Errorf("a watch after the reset: %+v, want generations 2 and 1", c)
	}
	f.append1(t2, human(targetKey))
	for _, n := range f.pending(parentKey) {
		if n.TargetGeneration != 2 {
			t.Errorf("a notice after the reset: %+v, want target generation 2", n)
		}
	}
	f.append1(t2, system(targetKey, awareness.Reset))
	if c := f.mustCursor(parentKey, target); c.TargetGeneration != 3 || c.Pending() {
		t.Errorf("after a second reset: %+v, want generation 3, nothing pending", c)
	}
	if ch, _ := f.status(target, 0, 10); ch.Head.Generation != 3 {
		t.Errorf("the head's generation after two resets: %d, want 3", ch.Head.Generation)
	}
	if ch, _ := f.status(ref(t, "agent:main:subagent:never"), 0, 10); ch.Head.Generation != 1 {
		t.Errorf("the generation of a session without a head: %d, want 1", ch.Head.Generation)
	}
}

// testWatcherReset: a reset of the watcher deletes the cursors it holds (their
// notices closed), and the cursors it gets afterwards, by a watch, a spawn or as a
// producer-passed watcher, carry its new generation.
func testWatcherReset(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.watch(parentKey, target, t0)
	f.append1(t0, human(targetKey))
	op := f.append1(t0.Add(time.Second), system(parentKey, awareness.Reset))
	if diff := cmp.Diff([]awareness.Notice{awareness.ClosedNotice(notice(parentKey, target, 0, 1, 1, t0))}, op.Closed); diff != "" {
		t.Errorf("the watcher's reset closed (-want +got):\n%s", diff)
	}
	if cs, _ := f.s.Cursors(f.ctx, awareness.CursorQuery{Watcher: parentKey}); len(cs) != 0 {
		t.Errorf("the watcher's cursors after its reset: %+v", cs)
	}
	if c := f.watch(parentKey, target, t0.Add(time.Minute)); c.WatcherGeneration != 2 || c.TargetGeneration != 1 {
		t.Errorf("a watch after the watcher's reset: %+v, want generations 1 and 2", c)
	}
	f.append1(t0.Add(time.Minute), byAgent(childKey, awareness.ChildSpawned, parentKey, parentKey))
	if c := f.mustCursor(parentKey, ref(t, childKey)); c.WatcherGeneration != 2 {
		t.Errorf("a spawn's cursor after the watcher's reset: %+v, want watcher generation 2", c)
	}
	op = f.append1(t0.Add(time.Hour), human(child2Key, parentKey))
	if len(op.Opened) != 1 || op.Opened[0].WatcherGeneration != 2 || op.Opened[0].TargetGeneration != 1 {
		t.Errorf("a producer-passed watcher's notice after its reset: %+v, want generations 1 and 2", op.Opened)
	}
}

// testStaleGeneration: an exact acknowledgement naming an earlier generation of the
// watcher is refused with STALE_GENERATION and writes nothing (no cursor moves, no
// acknowledgement record), even naming the new notice's version; one naming a later
// generation is INVALID_ARGUMENT; the current generation, or none, acknowledges.
func testStaleGeneration(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.append1(t0, system(parentKey, awareness.Reset)) // the watcher at generation 2
	f.watch(parentKey, target, t0)
	f.append1(t0.Add(time.Second), human(targetKey))
	before := f.mustCursor(parentKey, target)
	if before.WatcherGeneration != 2 || !before.Pending() {
		t.Fatalf("cursor: %+v, want a pending notice at watcher generation 2", before)
	}
	for _, c := range []struct {
		gen  int64
		code string
	}{{1, awareness.ESTALEGENERATION}, {3, awareness.EINVALID}} {
		_, err := f.s.Ack(f.ctx, awareness.AckRequest{Watcher: parentKey, Now: t0.Add(time.Minute),
			Exact: []awareness.AckTarget{{Target: target, NotifiedVersion: before.N, WatcherGeneration: c.gen}}})
		if got := awareness.ErrorCode(err); got != c.code {
			t.Errorf("exact ack naming generation %d: %v, want %s", c.gen, err, c.code)
		}
	}
	if diff := cmp.Diff(before, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("a refused acknowledgement moved the cursor (-before +after):\n%s", diff)
	}
	if recs, err := f.s.AckHistory(f.ctx, awareness.AckHistoryQuery{Watcher: parentKey}); err != nil || len(recs) != 0 {
		t.Errorf("a refused acknowledgement recorded %v %v", recs, err)
	}
	res := f.ack(awareness.AckRequest{Watcher: parentKey,
		Exact: []awareness.AckTarget{{Target: target, NotifiedVersion: before.N, WatcherGeneration: 2}}}, t0.Add(time.Minute))
	if len(res.Closed) != 1 || res.Closed[0].WatcherGeneration != 2 {
		t.Errorf("exact ack naming the current generation: %+v", res)
	}
}

// testDeletedRetires: a deletion notifies every watcher of the session once (a
// pending notice keeps its text and takes the deletion as material), retires their
// cursors, which take no further event, not even after the session revives, and go
// once nothing is pending; a watcher that caused the deletion is not notified and its
// cursor goes at once.
func testDeletedRetires(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.append1(t0, human(targetKey))
	f.watch(parentKey, target, t0) // synced at 1
	f.watch(opsKey, target, t0)
	f.watch(childKey, target, t0)
	f.append1(t0.Add(time.Second), byAgent(targetKey, awareness.GoalChanged, parentKey)) // ops, child pending at 2
	if _, err := f.s.Ack(f.ctx, awareness.AckRequest{Watcher: childKey, Now: t0.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	t2 := t0.Add(time.Minute)
	op := f.append1(t2, byAgent(targetKey, awareness.Deleted, childKey))
	if op.Version != 3 || len(op.Closed) != 0 {
		t.Fatalf("deleted: version %d, closed %v; want 3, none", op.Version, op.Closed)
	}
	if diff := cmp.Diff([]awareness.Notice{notice(parentKey, target, 1, 3, 3, t2)}, op.Opened); diff != "" {
		t.Errorf("the deletion's notices (-want +got):\n%s", diff)
	}
	wantParent := gens(awareness.Cursor{Watcher: parentKey, Target: target, L: 1, N: 3, M: 3, OpenedAt: t2, UpdatedAt: t2, Retired: true}, 1, 1)
	if diff := cmp.Diff(wantParent, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("a synced watcher's cursor after the deletion (-want +got):\n%s", diff)
	}
	ops := f.mustCursor(opsKey, target)
	if !ops.Retired || ops.L != 1 || ops.N != 2 || ops.M != 3 {
		t.Errorf("a pending watcher's cursor after the deletion: %+v, want retired, L 1, N 2, M 3", ops)
	}
	if _, ok := f.cursor(childKey, target); ok {
		t.Errorf("the deletion's actor kept its cursor")
	}
	if _, ok, _ := f.s.Session(f.ctx, target); ok {
		t.Errorf("the deleted session is still listed")
	}
	// Revived: the retired cursors take nothing.
	f.append1(t2.Add(time.Second), human(targetKey))
	if diff := cmp.Diff(wantParent, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("a retired cursor moved on the revived session (-want +got):\n%s", diff)
	}
	// ops acknowledges its notice: the follow-up is the deletion's; acknowledging it
	// removes the cursor.
	res := f.ack(awareness.AckRequest{Watcher: opsKey, Exact: []awareness.AckTarget{{Target: target, NotifiedVersion: 2}}}, t2.Add(time.Minute))
	if len(res.Opened) != 1 || res.Opened[0].NotifiedVersion != 3 {
		t.Fatalf("ack of ops's notice: %+v, want the deletion's follow-up", res)
	}
	f.ack(awareness.AckRequest{Watcher: opsKey, Targets: []awareness.SessionRef{target}}, t2.Add(time.Minute))
	if c, ok := f.cursor(opsKey, target); ok {
		t.Errorf("a retired cursor with nothing pending survived: %+v", c)
	}
	f.ack(awareness.AckRequest{Watcher: parentKey}, t2.Add(time.Minute))
	if c, ok := f.cursor(parentKey, target); ok {
		t.Errorf("a retired cursor with nothing pending survived: %+v", c)
	}
}

// testRecordedLifecycle: created is log only; a recorded reset and a recorded
// deletion are the mutations' paths (DeleteSession records the same event).
func testRecordedLifecycle(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.watch(parentKey, target, t0)
	if op := f.append1(t0, system(targetKey, awareness.Created)); len(op.Opened) != 0 || len(op.Closed) != 0 {
		t.Errorf("created opened %v, closed %v", op.Opened, op.Closed)
	}
	if c := f.mustCursor(parentKey, target); c.M != 0 {
		t.Errorf("created moved the cursor: %+v", c)
	}
	op, closed, err := f.s.DeleteSession(f.ctx, target, t0.Add(time.Second))
	if err != nil || op == nil || len(closed) != 0 {
		t.Fatalf("DeleteSession: %+v %v %v", op, closed, err)
	}
	if op.Event.Kind != awareness.Deleted || op.Event.ActorType != awareness.ActorSystem || op.Event.Summary != "session deleted" ||
		op.Event.Sequence != 2 || !op.Recorded {
		t.Errorf("DeleteSession's event: %+v", op.Event)
	}
	if len(op.Opened) != 1 || op.Opened[0].Watcher != parentKey || op.Opened[0].NotifiedVersion != 2 {
		t.Errorf("DeleteSession's notices: %+v", op.Opened)
	}
	if ch := f.read(target, 0, 10); len(ch.Events) != 1 || ch.Events[0].Kind != awareness.Deleted || ch.Head.PrunedThrough != 1 {
		t.Errorf("the log after DeleteSession: %+v", ch)
	}
	if op, _, err := f.s.DeleteSession(f.ctx, target, t0.Add(2*time.Second)); op != nil || err != nil {
		t.Errorf("DeleteSession of a deleted session: %+v %v, want nothing recorded", op, err)
	}
}

// testKindSelection: a cursor's selection of kinds (LIF-3) is stored; a kind outside
// it moves nothing for that cursor (not even M), a selected one notifies as usual,
// beside default cursors on the same target; a re-watch keeps the watermarks and takes
// the new selection; a producer-passed watcher with a selection is held to it.
func testKindSelection(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	c, created, err := f.s.Watch(f.ctx, parentKey, target, "goal_changed,deleted", t0)
	if err != nil || !created || c.Kinds != "goal_changed,deleted" {
		t.Fatalf("Watch with kinds: %+v %v %v", c, created, err)
	}
	f.watch(opsKey, target, t0)
	t1 := t0.Add(time.Second)
	op := f.append1(t1, human(targetKey, parentKey))
	if len(op.Opened) != 1 || op.Opened[0].Watcher != opsKey {
		t.Errorf("a human event: opened %+v, want ops's notice only", op.Opened)
	}
	if c := f.mustCursor(parentKey, target); c.L != 0 || c.N != 0 || c.M != 0 || c.Kinds != "goal_changed,deleted" {
		t.Errorf("a kind outside the selection moved the cursor: %+v", c)
	}
	t2 := t0.Add(time.Minute)
	op = f.append1(t2, byAgent(targetKey, awareness.GoalChanged, childKey))
	if diff := cmp.Diff([]awareness.Notice{notice(parentKey, target, 0, 2, 2, t2)}, op.Opened); diff != "" {
		t.Errorf("a selected kind (-want +got):\n%s", diff)
	}
	f.append1(t2, human(targetKey))
	if c := f.mustCursor(parentKey, target); c.M != 2 {
		t.Errorf("a pending cursor's M moved for a kind outside its selection: %+v", c)
	}
	// Re-watching takes the new selection and keeps the watermarks.
	before := f.mustCursor(parentKey, target)
	c, created, err = f.s.Watch(f.ctx, parentKey, target, "human_direct_message", t2)
	if err != nil || created || c.L != before.L || c.N != before.N || c.M != before.M || c.Kinds != "human_direct_message" {
		t.Fatalf("re-Watch with kinds: %+v %v %v (before %+v)", c, created, err, before)
	}
	f.append1(t2, human(targetKey))
	if c := f.mustCursor(parentKey, target); c.M != 4 || c.N != 2 {
		t.Errorf("a newly selected kind: %+v, want M 4 with N 2", c)
	}
	// Re-watching without kinds keeps the selection.
	if c, _, _ := f.s.Watch(f.ctx, parentKey, target, "", t2); c.Kinds != "human_direct_message" {
		t.Errorf("re-Watch without kinds: %+v, want the selection kept", c)
	}
}
