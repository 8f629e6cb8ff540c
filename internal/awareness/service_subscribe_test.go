package awareness

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

// pendingStore answers Pending from memory; every other Store method panics (the
// embedded interface is nil), which proves the subscription paths touch nothing else.
type pendingStore struct {
	Store
	pending []Notice
	err     error
}

func (s *pendingStore) Pending(_ context.Context, watcher string) ([]Notice, error) {
	if s.err != nil {
		return nil, s.err
	}
	var out []Notice
	for _, n := range s.pending {
		if watcher == "" || n.Watcher == watcher {
			out = append(out, n)
		}
	}
	return out, nil
}

func newSubService(st *pendingStore) *Service {
	return NewService(Config{Store: st, Now: func() time.Time { return t1 }})
}

// recv reads one item or fails at the deadline.
func recv[T any](t *testing.T, c <-chan T) (T, bool) {
	t.Helper()
	select {
	case v, ok := <-c:
		return v, ok
	case <-time.After(deadline):
		t.Fatalf("nothing received within %v", deadline)
		var zero T
		return zero, false
	}
}

// The pending notice comes first; the same notice arriving again from the hub (with the
// nanoseconds a store may drop) is not sent twice; live notices follow (NTC-5, NTC-7).
func TestServiceSubscribeNotices_PendingThenLive_NTC5_NTC7(t *testing.T) {
	t.Parallel()
	live := notice("agent:main:main", 4)
	live.OpenedAt = t0.Add(123456789 * time.Nanosecond)
	stored := live
	stored.OpenedAt = live.OpenedAt.Truncate(time.Microsecond)
	st := &pendingStore{pending: []Notice{stored, notice("agent:ops:work", 1)}}
	svc := newSubService(st)
	ctx, cancel := context.WithCancel(context.Background())
	out, errf, err := svc.SubscribeNotices(ctx, ptr(" Agent:Main:Main "), false)
	if err != nil {
		t.Fatalf("SubscribeNotices: %v", err)
	}
	next := notice("agent:main:main", 5) // after an ack: a new L
	last := notice("agent:main:main", 6)
	svc.Hub().PublishNotices(live, notice("agent:ops:work", 2), next, last)
	var got []Notice
	for len(got) < 3 {
		n, ok := recv(t, out)
		if !ok {
			t.Fatalf("stream closed after %d notices: %v", len(got), errf())
		}
		got = append(got, n)
	}
	if diff := cmp.Diff([]Notice{stored, next, last}, got); diff != "" {
		t.Errorf("notices mismatch (-want +got):\n%s", diff)
	}
	cancel()
	for range out {
	}
	if err := errf(); err != nil {
		t.Errorf("err after cancel = %v, want nil", err)
	}
}

func TestServiceSubscribeNotices_BadInput_ERR1(t *testing.T) {
	t.Parallel()
	svc := newSubService(&pendingStore{})
	for _, w := range []string{"global", "agent:main:", "cron:job", ""} {
		if _, _, err := svc.SubscribeNotices(context.Background(), ptr(w), false); ErrorCode(err) != EINVALID {
			t.Errorf("SubscribeNotices(%q) error = %v, want %s", w, err, EINVALID)
		}
	}
	if _, _, err := svc.SubscribeEvents(context.Background(), nil, ptr("main")); ErrorCode(err) != EINVALID {
		t.Errorf("SubscribeEvents(agentId without key) error = %v, want %s", err, EINVALID)
	}
	if n, e := svc.Hub().Subscribers(); n != 0 || e != 0 {
		t.Errorf("rejected subscriptions left %d, %d hub subscribers", n, e)
	}
}

func TestServiceSubscribeNotices_StoreErrorUnsubscribes(t *testing.T) {
	t.Parallel()
	svc := newSubService(&pendingStore{err: Unavailable(errors.New("disk full"))})
	if _, _, err := svc.SubscribeNotices(context.Background(), nil, false); ErrorCode(err) != EUNAVAILABLE {
		t.Fatalf("error = %v, want %s", err, EUNAVAILABLE)
	}
	if n, _ := svc.Hub().Subscribers(); n != 0 {
		t.Errorf("%d hub subscribers left after a failed subscription", n)
	}
}

