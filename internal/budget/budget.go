// Package budget is the work budget of each caller of the service (ERR-4): what one
// principal, a bearer token's role and name or without authentication one remote
// address, may spend over time, whatever transport it comes through. A caller has
//
//   - a bucket of query points, the priced work of its operations, restored at
//     Limits.PointsPerSecond up to Limits.PointsBurst, as GitHub's and Shopify's
//     GraphQL APIs do; graph/cost.go prices a GraphQL operation, and the MCP server
//     prices its tool calls the same way;
//   - a bucket of writes, restored at Limits.WritesPerSecond up to Limits.WritesBurst:
//     events appended, a batch counting by its inputs, other mutation fields, and
//     subscriptions started;
//   - at most Limits.MaxStreams streams open at once: SSE streams, WebSocket
//     subscriptions, MCP resource subscriptions.
//
// Charge takes a request's Cost from both buckets or refuses with *Exceeded, which
// says when to retry; OpenStream takes a stream slot or refuses with *Exceeded. A
// refused charge takes nothing. The buckets are golang.org/x/time/rate token buckets.
// The callers kept are bounded, the least recently used forgotten, so a forgotten
// caller starts again with full buckets; the open streams are not, since each is
// released by its owner.
package budget

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"

	"github.com/awareness/awareness/internal/awareness"
)

// Kind is a bucket of a caller.
type Kind uint8

// The buckets.
const (
	// Points is the query work of operations, in cost points.
	Points Kind = iota
	// Writes counts events appended, other writes and subscriptions started.
	Writes
)

func (k Kind) String() string {
	if k == Writes {
		return "writes"
	}
	return "query points"
}

// Defaults of Limits: serve --query-rate, --query-burst, --rate-limit, --rate-burst
// and --max-streams.
const (
	// DefaultPointsPerSecond restores a caller's query points. A point is about a
	// microsecond of the service's CPU, see graph/cost.go: a caller spends at most
	// about 5% of one core on queries.
	DefaultPointsPerSecond = 50_000
	// DefaultPointsBurst is the most query points a caller holds: five of the most
	// expensive documents one request may send, graph.CostBudget.
	DefaultPointsBurst = 100_000
	// DefaultWritesPerSecond restores a caller's writes.
	DefaultWritesPerSecond = 1_000
	// DefaultWritesBurst is the most writes a caller holds: a gateway replays 10,000
	// spooled events, 50 recordEvents of 200, without waiting for the rate.
	DefaultWritesBurst = 10_000
	// DefaultMaxStreams bounds the streams one caller holds open at once: two
	// WebSockets full to their operations cap, wsgorilla.MaxSubscriptionsPerConn.
	DefaultMaxStreams = 200
	// StreamRetry is the retry hint of a stream refused at MaxStreams.
	StreamRetry = time.Second
	// maxCallers bounds the callers whose buckets are kept.
	maxCallers = 10_000
)

// Limits are the budget of every caller. A rate of 0 leaves that bucket unlimited,
// MaxStreams 0 leaves streams uncapped.
type Limits struct {
	PointsPerSecond float64
	PointsBurst     int
	WritesPerSecond float64
	WritesBurst     int
	MaxStreams      int
}

// DefaultLimits returns the defaults above.
func DefaultLimits() Limits {
	return Limits{
		PointsPerSecond: DefaultPointsPerSecond, PointsBurst: DefaultPointsBurst,
		WritesPerSecond: DefaultWritesPerSecond, WritesBurst: DefaultWritesBurst,
		MaxStreams: DefaultMaxStreams,
	}
}

// Validate reports a limit that cannot work: a negative or non-finite rate, a burst
// below 1 for a limited bucket, negative streams.
func (l Limits) Validate() error {
	for _, b := range []struct {
		rate  float64
		burst int
		kind  Kind
	}{{l.PointsPerSecond, l.PointsBurst, Points}, {l.WritesPerSecond, l.WritesBurst, Writes}} {
		if b.rate < 0 || math.IsNaN(b.rate) || math.IsInf(b.rate, 0) {
			return fmt.Errorf("the rate of %s must be a number, 0 or more (0: no limit), got %v", b.kind, b.rate)
		}
		if b.rate > 0 && b.burst < 1 {
			return fmt.Errorf("the burst of %s must be at least 1 when its rate is set, got %d", b.kind, b.burst)
		}
	}
	if l.MaxStreams < 0 {
		return fmt.Errorf("the streams per caller must be 0 (no cap) or more, got %d", l.MaxStreams)
	}
	return nil
}

