// Subscriptions: notices and events, live or as feeds that replay first, each admitted
// against the caller's stream budget and filtered of repeats.

package awareness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// sentPerPair is how many recent notice IDs per pair a subscription remembers to drop
// repeats (see SubscribeNotices).
const sentPerPair = 4

// SubscribeNotices streams a watcher's notices (nil: every watcher, narrowed for an
// agent principal to its own agent's watchers, as listings are): first every
// notice pending now, then each notice as it opens (NTC-5, NTC-7). With includeClosed
// the stream also carries, once per closed notice, the notice again with Closed set
// when it is acknowledged or its cursor removed; a follow-up opened by an ack comes
// after that item. Without it the stream carries open notices only. The same opened
// notice is never sent twice on one subscription. The channel closes when ctx ends or
// the subscriber falls behind (see SubscriberBuffer); err then tells why (nil after
// ctx ended). A subscription that falls behind is dropped at once, with what it still
// queued, and calls the function WithDropFunc put in ctx, if any.
//
// No goroutine serves the subscription while it is idle (see stream): the hub hands
// notices to the returned channel itself, drops repeats as it does, and ctx's end
// unsubscribes it (context.AfterFunc).
func (s *Service) SubscribeNotices(ctx context.Context, watcher *string, includeClosed bool) (<-chan Notice, func() error, error) {
	sub, err := s.subscribeNotices(ctx, watcher, includeClosed, FeedOptions{}, nil)
	if err != nil {
		return nil, nil, err
	}
	context.AfterFunc(ctx, sub.Unsubscribe)
	return sub.stream.out, sub.Err, nil
}

// SubscribeNoticesTo is SubscribeNotices as a push stream: the notices go to sink
// (see Sink), the pending ones first, and the subscription lasts until the returned
// unsubscribe is called or the hub ends it (sink.End), not as long as ctx: ctx serves
// the subscribe (authorization, the read of the pending notices) and is not kept.
// Nothing waits on the subscription: a transport that writes from its own queue
// serves an idle subscriber without a goroutine.
func (s *Service) SubscribeNoticesTo(ctx context.Context, watcher *string, includeClosed bool, sink Sink[Notice]) (unsubscribe func(), err error) {
	return s.SubscribeNoticeFeed(ctx, watcher, includeClosed, FeedOptions{}, sink)
}

// SubscribeNoticeFeed is SubscribeNoticesTo as a feed (feed.go): with o.Marks, the
// sink's Mark gets one FeedSynced after the pending notices and a FeedBookmark while
// the feed is idle (FEED-3). o.After is refused: notices have no single sequence, and
// every subscription sends every pending notice first (NTC-5).
func (s *Service) SubscribeNoticeFeed(ctx context.Context, watcher *string, includeClosed bool, o FeedOptions, sink Sink[Notice]) (unsubscribe func(), err error) {
	sub, err := s.subscribeNotices(ctx, watcher, includeClosed, o, &sink)
	if err != nil {
		return nil, err
	}
	return sub.Unsubscribe, nil
}

func (s *Service) subscribeNotices(ctx context.Context, watcher *string, includeClosed bool, o FeedOptions, sink *Sink[Notice]) (*Sub[Notice], error) {
	if o.After != nil {
		return nil, Errorf(EINVALID, "a notice feed does not resume from a sequence: every subscription sends every pending notice first")
	}
	if o.Marks && (sink == nil || sink.Mark == nil) {
		return nil, Internal(errors.New("a feed with marks needs a sink with Mark"))
	}
	var w string
	if watcher != nil {
		ref, err := ResolveWatcher(*watcher)
		if err != nil {
			return nil, err
		}
		w = ref.Key
		if err := s.authorize(ctx, ref.AgentID); err != nil {
			return nil, err
		}
	}
	// Subscribe before reading durable state so nothing opened in between is missed;
	// the stream holds live notices back until the pending ones are in front of them.
	accept := new(repeatFilter).accept
	visible := s.watchVisible(ctx)
	own := ""
	if watcher == nil {
		own = s.streamAgent(ctx)
	}
	if own != "" {
		// Narrowed to the watchers of its own agent, as listings are (CLT-1).
		unseen := accept
		accept = func(n *Notice) bool { return watcherAgent(n.Watcher) == own && visible(n.Target) && unseen(n) }
	} else if visible != nil {
		unseen := accept
		accept = func(n *Notice) bool { return visible(n.Target) && unseen(n) }
	}
	release, err := s.admit(ctx)
	if err != nil {
		return nil, err
	}
	var fd *feed[Notice]
	if o.Marks {
		fd = &feed[Notice]{marks: true, now: s.Now}
	}
	sub := s.hub.streamNotices(w, subscriberTransport(ctx), includeClosed, accept, dropFunc(ctx), sink, fd)
	sub.onEnd(release)
	// A cross-process bus has the subscription's interest before the read; when it
	// cannot say (it is down), its reconnect rescans (InterestSync).
	_ = s.hub.syncInterest(ctx)
	pending, err := s.readPending(ctx, w)
	if err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	if own != "" {
		pending = ownWatchers(pending, own)
	}
	sub.start(visibleNotices(pending, visible))
	return sub, nil
}

