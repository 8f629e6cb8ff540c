// Package ssepush is the push path of the service's Server-Sent Events transport
// (graph/sse.go), the SSE counterpart of wsgorilla's: the request's Stream is the
// operation's transport (a substream.Op in the operation's context). The resolver
// hands it its subscription value (Serve): the stream opens it with its own queue as
// the sink, so the hub pushes each value into the queue (never blocking), and the
// request's own goroutine, which serves the stream anyway, takes the values from the
// queue in order and hands each to the operation's channel (Subscription.Deliver)
// just before it asks gqlgen for the response. So the transport knows which value
// every response is made of: it writes the value's event id (`id:`, FEED-2) with it.
// No goroutine of gqlgen's waits for the stream, and none keeps it alive: the
// transport's loop sends the keep-alive comments.
//
// The transport then serves the stream until it ends: the client goes away (the
// request's context), the hub drops it as slow or for a gap in a feed
// (substream.End.Dropped), or the hub closes (End.Errors).
package ssepush

import (
	"sync"

	"github.com/awareness/awareness/internal/substream"
)

// Deliver hands one value of the stream to the operation's channel (which must have
// room for it: the transport asks for its response at once) and returns its event id,
// "" for none. It runs on the transport's goroutine.
type Deliver func(v any) (id string)

// Stream is one SSE request's push path. Its methods are safe for concurrent use.
type Stream struct {
	lastEventID string
	limit       int
	cut         func()        // ends the request's stream without `complete`
	wake        chan struct{} // has a token when the queue or the end changed

	mu      sync.Mutex
	queue   []item
	live    int // live values in queue (Push with replay false), at most limit
	deliver Deliver
	adopted bool
	unsub   func()
	ended   bool          // End was called
	reason  substream.End // End's reason
	stopped bool          // the transport stopped serving (Stop)
}

type item struct {
	v      any
	replay bool
}

// New returns the stream of a request whose Last-Event-ID header was lastEventID; at
// most limit live values may wait in its queue (see Push); cut ends the request's
// stream without `complete` (Ended).
func New(lastEventID string, limit int, cut func()) *Stream {
	return &Stream{lastEventID: lastEventID, limit: limit, cut: cut, wake: make(chan struct{}, 1)}
}

var _ substream.Op = (*Stream)(nil)

// Serve implements substream.Op: the stream adopts sub (its Deliver), opens it with
// the stream's queue as its sink and serves it (Delivered). A stream that serves a
// subscription already, or that stopped, does not take it (NotServed).
func (s *Stream) Serve(sub *substream.Subscription) (substream.Mode, error) {
	if !s.Adopt(sub.Deliver) {
		return substream.NotServed, nil
	}
	if sub.Limit > 0 {
		s.mu.Lock()
		s.limit = sub.Limit
		s.mu.Unlock()
	}
	unsubscribe, err := sub.Open(substream.Sink{Push: s.Push, End: s.end})
	if err != nil {
		s.Abandon()
		return substream.NotServed, err
	}
	s.Start(unsubscribe)
	return substream.Delivered, nil
}

// end is the End of the sink of the subscription the stream serves: a drop also cuts
// the request's stream at once, so that writes stuck behind a client that does not
// read are discarded.
func (s *Stream) end(e substream.End) {
	s.End(e)
	if e.Dropped && s.cut != nil {
		s.cut()
	}
}

// Ended implements substream.Op for a subscription served on gqlgen's channel: any
// end but a normal one cuts the request's stream, so the client reconnects.
func (s *Stream) Ended(e substream.End) {
	if (e.Dropped || e.Errors != nil) && s.cut != nil {
		s.cut()
	}
}

// LastEventID is the request's Last-Event-ID header ("" when absent): the id of the
// last event the client received on the stream it resumes (FEED-2).
func (s *Stream) LastEventID() string { return s.lastEventID }

// Adopt makes the stream serve the operation: the transport hands every value pushed
// to deliver, in order. It reports false when the stream serves an operation already.
func (s *Stream) Adopt(deliver Deliver) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.adopted || s.stopped {
		return false
	}
	s.adopted, s.deliver = true, deliver
	return true
}

// Push queues one value and returns at once. It returns false when limit live values
// wait already (replay values do not count and are always taken): the subscription is
// then dropped as slow. Values of an ended stream are discarded (true).
func (s *Stream) Push(v any, replay bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended || s.stopped {
		return true
	}
	if !replay {
		if s.live >= s.limit {
			return false
		}
		s.live++
	}
	s.queue = append(s.queue, item{v: v, replay: replay})
	s.signal()
	return true
}

// Start gives the stream the function that ends the subscription; a stream the
// transport stopped meanwhile calls it at once.
func (s *Stream) Start(unsubscribe func()) {
	s.mu.Lock()
	if !s.stopped {
		s.unsub = unsubscribe
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	unsubscribe()
}

// Abandon undoes Adopt after the subscription failed: gqlgen answers the operation.
func (s *Stream) Abandon() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adopted, s.deliver, s.queue = false, nil, nil
}

// End ends the stream from the subscription's side, after the values queued before
// it: the zero End after an unsubscribe, else why the hub ended it.
func (s *Stream) End(reason substream.End) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.ended, s.reason = true, reason
		s.signal()
	}
}

func (s *Stream) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Adopted reports whether a resolver adopted the stream (and did not abandon it).
func (s *Stream) Adopted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.adopted
}

// Wake has a token whenever Next may have something new: the transport waits on it.
func (s *Stream) Wake() <-chan struct{} { return s.wake }

// Next delivers the next queued value (Deliver: to the operation's channel) and
// returns its event id, with ok true; or, with the queue empty, ok false and, when
// the stream has ended, ended true and why. The transport calls it after each token
// of Wake until ok is false, and asks gqlgen for a response after each value.
func (s *Stream) Next() (id string, ok, ended bool, reason substream.End) {
	s.mu.Lock()
	if len(s.queue) == 0 {
		if s.queue != nil {
			s.queue = nil // an emptied queue gives its memory back
		}
		ended, reason = s.ended, s.reason
		s.mu.Unlock()
		return "", false, ended, reason
	}
	it := s.queue[0]
	s.queue[0] = item{}
	s.queue = s.queue[1:]
	if !it.replay {
		s.live--
	}
	deliver := s.deliver
	s.mu.Unlock()
	return deliver(it.v), true, false, substream.End{}
}

// Stop ends the stream from the transport's side (the request ends): the
// subscription is ended, and what it still queued is dropped.
func (s *Stream) Stop() {
	s.mu.Lock()
	s.stopped = true
	s.queue = nil
	unsub := s.unsub
	s.unsub = nil
	s.mu.Unlock()
	if unsub != nil {
		unsub()
	}
}
