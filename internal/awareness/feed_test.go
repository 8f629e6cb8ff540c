package awareness_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// feedItem is what a test sink received: an event, a notice or a marker.
type feedItem struct {
	event  *awareness.Event
	notice *awareness.Notice
	mark   *awareness.FeedMark
	replay bool
}

// testSink collects what a feed hands its sink, in order.
type testSink struct {
	mu    sync.Mutex
	items []feedItem
	end   error
	ended bool
	wake  chan struct{}
	// refuse makes Push and Mark refuse (a full transport buffer).
	refuse bool
}

func newTestSink() *testSink { return &testSink{wake: make(chan struct{}, 1)} }

func (s *testSink) add(it feedItem) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse {
		return false
	}
	s.items = append(s.items, it)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

func (s *testSink) events() awareness.Sink[awareness.Event] {
	return awareness.Sink[awareness.Event]{
		Push: func(e *awareness.Event, replay bool) bool { return s.add(feedItem{event: e, replay: replay}) },
		Mark: func(m awareness.FeedMark) bool { return s.add(feedItem{mark: &m}) },
		End:  s.ending,
	}
}

func (s *testSink) notices() awareness.Sink[awareness.Notice] {
	return awareness.Sink[awareness.Notice]{
		Push: func(n *awareness.Notice, replay bool) bool { return s.add(feedItem{notice: n, replay: replay}) },
		Mark: func(m awareness.FeedMark) bool { return s.add(feedItem{mark: &m}) },
		End:  s.ending,
	}
}

func (s *testSink) ending(err error) {
	s.mu.Lock()
	s.end, s.ended = err, true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// waitFor waits until cond holds for the items received (under the sink's lock).
func (s *testSink) waitFor(t *testing.T, what string, cond func(items []feedItem, ended bool) bool) []feedItem {
	t.Helper()
	timeout := time.After(15 * time.Second)
	for {
		s.mu.Lock()
		ok := cond(s.items, s.ended)
		items := append([]feedItem(nil), s.items...)
		s.mu.Unlock()
		if ok {
			return items
		}
		select {
		case <-s.wake:
		case <-timeout:
			_, end, ended := s.snapshot()
			t.Fatalf("never happened: %s; got %d items (ended %v: %v)", what, len(items), ended, end)
		}
	}
}

func (s *testSink) snapshot() ([]feedItem, error, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]feedItem(nil), s.items...), s.end, s.ended
}

func lastSeq(items []feedItem) int64 {
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].event != nil {
			return items[i].event.Sequence
		}
	}
	return 0
}

func (w *ackWorld) logOnly(key string) awareness.RecordResult {
	w.t.Helper()
	res, err := w.svc.RecordEvent(w.ctx, awareness.RecordInput{SessionKey: key, Kind: awareness.RunCompleted, ActorType: awareness.ActorAgent})
	if err != nil {
		w.t.Fatalf("RecordEvent(%s): %v", key, err)
	}
	return res
}

// checkFeed checks what an event feed of one session resumed after `after` sent: the
// sequences after+1 … in order, each once, the replayed ones first, then exactly one
// FeedSynced naming the last replayed sequence, then live events only.
func checkFeed(t *testing.T, items []feedItem, after int64) {
	t.Helper()
	if !checkFeedItems(t, items, after) {
		t.Fatalf("no FeedSynced among %d items", len(items))
	}
}

// checkFeedItems checks items as checkFeed does but for the FeedSynced, which a feed
// dropped during its replay never sent; it reports whether one came.
func checkFeedItems(t *testing.T, items []feedItem, after int64) (synced bool) {
	t.Helper()
	next := after + 1
	for i, it := range items {
		switch {
		case it.mark != nil && it.mark.Kind == awareness.FeedSynced:
			if synced {
				t.Fatalf("item %d: a second FeedSynced", i)
			}
			synced = true
			if !it.mark.Sequenced || it.mark.Sequence != next-1 || it.mark.Replayed != int(next-1-after) {
				t.Fatalf("item %d: FeedSynced %+v after sequence %d (resumed after %d)", i, *it.mark, next-1, after)
			}
		case it.mark != nil:
		case it.event != nil:
			if it.event.Sequence != next {
				t.Fatalf("item %d: sequence %d, want %d (resumed after %d)", i, it.event.Sequence, next, after)
			}
			if it.replay == synced {
				t.Fatalf("item %d: sequence %d replay=%v, synced before it %v", i, next, it.replay, synced)
			}
			next++
		}
	}
	return synced
}