// streamAgent is the agent an agent principal's unfiltered stream is narrowed to: its
// own; "" for an admin or no principal (every watcher, every session).
func (s *Service) streamAgent(ctx context.Context) string {
	if p, ok := PrincipalFrom(ctx); ok && !p.Admin {
		return p.AgentID
	}
	return ""
}

// watcherAgent is the agent of a watcher key (always agent:<agentId>:…, WAT-1).
func watcherAgent(watcher string) string {
	rest, _ := strings.CutPrefix(watcher, "agent:")
	agent, _, _ := strings.Cut(rest, ":")
	return agent
}

// ownWatchers keeps the notices whose watcher belongs to agent.
func ownWatchers(ns []Notice, agent string) []Notice {
	out := ns[:0:0]
	for _, n := range ns {
		if watcherAgent(n.Watcher) == agent {
			out = append(out, n)
		}
	}
	return out
}

// readPending reads the pending notices of watcher on a goroutine of its own. The
// caller is typically the goroutine that then waits on the subscription for as long as
// it lasts (gqlgen's, one per subscription); a store read is deep (database/sql, the
// driver, cgo) and would grow that goroutine's stack for its whole life to several
// times what waiting needs: with 10k idle subscribers, about 4 KiB each. The
// short-lived goroutine's stack goes when it returns.
func (s *Service) readPending(ctx context.Context, watcher string) ([]Notice, error) {
	var (
		pending []Notice
		err     error
		failed  any
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { failed = recover() }() // re-raised on the caller's goroutine
		pending, err = s.store.Pending(ctx, watcher)
		if err == nil {
			pending, err = s.applyHolds(ctx, watcher, pending)
		}
	}()
	<-done
	if failed != nil {
		panic(failed)
	}
	return pending, err
}

// repeatFilter drops repeats of a notice on one subscription: pair → the last
// notices sent, newest last. More than the last one: with several processes a stale
// copy of a notice (read before an ack, published after the follow-up) can arrive after
// its successor. It is called under the subscription's lock only. Within one pair a
// notice's ID (Notice.ID) is its changesSince, its opening millisecond and its closed
// mark, which is what it keeps: nothing is built per notice. A subscription mostly
// hears of a few pairs (its watcher's targets), kept in a short list; past
// fewPairs they move to a map.
type repeatFilter struct {
	few  []pairSent
	many map[noticePair]*sentNotices
}

// fewPairs bounds the pairs a repeatFilter searches in a list.
const fewPairs = 8

type noticePair struct{ watcher, agentID, key string }

// noticeStamp is what tells two notices of one pair apart (see Notice.ID).
type noticeStamp struct {
	changesSince, openedMs int64
	delivery               int
	closed                 bool
}

// sentNotices are the last stamps sent for one pair, oldest first.
type sentNotices struct {
	n      int
	stamps [sentPerPair]noticeStamp
}

type pairSent struct {
	pair noticePair
	sent sentNotices
}

func (f *repeatFilter) accept(n *Notice) bool {
	sent := f.lookup(noticePair{n.Watcher, n.Target.AgentID, n.Target.Key})
	stamp := noticeStamp{n.ChangesSince, n.OpenedAt.UnixMilli(), n.Delivery, n.Closed}
	if slices.Contains(sent.stamps[:sent.n], stamp) {
		return false
	}
	if sent.n == sentPerPair {
		copy(sent.stamps[:], sent.stamps[1:])
		sent.n--
	}
	sent.stamps[sent.n] = stamp
	sent.n++
	return true
}

