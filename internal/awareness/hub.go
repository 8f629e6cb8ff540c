package awareness

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// SubscriberBuffer is the number of undelivered items one subscription may hold. A
// subscriber whose buffer is full when the hub publishes is disconnected at once: the
// hub never waits for a subscriber, so an append never waits for a slow client. The
// subscriber resumes from durable state (pending notices, changesSince) when it
// subscribes again. A stream subscription (the service's) allocates its buffer only
// while it holds a backlog, so the bound costs an idle subscriber nothing; it bounds
// the burst a subscriber may fall behind by.
const SubscriberBuffer = 256

// ErrSlowSubscriber ends a subscription whose buffer filled up.
var ErrSlowSubscriber = Errorf(EUNAVAILABLE, "subscription dropped: the client did not keep up; subscribe again to resume from durable state")

// ErrHubClosed ends subscriptions when the service stops.
var ErrHubClosed = Errorf(EUNAVAILABLE, "the service is shutting down")

// Hub fans notices and events out to live subscribers of this process. It is an
// in-memory wake-up path only: the store is the truth, and every subscription starts
// by reading durable state. Publishing is non-blocking (see SubscriberBuffer).
type Hub struct {
	notices topic[Notice]
	events  topic[Event]
	// sync is the installed Interest's SyncInterest, when it has one.
	sync atomic.Pointer[InterestSync]
}

// Stream names, as Observer.Subscribers and SubscriberDropped report them.
const (
	StreamNotices = "notices"
	StreamEvents  = "events"
)

// Interest is told which watchers and sessions the hub has live subscribers for, so
// that a cross-process listener reads only what a subscriber of this process waits for
// (models.Listener implements it). The hub calls it synchronously, under its own lock,
// when the first subscription of a filter comes (on) and when the last one goes (off),
// so each filter is announced once however many subscribers share it. A subscription's
// interest is announced before Service.SubscribeNotices reads durable state: a notice
// committed after that read is announced by a hint to a listener that already knows of
// the interest, and one committed before it is in the read. Implementations must not
// block and must not call the hub.
type Interest interface {
	// NoticeInterest concerns the notices of one watcher key; "" is every watcher (a
	// staleNotices subscription without a watcher: interest in everything).
	NoticeInterest(watcher string, on bool)
	// EventInterest concerns the events of one session; nil is every session (a
	// stateEvents subscription without a session), and an empty AgentID is the key
	// under every agent.
	EventInterest(ref *SessionRef, on bool)
}

// InterestSync is implemented by an Interest whose announcements take effect later
// than the call (a subscription on a message bus is in effect once its server has it).
// SyncInterest returns once every announcement made before it is in effect, so that a
// read of durable state after it misses no hint; an error (the bus is down) means it
// could not tell, and the Interest must then catch up by itself (a rescan when the bus
// is back). Service.SubscribeNotices calls it between its hub subscription and its
// read of the pending notices.
type InterestSync interface {
	SyncInterest(ctx context.Context) error
}

// SetInterest installs i (nil removes it) and announces to it every filter subscribed
// now. Call it before subscribers come; calling it later is safe too.
func (h *Hub) SetInterest(i Interest) {
	if s, ok := i.(InterestSync); ok {
		h.sync.Store(&s)
	} else {
		h.sync.Store(nil)
	}
	if i == nil {
		h.notices.setInterest(nil)
		h.events.setInterest(nil)
		return
	}
	h.notices.setInterest(func(filter string, on bool) {
		// A closed-items filter always comes with its watcher's own filter, and closed
		// notices travel in hints, not through the listener's reads: no interest of its own.
		if !strings.HasPrefix(filter, closedPrefix) {
			i.NoticeInterest(filter, on)
		}
	})
	h.events.setInterest(func(filter string, on bool) { i.EventInterest(refOfFilter(filter), on) })
}

// syncInterest waits for the interest announced so far to take effect (InterestSync);
// without an InterestSync it returns nil at once.
func (h *Hub) syncInterest(ctx context.Context) error {
	if s := h.sync.Load(); s != nil {
		return (*s).SyncInterest(ctx)
	}
	return nil
}