// Caller names whose budget a request draws from: "token <role> <name>" for an
// authenticated principal, "address <ip>" otherwise; see CallerOf.
type Caller string

// Budget holds the buckets and open streams of every caller. A nil *Budget allows
// everything. It is safe for concurrent use.
type Budget struct {
	limits Limits
	now    func() time.Time
	keys   *lru.Cache[Caller, *account]

	mu      sync.Mutex
	streams map[Caller]int
}

type account struct {
	points, writes *rate.Limiter // nil: unlimited
}

// New returns the budget of limits, which Validate accepts.
func New(limits Limits) *Budget { return NewWithClock(limits, time.Now) }

// NewWithClock is New with the clock the buckets refill by.
func NewWithClock(limits Limits, now func() time.Time) *Budget {
	keys, _ := lru.New[Caller, *account](maxCallers) // errors only for a size ≤ 0
	return &Budget{limits: limits, now: now, keys: keys, streams: map[Caller]int{}}
}

// Limits returns the budget's limits.
func (b *Budget) Limits() Limits {
	if b == nil {
		return Limits{}
	}
	return b.limits
}

func (b *Budget) account(c Caller) *account {
	if a, ok := b.keys.Get(c); ok {
		return a
	}
	a := &account{}
	if b.limits.PointsPerSecond > 0 {
		a.points = rate.NewLimiter(rate.Limit(b.limits.PointsPerSecond), b.limits.PointsBurst)
	}
	if b.limits.WritesPerSecond > 0 {
		a.writes = rate.NewLimiter(rate.Limit(b.limits.WritesPerSecond), b.limits.WritesBurst)
	}
	if prev, ok, _ := b.keys.PeekOrAdd(c, a); ok {
		return prev
	}
	return a
}

// Cost is what one request takes from its caller's buckets.
type Cost struct {
	Points int
	Writes int
}

// Charge takes cost from caller c's buckets, both or neither: it returns an
// *Exceeded for the bucket that cannot give its part now, with RetryAfter when it
// will hold it, the longer wait when both are short, or with Never when the part is
// more than the bucket's burst. Zero or negative parts charge nothing.
func (b *Budget) Charge(c Caller, cost Cost) error {
	if b == nil || (cost.Points <= 0 && cost.Writes <= 0) {
		return nil
	}
	a := b.account(c)
	now := b.now()
	parts := [...]struct {
		lim       *rate.Limiter
		kind      Kind
		n         int
		perSecond float64
		burst     int
	}{
		{a.points, Points, cost.Points, b.limits.PointsPerSecond, b.limits.PointsBurst},
		{a.writes, Writes, cost.Writes, b.limits.WritesPerSecond, b.limits.WritesBurst},
	}
	var (
		taken   []*rate.Reservation
		refusal *Exceeded
	)
	for _, p := range parts {
		if p.lim == nil || p.n <= 0 {
			continue
		}
		e := &Exceeded{Caller: c, Kind: p.kind, N: p.n, PerSecond: p.perSecond, Burst: p.burst}
		if p.n > p.burst {
			e.Never = true
			refusal = e
			break
		}
		r := p.lim.ReserveN(now, p.n)
		taken = append(taken, r)
		if delay := r.DelayFrom(now); delay > 0 && (refusal == nil || delay > refusal.RetryAfter) {
			e.RetryAfter = max(delay, time.Millisecond)
			refusal = e
		}
	}
	if refusal == nil {
		return nil
	}
	for _, r := range taken {
		r.CancelAt(now)
	}
	return refusal
}

// Available returns how much caller c's bucket of kind k holds now; +Inf when it is
// unlimited.
func (b *Budget) Available(c Caller, k Kind) float64 {
	if b == nil {
		return math.Inf(1)
	}
	a := b.account(c)
	lim := a.points
	if k == Writes {
		lim = a.writes
	}
	if lim == nil {
		return math.Inf(1)
	}
	return lim.TokensAt(b.now())
}

