package resolvers

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/graph/gqlmodel"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/ssepush"
	"github.com/awareness/awareness/internal/wsgorilla"
)

// The feeds (FEED-1..3) and the SSE push path. Every subscription field is served by
// one of three paths, tried in this order:
//
//   - SSE (ssepush): the hub pushes into the request's queue, and the request's
//     goroutine hands each value to the operation's channel and writes its frame with
//     its event id (sseEventID, sseNoticeID; FEED-2). A reconnection's Last-Event-ID
//     resumes an event stream of one session after that sequence (resumeAfter).
//   - WebSocket (push.go): the hub pushes into the connection's queue; the markers of
//     a feed are frames like the items.
//   - gqlgen's channel: the core's channel stream; for a feed, whose markers only a
//     sink receives, a queue and one goroutine per subscription relay them
//     (relayFeed). It serves the selections the WebSocket push path cannot write.

// resumeAfter is where an event stream resumes (FEED-1): over SSE, the request's
// Last-Event-ID (FEED-2) when the stream follows one session, since its events' ids
// are their sequences and the header is newer than the request's variables; else
// afterSequence. A Last-Event-ID that is not such an id is refused (ERR-1).
func resumeAfter(ctx context.Context, sessionKey *string, afterSequence *int) (*int64, error) {
	if st := ssepush.From(ctx); st != nil && sessionKey != nil && st.LastEventID() != "" {
		n, err := strconv.ParseInt(st.LastEventID(), 10, 64)
		if err != nil || n < 0 {
			return nil, awareness.Errorf(awareness.EINVALID, "Last-Event-ID %q is not an event id of this stream (a sequence: 0 or more)", st.LastEventID())
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

// path is how one subscription field hands its values to a transport: conv makes the
// channel's element of a value, id its SSE event id; marks, set for a feed, its
// markers.
type path[T, O any] struct {
	conv  func(*T) O
	id    func(*T) string
	marks bool
	mark  func(awareness.FeedMark) O
}

// serveSSE serves a subscription on the SSE push path when ctx is an SSE request's;
// ok false otherwise.
func serveSSE[T, O any](ctx context.Context, p path[T, O], subscribe func(awareness.Sink[T]) (func(), error)) (_ <-chan O, ok bool, _ error) {
	st := ssepush.From(ctx)
	if st == nil {
		return nil, false, nil
	}
	ch := make(chan O, 1)
	adopted := st.Adopt(func(v any) string {
		switch x := v.(type) {
		case *T:
			ch <- p.conv(x)
			return p.id(x)
		case awareness.FeedMark:
			ch <- p.mark(x)
			return markID(x)
		}
		return ""
	})
	if !adopted {
		return nil, false, nil
	}
	sink := awareness.Sink[T]{Push: func(v *T, replay bool) bool { return st.Push(v, replay) }, End: st.End}
	if p.marks {
		sink.Mark = func(m awareness.FeedMark) bool { return st.Push(m, false) }
	}
	unsubscribe, err := subscribe(sink)
	if err != nil {
		st.Abandon()
		return nil, true, err
	}
	st.Start(unsubscribe)
	return ch, true, nil
}

// relayFeed serves a feed on gqlgen's channel: the sink's values and markers wait in
// a queue (ssepush.Stream, the SSE path's) and one goroutine hands them to the
// channel, converted, until the subscription or ctx ends. The hub's bounds apply
// unchanged (the queue holds awareness.SubscriberBuffer live values); a drop ends the
// stream as StreamErrors ends a dropped stream.
func relayFeed[T any](ctx context.Context, p path[T, gqlmodel.FeedItem], subscribe func(awareness.Sink[T]) (func(), error)) (<-chan gqlmodel.FeedItem, error) {
	q := ssepush.New("", awareness.SubscriberBuffer)
	out := make(chan gqlmodel.FeedItem)
	q.Adopt(func(v any) string {
		var item gqlmodel.FeedItem
		switch x := v.(type) {
		case *T:
			item = p.conv(x)
		case awareness.FeedMark:
			item = p.mark(x)
		}
		select {
		case out <- item:
		case <-ctx.Done():
		}
		return ""
	})
	unsubscribe, err := subscribe(awareness.Sink[T]{
		Push: func(v *T, replay bool) bool { return q.Push(v, replay) },
		Mark: func(m awareness.FeedMark) bool { return q.Push(m, false) },
		End:  q.End,
	})
	if err != nil {
		return nil, err
	}
	q.Start(unsubscribe)
	var reason error
	onStreamEnd(ctx, func() error { return reason })
	go func() {
		defer close(out)
		defer q.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-q.Wake():
			}
			for {
				_, ok, ended, why := q.Next()
				if ctx.Err() != nil {
					return
				}
				if !ok {
					if ended {
						reason = why // read by the end function once out is closed
						return
					}
					break
				}
			}
		}
	}()
	return out, nil
}

// pushFeed serves a feed on the WebSocket push path when it can (see pushNotices).
func pushFeed[T any](ctx context.Context, write func(FrameWriter, context.Context) (func([]byte, *T) ([]byte, gqlerror.List), MarkWriter, bool),
	subscribe func(awareness.Sink[T]) (func(), error)) (_ <-chan gqlmodel.FeedItem, ok bool, _ error) {
	op := pushOpOf(ctx)
	if op == nil {
		return nil, false, nil
	}
	items, marks, ok := write(op.frames, ctx)
	if !ok {
		return nil, false, nil
	}
	present := op.present
	enc := func(b []byte, v any) []byte {
		if m, ok := v.(awareness.FeedMark); ok {
			b = append(b, `{"data":`...)
			var seq *int64
			if m.Sequenced {
				seq = &m.Sequence
			}
			b = marks(b, m.Kind == awareness.FeedSynced, seq, m.Replayed, m.At)
			return append(b, '}')
		}
		return appendResponse(b, v.(*T), items, present)
	}
	st, ok := wsgorilla.Adopt(ctx, op.id, enc, awareness.SubscriberBuffer)
	if !ok {
		return nil, false, nil
	}
	unsubscribe, err := subscribe(awareness.Sink[T]{
		Push: func(v *T, replay bool) bool { return st.Push(v, replay) },
		Mark: func(m awareness.FeedMark) bool { return st.Push(m, false) },
		End:  pushEnd(st, present),
	})
	if err != nil {
		st.Abandon()
		return nil, true, err
	}
	st.Start(unsubscribe)
	return closedFeed, true, nil
}

// closedFeed is what a feed's resolver returns on the push path (see closedNotices).
var closedFeed = func() <-chan gqlmodel.FeedItem { c := make(chan gqlmodel.FeedItem); close(c); return c }()

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
		id: sseEventID(oneSession), marks: true, mark: markItem}
}

func noticeFeedPath() path[awareness.Notice, gqlmodel.FeedItem] {
	return path[awareness.Notice, gqlmodel.FeedItem]{conv: func(n *awareness.Notice) gqlmodel.FeedItem { return *n },
		id: sseNoticeID, marks: true, mark: markItem}
}

// serveFeed serves a feed subscription on whichever path takes it.
func serveFeed[T any](ctx context.Context, p path[T, gqlmodel.FeedItem],
	write func(FrameWriter, context.Context) (func([]byte, *T) ([]byte, gqlerror.List), MarkWriter, bool),
	subscribe func(awareness.Sink[T]) (func(), error)) (<-chan gqlmodel.FeedItem, error) {
	if ch, ok, err := serveSSE(ctx, p, subscribe); ok {
		return ch, err
	}
	if ch, ok, err := pushFeed(ctx, write, subscribe); ok {
		return ch, err
	}
	return relayFeed(ctx, p, subscribe)
}

// MarkWriter appends the data of one feed marker as gqlgen writes it ({"alias":{…}}):
// synced tells FeedSynced from FeedBookmark; sequence is null when nil.
type MarkWriter func(b []byte, synced bool, sequence *int64, replayed int, at time.Time) []byte
