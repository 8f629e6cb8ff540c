// A hub subscription (Sub) and its delivery: a stream that holds no goroutine while
// idle, handing its values to a sink (a push stream) or to a channel it drains a
// backlog into with a goroutine.

package awareness

import (
	"sync"
	"time"
)

// Sub is one live subscription, a stream (see stream): a push stream hands the
// values to its sink (Service.SubscribeNoticesTo, Hub.SubscribeNoticesTo, the
// product's subscriptions), a channel stream (Service.SubscribeNotices) to out,
// without a goroutine of its own while it is idle. Err says why it ended (nil after
// Unsubscribe).
type Sub[T any] struct {
	// filters are the keys the subscription is registered under; a published value
	// matches at most one of them.
	filters []string
	t       *topic[T]
	mu      sync.Mutex
	err     error
	ended   bool
	stream  *stream[T]
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

// Err returns why the subscription ended, once it ended.
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
	if s.stream.feed != nil && s.stream.feed.gap {
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
	if st.ended != nil {
		defer st.ended()
	}
	switch {
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
