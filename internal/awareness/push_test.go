package awareness

import (
	"context"
	"sync"
	"testing"
)

// sinkRecorder is a push stream's transport: it records what it is handed.
type sinkRecorder struct {
	mu     sync.Mutex
	got    []Notice
	replay []bool
	limit  int // live values it takes; 0: any number
	ends   []error
}

func (r *sinkRecorder) sink() Sink[Notice] {
	return Sink[Notice]{
		Push: func(n *Notice, replay bool) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			if !replay && r.limit > 0 && len(r.got) >= r.limit {
				return false
			}
			r.got = append(r.got, *n)
			r.replay = append(r.replay, replay)
			return true
		},
		End: func(err error) {
			r.mu.Lock()
			r.ends = append(r.ends, err)
			r.mu.Unlock()
		},
	}
}

// A push stream gets the pending notices first, then the live ones in publish order,
// with notices published before, during and after the subscribe: no gap, no repeat
// (NTC-5, NTC-7).
func TestSubscribeNoticesTo_ReplayThenLiveConcurrent(t *testing.T) {
	t.Parallel()
	pending := []Notice{notice("agent:main:main", 1), notice("agent:main:main", 2)}
	pending[1].Target.Key = "agent:main:subagent:other"
	svc := newSubService(&pendingStore{pending: pending})
	const live = SubscriberBuffer - 10 // a burst the held subscription can queue
	var r sinkRecorder
	started := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		<-started
		for i := range live {
			n := notice("agent:main:main", int64(100+i))
			n.Target.Key = "agent:main:subagent:live"
			svc.Hub().PublishNotices(n)
		}
	})
	close(started)
	watcher := "agent:main:main"
	unsubscribe, err := svc.SubscribeNoticesTo(context.Background(), &watcher, false, r.sink())
	if err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	marker := notice("agent:main:main", 100+live) // at least one live notice
	marker.Target.Key = "agent:main:subagent:live"
	svc.Hub().PublishNotices(marker)
	unsubscribe()
	unsubscribe() // idempotent

	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) < len(pending) {
		t.Fatalf("got %d notices (ends %v), want the %d pending first", len(r.got), r.ends, len(pending))
	}
	for i := range pending {
		if r.got[i].ID() != pending[i].ID() || !r.replay[i] {
			t.Fatalf("item %d = %s (replay %v), want pending %s", i, r.got[i].ID(), r.replay[i], pending[i].ID())
		}
	}
	rest := r.got[len(pending):]
	if len(rest) == 0 {
		t.Fatal("no live notice after the pending ones")
	}
	// The live ones: a contiguous run up to the last published, each once.
	first := rest[0].ChangesSince
	for i, n := range rest {
		if n.ChangesSince != first+int64(i) || r.replay[len(pending)+i] {
			t.Fatalf("live item %d has L=%d (replay %v), want %d: a gap, a repeat or a reorder", i, n.ChangesSince, r.replay[len(pending)+i], first+int64(i))
		}
	}
	if last := rest[len(rest)-1].ChangesSince; last != 100+live {
		t.Errorf("last live L=%d, want %d", last, 100+live)
	}
	if len(r.ends) != 1 || r.ends[0] != nil {
		t.Errorf("ends = %v, want one nil (unsubscribed)", r.ends)
	}
	if n, _ := svc.Hub().Subscribers(); n != 0 {
		t.Errorf("subscribers = %d after unsubscribe, want 0", n)
	}
}

// A push stream whose sink refuses a live value is dropped as slow: End is told
// ErrSlowSubscriber and the drop function runs; nothing waits.
func TestSubscribeNoticesTo_SinkFullDrops(t *testing.T) {
	t.Parallel()
	svc := newSubService(&pendingStore{})
	dropped := make(chan struct{})
	ctx := WithDropFunc(context.Background(), func() { close(dropped) })
	r := sinkRecorder{limit: 3}
	if _, err := svc.SubscribeNoticesTo(ctx, nil, false, r.sink()); err != nil {
		t.Fatal(err)
	}
	within(t, "publishing to a full sink", func() {
		for i := range 10 {
			svc.Hub().PublishNotices(notice("agent:main:main", int64(i)))
		}
	})
	<-dropped
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) != 3 || len(r.ends) != 1 || !IsSlowSubscriber(r.ends[0]) {
		t.Errorf("got %d notices, ends %v; want 3 and one ErrSlowSubscriber", len(r.got), r.ends)
	}
	if n, _ := svc.Hub().Subscribers(); n != 0 {
		t.Errorf("subscribers = %d after the drop, want 0", n)
	}
}

// The hub's close ends a push stream with ErrHubClosed.
func TestSubscribeNoticesTo_HubClosed(t *testing.T) {
	t.Parallel()
	svc := newSubService(&pendingStore{})
	var r sinkRecorder
	if _, err := svc.SubscribeNoticesTo(context.Background(), nil, false, r.sink()); err != nil {
		t.Fatal(err)
	}
	svc.Hub().Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ends) != 1 || r.ends[0] != ErrHubClosed {
		t.Errorf("ends = %v, want one ErrHubClosed", r.ends)
	}
}
