package awareness

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"
)

const (
	testWatcher = "agent:main:main"
	otherAgent  = "agent:ops:work"
	humanSender = "U123"
)

var (
	testTarget = SessionRef{AgentID: "main", Key: "agent:main:subagent:child"}
	t0         = time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC) // when the fixtures' notices opened
	t1         = time.Date(2025, 6, 1, 11, 0, 0, 0, time.UTC) // the clock of the transition under test
)

// cur returns a cursor of testWatcher on testTarget; a pending one opened at t0.
func cur(l, n, m int64) *Cursor {
	c := Cursor{Watcher: testWatcher, Target: testTarget, L: l, N: n, M: m, UpdatedAt: t0}
	if n > l {
		c.OpenedAt = t0
	}
	return &c
}

type transition struct {
	next   Cursor
	write  bool // the store has a row to write
	opened bool // a notice opened
}

func seed(s int64) func(*Cursor) transition {
	return func(c *Cursor) transition {
		next, changed := SeedCursor(c, testWatcher, testTarget, s, t1)
		return transition{next: next, write: changed}
	}
}

func watch(head int64) func(*Cursor) transition {
	return func(c *Cursor) transition {
		next, created := WatchCursor(c, testWatcher, testTarget, head, t1)
		return transition{next: next, write: created}
	}
}

func material(s int64, actor string) func(*Cursor) transition {
	return func(c *Cursor) transition {
		next, changed, opened := ApplyMaterial(c, testWatcher, testTarget, s, actor, t1)
		return transition{next, changed, opened}
	}
}

func ack(c *Cursor) transition {
	next, changed, opened := AckCursor(*c, t1)
	return transition{next, changed, opened}
}

func sweep(c *Cursor) transition {
	next, opened := SweepCursor(*c, t1)
	return transition{next, opened, opened}
}

