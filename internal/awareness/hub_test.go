package awareness

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

// deadline bounds waits for work that must finish promptly; it is a failure bound, never
// an assertion on timing.
const deadline = 10 * time.Second

// drain returns what s holds right now without waiting, and whether C is closed.
// Publishing is synchronous, so after Publish returns the items are in the buffer.
func drain[T any](s *chanSub[T]) (items []T, closed bool) {
	for {
		select {
		case v, ok := <-s.C:
			if !ok {
				return items, true
			}
			items = append(items, *v)
		default:
			return items, false
		}
	}
}

// within runs f in a goroutine and fails if it does not return before the deadline.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(deadline):
		t.Fatalf("%s did not return within %v: it blocked", what, deadline)
	}
}

// progressing runs f and fails the test when progress (a counter f's goroutines
// advance) stands still for a whole deadline before f returns: f blocked.
func progressing(t *testing.T, what string, f func(), progress func() int64) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	last := progress()
	for {
		select {
		case <-done:
			return
		case <-time.After(deadline):
			now := progress()
			if now == last {
				t.Fatalf("%s made no progress for %v: it blocked", what, deadline)
			}
			last = now
		}
	}
}

func notice(watcher string, l int64) Notice {
	c := Cursor{Watcher: watcher, Target: testTarget, L: l, N: l + 1, M: l + 1, OpenedAt: t0}
	n, _ := NoticeOf(c)
	return n
}

func event(agent, key string, seq int64) Event {
	return Event{Session: SessionRef{agent, key}, Sequence: seq, Kind: HumanDirectMessage, ActorType: ActorHuman, Summary: "human message via unknown", OccurredAt: t0, RecordedAt: t0}
}

