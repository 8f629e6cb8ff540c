package models

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// The Listener tests stand two processes up as two stores on one PostgreSQL database:
// process A has a hub, a service and a listener; process B only writes.

const (
	lsWatcher = "agent:main:main"
	lsWait    = 15 * time.Second
	lsQuiet   = 300 * time.Millisecond
)

type listenerRig struct {
	t      *testing.T
	dsn    string
	a, b   *Store
	svcA   *awareness.Service
	svcB   *awareness.Service
	lis    *Listener
	notesA <-chan awareness.Notice
	eventA <-chan awareness.Event
}

func newListenerRig(t *testing.T, poll time.Duration) *listenerRig {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	r := &listenerRig{t: t, dsn: dsn, a: mustOpenPostgresAt(t, dsn), b: mustOpenPostgresAt(t, dsn)}
	hubA := awareness.NewHub()
	t.Cleanup(hubA.Close)
	r.svcA = awareness.NewService(awareness.Config{Store: r.a, Hub: hubA})
	r.svcB = awareness.NewService(awareness.Config{Store: r.b})
	lis, err := NewListener(ListenerConfig{Store: r.a, Hub: hubA, Poll: poll})
	if err != nil {
		t.Fatal(err)
	}
	r.lis = lis
	lis.Start(context.Background())
	t.Cleanup(lis.Stop)
	r.waitConnects(1)

	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := lsWatcher
	r.notesA, _, err = r.svcA.SubscribeNotices(ctx, &w, false)
	if err != nil {
		t.Fatal(err)
	}
	r.eventA, _, err = r.svcA.SubscribeEvents(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *listenerRig) waitConnects(n int64) {
	r.t.Helper()
	deadline := time.Now().Add(lsWait)
	for r.lis.Connects() < n {
		if time.Now().After(deadline) {
			r.t.Fatalf("listener connects: %d, want %d", r.lis.Connects(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// record records on B a human turn into target with lsWatcher as producer-passed
// watcher (WAT-4), and returns the result.
func (r *listenerRig) record(svc *awareness.Service, target string) awareness.RecordResult {
	r.t.Helper()
	res, err := svc.RecordEvent(context.Background(), awareness.RecordInput{SessionKey: target,
		Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, Watchers: []string{lsWatcher}})
	if err != nil {
		r.t.Fatalf("RecordEvent %s: %v", target, err)
	}
	return res
}

func (r *listenerRig) nextNotice() awareness.Notice {
	r.t.Helper()
	select {
	case n, ok := <-r.notesA:
		if !ok {
			r.t.Fatal("notice subscription ended")
		}
		return n
	case <-time.After(lsWait):
		r.t.Fatalf("no notice within %v", lsWait)
	}
	return awareness.Notice{}
}

func (r *listenerRig) noNotice() {
	r.t.Helper()
	select {
	case n := <-r.notesA:
		r.t.Fatalf("unexpected notice %+v", n)
	case <-time.After(lsQuiet):
	}
}

func (r *listenerRig) nextEvent() awareness.Event {
	r.t.Helper()
	select {
	case e := <-r.eventA:
		return e
	case <-time.After(lsWait):
		r.t.Fatalf("no event within %v", lsWait)
	}
	return awareness.Event{}
}

// A notice opened on B reaches A's subscriber exactly once; B's ack opens the
// follow-up, which reaches A once; an event recorded on B reaches A's event stream.
func TestListener_CrossProcessNoticesAndAcks(t *testing.T) {
	r := newListenerRig(t, time.Minute)
	target := "agent:main:subagent:x"

	res := r.record(r.svcB, target)
	if res.NoticesOpened != 1 {
		t.Fatalf("opened %d notices", res.NoticesOpened)
	}
	if e := r.nextEvent(); e.Session.Key != target || e.Sequence != 1 {
		t.Fatalf("event on A: %+v", e)
	}
	n := r.nextNotice()
	if n.Target.Key != target || n.ChangesSince != 0 || n.NotifiedVersion != 1 {
		t.Fatalf("notice on A: %+v", n)
	}
	r.noNotice()

	// M > N on B, then the ack on B opens exactly one follow-up, seen once on A.
	r.record(r.svcB, target)
	follow, err := r.svcB.AckNotices(context.Background(), lsWatcher, nil, nil, nil)
	if err != nil || len(follow) != 1 {
		t.Fatalf("ack on B: %v, %+v", err, follow)
	}
	n2 := r.nextNotice()
	if n2.ID() != follow[0].ID() || n2.ChangesSince != 1 {
		t.Fatalf("follow-up on A: %+v, want %+v", n2, follow[0])
	}
	r.noNotice()

	// An ack on A; the next foreign change on A notifies once, locally.
	if _, err := r.svcA.AckNotices(context.Background(), lsWatcher, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	r.record(r.svcA, target)
	if n3 := r.nextNotice(); n3.ChangesSince != 2 || n3.NotifiedVersion != 3 {
		t.Fatalf("next notice on A: %+v", n3)
	}
	r.noNotice()
}

// Listener loss: the listener's backend is terminated while B appends; every notice
// opened meanwhile reaches A after the reconnect (LISTEN, then scan), none twice.
func TestListener_TerminatedConnectionLosesNothing(t *testing.T) {
	r := newListenerRig(t, time.Minute)
	const targets = 30
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range targets {
			r.record(r.svcB, fmt.Sprintf("agent:main:subagent:t%02d", i))
			if i == targets/3 {
				if n := terminateListener(t, r.dsn, r.lis.appName); n != 1 {
					t.Errorf("terminated %d listener backends, want 1", n)
				}
			}
		}
	}()
	got := map[string]int{}
	for range targets {
		n := r.nextNotice()
		got[n.Target.Key]++
	}
	<-done
	r.noNotice()
	for k, c := range got {
		if c != 1 {
			t.Errorf("%s: %d notices", k, c)
		}
	}
	if len(got) != targets {
		t.Errorf("notices for %d targets, want %d", len(got), targets)
	}
	r.waitConnects(2)
}

// The safety poll finds notices whose hint never came (here: a writer that sends
// none) within the poll interval.
func TestListener_SafetyPoll(t *testing.T) {
	r := newListenerRig(t, 300*time.Millisecond)
	r.b.d.notify = false
	start := time.Now()
	r.record(r.svcB, "agent:main:subagent:quiet")
	n := r.nextNotice()
	if n.Target.Key != "agent:main:subagent:quiet" {
		t.Fatalf("notice %+v", n)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("found after %v, poll is 300ms", d)
	}
	r.noNotice()
}

// A hint too long for NOTIFY asks for a rescan instead; event spans that do not fit
// are left out.
func TestHintEncoding(t *testing.T) {
	var h hint
	h.addWatcher("agent:main:main")
	h.addEvent(awareness.SessionRef{AgentID: "main", Key: "agent:main:x"}, 3)
	h.addEvent(awareness.SessionRef{AgentID: "main", Key: "agent:main:x"}, 5)
	got, dropped := h.encode("o1")
	if want := `{"o":"o1","w":["agent:main:main"],"e":[["main","agent:main:x",3,5]]}`; got != want || dropped != 0 {
		t.Errorf("encode: got %s (%d dropped), want %s", got, dropped, want)
	}
	var big hint
	for i := range 400 {
		big.addWatcher(fmt.Sprintf("agent:main:subagent:watcher-%04d", i))
		big.addEvent(awareness.SessionRef{AgentID: "main", Key: fmt.Sprintf("agent:main:subagent:session-%04d", i)}, 1)
	}
	got, dropped = big.encode("o1")
	if len(got) > maxHintBytes {
		t.Fatalf("hint of %d bytes", len(got))
	}
	var p hintPayload
	if err := json.Unmarshal([]byte(got), &p); err != nil {
		t.Fatalf("decode %s: %v", got, err)
	}
	if !p.All || len(p.Watchers) != 0 || dropped == 0 || len(p.Events)+dropped != 400 {
		t.Errorf("big hint: all %v, %d watchers, %d events, %d dropped", p.All, len(p.Watchers), len(p.Events), dropped)
	}
}

// TestHintClosedNoticeGenerations_LIF2: a closed notice in a hint carries its
// generations when one is above 1 (and reads back with them), and keeps the seven
// elements a process that predates them reads when both are 1.
func TestHintClosedNoticeGenerations_LIF2(t *testing.T) {
	target := awareness.SessionRef{AgentID: "main", Key: "agent:main:x"}
	opened := time.Unix(0, 1_700_000_000_000_000_000).UTC()
	for _, c := range []struct {
		tg, wg int64
		elems  int
	}{{1, 1, 7}, {2, 1, 9}, {1, 3, 9}} {
		n, _ := awareness.NoticeOf(awareness.Cursor{Watcher: "agent:main:main", Target: target, L: 1, N: 2, M: 3, OpenedAt: opened,
			TargetGeneration: c.tg, WatcherGeneration: c.wg})
		n = awareness.ClosedNotice(n)
		b, err := json.Marshal(closedNotice{n})
		if err != nil {
			t.Fatal(err)
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(b, &elems); err != nil || len(elems) != c.elems {
			t.Errorf("generations %d, %d: %s, want %d elements", c.tg, c.wg, b, c.elems)
		}
		var back closedNotice
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.n != n {
			t.Errorf("generations %d, %d: read back %+v, want %+v", c.tg, c.wg, back.n, n)
		}
	}
}

// terminateListener ends the listener backends of this process on the database at dsn
// and returns how many it ended.
func terminateListener(t *testing.T, dsn, appName string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), lsWait)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Errorf("connect: %v", err)
		return 0
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = $1 AND datname = current_database()`, appName).Scan(&n)
	if err != nil {
		t.Errorf("terminate: %v", err)
	}
	return n
}

// NTC-3, NTC-7 across processes: B acknowledges exactly (and unwatches); A's
// includeClosed subscriber gets each closed notice, then the follow-up, once; A's
// default subscriber gets the follow-up only.
func TestListener_CrossProcessClosedNotices_NTC3(t *testing.T) {
	r := newListenerRig(t, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w := lsWatcher
	closing, _, err := r.svcA.SubscribeNotices(ctx, &w, true)
	if err != nil {
		t.Fatal(err)
	}
	next := func(c <-chan awareness.Notice) awareness.Notice {
		t.Helper()
		select {
		case n := <-c:
			return n
		case <-time.After(lsWait):
			t.Fatalf("no item within %v", lsWait)
		}
		return awareness.Notice{}
	}
	target, other := "agent:main:subagent:x", "agent:main:subagent:y"
	r.record(r.svcB, target)
	r.record(r.svcB, other)
	r.record(r.svcB, target) // M > N on target
	for range 2 {
		next(r.notesA)
		if n := next(closing); n.Closed {
			t.Fatalf("open notice arrived closed: %+v", n)
		}
	}
	// A has handled the three appends' hints (it publishes a hint's events after its
	// notices): a rescan they caused can no longer see the state after the ack. (When
	// hints interleave like that, the follow-up can reach A before the closed item;
	// the closed item names its notifiedVersion, so a client still tells them apart.)
	for range 3 {
		r.nextEvent()
	}
	follow, err := r.svcB.AckNotices(context.Background(), lsWatcher, nil, nil,
		[]awareness.NoticeRef{{Target: target, NotifiedVersion: 1}})
	if err != nil || len(follow) != 1 {
		t.Fatalf("exact ack on B: %v %+v", err, follow)
	}
	if n := next(closing); !n.Closed || n.Target.Key != target || n.NotifiedVersion != 1 || n.ChangesSince != 0 ||
		n.Text != awareness.NoticeText(target, 0) {
		t.Fatalf("first item on A after B's ack: %+v, want the closed notice N=1", n)
	}
	if n := next(closing); n.Closed || n.ID() != follow[0].ID() {
		t.Fatalf("second item: %+v, want the follow-up %+v", n, follow[0])
	}
	if n := next(r.notesA); n.Closed || n.ID() != follow[0].ID() {
		t.Fatalf("default subscriber: %+v, want the follow-up", n)
	}
	if ok, err := r.svcB.Unwatch(context.Background(), lsWatcher, other, nil); err != nil || !ok {
		t.Fatalf("unwatch on B: %v %v", ok, err)
	}
	if n := next(closing); !n.Closed || n.Target.Key != other {
		t.Fatalf("after B's unwatch: %+v, want the closed notice on %s", n, other)
	}
	r.noNotice()
	select {
	case n := <-closing:
		t.Fatalf("unexpected item %+v", n)
	case <-time.After(lsQuiet):
	}
}

// RDL-2 across processes: a notice snoozed and woken by process B reaches A's
// subscriber again, with its new delivery, through A's listener (the wake's hint names
// the watcher, and the read takes the holds with the cursors: the safety poll is an
// hour here), and not while it is snoozed.
func TestListener_CrossProcessSnoozeWakes_RDL2(t *testing.T) {
	r := newListenerRig(t, time.Hour)
	r.record(r.svcB, "agent:main:subagent:snz")
	n := r.nextNotice()
	if n.Delivery != 0 {
		t.Fatalf("first delivery %+v", n)
	}
	ref := awareness.NoticeRef{Target: n.Target.Key, TargetAgentID: &n.Target.AgentID, NotifiedVersion: n.NotifiedVersion}
	until := time.Now().Add(1500 * time.Millisecond)
	if _, err := r.svcB.SnoozeNotice(context.Background(), lsWatcher, ref, until); err != nil {
		t.Fatal(err)
	}
	r.noNotice()
	time.Sleep(time.Until(until))
	if woke, err := r.svcB.WakeHolds(context.Background()); err != nil || woke != 1 {
		t.Fatalf("WakeHolds on B: %d, %v", woke, err)
	}
	got := r.nextNotice()
	if got.Target != n.Target || got.NotifiedVersion != n.NotifiedVersion || got.Delivery != 1 || got.Text != n.Text {
		t.Fatalf("woken notice on A: %+v", got)
	}
	r.noNotice()
}