// NewHub returns an empty hub.
func NewHub() *Hub { return NewHubObserved(nil) }

// NewHubObserved returns an empty hub that reports its subscriptions, drops and
// deliveries to obs (nil: nobody).
func NewHubObserved(obs Observer) *Hub {
	obs = ObserverOr(obs)
	h := &Hub{notices: newTopic[Notice](StreamNotices, obs), events: newTopic[Event](StreamEvents, obs)}
	h.notices.delivered = obs.NoticesDelivered
	return h
}

// PublishNotices delivers notices to the matching notice subscribers. It never
// blocks on a subscriber (see SubscriberBuffer). A closed notice (Notice.Closed) goes
// only to the subscriptions that asked for closed notices; the others never see it.
func (h *Hub) PublishNotices(ns ...Notice) { h.notices.publish(ns, noticeFilters) }

func noticeFilters(n *Notice, filters []string) []string {
	if n.Closed {
		return append(filters, closedFilter(""), closedFilter(n.Watcher))
	}
	return append(filters, "", n.Watcher)
}

// closedFilter is the filter under which the closed notices of watcher ("" = every
// watcher) are published. Keys never contain control characters, so it cannot meet
// an open notice's filter.
// closedPrefix marks the filter of a watcher's closed items.
const closedPrefix = "\x01"

func closedFilter(watcher string) string { return closedPrefix + watcher }

// PublishEvents delivers events to the matching event subscribers. It never blocks on
// a subscriber (see SubscriberBuffer).
func (h *Hub) PublishEvents(evs ...Event) { h.events.publish(evs, eventFilters) }

func eventFilters(e *Event, filters []string) []string {
	return append(filters, "", e.Session.AgentID+"\x00"+e.Session.Key, "\x00"+e.Session.Key)
}

// tryPublish is PublishEvents(evs...) then PublishNotices(ns...), done only when it is
// cheap and immediate: neither topic's lock is held by a writer or wanted by one (a
// broadcast under way with a subscription waiting for it), and the values reach at
// most limit subscriptions together. Otherwise it delivers nothing and returns false.
func (h *Hub) tryPublish(evs []Event, ns []Notice, limit int) bool {
	if !h.events.mu.TryRLock() {
		return false
	}
	if !h.notices.mu.TryRLock() {
		h.events.mu.RUnlock()
		return false
	}
	n := h.events.recipientsLocked(evs, eventFilters, limit)
	if n <= limit {
		n += h.notices.recipientsLocked(ns, noticeFilters, limit-n)
	}
	if n > limit {
		h.notices.mu.RUnlock()
		h.events.mu.RUnlock()
		return false
	}
	slowEvents := h.events.publishLocked(evs, eventFilters)
	h.events.mu.RUnlock()
	slowNotices := h.notices.publishLocked(ns, noticeFilters)
	h.notices.mu.RUnlock()
	h.events.removeSlow(slowEvents)
	h.notices.removeSlow(slowNotices)
	return true
}

// SubscribeNotices subscribes to the open notices of one watcher ("" = all watchers).
func (h *Hub) SubscribeNotices(watcher string) *Sub[Notice] { return h.notices.subscribe(watcher) }

// SubscribeNoticesClosed subscribes to the open notices of one watcher ("" = all
// watchers) and to the items that report them closed (Notice.Closed), in publish order.
func (h *Hub) SubscribeNoticesClosed(watcher string) *Sub[Notice] {
	return h.notices.subscribe(watcher, closedFilter(watcher))
}

// SubscribeEvents subscribes to events of one session, nil for all sessions. A ref
// with an empty AgentID matches the key under every agent.
func (h *Hub) SubscribeEvents(ref *SessionRef) *Sub[Event] {
	return h.events.subscribe(eventFilter(ref))
}

func eventFilter(ref *SessionRef) string {
	if ref == nil {
		return ""
	}
	return ref.AgentID + "\x00" + ref.Key
}