// FEED-1: a feed resumed after a sequence replays the log after it, then goes live,
// without a gap or a copy, while events are appended as it subscribes; its FeedSynced
// comes once, right after the replay (FEED-3).
func TestEventFeed_ReplayThenLiveWhileAppending_FEED1_FEED3(t *testing.T) {
	t.Parallel()
	w := newAckWorld(t)
	const key = "agent:main:subagent:feed"
	for range 20 {
		w.logOnly(key)
	}
	drops := 0
	for round := range 60 {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					w.logOnly(key)
				}
			}
		})
		after := int64(round % 15)
		sink := newTestSink()
		k := key
		unsub, err := w.svc.SubscribeEventFeed(w.ctx, &k, nil, awareness.FeedOptions{After: &after, Marks: true}, sink.events())
		if err != nil {
			t.Fatal(err)
		}
		close(stop)
		wg.Wait()
		w.svc.Flush()
		head := w.logOnly(key).Event.Sequence
		w.svc.Flush()
		// A writer that outruns the replay can overflow the live queue held behind it:
		// the feed is then dropped as a slow subscriber, and the client resumes after
		// the last event it got, which must lose and repeat nothing (FEED-1).
		for {
			items := sink.waitFor(t, fmt.Sprintf("sequence %d", head), func(items []feedItem, ended bool) bool { return lastSeq(items) >= head || ended })
			if lastSeq(items) >= head {
				checkFeed(t, items, after)
				unsub()
				break
			}
			_, end, _ := sink.snapshot()
			if !awareness.IsSlowSubscriber(end) {
				t.Fatalf("round %d: the feed ended: %v", round, end)
			}
			checkFeedItems(t, items, after)
			unsub()
			drops++
			if last := lastSeq(items); last > after {
				after = last
			}
			sink = newTestSink()
			if unsub, err = w.svc.SubscribeEventFeed(w.ctx, &k, nil, awareness.FeedOptions{After: &after, Marks: true}, sink.events()); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("60 rounds; %d feeds dropped during their replay and resumed", drops)
}

// FEED-1: a sequence below the retained history is refused with HISTORY_GAP and the
// earliest available sequence; at the pruned watermark it resumes; above the head it
// is CURSOR_AHEAD; without a session or below 0 it is INVALID_ARGUMENT. A refused
// feed holds no subscription.
func TestEventFeed_HistoryGapCursorAheadInvalid_FEED1(t *testing.T) {
	t.Parallel()
	w := newAckWorld(t)
	const key = "agent:main:subagent:pruned"
	for range 10 {
		w.logOnly(key)
	}
	if _, err := w.store.Prune(w.ctx, awareness.RetentionPolicy{MaxRows: 3}, w.now); err != nil {
		t.Fatal(err)
	}
	k := key
	subscribe := func(after *int64, key *string) error {
		_, err := w.svc.SubscribeEventFeed(w.ctx, key, nil, awareness.FeedOptions{After: after, Marks: true}, newTestSink().events())
		return err
	}
	err := subscribe(ptr(int64(5)), &k)
	var ae *awareness.Error
	if !errors.As(err, &ae) || ae.Code != awareness.EHISTORYGAP || ae.Details["earliestAvailableSequence"] != int64(8) {
		t.Fatalf("after 5 with 1..7 pruned: %v (%+v), want HISTORY_GAP with earliestAvailableSequence 8", err, ae)
	}
	if err := subscribe(ptr(int64(11)), &k); awareness.ErrorCode(err) != awareness.ECURSORAHEAD {
		t.Errorf("after 11 with head 10: %v, want CURSOR_AHEAD", err)
	}
	if err := subscribe(ptr(int64(-1)), &k); awareness.ErrorCode(err) != awareness.EINVALID {
		t.Errorf("after -1: %v, want INVALID_ARGUMENT", err)
	}
	if err := subscribe(ptr(int64(0)), nil); awareness.ErrorCode(err) != awareness.EINVALID {
		t.Errorf("after 0 without a session: %v, want INVALID_ARGUMENT", err)
	}
	if _, ev := w.svc.Hub().Subscribers(); ev != 0 {
		t.Fatalf("%d event subscriptions left by refused feeds", ev)
	}
	sink := newTestSink()
	if _, err := w.svc.SubscribeEventFeed(w.ctx, &k, nil, awareness.FeedOptions{After: ptr(int64(7)), Marks: true}, sink.events()); err != nil {
		t.Fatalf("after 7 (the pruned watermark): %v", err)
	}
	checkFeed(t, sink.waitFor(t, "10 and synced", func(items []feedItem, _ bool) bool { return len(items) == 4 }), 7)
}