func TestHubNoticeFilter_NTC7(t *testing.T) {
	t.Parallel()
	h := NewHub()
	defer h.Close()
	a := hubNotices(h, "agent:main:main")
	b := hubNotices(h, "agent:ops:work")
	all := hubNotices(h, "")
	if n, e := h.Subscribers(); n != 3 || e != 0 {
		t.Fatalf("Subscribers() = %d, %d, want 3, 0", n, e)
	}
	a1, b1, a2 := notice("agent:main:main", 1), notice("agent:ops:work", 1), notice("agent:main:main", 2)
	h.PublishNotices(a1, b1)
	h.PublishNotices(a2)
	h.PublishNotices()
	for _, tt := range []struct {
		name string
		sub  *chanSub[Notice]
		want []Notice
	}{
		{"watcher main", a, []Notice{a1, a2}},
		{"watcher ops", b, []Notice{b1}},
		{"all watchers", all, []Notice{a1, b1, a2}},
	} {
		got, closed := drain(tt.sub)
		if closed {
			t.Errorf("%s: subscription closed", tt.name)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: notices mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
}

func TestHubEventFilter(t *testing.T) {
	t.Parallel()
	h := NewHub()
	defer h.Close()
	mainGlobal := hubEvents(h, &SessionRef{"main", "global"})
	anyGlobal := hubEvents(h, &SessionRef{"", "global"})
	opsGlobal := hubEvents(h, &SessionRef{"ops", "global"})
	mainKey := hubEvents(h, &SessionRef{"main", "agent:main:main"})
	all := hubEvents(h, nil)
	notices := hubNotices(h, "")
	e1, e2, e3 := event("main", "global", 1), event("ops", "global", 1), event("main", "agent:main:main", 7)
	h.PublishEvents(e1, e2, e3)
	for _, tt := range []struct {
		name string
		sub  *chanSub[Event]
		want []Event
	}{
		{"main/global", mainGlobal, []Event{e1}},
		{"any agent/global", anyGlobal, []Event{e1, e2}},
		{"ops/global", opsGlobal, []Event{e2}},
		{"main/agent:main:main", mainKey, []Event{e3}},
		{"all sessions", all, []Event{e1, e2, e3}},
	} {
		got, closed := drain(tt.sub)
		if closed {
			t.Errorf("%s: subscription closed", tt.name)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s: events mismatch (-want +got):\n%s", tt.name, diff)
		}
	}
	if got, _ := drain(notices); len(got) != 0 {
		t.Errorf("notice subscriber got %d items from PublishEvents", len(got))
	}
	if n, e := h.Subscribers(); n != 1 || e != 5 {
		t.Errorf("Subscribers() = %d, %d, want 1, 5", n, e)
	}
}

func TestHubSlowSubscriberDropped(t *testing.T) {
	t.Parallel()
	h := NewHub()
	defer h.Close()
	slow := hubNotices(h, "agent:main:main")
	other := hubNotices(h, "agent:ops:work")
	slowEvents := hubEvents(h, nil)
	within(t, "publishing past the buffer", func() {
		for i := range SubscriberBuffer + 1 {
			h.PublishNotices(notice("agent:main:main", int64(i)))
			h.PublishEvents(event("main", "global", int64(i+1)))
		}
	})
	got, closed := drain(slow)
	if !closed {
		t.Fatal("slow notice subscriber still open")
	}
	if len(got) != SubscriberBuffer {
		t.Errorf("slow subscriber kept %d notices, want the %d buffered", len(got), SubscriberBuffer)
	}
	for i, n := range got {
		if n.ChangesSince != int64(i) {
			t.Fatalf("buffered notice %d has L=%d: order lost", i, n.ChangesSince)
		}
	}
	for name, err := range map[string]error{"notices": slow.Err(), "events": slowEvents.Err()} {
		if !errors.Is(err, ErrSlowSubscriber) || !IsSlowSubscriber(err) {
			t.Errorf("%s: Err() = %v, want ErrSlowSubscriber", name, err)
		}
		if got, want := ErrorCode(err), EUNAVAILABLE; got != want {
			t.Errorf("%s: code = %q, want %q", name, got, want)
		}
	}
	if _, closed := drain(slowEvents); !closed {
		t.Error("slow event subscriber still open")
	}
	if items, closed := drain(other); closed || len(items) != 0 {
		t.Errorf("unrelated subscriber: %d items, closed=%v; want 0, open", len(items), closed)
	}
	if n, e := h.Subscribers(); n != 1 || e != 0 {
		t.Errorf("Subscribers() = %d, %d, want 1, 0", n, e)
	}
	slow.Unsubscribe() // after the drop: a no-op that keeps the reason
	if !IsSlowSubscriber(slow.Err()) {
		t.Errorf("Err() after Unsubscribe = %v, want ErrSlowSubscriber", slow.Err())
	}
}

// Publish never blocks, however many subscribers never read, from several publishers at once.
func TestHubPublishNeverBlocks(t *testing.T) {
	t.Parallel()
	h := NewHub()
	defer h.Close()
	var subs []*chanSub[Notice]
	for i := range 8 {
		subs = append(subs, hubNotices(h, ""), hubNotices(h, "agent:w:"+strconv.Itoa(i)))
	}
	esub := hubEvents(h, nil)
	within(t, "concurrent publishers", func() {
		var wg sync.WaitGroup
		for p := range 4 {
			wg.Go(func() {
				for i := range 10 * SubscriberBuffer {
					h.PublishNotices(notice("agent:w:"+strconv.Itoa(i%8), int64(p*100000+i)))
					h.PublishEvents(event("main", "global", int64(i+1)))
				}
			})
		}
		wg.Wait()
	})
	for i, s := range subs {
		if _, closed := drain(s); !closed || !IsSlowSubscriber(s.Err()) {
			t.Errorf("subscriber %d: closed=%v err=%v, want dropped as slow", i, closed, s.Err())
		}
	}
	if _, closed := drain(esub); !closed || !IsSlowSubscriber(esub.Err()) {
		t.Errorf("event subscriber: closed=%v err=%v, want dropped as slow", closed, esub.Err())
	}
}

func TestHubUnsubscribeTwice(t *testing.T) {
	t.Parallel()
	h := NewHub()
	defer h.Close()
	s := hubNotices(h, "agent:main:main")
	e := hubEvents(h, &SessionRef{"main", "global"})
	s.Unsubscribe()
	s.Unsubscribe()
	e.Unsubscribe()
	e.Unsubscribe()
	for name, err := range map[string]error{"notices": s.Err(), "events": e.Err()} {
		if err != nil {
			t.Errorf("%s: Err() after Unsubscribe = %v, want nil", name, err)
		}
	}
	if _, closed := drain(s); !closed {
		t.Error("C not closed after Unsubscribe")
	}
	if _, closed := drain(e); !closed {
		t.Error("event C not closed after Unsubscribe")
	}
	h.PublishNotices(notice("agent:main:main", 1)) // must not panic on a closed channel
	h.PublishEvents(event("main", "global", 1))
	if n, ev := h.Subscribers(); n != 0 || ev != 0 {
		t.Errorf("Subscribers() = %d, %d, want 0, 0", n, ev)
	}
}

func TestHubClose(t *testing.T) {
	t.Parallel()
	h := NewHub()
	n1, n2 := hubNotices(h, ""), hubNotices(h, "agent:main:main")
	e1 := hubEvents(h, nil)
	h.PublishNotices(notice("agent:main:main", 1))
	h.Close()
	for i, s := range []*chanSub[Notice]{n1, n2} {
		items, closed := drain(s)
		if !closed || len(items) != 1 {
			t.Errorf("notice sub %d: %d items, closed=%v; want the 1 buffered item then closed", i, len(items), closed)
		}
		if !errors.Is(s.Err(), ErrHubClosed) {
			t.Errorf("notice sub %d: Err() = %v, want ErrHubClosed", i, s.Err())
		}
	}
	if _, closed := drain(e1); !closed || !errors.Is(e1.Err(), ErrHubClosed) {
		t.Errorf("event sub: closed=%v err=%v, want closed with ErrHubClosed", closed, e1.Err())
	}
	late, lateE := hubNotices(h, ""), hubEvents(h, nil)
	if _, closed := drain(late); !closed || !errors.Is(late.Err(), ErrHubClosed) {
		t.Errorf("subscription after Close: closed=%v err=%v, want closed with ErrHubClosed", closed, late.Err())
	}
	if _, closed := drain(lateE); !closed || !errors.Is(lateE.Err(), ErrHubClosed) {
		t.Errorf("event subscription after Close: closed=%v err=%v", closed, lateE.Err())
	}
	h.PublishNotices(notice("agent:main:main", 2))
	h.PublishEvents(event("main", "global", 1))
	h.Close()
	n1.Unsubscribe()
	late.Unsubscribe()
	if !errors.Is(n1.Err(), ErrHubClosed) {
		t.Errorf("Err() after Close then Unsubscribe = %v, want ErrHubClosed", n1.Err())
	}
	if n, e := h.Subscribers(); n != 0 || e != 0 {
		t.Errorf("Subscribers() = %d, %d, want 0, 0", n, e)
	}
}

// TestHubConcurrentUse exercises every hub operation at once under -race.
func TestHubConcurrentUse(t *testing.T) {
	t.Parallel()
	h := NewHub()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for p := range 3 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				h.PublishNotices(notice("agent:main:main", int64(i)))
				h.PublishEvents(event("main", "global", int64(p*1000000+i+1)))
			}
		})
	}
	var (
		cyclers sync.WaitGroup
		cycles  atomic.Int64 // progress, for the stall check below
	)
	for range 8 {
		cyclers.Go(func() {
			for range 200 {
				cycles.Add(1)
				s := hubNotices(h, "agent:main:main")
				e := hubEvents(h, &SessionRef{"", "global"})
				for range 3 {
					select {
					case <-s.C:
					case <-e.C:
					}
				}
				s.Unsubscribe()
				e.Unsubscribe()
				_ = s.Err()
				_, _ = h.Subscribers()
			}
		})
	}
	readers := make([]*chanSub[Notice], 4)
	for i := range readers {
		readers[i] = hubNotices(h, "")
		wg.Go(func() {
			for range readers[i].C {
			}
		})
	}
	// A blocked hub stops every cycle; a slow machine only slows them. So the check is
	// that cycles keep completing (no deadline window without progress), not a total
	// time, which a loaded machine under -race can exceed.
	progressing(t, "subscribers cycling", cyclers.Wait, cycles.Load)
	if n, _ := h.Subscribers(); n > len(readers) {
		t.Errorf("%d notice subscribers left, want at most the %d readers", n, len(readers))
	}
	close(stop)
	h.Close()
	within(t, "all goroutines", wg.Wait)
	for i, r := range readers {
		if err := r.Err(); err != nil && !errors.Is(err, ErrHubClosed) && !IsSlowSubscriber(err) {
			t.Errorf("reader %d ended with %v", i, err)
		}
	}
}

