// The cursors' and notices' cases: seeding, watching, deletion, reset and expiry, one
// notice per pair, self-suppression, acknowledgement in every form, the sweep, order.

package storetest

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

func testChildSpawnedSeeds(t *testing.T, f *fixture) {
	child := ref(t, childKey)
	f.append1(t0, byAgent(childKey, awareness.GoalChanged, childKey)) // history before the spawn
	f.watch(opsKey, child, t0)                                        // another watcher, at 1
	spawn := f.append1(t0.Add(time.Second), byAgent(childKey, awareness.ChildSpawned, parentKey, parentKey))
	if spawn.Version != 2 || len(spawn.Opened) != 0 {
		t.Fatalf("spawn: got version %d, %d notices; want 2, none", spawn.Version, len(spawn.Opened))
	}
	want := awareness.Cursor{TargetGeneration: 1, WatcherGeneration: 1, Watcher: parentKey, Target: child, L: 2, N: 2, M: 2, UpdatedAt: t0.Add(time.Second)}
	if diff := cmp.Diff(want, f.mustCursor(parentKey, child)); diff != "" {
		t.Errorf("seeded cursor (-want +got):\n%s", diff)
	}
	wantOps := awareness.Cursor{TargetGeneration: 1, WatcherGeneration: 1, Watcher: opsKey, Target: child, L: 1, N: 1, M: 1, UpdatedAt: t0}
	if diff := cmp.Diff(wantOps, f.mustCursor(opsKey, child)); diff != "" {
		t.Errorf("child_spawned moved another watcher's cursor (-want +got):\n%s", diff)
	}
	if got := f.pending(""); len(got) != 0 {
		t.Errorf("pending after spawn: %v", got)
	}
	// The first notifying event notifies both, each from its own L.
	now := t0.Add(time.Minute)
	op := f.append1(now, human(childKey))
	wantN := []awareness.Notice{notice(opsKey, child, 1, 3, 3, now), notice(parentKey, child, 2, 3, 3, now)}
	sortNotices(op.Opened)
	sortNotices(wantN)
	if diff := cmp.Diff(wantN, op.Opened); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	// A repeated spawn never swallows a pending notice.
	before := f.mustCursor(parentKey, child)
	f.append1(now.Add(time.Second), byAgent(childKey, awareness.ChildSpawned, parentKey, parentKey))
	if diff := cmp.Diff(before, f.mustCursor(parentKey, child)); diff != "" {
		t.Errorf("repeated spawn changed a pending cursor (-want +got):\n%s", diff)
	}
}

func sortNotices(ns []awareness.Notice) {
	sort.Slice(ns, func(i, j int) bool { return ns[i].ID() < ns[j].ID() })
}

