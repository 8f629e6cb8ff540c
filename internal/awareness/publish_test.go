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
	sub := svc.Hub().SubscribeNotices("agent:w:main")
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
