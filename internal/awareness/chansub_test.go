package awareness

import "sync"

// chanSub is a hub subscription in the mode the product uses, a push stream
// (Hub.SubscribeNoticesTo, SubscribeEventsTo), whose sink is a channel a test reads:
// C holds SubscriberBuffer live values, and a full C drops the subscription as slow,
// as a transport's full queue does. C is closed when the subscription ends; Err then
// says why (nil after Unsubscribe).
type chanSub[T any] struct {
	C     <-chan *T
	unsub func()
	mu    sync.Mutex
	err   error
}

func newChanSub[T any](subscribe func(Sink[T]) func()) *chanSub[T] {
	c := make(chan *T, SubscriberBuffer)
	s := &chanSub[T]{C: c}
	s.unsub = subscribe(Sink[T]{
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
func (s *chanSub[T]) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Unsubscribe ends the subscription; it is safe to call more than once.
func (s *chanSub[T]) Unsubscribe() { s.unsub() }

// hubNotices subscribes to the open notices of watcher ("" = every watcher).
func hubNotices(h *Hub, watcher string) *chanSub[Notice] {
	return newChanSub(func(k Sink[Notice]) func() { return h.SubscribeNoticesTo(watcher, false, k) })
}

// hubEvents subscribes to the events of one session, nil for every session.
func hubEvents(h *Hub, ref *SessionRef) *chanSub[Event] {
	return newChanSub(func(k Sink[Event]) func() { return h.SubscribeEventsTo(ref, k) })
}
