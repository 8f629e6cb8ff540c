// A topic of the hub: its subscribers by filter, publication, interest and removal.

package awareness

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

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
	t.obs.Subscribers(t.name, s.transport, 1)
	if s.stream.feed != nil && s.stream.feed.marks {
		if t.feeds == nil {
			t.feeds = map[*Sub[T]]struct{}{}
		}
		t.feeds[s] = struct{}{}
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
	t.obs.Subscribers(t.name, s.transport, -1)
	if ended && errors.Is(reason, ErrSlowSubscriber) {
		t.obs.SubscriberDropped(t.name)
		if s.stream.onDrop != nil {
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
			t.obs.Subscribers(t.name, s.transport, -1)
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