// TestCursorStateMachine_WAT1_NTC2_NTC3_NTC5 walks the rows of the reference state
// machine (openclaw-awareness.md §4.8) that apply to this design. Rows that are store
// decisions (a notifying event for a watcher that is neither passed nor holding a
// cursor; log-only kinds, gated by EventKind.Notifies; watcher gone at sweep; reset,
// deletion, expiry; ambient provenance and store-path fences) are not transitions of
// these functions.
func TestCursorStateMachine_WAT1_NTC2_NTC3_NTC5(t *testing.T) {
	t.Parallel()
	with := func(c *Cursor, mod func(*Cursor)) Cursor { x := *c; mod(&x); return x }
	tests := []struct {
		row      string
		start    *Cursor // nil: ABSENT
		do       func(*Cursor) transition
		want     Cursor
		write    bool
		opened   bool
		wantText string // the pending notice after the transition, "" for none
	}{
		{
			row: "ABSENT + child_spawned naming the watcher → SYNCED at s (WAT-2)",
			do:  seed(4), want: Cursor{Watcher: testWatcher, Target: testTarget, L: 4, N: 4, M: 4, UpdatedAt: t1}, write: true,
		},
		{
			row: "ABSENT + watch → SYNCED at target head (WAT-3)",
			do:  watch(7), want: Cursor{Watcher: testWatcher, Target: testTarget, L: 7, N: 7, M: 7, UpdatedAt: t1}, write: true,
		},
		{
			row: "ABSENT + watch on a target without a head → SYNCED at 0 (WAT-3)",
			do:  watch(0), want: Cursor{Watcher: testWatcher, Target: testTarget, UpdatedAt: t1}, write: true,
		},
		{
			row: "ABSENT + notifying event, producer-passed watcher → PENDING L=0 (WAT-4)",
			do:  material(3, humanSender), want: Cursor{Watcher: testWatcher, Target: testTarget, L: 0, N: 3, M: 3, OpenedAt: t1, UpdatedAt: t1},
			write: true, opened: true, wantText: NoticeText(testTarget.Key, 0),
		},
		{
			row:   "SYNCED + child_spawned again → SYNCED at new s",
			start: cur(2, 2, 2), do: seed(5), want: with(cur(5, 5, 5), func(c *Cursor) { c.UpdatedAt = t1 }), write: true,
		},
		{
			row:   "SYNCED + older child_spawned → unchanged (never backwards)",
			start: cur(5, 5, 5), do: seed(3), want: *cur(5, 5, 5),
		},
		{
			row:   "PENDING + child_spawned again → unchanged (deviation: never swallows a notice)",
			start: cur(2, 4, 4), do: seed(5), want: *cur(2, 4, 4), wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "PENDING+ + child_spawned again → unchanged (deviation)",
			start: cur(2, 4, 6), do: seed(7), want: *cur(2, 4, 6), wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "SYNCED + re-watch → unchanged",
			start: cur(2, 2, 2), do: watch(9), want: *cur(2, 2, 2),
		},
		{
			row:   "PENDING + re-watch → unchanged (never clobbers a pending notice)",
			start: cur(2, 3, 3), do: watch(9), want: *cur(2, 3, 3), wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "PENDING+ + re-watch → unchanged",
			start: cur(2, 3, 5), do: watch(9), want: *cur(2, 3, 5), wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "SYNCED + notifying event by another agent → PENDING, notice opens (NTC-2)",
			start: cur(2, 2, 2), do: material(3, otherAgent),
			want:  with(cur(2, 3, 3), func(c *Cursor) { c.OpenedAt, c.UpdatedAt = t1, t1 }),
			write: true, opened: true, wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "SYNCED + notifying event without actor id → PENDING (NTC-2)",
			start: cur(2, 2, 2), do: material(3, ""),
			want:  with(cur(2, 3, 3), func(c *Cursor) { c.OpenedAt, c.UpdatedAt = t1, t1 }),
			write: true, opened: true, wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "PENDING + notifying event → PENDING+, only M moves, text identical (NTC-2)",
			start: cur(2, 3, 3), do: material(4, humanSender),
			want:  with(cur(2, 3, 4), func(c *Cursor) { c.UpdatedAt = t1 }),
			write: true, wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "PENDING+ + notifying event → PENDING+, M moves (NTC-2)",
			start: cur(2, 3, 4), do: material(6, humanSender),
			want:  with(cur(2, 3, 6), func(c *Cursor) { c.UpdatedAt = t1 }),
			write: true, wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row: "ABSENT + notifying event by the watcher itself → ABSENT (self-suppression)",
			do:  material(3, testWatcher), want: Cursor{},
		},
		{
			row:   "SYNCED + notifying event by the watcher itself → unchanged",
			start: cur(2, 2, 2), do: material(3, testWatcher), want: *cur(2, 2, 2),
		},
		{
			row:   "PENDING + notifying event by the watcher itself → unchanged",
			start: cur(2, 3, 3), do: material(4, testWatcher), want: *cur(2, 3, 3), wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "PENDING+ + notifying event by the watcher itself → unchanged",
			start: cur(2, 3, 5), do: material(6, testWatcher), want: *cur(2, 3, 5), wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "replayed notifying event (s ≤ M) → unchanged",
			start: cur(2, 3, 5), do: material(4, humanSender), want: *cur(2, 3, 5), wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "PENDING + ack → SYNCED at N, no notice (NTC-3)",
			start: cur(2, 3, 3), do: ack,
			want: Cursor{Watcher: testWatcher, Target: testTarget, L: 3, N: 3, M: 3, UpdatedAt: t1}, write: true,
		},
		{
			row:   "PENDING+ + ack → PENDING (L=old N, N=M), one follow-up (NTC-3)",
			start: cur(2, 3, 6), do: ack,
			want:  Cursor{Watcher: testWatcher, Target: testTarget, L: 3, N: 6, M: 6, OpenedAt: t1, UpdatedAt: t1},
			write: true, opened: true, wantText: NoticeText(testTarget.Key, 3),
		},
		{
			row:   "SYNCED + ack (stale notice) → unchanged (NTC-3)",
			start: cur(4, 4, 4), do: ack, want: *cur(4, 4, 4),
		},
		{
			row:   "PENDING + sweep → unchanged, the same text (NTC-5)",
			start: cur(2, 3, 3), do: sweep, want: *cur(2, 3, 3), wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "PENDING+ + sweep → unchanged: N stays, so an exact ack of it still matches (NTC-5)",
			start: cur(2, 3, 6), do: sweep, want: *cur(2, 3, 6), wantText: NoticeText(testTarget.Key, 2),
		},
		{
			row:   "SYNCED + sweep → nothing (NTC-5)",
			start: cur(4, 4, 4), do: sweep, want: *cur(4, 4, 4),
		},
		{
			row:   "UNOPENED (M > N = L, left by no committed write) + sweep → PENDING, opened now (NTC-5)",
			start: cur(4, 4, 6), do: sweep,
			want:  Cursor{Watcher: testWatcher, Target: testTarget, L: 4, N: 6, M: 6, OpenedAt: t1, UpdatedAt: t1},
			write: true, opened: true, wantText: NoticeText(testTarget.Key, 4),
		},
		{
			row:   "PENDING without an opening time (legacy row) + sweep → unchanged (its ID keeps the zero time)",
			start: ptr(with(cur(2, 3, 3), func(c *Cursor) { c.OpenedAt = time.Time{} })), do: sweep,
			want: with(cur(2, 3, 3), func(c *Cursor) { c.OpenedAt = time.Time{} }), wantText: NoticeText(testTarget.Key, 2),
		},
	}
	for _, tt := range tests {
		t.Run(tt.row, func(t *testing.T) {
			var before *Cursor
			if tt.start != nil {
				c := *tt.start
				before = &c
			}
			got := tt.do(tt.start)
			if tt.start != nil && *tt.start != *before {
				t.Errorf("transition mutated its input: %+v → %+v", *before, *tt.start)
			}
			if diff := cmp.Diff(tt.want, got.next); diff != "" {
				t.Errorf("cursor mismatch (-want +got):\n%s", diff)
			}
			if got.write != tt.write {
				t.Errorf("write = %v, want %v", got.write, tt.write)
			}
			if got.opened != tt.opened {
				t.Errorf("opened = %v, want %v", got.opened, tt.opened)
			}
			if !got.next.Valid() {
				t.Errorf("L ≤ N ≤ M violated: L=%d N=%d M=%d", got.next.L, got.next.N, got.next.M)
			}
			if got, want := got.next.Pending(), tt.wantText != ""; got != want {
				t.Errorf("Pending() = %v, want %v", got, want)
			}
			n, ok := NoticeOf(got.next)
			if ok != (tt.wantText != "") || n.Text != tt.wantText {
				t.Errorf("notice = %q (ok=%v), want %q", n.Text, ok, tt.wantText)
			}
		})
	}
}

