package resolvers

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/graph/gqlmodel"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/substream"
)

// The subscription values and the feeds (FEED-1..3). Every subscription field makes
// one value (substream.Subscription: how to open it on the hub, how to write or
// deliver its items) and hands it to the transport of its operation (the
// substream.Op of ctx), which serves it on one of three paths:
//
//   - SSE (ssepush, Delivered): the hub pushes into the request's queue, and the
//     request's goroutine hands each value to the operation's channel (Deliver) and
//     writes its frame with its event id (sseEventID, sseNoticeID; FEED-2). A
//     reconnection's Last-Event-ID resumes an event stream of one session after that
//     sequence (resumeAfter).
//   - WebSocket (wsgorilla, Pushed; push.go): the hub pushes into the connection's
//     queue, which writes each frame (Frame); the markers of a feed are frames like
//     the items.
//   - gqlgen's channel (NotServed: a selection Frame cannot write): the sink's values
//     wait in a queue and one goroutine per subscription relays them to gqlgen's
//     channel (relay), telling the transport how the subscription ended (Op.Ended).

// resumeAfter is where an event stream resumes (FEED-1): over SSE, the request's
// Last-Event-ID (FEED-2) when the stream follows one session, since its events' ids
// are their sequences and the header is newer than the request's variables; else
// afterSequence. A Last-Event-ID that is not such an id is refused (ERR-1).
func resumeAfter(ctx context.Context, sessionKey *string, afterSequence *int) (*int64, error) {
	if op := substream.From(ctx); op != nil && sessionKey != nil && op.LastEventID() != "" {
		n, err := strconv.ParseInt(op.LastEventID(), 10, 64)
		if err != nil || n < 0 {
			return nil, awareness.Errorf(awareness.EINVALID, "Last-Event-ID %q is not an event id of this stream (a sequence: 0 or more)", op.LastEventID())
		}
		return &n, nil
	}
	if afterSequence == nil {
		return nil, nil
	}
	n := int64(*afterSequence)
	return &n, nil
}

// sseEventID is the SSE event id of an event of a stream of one session: its
// sequence; the events of a stream of every session have none.
func sseEventID(oneSession bool) func(*awareness.Event) string {
	if !oneSession {
		return func(*awareness.Event) string { return "" }
	}
	return func(e *awareness.Event) string { return strconv.FormatInt(e.Sequence, 10) }
}

