package awareness_test

import (
	"context"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// TestPrunerStartLeavesExpiryToPeriodicPasses_WAT5: cursor expiry reads every cursor,
// so the pruner's pass at start skips it when any process ran it within the last two
// intervals (a start beside serving processes scans nothing), and does it after that
// (a deployment whose processes kept restarting still expires cursors).
func TestPrunerStartLeavesExpiryToPeriodicPasses_WAT5(t *testing.T) {
	t.Parallel()
	st := newMemStore()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	svc := awareness.NewService(awareness.Config{Store: st, Now: func() time.Time { return now }})
	t.Cleanup(func() { svc.Hub().Close(); _ = st.Close() })
	ctx := context.Background()
	watch := func(target string) {
		t.Helper()
		if _, err := svc.Watch(ctx, "agent:main:main", target, nil); err != nil {
			t.Fatal(err)
		}
	}
	cursors := func() int {
		t.Helper()
		cs, err := st.Cursors(ctx, awareness.CursorQuery{})
		if err != nil {
			t.Fatal(err)
		}
		return len(cs)
	}
	pol := awareness.RetentionPolicy{CursorTTL: 30 * 24 * time.Hour}
	// startAt starts a pruner at at and waits for its pass at start.
	startAt := func(at time.Time) {
		t.Helper()
		now = at
		p := awareness.NewPruner(awareness.PrunerConfig{Store: st, Policy: pol, Interval: time.Hour, Now: func() time.Time { return at }})
		p.Start(ctx)
		defer p.Stop()
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, err := st.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if s.LastPruneAt != nil && s.LastPruneAt.Equal(at) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the pass at start did not run")
			}
			time.Sleep(time.Millisecond)
		}
	}
	watch("agent:main:subagent:a")
	startAt(t0.Add(31 * 24 * time.Hour)) // no expiry ran yet: the start expires
	if n := cursors(); n != 0 {
		t.Fatalf("%d cursors after the first start, want the old one expired", n)
	}
	now = t0
	watch("agent:main:subagent:b") // expirable at once
	startAt(t0.Add(31*24*time.Hour + 90*time.Minute))
	if n := cursors(); n != 1 {
		t.Errorf("a start 90 minutes after the last expiry expired cursors: %d left, want 1", n)
	}
	startAt(t0.Add(31*24*time.Hour + 121*time.Minute))
	if n := cursors(); n != 0 {
		t.Errorf("a start two hours after the last expiry: %d cursors left, want 0", n)
	}
}