// applyEvent is what a store does for one event of kind k at sequence s naming (or
// already held by) the watcher: seed on child_spawned, apply notifying kinds, ignore
// log-only kinds (NTC-4).
func applyEvent(c *Cursor, k EventKind, s int64, actor string) (*Cursor, bool) {
	switch {
	case k == ChildSpawned:
		next, changed := SeedCursor(c, testWatcher, testTarget, s, t1)
		if changed {
			return &next, false
		}
	case k.Notifies():
		next, changed, opened := ApplyMaterial(c, testWatcher, testTarget, s, actor, t1)
		if changed {
			return &next, opened
		}
		return c, opened
	}
	return c, false
}

func wantLNM(t *testing.T, c *Cursor, l, n, m int64) {
	t.Helper()
	if c == nil {
		t.Fatalf("cursor is absent, want L=%d N=%d M=%d", l, n, m)
	}
	if c.L != l || c.N != n || c.M != m {
		t.Fatalf("got L=%d N=%d M=%d, want L=%d N=%d M=%d", c.L, c.N, c.M, l, n, m)
	}
}

// Scenario C13: seed, then three material events → one notice.
func TestScenarioC13_ThreeChangesOneNotice_NTC2(t *testing.T) {
	t.Parallel()
	c, _ := applyEvent(nil, ChildSpawned, 1, testWatcher)
	opened := 0
	var texts []string
	for s := int64(2); s <= 4; s++ {
		var o bool
		c, o = applyEvent(c, HumanDirectMessage, s, humanSender)
		if o {
			opened++
		}
		n, _ := NoticeOf(*c)
		texts = append(texts, n.Text)
	}
	if opened != 1 {
		t.Errorf("opened %d notices, want 1", opened)
	}
	wantLNM(t, c, 1, 2, 4)
	want := NoticeText(testTarget.Key, 1)
	if diff := cmp.Diff([]string{want, want, want}, texts); diff != "" {
		t.Errorf("notice text moved while pending (-want +got):\n%s", diff)
	}
}

