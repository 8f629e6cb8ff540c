package storetest

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// clock is a settable service clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// service returns a Service over the fixture's store with a settable clock and the
// hold policy p.
func (f *fixture) service(p awareness.HoldPolicy) (*awareness.Service, *clock) {
	c := &clock{now: t0}
	hub := awareness.NewHub()
	f.t.Cleanup(hub.Close)
	return awareness.NewService(awareness.Config{Store: f.s, Hub: hub, Now: c.Now, Holds: p}), c
}

func refOf(n awareness.Notice) awareness.NoticeRef {
	a := n.Target.AgentID
	return awareness.NoticeRef{Target: n.Target.Key, TargetAgentID: &a, NotifiedVersion: n.NotifiedVersion}
}

// testRedeliveryUnderFailingTurns: a watcher's turns drain its notices and 30% of them
// fail between the drain and the acknowledgement (no ack, no release). No notice is
// lost: every pending notice is handed out by each drain, or is held after a failed
// drain for at most the stated bound (RedeliverTurns of the watcher's later turns or
// RedeliverAfter, whichever first); each comes back marked redelivered, at most
// maxRedeliver times per opening; a pair never has two pending notices (RDL-1).
func testRedeliveryUnderFailingTurns(t *testing.T, f *fixture) {
	for i, tc := range []struct{ maxRedeliver, turns int }{{1, 3}, {2, 3}, {1, 50}} { // 50 turns: the time bound acts
		t.Run(fmt.Sprintf("maxRedeliver=%d,turns=%d", tc.maxRedeliver, tc.turns), func(t *testing.T) {
			redeliveryRun(t, f, tc.maxRedeliver, tc.turns, i)
		})
	}
}

func redeliveryRun(t *testing.T, f *fixture, maxRedeliver, turns, run int) {
	const (
		after = 10 * time.Minute
		step  = time.Minute
	)
	seed := int64(run + 1)
	svc, clk := f.service(awareness.HoldPolicy{RedeliverTurns: turns, RedeliverAfter: after, MaxSnooze: time.Hour})
	ctx := f.ctx
	watcher := fmt.Sprintf("agent:w%d:main", run)
	var targets []string
	for i := range 6 {
		tk := fmt.Sprintf("agent:w%d:direct:t%d", run, i)
		targets = append(targets, tk)
		mr := maxRedeliver
		if _, err := svc.WatchWith(ctx, watcher, tk, nil, awareness.WatchOptions{MaxRedeliver: &mr}); err != nil {
			t.Fatalf("watch: %v", err)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 29))
	type opening struct {
		target string
		n      int64
	}
	type heldSince struct {
		turn int       // successful turns of the watcher at the failed drain
		at   time.Time // when
	}
	held := map[opening]heldSince{} // failed drains not yet handed out again
	comebacks := map[opening]int{}
	okTurns, failed, redelivered := 0, 0, 0
	acked := map[opening]bool{}
	opened := map[opening]bool{}
	for i := range 400 {
		clk.add(step)
		if _, err := svc.WakeHolds(ctx); err != nil {
			t.Fatalf("WakeHolds: %v", err)
		}
		for range rng.IntN(3) {
			tk := targets[rng.IntN(len(targets))]
			if _, err := svc.RecordEvent(ctx, human(tk)); err != nil {
				t.Fatalf("record: %v", err)
			}
		}
		pending, err := svc.PendingNotices(ctx, watcher)
		if err != nil {
			t.Fatalf("pending: %v", err)
		}
		pairs := map[string]bool{}
		for _, n := range pending {
			if pairs[n.Target.Key] {
				t.Fatalf("step %d: two pending notices on %s", i, n.Target.Key)
			}
			pairs[n.Target.Key] = true
			opened[opening{n.Target.Key, n.NotifiedVersion}] = true
		}
		drained, err := svc.DrainNotices(ctx, watcher)
		if err != nil {
			t.Fatalf("drain: %v", err)
		}
		got := map[opening]awareness.Notice{}
		for _, n := range drained {
			got[opening{n.Target.Key, n.NotifiedVersion}] = n
		}
		// Every pending notice is handed out, or held within the bound.
		for _, n := range pending {
			o := opening{n.Target.Key, n.NotifiedVersion}
			h, isHeld := held[o]
			if _, ok := got[o]; ok {
				if isHeld {
					if !n.Redelivered {
						t.Errorf("step %d: %v came back without redelivered", i, o)
					}
					if okTurns-h.turn > turns || clk.Now().Sub(h.at) > after+step {
						t.Errorf("step %d: %v came back after %d turns and %v, bound %d turns or %v", i, o, okTurns-h.turn, clk.Now().Sub(h.at), turns, after)
					}
					comebacks[o]++
					redelivered++
					delete(held, o)
				}
				continue
			}
			if !isHeld {
				t.Fatalf("step %d: pending %v neither handed out nor held after a failed drain: lost", i, o)
			}
			if okTurns-h.turn >= turns+1 || clk.Now().Sub(h.at) > after+step {
				t.Fatalf("step %d: %v held for %d turns and %v, beyond the bound (%d turns or %v)", i, o, okTurns-h.turn, clk.Now().Sub(h.at), turns, after)
			}
		}
		if rng.IntN(10) < 3 { // the turn fails between the drain and the ack
			failed++
			for o := range got {
				if comebacks[o] < maxRedeliver {
					held[o] = heldSince{turn: okTurns, at: clk.Now()}
				}
			}
			continue
		}
		refs := make([]awareness.NoticeRef, 0, len(drained))
		for _, n := range drained {
			refs = append(refs, refOf(n))
		}
		acks, err := svc.AcknowledgeNotices(ctx, watcher, refs)
		if err != nil {
			t.Fatalf("ack: %v", err)
		}
		for _, a := range acks {
			if a.Outcome != awareness.AckAcknowledged {
				t.Fatalf("step %d: ack of a drained notice %s N=%d: %s", i, a.Target.Key, a.NotifiedVersion, a.Outcome)
			}
			acked[opening{a.Target.Key, a.NotifiedVersion}] = true
		}
		okTurns++
	}
	for o, n := range comebacks {
		if n > maxRedeliver {
			t.Errorf("%v came back %d times, maxRedeliver %d", o, n, maxRedeliver)
		}
	}
	// Everything opened was acknowledged or is pending still (handed out or held).
	pending, err := svc.PendingNotices(ctx, watcher)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range pending {
		acked[opening{n.Target.Key, n.NotifiedVersion}] = true
	}
	for o := range opened {
		if !acked[o] {
			t.Errorf("%v opened, never acknowledged and not pending: lost", o)
		}
	}
	if failed < 60 || redelivered == 0 {
		t.Errorf("the run failed %d turns and redelivered %d notices: too few to test", failed, redelivered)
	}
	t.Logf("maxRedeliver %d: %d turns acknowledged, %d failed, %d notices came back, %d openings", maxRedeliver, okTurns, failed, redelivered, len(opened))
}

