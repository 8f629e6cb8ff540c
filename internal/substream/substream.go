// Package substream is the seam between a subscription's resolver and the transport
// that serves it, after etcd's watch stream: the resolver describes the subscription
// as a value (Subscription: how to open it, how to write or deliver its items), the
// transport of the operation (Op: wsgorilla for WebSocket, ssepush for SSE) takes the
// value and owns it from then on: it opens it with its own queue as the Sink, holds
// its close (the unsubscribe function), receives its replay, its live items and its
// end (End), and turns them into frames. The dependency points transport → substream
// ← resolver; neither side imports the other.
//
// The one context value on the path is the operation's Op, which the transport puts
// in the context it runs the operation under (With), for the resolver to hand its
// Subscription to (From). It imports no transport and no domain package.
package substream

import "context"

// Subscription is one subscription as a resolver describes it to the transport of
// its operation.
type Subscription struct {
	// Open subscribes with sink: first the replay (durable state, replay true), then
	// the live items, then one End. It returns the subscription's close, which ends it
	// (sink.End then gets a zero End), or why it could not subscribe. It runs on the
	// resolver's goroutine, inside Op.Serve.
	Open func(sink Sink) (unsubscribe func(), err error)
	// Limit is how many live items may wait in the transport's queue: a Push beyond it
	// returns false and the subscription is dropped as slow.
	Limit int
	// Frame, when set, appends the payload of the frame of item v (a GraphQL response,
	// {"data":{…}}), as gqlgen would write it: a transport that writes frames itself
	// (Pushed) uses it. nil when the resolver cannot write the operation's selection.
	Frame func(b []byte, v any) []byte
	// Deliver hands item v to the channel the resolver returned to gqlgen (which has
	// room for it) and returns its event id ("" for none): a transport that asks gqlgen
	// for each item's response (Delivered) uses it.
	Deliver func(v any) (id string)
}

// Sink is where a transport receives the items of a Subscription it opened.
type Sink struct {
	// Push queues one item and must not block; false means Limit live items wait
	// already (replay items are always taken).
	Push func(v any, replay bool) bool
	// End is told once why the subscription ended; it must not block.
	End func(End)
}

// End is why a subscription ended, in the transport's terms. The zero End is a
// normal end: the client's complete, the connection's end.
type End struct {
	// Dropped: the subscriber fell behind (or its feed found a gap). The transport
	// ends the stream so that the client reconnects and resumes from durable state
	// (a WebSocket closes with 1013, an SSE stream ends without `complete`); no error
	// frame is sent.
	Dropped bool
	// Errors, when set, is the JSON array of GraphQL errors of the `error` frame that
	// ends the operation (the hub closed).
	Errors []byte
}

// Mode is how a transport serves a Subscription (Op.Serve).
type Mode int

const (
	// NotServed: the transport does not take the subscription; the resolver serves it
	// on gqlgen's channel (Relay).
	NotServed Mode = iota
	// Pushed: the transport writes the frames itself (Subscription.Frame); the
	// resolver returns a closed channel, so gqlgen's part of the operation ends.
	Pushed
	// Delivered: the transport hands each item to the resolver's channel
	// (Subscription.Deliver) and asks gqlgen for its response.
	Delivered
)

// Op is a transport's side of one operation that may be a subscription.
type Op interface {
	// Serve takes sub: the transport opens it (sub.Open, on the caller's goroutine)
	// and owns it from then on. err is Open's; with NotServed nothing was opened.
	Serve(sub *Subscription) (Mode, error)
	// Ended tells the transport why a subscription the resolver relays on gqlgen's
	// channel (after NotServed) ended, before the channel closes: a drop ends the
	// stream at once; errors end it with an `error` frame in place of `complete`.
	// It must not block.
	Ended(End)
	// LastEventID is the id of the last item the client received on the stream it
	// resumes (SSE's Last-Event-ID), "" when none.
	LastEventID() string
}

type opKey struct{}

// With returns ctx carrying op: the transport's part, for the context it runs the
// operation under.
func With(ctx context.Context, op Op) context.Context {
	return context.WithValue(ctx, opKey{}, op)
}

// From returns the Op of ctx's operation, nil outside a transport that serves
// subscriptions.
func From(ctx context.Context) Op {
	op, _ := ctx.Value(opKey{}).(Op)
	return op
}
