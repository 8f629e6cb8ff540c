package awareness_test

// Scenario tests of the notice protocol (SPEC §3-4) through awareness.Service over the
// in-memory store (memstore_test.go), with an injected clock. They replay the upstream OpenClaw
// acceptance checklist (reference openclaw-awareness.md §8, groups C and D) where it
// applies to this service, plus the seeds' promise ("twenty rapid changes give one
// notice") and the interleavings of NTC-2/NTC-3.
//
// Mapping of OpenClaw's vocabulary: the in-memory "queue" of a gateway is, here, the
// hub's live publication to notice subscribers; a "queue reset" is a subscriber that
// goes away. Pending notices are durable cursor state (NTC-5), so a new subscription
// always starts with every pending notice.
//
// Not applicable (no test): C22 (Control UI link in the text: NTC-1 fixes the v1
// text without a link), C23 (wake coalescing and queue-only notices: this service
// reports `wake` and leaves scheduling to the gateway; it has no ambient watches),
// C24 (the `session-state:<hex>` queue context-key decoder: acks name targets
// explicitly), D31 (store-path ownership fences: one database, no store paths).

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/awareness/hubtest"
)

const (
	mainW  = "agent:main:main"
	child  = "agent:main:subagent:c1"
	child2 = "agent:main:subagent:c2"
	human  = "user:alice"
	// wait bounds every positive wait; quiet is the window in which nothing more may
	// arrive (a negative check, never a timing assertion on the happy path).
	wait  = 10 * time.Second
	quiet = 150 * time.Millisecond
)

// clock is the injected service clock. Each reading advances it by one millisecond so
// that opening times are distinct and ordered.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Millisecond)
	return c.t
}

// world is one database, reopened by restart like a service process.
type world struct {
	t     *testing.T
	ctx   context.Context
	db    *memStore // the data every restart reopens
	clk   *clock
	store *memStore
	svc   *awareness.Service
	// raw counts every notice the hub publishes (all watchers), to check "opened once"
	// below the subscription's own de-duplication.
	raw *hubtest.Sub[awareness.Notice]
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{
		t: t, ctx: context.Background(),
		db:  newMemStore(),
		clk: &clock{t: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)},
	}
	w.open()
	t.Cleanup(w.close)
	return w
}

func (w *world) open() {
	w.t.Helper()
	st := w.db.reopen()
	w.store = st
	w.svc = awareness.NewService(awareness.Config{Store: st, Now: w.clk.Now})
	w.raw = hubtest.Notices(w.svc.Hub(), "")
}

func (w *world) close() {
	if w.store == nil {
		return
	}
	w.svc.Hub().Close()
	if err := w.store.Close(); err != nil {
		w.t.Errorf("close store: %v", err)
	}
	w.store = nil
}

// restart closes the process state (hub, store) and opens the same file again. The
// caller runs the startup sweep itself when the scenario needs it.
func (w *world) restart() {
	w.t.Helper()
	w.close()
	w.open()
}

// rawPublished drains the hub's raw publications of the writes that answered so far
// (Flush: writes publish after they answer).
func (w *world) rawPublished() []awareness.Notice {
	w.svc.Flush()
	var out []awareness.Notice
	for {
		select {
		case n, ok := <-w.raw.C:
			if !ok {
				return out
			}
			out = append(out, *n)
		default:
			return out
		}
	}
}

type ev struct {
	key      string
	kind     awareness.EventKind
	actor    awareness.ActorType
	actorID  string
	watchers []string
	agentID  string
}

func (w *world) record(e ev) awareness.RecordResult {
	w.t.Helper()
	r, err := w.try(e)
	if err != nil {
		w.t.Fatalf("RecordEvent(%s on %s): %v", e.kind, e.key, err)
	}
	if !r.Recorded {
		w.t.Fatalf("RecordEvent(%s on %s) was deduplicated", e.kind, e.key)
	}
	return r
}

func (w *world) try(e ev) (awareness.RecordResult, error) {
	in := awareness.RecordInput{SessionKey: e.key, Kind: e.kind, ActorType: e.actor, Watchers: e.watchers}
	if in.ActorType == "" {
		in.ActorType = awareness.ActorHuman
	}
	if e.actorID != "" {
		in.ActorID = &e.actorID
	}
	if e.agentID != "" {
		in.AgentID = &e.agentID
	}
	return w.svc.RecordEvent(w.ctx, in)
}

// spawn records child_spawned on c naming parent (WAT-2) and returns its sequence.
func (w *world) spawn(c, parent string) int64 {
	w.t.Helper()
	r := w.record(ev{key: c, kind: awareness.ChildSpawned, actor: awareness.ActorAgent, actorID: parent, watchers: []string{parent}})
	if r.NoticesOpened != 0 {
		w.t.Fatalf("child_spawned opened %d notices, want 0 (NTC-4)", r.NoticesOpened)
	}
	return r.Event.Sequence
}