// Twenty rapid changes give one notice (NTC-2).
func TestTwentyChangesOneNotice_NTC2(t *testing.T) {
	t.Parallel()
	var c *Cursor
	opened := 0
	for s := int64(1); s <= 20; s++ {
		var o bool
		c, o = applyEvent(c, GoalChanged, s, humanSender)
		if o {
			opened++
		}
	}
	if opened != 1 {
		t.Errorf("opened %d notices, want 1", opened)
	}
	wantLNM(t, c, 0, 1, 20)
}

// Scenario C14: seed, frozen, interleaved, ack → one follow-up `changesSince <frozen>`.
func TestScenarioC14_AckReopensForInterleaved_NTC3(t *testing.T) {
	t.Parallel()
	c, _ := applyEvent(nil, ChildSpawned, 1, otherAgent)
	c, _ = applyEvent(c, HumanDirectMessage, 2, humanSender)
	c, _ = applyEvent(c, HumanDirectMessage, 3, humanSender)
	got := ack(c)
	if !got.opened {
		t.Fatal("ack opened no follow-up, want one")
	}
	wantLNM(t, &got.next, 2, 3, 3)
	n, _ := NoticeOf(got.next)
	if want := NoticeText(testTarget.Key, 2); n.Text != want {
		t.Errorf("follow-up text = %q, want %q", n.Text, want)
	}
	// Draining the follow-up closes it.
	again := ack(&got.next)
	if again.opened {
		t.Error("second ack opened a notice, want none")
	}
	wantLNM(t, &again.next, 3, 3, 3)
}

// Scenario C15: a log-only event after the material one never reopens.
func TestScenarioC15_LogOnlyNeverReopens_NTC4(t *testing.T) {
	t.Parallel()
	c, _ := applyEvent(nil, ChildSpawned, 1, otherAgent)
	c, _ = applyEvent(c, HumanDirectMessage, 2, humanSender)
	for s, k := range []EventKind{RunCompleted, RunFailed, Compacted, Adopted} {
		var o bool
		c, o = applyEvent(c, k, int64(3+s), "")
		if o {
			t.Errorf("%s opened a notice", k)
		}
	}
	got := ack(c)
	if got.opened {
		t.Error("ack opened a follow-up for log-only events")
	}
	wantLNM(t, &got.next, 2, 2, 2)
	if sw := sweep(&got.next); sw.opened || sw.write {
		t.Errorf("sweep after ack: opened=%v write=%v, want nothing", sw.opened, sw.write)
	}
}

// Scenario C16: restart with a pending notice, whose target changed again since it
// opened → the sweep leaves it as it is: the same notice (ID), nothing written; its
// subscribers read it again when they subscribe again.
func TestScenarioC16_SweepKeepsThePendingNotice_NTC5(t *testing.T) {
	t.Parallel()
	c, _ := applyEvent(nil, ChildSpawned, 1, otherAgent)
	c, _ = applyEvent(c, HumanDirectMessage, 2, humanSender)
	c, _ = applyEvent(c, HumanDirectMessage, 3, humanSender)
	got := sweep(c)
	if got.opened || got.write {
		t.Fatalf("sweep of a pending notice: opened=%v write=%v, want neither", got.opened, got.write)
	}
	wantLNM(t, &got.next, 1, 2, 3)
	if n, _ := NoticeOf(got.next); n.ID() != mustNotice(t, *c).ID() {
		t.Errorf("sweep changed the notice id: %q → %q", mustNotice(t, *c).ID(), n.ID())
	}
}

