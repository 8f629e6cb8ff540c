package awareness

import (
	"context"
	"testing"
	"time"
)

// openingStore records every append and opens one notice for the watcher "agent:w:main"
// on its target; every other Store method panics (the embedded interface is nil).
type openingStore struct {
	Store
	seq int64
}

func (s *openingStore) Append(_ context.Context, ops []*AppendOp) error {
	for _, op := range ops {
		s.seq++
		op.Event = op.New.Event
		op.Event.Sequence = s.seq
		op.Recorded, op.Version = true, s.seq
		op.Opened = []Notice{{Watcher: "agent:w:main", Target: op.Event.Session, NotifiedVersion: s.seq,
			MaterialVersion: s.seq, OpenedAt: op.Now}}
	}
	return nil
}

// A write answers without waiting for the fan-out: while the hub cannot publish (its
// notice topic is locked, as during a long broadcast), RecordEvent still answers, and
// the notices reach the subscriber afterwards, in the order the writes answered.
func TestRecordEventAnswersBeforeFanOut_P6(t *testing.T) {
	svc := NewService(Config{Store: &openingStore{}})
	sub := hubNotices(svc.Hub(), "agent:w:main")
	defer sub.Unsubscribe()

	svc.hub.notices.mu.Lock() // every publish of a notice now waits
	answered := make(chan int64, 5)
	go func() {
		for range 5 {
			res, err := svc.RecordEvent(context.Background(), RecordInput{SessionKey: "agent:main:main",
				Kind: HumanDirectMessage, ActorType: ActorHuman})
			if err != nil {
				t.Error(err)
			}
			answered <- res.Event.Sequence
		}
		close(answered)
	}()
	var got []int64
	for seq := range answered {
		got = append(got, seq)
	}
	if len(got) != 5 {
		t.Fatalf("answered %v while the hub was blocked, want 5 answers", got)
	}
	select {
	case n := <-sub.C:
		t.Fatalf("notice %d published while the hub was locked", n.NotifiedVersion)
	default:
	}
	svc.hub.notices.mu.Unlock()
	svc.Flush()
	for i := range 5 {
		select {
		case n := <-sub.C:
			if n.NotifiedVersion != got[i] {
				t.Fatalf("notice %d arrived as number %d, want %d (the order of the answers)", n.NotifiedVersion, i, got[i])
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("notice %d not delivered after Flush", i)
		}
	}
}

// Without any subscriber nothing is queued and no sender starts; a later subscriber
// reads the committed notices from the store instead.
func TestPublisherIdleWithoutSubscribers(t *testing.T) {
	svc := NewService(Config{Store: &openingStore{}})
	if _, err := svc.RecordEvent(context.Background(), RecordInput{SessionKey: "agent:main:main",
		Kind: HumanDirectMessage, ActorType: ActorHuman}); err != nil {
		t.Fatal(err)
	}
	svc.pub.mu.Lock()
	sending, queued := svc.pub.sending, len(svc.pub.queue)
	svc.pub.mu.Unlock()
	if sending || queued != 0 {
		t.Fatalf("publisher sending=%v queued=%d with no subscriber, want idle", sending, queued)
	}
}

// An own notice (a publication reaching at most maxInlinePublish subscriptions, the
// publisher idle) is handed over by the writer itself: it is in the subscriber's
// buffer when RecordEvent answers, and no sender was started.
func TestOwnNoticeHandedOverByTheWriter_P6(t *testing.T) {
	svc := NewService(Config{Store: &openingStore{}})
	sub := hubNotices(svc.Hub(), "agent:w:main")
	defer sub.Unsubscribe()
	res, err := svc.RecordEvent(context.Background(), RecordInput{SessionKey: "agent:main:main",
		Kind: HumanDirectMessage, ActorType: ActorHuman})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-sub.C:
		if n.NotifiedVersion != res.Event.Sequence {
			t.Fatalf("got notice %d, want %d", n.NotifiedVersion, res.Event.Sequence)
		}
	default:
		t.Fatal("the own notice was not delivered when RecordEvent answered")
	}
	svc.pub.mu.Lock()
	sending, queued := svc.pub.sending, len(svc.pub.queue)
	svc.pub.mu.Unlock()
	if sending || queued != 0 {
		t.Fatalf("publisher sending=%v queued=%d after an own notice, want idle", sending, queued)
	}
}

// Hub.tryPublish delivers only what is cheap and immediate: not a publication reaching
// more than its limit, not while a topic's lock is wanted by a writer; then it
// delivers nothing at all, events included.
func TestTryPublishBounded_P6(t *testing.T) {
	h := NewHub()
	defer h.Close()
	var subs []*chanSub[Notice]
	for range maxInlinePublish + 1 {
		subs = append(subs, hubNotices(h, "agent:w:main"))
	}
	evSub := hubEvents(h, nil)
	ref := SessionRef{AgentID: "main", Key: "agent:main:main"}
	ev := []Event{{Session: ref, Sequence: 1}}
	n := []Notice{{Watcher: "agent:w:main", Target: ref, NotifiedVersion: 1}}
	if h.tryPublish(ev, n, maxInlinePublish) {
		t.Fatalf("tryPublish delivered to %d subscriptions, over its limit %d", len(subs)+1, maxInlinePublish)
	}
	for _, s := range append(subs, nil) {
		if s == nil {
			if len(evSub.C) != 0 {
				t.Fatal("an event was delivered by a refused tryPublish")
			}
			continue
		}
		if len(s.C) != 0 {
			t.Fatal("a notice was delivered by a refused tryPublish")
		}
	}
	subs[0].Unsubscribe()
	subs[1].Unsubscribe()
	h.notices.mu.Lock()
	ok := h.tryPublish(ev, n, maxInlinePublish)
	h.notices.mu.Unlock()
	if ok {
		t.Fatal("tryPublish delivered while the notice topic was locked")
	}
	if !h.tryPublish(ev, n, maxInlinePublish) {
		t.Fatalf("tryPublish refused %d deliveries, within its limit %d", maxInlinePublish, maxInlinePublish)
	}
	for _, s := range subs[2:] {
		if len(s.C) != 1 {
			t.Fatalf("a subscriber holds %d notices, want 1", len(s.C))
		}
	}
	if len(evSub.C) != 1 {
		t.Fatalf("the event subscriber holds %d events, want 1", len(evSub.C))
	}
}

// A publication too wide for the writer goes to the sender, and one that follows it
// (small enough to be handed over inline) still arrives after it.
func TestWidePublicationKeepsOrder_P6(t *testing.T) {
	svc := NewService(Config{Store: &openingStore{}})
	all := hubNotices(svc.Hub(), "")
	defer all.Unsubscribe()
	for range maxInlinePublish {
		s := hubNotices(svc.Hub(), "agent:w:main")
		defer s.Unsubscribe()
	}
	ref := SessionRef{AgentID: "main", Key: "agent:main:main"}
	svc.pub.publish(nil, []Notice{{Watcher: "agent:w:main", Target: ref, NotifiedVersion: 1}})
	svc.pub.publish(nil, []Notice{{Watcher: "agent:v:main", Target: ref, NotifiedVersion: 2}})
	svc.Flush()
	for want := int64(1); want <= 2; want++ {
		select {
		case n := <-all.C:
			if n.NotifiedVersion != want {
				t.Fatalf("notice %d arrived before notice %d", n.NotifiedVersion, want)
			}
		default:
			t.Fatalf("notice %d not delivered after Flush", want)
		}
	}
}
