package graph

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/awareness/awareness/internal/awareness"
)

// MutationChecks keeps a mutation answer from hiding a commit. The contract's mutation
// payloads are non-null, so a field that fails nulls the whole data of its request
// (GraphQL's null propagation) even when the fields before it committed. A request
// with several mutation fields is therefore:
//
//   - checked as a whole before its first field writes: every field's resolver runs
//     once under awareness.WithCheckOnly, where each Service write runs its input
//     checks and authorization (the code that guards it when it writes) and returns
//     awareness.ErrCheckOnly instead of writing. When one is refused, the whole
//     request is refused with each refused field's error (its path is the field's
//     response key), data null, nothing written, and extensions.committed empty;
//   - otherwise run for real, field after field as always. When a field still fails
//     while executing (the database became unavailable, a session that turned out
//     not registered), the answer carries extensions.committed: the response keys of
//     the fields that did run and commit, in document order, so a client can tell
//     what was written although data is null.
//
// A request with one mutation field needs neither: its field checks before it writes,
// and it either commits or answers an error. It is used last, so that the checks run
// inside every other extension (limits, rate limit, tracing) once.
type MutationChecks struct{}

var (
	_ graphql.HandlerExtension     = MutationChecks{}
	_ graphql.OperationInterceptor = MutationChecks{}
	_ graphql.FieldInterceptor     = MutationChecks{}
)

// CommittedExtension is the response extension that lists the response keys of the
// mutation fields that committed, in a failed request with several mutation fields.
const CommittedExtension = "committed"

// ExtensionName implements graphql.HandlerExtension.
func (MutationChecks) ExtensionName() string { return "MutationChecks" }

// Validate implements graphql.HandlerExtension.
func (MutationChecks) Validate(graphql.ExecutableSchema) error { return nil }

// fieldLog records what a request's root mutation fields did, under the request's
// context (fieldLogKey).
type fieldLog struct {
	mu sync.Mutex
	// refused are the response keys of the fields whose check refused them.
	refused []string
	// committed are the response keys of the fields that ran without an error.
	committed []string
}

type fieldLogKey struct{}

// InterceptOperation implements graphql.OperationInterceptor.
func (MutationChecks) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	oc := graphql.GetOperationContext(ctx)
	if oc.Operation == nil || oc.Operation.Operation != ast.Mutation || rootFields(oc) < 2 {
		return next(ctx)
	}
	checks := &fieldLog{}
	cctx := context.WithValue(awareness.WithCheckOnly(ctx), fieldLogKey{}, checks)
	checked := next(cctx)(cctx)
	if len(checks.refused) > 0 {
		resp := &graphql.Response{Data: json.RawMessage("null"), Extensions: map[string]any{CommittedExtension: []string{}}}
		if checked != nil {
			for _, e := range checked.Errors {
				if len(e.Path) > 0 && slices.Contains(checks.refused, pathKey(e.Path)) {
					resp.Errors = append(resp.Errors, e)
				}
			}
		}
		return graphql.OneShot(resp)
	}
	run := &fieldLog{}
	rctx := context.WithValue(ctx, fieldLogKey{}, run)
	responses := next(rctx)
	return func(ctx context.Context) *graphql.Response {
		resp := responses(context.WithValue(ctx, fieldLogKey{}, run))
		if resp == nil || len(resp.Errors) == 0 {
			return resp
		}
		if resp.Extensions == nil {
			resp.Extensions = map[string]any{}
		}
		run.mu.Lock()
		resp.Extensions[CommittedExtension] = append([]string{}, run.committed...)
		run.mu.Unlock()
		return resp
	}
}

// InterceptField implements graphql.FieldInterceptor: it records what each root
// mutation field did, in a request InterceptOperation watches.
func (MutationChecks) InterceptField(ctx context.Context, next graphql.Resolver) (any, error) {
	fc := graphql.GetFieldContext(ctx)
	log, ok := ctx.Value(fieldLogKey{}).(*fieldLog)
	if !ok || fc == nil || fc.Object != "Mutation" || !fc.IsResolver {
		return next(ctx)
	}
	res, err := next(ctx)
	log.mu.Lock()
	defer log.mu.Unlock()
	switch {
	case awareness.CheckOnly(ctx):
		if err != nil && !errors.Is(err, awareness.ErrCheckOnly) {
			log.refused = append(log.refused, fc.Field.Alias)
		}
	case err == nil:
		log.committed = append(log.committed, fc.Field.Alias)
	}
	return res, err
}

// rootFields counts the operation's root fields that run a resolver (after @skip and
// @include; __typename runs none).
func rootFields(oc *graphql.OperationContext) int {
	n := 0
	for _, f := range graphql.CollectFields(oc, oc.Operation.SelectionSet, []string{"Mutation"}) {
		if f.Name != "__typename" {
			n++
		}
	}
	return n
}

// pathKey is the response key a root field's error path starts with.
func pathKey(p ast.Path) string {
	if k, ok := p[0].(ast.PathName); ok {
		return string(k)
	}
	return ""
}
