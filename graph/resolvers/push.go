package resolvers

import (
	"context"
	"encoding/json"

	"github.com/vektah/gqlparser/v2/gqlerror"
)

// The push path of the WebSocket subscriptions. gqlgen serves a subscription with a
// goroutine per operation that waits on the resolver's channel for as long as the
// subscription lasts: an idle subscriber costs its stack. On the push path the
// operation still runs through gqlgen (parsing, validation, authentication, the cost,
// depth and rate limits, this resolver), but the resolver's subscription value
// carries a writer of its frames (substream.Subscription.Frame, from FrameWriter),
// the transport opens it with the connection's queue as the hub's sink and the
// resolver returns a closed channel, so gqlgen's part of the operation ends at once.
// From then on the hub pushes each notice or event to the connection, whose writer (a
// goroutine only while it has frames to write) writes the frame, the pending notices
// first (NTC-5); nothing waits for an idle subscriber. The frames are gqlgen's, byte
// for byte: package graph's one-pass writer writes them (FrameWriter). A selection the
// writer cannot write takes gqlgen's own path (relay, feeds.go).

// FrameWriter writes the frames of the subscription items for the push path: package
// graph's one-pass writer. Each method returns, for the subscription field of ctx (a
// resolver's context), the Frame of its subscription value (substream.Subscription):
// it appends the payload of one value's frame as gqlgen writes a subscription
// response ({"data":{"alias":{…}}}, errors first when there are any). false means
// it cannot write the field's selection.
type FrameWriter interface {
	// Notices is for staleNotices, whose values are *awareness.Notice.
	Notices(ctx context.Context) (func(b []byte, v any) []byte, bool)
	// Events is for stateEvents, whose values are *awareness.Event.
	Events(ctx context.Context) (func(b []byte, v any) []byte, bool)
	// NoticeFeed is for staleNoticeFeed, whose values are *awareness.Notice and
	// awareness.FeedMark.
	NoticeFeed(ctx context.Context) (func(b []byte, v any) []byte, bool)
	// EventFeed is NoticeFeed for stateEventFeed.
	EventFeed(ctx context.Context) (func(b []byte, v any) []byte, bool)
}

// frame returns the Frame of the subscription field of ctx that method of r.Frames
// writes, nil without one.
func (r *Resolver) frame(ctx context.Context, method func(FrameWriter, context.Context) (func([]byte, any) []byte, bool)) func([]byte, any) []byte {
	if r.Frames == nil {
		return nil
	}
	if f, ok := method(r.Frames, ctx); ok {
		return f
	}
	return nil
}

// ErrorsPayload is the JSON of a list of GraphQL errors, the payload of an `error`
// frame.
func ErrorsPayload(errs gqlerror.List) []byte {
	b, err := json.Marshal(errs)
	if err != nil {
		return []byte(`[{"message":"internal error","extensions":{"code":"INTERNAL"}}]`)
	}
	return b
}