func testWatch(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.append(t0, human(targetKey), human(targetKey), human(targetKey))
	c, created, err := f.s.Watch(f.ctx, parentKey, target, "", t0.Add(time.Second))
	if err != nil || !created {
		t.Fatalf("Watch: created=%v err=%v", created, err)
	}
	want := awareness.Cursor{TargetGeneration: 1, WatcherGeneration: 1, Watcher: parentKey, Target: target, L: 3, N: 3, M: 3, UpdatedAt: t0.Add(time.Second)}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("Watch cursor (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("stored cursor (-want +got):\n%s", diff)
	}
	// History before the watch never notifies; the next change does.
	f.append1(t0.Add(time.Minute), human(targetKey))
	pending := f.mustCursor(parentKey, target)
	if !pending.Pending() {
		t.Fatalf("cursor not pending after a change: %+v", pending)
	}
	c, created, err = f.s.Watch(f.ctx, parentKey, target, "", t0.Add(time.Hour))
	if err != nil || created {
		t.Fatalf("re-Watch: created=%v err=%v, want false nil", created, err)
	}
	if diff := cmp.Diff(pending, c); diff != "" {
		t.Errorf("re-Watch result (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(pending, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("re-Watch changed state (-want +got):\n%s", diff)
	}
	// A target without a head is watched at 0.
	fresh := ref(t, "agent:main:subagent:fresh")
	if c := f.watch(parentKey, fresh, t0); c.L != 0 || c.N != 0 || c.M != 0 {
		t.Errorf("watch without head: got %+v, want zeros", c)
	}
	if ok, _, err := f.s.Unwatch(f.ctx, parentKey, fresh); !ok || err != nil {
		t.Errorf("Unwatch: got %v %v, want true nil", ok, err)
	}
	if ok, _, err := f.s.Unwatch(f.ctx, parentKey, fresh); ok || err != nil {
		t.Errorf("second Unwatch: got %v %v, want false nil", ok, err)
	}
	if _, ok := f.cursor(parentKey, target); !ok {
		t.Errorf("Unwatch removed another pair")
	}
}

func testProducerPassedWatcher(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.append(t0, system(targetKey, awareness.RunCompleted), system(targetKey, awareness.RunCompleted))
	now := t0.Add(time.Second)
	op := f.append1(now, human(targetKey, parentKey))
	if diff := cmp.Diff([]awareness.Notice{notice(parentKey, target, 0, 3, 3, now)}, op.Opened); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
	want := awareness.Cursor{TargetGeneration: 1, WatcherGeneration: 1, Watcher: parentKey, Target: target, L: 0, N: 3, M: 3, OpenedAt: now, UpdatedAt: now}
	if diff := cmp.Diff(want, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("cursor (-want +got):\n%s", diff)
	}
	// Passing the watcher again only moves M.
	op = f.append1(now.Add(time.Second), human(targetKey, parentKey))
	if len(op.Opened) != 0 {
		t.Errorf("second event opened %v", op.Opened)
	}
	if c := f.mustCursor(parentKey, target); c.L != 0 || c.N != 3 || c.M != 4 {
		t.Errorf("cursor: got L=%d N=%d M=%d, want 0 3 4", c.L, c.N, c.M)
	}
}

func testDeleteKeepsHead(t *testing.T, f *fixture) {
	child, target := ref(t, childKey), ref(t, targetKey)
	f.append(t0, human(childKey), human(childKey), human(childKey), human(childKey))
	f.append1(t0, human(targetKey))
	f.watch(parentKey, child, t0)  // a cursor on the deleted session
	f.watch(childKey, target, t0)  // a cursor the deleted session holds
	f.watch(parentKey, target, t0) // unrelated
	ok, _, err := deleteSession(f.ctx, f.s, child, t0.Add(time.Hour))
	if err != nil || !ok {
		t.Fatalf("DeleteSession: got %v %v, want true nil", ok, err)
	}
	if _, ok, err := f.s.Session(f.ctx, child); ok || err != nil {
		t.Errorf("Session after delete: ok=%v err=%v, want false nil", ok, err)
	}
	// The deleted event (LIF-1) is the head and the one event the log keeps.
	ch := f.read(child, 0, 10)
	if ch.Head.Version != 5 || ch.Head.PrunedThrough != 4 || !slices.Equal(seqs(ch.Events), []int64{5}) || ch.Earliest != 5 ||
		ch.Events[0].Kind != awareness.Deleted || ch.Events[0].ActorType != awareness.ActorSystem {
		t.Errorf("head after delete: got Version=%d PrunedThrough=%d Earliest=%d events=%v, want 5 4 5 [5: deleted]",
			ch.Head.Version, ch.Head.PrunedThrough, ch.Earliest, seqs(ch.Events))
	}
	// The cursor on the deleted session is retired with the deletion's notice pending
	// (LIF-1); acknowledging it removes the cursor.
	if c, ok := f.cursor(parentKey, child); !ok || !c.Retired || c.L != 4 || c.N != 5 {
		t.Errorf("cursor on the deleted session: got %+v %v, want retired, L 4, N 5", c, ok)
	}
	f.ack(awareness.AckRequest{Watcher: parentKey, Exact: []awareness.AckTarget{{Target: child, NotifiedVersion: 5}}}, t0.Add(time.Hour))
	if c, ok := f.cursor(parentKey, child); ok {
		t.Errorf("retired cursor survived its acknowledgement: %+v", c)
	}
	if _, ok := f.cursor(childKey, target); ok {
		t.Errorf("cursor held by the deleted session survived")
	}
	if _, ok := f.cursor(parentKey, target); !ok {
		t.Errorf("unrelated cursor was deleted")
	}
	for _, r := range []awareness.SessionRef{child, ref(t, "agent:main:never")} {
		if ok, _, err := deleteSession(f.ctx, f.s, r, t0.Add(2*time.Hour)); ok || err != nil {
			t.Errorf("DeleteSession(%v) again: got %v %v, want false nil", r.Key, ok, err)
		}
	}
	// A watcher that never logged anything has no session row, but deleting it still
	// deletes the cursors it holds.
	f.watch(child2Key, target, t0)
	if ok, _, err := deleteSession(f.ctx, f.s, ref(t, child2Key), t0.Add(2*time.Hour)); ok || err != nil {
		t.Errorf("DeleteSession(row-less watcher): got %v %v, want false nil", ok, err)
	}
	if _, ok := f.cursor(child2Key, target); ok {
		t.Errorf("cursor held by a row-less deleted watcher survived")
	}
	if _, ok, _ := f.s.Session(f.ctx, ref(t, child2Key)); ok {
		t.Errorf("deleting a row-less session created one")
	}
	ss, err := f.s.ListSessions(f.ctx, awareness.SessionQuery{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range ss {
		if s.Ref == child {
			t.Errorf("ListSessions lists the deleted session")
		}
	}
	// A later append revives the session; the version continues.
	op := f.append1(t0.Add(3*time.Hour), human(childKey))
	if op.Version != 6 {
		t.Errorf("append after delete: version %d, want 6", op.Version)
	}
	s, ok, err := f.s.Session(f.ctx, child)
	if err != nil || !ok || s.StateVersion != 6 || s.PrunedThrough != 4 {
		t.Errorf("revived session: got %+v %v %v, want StateVersion 6 PrunedThrough 4", s, ok, err)
	}
	if got := seqs(f.read(child, 0, 10).Events); !slices.Equal(got, []int64{5, 6}) {
		t.Errorf("revived log: got %v, want [5 6]", got)
	}
}

func testResetAndExpiry(t *testing.T, f *fixture) {
	t1, t2 := ref(t, targetKey), ref(t, childKey)
	f.append(t0, human(targetKey), human(childKey))
	f.watch(parentKey, t1, t0)
	f.watch(parentKey, t2, t0)
	f.watch(opsKey, t1, t0)
	n, _, err := f.s.ResetWatcher(f.ctx, parentKey)
	if err != nil || n != 2 {
		t.Fatalf("ResetWatcher: got %d %v, want 2 nil", n, err)
	}
	if cs, _ := f.s.Cursors(f.ctx, awareness.CursorQuery{Watcher: parentKey}); len(cs) != 0 {
		t.Errorf("cursors after reset: %v", cs)
	}
	if _, ok := f.cursor(opsKey, t1); !ok {
		t.Errorf("reset deleted another watcher's cursor")
	}
	if ch := f.read(t1, 0, 10); ch.Head.Version != 1 || len(ch.Events) != 1 {
		t.Errorf("reset touched the target's history: %+v", ch)
	}
	if n, _, err := f.s.ResetWatcher(f.ctx, parentKey); n != 0 || err != nil {
		t.Errorf("second reset: got %d %v, want 0 nil", n, err)
	}

	// Expiry: the cursor touched at t0 expires, the one touched 20 days later stays.
	day := 24 * time.Hour
	f.watch(parentKey, t2, t0.Add(20*day))
	res := f.prune(awareness.RetentionPolicy{CursorTTL: 30 * day}, t0.Add(31*day))
	if res.CursorsExpired != 1 {
		t.Errorf("CursorsExpired: got %d, want 1", res.CursorsExpired)
	}
	cs, err := f.s.Cursors(f.ctx, awareness.CursorQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Watcher != parentKey || cs[0].Target != t2 {
		t.Errorf("cursors after expiry: got %+v, want only (%s, %v)", cs, parentKey, t2)
	}
	// A notifying event touches the cursor and so keeps it alive.
	f.append1(t0.Add(40*day), human(childKey))
	if res := f.prune(awareness.RetentionPolicy{CursorTTL: 30 * day}, t0.Add(55*day)); res.CursorsExpired != 0 {
		t.Errorf("touched cursor expired")
	}
}

// testExpiryPeriod: cursor expiry, which reads every cursor, is skipped by a pass less
// than ExpireEvery after the last expiry (the database keeps when it ran, for every
// process sharing it), and runs again after that (WAT-5).
func testExpiryPeriod(t *testing.T, f *fixture) {
	day := 24 * time.Hour
	pol := awareness.RetentionPolicy{CursorTTL: 30 * day, ExpireEvery: 30 * time.Minute}
	f.watch(parentKey, ref(t, targetKey), t0)
	first := t0.Add(31 * day)
	if res := f.prune(pol, first); res.CursorsExpired != 1 || res.ExpirySkipped {
		t.Fatalf("first expiry: %+v, want 1 expired", res)
	}
	f.watch(parentKey, ref(t, childKey), t0) // expirable at once
	if res := f.prune(pol, first.Add(10*time.Minute)); res.CursorsExpired != 0 || !res.ExpirySkipped {
		t.Errorf("a pass 10 minutes after the last expiry: %+v, want expiry skipped", res)
	}
	if _, ok := f.cursor(parentKey, ref(t, childKey)); !ok {
		t.Error("a skipped expiry expired a cursor")
	}
	if res := f.prune(awareness.RetentionPolicy{CursorTTL: 30 * day}, first.Add(11*time.Minute)); res.CursorsExpired != 1 || res.ExpirySkipped {
		t.Errorf("a pass without ExpireEvery: %+v, want 1 expired", res)
	}
	f.watch(parentKey, ref(t, child2Key), t0)
	if res := f.prune(pol, first.Add(40*time.Minute)); res.CursorsExpired != 0 || !res.ExpirySkipped {
		t.Errorf("29 minutes after the last expiry: %+v, want it skipped", res)
	}
	if res := f.prune(pol, first.Add(42*time.Minute)); res.CursorsExpired != 1 || res.ExpirySkipped {
		t.Errorf("31 minutes after the last expiry: %+v, want 1 expired", res)
	}
}

func testOneNoticeForTwenty(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.append(t0, system(targetKey, awareness.GoalChanged), system(targetKey, awareness.GoalChanged))
	f.watch(parentKey, target, t0)
	var opened []awareness.Notice
	first := t0.Add(time.Second)
	for i := 0; i < 20; i++ {
		op := f.append1(first.Add(time.Duration(i)*time.Millisecond), human(targetKey))
		opened = append(opened, op.Opened...)
	}
	want := notice(parentKey, target, 2, 3, 3, first)
	if diff := cmp.Diff([]awareness.Notice{want}, opened); diff != "" {
		t.Fatalf("opened (-want +got):\n%s", diff)
	}
	pend := f.pending(parentKey)
	want.MaterialVersion = 22
	if diff := cmp.Diff([]awareness.Notice{want}, pend); diff != "" {
		t.Errorf("pending (-want +got):\n%s", diff)
	}
	if len(pend) == 1 && (pend[0].ID() != opened[0].ID() || pend[0].Text != opened[0].Text) {
		t.Errorf("pending notice identity changed: got %q, want %q", pend[0].ID(), opened[0].ID())
	}
	if got, wantText := opened[0].Text, `Session "agent:main:direct:alice" changed (other actor). Reconcile before acting: session_status sessionKey "agent:main:direct:alice" changesSince 2.`; got != wantText {
		t.Errorf("text: got %q, want %q", got, wantText)
	}
}

func testSelfSuppression(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.watch(parentKey, target, t0)
	before := f.mustCursor(parentKey, target)
	op := f.append1(t0.Add(time.Second), byAgent(targetKey, awareness.GoalChanged, parentKey))
	if len(op.Opened) != 0 {
		t.Errorf("own change opened %v", op.Opened)
	}
	if diff := cmp.Diff(before, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("own change moved the cursor (-want +got):\n%s", diff)
	}
	// A producer-passed watcher that is the actor gets no cursor.
	op = f.append1(t0.Add(2*time.Second), byAgent(targetKey, awareness.GoalChanged, child2Key, child2Key))
	if _, ok := f.cursor(child2Key, target); ok {
		t.Errorf("actor got a cursor as producer-passed watcher")
	}
	if diff := cmp.Diff([]awareness.Notice{notice(parentKey, target, 0, 2, 2, t0.Add(2*time.Second))}, op.Opened); diff != "" {
		t.Errorf("another actor's change (-want +got):\n%s", diff)
	}
}

func testAckReopensOnce(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.watch(parentKey, target, t0)
	f.append1(t0.Add(time.Second), human(targetKey))
	f.append(t0.Add(2*time.Second), human(targetKey), human(targetKey))
	// Acking other targets, or none, changes nothing.
	for _, refs := range [][]awareness.SessionRef{{ref(t, childKey)}, {}, {ref(t, "agent:ops:direct:alice")}} {
		res, err := f.s.Ack(f.ctx, awareness.AckRequest{Watcher: parentKey, Targets: refs, Now: t0.Add(3 * time.Second)})
		if err != nil || len(res.Opened)+len(res.Closed) != 0 {
			t.Errorf("Ack(%v): got %+v %v, want nothing", refs, res, err)
		}
	}
	if c := f.mustCursor(parentKey, target); c.L != 0 || c.N != 1 || c.M != 3 {
		t.Fatalf("before ack: got L=%d N=%d M=%d, want 0 1 3", c.L, c.N, c.M)
	}
	ackAt := t0.Add(time.Minute)
	res := f.ack(awareness.AckRequest{Watcher: parentKey}, ackAt)
	want := []awareness.Notice{notice(parentKey, target, 1, 3, 3, ackAt)}
	if diff := cmp.Diff(want, res.Opened); diff != "" {
		t.Errorf("follow-up (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]awareness.Notice{awareness.ClosedNotice(notice(parentKey, target, 0, 1, 3, t0.Add(time.Second)))}, res.Closed); diff != "" {
		t.Errorf("closed (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, f.pending(parentKey)); diff != "" {
		t.Errorf("pending after ack (-want +got):\n%s", diff)
	}
	if res := f.ack(awareness.AckRequest{Watcher: parentKey, Targets: []awareness.SessionRef{target}}, ackAt.Add(time.Minute)); len(res.Opened) != 0 || len(res.Closed) != 1 {
		t.Errorf("second ack: got %+v, want one closed, no follow-up", res)
	}
	synced := f.mustCursor(parentKey, target)
	if synced.L != 3 || synced.N != 3 || synced.M != 3 || !synced.OpenedAt.IsZero() {
		t.Errorf("after second ack: got %+v, want L=N=M=3, no opening time", synced)
	}
	if res := f.ack(awareness.AckRequest{Watcher: parentKey}, ackAt.Add(time.Hour)); len(res.Opened)+len(res.Closed) != 0 {
		t.Errorf("ack with nothing pending: got %+v", res)
	}
	if diff := cmp.Diff(synced, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("ack with nothing pending changed the cursor (-want +got):\n%s", diff)
	}
}

func testLogOnlyKinds(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	f.watch(parentKey, target, t0)
	before := f.mustCursor(parentKey, target)
	for i, k := range []awareness.EventKind{awareness.RunCompleted, awareness.RunFailed, awareness.Compacted, awareness.Adopted} {
		in := system(targetKey, k)
		in.Watchers = []string{childKey}
		op := f.append1(t0.Add(time.Duration(i+1)*time.Second), in)
		if len(op.Opened) != 0 {
			t.Errorf("%s opened %v", k, op.Opened)
		}
	}
	if diff := cmp.Diff(before, f.mustCursor(parentKey, target)); diff != "" {
		t.Errorf("log-only kinds moved a cursor (-want +got):\n%s", diff)
	}
	if _, ok := f.cursor(childKey, target); ok {
		t.Errorf("log-only kind created a producer-passed cursor")
	}
}

// testSweep: the startup sweep leaves every pending notice exactly as it is (same N,
// text and opening time, so the same ID), opens nothing a committed write left behind,
// and an exact acknowledgement named before it still acknowledges after it (NTC-5).
func testSweep(t *testing.T, f *fixture) {
	target, other := ref(t, targetKey), ref(t, childKey)
	f.watch(parentKey, target, t0)
	f.watch(opsKey, other, t0)
	opened := t0.Add(time.Second)
	f.append1(opened, human(targetKey))                                   // the notice: N = 1
	f.append(opened.Add(time.Second), human(targetKey), human(targetKey)) // M = 3
	f.append1(opened, system(childKey, awareness.RunCompleted))           // synced watcher stays quiet
	before := f.pending("")
	want := []awareness.Notice{notice(parentKey, target, 0, 1, 3, opened)}
	if diff := cmp.Diff(want, before); diff != "" {
		t.Fatalf("pending before the sweep (-want +got):\n%s", diff)
	}

	for i, at := range []time.Time{t0.Add(time.Hour), t0.Add(2 * time.Hour)} {
		n, err := f.s.Sweep(f.ctx, at, func(ns []awareness.Notice) { t.Errorf("sweep %d opened %v", i, ns) })
		if err != nil || n != 0 {
			t.Fatalf("sweep %d: opened %d, %v; want 0, nil", i, n, err)
		}
		if diff := cmp.Diff(before, f.pending("")); diff != "" {
			t.Errorf("pending after sweep %d (-before +after):\n%s", i, diff)
		}
		if got := f.pending("")[0].ID(); got != before[0].ID() {
			t.Errorf("sweep %d changed the notice's ID: %q, was %q", i, got, before[0].ID())
		}
	}
	c := f.mustCursor(parentKey, target)
	if c.L != 0 || c.N != 1 || c.M != 3 || !c.OpenedAt.Equal(opened) {
		t.Errorf("swept cursor: got %+v, want L=0 N=1 M=3 opened %v", c, opened)
	}
	// The exact acknowledgement of the notice drained before the "restart" matches.
	res := f.ack(awareness.AckRequest{Watcher: parentKey, Exact: []awareness.AckTarget{{Target: target, NotifiedVersion: 1}}},
		t0.Add(3*time.Hour))
	if len(res.Closed) != 1 || len(res.Opened) != 1 || res.Opened[0].NotifiedVersion != 3 || res.Opened[0].ChangesSince != 1 {
		t.Errorf("exact ack after the sweep: %+v, want the notice closed and a follow-up 1..3", res)
	}
}

func testPendingOrder(t *testing.T, f *fixture) {
	a, b := ref(t, targetKey), ref(t, childKey)
	f.watch(parentKey, a, t0)
	f.watch(opsKey, a, t0)
	f.watch(parentKey, b, t0)
	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	opB := f.append1(t1, human(childKey))
	opA := f.append1(t2, human(targetKey))
	// Ordered by opening time, then watcher key ("agent:main:main" < "agent:ops:main").
	want := []awareness.Notice{
		notice(parentKey, b, 0, 1, 1, t1),
		notice(parentKey, a, 0, 1, 1, t2),
		notice(opsKey, a, 0, 1, 1, t2),
	}
	if diff := cmp.Diff(want, f.pending("")); diff != "" {
		t.Errorf("Pending(\"\") (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want[:2], f.pending(parentKey)); diff != "" {
		t.Errorf("Pending(parent) (-want +got):\n%s", diff)
	}
	// Notices read back carry the identity the append published.
	published := append(append([]awareness.Notice{}, opB.Opened...), opA.Opened...)
	ids := map[string]bool{}
	for _, n := range f.pending("") {
		ids[n.ID()] = true
	}
	for _, n := range published {
		if !ids[n.ID()] {
			t.Errorf("published notice %q is not pending by the same ID", n.ID())
		}
	}
	if got := f.pending(opsKey); len(got) != 1 || !got[0].Wake {
		t.Errorf("Pending(ops): %+v", got)
	}
	if got := f.pending(childKey); len(got) != 0 {
		t.Errorf("Pending(child): %+v", got)
	}
}

// testAckExact: the exact form acknowledges a pair only while its pending notice is the
// one named (NTC-3). A stale name — the notice was acknowledged and a follow-up opened,
// or it was acknowledged and a new notice opened later — changes nothing.
func testAckExact(t *testing.T, f *fixture) {
	target, child := ref(t, targetKey), ref(t, childKey)
	f.watch(parentKey, target, t0)
	f.watch(parentKey, child, t0)
	f.append1(t0.Add(time.Second), human(targetKey)) // notice N=1 on target
	f.append1(t0.Add(time.Second), human(childKey))  // notice N=1 on child
	// The gateway drains {target N=1}; meanwhile the target moves on (M=2).
	f.append1(t0.Add(2*time.Second), human(targetKey))
	exact := func(refs ...awareness.AckTarget) awareness.AckResult {
		return f.ack(awareness.AckRequest{Watcher: parentKey, Exact: refs}, t0.Add(time.Minute))
	}
	// A version that is not the pending one, and a pair without a cursor: nothing.
	if res := exact(awareness.AckTarget{Target: target, NotifiedVersion: 2},
		awareness.AckTarget{Target: ref(t, child2Key), NotifiedVersion: 1}); len(res.Closed)+len(res.Opened) != 0 {
		t.Errorf("ack of a notice that is not pending: %+v", res)
	}
	res := exact(awareness.AckTarget{Target: target, NotifiedVersion: 1})
	wantClosed := []awareness.Notice{awareness.ClosedNotice(notice(parentKey, target, 0, 1, 2, t0.Add(time.Second)))}
	wantOpened := []awareness.Notice{notice(parentKey, target, 1, 2, 2, t0.Add(time.Minute))}
	if diff := cmp.Diff(awareness.AckResult{Closed: wantClosed, Opened: wantOpened}, res, ignoreAcks); diff != "" {
		t.Errorf("exact ack (-want +got):\n%s", diff)
	}
	// The child's notice was not named: still pending, untouched.
	if c := f.mustCursor(parentKey, child); c.L != 0 || c.N != 1 {
		t.Errorf("unnamed pair changed: %+v", c)
	}
	// A retry of the same ack must not swallow the follow-up (N=2 now).
	if res := exact(awareness.AckTarget{Target: target, NotifiedVersion: 1}); len(res.Closed)+len(res.Opened) != 0 {
		t.Errorf("repeated exact ack acknowledged the follow-up: %+v", res)
	}
	if c := f.mustCursor(parentKey, target); c.L != 1 || c.N != 2 || c.M != 2 {
		t.Errorf("after the repeated ack: got L=%d N=%d M=%d, want 1 2 2", c.L, c.N, c.M)
	}
	// Drain both at once, exactly.
	res = exact(awareness.AckTarget{Target: target, NotifiedVersion: 2}, awareness.AckTarget{Target: child, NotifiedVersion: 1})
	if len(res.Closed) != 2 || len(res.Opened) != 0 || len(f.pending(parentKey)) != 0 {
		t.Errorf("exact ack of both: %+v, pending %v", res, f.pending(parentKey))
	}
	// A notice opened after the drain (N=3) is never acknowledged by the drain's name.
	f.append1(t0.Add(2*time.Minute), human(targetKey))
	if res := exact(awareness.AckTarget{Target: target, NotifiedVersion: 2}); len(res.Closed) != 0 {
		t.Errorf("a stale name acknowledged the new notice: %+v", res)
	}
	if got := f.pending(parentKey); len(got) != 1 || got[0].NotifiedVersion != 3 {
		t.Errorf("pending: %v, want the notice N=3", got)
	}
	if res := f.ack(awareness.AckRequest{Watcher: parentKey, Exact: []awareness.AckTarget{}}, t0.Add(time.Hour)); len(res.Closed) != 0 {
		t.Errorf("an empty exact list acknowledged %v", res.Closed)
	}
}

// testAckTargetsPerAgent: bare targets of two agents are two pairs; acknowledging one
// (targets or exact form) leaves the other's notice alone (KEY-3, NTC-3).
func testAckTargetsPerAgent(t *testing.T, f *fixture) {
	mainG, workerG := ref(t, "global"), ref(t, "global", "worker")
	f.watch(parentKey, mainG, t0)
	f.watch(parentKey, workerG, t0)
	inMain := awareness.RecordInput{SessionKey: "global", Kind: awareness.GoalChanged, ActorType: awareness.ActorHuman}
	inWorker := inMain
	inWorker.AgentID = ptr("worker")
	a := f.append(t0.Add(time.Second), inMain, inWorker)
	if len(a[0].Opened) != 1 || len(a[1].Opened) != 1 {
		t.Fatalf("opened %v and %v, want one each", a[0].Opened, a[1].Opened)
	}
	wantText := `Session "global" changed (other actor). Reconcile before acting: session_status sessionKey "global" agentId "worker" changesSince 0.`
	if got := a[1].Opened[0].Text; got != wantText {
		t.Errorf("NTC-1 text of worker's global:\n got %q\nwant %q", got, wantText)
	}
	res := f.ack(awareness.AckRequest{Watcher: parentKey, Exact: []awareness.AckTarget{{Target: workerG, NotifiedVersion: 1}}}, t0.Add(time.Minute))
	if len(res.Closed) != 1 || res.Closed[0].Target != workerG {
		t.Errorf("exact ack of worker's global closed %+v", res.Closed)
	}
	if got := f.pending(parentKey); len(got) != 1 || got[0].Target != mainG {
		t.Errorf("pending: %+v, want main's global only", got)
	}
	if cs, err := f.s.Cursors(f.ctx, awareness.CursorQuery{TargetKey: "global", TargetAgent: "worker"}); err != nil || len(cs) != 1 || cs[0].Target != workerG {
		t.Errorf("cursors on worker's global: %+v %v", cs, err)
	}
}

// testRemovalsCloseNotices: unwatch, reset, delete and expiry return the pending notices
// of the cursors they remove (closed), and nothing for synced cursors.
func testRemovalsCloseNotices(t *testing.T, f *fixture) {
	day := 24 * time.Hour
	target, child, child2 := ref(t, targetKey), ref(t, childKey), ref(t, child2Key)
	for _, r := range []awareness.SessionRef{target, child, child2} {
		f.watch(parentKey, r, t0)
		f.watch(opsKey, r, t0)
	}
	f.append(t0.Add(time.Second), human(targetKey), human(childKey), human(child2Key))
	f.watch("agent:main:subagent:synced", target, t0.Add(time.Second)) // synced: nothing to close
	closedOf := func(w string, r awareness.SessionRef, n int64) awareness.Notice {
		return awareness.ClosedNotice(notice(w, r, 0, n, n, t0.Add(time.Second)))
	}
	ok, closed, err := f.s.Unwatch(f.ctx, parentKey, target)
	if err != nil || !ok {
		t.Fatalf("Unwatch: %v %v", ok, err)
	}
	if diff := cmp.Diff([]awareness.Notice{closedOf(parentKey, target, 1)}, closed); diff != "" {
		t.Errorf("Unwatch closed (-want +got):\n%s", diff)
	}
	if _, closed, _ := f.s.Unwatch(f.ctx, "agent:main:subagent:synced", target); len(closed) != 0 {
		t.Errorf("Unwatch of a synced cursor closed %v", closed)
	}
	n, closed, err := f.s.ResetWatcher(f.ctx, parentKey)
	if err != nil || n != 2 {
		t.Fatalf("ResetWatcher: %d %v", n, err)
	}
	if diff := cmp.Diff([]awareness.Notice{closedOf(parentKey, child, 1), closedOf(parentKey, child2, 1)}, closed); diff != "" {
		t.Errorf("ResetWatcher closed (-want +got):\n%s", diff)
	}
	_, closed, err = deleteSession(f.ctx, f.s, child, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// ops's notice on child was pending: the deletion moved its M and retired it
	// (LIF-1), nothing closed.
	if len(closed) != 0 {
		t.Errorf("DeleteSession closed %v, want none", closed)
	}
	retired := awareness.ClosedNotice(notice(opsKey, child, 0, 1, 2, t0.Add(time.Second)))
	res := f.prune(awareness.RetentionPolicy{CursorTTL: 30 * day}, t0.Add(31*day))
	wantPruned := []awareness.Notice{closedOf(opsKey, target, 1), closedOf(opsKey, child2, 1), retired}
	sortNotices(wantPruned)
	sortNotices(res.Closed)
	if diff := cmp.Diff(wantPruned, res.Closed); diff != "" {
		t.Errorf("Prune closed (-want +got):\n%s", diff)
	}
	if got := f.pending(""); len(got) != 0 {
		t.Errorf("pending after every removal: %v", got)
	}
}

// testSetBasedOpen checks that a notifying append to a target with many cursors in
// every state (synced, pending, pending with newer changes, the actor itself, ahead of
// the event) plus producer-passed watchers (one already holding a cursor, new ones,
// one passed twice) leaves each cursor exactly as
// awareness.ApplyMaterial applied to it one by one would, and reports the notices in
// that order: the target's cursors by watcher key, then the new producer-passed ones.
func testSetBasedOpen(t *testing.T, f *fixture) {
	target := ref(t, targetKey)
	actor := "agent:main:subagent:actor"
	var watchers []string
	for i := range 60 {
		watchers = append(watchers, fmt.Sprintf("agent:w%02d:main", (i*37)%60))
	}
	watchers = append(watchers, actor)
	now := t0
	f.append1(now, system(targetKey, awareness.RunCompleted))
	for _, w := range watchers {
		f.watch(w, target, now)
	}
	// A third of the watchers end synced, the others pending (some with newer changes,
	// some with a follow-up opened by an acknowledgement); the actor's cursor is pending.
	now = now.Add(time.Second)
	f.append1(now, human(targetKey))
	for i, w := range watchers[:60] {
		if i%3 != 0 {
			if _, err := f.s.Ack(f.ctx, awareness.AckRequest{Watcher: w, Targets: []awareness.SessionRef{target}, Now: now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	now = now.Add(time.Second)
	f.append1(now, byAgent(targetKey, awareness.GoalChanged, watchers[0]))
	for i, w := range watchers[:60] {
		if i%3 == 1 || i%6 == 3 {
			if _, err := f.s.Ack(f.ctx, awareness.AckRequest{Watcher: w, Targets: []awareness.SessionRef{target}, Now: now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	before, err := f.s.Cursors(f.ctx, awareness.CursorQuery{TargetAgent: target.AgentID, TargetKey: target.Key})
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != len(watchers) {
		t.Fatalf("%d cursors on the target, want %d", len(before), len(watchers))
	}
	passed := []string{watchers[5], "agent:new:main", "agent:new:subagent:x", "agent:new:main"}

	now = now.Add(time.Second)
	op := f.append1(now, byAgent(targetKey, awareness.GoalChanged, actor, passed...))
	s := op.Event.Sequence

	// The per-cursor reference.
	want := map[string]awareness.Cursor{}
	var wantOpened []string
	sorted := slices.Clone(before)
	slices.SortFunc(sorted, func(a, b awareness.Cursor) int { return strings.Compare(a.Watcher, b.Watcher) })
	for _, c := range sorted {
		next, _, opened := awareness.ApplyMaterial(&c, c.Watcher, target, s, actor, now)
		want[c.Watcher] = next
		if opened {
			wantOpened = append(wantOpened, c.Watcher)
		}
	}
	for _, w := range passed {
		if _, ok := want[w]; ok {
			continue
		}
		next, _, opened := awareness.ApplyMaterial(nil, w, target, s, actor, now)
		next.TargetGeneration, next.WatcherGeneration = 1, 1 // a store's new cursor (LIF-2)
		want[w] = next
		if opened {
			wantOpened = append(wantOpened, w)
		}
	}
	after, err := f.s.Cursors(f.ctx, awareness.CursorQuery{TargetAgent: target.AgentID, TargetKey: target.Key})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]awareness.Cursor{}
	for _, c := range after {
		got[c.Watcher] = c
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cursors after the append (-per-cursor ApplyMaterial +store):\n%s", diff)
	}
	var gotOpened []string
	for _, n := range op.Opened {
		gotOpened = append(gotOpened, n.Watcher)
		if wn, ok := awareness.NoticeOf(want[n.Watcher]); !ok || !cmp.Equal(wn, n) {
			t.Errorf("opened notice %+v, want %+v", n, wn)
		}
	}
	if diff := cmp.Diff(wantOpened, gotOpened); diff != "" {
		t.Errorf("opened notices, by watcher (-want +got):\n%s", diff)
	}
	if len(wantOpened) < 20 {
		t.Fatalf("the fixture opened only %d notices", len(wantOpened))
	}
}