// humanTurn records a human_direct_message on key.
func (w *world) humanTurn(key string) awareness.RecordResult {
	w.t.Helper()
	return w.record(ev{key: key, kind: awareness.HumanDirectMessage, actorID: human})
}

// cursor returns the watcher's cursor on target, failing when absent.
func (w *world) cursor(watcher, target string) awareness.Cursor {
	w.t.Helper()
	c, ok := w.findCursor(watcher, target)
	if !ok {
		w.t.Fatalf("no cursor %s -> %s", watcher, target)
	}
	return c
}

func (w *world) findCursor(watcher, target string) (awareness.Cursor, bool) {
	w.t.Helper()
	cs, err := w.svc.Watches(w.ctx, &watcher, &target, nil)
	if err != nil {
		w.t.Fatalf("Watches: %v", err)
	}
	switch len(cs) {
	case 0:
		return awareness.Cursor{}, false
	case 1:
		return cs[0], true
	}
	w.t.Fatalf("%d cursors %s -> %s", len(cs), watcher, target)
	return awareness.Cursor{}, false
}

func (w *world) wantLNM(watcher, target string, l, n, m int64) {
	w.t.Helper()
	c := w.cursor(watcher, target)
	if c.L != l || c.N != n || c.M != m {
		w.t.Fatalf("cursor %s -> %s: L,N,M = %d,%d,%d, want %d,%d,%d", watcher, target, c.L, c.N, c.M, l, n, m)
	}
}

func (w *world) pending(watcher string) []awareness.Notice {
	w.t.Helper()
	ns, err := w.svc.PendingNotices(w.ctx, watcher)
	if err != nil {
		w.t.Fatalf("PendingNotices: %v", err)
	}
	return ns
}

func (w *world) ack(watcher string, targets []string) []awareness.Notice {
	w.t.Helper()
	ns, err := w.svc.AckNotices(w.ctx, watcher, targets, nil, nil)
	if err != nil {
		w.t.Fatalf("AckNotices: %v", err)
	}
	return ns
}

func (w *world) sweep() int {
	w.t.Helper()
	n, err := w.svc.Sweep(w.ctx)
	if err != nil {
		w.t.Fatalf("Sweep: %v", err)
	}
	return n
}

// subscriber is a live Service.SubscribeNotices stream.
type subscriber struct {
	t      *testing.T
	c      <-chan awareness.Notice
	end    func() error
	cancel context.CancelFunc
}

func (w *world) subscribe(watcher string) *subscriber {
	w.t.Helper()
	ctx, cancel := context.WithCancel(w.ctx)
	var wp *string
	if watcher != "" {
		wp = &watcher
	}
	c, end, err := w.svc.SubscribeNotices(ctx, wp, false)
	if err != nil {
		cancel()
		w.t.Fatalf("SubscribeNotices: %v", err)
	}
	s := &subscriber{t: w.t, c: c, end: end, cancel: cancel}
	w.t.Cleanup(s.stop)
	return s
}

// stop ends the subscription and waits for its goroutine ("queue reset").
func (s *subscriber) stop() {
	s.cancel()
	for range s.c {
	}
	_ = s.end()
}

func (s *subscriber) next() awareness.Notice {
	s.t.Helper()
	select {
	case n, ok := <-s.c:
		if !ok {
			s.t.Fatalf("notice stream ended: %v", s.end())
		}
		return n
	case <-time.After(wait):
		s.t.Fatalf("no notice within %v", wait)
	}
	return awareness.Notice{}
}

// none checks that nothing arrives within the quiet window.
func (s *subscriber) none() {
	s.t.Helper()
	select {
	case n, ok := <-s.c:
		if ok {
			s.t.Fatalf("unexpected notice: %q (N=%d M=%d)", n.Text, n.NotifiedVersion, n.MaterialVersion)
		}
		s.t.Fatalf("notice stream ended: %v", s.end())
	case <-time.After(quiet):
	}
}

func wantText(t *testing.T, n awareness.Notice, target string, since int64) {
	t.Helper()
	want := `Session "` + target + `" changed (other actor). Reconcile before acting: session_status sessionKey "` +
		target + `" changesSince ` + itoa(since) + `.`
	if n.Text != want {
		t.Fatalf("notice text\n got %q\nwant %q", n.Text, want)
	}
	if n.ChangesSince != since || n.Target.Key != target {
		t.Fatalf("notice target %s changesSince %d, want %s %d", n.Target.Key, n.ChangesSince, target, since)
	}
}

func itoa(v int64) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

// ---------------------------------------------------------------------------------------
// C. Notices: freeze, ack, reopen, sweep