// TestHubSubscribeCyclesLeaveNoGoroutines runs 1,000 subscribe/unsubscribe cycles on the
// hub. It does not run in parallel so that goleak sees only its own goroutines.
func TestHubSubscribeCyclesLeaveNoGoroutines(t *testing.T) {
	h := NewHub()
	for i := range 1000 {
		s := hubNotices(h, "agent:main:main")
		e := hubEvents(h, nil)
		h.PublishNotices(notice("agent:main:main", int64(i)))
		h.PublishEvents(event("main", "global", int64(i+1)))
		s.Unsubscribe()
		e.Unsubscribe()
	}
	if n, e := h.Subscribers(); n != 0 || e != 0 {
		t.Errorf("Subscribers() = %d, %d, want 0, 0", n, e)
	}
	h.Close()
	goleak.VerifyNone(t)
}

// A batch larger than the buffer, published in one call, fills a stalled subscriber's
// buffer in order, drops it once, and still reaches the other subscribers of the
// batch. Inside a synctest bubble a publish that blocked on the stalled subscriber
// would be a deadlock (every goroutine durably blocked), reported as a failure
// instead of hanging: the hub never waits for a subscriber.
func TestHubBatchNeverWaitsForStalledSubscriber(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		h := NewHub()
		defer h.Close()
		stalled := hubNotices(h, "")
		reader := hubNotices(h, "agent:ops:work")
		var batch []Notice
		for i := range SubscriberBuffer + 10 {
			batch = append(batch, notice("agent:main:main", int64(i)))
		}
		batch = append(batch, notice("agent:ops:work", 7))
		h.PublishNotices(batch...)
		h.PublishNotices(batch...) // a stalled subscriber already dropped costs nothing more
		// The hub publishes its own copy of the batch: the caller may reuse its slice.
		batch[len(batch)-1].ChangesSince = 99
		got, closed := drain(stalled)
		if !closed || !IsSlowSubscriber(stalled.Err()) {
			t.Fatalf("stalled subscriber: closed=%v err=%v, want dropped as slow", closed, stalled.Err())
		}
		if len(got) != SubscriberBuffer {
			t.Fatalf("stalled subscriber kept %d notices, want %d", len(got), SubscriberBuffer)
		}
		for i, n := range got {
			if n.ChangesSince != int64(i) {
				t.Fatalf("buffered notice %d has L=%d: order lost", i, n.ChangesSince)
			}
		}
		items, closed := drain(reader)
		if closed || len(items) != 2 || items[0].ChangesSince != 7 {
			t.Fatalf("reader: %d items, closed=%v; want its notice (L=7) twice, open", len(items), closed)
		}
		if items[1].ChangesSince != 7 {
			t.Fatal("a published notice changed with the caller's slice")
		}
	})
}
