// Package resolvers holds the thin GraphQL resolvers of the schema: each one decodes its
// arguments, makes one call to awareness.Service and maps the result. It also holds the
// one place that turns errors into GraphQL errors (ErrorPresenter, RecoverFunc), the
// subscription values its subscription fields hand their transport (feeds.go, push.go)
// and the extension that refuses subscriptions over plain HTTP (StreamTransports).
package resolvers

import (
	"github.com/99designs/gqlgen/graphql"

	"github.com/awareness/awareness/graph/generated"
	"github.com/awareness/awareness/internal/awareness"
)

// Resolver is the root resolver. It holds no state of its own.
type Resolver struct {
	Service *awareness.Service
	// Frames writes the frames of the subscriptions a transport writes itself (the
	// WebSocket push path); nil serves every subscription through gqlgen's execution.
	Frames FrameWriter
	// Present presents the errors of subscription frames and ends; nil is
	// ErrorPresenter with no logger.
	Present graphql.ErrorPresenterFunc
}

// NewExecutableSchema returns the gqlgen executable schema over svc, without Frames.
func NewExecutableSchema(svc *awareness.Service) generated.Config {
	return generated.Config{Resolvers: &Resolver{Service: svc}}
}

// presenter is r.Present or its default.
func (r *Resolver) presenter() graphql.ErrorPresenterFunc {
	if r.Present != nil {
		return r.Present
	}
	return ErrorPresenter(nil)
}