// C13: seed, then 3 material events -> 1 notice; L = first-1 (the seed), N = first,
// M = third.
func TestScenarioC13_SeedThenThreeMaterialEventsOneNotice(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe(mainW)
	seed := w.spawn(child, mainW)
	var opened int
	var seqs []int64
	for range 3 {
		r := w.humanTurn(child)
		opened += r.NoticesOpened
		seqs = append(seqs, r.Event.Sequence)
	}
	if opened != 1 {
		t.Fatalf("notices opened = %d, want 1", opened)
	}
	if seqs[0] != seed+1 {
		t.Fatalf("first material sequence %d, want %d (dense per session)", seqs[0], seed+1)
	}
	w.wantLNM(mainW, child, seqs[0]-1, seqs[0], seqs[2])
	n := sub.next()
	wantText(t, n, child, seed)
	if n.NotifiedVersion != seqs[0] || n.MaterialVersion != seqs[0] {
		t.Errorf("live notice N,M = %d,%d, want %d,%d (as opened)", n.NotifiedVersion, n.MaterialVersion, seqs[0], seqs[0])
	}
	sub.none()
	if raw := w.rawPublished(); len(raw) != 1 {
		t.Errorf("hub published %d notices, want 1", len(raw))
	}
	if p := w.pending(mainW); len(p) != 1 || p[0].Text != n.Text || p[0].MaterialVersion != seqs[2] {
		t.Errorf("pending = %+v, want the one notice with M=%d", p, seqs[2])
	}
}

// C14: seed, frozen event, interleaved event, queue reset, ack -> L = frozen,
// N = M = interleaved; exactly one new notice `changesSince <frozen>`.
func TestScenarioC14_InterleavedEventThenAckReopensOnce(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe(mainW)
	seed := w.spawn(child, mainW)
	frozen := w.humanTurn(child).Event.Sequence
	inter := w.humanTurn(child).Event.Sequence
	wantText(t, sub.next(), child, seed)
	sub.stop() // queue reset
	w.rawPublished()

	follow := w.ack(mainW, nil)
	if len(follow) != 1 {
		t.Fatalf("ack opened %d follow-ups, want 1", len(follow))
	}
	wantText(t, follow[0], child, frozen)
	w.wantLNM(mainW, child, frozen, inter, inter)
	if raw := w.rawPublished(); len(raw) != 1 || raw[0].Text != follow[0].Text {
		t.Fatalf("hub published %d notices after ack, want the one follow-up", len(raw))
	}
	// A new subscriber (the queue after a reset) finds exactly that notice.
	again := w.subscribe(mainW)
	wantText(t, again.next(), child, frozen)
	again.none()
}

// C15: seed, material event, a run_completed (log-only) event, queue reset, ack ->
// L = N = M = material; no notice; the sweep queues nothing either.
func TestScenarioC15_LogOnlyEventAfterMaterialAckClosesEverything(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe(mainW)
	seed := w.spawn(child, mainW)
	mat := w.humanTurn(child).Event.Sequence
	r := w.record(ev{key: child, kind: awareness.RunCompleted, actor: awareness.ActorSystem, watchers: []string{mainW}})
	if r.NoticesOpened != 0 {
		t.Fatalf("run_completed opened %d notices (NTC-4)", r.NoticesOpened)
	}
	wantText(t, sub.next(), child, seed)
	sub.stop()
	w.rawPublished()
	if follow := w.ack(mainW, nil); len(follow) != 0 {
		t.Fatalf("ack opened %d follow-ups, want 0", len(follow))
	}
	w.wantLNM(mainW, child, mat, mat, mat)
	if n := w.sweep(); n != 0 {
		t.Fatalf("sweep republished %d notices, want 0", n)
	}
	w.restart()
	if n := w.sweep(); n != 0 {
		t.Fatalf("sweep after restart republished %d notices, want 0", n)
	}
	if raw := w.rawPublished(); len(raw) != 0 {
		t.Fatalf("hub published %d notices, want 0", len(raw))
	}
	if p := w.pending(mainW); len(p) != 0 {
		t.Fatalf("pending = %d notices, want 0", len(p))
	}
}

// C16: restart: seed, material event(s), queue reset, restart, sweep -> the pending
// notice is unchanged (same N, text and ID: NTC-5), nothing is published (the process
// has no subscriber yet), a (re)subscription delivers it once, and the exact ack of
// the notice drained before the restart acknowledges it.
func TestScenarioC16_RestartKeepsThePendingNotice_NTC5(t *testing.T) {
	w := newWorld(t)
	seed := w.spawn(child, mainW)
	first := w.humanTurn(child).Event.Sequence
	last := w.humanTurn(child).Event.Sequence // PENDING+: M > N
	before := w.pending(mainW)
	if len(before) != 1 || before[0].NotifiedVersion != first {
		t.Fatalf("pending before restart = %+v, want N=%d", before, first)
	}
	w.restart()
	if n := w.sweep(); n != 0 {
		t.Fatalf("sweep opened %d notices, want 0", n)
	}
	if raw := w.rawPublished(); len(raw) != 0 {
		t.Fatalf("hub published %d notices at the sweep, want 0", len(raw))
	}
	after := w.pending(mainW)
	if len(after) != 1 || after[0].Text != before[0].Text || after[0].ID() != before[0].ID() ||
		after[0].NotifiedVersion != first {
		t.Errorf("pending after the restart = %+v, want %+v unchanged", after, before[0])
	}
	w.wantLNM(mainW, child, seed, first, last)
	sub := w.subscribe(mainW)
	wantText(t, sub.next(), child, seed)
	sub.none()
	// A second sweep (another process's start) publishes nothing either.
	if n := w.sweep(); n != 0 {
		t.Fatalf("second sweep opened %d, want 0", n)
	}
	sub.none()
	acks, err := w.svc.AcknowledgeNotices(w.ctx, mainW, []awareness.NoticeRef{{Target: child, NotifiedVersion: first}})
	if err != nil {
		t.Fatal(err)
	}
	if len(acks) != 1 || acks[0].Outcome != awareness.AckAcknowledged || acks[0].FollowUp == nil ||
		acks[0].FollowUp.NotifiedVersion != last || acks[0].FollowUp.ChangesSince != first {
		t.Fatalf("exact ack after two restarts: %+v, want acknowledged with the follow-up %d..%d", acks, first, last)
	}
}

