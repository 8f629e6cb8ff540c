package resolvers

import (
	"context"
	"errors"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/edge"
	"github.com/awareness/awareness/internal/wsgorilla"
)

// StreamErrors is a gqlgen extension for subscriptions. The service's subscription
// channels close when the stream ends on its own (the subscriber fell behind, the
// service is shutting down) and a function then tells why. gqlgen only sees a closed
// channel, which it reports as a normal `complete`; StreamErrors turns the reason into
// an `error` frame (wsgorilla.AddStreamError on a WebSocket, gqlgen's
// transport.AddSubscriptionError elsewhere) without a goroutine per
// subscriber: the resolver registers the reason function with onStreamEnd, and the
// response interceptor calls it when the stream yields its last (nil) response.
//
// When the hub drops a subscription for falling behind (awareness.ErrSlowSubscriber),
// the stream's transport ends it so that a client with default options comes back on
// its own: a WebSocket connection is closed with 1013 (wsgorilla.DropSlow), an SSE
// stream ends without its `complete` event (WithStreamDrop); either way the client
// reconnects, subscribes again and gets every pending notice first (NTC-5). No `error`
// frame is sent then: clients treat it as the operation's end. StreamErrors puts the
// drop function into the operation's context (awareness.WithDropFunc), so that the hub
// runs it at the drop (closing a connection whose write is stuck at once instead of
// after the write timeout), and runs it again (it is idempotent) when the stream ends.
// Other ends (the hub closing) still send an `error` frame with the reason's code.
//
// It also refuses subscriptions over plain HTTP (GET/POST), which would hold the
// request open for one event: subscriptions need the WebSocket or SSE transport.
//
// With Frames set, it also serves the WebSocket subscriptions of staleNotices and
// stateEvents on the push path (push.go): gqlgen executes the operation as always,
// then the connection, not a goroutine of gqlgen's, writes the stream's frames.
type StreamErrors struct {
	Present graphql.ErrorPresenterFunc
	// Frames writes the subscription items of the push path; nil serves every
	// subscription through gqlgen's stream loop.
	Frames FrameWriter
}

var (
	_ graphql.HandlerExtension        = StreamErrors{}
	_ graphql.OperationContextMutator = StreamErrors{}
	_ graphql.OperationInterceptor    = StreamErrors{}
	_ graphql.ResponseInterceptor     = StreamErrors{}
)

// ExtensionName implements graphql.HandlerExtension.
func (StreamErrors) ExtensionName() string { return "StreamErrors" }

// Validate implements graphql.HandlerExtension.
func (StreamErrors) Validate(graphql.ExecutableSchema) error { return nil }

type streamEndsKey struct{}

// streamEnds collects the end-reason functions of one subscription operation.
type streamEnds struct {
	drop func() // ends the transport's stream after a slow-subscriber drop; nil when none
	mu   sync.Mutex
	fns  []func() error
	// push is set for a WebSocket subscription that may take the push path.
	push *pushOp
}

type streamDropKey struct{}

// WithStreamDrop marks ctx as the context of a streaming transport other than the
// WebSocket (SSE) whose stream drop ends: StreamErrors lets subscriptions run under
// it, and calls drop (which must not block, and may run more than once) when the hub
// drops one of them for falling behind.
func WithStreamDrop(ctx context.Context, drop func()) context.Context {
	return context.WithValue(ctx, streamDropKey{}, drop)
}

// onStreamEnd registers why a subscription's channel closed; end is called once the
// channel is closed and returns nil after a normal end (ctx done).
func onStreamEnd(ctx context.Context, end func() error) {
	if s, ok := ctx.Value(streamEndsKey{}).(*streamEnds); ok {
		s.mu.Lock()
		s.fns = append(s.fns, end)
		s.mu.Unlock()
	}
}

// wsOperationKey names the WebSocket operation id in the operation's Stats.
const wsOperationKey = "awareness.wsOperation"

// MutateOperationContext implements graphql.OperationContextMutator: it notes the
// WebSocket id of a subscription (wsgorilla.OperationID), for the push path.
func (s StreamErrors) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if s.Frames == nil || oc.Operation == nil || oc.Operation.Operation != ast.Subscription || edge.FromContext(ctx) != edge.WebSocket {
		return nil
	}
	if id, ok := wsgorilla.OperationID(ctx); ok {
		oc.Stats.SetExtension(wsOperationKey, id)
	}
	return nil
}

// InterceptOperation implements graphql.OperationInterceptor.
func (s StreamErrors) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	if oc.Operation == nil || oc.Operation.Operation != ast.Subscription {
		return next(ctx)
	}
	drop, _ := ctx.Value(streamDropKey{}).(func())
	websocket := edge.FromContext(ctx) == edge.WebSocket
	if websocket {
		drop = wsgorilla.DropSlow(ctx)
	} else if drop == nil {
		err := &gqlerror.Error{
			Message: "subscriptions are served over WebSocket (graphql-transport-ws or graphql-ws) or Server-Sent Events " +
				"(POST with Accept: text/event-stream) at the same endpoint",
			Extensions: map[string]any{"code": awareness.EINVALID},
		}
		return graphql.OneShot(&graphql.Response{Errors: gqlerror.List{err}})
	}
	ends := &streamEnds{drop: drop}
	if id, ok := oc.Stats.GetExtension(wsOperationKey).(string); ok && s.Frames != nil {
		ends.push = &pushOp{id: id, frames: s.Frames, present: s.Present}
	}
	ctx = context.WithValue(ctx, streamEndsKey{}, ends)
	if websocket {
		ctx = awareness.WithTransport(ctx, edge.WebSocket.String())
	} else {
		ctx = awareness.WithTransport(ctx, edge.SSE.String())
	}
	if drop != nil {
		ctx = awareness.WithDropFunc(ctx, drop)
	}
	return next(ctx)
}

// InterceptResponse implements graphql.ResponseInterceptor.
func (s StreamErrors) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	resp := next(ctx)
	if resp != nil {
		return resp
	}
	ends, ok := ctx.Value(streamEndsKey{}).(*streamEnds)
	if !ok || ctx.Err() != nil {
		// Not a subscription, or the client (or the server's shutdown) ended it.
		return nil
	}
	ends.mu.Lock()
	fns := ends.fns
	ends.fns = nil
	ends.mu.Unlock()
	for _, end := range fns {
		err := end()
		if errors.Is(err, awareness.ErrSlowSubscriber) && ends.drop != nil {
			ends.drop()
			continue
		}
		if err == nil {
			continue
		}
		if e := s.Present(ctx, err); !wsgorilla.AddStreamError(ctx, e) {
			transport.AddSubscriptionError(ctx, e)
		}
	}
	return nil
}
