package resolvers

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/wsgorilla"
)

// The push path of the WebSocket subscriptions. gqlgen serves a subscription with a
// goroutine per operation that waits on the resolver's channel for as long as the
// subscription lasts: an idle subscriber costs its stack. On the push path the
// operation still runs through gqlgen (parsing, validation, authentication, the cost,
// depth and rate limits, this resolver), but the resolver subscribes with the
// connection's queue as the hub's sink (awareness.Sink, wsgorilla.Adopt) and returns
// a closed channel, so gqlgen's part of the operation ends at once. From then on the
// hub pushes each notice or event to the connection, whose writer (a goroutine only
// while it has frames to write) writes the frame, the pending notices first (NTC-5);
// nothing waits for an idle subscriber. The frames are gqlgen's, byte for byte: the
// items are written by graph's one-pass writer (FrameWriter), wrapped as gqlgen wraps
// a subscription response. The slow-subscriber policy is the hub's: a connection
// whose queue holds awareness.SubscriberBuffer live frames of a subscription is
// dropped with 1013 (wsgorilla.DropSlow); the hub's close ends the stream with an
// `error` frame, as before; the client's complete and the connection's end
// unsubscribe. A selection the writer cannot write, and every other transport, take
// gqlgen's own path.

// FrameWriter writes the items of the staleNotices and stateEvents subscriptions for
// the push path: package graph's one-pass writer.
type FrameWriter interface {
	// Notices returns, for the staleNotices field of ctx (a resolver's context), a
	// function that appends one item as gqlgen writes the subscription's data
	// ({"alias":{…}}) and returns the errors gqlgen would report with it; false when
	// it cannot write the field's selection.
	Notices(ctx context.Context) (func(b []byte, n *awareness.Notice) ([]byte, gqlerror.List), bool)
	// Events is Notices for stateEvents.
	Events(ctx context.Context) (func(b []byte, e *awareness.Event) ([]byte, gqlerror.List), bool)
	// NoticeFeed is Notices for staleNoticeFeed, with the writer of the feed's
	// markers.
	NoticeFeed(ctx context.Context) (func(b []byte, n *awareness.Notice) ([]byte, gqlerror.List), MarkWriter, bool)
	// EventFeed is NoticeFeed for stateEventFeed.
	EventFeed(ctx context.Context) (func(b []byte, e *awareness.Event) ([]byte, gqlerror.List), MarkWriter, bool)
}

// pushOp is what StreamErrors gives a WebSocket subscription's resolver.
type pushOp struct {
	id      string // the operation's WebSocket id
	frames  FrameWriter
	present graphql.ErrorPresenterFunc
}

// Closed channels returned by the resolvers of push subscriptions: gqlgen's stream
// ends at the first read.
var (
	closedNotices = func() <-chan awareness.Notice { c := make(chan awareness.Notice); close(c); return c }()
	closedEvents  = func() <-chan awareness.Event { c := make(chan awareness.Event); close(c); return c }()
)

// pushNotices serves staleNotices on the push path when it can; ok false means the
// caller serves it on gqlgen's.
func pushNotices(ctx context.Context, svc *awareness.Service, watcher *string, includeClosed bool) (_ <-chan awareness.Notice, ok bool, _ error) {
	op := pushOpOf(ctx)
	if op == nil {
		return nil, false, nil
	}
	write, ok := op.frames.Notices(ctx)
	if !ok {
		return nil, false, nil
	}
	return push(ctx, op, write, closedNotices, func(sink awareness.Sink[awareness.Notice]) (func(), error) {
		return svc.SubscribeNoticesTo(ctx, watcher, includeClosed, sink)
	})
}

// pushEvents is pushNotices for stateEvents.
func pushEvents(ctx context.Context, svc *awareness.Service, key, agentID *string, after *int64) (_ <-chan awareness.Event, ok bool, _ error) {
	op := pushOpOf(ctx)
	if op == nil {
		return nil, false, nil
	}
	write, ok := op.frames.Events(ctx)
	if !ok {
		return nil, false, nil
	}
	return push(ctx, op, write, closedEvents, func(sink awareness.Sink[awareness.Event]) (func(), error) {
		return svc.SubscribeEventFeed(ctx, key, agentID, awareness.FeedOptions{After: after}, sink)
	})
}

func pushOpOf(ctx context.Context) *pushOp {
	if ends, ok := ctx.Value(streamEndsKey{}).(*streamEnds); ok {
		return ends.push
	}
	return nil
}

func push[T any](ctx context.Context, op *pushOp, write func([]byte, *T) ([]byte, gqlerror.List), closed <-chan T,
	subscribe func(awareness.Sink[T]) (func(), error)) (<-chan T, bool, error) {
	present := op.present
	enc := func(b []byte, v any) []byte { return appendResponse(b, v.(*T), write, present) }
	st, ok := wsgorilla.Adopt(ctx, op.id, enc, awareness.SubscriberBuffer)
	if !ok {
		return nil, false, nil
	}
	unsubscribe, err := subscribe(awareness.Sink[T]{
		Push: func(v *T, replay bool) bool { return st.Push(v, replay) },
		End:  pushEnd(st, present),
	})
	if err != nil {
		st.Abandon()
		return nil, true, err
	}
	st.Start(unsubscribe)
	return closed, true, nil
}

// pushEnd is the End of a push stream's sink.
func pushEnd(st *wsgorilla.Stream, present graphql.ErrorPresenterFunc) func(error) {
	return func(err error) {
		switch {
		case err == nil, awareness.IsSlowSubscriber(err):
			// Unsubscribed (the client's complete, the connection's end), or dropped
			// (slow, or a feed's gap): the drop function closes the connection with 1013.
			st.End()
		default:
			st.Fail(errorsPayload(gqlerror.List{present(context.Background(), err)}))
		}
	}
}

// appendResponse appends the payload of one subscription response as gqlgen's
// WebSocket transport writes it (json.Marshal of a graphql.Response: errors first
// when there are any, then data).
func appendResponse[T any](b []byte, v *T, write func([]byte, *T) ([]byte, gqlerror.List), present graphql.ErrorPresenterFunc) []byte {
	start := len(b)
	b = append(b, `{"data":`...)
	b, errs := write(b, v)
	b = htmlEscape(b, start+len(`{"data":`))
	if len(errs) == 0 {
		return append(b, '}')
	}
	data := append([]byte(nil), b[start+len(`{"data":`):]...)
	presented := make(gqlerror.List, len(errs))
	for i, e := range errs {
		presented[i] = present(context.Background(), e)
	}
	b = append(b[:start], `{"errors":`...)
	b = append(b, errorsPayload(presented)...)
	b = append(b, `,"data":`...)
	b = append(b, data...)
	return append(b, '}')
}

// htmlEscape escapes b[from:] as json.Marshal escapes the raw data of a response
// (json.HTMLEscape: <, >, &, U+2028, U+2029), which gqlgen's transport marshals; it
// copies nothing when there is nothing to escape, the usual case.
func htmlEscape(b []byte, from int) []byte {
	if !bytes.ContainsAny(b[from:], "<>&\u2028\u2029") {
		return b
	}
	var esc bytes.Buffer
	json.HTMLEscape(&esc, b[from:])
	return append(b[:from], esc.Bytes()...)
}

// errorsPayload is the JSON of a list of GraphQL errors.
func errorsPayload(errs gqlerror.List) []byte {
	b, err := json.Marshal(errs)
	if err != nil {
		return []byte(`[{"message":"internal error","extensions":{"code":"INTERNAL"}}]`)
	}
	return b
}