// C17: a lost queued notice self-heals. OpenClaw re-enqueues the same text on the next
// material event; here the notice is durable, so the next material event opens
// nothing new (NTC-2) and any (re)subscription delivers exactly the one notice.
func TestScenarioC17_LostNoticeSelfHeals(t *testing.T) {
	w := newWorld(t)
	seed := w.spawn(child, mainW)
	lost := w.subscribe(mainW)
	w.humanTurn(child)
	n1 := lost.next()
	lost.stop() // the notice is lost with the subscriber
	r := w.humanTurn(child)
	if r.NoticesOpened != 0 {
		t.Fatalf("next material event opened %d notices, want 0 (one is pending)", r.NoticesOpened)
	}
	sub := w.subscribe(mainW)
	n2 := sub.next()
	wantText(t, n2, child, seed)
	if n2.Text != n1.Text {
		t.Fatalf("redelivered text %q differs from %q", n2.Text, n1.Text)
	}
	sub.none()
}

// C18: an event whose actorId is the watcher leaves the cursor at the seed; no notice.
func TestScenarioC18_SelfActorLeavesCursorAtSeed(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe(mainW)
	seed := w.spawn(child, mainW)
	for _, k := range []awareness.EventKind{awareness.HumanDirectMessage, awareness.GoalChanged} {
		r := w.record(ev{key: child, kind: k, actor: awareness.ActorAgent, actorID: mainW, watchers: []string{mainW}})
		if r.NoticesOpened != 0 {
			t.Fatalf("self %s opened %d notices", k, r.NoticesOpened)
		}
	}
	w.wantLNM(mainW, child, seed, seed, seed)
	sub.none()
}

// C19: upstream_missing notifies seeded watchers (one notice).
func TestScenarioC19_UpstreamMissingNotifies(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe(mainW)
	seed := w.spawn(child, mainW)
	r := w.record(ev{key: child, kind: awareness.UpstreamMissing, actor: awareness.ActorSystem})
	if r.NoticesOpened != 1 {
		t.Fatalf("upstream_missing opened %d notices, want 1", r.NoticesOpened)
	}
	wantText(t, sub.next(), child, seed)
	sub.none()
}

// C20: acknowledging something else (another target, an empty target list, another
// watcher) does not ack; acknowledging the target sets L to the frozen material
// sequence.
func TestScenarioC20_OnlyDrainingTheNoticeAcks(t *testing.T) {
	w := newWorld(t)
	seed := w.spawn(child, mainW)
	w.spawn(child2, mainW)
	mat := w.humanTurn(child).Event.Sequence
	w.ack(mainW, []string{child2})
	w.ack(mainW, []string{})
	w.ack("agent:ops:main", nil)
	w.wantLNM(mainW, child, seed, mat, mat)
	if follow := w.ack(mainW, []string{child}); len(follow) != 0 {
		t.Fatalf("ack opened %d follow-ups", len(follow))
	}
	w.wantLNM(mainW, child, mat, mat, mat)
	if p := w.pending(mainW); len(p) != 0 {
		t.Fatalf("pending after ack = %d", len(p))
	}
}

// C21: a main watcher's notice carries wake=true; a nested sub-agent watcher's notice
// has wake=false (NTC-6).
func TestScenarioC21_WakeMainNotNestedSubagent(t *testing.T) {
	w := newWorld(t)
	nested := "agent:main:subagent:c1:subagent:g1"
	all := w.subscribe("")
	w.spawn(child, mainW)
	w.spawn(nested, child)
	w.humanTurn(child)
	w.humanTurn(nested)
	got := map[string]bool{}
	for range 2 {
		n := all.next()
		got[n.Watcher] = n.Wake
	}
	if wake, ok := got[mainW]; !ok || !wake {
		t.Errorf("main watcher wake = %v (present %v), want true", wake, ok)
	}
	if wake, ok := got[child]; !ok || wake {
		t.Errorf("sub-agent watcher wake = %v (present %v), want false", wake, ok)
	}
	all.none()
}