// lookup returns the pair's entry, adding an empty one.
func (f *repeatFilter) lookup(pair noticePair) *sentNotices {
	if f.many != nil {
		sent := f.many[pair]
		if sent == nil {
			sent = new(sentNotices)
			f.many[pair] = sent
		}
		return sent
	}
	for i := range f.few {
		if f.few[i].pair == pair {
			return &f.few[i].sent
		}
	}
	if len(f.few) < fewPairs {
		f.few = append(f.few, pairSent{pair: pair})
		return &f.few[len(f.few)-1].sent
	}
	f.many = make(map[noticePair]*sentNotices, 2*fewPairs)
	for i := range f.few {
		f.many[f.few[i].pair] = &f.few[i].sent
	}
	f.few = nil // the map holds its entries
	return f.lookup(pair)
}

// SubscribeEvents streams the live log of one session, or of every session when key is
// nil (for an agent principal, every session of its own agent). It starts at the next append. Like SubscribeNotices, it holds no goroutine while
// idle, ends when ctx ends or the subscriber falls behind, and then calls the function
// WithDropFunc put in ctx.
func (s *Service) SubscribeEvents(ctx context.Context, key, agentID *string) (<-chan Event, func() error, error) {
	return s.SubscribeEventsAfter(ctx, key, agentID, nil)
}

// SubscribeEventsAfter is SubscribeEvents resuming after a sequence of the session
// (FEED-1, see feed.go); after nil is SubscribeEvents.
func (s *Service) SubscribeEventsAfter(ctx context.Context, key, agentID *string, after *int64) (<-chan Event, func() error, error) {
	sub, err := s.subscribeEvents(ctx, key, agentID, FeedOptions{After: after}, nil)
	if err != nil {
		return nil, nil, err
	}
	context.AfterFunc(ctx, sub.Unsubscribe)
	return sub.stream.out, sub.Err, nil
}

// SubscribeEventsTo is SubscribeEvents as a push stream, as SubscribeNoticesTo is
// SubscribeNotices'.
func (s *Service) SubscribeEventsTo(ctx context.Context, key, agentID *string, sink Sink[Event]) (unsubscribe func(), err error) {
	return s.SubscribeEventFeed(ctx, key, agentID, FeedOptions{}, sink)
}

// SubscribeEventFeed is SubscribeEventsTo as a feed (feed.go): o.After replays the
// session's log after that sequence first (FEED-1: HISTORY_GAP below the retained
// history, CURSOR_AHEAD above the head; it needs a session), and o.Marks sends the
// sink's Mark one FeedSynced after the replay and a FeedBookmark while the feed is
// idle (FEED-3). A feed of one session with marks and without o.After starts at the
// session's head, read when it subscribes, which its FeedSynced names.
func (s *Service) SubscribeEventFeed(ctx context.Context, key, agentID *string, o FeedOptions, sink Sink[Event]) (unsubscribe func(), err error) {
	sub, err := s.subscribeEvents(ctx, key, agentID, o, &sink)
	if err != nil {
		return nil, err
	}
	return sub.Unsubscribe, nil
}

