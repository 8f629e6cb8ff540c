package budget_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
)

// clock is a settable clock for the buckets.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestCharge_ERR4(t *testing.T) {
	clk := &clock{t: time.Unix(1e9, 0)}
	b := budget.NewWithClock(budget.Limits{PointsPerSecond: 100, PointsBurst: 1000, WritesPerSecond: 10, WritesBurst: 20}, clk.now)
	a, other := budget.Caller("token agent:a a"), budget.Caller("token agent:b b")
	if err := b.Charge(a, budget.Cost{Points: 1000}); err != nil {
		t.Fatalf("a full burst: %v", err)
	}
	err := b.Charge(a, budget.Cost{Points: 50})
	ex, ok := errors.AsType[*budget.Exceeded](err)
	if !ok || ex.Code() != awareness.ERATELIMITED || ex.RetryAfter != 500*time.Millisecond || ex.RetryAfterMs() != 500 {
		t.Fatalf("over the bucket: %#v, want RATE_LIMITED after 500ms", err)
	}
	// A refused charge takes nothing: after 500 ms exactly 50 points are back.
	clk.add(500 * time.Millisecond)
	if err := b.Charge(a, budget.Cost{Points: 50}); err != nil {
		t.Fatalf("after the retry delay: %v", err)
	}
	if err := b.Charge(a, budget.Cost{Points: 1}); err == nil {
		t.Fatal("the bucket is empty again, and a charge passed")
	}
	// Another caller and the other bucket are untouched.
	if err := b.Charge(other, budget.Cost{Points: 1000}); err != nil {
		t.Fatalf("another caller: %v", err)
	}
	if err := b.Charge(a, budget.Cost{Writes: 20}); err != nil {
		t.Fatalf("the writes of a: %v", err)
	}
	// More than the burst can never pass.
	ex, ok = errors.AsType[*budget.Exceeded](b.Charge(other, budget.Cost{Writes: 21}))
	if !ok || !ex.Never || ex.Code() != awareness.ECOMPLEXITY || ex.RetryAfterMs() != 0 {
		t.Fatalf("over the burst: %#v, want Never, COMPLEXITY_LIMIT_EXCEEDED", ex)
	}
	if got := b.Available(other, budget.Writes); got != 20 {
		t.Errorf("a Never refusal took from the bucket: %v left, want 20", got)
	}
	// Both or neither: writes refused, the points are not taken either.
	clk.add(time.Hour)
	if err := b.Charge(a, budget.Cost{Points: 10, Writes: 20}); err != nil {
		t.Fatal(err)
	}
	ex, ok = errors.AsType[*budget.Exceeded](b.Charge(a, budget.Cost{Points: 10, Writes: 10}))
	if !ok || ex.Kind != budget.Writes || ex.RetryAfter != time.Second {
		t.Fatalf("writes spent: %#v, want a refusal of the writes after 1s", ex)
	}
	if got := b.Available(a, budget.Points); got != 990 {
		t.Errorf("a refused charge took points: %v left, want 990", got)
	}
	// 10,000 events in 50 batches of 200 pass at once with the default limits.
	d := budget.New(budget.DefaultLimits())
	for i := range 50 {
		if err := d.Charge(a, budget.Cost{Writes: 200}); err != nil {
			t.Fatalf("default limits, batch %d of 200: %v", i+1, err)
		}
	}
}

func TestUnlimited(t *testing.T) {
	var nilBudget *budget.Budget
	b := budget.New(budget.Limits{})
	for _, x := range []*budget.Budget{nilBudget, b} {
		if err := x.Charge("address 127.0.0.1", budget.Cost{Points: math.MaxInt32, Writes: math.MaxInt32}); err != nil {
			t.Errorf("unlimited: %v", err)
		}
		release, err := x.OpenStream("address 127.0.0.1")
		if err != nil {
			t.Errorf("uncapped streams: %v", err)
		}
		release()
	}
}

func TestOpenStream(t *testing.T) {
	b := budget.New(budget.Limits{MaxStreams: 2})
	a := budget.Caller("token admin dash")
	r1, err := b.OpenStream(a)
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := b.OpenStream(a)
	_, err = b.OpenStream(a)
	ex, ok := errors.AsType[*budget.Exceeded](err)
	if !ok || !ex.Streams || ex.Code() != awareness.ERATELIMITED || ex.RetryAfterMs() != 1000 {
		t.Fatalf("third stream: %#v, want a Streams refusal", err)
	}
	if _, err := b.OpenStream("token admin other"); err != nil {
		t.Fatalf("another caller: %v", err)
	}
	r1()
	r1() // twice frees once
	if got := b.Streams(a); got != 1 {
		t.Fatalf("after one release (twice): %d open, want 1", got)
	}
	r3, err := b.OpenStream(a)
	if err != nil {
		t.Fatalf("after a release: %v", err)
	}
	r2()
	r3()
	if got := b.Streams(a); got != 0 {
		t.Errorf("all released: %d open", got)
	}
}

func TestCallerOf(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		addr string
		want budget.Caller
	}{
		{"192.0.2.7:51234", "address 192.0.2.7"},
		{"192.0.2.7:40000", "address 192.0.2.7"}, // every connection of one address
		{"[::ffff:192.0.2.7]:1", "address 192.0.2.7"},
		{"[2001:db8:1:2:3:4:5:6]:443", "address 2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::9]:443", "address 2001:db8:1:2::/64"},
		{"", "address "},
	} {
		if got := budget.CallerOf(budget.WithRemoteAddr(ctx, tt.addr)); got != tt.want {
			t.Errorf("CallerOf(%q) = %q, want %q", tt.addr, got, tt.want)
		}
	}
	p := awareness.Principal{AgentID: "ops", Name: "gw-ops"}
	if got := budget.CallerOf(awareness.WithPrincipal(budget.WithRemoteAddr(ctx, "192.0.2.7:1"), p)); got != "token agent:ops gw-ops" {
		t.Errorf("a principal: %q", got)
	}
}

func TestLimitsValidate(t *testing.T) {
	if err := budget.DefaultLimits().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, l := range []budget.Limits{
		{PointsPerSecond: -1},
		{PointsPerSecond: math.NaN()},
		{WritesPerSecond: math.Inf(1), WritesBurst: 1},
		{WritesPerSecond: 1},
		{MaxStreams: -1},
	} {
		if err := l.Validate(); err == nil {
			t.Errorf("%+v accepted", l)
		}
	}
}
