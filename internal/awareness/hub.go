package awareness

import (
	"context"
	"strings"
	"sync/atomic"
	"time"
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
	// sync is the installed Interest's SyncInterest, when it has one.
	sync atomic.Pointer[InterestSync]
}

// Stream names, as Observer.Subscribers and SubscriberDropped report them.
const (
	StreamNotices = "notices"
	StreamEvents  = "events"
)

// Interest is told which watchers and sessions the hub has live subscribers for, so
// that a cross-process listener reads only what a subscriber of this process waits for
// (models.Listener implements it). The hub calls it synchronously, under its own lock,
// when the first subscription of a filter comes (on) and when the last one goes (off),
// so each filter is announced once however many subscribers share it. A subscription's
// interest is announced before Service.SubscribeNotices reads durable state: a notice
// committed after that read is announced by a hint to a listener that already knows of
// the interest, and one committed before it is in the read. Implementations must not
// block and must not call the hub.
type Interest interface {
	// NoticeInterest concerns the notices of one watcher key; "" is every watcher (a
	// staleNotices subscription without a watcher: interest in everything).
	NoticeInterest(watcher string, on bool)
	// EventInterest concerns the events of one session; nil is every session (a
	// stateEvents subscription without a session), and an empty AgentID is the key
	// under every agent.
	EventInterest(ref *SessionRef, on bool)
}

// InterestSync is implemented by an Interest whose announcements take effect later
// than the call (a subscription on a message bus is in effect once its server has it).
// SyncInterest returns once every announcement made before it is in effect, so that a
// read of durable state after it misses no hint; an error (the bus is down) means it
// could not tell, and the Interest must then catch up by itself (a rescan when the bus
// is back). Service.SubscribeNotices calls it between its hub subscription and its
// read of the pending notices.
type InterestSync interface {
	SyncInterest(ctx context.Context) error
}

// SetInterest installs i (nil removes it) and announces to it every filter subscribed
// now. Call it before subscribers come; calling it later is safe too.
func (h *Hub) SetInterest(i Interest) {
	if s, ok := i.(InterestSync); ok {
		h.sync.Store(&s)
	} else {
		h.sync.Store(nil)
	}
	if i == nil {
		h.notices.setInterest(nil)
		h.events.setInterest(nil)
		return
	}
	h.notices.setInterest(func(filter string, on bool) {
		// A closed-items filter always comes with its watcher's own filter, and closed
		// notices travel in hints, not through the listener's reads: no interest of its own.
		if !strings.HasPrefix(filter, closedPrefix) {
			i.NoticeInterest(filter, on)
		}
	})
	h.events.setInterest(func(filter string, on bool) { i.EventInterest(refOfFilter(filter), on) })
}

// syncInterest waits for the interest announced so far to take effect (InterestSync);
// without an InterestSync it returns nil at once.
func (h *Hub) syncInterest(ctx context.Context) error {
	if s := h.sync.Load(); s != nil {
		return (*s).SyncInterest(ctx)
	}
	return nil
}

// NewHub returns an empty hub.
func NewHub() *Hub { return NewHubObserved(nil) }

// NewHubObserved returns an empty hub that reports its subscriptions, drops and
// deliveries to obs (nil: nobody).
func NewHubObserved(obs Observer) *Hub {
	obs = ObserverOr(obs)
	h := &Hub{notices: newTopic[Notice](StreamNotices, obs), events: newTopic[Event](StreamEvents, obs)}
	h.notices.delivered = obs.NoticesDelivered
	return h
}

// PublishNotices delivers notices to the matching notice subscribers. It never
// blocks on a subscriber (see SubscriberBuffer). A closed notice (Notice.Closed) goes
// only to the subscriptions that asked for closed notices; the others never see it.
func (h *Hub) PublishNotices(ns ...Notice) { h.notices.publish(ns, noticeFilters) }

func noticeFilters(n *Notice, filters []string) []string {
	if n.Closed {
		return append(filters, closedFilter(""), closedFilter(n.Watcher))
	}
	return append(filters, "", n.Watcher)
}

// closedFilter is the filter under which the closed notices of watcher ("" = every
// watcher) are published. Keys never contain control characters, so it cannot meet
// an open notice's filter.
// closedPrefix marks the filter of a watcher's closed items.
const closedPrefix = "\x01"

func closedFilter(watcher string) string { return closedPrefix + watcher }

// PublishEvents delivers events to the matching event subscribers. It never blocks on
// a subscriber (see SubscriberBuffer).
func (h *Hub) PublishEvents(evs ...Event) { h.events.publish(evs, eventFilters) }

func eventFilters(e *Event, filters []string) []string {
	return append(filters, "", e.Session.AgentID+"\x00"+e.Session.Key, "\x00"+e.Session.Key)
}

// tryPublish is PublishEvents(evs...) then PublishNotices(ns...), done only when it is
// cheap and immediate: neither topic's lock is held by a writer or wanted by one (a
// broadcast under way with a subscription waiting for it), and the values reach at
// most limit subscriptions together. Otherwise it delivers nothing and returns false.
func (h *Hub) tryPublish(evs []Event, ns []Notice, limit int) bool {
	if !h.events.mu.TryRLock() {
		return false
	}
	if !h.notices.mu.TryRLock() {
		h.events.mu.RUnlock()
		return false
	}
	n := h.events.recipientsLocked(evs, eventFilters, limit)
	if n <= limit {
		n += h.notices.recipientsLocked(ns, noticeFilters, limit-n)
	}
	if n > limit {
		h.notices.mu.RUnlock()
		h.events.mu.RUnlock()
		return false
	}
	slowEvents := h.events.publishLocked(evs, eventFilters)
	h.events.mu.RUnlock()
	slowNotices := h.notices.publishLocked(ns, noticeFilters)
	h.notices.mu.RUnlock()
	h.events.removeSlow(slowEvents)
	h.notices.removeSlow(slowNotices)
	return true
}

