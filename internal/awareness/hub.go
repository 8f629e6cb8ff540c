package awareness

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
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
}

// NewHub returns an empty hub.
func NewHub() *Hub {
	return &Hub{notices: newTopic[Notice](), events: newTopic[Event]()}
}

// PublishNotices delivers notices to the matching notice subscribers. It never
// blocks on a subscriber (see SubscriberBuffer).
func (h *Hub) PublishNotices(ns ...Notice) {
	h.notices.publish(ns, func(n *Notice, filters []string) []string {
		return append(filters, "", n.Watcher)
	})
}

// PublishEvents delivers events to the matching event subscribers. It never blocks on
// a subscriber (see SubscriberBuffer).
func (h *Hub) PublishEvents(evs ...Event) {
	h.events.publish(evs, func(e *Event, filters []string) []string {
		return append(filters, "", e.Session.AgentID+"\x00"+e.Session.Key, "\x00"+e.Session.Key)
	})
}

// SubscribeNotices subscribes to notices of one watcher ("" = all watchers).
func (h *Hub) SubscribeNotices(watcher string) *Sub[Notice] { return h.notices.subscribe(watcher) }

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

// streamNotices and streamEvents add held stream subscriptions (see stream) for the
// service, which starts them.
func (h *Hub) streamNotices(watcher string, accept func(*Notice) bool, onDrop func()) *Sub[Notice] {
	return h.notices.subscribeStream(watcher, accept, onDrop)
}

func (h *Hub) streamEvents(ref *SessionRef, onDrop func()) *Sub[Event] {
	return h.events.subscribeStream(eventFilter(ref), nil, onDrop)
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
	C      <-chan *T
	c      chan *T
	filter string
	t      *topic[T]
	mu     sync.Mutex
	err    error
	ended  bool
	stream *stream[T] // nil for a raw subscription
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
	if !st.draining && len(st.first) == 0 && len(st.live) == 0 {
		select {
		case st.out <- *p:
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
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stream
	if s.ended || !st.held {
		return
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
	st.first = first
	s.drainLocked()
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
	switch {
	case st == nil:
		close(s.c)
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
	mu     sync.RWMutex
	subs   map[string]map[*Sub[T]]struct{} // by filter
	n      atomic.Int64                    // written under mu; read without it (hasSubscribers)
	closed bool
}

func newTopic[T any]() topic[T] { return topic[T]{subs: map[string]map[*Sub[T]]struct{}{}} }

func (t *topic[T]) subscribe(filter string) *Sub[T] {
	c := make(chan *T, SubscriberBuffer)
	return t.add(&Sub[T]{C: c, c: c, filter: filter, t: t})
}

// subscribeStream adds a held stream subscription (see stream); the caller starts it.
func (t *topic[T]) subscribeStream(filter string, accept func(*T) bool, onDrop func()) *Sub[T] {
	st := &stream[T]{out: make(chan T, streamChanCap), held: true, accept: accept, onDrop: onDrop}
	return t.add(&Sub[T]{filter: filter, t: t, stream: st})
}

func (t *topic[T]) add(s *Sub[T]) *Sub[T] {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		s.end(ErrHubClosed)
		return s
	}
	m := t.subs[s.filter]
	if m == nil {
		m = map[*Sub[T]]struct{}{}
		t.subs[s.filter] = m
	}
	m[s] = struct{}{}
	t.n.Add(1)
	return s
}

// publish hands every value to the subscriptions of its filters. One copy of the
// batch is shared by every subscriber (one allocation per publish, not per value),
// and the read lock is taken once per batch: a broadcast to many subscriptions is
// one pass. Sends never block; a full buffer marks the subscription slow, and slow
// ones are removed after the pass (remove takes the write lock).
func (t *topic[T]) publish(vs []T, filtersOf func(*T, []string) []string) {
	var (
		slow    []*Sub[T]
		filters []string
	)
	t.mu.RLock()
	if len(vs) == 0 || len(t.subs) == 0 {
		t.mu.RUnlock()
		return
	}
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
	t.mu.RUnlock()
	for _, s := range slow {
		t.remove(s, ErrSlowSubscriber)
	}
}

func (t *topic[T]) remove(s *Sub[T], reason error) {
	t.mu.Lock()
	if _, ok := t.subs[s.filter][s]; !ok {
		t.mu.Unlock()
		return
	}
	delete(t.subs[s.filter], s)
	if len(t.subs[s.filter]) == 0 {
		delete(t.subs, s.filter)
	}
	t.n.Add(-1)
	ended := s.end(reason)
	t.mu.Unlock()
	if ended && reason == ErrSlowSubscriber && s.stream != nil && s.stream.onDrop != nil {
		s.stream.onDrop()
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
		}
		delete(t.subs, f)
	}
	t.n.Store(0)
}

// IsSlowSubscriber reports whether err ended a subscription for falling behind.
func IsSlowSubscriber(err error) bool { return errors.Is(err, ErrSlowSubscriber) }
