package resolvers

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/substream"
)

// StreamTransports is a gqlgen extension that refuses subscriptions over a transport
// that does not stream (plain HTTP: GET, POST), which would hold the request open for
// one event: subscriptions need the WebSocket or SSE transport, which put the
// operation's substream.Op in its context.
type StreamTransports struct{}

var (
	_ graphql.HandlerExtension     = StreamTransports{}
	_ graphql.OperationInterceptor = StreamTransports{}
)

// ExtensionName implements graphql.HandlerExtension.
func (StreamTransports) ExtensionName() string { return "StreamTransports" }

// Validate implements graphql.HandlerExtension.
func (StreamTransports) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptOperation implements graphql.OperationInterceptor.
func (StreamTransports) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	if oc.Operation == nil || oc.Operation.Operation != ast.Subscription || substream.From(ctx) != nil {
		return next(ctx)
	}
	err := &gqlerror.Error{
		Message: "subscriptions are served over WebSocket (graphql-transport-ws or graphql-ws) or Server-Sent Events " +
			"(POST with Accept: text/event-stream) at the same endpoint",
		Extensions: map[string]any{"code": awareness.EINVALID},
	}
	return graphql.OneShot(&graphql.Response{Errors: gqlerror.List{err}})
}
