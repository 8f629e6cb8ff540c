package awareness

import "github.com/awareness/awareness/internal/chansink"

// chanSub is a hub subscription in the mode the product uses, a push stream
// (Hub.SubscribeNoticesTo, SubscribeEventsTo), read through a channel of
// SubscriberBuffer live values (chansink.Sub).
type chanSub[T any] = chansink.Sub[T]

func newChanSub[T any](subscribe func(Sink[T]) func()) *chanSub[T] {
	return chansink.New(SubscriberBuffer, func(push func(*T, bool) bool, end func(error)) func() {
		return subscribe(Sink[T]{Push: push, End: end})
	})
}

// hubNotices subscribes to the open notices of watcher ("" = every watcher).
func hubNotices(h *Hub, watcher string) *chanSub[Notice] {
	return newChanSub(func(k Sink[Notice]) func() { return h.SubscribeNoticesTo(watcher, false, k) })
}

// hubEvents subscribes to the events of one session, nil for every session.
func hubEvents(h *Hub, ref *SessionRef) *chanSub[Event] {
	return newChanSub(func(k Sink[Event]) func() { return h.SubscribeEventsTo(ref, k) })
}
