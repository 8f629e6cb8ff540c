package graph

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	lru "github.com/hashicorp/golang-lru/v2"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
	"golang.org/x/time/rate"

	"github.com/awareness/awareness/internal/awareness"
)

// Defaults of the rate limit of mutations and subscriptions (serve --rate-limit,
// --rate-burst).
const (
	// DefaultRateLimit is the sustained rate, in operations per second, of one token
	// (or, unauthenticated, of one connection).
	DefaultRateLimit = 100
	// DefaultRateBurst is how many operations may come at once before the rate
	// applies.
	DefaultRateBurst = 200
	// maxRateKeys bounds the limiters kept (least recently used evicted; an evicted
	// key starts again with a full burst).
	maxRateKeys = 10_000
)

// RateLimit is a gqlgen extension that limits the mutations and subscriptions of one
// caller (ERR-4), with a token bucket per key (golang.org/x/time/rate): the token's
// principal when the request is authenticated, otherwise the connection (the remote
// address of the HTTP request or of the WebSocket's upgrade, so one WebSocket is one
// key). Queries are not limited: their work is bounded by CostLimit. A refused
// operation gets RATE_LIMITED with the time to wait, before anything runs; on a
// WebSocket that is an error message for the operation, and the connection stays
// (graphql-transport-ws closes with 4429 only for a second connection_init, which the
// transport does).
type RateLimit struct {
	limit rate.Limit
	burst int
	keys  *lru.Cache[string, *rate.Limiter]
}

var (
	_ graphql.HandlerExtension        = (*RateLimit)(nil)
	_ graphql.OperationContextMutator = (*RateLimit)(nil)
)

// NewRateLimit returns a limit of perSecond operations per second with bursts of
// burst; nil (no limit) when perSecond is 0.
func NewRateLimit(perSecond float64, burst int) *RateLimit {
	if perSecond <= 0 {
		return nil
	}
	keys, _ := lru.New[string, *rate.Limiter](maxRateKeys) // errors only for a size ≤ 0
	return &RateLimit{limit: rate.Limit(perSecond), burst: max(burst, 1), keys: keys}
}

// ExtensionName implements graphql.HandlerExtension.
func (*RateLimit) ExtensionName() string { return "RateLimit" }

// Validate implements graphql.HandlerExtension.
func (*RateLimit) Validate(graphql.ExecutableSchema) error { return nil }

// MutateOperationContext implements graphql.OperationContextMutator.
func (l *RateLimit) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil || oc.Operation.Operation == ast.Query {
		return nil
	}
	key := rateKey(ctx)
	lim, ok := l.keys.Get(key)
	if !ok {
		lim = rate.NewLimiter(l.limit, l.burst)
		if prev, ok, _ := l.keys.PeekOrAdd(key, lim); ok {
			lim = prev
		}
	}
	r := lim.Reserve()
	delay := r.Delay()
	if r.OK() && delay == 0 {
		return nil
	}
	r.Cancel()
	if !r.OK() || delay == rate.InfDuration {
		delay = time.Second
	}
	err := gqlerror.Errorf("too many mutations and subscriptions from this %s: at most %s per second, in bursts of %d; retry in %v",
		keyKind(key), formatRate(float64(l.limit)), l.burst, delay.Round(time.Millisecond))
	errcode.Set(err, awareness.ERATELIMITED)
	err.Extensions["retryAfterMs"] = int64(math.Ceil(float64(delay) / float64(time.Millisecond)))
	return err
}

func formatRate(r float64) string {
	if r == math.Trunc(r) {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%g", r)
}

// connKey carries the remote address of the request (of the upgrade, for a
// WebSocket): the rate-limit key of an unauthenticated caller.
type connKey struct{}

// withConnKey puts the request's remote address in its context for RateLimit.
func withConnKey(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), connKey{}, r.RemoteAddr)))
	})
}

func rateKey(ctx context.Context) string {
	if p, ok := awareness.PrincipalFrom(ctx); ok {
		return "token " + p.Role() + " " + p.Name
	}
	addr, _ := ctx.Value(connKey{}).(string)
	return "connection " + addr
}

func keyKind(key string) string {
	if key[0] == 't' {
		return "token"
	}
	return "connection"
}