// A client that stops reading is dropped; the publisher never waits for it.
func TestServiceSubscribeNotices_SlowClientDropped(t *testing.T) {
	t.Parallel()
	svc := newSubService(&pendingStore{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, errf, err := svc.SubscribeNotices(ctx, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "publishing to a client that does not read", func() {
		for i := range SubscriberBuffer + 10 {
			svc.Hub().PublishNotices(notice("agent:main:main", int64(i)))
		}
	})
	n := 0
	for range out {
		n++
	}
	if n > SubscriberBuffer+2 {
		t.Errorf("received %d notices, want at most %d", n, SubscriberBuffer+2)
	}
	if err := errf(); !IsSlowSubscriber(err) {
		t.Errorf("err = %v, want ErrSlowSubscriber", err)
	}
}

func TestServiceSubscribe_HubClosed(t *testing.T) {
	t.Parallel()
	svc := newSubService(&pendingStore{})
	ctx := context.Background()
	nout, nerr, err := svc.SubscribeNotices(ctx, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	eout, eerr, err := svc.SubscribeEvents(ctx, ptr("global"), ptr("ops"))
	if err != nil {
		t.Fatal(err)
	}
	e := event("ops", "global", 3)
	svc.Hub().PublishEvents(event("main", "global", 1), e)
	if got, ok := recv(t, eout); !ok || got.Session != e.Session || got.Sequence != 3 {
		t.Errorf("event = %+v (ok=%v), want %+v", got, ok, e)
	}
	svc.Hub().Close()
	for range nout {
	}
	for range eout {
	}
	if err := nerr(); !errors.Is(err, ErrHubClosed) {
		t.Errorf("notices err = %v, want ErrHubClosed", err)
	}
	if err := eerr(); !errors.Is(err, ErrHubClosed) {
		t.Errorf("events err = %v, want ErrHubClosed", err)
	}
}

// TestServiceSubscribeCyclesLeaveNoGoroutines opens and cancels 1,000 subscriptions of
// each kind. Not parallel, so that goleak sees only its own goroutines.
func TestServiceSubscribeCyclesLeaveNoGoroutines(t *testing.T) {
	svc := newSubService(&pendingStore{pending: []Notice{notice("agent:main:main", 1)}})
	for i := range 1000 {
		ctx, cancel := context.WithCancel(context.Background())
		nout, nerr, err := svc.SubscribeNotices(ctx, ptr("agent:main:main"), false)
		if err != nil {
			t.Fatal(err)
		}
		eout, eerr, err := svc.SubscribeEvents(ctx, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			recv(t, nout) // the pending notice
		}
		cancel()
		for range nout {
		}
		for range eout {
		}
		if err := nerr(); err != nil {
			t.Fatalf("cycle %d: notices err = %v", i, err)
		}
		if err := eerr(); err != nil {
			t.Fatalf("cycle %d: events err = %v", i, err)
		}
	}
	if n, e := svc.Hub().Subscribers(); n != 0 || e != 0 {
		t.Errorf("Subscribers() = %d, %d, want 0, 0", n, e)
	}
	goleak.VerifyNone(t)
}

// A burst of SubscriberBuffer notices to a subscriber that reads only afterwards is
// delivered whole and in order (the backlog and its drainer), and the drainer is gone
// once the backlog is empty.
func TestServiceSubscribeNotices_BurstDeliveredInOrder(t *testing.T) {
	before := goleak.IgnoreCurrent()
	svc := newSubService(&pendingStore{pending: []Notice{notice("agent:main:main", 0)}})
	ctx, cancel := context.WithCancel(context.Background())
	out, errf, err := svc.SubscribeNotices(ctx, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "publishing a burst", func() {
		for i := 1; i <= SubscriberBuffer; i++ {
			svc.Hub().PublishNotices(notice("agent:main:main", int64(i)))
		}
	})
	for i := 0; i <= SubscriberBuffer; i++ {
		n, ok := recv(t, out)
		if !ok {
			t.Fatalf("channel closed after %d notices (err %v), want %d", i, errf(), SubscriberBuffer+1)
		}
		if n.ChangesSince != int64(i) {
			t.Fatalf("notice %d has L=%d: order lost", i, n.ChangesSince)
		}
	}
	// The backlog is empty: the drainer has returned, and the idle subscription holds
	// no goroutine.
	goleak.VerifyNone(t, before)
	cancel()
	for range out {
	}
	if err := errf(); err != nil {
		t.Errorf("err after cancel = %v, want nil", err)
	}
}

// Idle subscriptions hold no goroutine: the hub hands values to their channels.
func TestServiceSubscribe_IdleHoldsNoGoroutine(t *testing.T) {
	svc := newSubService(&pendingStore{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := goleak.IgnoreCurrent()
	for range 100 {
		if _, _, err := svc.SubscribeNotices(ctx, nil, false); err != nil {
			t.Fatal(err)
		}
		if _, _, err := svc.SubscribeEvents(ctx, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n, e := svc.Hub().Subscribers(); n != 100 || e != 100 {
		t.Fatalf("Subscribers() = %d, %d, want 100, 100", n, e)
	}
	goleak.VerifyNone(t, before)
}

// A subscriber that falls behind is dropped at once: what it queued is discarded, its
// channel closes after at most the value in it and one in the drainer's hands, and the
// drop function of its context runs once.
func TestServiceSubscribe_DropRunsDropFunc(t *testing.T) {
	t.Parallel()
	svc := newSubService(&pendingStore{})
	drops := make(chan string, 4)
	nctx := WithDropFunc(context.Background(), func() { drops <- "notices" })
	ectx := WithDropFunc(context.Background(), func() { drops <- "events" })
	nout, nerr, err := svc.SubscribeNotices(nctx, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	eout, eerr, err := svc.SubscribeEvents(ectx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "publishing past the buffer", func() {
		for i := range SubscriberBuffer + streamChanCap + 2 {
			svc.Hub().PublishNotices(notice("agent:main:main", int64(i)))
			svc.Hub().PublishEvents(event("main", "global", int64(i+1)))
		}
	})
	got := map[string]bool{}
	for range 2 {
		got[<-drops] = true
	}
	if !got["notices"] || !got["events"] {
		t.Errorf("drop functions run: %v, want notices and events", got)
	}
	n, e := 0, 0
	for range nout {
		n++
	}
	for range eout {
		e++
	}
	if limit := streamChanCap + 1; n > limit || e > limit {
		t.Errorf("received %d notices and %d events after the drop, want at most %d each", n, e, limit)
	}
	if !IsSlowSubscriber(nerr()) || !IsSlowSubscriber(eerr()) {
		t.Errorf("errs = %v, %v, want ErrSlowSubscriber", nerr(), eerr())
	}
	select {
	case d := <-drops:
		t.Errorf("drop function of %s ran twice", d)
	default:
	}
}
