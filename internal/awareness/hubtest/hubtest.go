// Package hubtest reads a hub's publications in tests of other packages: a
// subscription in the mode the product uses, a push stream (Hub.SubscribeNoticesTo,
// SubscribeEventsTo), whose sink is a channel (chansink).
package hubtest

import (
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/chansink"
)

// Sub is a hub subscription read through a channel of awareness.SubscriberBuffer
// live values (chansink.Sub).
type Sub[T any] = chansink.Sub[T]

func subscribe[T any](to func(awareness.Sink[T]) func()) *Sub[T] {
	return chansink.New(awareness.SubscriberBuffer, func(push func(*T, bool) bool, end func(error)) func() {
		return to(awareness.Sink[T]{Push: push, End: end})
	})
}

// Notices subscribes to the open notices of watcher ("" = every watcher).
func Notices(h *awareness.Hub, watcher string) *Sub[awareness.Notice] {
	return subscribe(func(k awareness.Sink[awareness.Notice]) func() { return h.SubscribeNoticesTo(watcher, false, k) })
}

// Events subscribes to the events of one session, nil for every session.
func Events(h *awareness.Hub, ref *awareness.SessionRef) *Sub[awareness.Event] {
	return subscribe(func(k awareness.Sink[awareness.Event]) func() { return h.SubscribeEventsTo(ref, k) })
}