// ---------------------------------------------------------------------------------------
// D. Watch registration and cleanup

// D25: self-watch and a bare watcher are refused; a valid registration starts at the
// pre-registration head with no notice; the next event notifies `changesSince <head>`;
// re-registering keeps L/N/M.
func TestScenarioD25_ExplicitRegistration(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe("")
	w.humanTurn(child)
	w.humanTurn(child)
	for _, watcher := range []string{child, "global"} {
		res, err := w.svc.Watch(w.ctx, watcher, child, nil)
		if err != nil || res.Watched || res.Reason == "" {
			t.Fatalf("Watch(%s, %s) = %+v, %v; want watched=false with a reason", watcher, child, res, err)
		}
	}
	res, err := w.svc.Watch(w.ctx, mainW, child, nil)
	if err != nil || !res.Watched {
		t.Fatalf("Watch = %+v, %v", res, err)
	}
	w.wantLNM(mainW, child, 2, 2, 2)
	sub.none()
	r := w.humanTurn(child)
	if r.NoticesOpened != 1 {
		t.Fatalf("opened %d, want 1", r.NoticesOpened)
	}
	wantText(t, sub.next(), child, 2)
	again, err := w.svc.Watch(w.ctx, mainW, child, nil)
	if err != nil || !again.Watched {
		t.Fatalf("re-Watch = %+v, %v", again, err)
	}
	w.wantLNM(mainW, child, 2, 3, 3)
	sub.none()
}

// D26: a human turn on an unparented, unwatched session is logged but notifies no one
// and creates no cursor; after registration the same turn opens one notice.
func TestScenarioD26_UnwatchedSessionNotifiesNoOneUntilRegistered(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe("")
	target := "agent:main:telegram:direct:bob"
	if r := w.humanTurn(target); r.NoticesOpened != 0 {
		t.Fatalf("unwatched turn opened %d notices", r.NoticesOpened)
	}
	if cs, _ := w.svc.Watches(w.ctx, nil, &target, nil); len(cs) != 0 {
		t.Fatalf("unwatched turn created %d cursors", len(cs))
	}
	sub.none()
	if res, err := w.svc.Watch(w.ctx, mainW, target, nil); err != nil || !res.Watched {
		t.Fatalf("Watch: %+v, %v", res, err)
	}
	if r := w.humanTurn(target); r.NoticesOpened != 1 {
		t.Fatalf("watched turn opened %d notices, want 1", r.NoticesOpened)
	}
	wantText(t, sub.next(), target, 1)
}

// D27: a bare `global` watcher key creates no cursor and no notice: producer-passed it
// is skipped and reported while the event is recorded (KEY-3, WAT-4); registered it is
// refused.
func TestScenarioD27_BareGlobalWatcherNeverWatches(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe("")
	for _, k := range []awareness.EventKind{awareness.ChildSpawned, awareness.HumanDirectMessage} {
		r, err := w.try(ev{key: child, kind: k, actorID: human, watchers: []string{"global"}})
		if err != nil || !r.Recorded || r.NoticesOpened != 0 {
			t.Fatalf("%s with watcher global: %+v, %v; want recorded, no notice", k, r, err)
		}
		if len(r.SkippedWatchers) != 1 || r.SkippedWatchers[0].Watcher != "global" || r.SkippedWatchers[0].Reason == "" {
			t.Fatalf("%s with watcher global: skipped %+v, want global with a reason", k, r.SkippedWatchers)
		}
	}
	st, err := w.svc.SessionStatus(w.ctx, child, nil, nil, nil)
	if err != nil || st.StateVersion != 2 {
		t.Fatalf("stateVersion after the appends = %d, %v; want 2", st.StateVersion, err)
	}
	if cs, err := w.svc.Watches(w.ctx, nil, ptr(child), nil); err != nil || len(cs) != 0 {
		t.Fatalf("cursors on the child: %+v, %v; want none", cs, err)
	}
	if res, err := w.svc.Watch(w.ctx, "global", child, nil); err != nil || res.Watched {
		t.Fatalf("Watch(global) = %+v, %v", res, err)
	}
	if cs, err := w.svc.Watches(w.ctx, nil, nil, nil); err != nil || len(cs) != 0 {
		t.Fatalf("cursors = %d, %v; want none", len(cs), err)
	}
	sub.none()
}