// sseNoticeID is the SSE event id of a notice item: the JSON array [watcher,
// targetAgentId, target, notifiedVersion], with "closed" appended on a closed item. It
// names the item exactly, so a client that reconnects skips what it holds; the
// service sends every pending notice again whatever the Last-Event-ID (NTC-5).
func sseNoticeID(n *awareness.Notice) string {
	v := []any{n.Watcher, n.Target.AgentID, n.Target.Key, n.NotifiedVersion}
	if n.Closed {
		v = append(v, "closed")
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// markID is the SSE event id of a marker: its sequence on a feed of one session (the
// same resume point as the last event's), else none.
func markID(m awareness.FeedMark) string {
	if !m.Sequenced {
		return ""
	}
	return strconv.FormatInt(m.Sequence, 10)
}

// markItem is a marker as its union member.
func markItem(m awareness.FeedMark) gqlmodel.FeedItem {
	var seq *int
	if m.Sequenced {
		n := int(m.Sequence)
		seq = &n
	}
	if m.Kind == awareness.FeedSynced {
		return &gqlmodel.FeedSynced{LastSequence: seq, Replayed: m.Replayed, At: m.At}
	}
	return &gqlmodel.FeedBookmark{LastSequence: seq, At: m.At}
}

// path is how one subscription field hands its values to gqlgen's channel: conv
// makes the channel's element of a value, id its SSE event id; mark, set for a feed,
// the element of a marker.
type path[T, O any] struct {
	conv func(*T) O
	id   func(*T) string
	mark func(awareness.FeedMark) O
}

// serve serves one subscription field: it hands the field's subscription value to
// the transport of ctx's operation, or relays it on gqlgen's channel when the
// transport does not take it. frame writes the frame of a value (nil when the
// selection has no one-pass writer); open subscribes on the hub.
func serve[T, O any](ctx context.Context, present graphql.ErrorPresenterFunc, p path[T, O], frame func([]byte, any) []byte,
	open func(awareness.Sink[T]) (func(), error)) (<-chan O, error) {
	op := substream.From(ctx)
	if op == nil {
		return relay(ctx, nil, p, present, open)
	}
	ch := make(chan O, 1)
	mode, err := op.Serve(&substream.Subscription{
		Open:    func(sink substream.Sink) (func(), error) { return open(hubSink[T](sink, present)) },
		Limit:   awareness.SubscriberBuffer,
		Frame:   frame,
		Deliver: deliver(ch, p),
	})
	switch {
	case err != nil:
		return nil, err
	case mode == substream.Pushed:
		closed := make(chan O)
		close(closed) // gqlgen's part of the operation ends at its first read
		return closed, nil
	case mode == substream.Delivered:
		return ch, nil
	}
	return relay(ctx, op, p, present, open)
}

// deliver is a Subscription's Deliver: it hands a value or marker to ch, converted,
// and returns its SSE event id.
func deliver[T, O any](ch chan<- O, p path[T, O]) func(any) string {
	return func(v any) string {
		switch x := v.(type) {
		case *T:
			ch <- p.conv(x)
			return p.id(x)
		case awareness.FeedMark:
			ch <- p.mark(x)
			return markID(x)
		}
		return ""
	}
}

// hubSink is the hub's sink (awareness.Sink) of a transport's sink: the markers of a
// feed are values like the items, and the hub's end reasons are the transport's:
// a slow subscriber or a feed's gap is dropped, any other end an `error` frame.
func hubSink[T any](sink substream.Sink, present graphql.ErrorPresenterFunc) awareness.Sink[T] {
	return awareness.SinkOf[T](sink.Push, func(err error) { sink.End(endOf(err, present)) })
}

// endOf is the transport's End of the hub's end reason (awareness.Sink.End).
func endOf(err error, present graphql.ErrorPresenterFunc) substream.End {
	switch {
	case err == nil:
		return substream.End{}
	case awareness.IsSlowSubscriber(err):
		return substream.End{Dropped: true}
	}
	return substream.End{Errors: ErrorsPayload(gqlerror.List{present(context.Background(), err)})}
}

// relay serves a subscription on gqlgen's channel: the sink's values and markers wait
// in a queue and one goroutine hands them to the channel, converted, until the
// subscription or ctx ends. The hub's bounds apply unchanged (the queue holds
// awareness.SubscriberBuffer live values). The subscription's end is told to op at
// once (Op.Ended: a drop closes the connection even while a write is stuck), and the
// channel closes once what was queued before it is handed on.
func relay[T, O any](ctx context.Context, op substream.Op, p path[T, O], present graphql.ErrorPresenterFunc,
	open func(awareness.Sink[T]) (func(), error)) (<-chan O, error) {
	q := &relayQueue{limit: awareness.SubscriberBuffer, wake: make(chan struct{}, 1)}
	unsubscribe, err := open(hubSink[T](substream.Sink{Push: q.push, End: func(e substream.End) {
		if op != nil {
			op.Ended(e)
		}
		q.end()
	}}, present))
	if err != nil {
		return nil, err
	}
	out := make(chan O)
	go func() {
		defer close(out)
		defer unsubscribe()
		for {
			select {
			case <-ctx.Done():
				return
			case <-q.wake:
			}
			for {
				v, ok, ended := q.next()
				if !ok {
					if ended {
						return
					}
					break
				}
				var item O
				switch x := v.(type) {
				case *T:
					item = p.conv(x)
				case awareness.FeedMark:
					item = p.mark(x)
				}
				select {
				case out <- item:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}

// relayQueue is relay's queue: values in order, at most limit live ones.
type relayQueue struct {
	limit int
	wake  chan struct{} // has a token when the queue or the end changed

	mu    sync.Mutex
	queue []any
	live  []bool // whether queue[i] is live (counted against limit)
	n     int    // live values queued
	ended bool
}

func (q *relayQueue) push(v any, replay bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.ended {
		return true
	}
	if !replay {
		if q.n >= q.limit {
			return false
		}
		q.n++
	}
	q.queue = append(q.queue, v)
	q.live = append(q.live, !replay)
	q.signal()
	return true
}

func (q *relayQueue) end() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ended = true
	q.signal()
}

func (q *relayQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// next takes the next value; with the queue empty, ok is false and ended tells
// whether the subscription ended.
func (q *relayQueue) next() (v any, ok, ended bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.queue) == 0 {
		q.queue, q.live = nil, nil
		return nil, false, q.ended
	}
	v = q.queue[0]
	if q.live[0] {
		q.n--
	}
	q.queue[0] = nil
	q.queue, q.live = q.queue[1:], q.live[1:]
	return v, true, false
}

// eventPath and noticePath are the paths of the contract's subscriptions; the feed
// paths convert to the union.
func eventPath(oneSession bool) path[awareness.Event, awareness.Event] {
	return path[awareness.Event, awareness.Event]{conv: func(e *awareness.Event) awareness.Event { return *e }, id: sseEventID(oneSession)}
}

func noticePath() path[awareness.Notice, awareness.Notice] {
	return path[awareness.Notice, awareness.Notice]{conv: func(n *awareness.Notice) awareness.Notice { return *n }, id: sseNoticeID}
}

func eventFeedPath(oneSession bool) path[awareness.Event, gqlmodel.FeedItem] {
	return path[awareness.Event, gqlmodel.FeedItem]{conv: func(e *awareness.Event) gqlmodel.FeedItem { return *e },
		id: sseEventID(oneSession), mark: markItem}
}

func noticeFeedPath() path[awareness.Notice, gqlmodel.FeedItem] {
	return path[awareness.Notice, gqlmodel.FeedItem]{conv: func(n *awareness.Notice) gqlmodel.FeedItem { return *n },
		id: sseNoticeID, mark: markItem}
}
