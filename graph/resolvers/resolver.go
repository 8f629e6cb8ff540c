// Package resolvers holds the thin GraphQL resolvers of the schema: each one decodes its
// arguments, makes one call to awareness.Service and maps the result. It also holds the
// one place that turns errors into GraphQL errors (ErrorPresenter, RecoverFunc) and the
// extension that reports why a subscription stream ended (StreamErrors).
package resolvers

import (
	"github.com/awareness/awareness/graph/generated"
	"github.com/awareness/awareness/internal/awareness"
)

// Resolver is the root resolver. It holds no state of its own.
type Resolver struct {
	Service *awareness.Service
}

// NewExecutableSchema returns the gqlgen executable schema over svc.
func NewExecutableSchema(svc *awareness.Service) generated.Config {
	return generated.Config{Resolvers: &Resolver{Service: svc}}
}
