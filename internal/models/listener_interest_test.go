package models

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/bus"
	"github.com/awareness/awareness/internal/models/pgtest"
)

// The interest tests count every statement process A's store and listener send to
// PostgreSQL, at the driver (a pgx tracer on A's connections): a process without a
// subscriber for what a hint names must send none.

// statementCounter is a pgx.QueryTracer counting statements and the rows they
// returned or touched.
type statementCounter struct {
	statements, rows atomic.Int64
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(_ context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	c.rows.Add(d.CommandTag.RowsAffected())
}

func (c *statementCounter) snapshot() (statements, rows int64) {
	return c.statements.Load(), c.rows.Load()
}

// interestRig is process A (counted store, hub, service, listener, no subscriber yet)
// and process B (a writer) on one database; with a bus URL each has its own bus
// connection and the hints travel on it.
type interestRig struct {
	t     *testing.T
	count *statementCounter
	a, b  *Store
	svcA  *awareness.Service
	svcB  *awareness.Service
	lis   *Listener
	busA  *bus.Bus // nil without a bus
	busB  *bus.Bus
	hubA  *awareness.Hub
}

func newInterestRig(t *testing.T, poll time.Duration) *interestRig {
	t.Helper()
	return newInterestRigOn(t, poll, "")
}

// newInterestRigOn is newInterestRig with the hints on the bus at busURL ("": NOTIFY).
func newInterestRigOn(t *testing.T, poll time.Duration, busURL string) *interestRig {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	r := &interestRig{t: t, count: &statementCounter{}}
	var hbA, hbB HintBus
	if busURL != "" {
		r.busA, r.busB = openBus(t, busURL), openBus(t, busURL)
		hbA, hbB = r.busA, r.busB
	}
	a, err := OpenPostgres(context.Background(), dsn, Options{queryTracer: r.count, Bus: hbA})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	b, err := OpenPostgres(context.Background(), dsn, Options{Bus: hbB})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	r.a, r.b = a, b
	hub := awareness.NewHub()
	t.Cleanup(hub.Close)
	r.hubA = hub
	r.svcA = awareness.NewService(awareness.Config{Store: r.a, Hub: hub})
	r.svcB = awareness.NewService(awareness.Config{Store: r.b})
	r.lis, err = NewListener(ListenerConfig{Store: r.a, Hub: hub, Poll: poll, Bus: hbA})
	if err != nil {
		t.Fatal(err)
	}
	r.lis.Start(context.Background())
	t.Cleanup(r.lis.Stop)
	r.waitStats("connected", func(s ListenerStats) bool { return s.Connects == 1 })
	return r
}

func openBus(t *testing.T, url string) *bus.Bus {
	t.Helper()
	b, err := bus.Open(bus.Config{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// busQuiet returns the messages A's bus has received, once every message B published
// before the call has reached A (B's round trip to the server, then A's: the server
// queues B's messages to A before it answers A).
func (r *interestRig) busQuiet() uint64 {
	r.t.Helper()
	ctx := context.Background()
	if err := r.busB.Sync(ctx, true); err != nil {
		r.t.Fatal(err)
	}
	if err := r.busA.Sync(ctx, true); err != nil {
		r.t.Fatal(err)
	}
	return r.busA.Stats().InMsgs
}

func (r *interestRig) waitStats(what string, ok func(ListenerStats) bool) ListenerStats {
	r.t.Helper()
	deadline := time.Now().Add(lsWait)
	for {
		s := r.lis.Stats()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("listener: not %s within %v: %+v", what, lsWait, s)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// record records on B a human turn into target naming watchers (WAT-4).
func (r *interestRig) record(target string, watchers ...string) {
	r.t.Helper()
	_, err := r.svcB.RecordEvent(context.Background(), awareness.RecordInput{SessionKey: target,
		Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, Watchers: watchers})
	if err != nil {
		r.t.Fatalf("RecordEvent %s: %v", target, err)
	}
}

// rescanned waits until two more full rescans have begun: the second began after
// whatever happened before the call.
func (r *interestRig) rescanned() ListenerStats {
	r.t.Helper()
	from := r.lis.Stats().Rescans
	return r.waitStats("rescanned twice", func(s ListenerStats) bool { return s.Rescans >= from+2 })
}

func (r *interestRig) subscribeNotices(watcher *string) (<-chan awareness.Notice, context.CancelFunc) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r.t.Cleanup(cancel)
	ch, _, err := r.svcA.SubscribeNotices(ctx, watcher, false)
	if err != nil {
		r.t.Fatal(err)
	}
	return ch, cancel
}

// A process with no subscriber reads nothing for a hint: B opens notices and records
// events, A's listener receives every hint, and A sends no statement at all. Once A
// subscribes to one watcher, a hint for that watcher costs A one read of its pending
// notices and the notice arrives; a hint for another watcher still costs nothing. The
// same holds for events: a stateEvents subscription to one session loads that
// session's foreign spans only.
func TestListener_NoSubscriberReadsNothing(t *testing.T) {
	r := newInterestRig(t, time.Hour)
	other := "agent:main:subagent:other"
	stmts0, _ := r.count.snapshot()
	const hints = 20
	for i := range hints {
		r.record(fmt.Sprintf("agent:main:subagent:t%02d", i), lsWatcher, other)
	}
	r.waitStats("handed every hint", func(s ListenerStats) bool { return s.Hints >= hints })
	if stmts, _ := r.count.snapshot(); stmts != stmts0 {
		t.Fatalf("A without subscribers sent %d statements for %d hints, want 0", stmts-stmts0, hints)
	}
	if st := r.lis.Stats(); st.Tracked != 0 || st.Watchers != 0 {
		t.Fatalf("A without subscribers tracks %+v", st)
	}

	// One subscriber on lsWatcher: its 20 pending notices come from its own read.
	w := lsWatcher
	notes, _ := r.subscribeNotices(&w)
	for range hints {
		select {
		case <-notes:
		case <-time.After(lsWait):
			t.Fatal("pending notices did not arrive")
		}
	}
	// A hint naming only another watcher: no read.
	stmts1, _ := r.count.snapshot()
	h1 := r.lis.Stats().Hints
	r.record("agent:main:subagent:u0", other)
	r.waitStats("handed the hint", func(s ListenerStats) bool { return s.Hints > h1 })
	if stmts, _ := r.count.snapshot(); stmts != stmts1 {
		t.Fatalf("a hint for an unsubscribed watcher cost %d statements, want 0", stmts-stmts1)
	}
	// A hint naming lsWatcher: one read, and the notice.
	r.record("agent:main:subagent:u1", lsWatcher, other)
	select {
	case n := <-notes:
		if n.Target.Key != "agent:main:subagent:u1" || n.Watcher != lsWatcher {
			t.Fatalf("notice %+v", n)
		}
	case <-time.After(lsWait):
		t.Fatal("the cross-process notice did not arrive")
	}
	if stmts, rows := r.count.snapshot(); stmts-stmts1 != 1 {
		t.Fatalf("a hint for the subscribed watcher cost %d statements (%d rows), want 1", stmts-stmts1, rows)
	}
	if st := r.lis.Stats(); st.Tracked != hints+1 || st.Watchers != 1 || st.AllWatchers {
		t.Fatalf("after one subscriber: %+v, want %d pairs of 1 watcher", st, hints+1)
	}

	// Events: a subscription to one session; a span of another session costs nothing.
	ectx, ecancel := context.WithCancel(context.Background())
	defer ecancel()
	key := "agent:main:subagent:events"
	evs, _, err := r.svcA.SubscribeEvents(ectx, &key, nil)
	if err != nil {
		t.Fatal(err)
	}
	stmts2, _ := r.count.snapshot()
	h2 := r.lis.Stats().Hints
	r.record("agent:main:subagent:quiet")
	r.waitStats("handed the hint", func(s ListenerStats) bool { return s.Hints > h2 })
	if stmts, _ := r.count.snapshot(); stmts != stmts2 {
		t.Fatalf("an event span of an unsubscribed session cost %d statements, want 0", stmts-stmts2)
	}
	r.record(key)
	select {
	case e := <-evs:
		if e.Session.Key != key || e.Sequence != 1 {
			t.Fatalf("event %+v", e)
		}
	case <-time.After(lsWait):
		t.Fatal("the cross-process event did not arrive")
	}
	if stmts, _ := r.count.snapshot(); stmts == stmts2 {
		t.Fatal("the subscribed session's span was not read")
	}
}

// The listener's memory and its rescans follow the local interest: with 100 notices
// pending for 50 watchers, subscribers of 3 watchers make it track 6 pairs and rescan
// those only; a subscriber of every watcher (a dashboard) makes it track all 100 while
// it lasts; when the subscribers go, it tracks nothing and a rescan sends nothing.
func TestListener_MemoryFollowsInterest(t *testing.T) {
	r := newInterestRig(t, 50*time.Millisecond)
	const watchers, targets = 50, 2
	var all []string
	for i := range watchers {
		all = append(all, fmt.Sprintf("agent:main:subagent:w%02d", i))
	}
	for j := range targets {
		for k := 0; k < watchers; k += 25 { // at most 32 watchers per event
			r.record(fmt.Sprintf("agent:main:subagent:target%d", j), all[k:k+25]...)
		}
	}
	if st := r.rescanned(); st.Tracked != 0 {
		t.Fatalf("no subscriber: tracks %d pairs", st.Tracked)
	}

	var cancels []context.CancelFunc
	for _, w := range all[:3] {
		w := w
		_, cancel := r.subscribeNotices(&w)
		cancels = append(cancels, cancel)
	}
	// A second subscriber of a watcher already of interest changes nothing.
	_, dup := r.subscribeNotices(&all[0])
	st := r.rescanned()
	if st.Tracked != 3*targets || st.Watchers != 3 || st.AllWatchers {
		t.Fatalf("3 watchers subscribed: %+v, want %d pairs", st, 3*targets)
	}
	// Each rescan reads the 6 pending rows of the 3 watchers, not the 100.
	rs0, rows0 := r.lis.Stats().Rescans, r.count.rows.Load()
	r.rescanned()
	rs1, rows1 := r.lis.Stats().Rescans, r.count.rows.Load()
	if rows1 == rows0 || rows1-rows0 > (rs1-rs0+1)*3*targets {
		t.Fatalf("%d rescans of 3 watchers read %d rows, want %d per rescan", rs1-rs0, rows1-rows0, 3*targets)
	}

	_, dash := r.subscribeNotices(nil)
	if st := r.rescanned(); st.Tracked != watchers*targets || !st.AllWatchers {
		t.Fatalf("a dashboard subscribed: %+v, want %d pairs", st, watchers*targets)
	}
	dash()
	if st := r.waitStats("dashboard gone", func(s ListenerStats) bool { return !s.AllWatchers }); st.Tracked != 3*targets {
		t.Fatalf("the dashboard gone: %+v, want %d pairs", st, 3*targets)
	}
	if st := r.rescanned(); st.Tracked != 3*targets {
		t.Fatalf("the dashboard gone, rescanned: %+v, want %d pairs", st, 3*targets)
	}

	dup()
	for _, c := range cancels {
		c()
	}
	if st := r.waitStats("every subscriber gone", func(s ListenerStats) bool { return s.Watchers == 0 }); st.Tracked != 0 {
		t.Fatalf("no subscriber left: %+v", st)
	}
	stmts0, _ := r.count.snapshot()
	r.rescanned()
	if stmts, _ := r.count.snapshot(); stmts != stmts0 {
		t.Fatalf("rescans with no subscriber sent %d statements", stmts-stmts0)
	}
}

// With hints sent after the commit (HintsAfterCommit, the default) and inside it
// (HintsInCommit), a notice opened on B reaches A's subscriber through the hint (the
// safety poll is an hour), and an event recorded on B reaches A's event stream.
func TestListener_HintModes(t *testing.T) {
	for _, mode := range []HintMode{HintsAfterCommit, HintsInCommit} {
		t.Run(string(mode), func(t *testing.T) { testHintMode(t, mode) })
	}
}

func testHintMode(t *testing.T, mode HintMode) {
	r := newInterestRig(t, time.Hour)
	r.b.hintsAfterCommit = mode == HintsAfterCommit
	w := lsWatcher
	notes, _ := r.subscribeNotices(&w)
	ectx, ecancel := context.WithCancel(context.Background())
	defer ecancel()
	evs, _, err := r.svcA.SubscribeEvents(ectx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		target := fmt.Sprintf("agent:main:subagent:after%d", i)
		r.record(target, lsWatcher)
		select {
		case n := <-notes:
			if n.Target.Key != target {
				t.Fatalf("notice %+v, want target %s", n, target)
			}
		case <-time.After(lsWait):
			t.Fatalf("notice %d did not arrive", i)
		}
		select {
		case e := <-evs:
			if e.Session.Key != target {
				t.Fatalf("event %+v, want session %s", e, target)
			}
		case <-time.After(lsWait):
			t.Fatalf("event %d did not arrive", i)
		}
	}
}