// refOfFilter is the inverse of eventFilter.
func refOfFilter(filter string) *SessionRef {
	agent, key, ok := strings.Cut(filter, "\x00")
	if !ok {
		return nil
	}
	return &SessionRef{AgentID: agent, Key: key}
}

// streamNotices and streamEvents add held stream subscriptions (see stream) for the
// service, which starts them.
// includeClosed adds the closed items of the watcher's notices; transport labels the
// subscription for Observer.Subscribers.
// sink, when set, makes the subscription a push stream (see Sink) instead of a
// channel one.
// fd, when set, makes the subscription a feed (feed.go).
func (h *Hub) streamNotices(watcher, transport string, includeClosed bool, accept func(*Notice) bool, onDrop func(), sink *Sink[Notice], fd *feed[Notice]) *Sub[Notice] {
	filters := []string{watcher}
	if includeClosed {
		filters = append(filters, closedFilter(watcher))
	}
	return h.notices.subscribeStream(filters, transport, accept, onDrop, sink, fd)
}

func (h *Hub) streamEvents(ref *SessionRef, transport string, accept func(*Event) bool, onDrop func(), sink *Sink[Event], fd *feed[Event]) *Sub[Event] {
	return h.events.subscribeStream([]string{eventFilter(ref)}, transport, accept, onDrop, sink, fd)
}

// Bookmark sends a FeedBookmark made at now to every feed with marks that sent
// nothing since the previous call, and notes that the others did not (FEED-3):
// called every half interval (FeedTicker), it keeps every idle feed's silence under
// an interval. A feed whose sink refuses the bookmark is dropped as slow.
func (h *Hub) Bookmark(now time.Time) {
	h.notices.bookmark(now)
	h.events.bookmark(now)
}

// Sink is where a push stream (Service.SubscribeNoticesTo, SubscribeEventsTo) hands
// its values: the transport's own queue, in place of the channel a goroutine of the
// transport would wait on. An idle push subscription thus costs no goroutine at all:
// the publisher calls Push, and the transport writes the frame when it can.
type Sink[T any] struct {
	// Push hands one value to the transport, in stream order: first the durable state
	// read at subscribe (replay true), then each live value. It is called under the
	// subscription's lock, from the publisher or the subscriber's own goroutine, and
	// must not block, nor call the hub. v points into a batch every subscriber of a
	// publish shares: it may be kept, never changed. false means the transport's
	// buffer is full (it bounds the live values it holds by SubscriberBuffer): the
	// subscription is then dropped as slow (ErrSlowSubscriber, and the drop function).
	Push func(v *T, replay bool) bool
	// Mark, set for a feed with marks (FeedOptions.Marks), receives the feed's
	// markers in stream order, on the terms of Push; false drops the subscription as
	// slow.
	Mark func(m FeedMark) bool
	// End, when set, is told once why the subscription ended: nil after Unsubscribe,
	// ErrSlowSubscriber, ErrFeedGap, ErrHubClosed. Like Push it must not block nor
	// call the hub.
	End func(error)
}

// Subscribers returns the number of live notice and event subscriptions.
func (h *Hub) Subscribers() (notices, events int) {
	return h.notices.len(), h.events.len()
}

// hasSubscribers reports whether any notice or event subscription is live, without
// the topics' locks: a writer asking must not queue behind a broadcast (which holds a
// topic's read lock) and a subscription change waiting for it.
func (h *Hub) hasSubscribers() bool {
	return h.notices.n.Load() > 0 || h.events.n.Load() > 0
}

// Close ends every subscription with ErrHubClosed. Later subscriptions end at once.
func (h *Hub) Close() {
	h.notices.close()
	h.events.close()
}