// D28: a watcher reset removes its cursors and keeps the targets' events. Deleting the
// target removes its earlier events and retires the cursors on it, which go once their
// notices (the deletion's last) are acknowledged (LIF-1). Unlike OpenClaw (head -> 0), the
// head stays (SIG-3: versions never regress) and the delta reports a history gap.
func TestScenarioD28_ResetAndDelete(t *testing.T) {
	w := newWorld(t)
	w.spawn(child, mainW)
	w.humanTurn(child)
	if ok, err := w.svc.ResetSession(w.ctx, mainW, nil); err != nil || !ok {
		t.Fatalf("ResetSession = %v, %v", ok, err)
	}
	if _, ok := w.findCursor(mainW, child); ok {
		t.Fatal("cursor survived the watcher reset")
	}
	zero := int64(0)
	st, err := w.svc.SessionStatus(w.ctx, child, nil, &zero, nil)
	if err != nil || st.StateVersion != 2 || len(st.Changes.Events) != 2 {
		t.Fatalf("target after reset: %+v, %v; want 2 events", st, err)
	}
	if p := w.pending(mainW); len(p) != 0 {
		t.Fatalf("pending after reset = %d", len(p))
	}

	// Watch again, then delete the target.
	if res, err := w.svc.Watch(w.ctx, mainW, child, nil); err != nil || !res.Watched {
		t.Fatalf("Watch: %+v, %v", res, err)
	}
	w.humanTurn(child)
	if ok, err := w.svc.DeleteSession(w.ctx, child, nil); err != nil || !ok {
		t.Fatalf("DeleteSession = %v, %v", ok, err)
	}
	// LIF-1: the deleted event (4) is logged, the watcher's pending notice (3) keeps
	// its text and takes the deletion as material; the cursor is retired.
	c, ok := w.findCursor(mainW, child)
	if !ok || !c.Retired || c.N != 3 || c.M != 4 {
		t.Fatalf("cursor after the target's deletion: %+v %v; want retired, N 3, M 4", c, ok)
	}
	st, err = w.svc.SessionStatus(w.ctx, child, nil, &zero, nil)
	if err != nil || st.StateVersion != 4 || len(st.Changes.Events) != 1 || st.Changes.Events[0].Kind != awareness.Deleted || !st.Changes.HistoryGap {
		t.Fatalf("deleted target: %+v, %v; want version 4, the deleted event, a history gap", st, err)
	}
	// Acknowledging drains the old notice, then the deletion's; then the cursor is gone.
	for _, n := range []int64{3, 4} {
		p := w.pending(mainW)
		if len(p) != 1 || p[0].NotifiedVersion != n {
			t.Fatalf("pending = %+v, want one notice at %d", p, n)
		}
		if _, err := w.svc.AcknowledgeNotices(w.ctx, mainW, []awareness.NoticeRef{{Target: child, NotifiedVersion: n}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := w.findCursor(mainW, child); ok {
		t.Fatal("retired cursor survived its last acknowledgement")
	}
	if p := w.pending(mainW); len(p) != 0 {
		t.Fatalf("pending after delete = %d", len(p))
	}
}

// D29: registration refuses a bare watcher and malformed agent ids, and rejects a
// targetAgentId that contradicts the key or is empty; a valid explicit targetAgentId
// is accepted. Deviation: OpenClaw refuses the target `global`; SPEC KEY-3 only forbids
// bare keys as watchers, so `global` with an agent is a valid, agent-scoped target.
func TestScenarioD29_RegistrationRefusals(t *testing.T) {
	w := newWorld(t)
	refused := []struct{ watcher, target string }{
		{"global", child},
		{"agent:Bad!:main", child},
		{"cron:job1", child},
	}
	for _, c := range refused {
		res, err := w.svc.Watch(w.ctx, c.watcher, c.target, nil)
		if err != nil || res.Watched || res.Reason == "" {
			t.Errorf("Watch(%q, %q) = %+v, %v; want watched=false with a reason", c.watcher, c.target, res, err)
		}
	}
	ops, empty, bad := "ops", "", "Bad!"
	errs := []struct {
		target string
		agent  *string
	}{
		{"agent:b@d:x", nil},
		{child, &ops},
		{child, &empty},
		{"global", &empty},
		{"global", &bad},
	}
	for _, c := range errs {
		if _, err := w.svc.Watch(w.ctx, mainW, c.target, c.agent); awareness.ErrorCode(err) != awareness.EINVALID {
			t.Errorf("Watch(%q, agent %v): err %v, want INVALID_ARGUMENT", c.target, c.agent, err)
		}
	}
	if cs, _ := w.svc.Watches(w.ctx, nil, nil, nil); len(cs) != 0 {
		t.Fatalf("refusals wrote %d cursors", len(cs))
	}
	mainA := "main"
	if res, err := w.svc.Watch(w.ctx, mainW, child, &mainA); err != nil || !res.Watched {
		t.Fatalf("Watch with a matching targetAgentId = %+v, %v", res, err)
	}
	res, err := w.svc.Watch(w.ctx, mainW, "global", &ops)
	if err != nil || !res.Watched || res.Cursor.Target != (awareness.SessionRef{AgentID: "ops", Key: "global"}) {
		t.Fatalf("Watch(global, ops) = %+v, %v", res, err)
	}
}

// D30: raw `global` events of two agents stay agent-scoped: independent heads, no
// cursor seeded, nothing published.
func TestScenarioD30_GlobalEventsStayAgentScoped(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe("")
	for _, agent := range []string{"main", "ops", "ops"} {
		r := w.record(ev{key: "global", agentID: agent, kind: awareness.HumanDirectMessage, actorID: human})
		if r.NoticesOpened != 0 {
			t.Fatalf("global event opened %d notices", r.NoticesOpened)
		}
	}
	for agent, want := range map[string]int64{"main": 1, "ops": 2} {
		st, err := w.svc.SessionStatus(w.ctx, "global", &agent, nil, nil)
		if err != nil || st.StateVersion != want {
			t.Errorf("global/%s version = %d, %v; want %d", agent, st.StateVersion, err, want)
		}
	}
	if cs, _ := w.svc.Watches(w.ctx, nil, nil, nil); len(cs) != 0 {
		t.Fatalf("%d cursors seeded", len(cs))
	}
	// An ops-scoped watch on global is not touched by main's global events.
	ops := "ops"
	if res, err := w.svc.Watch(w.ctx, mainW, "global", &ops); err != nil || !res.Watched {
		t.Fatalf("Watch: %+v, %v", res, err)
	}
	w.record(ev{key: "global", agentID: "main", kind: awareness.HumanDirectMessage, actorID: human})
	sub.none()
	r := w.record(ev{key: "global", agentID: "ops", kind: awareness.HumanDirectMessage, actorID: human})
	if r.NoticesOpened != 1 {
		t.Fatalf("ops global event opened %d notices, want 1", r.NoticesOpened)
	}
	n := sub.next()
	if n.Target != (awareness.SessionRef{AgentID: "ops", Key: "global"}) {
		t.Fatalf("notice target = %+v", n.Target)
	}
	want := `Session "global" changed (other actor). Reconcile before acting: session_status sessionKey "global" agentId "ops" changesSince 2.`
	if n.Text != want || n.ChangesSince != 2 {
		t.Fatalf("notice text\n got %q\nwant %q (NTC-1: a bare target names its agent)", n.Text, want)
	}
}

// ---------------------------------------------------------------------------------------
// Beyond the checklist

// The seeds' promise (NTC-2): twenty rapid changes to one target, from concurrent
// producers, give exactly one notice, byte identical, delivered once to a live
// subscriber.
func TestSeedsPromise_TwentyRapidChangesOneNotice_NTC2(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe(mainW)
	seed := w.spawn(child, mainW)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		opened int
		errs   []error
	)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			kind := awareness.HumanDirectMessage
			if i%4 == 3 {
				kind = awareness.GoalChanged
			}
			r, err := w.try(ev{key: child, kind: kind, actorID: human})
			mu.Lock()
			defer mu.Unlock()
			opened += r.NoticesOpened
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if opened != 1 {
		t.Fatalf("twenty changes opened %d notices, want 1", opened)
	}
	n := sub.next()
	wantText(t, n, child, seed)
	sub.none()
	if raw := w.rawPublished(); len(raw) != 1 {
		t.Fatalf("hub published %d notices, want 1", len(raw))
	}
	p := w.pending(mainW)
	if len(p) != 1 || p[0].Text != n.Text || p[0].MaterialVersion != seed+20 || p[0].NotifiedVersion != seed+1 {
		t.Fatalf("pending = %+v; want one notice N=%d M=%d", p, seed+1, seed+20)
	}
	// A restart and sweep change nothing: the same notice, byte for byte (NTC-5).
	w.restart()
	w.sweep()
	p2 := w.pending(mainW)
	if len(p2) != 1 || p2[0] != p[0] {
		t.Fatalf("pending after restart = %+v, want %+v", p2, p[0])
	}
}

// Interleaving (NTC-3): open, more events, ack -> exactly one follow-up
// `changesSince <old N>`; ack again -> none.
func TestInterleaving_AckReopensOnceThenNothing_NTC3(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe(mainW)
	seed := w.spawn(child, mainW)
	oldN := w.humanTurn(child).Event.Sequence
	wantText(t, sub.next(), child, seed)
	w.humanTurn(child)
	last := w.record(ev{key: child, kind: awareness.GoalChanged, actor: awareness.ActorAgent, actorID: "agent:ops:main"}).Event.Sequence
	sub.none()
	follow := w.ack(mainW, []string{child})
	if len(follow) != 1 {
		t.Fatalf("first ack opened %d follow-ups, want 1", len(follow))
	}
	wantText(t, follow[0], child, oldN)
	n := sub.next()
	wantText(t, n, child, oldN)
	if n.NotifiedVersion != last {
		t.Fatalf("follow-up N = %d, want %d", n.NotifiedVersion, last)
	}
	sub.none()
	if follow := w.ack(mainW, []string{child}); len(follow) != 0 {
		t.Fatalf("second ack opened %d follow-ups, want 0", len(follow))
	}
	w.wantLNM(mainW, child, last, last, last)
	if follow := w.ack(mainW, nil); len(follow) != 0 {
		t.Fatalf("third ack opened %d follow-ups, want 0", len(follow))
	}
	sub.none()
	// The delta of the follow-up covers exactly the interleaved events.
	st, err := w.svc.SessionStatus(w.ctx, child, nil, &oldN, nil)
	if err != nil || len(st.Changes.Events) != int(last-oldN) {
		t.Fatalf("changesSince %d: %+v, %v", oldN, st.Changes, err)
	}
}

// Self-suppression mixed with foreign events (NTC-2, reference §4.3): the watcher's own
// events never open or move anything, whatever the spelling of its key; foreign events
// interleaved with them do; the delta still lists the watcher's own events.
func TestSelfSuppressionMixedWithForeignEvents_NTC2(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe(mainW)
	seed := w.spawn(child, mainW)
	self := func(actorID string) {
		t.Helper()
		r := w.record(ev{key: child, kind: awareness.HumanDirectMessage, actor: awareness.ActorAgent, actorID: actorID})
		if r.NoticesOpened != 0 {
			t.Fatalf("self event (%q) opened %d notices", actorID, r.NoticesOpened)
		}
	}
	self(mainW)
	w.wantLNM(mainW, child, seed, seed, seed)
	f1 := w.humanTurn(child).Event.Sequence
	wantText(t, sub.next(), child, seed)
	self(" Agent:MAIN:Main ")
	w.wantLNM(mainW, child, seed, f1, f1)
	f2 := w.record(ev{key: child, kind: awareness.GoalChanged, actor: awareness.ActorAgent, actorID: child2}).Event.Sequence
	self(mainW)
	w.wantLNM(mainW, child, seed, f1, f2)
	sub.none()
	follow := w.ack(mainW, nil)
	if len(follow) != 1 {
		t.Fatalf("ack opened %d follow-ups, want 1", len(follow))
	}
	wantText(t, sub.next(), child, f1)
	w.wantLNM(mainW, child, f1, f2, f2)
	if follow := w.ack(mainW, nil); len(follow) != 0 {
		t.Fatalf("second ack opened %d follow-ups", len(follow))
	}
	// The own event after f2 leaves L behind it: the next delta lists it.
	st, err := w.svc.SessionStatus(w.ctx, child, nil, &f2, nil)
	if err != nil || len(st.Changes.Events) != 1 || st.Changes.Events[0].ActorID != mainW {
		t.Fatalf("delta after f2 = %+v, %v; want the watcher's own event", st.Changes, err)
	}
	sub.none()
}

// child_spawned seeding (WAT-2, NTC-4): history before the spawn never notifies; the
// seed opens nothing; the first foreign event after it says `changesSince <spawn>`. A
// repeated spawn never swallows a pending notice (deliberate deviation from OpenClaw,
// see SeedCursor).
func TestChildSpawnedSeedsCursor_WAT2(t *testing.T) {
	w := newWorld(t)
	sub := w.subscribe("")
	for range 3 {
		if r := w.humanTurn(child); r.NoticesOpened != 0 {
			t.Fatal("an unwatched turn opened a notice")
		}
	}
	seed := w.spawn(child, mainW)
	if seed != 4 {
		t.Fatalf("spawn sequence %d, want 4", seed)
	}
	w.wantLNM(mainW, child, 4, 4, 4)
	if n := w.sweep(); n != 0 {
		t.Fatalf("sweep after seeding republished %d", n)
	}
	sub.none()
	w.humanTurn(child)
	wantText(t, sub.next(), child, 4)
	if again := w.spawn(child, mainW); again != 6 {
		t.Fatalf("second spawn sequence %d, want 6", again)
	}
	w.wantLNM(mainW, child, 4, 5, 5) // untouched: child_spawned is not material
	if p := w.pending(mainW); len(p) != 1 {
		t.Fatalf("repeated spawn swallowed the pending notice: %d pending", len(p))
	}
	sub.none()
}

// Explicit watch (WAT-3) starts at the target's current version: earlier history never
// notifies, not even through the startup sweep; the next foreign event says
// `changesSince <version at watch time>`.
func TestExplicitWatchStartsAtCurrentVersion_WAT3(t *testing.T) {
	w := newWorld(t)
	target := "agent:ops:slack:group:c42"
	for range 5 {
		w.humanTurn(target)
	}
	res, err := w.svc.Watch(w.ctx, mainW, target, nil)
	if err != nil || !res.Watched || res.Cursor.L != 5 || res.Cursor.N != 5 || res.Cursor.M != 5 {
		t.Fatalf("Watch = %+v, %v; want a cursor at 5", res, err)
	}
	w.restart()
	if n := w.sweep(); n != 0 {
		t.Fatalf("sweep republished %d notices for history", n)
	}
	sub := w.subscribe(mainW)
	sub.none()
	w.humanTurn(target)
	wantText(t, sub.next(), target, 5)
}
