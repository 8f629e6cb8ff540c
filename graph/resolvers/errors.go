package resolvers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
)

// internalMessage is the only message a client sees for an INTERNAL error (ERR-1).
const internalMessage = "internal error"

// ErrorPresenter is the one place that turns an error into a GraphQL error (ERR-1):
//
//   - an *awareness.Error keeps its caller-facing Message, and its Code goes to
//     extensions.code, its Details beside it; INTERNAL errors always read "internal
//     error", and the cause of INTERNAL and UNAVAILABLE errors is logged here, once;
//   - a *budget.Exceeded (a stream over the caller's cap) is BudgetError's;
//   - an error that already carries extensions.code (gqlgen's parse, validation,
//     complexity and persisted-query errors) is passed through unchanged;
//   - a bare gqlgen error outside any field (a request body gqlgen could not decode)
//     becomes INVALID_ARGUMENT with its message;
//   - anything else (a resolver's unexpected error, gqlgen's own complaint about a
//     resolver result) is INTERNAL: logged, and hidden behind "internal error".
func ErrorPresenter(log *slog.Logger) graphql.ErrorPresenterFunc {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, err error) *gqlerror.Error {
		return present(ctx, log, err)
	}
}

func present(ctx context.Context, log *slog.Logger, err error) *gqlerror.Error {
	if err == nil {
		return nil
	}
	out := &gqlerror.Error{Path: graphql.GetPath(ctx)}
	gqlErr, isGQL := errors.AsType[*gqlerror.Error](err)
	if isGQL {
		if gqlErr.Path != nil {
			out.Path = gqlErr.Path
		}
		out.Locations = gqlErr.Locations
		out.Rule = gqlErr.Rule
	}

	if be, ok := errors.AsType[*budget.Exceeded](err); ok {
		b := BudgetError(be)
		b.Path, b.Locations = out.Path, out.Locations
		return b
	}

	if errors.Is(err, awareness.ErrCheckOnly) {
		// The answer of a field whose checks passed in a check run (graph's
		// MutationChecks): discarded there, never sent, not worth a log line.
		out.Message = err.Error()
		return out
	}
	if ae, ok := errors.AsType[*awareness.Error](err); ok {
		out.Message = ae.Message
		out.Extensions = map[string]any{"code": ae.Code}
		for k, v := range ae.Details {
			if k != "code" {
				out.Extensions[k] = v
			}
		}
		switch ae.Code {
		case awareness.EINTERNAL:
			out.Message = internalMessage
			logCause(ctx, log, slog.LevelError, ae.Code, out, err)
		case awareness.EUNAVAILABLE:
			if ae.Err != nil {
				logCause(ctx, log, slog.LevelWarn, ae.Code, out, err)
			}
		}
		if out.Message == "" {
			out.Message = ae.Code
		}
		return out
	}

	if isGQL {
		if _, ok := gqlErr.Extensions["code"]; ok {
			return gqlErr
		}
		if gqlErr.Err == nil && len(gqlErr.Path) == 0 {
			out.Message = gqlErr.Message
			out.Extensions = map[string]any{"code": awareness.EINVALID}
			return out
		}
	}

	out.Message = internalMessage
	out.Extensions = map[string]any{"code": awareness.EINTERNAL}
	level := slog.LevelError
	if errors.Is(err, context.Canceled) {
		level = slog.LevelDebug // the client went away
	}
	logCause(ctx, log, level, awareness.EINTERNAL, out, err)
	return out
}

// BudgetError is the GraphQL error of a refusal of the caller's budget (ERR-4): its
// code (RATE_LIMITED, or COMPLEXITY_LIMIT_EXCEEDED when waiting cannot help) and,
// when there is something to wait for, extensions.retryAfterMs.
func BudgetError(e *budget.Exceeded) *gqlerror.Error {
	out := &gqlerror.Error{Message: e.Error(), Extensions: map[string]any{"code": e.Code()}}
	if ms := e.RetryAfterMs(); ms > 0 {
		out.Extensions["retryAfterMs"] = ms
	}
	return out
}

func logCause(ctx context.Context, log *slog.Logger, level slog.Level, code string, out *gqlerror.Error, err error) {
	attrs := []slog.Attr{slog.String("code", code), slog.Any("err", err)}
	if len(out.Path) > 0 {
		attrs = append(attrs, slog.String("path", out.Path.String()))
	}
	if graphql.HasOperationContext(ctx) {
		if oc := graphql.GetOperationContext(ctx); oc.OperationName != "" {
			attrs = append(attrs, slog.String("operation", oc.OperationName))
		}
	}
	log.LogAttrs(ctx, level, "graphql error", attrs...)
}

// RecoverFunc turns a resolver panic into an INTERNAL error. The panic value and the
// stack travel in the error's cause, which the ErrorPresenter logs once; the client
// only sees "internal error".
func RecoverFunc() graphql.RecoverFunc {
	return func(ctx context.Context, p any) error {
		return awareness.Internal(fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
	}
}
