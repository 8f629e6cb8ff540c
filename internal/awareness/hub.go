package awareness

import (
	"errors"
	"slices"
	"sync"
)

// SubscriberBuffer is the number of undelivered items one subscription may hold. A
// subscriber whose buffer is full when the hub publishes is disconnected at once: the
// hub never waits for a subscriber, so an append never waits for a slow client. The
// subscriber resumes from durable state (pending notices, changesSince) when it
// subscribes again.
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
	if ref == nil {
		return h.events.subscribe("")
	}
	return h.events.subscribe(ref.AgentID + "\x00" + ref.Key)
}

// Subscribers returns the number of live notice and event subscriptions.
func (h *Hub) Subscribers() (notices, events int) {
	return h.notices.len(), h.events.len()
}

// Close ends every subscription with ErrHubClosed. Later subscriptions end at once.
func (h *Hub) Close() {
	h.notices.close()
	h.events.close()
}

// Sub is one live subscription. C is closed when the subscription ends; Err then says
// why (nil after Unsubscribe).
type Sub[T any] struct {
	C      <-chan *T
	c      chan *T
	filter string
	t      *topic[T]
	mu     sync.Mutex
	err    error
}

// Err returns why the subscription ended, once C is closed.
func (s *Sub[T]) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Unsubscribe ends the subscription; it is safe to call more than once.
func (s *Sub[T]) Unsubscribe() { s.t.remove(s, nil) }

type topic[T any] struct {
	mu     sync.RWMutex
	subs   map[string]map[*Sub[T]]struct{} // by filter
	n      int
	closed bool
}

func newTopic[T any]() topic[T] { return topic[T]{subs: map[string]map[*Sub[T]]struct{}{}} }

func (t *topic[T]) subscribe(filter string) *Sub[T] {
	c := make(chan *T, SubscriberBuffer)
	s := &Sub[T]{C: c, c: c, filter: filter, t: t}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		s.err = ErrHubClosed
		close(c)
		return s
	}
	m := t.subs[filter]
	if m == nil {
		m = map[*Sub[T]]struct{}{}
		t.subs[filter] = m
	}
	m[s] = struct{}{}
	t.n++
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
				select {
				case s.c <- p:
				default:
					if !slices.Contains(slow, s) {
						slow = append(slow, s)
					}
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
	defer t.mu.Unlock()
	if _, ok := t.subs[s.filter][s]; !ok {
		return
	}
	delete(t.subs[s.filter], s)
	if len(t.subs[s.filter]) == 0 {
		delete(t.subs, s.filter)
	}
	t.n--
	s.mu.Lock()
	s.err = reason
	s.mu.Unlock()
	close(s.c)
}

func (t *topic[T]) len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.n
}

func (t *topic[T]) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for f, m := range t.subs {
		for s := range m {
			s.mu.Lock()
			s.err = ErrHubClosed
			s.mu.Unlock()
			close(s.c)
		}
		delete(t.subs, f)
	}
	t.n = 0
}

// IsSlowSubscriber reports whether err ended a subscription for falling behind.
func IsSlowSubscriber(err error) bool { return errors.Is(err, ErrSlowSubscriber) }
