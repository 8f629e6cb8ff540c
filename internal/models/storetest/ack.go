package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// testAckOutcomes: the exact form answers, per named notice and in the order named,
// what it did (NTC-3): acknowledged with its follow-up, alreadyAcknowledged and
// superseded with the pair's pending notice after the call, notPending; a follow-up
// opened by the call is never acknowledged by it.
func testAckOutcomes(t *testing.T, f *fixture) {
	target, child, child2 := ref(t, targetKey), ref(t, childKey), ref(t, child2Key)
	f.watch(parentKey, target, t0)
	f.watch(parentKey, child, t0)
	t1, t2 := t0.Add(time.Second), t0.Add(2*time.Second)
	f.append1(t1, human(targetKey)) // target: N = 1
	f.append1(t1, human(childKey))  // child: N = 1
	f.append1(t2, human(targetKey)) // target: M = 2
	at := t0.Add(time.Minute)
	exact := func(now time.Time, named ...awareness.AckTarget) awareness.AckResult {
		t.Helper()
		return f.ack(awareness.AckRequest{Watcher: parentKey, Exact: named}, now)
	}
	named := func(r awareness.SessionRef, n int64) awareness.AckTarget {
		return awareness.AckTarget{Target: r, NotifiedVersion: n}
	}
	ackOf := func(r awareness.SessionRef, n int64, o awareness.AckOutcome, follow, pending *awareness.Notice) awareness.NoticeAck {
		return awareness.NoticeAck{Watcher: parentKey, Target: r, NotifiedVersion: n, Outcome: o, FollowUp: follow, Pending: pending}
	}

	res := exact(at, named(target, 1), named(target, 1), named(child, 5), named(child2, 1), named(target, 2))
	follow := notice(parentKey, target, 1, 2, 2, at)
	childNotice := notice(parentKey, child, 0, 1, 1, t1)
	want := awareness.AckResult{
		Closed: []awareness.Notice{awareness.ClosedNotice(notice(parentKey, target, 0, 1, 2, t1))},
		Opened: []awareness.Notice{follow},
		Acks: []awareness.NoticeAck{
			ackOf(target, 1, awareness.AckAcknowledged, &follow, nil),
			ackOf(target, 1, awareness.AckAlreadyAcknowledged, nil, &follow),
			ackOf(child, 5, awareness.AckSuperseded, nil, &childNotice),
			ackOf(child2, 1, awareness.AckNotPending, nil, nil),
			// The follow-up opened by this very call: no turn can have drained it.
			ackOf(target, 2, awareness.AckSuperseded, nil, &follow),
		},
	}
	if diff := cmp.Diff(want, res, emptyOK); diff != "" {
		t.Errorf("exact ack (-want +got):\n%s", diff)
	}
	if c := f.mustCursor(parentKey, target); c.L != 1 || c.N != 2 || c.M != 2 {
		t.Errorf("target's cursor: L=%d N=%d M=%d, want 1 2 2", c.L, c.N, c.M)
	}
	if c := f.mustCursor(parentKey, child); c.L != 0 || c.N != 1 {
		t.Errorf("the superseded pair changed: %+v", c)
	}

	// The child's notice, then again, then a version the pair never reached.
	at2 := at.Add(time.Minute)
	res = exact(at2, named(child, 1))
	want = awareness.AckResult{
		Closed: []awareness.Notice{awareness.ClosedNotice(childNotice)},
		Acks:   []awareness.NoticeAck{ackOf(child, 1, awareness.AckAcknowledged, nil, nil)},
	}
	if diff := cmp.Diff(want, res, emptyOK); diff != "" {
		t.Errorf("exact ack of the child (-want +got):\n%s", diff)
	}
	res = exact(at2.Add(time.Second), named(child, 1), named(child, 7), named(target, 2), named(target, 1))
	want = awareness.AckResult{
		Closed: []awareness.Notice{awareness.ClosedNotice(follow)},
		Acks: []awareness.NoticeAck{
			ackOf(child, 1, awareness.AckAlreadyAcknowledged, nil, nil),
			ackOf(child, 7, awareness.AckNotPending, nil, nil),
			ackOf(target, 2, awareness.AckAcknowledged, nil, nil),
			ackOf(target, 1, awareness.AckAlreadyAcknowledged, nil, nil),
		},
	}
	if diff := cmp.Diff(want, res, emptyOK); diff != "" {
		t.Errorf("second exact ack (-want +got):\n%s", diff)
	}
	if got := f.pending(parentKey); len(got) != 0 {
		t.Errorf("pending after acknowledging everything: %v", got)
	}
}