// Scenario C18: an event by the watcher itself leaves the seed values.
func TestScenarioC18_SelfSuppression_NTC2(t *testing.T) {
	t.Parallel()
	c, _ := applyEvent(nil, ChildSpawned, 1, testWatcher)
	c, o := applyEvent(c, HumanDirectMessage, 2, testWatcher)
	if o {
		t.Error("self event opened a notice")
	}
	wantLNM(t, c, 1, 1, 1)
}

// Scenario C19: upstream_missing notifies seeded watchers.
func TestScenarioC19_UpstreamMissingNotifies_SIG1(t *testing.T) {
	t.Parallel()
	c, _ := applyEvent(nil, ChildSpawned, 1, otherAgent)
	c, o := applyEvent(c, UpstreamMissing, 2, "")
	if !o {
		t.Error("upstream_missing opened no notice")
	}
	wantLNM(t, c, 1, 2, 2)
}

// Scenario D25: an explicit watch starts at the pre-registration head; re-watching
// keeps the state.
func TestScenarioD25_WatchAtHead_WAT3(t *testing.T) {
	t.Parallel()
	w := watch(5)(nil)
	c := &w.next
	wantLNM(t, c, 5, 5, 5)
	if _, ok := NoticeOf(*c); ok {
		t.Fatal("watch opened a notice")
	}
	c, o := applyEvent(c, GoalChanged, 6, humanSender)
	if !o {
		t.Fatal("next event opened no notice")
	}
	if n := mustNotice(t, *c); n.Text != NoticeText(testTarget.Key, 5) {
		t.Errorf("text = %q, want changesSince 5", n.Text)
	}
	again := watch(9)(c)
	if again.write {
		t.Error("re-watch wants a write")
	}
	if diff := cmp.Diff(*c, again.next); diff != "" {
		t.Errorf("re-watch changed the cursor (-want +got):\n%s", diff)
	}
}

func mustNotice(t *testing.T, c Cursor) Notice {
	t.Helper()
	n, ok := NoticeOf(c)
	if !ok {
		t.Fatalf("no notice pending on %+v", c)
	}
	return n
}