// OpenStream takes one of caller c's stream slots, or returns an *Exceeded with
// Streams set, whose RetryAfter, StreamRetry, is only a hint: a slot frees when one
// of the caller's streams ends. release frees the slot; calling it more than once
// frees it once.
func (b *Budget) OpenStream(c Caller) (release func(), err error) {
	if b == nil || b.limits.MaxStreams <= 0 {
		return func() {}, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.streams[c] >= b.limits.MaxStreams {
		return nil, &Exceeded{Caller: c, Streams: true, Burst: b.limits.MaxStreams, RetryAfter: StreamRetry}
	}
	b.streams[c]++
	var once sync.Once
	return func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if b.streams[c]--; b.streams[c] <= 0 {
				delete(b.streams, c)
			}
		})
	}, nil
}

// Admit is OpenStream for the caller of ctx: the admission of the service's
// subscriptions, awareness.Config.Streams.
func (b *Budget) Admit(ctx context.Context) (release func(), err error) {
	return b.OpenStream(CallerOf(ctx))
}

// Streams returns how many streams caller c holds open.
func (b *Budget) Streams(c Caller) int {
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.streams[c]
}

// Exceeded is a refused Charge or OpenStream.
type Exceeded struct {
	Caller Caller
	// Streams is set for a refused OpenStream, Burst then being the cap; Kind and N
	// are a refused Charge's.
	Streams bool
	Kind    Kind
	N       int
	// PerSecond and Burst are the bucket's limits.
	PerSecond float64
	Burst     int
	// RetryAfter is when the bucket will hold N, StreamRetry with Streams; zero with
	// Never.
	RetryAfter time.Duration
	// Never: N is more than the bucket ever holds; splitting the work is the only way.
	Never bool
}

// Code is the ERR-1 code of the refusal: COMPLEXITY_LIMIT_EXCEEDED when waiting
// cannot help, RATE_LIMITED otherwise.
func (e *Exceeded) Code() string {
	if e.Never {
		return awareness.ECOMPLEXITY
	}
	return awareness.ERATELIMITED
}

// RetryAfterMs is RetryAfter in whole milliseconds, rounded up, for the retryAfterMs
// of a RATE_LIMITED answer; 0 when there is nothing to wait for.
func (e *Exceeded) RetryAfterMs() int64 {
	return int64(math.Ceil(float64(e.RetryAfter) / float64(time.Millisecond)))
}

// Error is the refusal's message, for the caller.
func (e *Exceeded) Error() string {
	who := e.Caller.kind()
	switch {
	case e.Streams:
		return fmt.Sprintf("this %s holds %d streams (subscriptions and SSE streams) already, the most one caller may hold open: end one first", who, e.Burst)
	case e.Never:
		return fmt.Sprintf("this request needs %d %s, more than one %s may ever spend at once (%d): split it into smaller requests", e.N, e.Kind, who, e.Burst)
	}
	return fmt.Sprintf("this request needs %d %s and this %s has spent its budget (%s per second, at most %d at once): retry in %v",
		e.N, e.Kind, who, formatRate(e.PerSecond), e.Burst, e.RetryAfter.Round(time.Millisecond))
}

func formatRate(r float64) string {
	if r == math.Trunc(r) {
		return fmt.Sprintf("%.0f", r)
	}
	return fmt.Sprintf("%g", r)
}

func (c Caller) kind() string {
	if len(c) > 0 && c[0] == 't' {
		return "token"
	}
	return "address"
}

// remoteKey carries a request's remote address for CallerOf.
type remoteKey struct{}

// WithRemoteAddr returns ctx carrying remoteAddr, an http.Request's RemoteAddr as
// host:port or a bare address: the caller of an unauthenticated request.
func WithRemoteAddr(ctx context.Context, remoteAddr string) context.Context {
	return context.WithValue(ctx, remoteKey{}, remoteAddr)
}

// Remote puts every request's remote address in its context with WithRemoteAddr.
func Remote(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(WithRemoteAddr(r.Context(), r.RemoteAddr)))
	})
}

// CallerOf returns the caller of ctx: its awareness.PrincipalFrom principal when it
// has one, else its WithRemoteAddr address without the port, an IPv6 address by its
// /64 so one host's addresses are one caller; every connection of one address is one
// caller.
func CallerOf(ctx context.Context) Caller {
	if p, ok := awareness.PrincipalFrom(ctx); ok {
		return Caller("token " + p.Role() + " " + p.Name)
	}
	addr, _ := ctx.Value(remoteKey{}).(string)
	return Caller("address " + addressKey(addr))
}

func addressKey(addr string) string {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}
