// Package hubtest reads a hub's publications in tests of other packages: a
// subscription in the mode the product uses, a push stream (Hub.SubscribeNoticesTo,
// SubscribeEventsTo), whose sink is a channel.
package hubtest

import (
	"sync"

	"github.com/awareness/awareness/internal/awareness"
)

// Sub is a hub subscription whose values a test reads from C, which holds
// awareness.SubscriberBuffer live values: a full C drops the subscription as slow, as
// a transport's full queue does. C is closed when the subscription ends; Err then
// says why (nil after Unsubscribe).
type Sub[T any] struct {
	C     <-chan *T
	unsub func()
	mu    sync.Mutex
	err   error
}

func subscribe[T any](to func(awareness.Sink[T]) func()) *Sub[T] {
	c := make(chan *T, awareness.SubscriberBuffer)
	s := &Sub[T]{C: c}
	s.unsub = to(awareness.Sink[T]{
		Push: func(v *T, _ bool) bool {
			select {
			case c <- v:
				return true
			default:
				return false
			}
		},
		End: func(err error) {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			close(c)
		},
	})
	return s
}

// Err returns why the subscription ended, once C is closed.
func (s *Sub[T]) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Unsubscribe ends the subscription; it is safe to call more than once.
func (s *Sub[T]) Unsubscribe() { s.unsub() }

// Notices subscribes to the open notices of watcher ("" = every watcher).
func Notices(h *awareness.Hub, watcher string) *Sub[awareness.Notice] {
	return subscribe(func(k awareness.Sink[awareness.Notice]) func() { return h.SubscribeNoticesTo(watcher, false, k) })
}

// Events subscribes to the events of one session, nil for every session.
func Events(h *awareness.Hub, ref *awareness.SessionRef) *Sub[awareness.Event] {
	return subscribe(func(k awareness.Sink[awareness.Event]) func() { return h.SubscribeEventsTo(ref, k) })
}