// Sub is one live subscription. C is closed when the subscription ends; Err then says
// why (nil after Unsubscribe).
//
// A Sub is in one of two modes. A raw subscription (Hub.SubscribeNotices,
// Hub.SubscribeEvents) hands out pointers to the published values on C, a channel of
// SubscriberBuffer entries. A stream (Service.SubscribeNotices, SubscribeEvents) hands
// out values on out, the channel gqlgen reads, without a goroutine of its own while it
// is idle: see stream.
type Sub[T any] struct {
	C <-chan *T
	c chan *T
	// filters are the keys the subscription is registered under; a published value
	// matches at most one of them.
	filters []string
	t       *topic[T]
	mu      sync.Mutex
	err     error
	ended   bool
	stream  *stream[T] // nil for a raw subscription
	// transport labels a stream subscription for Observer.Subscribers.
	transport string
}

// stream is the delivery state of a stream subscription. A subscriber that keeps up
// costs one small channel: a publish hands the value straight to out. When out is full
// the value waits in a queue and one drainer goroutine feeds out from it until the
// queue is empty, then exits; so a goroutine exists only while a subscriber has a
// backlog, and an idle one holds no goroutine and no buffer (a 256-entry channel per
// subscriber was 2 KiB of 10k idle subscribers' memory each). Every field is guarded
// by Sub.mu.
type stream[T any] struct {
	out chan T
	// held is true from subscribe until start: the caller reads durable state first
	// (the pending notices) and live values wait behind it in live.
	held bool
	// accept, when set, filters every value before it is queued or sent (the
	// service drops repeats with it); it runs under Sub.mu.
	accept func(*T) bool
	// first holds the values given to start (durable state, not counted against
	// SubscriberBuffer); live holds published values waiting for out, at most
	// SubscriberBuffer of them.
	first []T
	live  []*T
	// draining is true while a drainer goroutine owns the sends on out; stop, made
	// with the first drainer, is closed at the end to release it.
	draining bool
	stop     chan struct{}
	// onDrop runs once, outside the locks, when the hub drops the subscription for
	// falling behind.
	onDrop func()
	// sink, when set, receives the values in place of out (a push stream: out is nil,
	// no drainer ever runs).
	sink *Sink[T]
	// ended, when set, runs once when the subscription ends, under the hub's locks
	// (it must not block nor call the hub): the Service's stream admission releases
	// its slot.
	ended func()
	// feed, when set, makes the subscription a feed (feed.go): it filters live
	// values after accept and sends the markers.
	feed *feed[T]
}

// streamChanCap is the capacity of a stream's out channel: one value can wait while the
// consumer writes the previous one, so a consumer that keeps up never needs a drainer.
const streamChanCap = 1

// Err returns why the subscription ended, once C is closed.
func (s *Sub[T]) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Unsubscribe ends the subscription; it is safe to call more than once.
func (s *Sub[T]) Unsubscribe() { s.t.remove(s, nil) }

