package awareness_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// slots is a StreamAdmission of max open streams in all.
type slots struct {
	mu       sync.Mutex
	max      int
	open     int
	admitted int
}

var errNoSlot = errors.New("no slot")

func (s *slots) Admit(context.Context) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= s.max {
		return nil, errNoSlot
	}
	s.open++
	s.admitted++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			s.open--
			s.mu.Unlock()
		})
	}, nil
}

func (s *slots) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Every subscription, channel or push, takes a slot of Config.Streams once it is
// authorized and gives it back however it ends: unsubscribe, the context's end, the
// hub's close; a refused admission is returned as it is and subscribes nothing
// (ERR-4).
func TestStreamAdmission_ERR4(t *testing.T) {
	t.Parallel()
	st := newMemStore()
	adm := &slots{max: 2}
	svc := awareness.NewService(awareness.Config{Store: st, Streams: adm})
	t.Cleanup(func() { st.Close() })
	bg := context.Background()

	ctx, cancel := context.WithCancel(bg)
	if _, _, err := svc.SubscribeNotices(ctx, ptr("agent:main:main"), false); err != nil {
		t.Fatal(err)
	}
	unsub, err := svc.SubscribeEventsTo(bg, nil, nil, awareness.Sink[awareness.Event]{Push: func(*awareness.Event, bool) bool { return true }})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.SubscribeEvents(bg, nil, nil); !errors.Is(err, errNoSlot) {
		t.Fatalf("third subscription: %v, want the admission's error", err)
	}
	if n, e := svc.Hub().Subscribers(); n+e != 2 {
		t.Errorf("a refused subscription subscribed: %d subscribers, want 2", n+e)
	}
	// A refused authorization takes no slot.
	ops := awareness.WithPrincipal(bg, awareness.Principal{AgentID: "ops"})
	unsub()
	if _, _, err := svc.SubscribeNotices(ops, ptr("agent:main:main"), false); awareness.ErrorCode(err) != awareness.EFORBIDDEN {
		t.Fatalf("another agent's watcher: %v, want FORBIDDEN", err)
	}
	if got := adm.count(); got != 1 {
		t.Fatalf("after an unsubscribe and a refused authorization: %d slots taken, want 1", got)
	}
	cancel()
	for deadline := time.Now().Add(10 * time.Second); adm.count() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the context's end did not release its slot")
		}
	}

	if _, err := svc.SubscribeNoticesTo(bg, nil, true, awareness.Sink[awareness.Notice]{Push: func(*awareness.Notice, bool) bool { return true }}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := svc.SubscribeEvents(bg, nil, nil); err != nil {
		t.Fatal(err)
	}
	svc.Hub().Close()
	if got := adm.count(); got != 0 {
		t.Errorf("after the hub closed: %d slots taken, want 0", got)
	}
	if adm.admitted != 4 {
		t.Errorf("%d admitted, want 4", adm.admitted)
	}
}