// TestCursorProperties_WAT1_NTC2_NTC3 drives random sequences of events, seeds, acks,
// sweeps and watches through the transitions and checks the invariants after each.
func TestCursorProperties_WAT1_NTC2_NTC3(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		var (
			c           *Cursor
			head        int64
			clock       = t0
			opensSinceL int // notices opened since L last moved
		)
		tick := func() time.Time { clock = clock.Add(time.Second); return clock }
		// step applies one transition and checks the properties shared by all of them.
		step := func(name string, next Cursor, write, opened bool) {
			prev := c
			if write {
				c = &next
			} else if prev != nil && next != *prev {
				rt.Fatalf("%s: returned a different cursor without asking for a write: %+v → %+v", name, *prev, next)
			}
			if c == nil {
				if opened {
					rt.Fatalf("%s: opened a notice without a cursor", name)
				}
				return
			}
			if prev != nil {
				if c.L < prev.L || c.N < prev.N || c.M < prev.M {
					rt.Fatalf("%s: a watermark went backwards: %+v → %+v", name, *prev, *c)
				}
				if c.L != prev.L {
					opensSinceL = 0
				}
				pn, pok := NoticeOf(*prev)
				nn, nok := NoticeOf(*c)
				if pok && nok && c.L == prev.L {
					if nn.Text != pn.Text {
						rt.Fatalf("%s: text changed while L stayed: %q → %q", name, pn.Text, nn.Text)
					}
					if nn.ID() != pn.ID() {
						rt.Fatalf("%s: notice id changed while L stayed", name)
					}
				}
			}
			if opened {
				opensSinceL++
			}
			if opensSinceL > 1 {
				rt.Fatalf("%s: %d notices opened for one L (%+v)", name, opensSinceL, *c)
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"material": func(rt *rapid.T) {
				actor := rapid.SampledFrom([]string{testWatcher, otherAgent, humanSender, ""}).Draw(rt, "actor")
				passed := rapid.Bool().Draw(rt, "producerPassed")
				head++
				if c == nil && !passed {
					return // no cursor and not named: the store does nothing
				}
				prev := c
				next, write, opened := ApplyMaterial(c, testWatcher, testTarget, head, actor, tick())
				if actor == testWatcher && (write || opened) {
					rt.Fatalf("self event changed the cursor: %+v", next)
				}
				if actor != testWatcher {
					if !write || next.M != head {
						rt.Fatalf("event %d by %q: write=%v M=%d", head, actor, write, next.M)
					}
					if wantOpen := prev == nil || !prev.Pending(); opened != wantOpen {
						rt.Fatalf("event %d: opened=%v, want %v (prev %+v)", head, opened, wantOpen, prev)
					}
				}
				step("material", next, write, opened)
			},
			"logOnly": func(rt *rapid.T) { head++ },
			"seed": func(rt *rapid.T) {
				head++
				prev := c
				next, write := SeedCursor(c, testWatcher, testTarget, head, tick())
				if prev != nil && prev.Pending() {
					if write {
						rt.Fatalf("seed overwrote a pending cursor %+v", *prev)
					}
				} else if next.L != head || next.N != head || next.M != head || !write {
					rt.Fatalf("seed at %d: %+v write=%v", head, next, write)
				}
				step("seed", next, write, false)
			},
			"ack": func(rt *rapid.T) {
				if c == nil {
					rt.Skip("no cursor")
				}
				prev := *c
				next, write, opened := AckCursor(prev, tick())
				if next.L > prev.N {
					rt.Fatalf("ack moved L past N: %+v → %+v", prev, next)
				}
				if prev.Pending() && next.L != prev.N {
					rt.Fatalf("ack set L=%d, want the frozen N=%d", next.L, prev.N)
				}
				if want := prev.Pending() && prev.M > prev.N; opened != want {
					rt.Fatalf("ack opened=%v, want %v (%+v)", opened, want, prev)
				}
				if !prev.Pending() && write {
					rt.Fatalf("ack of a synced cursor wants a write")
				}
				step("ack", next, write, opened)
			},
			"sweep": func(rt *rapid.T) {
				if c == nil {
					rt.Skip("no cursor")
				}
				prev := *c
				// No transition leaves M > N == L behind, so the sweep never has
				// anything to do here: every cursor stays exactly as it is (NTC-5).
				next, opened := SweepCursor(prev, tick())
				if opened || next != prev {
					rt.Fatalf("sweep: %+v → %+v (opened %v)", prev, next, opened)
				}
				step("sweep", next, opened, opened)
			},
			"watch": func(rt *rapid.T) {
				prev := c
				next, write := WatchCursor(c, testWatcher, testTarget, head, tick())
				if prev == nil && (!write || next.L != head || next.M != head) {
					rt.Fatalf("watch at %d: %+v write=%v", head, next, write)
				}
				step("watch", next, write, false)
			},
			"": func(rt *rapid.T) {
				if c == nil {
					return
				}
				if !c.Valid() {
					rt.Fatalf("L ≤ N ≤ M violated: %+v", *c)
				}
				if c.M > head {
					rt.Fatalf("M=%d beyond the head %d", c.M, head)
				}
				// No material change is ever left without a pending notice.
				if c.Pending() != (c.M > c.L) {
					rt.Fatalf("Pending()=%v but M=%d L=%d", c.Pending(), c.M, c.L)
				}
				if c.Pending() == c.OpenedAt.IsZero() {
					rt.Fatalf("pending=%v with OpenedAt=%v", c.Pending(), c.OpenedAt)
				}
				if n, ok := NoticeOf(*c); ok && n.Text != NoticeText(testTarget.Key, c.L) {
					rt.Fatalf("notice text %q does not say changesSince %d", n.Text, c.L)
				}
			},
		})
	})
}