// FEED-1: the plain channel stream resumes too (gqlgen's path), without markers.
func TestSubscribeEventsAfter_ChannelReplayThenLive_FEED1(t *testing.T) {
	t.Parallel()
	w := newAckWorld(t)
	const key = "agent:main:subagent:chan"
	for range 5 {
		w.logOnly(key)
	}
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	k := key
	out, _, err := w.svc.SubscribeEventsAfter(ctx, &k, nil, ptr(int64(2)))
	if err != nil {
		t.Fatal(err)
	}
	w.logOnly(key)
	for want := int64(3); want <= 6; want++ {
		select {
		case e, ok := <-out:
			if !ok || e.Sequence != want {
				t.Fatalf("got %d (open %v), want %d", e.Sequence, ok, want)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("sequence %d never came", want)
		}
	}
}

// A live event past the next sequence (one this process never heard of) ends the feed
// with ErrFeedGap, resumable like a slow drop; a copy of one sent is dropped.
func TestEventFeed_GapEndsResumable_FEED1(t *testing.T) {
	t.Parallel()
	w := newAckWorld(t)
	const key = "agent:main:subagent:gap"
	first := w.logOnly(key).Event
	sink := newTestSink()
	k := key
	if _, err := w.svc.SubscribeEventFeed(w.ctx, &k, nil, awareness.FeedOptions{After: ptr(int64(0)), Marks: true}, sink.events()); err != nil {
		t.Fatal(err)
	}
	w.svc.Hub().PublishEvents(first) // a late copy
	skipped := first
	skipped.Sequence = 3
	w.svc.Hub().PublishEvents(skipped)
	items := sink.waitFor(t, "the end", func(_ []feedItem, ended bool) bool { return ended })
	_, end, _ := sink.snapshot()
	if !errors.Is(end, awareness.ErrFeedGap) || !awareness.IsSlowSubscriber(end) {
		t.Fatalf("ended with %v, want ErrFeedGap (a slow drop)", end)
	}
	if len(items) != 2 || items[0].event == nil || items[0].event.Sequence != 1 || items[1].mark == nil {
		t.Fatalf("items %+v, want event 1 then synced", items)
	}
}

// FEED-3: a notice feed sends its pending notices, then one FeedSynced counting them;
// Hub.Bookmark sends a FeedBookmark to a feed that sent nothing since the previous
// tick, and never to a plain subscription; a feed whose sink refuses one is dropped.
func TestNoticeFeed_SyncedThenBookmarksWhileIdle_FEED3(t *testing.T) {
	t.Parallel()
	w := newAckWorld(t)
	const watcher = "agent:main:main"
	for i := range 3 {
		w.human(fmt.Sprintf("agent:main:subagent:c%d", i), nil, watcher)
	}
	plain := newTestSink()
	wk := watcher
	if _, err := w.svc.SubscribeNoticesTo(w.ctx, &wk, false, plain.notices()); err != nil {
		t.Fatal(err)
	}
	sink := newTestSink()
	if _, err := w.svc.SubscribeNoticeFeed(w.ctx, &wk, false, awareness.FeedOptions{Marks: true}, sink.notices()); err != nil {
		t.Fatal(err)
	}
	items := sink.waitFor(t, "synced", func(items []feedItem, _ bool) bool { return len(items) == 4 })
	for i := range 3 {
		if items[i].notice == nil || !items[i].replay {
			t.Fatalf("item %d: %+v, want a pending notice", i, items[i])
		}
	}
	if m := items[3].mark; m == nil || m.Kind != awareness.FeedSynced || m.Replayed != 3 || m.Sequenced || !m.At.Equal(w.now) {
		t.Fatalf("item 3: %+v, want FeedSynced of 3 at %v", items[3], w.now)
	}
	hub := w.svc.Hub()
	at := w.now.Add(time.Minute)
	hub.Bookmark(at) // the synced marker went out since the last tick
	if got, _, _ := sink.snapshot(); len(got) != 4 {
		t.Fatalf("a bookmark right after synced: %+v", got[4:])
	}
	hub.Bookmark(at)
	got, _, _ := sink.snapshot()
	if len(got) != 5 || got[4].mark == nil || got[4].mark.Kind != awareness.FeedBookmark || !got[4].mark.At.Equal(at) {
		t.Fatalf("after an idle tick: %+v, want a bookmark at %v", got[4:], at)
	}
	hub.Bookmark(at) // the bookmark itself was something sent
	w.human("agent:main:subagent:c9", nil, watcher)
	w.svc.Flush()
	hub.Bookmark(at) // a notice was sent since
	if got, _, _ := sink.snapshot(); len(got) != 6 || got[5].notice == nil {
		t.Fatalf("after a live notice: %+v", got[5:])
	}
	hub.Bookmark(at)
	if got, _, _ := sink.snapshot(); len(got) != 7 || got[6].mark == nil || got[6].mark.Kind != awareness.FeedBookmark {
		t.Fatalf("idle again: %+v", got[6:])
	}
	if got, _, _ := plain.snapshot(); len(got) != 4 {
		t.Fatalf("the plain subscription got %d items, want the 4 notices and no marker", len(got))
	}
	sink.mu.Lock()
	sink.refuse = true
	sink.mu.Unlock()
	hub.Bookmark(at)
	hub.Bookmark(at)
	if _, end, ended := sink.snapshot(); !ended || !awareness.IsSlowSubscriber(end) {
		t.Fatalf("a feed refusing its bookmark: ended %v with %v, want dropped as slow", ended, end)
	}
	if n, _ := hub.Subscribers(); n != 1 {
		t.Fatalf("%d notice subscriptions, want the plain one", n)
	}
}

// FEED-3: a feed of one session without afterSequence starts at the head, which its
// FeedSynced names, and its bookmarks name the last sequence sent; a feed of every
// session has no sequence.
func TestEventFeed_StartsAtHeadBookmarksName_FEED3(t *testing.T) {
	t.Parallel()
	w := newAckWorld(t)
	const key = "agent:main:subagent:head"
	for range 4 {
		w.logOnly(key)
	}
	sink, all := newTestSink(), newTestSink()
	k := key
	if _, err := w.svc.SubscribeEventFeed(w.ctx, &k, nil, awareness.FeedOptions{Marks: true}, sink.events()); err != nil {
		t.Fatal(err)
	}
	if _, err := w.svc.SubscribeEventFeed(w.ctx, nil, nil, awareness.FeedOptions{Marks: true}, all.events()); err != nil {
		t.Fatal(err)
	}
	w.logOnly(key)
	w.svc.Flush()
	w.svc.Hub().Bookmark(w.now)
	w.svc.Hub().Bookmark(w.now)
	items := sink.waitFor(t, "synced, 5, bookmark", func(items []feedItem, _ bool) bool { return len(items) == 3 })
	if m := items[0].mark; m == nil || m.Kind != awareness.FeedSynced || !m.Sequenced || m.Sequence != 4 || m.Replayed != 0 {
		t.Fatalf("first item %+v, want FeedSynced at 4", items[0])
	}
	if e := items[1].event; e == nil || e.Sequence != 5 {
		t.Fatalf("second item %+v, want event 5", items[1])
	}
	if m := items[2].mark; m == nil || m.Kind != awareness.FeedBookmark || m.Sequence != 5 {
		t.Fatalf("third item %+v, want a bookmark at 5", items[2])
	}
	got := all.waitFor(t, "synced, 5, bookmark", func(items []feedItem, _ bool) bool { return len(items) == 3 })
	if got[0].mark == nil || got[0].mark.Sequenced || got[2].mark == nil || got[2].mark.Sequenced {
		t.Fatalf("every session's feed: %+v, want markers without a sequence", got)
	}
}

// The ticker calls Hub.Bookmark on its own; an idle feed gets bookmarks.
func TestFeedTicker_BookmarksIdleFeeds_FEED3(t *testing.T) {
	t.Parallel()
	w := newAckWorld(t)
	sink := newTestSink()
	if _, err := w.svc.SubscribeEventFeed(w.ctx, nil, nil, awareness.FeedOptions{Marks: true}, sink.events()); err != nil {
		t.Fatal(err)
	}
	tk := awareness.NewFeedTicker(w.svc.Hub(), 20*time.Millisecond, nil)
	tk.Start(w.ctx)
	defer tk.Stop()
	sink.waitFor(t, "two bookmarks", func(items []feedItem, _ bool) bool { return len(items) >= 3 })
	tk.Stop()
	tk.Stop()
}

// FEED-1: a bare key resumes under its agent (KEY-3): the feed of global under agent
// worker replays worker's global only.
func TestEventFeed_BareKeyResumesUnderItsAgent_FEED1_KEY3(t *testing.T) {
	t.Parallel()
	w := newAckWorld(t)
	for _, agent := range []string{"worker", "main", "worker"} {
		a := agent
		if _, err := w.svc.RecordEvent(w.ctx, awareness.RecordInput{SessionKey: "global", AgentID: &a, Kind: awareness.RunCompleted, ActorType: awareness.ActorSystem}); err != nil {
			t.Fatal(err)
		}
	}
	sink := newTestSink()
	k, a := "global", "worker"
	if _, err := w.svc.SubscribeEventFeed(w.ctx, &k, &a, awareness.FeedOptions{After: ptr(int64(0)), Marks: true}, sink.events()); err != nil {
		t.Fatal(err)
	}
	items := sink.waitFor(t, "worker's two events and synced", func(items []feedItem, _ bool) bool { return len(items) == 3 })
	checkFeed(t, items, 0)
	for _, it := range items[:2] {
		if it.event.Session != (awareness.SessionRef{AgentID: "worker", Key: "global"}) {
			t.Fatalf("an event of %+v in worker's feed", it.event.Session)
		}
	}
}