// onEnd makes fn (nil: nothing) run once when the stream subscription ends, at once
// if it has ended already.
func (s *Sub[T]) onEnd(fn func()) {
	if fn == nil {
		return
	}
	s.mu.Lock()
	if !s.ended {
		s.stream.ended = fn
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	fn()
}

// offer hands p to the subscriber without blocking; false means its buffer is full.
// The caller holds the topic's read lock.
func (s *Sub[T]) offer(p *T) bool {
	if s.stream == nil {
		select {
		case s.c <- p:
			return true
		default:
			return false
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stream
	if s.ended {
		return true
	}
	if st.held {
		if len(st.live) >= SubscriberBuffer {
			return false
		}
		st.live = append(st.live, p)
		return true
	}
	if st.accept != nil && !st.accept(p) {
		return true
	}
	if st.feed != nil {
		switch st.feed.admit(p) {
		case feedSkip:
			return true
		case feedGap:
			return false
		}
		st.feed.sent = true
	}
	if st.sink != nil {
		if !st.sink.Push(p, false) {
			return false
		}
		s.t.sent(1)
		return true
	}
	if !st.draining && len(st.first) == 0 && len(st.live) == 0 {
		select {
		case st.out <- *p:
			s.t.sent(1)
			return true
		default:
		}
	}
	if len(st.live) >= SubscriberBuffer {
		return false
	}
	st.live = append(st.live, p)
	s.drainLocked()
	return true
}

// start releases a held stream: first (filtered by accept) goes out before the values
// published since subscribe (filtered too, in their order).
func (s *Sub[T]) start(first []T) {
	if s.startLocked(first) {
		s.t.remove(s, s.dropReason())
	}
}

// dropReason is why the hub drops s for refusing a value: ErrFeedGap when its feed
// found a gap, else ErrSlowSubscriber.
func (s *Sub[T]) dropReason() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stream != nil && s.stream.feed != nil && s.stream.feed.gap {
		return ErrFeedGap
	}
	return ErrSlowSubscriber
}

// bookmark is Hub.Bookmark for one feed with marks; slow reports that its sink
// refused the bookmark.
func (s *Sub[T]) bookmark(now time.Time) (slow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stream
	if s.ended || st.held {
		return false
	}
	if st.feed.sent {
		st.feed.sent = false
		return false
	}
	if !st.sink.Mark(st.feed.mark(FeedBookmark, 0, now)) {
		return true
	}
	st.feed.sent = true
	return false
}

// startLocked is start under s.mu; slow reports that a push stream's sink refused a
// live value, for start to drop the subscription once the lock is released.
func (s *Sub[T]) startLocked(first []T) (slow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stream
	if s.ended || !st.held {
		return false
	}
	st.held = false
	if st.accept != nil {
		kept := first[:0]
		for i := range first {
			if st.accept(&first[i]) {
				kept = append(kept, first[i])
			}
		}
		first = kept
		live := st.live[:0]
		for _, p := range st.live {
			if st.accept(p) {
				live = append(live, p)
			}
		}
		clear(st.live[len(live):])
		st.live = live
	}
	if f := st.feed; f != nil {
		if f.seq != nil && len(first) > 0 {
			f.last = f.seq(&first[len(first)-1])
		}
		f.sent = true
	}
	if st.sink != nil {
		// Straight to the transport, the replay first; nothing waits here.
		for i := range first {
			st.sink.Push(&first[i], true)
		}
		s.t.sent(len(first))
		if f := st.feed; f != nil && f.marks && !st.sink.Mark(f.mark(FeedSynced, len(first), f.now())) {
			return true
		}
		live := st.live
		st.live = nil
		for _, p := range live {
			if st.feed != nil {
				switch st.feed.admit(p) {
				case feedSkip:
					continue
				case feedGap:
					return true
				}
			}
			if !st.sink.Push(p, false) {
				return true
			}
			s.t.sent(1)
		}
		return false
	}
	if f := st.feed; f != nil {
		live := st.live[:0]
		for _, p := range st.live {
			switch f.admit(p) {
			case feedPass:
				live = append(live, p)
			case feedGap:
				return true
			}
		}
		clear(st.live[len(live):])
		st.live = live
	}
	st.first = first
	s.drainLocked()
	return false
}

// drainLocked moves queued values to out while it has room, and starts a drainer for
// the rest. The caller holds s.mu.
func (s *Sub[T]) drainLocked() {
	st := s.stream
	if st.draining {
		return
	}
	for sent := true; sent; {
		v, ok := st.peek()
		if !ok {
			return
		}
		select {
		case st.out <- v:
			st.pop()
			s.t.sent(1)
		default:
			sent = false
		}
	}
	st.draining = true
	if st.stop == nil {
		st.stop = make(chan struct{})
	}
	go s.drain()
}

func (st *stream[T]) peek() (T, bool) {
	if len(st.first) > 0 {
		return st.first[0], true
	}
	if len(st.live) > 0 {
		return *st.live[0], true
	}
	var zero T
	return zero, false
}

// pop removes the value peek returned; an emptied queue gives its memory back.
func (st *stream[T]) pop() {
	if len(st.first) > 0 {
		var zero T
		st.first[0] = zero
		if st.first = st.first[1:]; len(st.first) == 0 {
			st.first = nil
		}
		return
	}
	st.live[0] = nil
	if st.live = st.live[1:]; len(st.live) == 0 {
		st.live = nil
	}
}

// drain is the drainer goroutine: it feeds out from the queue until the queue is empty
// (and exits) or the subscription ends (and then closes out, being its only sender).
func (s *Sub[T]) drain() {
	st := s.stream
	for {
		s.mu.Lock()
		if s.ended {
			close(st.out)
			s.mu.Unlock()
			return
		}
		v, ok := st.peek()
		if !ok {
			st.draining = false
			s.mu.Unlock()
			return
		}
		st.pop()
		s.mu.Unlock()
		select {
		case st.out <- v:
			s.t.sent(1)
		case <-st.stop:
		}
	}
}

// end marks the subscription ended with reason, drops what it still queues and closes
// its channel (or lets the drainer close it). It reports whether this call ended it.
func (s *Sub[T]) end(reason error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.ended = true
	s.err = reason
	st := s.stream
	if st != nil && st.ended != nil {
		defer st.ended()
	}
	switch {
	case st == nil:
		close(s.c)
	case st.sink != nil:
		st.live = nil
		if st.sink.End != nil {
			st.sink.End(reason)
		}
	case st.draining:
		st.first, st.live = nil, nil
		close(st.stop)
	default:
		st.first, st.live = nil, nil
		close(st.out)
	}
	return true
}

type topic[T any] struct {
	name string // StreamNotices or StreamEvents
	obs  Observer
	// delivered, when set, counts values sent to stream subscriptions' channels.
	delivered func(int)

	mu     sync.RWMutex
	subs   map[string]map[*Sub[T]]struct{} // by filter
	n      atomic.Int64                    // written under mu; read without it (hasSubscribers)
	closed bool
	// interest, when set, is told of a filter's first subscription and of its last
	// one's end (see Interest); it runs under mu.
	interest func(filter string, on bool)
	// feeds are the feeds with marks, which Hub.Bookmark visits.
	feeds map[*Sub[T]]struct{}
}

// setInterest installs fn and announces the filters subscribed now.
func (t *topic[T]) setInterest(fn func(filter string, on bool)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.interest = fn
	if fn != nil {
		for f := range t.subs {
			fn(f, true)
		}
	}
}

func newTopic[T any](name string, obs Observer) topic[T] {
	return topic[T]{name: name, obs: obs, subs: map[string]map[*Sub[T]]struct{}{}}
}

// sent counts n values handed to a stream subscription's channel.
func (t *topic[T]) sent(n int) {
	if t.delivered != nil {
		t.delivered(n)
	}
}

func (t *topic[T]) subscribe(filters ...string) *Sub[T] {
	c := make(chan *T, SubscriberBuffer)
	return t.add(&Sub[T]{C: c, c: c, filters: filters, t: t})
}

// subscribeStream adds a held stream subscription (see stream); the caller starts it.
func (t *topic[T]) subscribeStream(filters []string, transport string, accept func(*T) bool, onDrop func(), sink *Sink[T], fd *feed[T]) *Sub[T] {
	st := &stream[T]{held: true, accept: accept, onDrop: onDrop, sink: sink, feed: fd}
	if sink == nil {
		st.out = make(chan T, streamChanCap)
	}
	return t.add(&Sub[T]{filters: filters, t: t, stream: st, transport: transport})
}

func (t *topic[T]) add(s *Sub[T]) *Sub[T] {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		s.end(ErrHubClosed)
		return s
	}
	for _, f := range s.filters {
		m := t.subs[f]
		if m == nil {
			m = map[*Sub[T]]struct{}{}
			t.subs[f] = m
			if t.interest != nil {
				t.interest(f, true)
			}
		}
		m[s] = struct{}{}
	}
	t.n.Add(1)
	if s.stream != nil {
		t.obs.Subscribers(t.name, s.transport, 1)
		if s.stream.feed != nil && s.stream.feed.marks {
			if t.feeds == nil {
				t.feeds = map[*Sub[T]]struct{}{}
			}
			t.feeds[s] = struct{}{}
		}
	}
	return s
}

// publish hands every value to the subscriptions of its filters. One copy of the
// batch is shared by every subscriber (one allocation per publish, not per value),
// and the read lock is taken once per batch: a broadcast to many subscriptions is
// one pass. Sends never block; a full buffer marks the subscription slow, and slow
// ones are removed after the pass (remove takes the write lock).
func (t *topic[T]) publish(vs []T, filtersOf func(*T, []string) []string) {
	t.mu.RLock()
	slow := t.publishLocked(vs, filtersOf)
	t.mu.RUnlock()
	t.removeSlow(slow)
}

// publishLocked is publish under the read lock; it returns the slow subscriptions,
// for removeSlow once the lock is released.
func (t *topic[T]) publishLocked(vs []T, filtersOf func(*T, []string) []string) (slow []*Sub[T]) {
	if len(vs) == 0 || len(t.subs) == 0 {
		return nil
	}
	var filters []string
	batch := slices.Clone(vs)
	for i := range batch {
		p := &batch[i]
		filters = filtersOf(p, filters[:0])
		for _, f := range filters {
			for s := range t.subs[f] {
				if !s.offer(p) && !slices.Contains(slow, s) {
					slow = append(slow, s)
				}
			}
		}
	}
	return slow
}

// recipientsLocked counts the deliveries publish would make for vs, up to limit+1. The
// caller holds the read lock.
func (t *topic[T]) recipientsLocked(vs []T, filtersOf func(*T, []string) []string, limit int) int {
	if len(vs) == 0 || len(t.subs) == 0 {
		return 0
	}
	var (
		buf     [4]string
		n       int
		filters = buf[:0]
	)
	for i := range vs {
		filters = filtersOf(&vs[i], filters[:0])
		for _, f := range filters {
			if n += len(t.subs[f]); n > limit {
				return n
			}
		}
	}
	return n
}

func (t *topic[T]) removeSlow(slow []*Sub[T]) {
	for _, s := range slow {
		t.remove(s, s.dropReason())
	}
}

// bookmark is Hub.Bookmark for the topic's feeds.
func (t *topic[T]) bookmark(now time.Time) {
	t.mu.RLock()
	var slow []*Sub[T]
	for s := range t.feeds {
		if s.bookmark(now) {
			slow = append(slow, s)
		}
	}
	t.mu.RUnlock()
	t.removeSlow(slow)
}

func (t *topic[T]) remove(s *Sub[T], reason error) {
	t.mu.Lock()
	if _, ok := t.subs[s.filters[0]][s]; !ok {
		t.mu.Unlock()
		return
	}
	for _, f := range s.filters {
		delete(t.subs[f], s)
		if len(t.subs[f]) == 0 {
			delete(t.subs, f)
			if t.interest != nil {
				t.interest(f, false)
			}
		}
	}
	t.n.Add(-1)
	delete(t.feeds, s)
	ended := s.end(reason)
	t.mu.Unlock()
	if s.stream != nil {
		t.obs.Subscribers(t.name, s.transport, -1)
	}
	if ended && errors.Is(reason, ErrSlowSubscriber) {
		t.obs.SubscriberDropped(t.name)
		if s.stream != nil && s.stream.onDrop != nil {
			s.stream.onDrop()
		}
	}
}

func (t *topic[T]) len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return int(t.n.Load())
}

func (t *topic[T]) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for f, m := range t.subs {
		for s := range m {
			s.end(ErrHubClosed)
			if s.stream != nil {
				t.obs.Subscribers(t.name, s.transport, -1)
			}
		}
		delete(t.subs, f)
		if t.interest != nil {
			t.interest(f, false)
		}
	}
	t.n.Store(0)
	clear(t.feeds)
}

// IsSlowSubscriber reports whether err ended a subscription for falling behind.
func IsSlowSubscriber(err error) bool { return errors.Is(err, ErrSlowSubscriber) }
