package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A Watcher whose service refuses the token stops for good with the refusal in Err,
// and Close ends its goroutines; one on an unreachable service keeps retrying until
// Close, with each failure in Errors and the last in Err.
func TestWatcher_RefusedTokenIsFatalAndCloseEndsIt(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer srv.Close()
	c, err := New(srv.URL+"/query", WithToken("nope"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Watch([]string{"agent:main:main"}, WatcherOptions{MinBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w.Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if w.Err() == nil {
		t.Fatal("a refused token did not stop the watcher")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := w.WaitConnected(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitConnected on a refused watcher: %v, want the refusal", err)
	}
	_ = w.Close()

	dead := deadEndpoint(t)
	w2, err := dead.Watch([]string{"agent:main:main"}, WatcherOptions{MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w2.Errors():
		if se, ok := errors.AsType[*StreamError](err); !ok || se.Fatal {
			t.Fatalf("an unreachable service: %v, want a StreamError that is not fatal", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a failed connection did not reach Errors")
	}
	time.Sleep(50 * time.Millisecond)
	if se, ok := errors.AsType[*StreamError](w2.Err()); !ok || se.Fatal {
		t.Fatalf("Err of a watcher retrying an unreachable service: %v, want its last failure", w2.Err())
	}
	_ = w2.Close()
}

// bareWatcher is a Watcher without goroutines, to drive its notice states.
func bareWatcher(watchers ...string) *Watcher {
	w := &Watcher{subs: map[string]*sub{}, open: map[noticeKey]*tracked{}, held: map[noticeKey]*heldNotice{},
		done: map[noticeKey]int64{}, notify: make(chan struct{}, 1), upAll: make(chan struct{})}
	for _, watcher := range watchers {
		w.subs[watcher] = &sub{notify: make(chan struct{}, 1)}
	}
	return w
}

func (w *Watcher) acceptForTest(n Notice) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acceptLocked(n, true)
}

// CLT-5 in the Watcher's states: Drain hands out each notice once; a replay of an
// open or held notice is dropped; Release hands a held notice back for the next
// Drain; a closed item, or an acknowledgement, makes it done, and a replay of a done
// notice is dropped, a released done notice too; a newer notice on the pair is a new
// one.
func TestWatcher_NoticeStates_CLT5(t *testing.T) {
	const main, other = "agent:main:main", "agent:main:other"
	w := bareWatcher(main, other)
	n := Notice{Watcher: main, Target: "agent:main:subagent:a", TargetAgentID: "main", NotifiedVersion: 2}
	if !w.acceptForTest(n) || w.acceptForTest(n) {
		t.Fatal("first item not accepted, or the replay accepted")
	}
	select {
	case <-w.NotifyOf(main):
	default:
		t.Fatal("NotifyOf(main) was not signalled")
	}
	select {
	case <-w.NotifyOf(other):
		t.Fatal("NotifyOf(other) was signalled for a notice of main")
	default:
	}
	if got := w.Drain(other); len(got) != 0 {
		t.Fatalf("Drain(other) handed out %+v", got)
	}
	drained := w.Drain(main)
	if len(drained) != 1 || len(w.Held()) != 1 {
		t.Fatalf("drained %d, held %d", len(drained), len(w.Held()))
	}
	if w.acceptForTest(n) {
		t.Fatal("a replay of a held notice (the service restarted between Drain and Ack) was accepted")
	}
	if got := w.Drain(); len(got) != 0 {
		t.Fatalf("a held notice was handed out again: %+v", got)
	}
	// The turn failed: Release hands it back once.
	if w.Release(drained...) != 1 || w.Release(drained...) != 0 {
		t.Fatal("Release did not hand the notice back exactly once")
	}
	again := w.Drain()
	if len(again) != 1 || again[0] != n {
		t.Fatalf("after Release, Drain handed out %+v", again)
	}
	// Acknowledged (here: its closed item): done; replays and a release are dropped.
	closed := n
	closed.Closed = true
	w.acceptForTest(closed)
	if w.acceptForTest(n) {
		t.Fatal("a replay of a closed notice was accepted")
	}
	if w.Release(again...) != 0 || len(w.Drain()) != 0 {
		t.Fatal("a released notice that closed meanwhile was handed out again")
	}
	newer := n
	newer.NotifiedVersion = 5
	if !w.acceptForTest(newer) || len(w.Drain()) != 1 {
		t.Fatal("a newer notice on the pair was dropped")
	}
	w.settle([]NoticeAck{{Watcher: main, Target: n.Target, TargetAgentID: "main", NotifiedVersion: 5, Outcome: AckAcknowledged,
		FollowUp: &Notice{Watcher: main, Target: n.Target, TargetAgentID: "main", ChangesSince: 5, NotifiedVersion: 7}}})
	if len(w.Held()) != 0 {
		t.Fatalf("an acknowledged notice is still held: %+v", w.Held())
	}
	if fu := w.Drain(); len(fu) != 1 || fu[0].NotifiedVersion != 7 {
		t.Fatalf("the follow-up was not kept for Drain: %+v", fu)
	}
	if w.acceptForTest(newer) || w.Duplicates() != 4 {
		t.Fatalf("a replay of the acknowledged notice: duplicates %d, want 4", w.Duplicates())
	}
	// A removed watcher's items are ignored.
	w.subs = map[string]*sub{main: w.subs[main]}
	if w.acceptForTest(Notice{Watcher: other, Target: n.Target, TargetAgentID: "main", NotifiedVersion: 9}) {
		t.Fatal("an item of a watcher not followed was accepted")
	}
}

// The pendingNotices answer after a (re)subscription may be older than what the
// stream delivered since: a notice delivered (and drained) after it is kept; a notice
// from before the reconnect that the answer lacks was acknowledged or removed while
// the stream was down, and is dropped, open or held (CLT-5).
func TestWatcher_ConfirmLeavesWhatTheStreamDelivered_CLT5(t *testing.T) {
	const main = "agent:main:main"
	w := bareWatcher(main)
	n := Notice{Watcher: main, Target: "agent:main:subagent:a", TargetAgentID: "main", NotifiedVersion: 2}
	m := Notice{Watcher: main, Target: "agent:main:subagent:b", TargetAgentID: "main", NotifiedVersion: 3}
	w.setUp(true, main)
	w.acceptForTest(n)
	w.acceptForTest(m)
	drained := w.Drain(main)  // both held
	w.applyPending(main, nil) // an answer from before they opened
	if got := w.Release(drained...); got != 2 {
		t.Fatalf("Release after a stale confirmation handed back %d, want 2", got)
	}
	drained = w.Drain(main)
	// The stream goes down and up; only m is replayed, n was acknowledged meanwhile.
	w.setUp(false, main)
	w.setUp(true, main)
	w.acceptForTest(m)
	w.applyPending(main, []Notice{m})
	if got := w.Release(drained...); got != 1 || w.Pending()[0].Target != m.Target {
		t.Fatalf("after the reconnect Release handed back %d: %+v, want m only", got, w.Pending())
	}
}

// RDL-1, RDL-2 in the Watcher's states: a held notice delivered again by the service
// (a redelivery or the end of a snooze: a higher Delivery) is open again for the next
// Drain, marked as the service marks it; a replay of the same delivery is dropped.
func TestWatcher_RedeliveredHeldNoticeOpensAgain_RDL1(t *testing.T) {
	const main = "agent:main:main"
	w := bareWatcher(main)
	n := Notice{Watcher: main, Target: "agent:main:subagent:a", TargetAgentID: "main", NotifiedVersion: 2}
	w.acceptForTest(n)
	if got := w.Drain(); len(got) != 1 {
		t.Fatalf("drain: %+v", got)
	}
	if w.acceptForTest(n) {
		t.Fatal("a replay of the held notice was accepted")
	}
	back := n
	back.Redelivered, back.Delivery = true, 1
	if !w.acceptForTest(back) {
		t.Fatal("the redelivered notice was dropped")
	}
	if len(w.Held()) != 0 {
		t.Fatalf("still held after the redelivery: %+v", w.Held())
	}
	got := w.Drain()
	if len(got) != 1 || !got[0].Redelivered || got[0].Delivery != 1 {
		t.Fatalf("drain after the redelivery: %+v", got)
	}
	if w.acceptForTest(back) {
		t.Fatal("a replay of the redelivery was accepted")
	}
	// An open notice woken again (a snooze that ended) replaces the open one.
	w2 := bareWatcher(main)
	w2.acceptForTest(n)
	woke := n
	woke.Delivery = 1
	if !w2.acceptForTest(woke) || w2.Pending()[0].Delivery != 1 {
		t.Fatalf("the woken notice did not replace the open one: %+v", w2.Pending())
	}
}