// ExampleNoticeText shows the NTC-1 text.
func ExampleNoticeText() {
	fmt.Println(NoticeText("agent:main:subagent:child", 12))
	// Output: Session "agent:main:subagent:child" changed (other actor). Reconcile before acting: session_status sessionKey "agent:main:subagent:child" changesSince 12.
}

// NTC-3, property: for any interleaving of appends (by others and by the watcher
// itself), drains (the gateway takes the pending notice into a prompt) and exact
// acknowledgements of earlier drains, in any order and repeated, a notice opened after
// the drained set was taken is never acknowledged, and a drained notice still pending
// is acknowledged exactly.
func TestAckExactNeverAcknowledgesALaterNotice_NTC3(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		var (
			c      *Cursor
			head   int64
			clock  = t0
			drains []int64 // the notifiedVersion each drain saw (0: nothing pending)
			// openedAfter[N] is how many drains had been taken when the notice
			// freezing N opened.
			openedAfter = map[int64]int{}
		)
		tick := func() time.Time { clock = clock.Add(time.Millisecond); return clock }
		noteOpened := func(next Cursor, opened bool) {
			if opened {
				openedAfter[next.N] = len(drains)
			}
		}
		rt.Repeat(map[string]func(*rapid.T){
			"append": func(rt *rapid.T) {
				head++
				actor := rapid.SampledFrom([]string{"+15550100", testWatcher}).Draw(rt, "actor")
				next, write, opened := ApplyMaterial(c, testWatcher, testTarget, head, actor, tick())
				if write || c != nil {
					c = &next
				}
				noteOpened(next, opened)
			},
			"drain": func(rt *rapid.T) {
				var n int64
				if c != nil && c.Pending() {
					n = c.N
				}
				drains = append(drains, n)
			},
			"ackExact": func(rt *rapid.T) {
				if len(drains) == 0 || c == nil {
					rt.Skip("nothing drained")
				}
				i := rapid.IntRange(0, len(drains)-1).Draw(rt, "drain")
				named := drains[i]
				prev := *c
				next, write, opened := AckExact(prev, named, tick())
				pendingWasDrained := prev.Pending() && prev.N == named && openedAfter[prev.N] <= i
				switch {
				case prev.Pending() && openedAfter[prev.N] > i && write:
					rt.Fatalf("drain %d (N=%d) acknowledged the notice N=%d opened after it: %+v → %+v", i, named, prev.N, prev, next)
				case !pendingWasDrained && (write || next != prev):
					rt.Fatalf("drain %d (N=%d) changed a cursor whose pending notice it did not see: %+v → %+v", i, named, prev, next)
				case pendingWasDrained && (!write || next.L != prev.N):
					rt.Fatalf("drain %d (N=%d) did not acknowledge its notice: %+v → %+v", i, named, prev, next)
				}
				*c = next
				noteOpened(next, opened)
			},
			"": func(rt *rapid.T) {
				if c != nil && (!c.Valid() || c.Pending() != (c.M > c.L)) {
					rt.Fatalf("cursor broken: %+v", *c)
				}
			},
		})
	})
}