func (s *Service) subscribeEvents(ctx context.Context, key, agentID *string, o FeedOptions, sink *Sink[Event]) (*Sub[Event], error) {
	var ref *SessionRef
	if key != nil {
		r, err := ResolveSession(*key, agentID)
		if err != nil {
			return nil, err
		}
		ref = &r
	} else if agentID != nil {
		return nil, Errorf(EINVALID, "agentId needs a sessionKey")
	}
	var accept func(*Event) bool
	if ref != nil {
		if err := s.authorize(ctx, ref.AgentID); err != nil {
			return nil, err
		}
	} else if own := s.streamAgent(ctx); own != "" {
		// Narrowed to the sessions of its own agent, as listings are (CLT-1).
		accept = func(e *Event) bool { return e.Session.AgentID == own }
	}
	if o.After != nil {
		if ref == nil {
			return nil, Errorf(EINVALID, "afterSequence needs a sessionKey: a feed of every session does not resume from one sequence")
		}
		if *o.After < 0 {
			return nil, Errorf(EINVALID, "afterSequence must be 0 or more, got %d", *o.After)
		}
	}
	if o.Marks && (sink == nil || sink.Mark == nil) {
		return nil, Internal(errors.New("a feed with marks needs a sink with Mark"))
	}
	var fd *feed[Event]
	if o.After != nil || o.Marks {
		fd = &feed[Event]{marks: o.Marks, now: s.Now}
		if ref != nil {
			fd.seq = eventSequence
		}
	}
	release, err := s.admit(ctx)
	if err != nil {
		return nil, err
	}
	sub := s.hub.streamEvents(ref, subscriberTransport(ctx), accept, dropFunc(ctx), sink, fd)
	sub.onEnd(release)
	var backlog []Event
	if fd != nil && fd.seq != nil {
		// Subscribed first: the read below has everything committed before the live
		// events the stream holds back, which start then takes from the next sequence.
		var last int64
		backlog, last, err = s.readBacklog(ctx, *ref, o.After)
		if err != nil {
			sub.Unsubscribe()
			return nil, err
		}
		sub.mu.Lock()
		fd.last = last
		sub.mu.Unlock()
	}
	sub.start(backlog)
	return sub, nil
}

// FeedReplayPage is how many events a feed's replay reads per store call.
const FeedReplayPage = 500

// readBacklog reads what an event feed of ref starts with (FEED-1): after nil, the
// head (last; no event); else every event after *after (checked by checkAfter), in
// pages that must join, and the last sequence read. Like readPending, it reads on a
// goroutine of its own.
func (s *Service) readBacklog(ctx context.Context, ref SessionRef, after *int64) (backlog []Event, last int64, err error) {
	var failed any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { failed = recover() }() // re-raised on the caller's goroutine
		if after == nil {
			var ch Changes
			if ch, err = s.store.ReadChanges(ctx, ref, 0, 0); err == nil {
				last = ch.Head.Version
			}
			return
		}
		last = *after
		for {
			var ch Changes
			if ch, err = s.store.ReadChanges(ctx, ref, last, FeedReplayPage); err != nil {
				return
			}
			// Every page is checked: retention may prune between two of them.
			if err = checkAfter(last, ch); err != nil {
				if len(backlog) > 0 && ErrorCode(err) == EHISTORYGAP {
					err = checkAfter(*after, ch) // in the caller's terms
				}
				return
			}
			for i := range ch.Events {
				if ch.Events[i].Sequence != last+1 {
					// Above the pruned watermark the log is dense (SIG-3, SIG-6).
					err = Internal(fmt.Errorf("the log of %s skips from %d to %d above its pruned watermark %d",
						ref.AgentID+"/"+ref.Key, last, ch.Events[i].Sequence, ch.Head.PrunedThrough))
					return
				}
				last++
			}
			backlog = append(backlog, ch.Events...)
			if !ch.More {
				return
			}
		}
	}()
	<-done
	if failed != nil {
		panic(failed)
	}
	return backlog, last, err
}

// admit takes a stream slot of the caller of ctx (Config.Streams).
func (s *Service) admit(ctx context.Context) (release func(), err error) {
	if s.streams == nil {
		return nil, nil
	}
	return s.streams.Admit(ctx)
}

// subscriberTransport labels a subscription for Observer.Subscribers: the client's
// transport (WithClient), else TransportUnknown.
func subscriberTransport(ctx context.Context) string {
	if t := ClientFrom(ctx).Transport; t != "" {
		return t
	}
	return TransportUnknown
}

type dropFuncKey struct{}

// WithDropFunc returns a context whose subscriptions (SubscribeNotices,
// SubscribeEvents) call fn when the hub drops them for falling behind. fn runs on the
// publisher's goroutine, after the subscription's channel is closed: it must not block.
// The transport uses it to end a connection whose write is stuck behind a client that
// does not read, instead of waiting for the write timeout.
func WithDropFunc(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, dropFuncKey{}, fn)
}

func dropFunc(ctx context.Context) func() {
	fn, _ := ctx.Value(dropFuncKey{}).(func())
	return fn
}
