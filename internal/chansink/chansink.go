// Package chansink reads a push stream in tests through a channel: the sink a
// transport would give a subscription (a push that must not block, an end told once)
// is a buffered channel a test reads. It imports nothing of the project, so the
// awareness package's own tests and the packages above it share it.
package chansink

import "sync"

// Sub is a subscription whose values a test reads from C, which holds limit live
// values: a push to a full C returns false, which drops the subscription as slow, as
// a transport's full queue does. C is closed when the subscription ends; Err then
// says why (nil after Unsubscribe).
type Sub[T any] struct {
	C     <-chan *T
	unsub func()
	mu    sync.Mutex
	err   error
}

// New subscribes with a channel sink of limit live values: subscribe is given the
// sink's push and end and returns the subscription's unsubscribe function.
func New[T any](limit int, subscribe func(push func(v *T, replay bool) bool, end func(error)) func()) *Sub[T] {
	c := make(chan *T, limit)
	s := &Sub[T]{C: c}
	s.unsub = subscribe(
		func(v *T, _ bool) bool {
			select {
			case c <- v:
				return true
			default:
				return false
			}
		},
		func(err error) {
			s.mu.Lock()
			s.err = err
			s.mu.Unlock()
			close(c)
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