// TestResetCursor_LIF2: a reset of the target closes a pending notice and moves the
// cursor to the reset at the new generation; a cursor that selects reset opens one
// notice for it (changesSince s−1), unless its watcher caused the reset; a retired
// cursor, or a reset at or below L, is left alone.
func TestResetCursor_LIF2(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	pending := Cursor{Watcher: testWatcher, Target: testTarget, L: 2, N: 4, M: 5, OpenedAt: now.Add(-time.Hour),
		TargetGeneration: 1, WatcherGeneration: 1}
	selecting := pending
	selecting.Kinds = "human_direct_message,reset"
	tests := []struct {
		name           string
		cur            Cursor
		actor          string
		want           Cursor
		closed, opened bool
	}{
		{"default selection, pending", pending, "", Cursor{Watcher: testWatcher, Target: testTarget, L: 6, N: 6, M: 6,
			UpdatedAt: now, TargetGeneration: 2, WatcherGeneration: 1}, true, false},
		{"selects reset", selecting, "", Cursor{Watcher: testWatcher, Target: testTarget, L: 5, N: 6, M: 6, OpenedAt: now,
			UpdatedAt: now, TargetGeneration: 2, WatcherGeneration: 1, Kinds: selecting.Kinds}, true, true},
		{"selects reset, its own reset", selecting, testWatcher, Cursor{Watcher: testWatcher, Target: testTarget, L: 6, N: 6, M: 6,
			UpdatedAt: now, TargetGeneration: 2, WatcherGeneration: 1, Kinds: selecting.Kinds}, true, false},
		{"retired", Cursor{Watcher: testWatcher, Target: testTarget, L: 2, N: 4, M: 5, Retired: true}, "",
			Cursor{Watcher: testWatcher, Target: testTarget, L: 2, N: 4, M: 5, Retired: true}, false, false},
		{"at or below L", Cursor{Watcher: testWatcher, Target: testTarget, L: 6, N: 6, M: 6}, "",
			Cursor{Watcher: testWatcher, Target: testTarget, L: 6, N: 6, M: 6}, false, false},
	}
	for _, tt := range tests {
		next, closed, opened := ResetCursor(tt.cur, 6, tt.actor, 2, now)
		if diff := cmp.Diff(tt.want, next); diff != "" || closed != tt.closed || opened != tt.opened {
			t.Errorf("%s: closed %v opened %v, want %v %v (-want +got):\n%s", tt.name, closed, opened, tt.closed, tt.opened, diff)
		}
		if !next.Valid() {
			t.Errorf("%s: %+v breaks L <= N <= M", tt.name, next)
		}
	}
}

// TestCheckWatchKinds_LIF3 and the generation check of an exact acknowledgement (LIF-2).
func TestCheckWatchKinds_LIF3(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want KindSelection
		err  bool
	}{
		{nil, "", false},
		{[]string{}, "", true},
		{[]string{"deleted", "goal_changed", "goal_changed"}, "goal_changed,deleted", false},
		// The default list, given, stays a selection of its own (its M in its row).
		{[]string{"deleted", "human_direct_message", "upstream_missing", "goal_changed"}, "human_direct_message,upstream_missing,goal_changed,deleted", false},
		{[]string{"reset"}, "reset", false},
		{[]string{"created"}, "", true},
		{[]string{"run_completed"}, "", true},
		{[]string{"child_spawned"}, "", true},
		{[]string{"bogus"}, "", true},
	} {
		got, err := CheckWatchKinds(c.in)
		if (err != nil) != c.err || got != c.want || (err != nil && ErrorCode(err) != EINVALID) {
			t.Errorf("CheckWatchKinds(%q) = %q, %v; want %q, error %v", c.in, got, err, c.want, c.err)
		}
	}
	if (Cursor{}).Selects(Reset) || !(Cursor{}).Selects(Deleted) || (Cursor{Kinds: "reset"}).Selects(HumanDirectMessage) {
		t.Error("Selects: the default selection is the notifying kinds, a selection its kinds")
	}
	exact := []AckTarget{{NotifiedVersion: 3}, {NotifiedVersion: 4, WatcherGeneration: 2}}
	for gen, code := range map[int64]string{2: "", 3: ESTALEGENERATION, 1: EINVALID} {
		if got := ErrorCode(CheckAckGeneration(exact, gen)); got != code {
			t.Errorf("CheckAckGeneration at generation %d: %q, want %q", gen, got, code)
		}
	}
}