// SubscribeNoticesTo subscribes sink to the open notices of one watcher ("" = all
// watchers) and, with includeClosed, to the items that report them closed
// (Notice.Closed), in publish order, until unsubscribe is called or the hub ends the
// subscription (sink.End). It is the push stream of Service.SubscribeNoticesTo
// without its replay, its filters and its admission: a listener's or a test's view of
// what the hub publishes.
func (h *Hub) SubscribeNoticesTo(watcher string, includeClosed bool, sink Sink[Notice]) (unsubscribe func()) {
	sub := h.streamNotices(watcher, TransportUnknown, includeClosed, nil, nil, &sink, nil)
	sub.start(nil)
	return sub.Unsubscribe
}

// SubscribeEventsTo is SubscribeNoticesTo for the events of one session, nil for all
// sessions. A ref with an empty AgentID matches the key under every agent.
func (h *Hub) SubscribeEventsTo(ref *SessionRef, sink Sink[Event]) (unsubscribe func()) {
	sub := h.streamEvents(ref, TransportUnknown, nil, nil, &sink, nil)
	sub.start(nil)
	return sub.Unsubscribe
}

func eventFilter(ref *SessionRef) string {
	if ref == nil {
		return ""
	}
	return ref.AgentID + "\x00" + ref.Key
}

// refOfFilter is the inverse of eventFilter.
func refOfFilter(filter string) *SessionRef {
	agent, key, ok := strings.Cut(filter, "\x00")
	if !ok {
		return nil
	}
	return &SessionRef{AgentID: agent, Key: key}
}

// streamNotices and streamEvents add held stream subscriptions (see stream) for the
// service, which starts them.
// includeClosed adds the closed items of the watcher's notices; transport labels the
// subscription for Observer.Subscribers.
// sink, when set, makes the subscription a push stream (see Sink) instead of a
// channel one.
// fd, when set, makes the subscription a feed (feed.go).
func (h *Hub) streamNotices(watcher, transport string, includeClosed bool, accept func(*Notice) bool, onDrop func(), sink *Sink[Notice], fd *feed[Notice]) *Sub[Notice] {
	filters := []string{watcher}
	if includeClosed {
		filters = append(filters, closedFilter(watcher))
	}
	return h.notices.subscribeStream(filters, transport, accept, onDrop, sink, fd)
}

func (h *Hub) streamEvents(ref *SessionRef, transport string, accept func(*Event) bool, onDrop func(), sink *Sink[Event], fd *feed[Event]) *Sub[Event] {
	return h.events.subscribeStream([]string{eventFilter(ref)}, transport, accept, onDrop, sink, fd)
}

// Bookmark sends a FeedBookmark made at now to every feed with marks that sent
// nothing since the previous call, and notes that the others did not (FEED-3):
// called every half interval (FeedTicker), it keeps every idle feed's silence under
// an interval. A feed whose sink refuses the bookmark is dropped as slow.
func (h *Hub) Bookmark(now time.Time) {
	h.notices.bookmark(now)
	h.events.bookmark(now)
}

// Sink is where a push stream (Service.SubscribeNoticesTo, SubscribeEventsTo) hands
// its values: the transport's own queue, in place of the channel a goroutine of the
// transport would wait on. An idle push subscription thus costs no goroutine at all:
// the publisher calls Push, and the transport writes the frame when it can.
type Sink[T any] struct {
	// Push hands one value to the transport, in stream order: first the durable state
	// read at subscribe (replay true), then each live value. It is called under the
	// subscription's lock, from the publisher or the subscriber's own goroutine, and
	// must not block, nor call the hub. v points into a batch every subscriber of a
	// publish shares: it may be kept, never changed. false means the transport's
	// buffer is full (it bounds the live values it holds by SubscriberBuffer): the
	// subscription is then dropped as slow (ErrSlowSubscriber, and the drop function).
	Push func(v *T, replay bool) bool
	// Mark, set for a feed with marks (FeedOptions.Marks), receives the feed's
	// markers in stream order, on the terms of Push; false drops the subscription as
	// slow.
	Mark func(m FeedMark) bool
	// End, when set, is told once why the subscription ended: nil after Unsubscribe,
	// ErrSlowSubscriber, ErrFeedGap, ErrHubClosed. Like Push it must not block nor
	// call the hub.
	End func(error)
}

// SinkOf is a Sink whose values (a *T) and markers (a FeedMark) all go to push, for a
// transport whose queue holds any value (substream.Sink); end is the Sink's End.
func SinkOf[T any](push func(v any, replay bool) bool, end func(error)) Sink[T] {
	return Sink[T]{
		Push: func(v *T, replay bool) bool { return push(v, replay) },
		Mark: func(m FeedMark) bool { return push(m, false) },
		End:  end,
	}
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