// Plant writes a cursor row as given, bypassing the protocol (a state no committed
// write leaves behind, for RunSweep). The cursor must keep L ≤ N ≤ M.
type Plant func(t *testing.T, s awareness.Store, c awareness.Cursor)

// RunSweep runs the startup sweep's suite (NTC-5): cursors with M > N == L, which only
// plant can write, get their notice opened, in pages of at most awareness.SweepPage,
// each published after its commit; pending and synced cursors are left exactly as
// they are. open is Run's.
func RunSweep(t *testing.T, open func(t *testing.T) awareness.Store, plant Plant) {
	t.Run("NTC-5_sweep_opens_only_unopened_cursors", func(t *testing.T) {
		t.Parallel()
		f := &fixture{t: t, s: open(t), ctx: t.Context()}
		target, other := ref(t, targetKey), ref(t, childKey)
		f.watch(opsKey, other, t0)
		f.append1(t0.Add(time.Second), human(childKey)) // a pending notice: N = M = 1
		f.append1(t0.Add(2*time.Second), human(childKey))
		pendingBefore := f.pending("")
		// More unopened cursors than two pages, and two rows a sweep must not touch.
		const unopened = 2*awareness.SweepPage + 7
		for i := range unopened {
			plant(t, f.s, awareness.Cursor{Watcher: fmt.Sprintf("agent:main:subagent:w%04d", i), Target: target,
				L: 2, N: 2, M: 5, UpdatedAt: t0})
		}
		plant(t, f.s, awareness.Cursor{Watcher: "agent:main:subagent:synced", Target: target, L: 4, N: 4, M: 4, UpdatedAt: t0})
		plant(t, f.s, awareness.Cursor{Watcher: "agent:main:subagent:pending", Target: target, L: 1, N: 3, M: 5,
			OpenedAt: t0, UpdatedAt: t0})

		at := t0.Add(time.Hour)
		var pages [][]awareness.Notice
		n, err := f.s.Sweep(f.ctx, at, func(ns []awareness.Notice) { pages = append(pages, ns) })
		if err != nil || n != unopened {
			t.Fatalf("Sweep opened %d, %v; want %d, nil", n, err, unopened)
		}
		seen := map[string]bool{}
		for i, p := range pages {
			if len(p) == 0 || len(p) > awareness.SweepPage {
				t.Errorf("page %d holds %d notices, want 1..%d", i, len(p), awareness.SweepPage)
			}
			for _, nt := range p {
				if want := notice(nt.Watcher, target, 2, 5, 5, at); !cmp.Equal(want, nt) || seen[nt.Watcher] {
					t.Fatalf("opened %+v, want %+v once", nt, want)
				}
				seen[nt.Watcher] = true
			}
		}
		if len(seen) != unopened {
			t.Errorf("opened %d distinct notices, want %d", len(seen), unopened)
		}
		for _, w := range []string{"agent:main:subagent:w0000", fmt.Sprintf("agent:main:subagent:w%04d", unopened-1)} {
			if c := f.mustCursor(w, target); c.L != 2 || c.N != 5 || c.M != 5 || !c.OpenedAt.Equal(at) {
				t.Errorf("swept cursor %s: %+v, want L=2 N=5 M=5 opened %v", w, c, at)
			}
		}
		if c := f.mustCursor("agent:main:subagent:synced", target); c.L != 4 || c.N != 4 || c.M != 4 {
			t.Errorf("synced cursor changed: %+v", c)
		}
		if c := f.mustCursor("agent:main:subagent:pending", target); c.L != 1 || c.N != 3 || c.M != 5 || !c.OpenedAt.Equal(t0) {
			t.Errorf("pending cursor changed: %+v", c)
		}
		for _, nt := range pendingBefore {
			if c := f.mustCursor(nt.Watcher, nt.Target); c.N != nt.NotifiedVersion || !c.OpenedAt.Equal(nt.OpenedAt) {
				t.Errorf("pending notice %+v changed: %+v", nt, c)
			}
		}
		again, err := f.s.Sweep(f.ctx, at.Add(time.Hour), func(ns []awareness.Notice) { t.Errorf("second sweep opened %v", ns) })
		if err != nil || again != 0 {
			t.Errorf("second sweep: %d, %v; want 0, nil", again, err)
		}
	})
}