// testRedeliveryPublished: a redelivered notice reaches the watcher's live
// subscription again, marked redelivered with a new delivery (RDL-1, NTC-7).
func testRedeliveryPublished(t *testing.T, f *fixture) {
	svc, _ := f.service(awareness.HoldPolicy{RedeliverTurns: 2, RedeliverAfter: time.Hour, MaxSnooze: time.Hour})
	ctx := f.ctx
	const w = parentKey
	for _, k := range []string{targetKey, childKey} {
		if _, err := svc.Watch(ctx, w, k, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := svc.RecordEvent(ctx, human(k)); err != nil {
			t.Fatal(err)
		}
	}
	live, stop, err := svc.SubscribeNotices(ctx, ptr(w), false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	next := func() awareness.Notice {
		t.Helper()
		select {
		case n := <-live:
			return n
		case <-time.After(5 * time.Second):
			t.Fatal("no notice on the subscription")
		}
		return awareness.Notice{}
	}
	next()
	next()
	d, err := svc.DrainNotices(ctx, w)
	if err != nil || len(d) != 2 {
		t.Fatalf("drain: %+v, %v", d, err)
	}
	var lost, done awareness.Notice
	for _, n := range d {
		if n.Target.Key == targetKey {
			lost = n
		} else {
			done = n
		}
	}
	for range 2 { // two turns that do not name the lost notice
		if _, err := svc.AcknowledgeNotices(ctx, w, []awareness.NoticeRef{refOf(done)}); err != nil {
			t.Fatal(err)
		}
	}
	svc.Flush()
	for {
		n := next()
		if n.Target.Key != targetKey {
			continue
		}
		if n.NotifiedVersion != lost.NotifiedVersion || !n.Redelivered || n.Delivery != 1 || n.Text != lost.Text {
			t.Fatalf("redelivered notice: %+v", n)
		}
		break
	}
}
