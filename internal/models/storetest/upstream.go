package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// RunUpstream runs the conformance suite of awareness.UpstreamStore (UPS-1..5). open
// has the contract of Run; the store it returns must also implement UpstreamStore.
// Subtests are named after the requirement ids of SPEC.md and, where they replay one,
// the OpenClaw acceptance scenario (reference §8 G).
func RunUpstream(t *testing.T, open func(t *testing.T) awareness.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f *upFixture)
	}{
		{"UPS-1_adopt_creates_link", testAdoptCreates},
		{"UPS-1_G65_same_source_keeps_marker_changed_source_rebases", testAdoptSameSource},
		{"UPS-1_G62_concurrent_first_adoptions_one_wins", testAdoptConcurrent},
		{"UPS-1_G62_remove_is_exact", testRemoveExact},
		{"UPS-2_G63_watched_links_once_in_order", testWatchedLinks},
		{"UPS-2_G66_fresh_store_lists_nothing", testFreshEmpty},
		{"UPS-2_G64_concurrent_settlements_one_wins", testSettleConcurrent},
		{"UPS-2_settle_batch_is_per_link_compare_and_set", testSettleBatch},
		{"UPS-2_marker_never_moves_backwards", testMarkerForward},
		{"UPS-2_recorded_range_is_found_by_its_start", testRecordedEnd},
		{"UPS-4_unwatched_links_forget_their_streak", testForgetUnwatched},
		{"UPS-3_own_prompts_keep_the_last_window", testOwnPrompts},
		{"UPS-3_salt_is_stable", testSalt},
		{"WAT-5_delete_session_deletes_link", testDeleteSessionDeletesLink},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			us, ok := s.(awareness.UpstreamStore)
			if !ok {
				t.Fatalf("%T does not implement awareness.UpstreamStore", s)
			}
			tt.fn(t, &upFixture{t: t, s: s, us: us, ctx: t.Context()})
		})
	}
}

type upFixture struct {
	t   *testing.T
	s   awareness.Store
	us  awareness.UpstreamStore
	ctx context.Context
}

// Keys of the upstream suite.
const (
	adoptedA = "agent:main:acp:a"
	adoptedB = "agent:main:acp:b"
	adoptedC = "agent:ops:acp:c"
	watcherW = "agent:main:main"
	watcherV = "agent:ops:main"
)

func newLink(t *testing.T, key, id, catalog, thread string, marker int64) awareness.UpstreamLink {
	return awareness.UpstreamLink{Session: ref(t, key), ID: id, CatalogID: catalog, ThreadID: thread,
		Source: "/transcripts/" + catalog + "/" + thread + ".jsonl", Marker: marker}
}

func (f *upFixture) adopt(l awareness.UpstreamLink, now time.Time) (awareness.UpstreamLink, bool) {
	f.t.Helper()
	got, created, err := f.us.AdoptUpstream(f.ctx, l, now)
	if err != nil {
		f.t.Fatalf("AdoptUpstream(%+v): %v", l, err)
	}
	return got, created
}

func (f *upFixture) link(key string) (awareness.UpstreamLink, bool) {
	f.t.Helper()
	l, ok, err := f.us.UpstreamLink(f.ctx, ref(f.t, key))
	if err != nil {
		f.t.Fatalf("UpstreamLink(%s): %v", key, err)
	}
	return l, ok
}

func (f *upFixture) mustLink(key string) awareness.UpstreamLink {
	f.t.Helper()
	l, ok := f.link(key)
	if !ok {
		f.t.Fatalf("no link on %s", key)
	}
	return l
}

func (f *upFixture) list(q awareness.UpstreamQuery) []awareness.UpstreamLink {
	f.t.Helper()
	ls, err := f.us.UpstreamLinks(f.ctx, q)
	if err != nil {
		f.t.Fatalf("UpstreamLinks(%+v): %v", q, err)
	}
	return ls
}

func keysOf(ls []awareness.UpstreamLink) []string {
	out := []string{}
	for _, l := range ls {
		out = append(out, l.Session.Key)
	}
	return out
}

func (f *upFixture) watch(watcher, target string, now time.Time) {
	f.t.Helper()
	if _, _, err := f.s.Watch(f.ctx, watcher, ref(f.t, target), "", now); err != nil {
		f.t.Fatalf("Watch: %v", err)
	}
}

func (f *upFixture) settle(cs ...awareness.UpstreamCheck) []bool {
	f.t.Helper()
	ok, err := f.us.SettleUpstream(f.ctx, cs)
	if err != nil {
		f.t.Fatalf("SettleUpstream: %v", err)
	}
	return ok
}

func testAdoptCreates(t *testing.T, f *upFixture) {
	in := newLink(t, adoptedA, "l1", "claude", "t1", 42)
	got, created := f.adopt(in, t0)
	want := in
	want.CreatedAt, want.UpdatedAt = t0, t0
	if !created {
		t.Errorf("created = false, want true")
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("AdoptUpstream (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want, f.mustLink(adoptedA)); d != "" {
		t.Errorf("UpstreamLink (-want +got):\n%s", d)
	}
	if _, ok := f.link(adoptedB); ok {
		t.Errorf("a link on a session never adopted")
	}
	bad := in
	bad.ID = ""
	if _, _, err := f.us.AdoptUpstream(f.ctx, bad, t0); awareness.ErrorCode(err) != awareness.EINVALID {
		t.Errorf("AdoptUpstream without an id = %v, want INVALID_ARGUMENT", err)
	}
}

func testAdoptSameSource(t *testing.T, f *upFixture) {
	first, _ := f.adopt(newLink(t, adoptedA, "l1", "claude", "t1", 10), t0)
	// The monitor advanced the marker and counted a miss.
	if ok := f.settle(awareness.UpstreamCheck{Expect: first, Marker: 99, ConsecutiveMisses: 2,
		BlockedReason: "why", CheckedAt: t0.Add(time.Second)}); !ok[0] {
		t.Fatalf("settle failed")
	}
	t1 := t0.Add(time.Minute)
	again, created := f.adopt(newLink(t, adoptedA, "l2", "claude", "t1", 500), t1)
	if created || again.ID != "l1" || again.Marker != 99 || again.ConsecutiveMisses != 0 ||
		!again.UpdatedAt.Equal(t1) || !again.CreatedAt.Equal(t0) {
		t.Errorf("same-source adoption = %+v (created %v), want l1 kept at marker 99, streak restarted", again, created)
	}
	if d := cmp.Diff(again, f.mustLink(adoptedA)); d != "" {
		t.Errorf("stored link differs from the returned one (-returned +stored):\n%s", d)
	}
	t2 := t1.Add(time.Minute)
	moved, created := f.adopt(newLink(t, adoptedA, "l3", "claude", "t2", 7), t2)
	if !created || moved.ID != "l3" || moved.Marker != 7 || moved.ConsecutiveMisses != 0 ||
		!moved.LastCheckedAt.IsZero() || moved.BlockedReason != "" || !moved.CreatedAt.Equal(t2) {
		t.Errorf("changed-source adoption = %+v (created %v), want a new link l3 at 7", moved, created)
	}
	if d := cmp.Diff(moved, f.mustLink(adoptedA)); d != "" {
		t.Errorf("stored (-returned +stored):\n%s", d)
	}
}

func testAdoptConcurrent(t *testing.T, f *upFixture) {
	const n = 8
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		ids     = map[string]bool{}
	)
	for i := range n {
		wg.Go(func() {
			l, c, err := f.us.AdoptUpstream(f.ctx, newLink(t, adoptedA, fmt.Sprintf("l%d", i), "claude", "t1", 5), t0)
			if err != nil {
				t.Errorf("AdoptUpstream: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			ids[l.ID] = true
			if c {
				created++
			}
		})
	}
	wg.Wait()
	if created != 1 || len(ids) != 1 {
		t.Errorf("created %d links with ids %v, want exactly one winner that everyone sees", created, ids)
	}
}

func testRemoveExact(t *testing.T, f *upFixture) {
	l, _ := f.adopt(newLink(t, adoptedA, "l1", "claude", "t1", 0), t0)
	stale := l
	stale.UpdatedAt = t0.Add(-time.Second)
	other := l
	other.ID = "l9"
	for _, e := range []awareness.UpstreamLink{stale, other} {
		if ok, err := f.us.RemoveUpstream(f.ctx, e); err != nil || ok {
			t.Errorf("RemoveUpstream(%s @ %v) = %v, %v; want false (not the stored link)", e.ID, e.UpdatedAt, ok, err)
		}
	}
	if ok, err := f.us.RemoveUpstream(f.ctx, l); err != nil || !ok {
		t.Errorf("RemoveUpstream = %v, %v; want true", ok, err)
	}
	if ok, err := f.us.RemoveUpstream(f.ctx, l); err != nil || ok {
		t.Errorf("second RemoveUpstream = %v, %v; want false (absent)", ok, err)
	}
	if _, ok := f.link(adoptedA); ok {
		t.Errorf("link still there")
	}
}

func testWatchedLinks(t *testing.T, f *upFixture) {
	f.adopt(newLink(t, adoptedA, "la", "codex", "ta", 0), t0)
	f.adopt(newLink(t, adoptedB, "lb", "claude", "tb", 0), t0)
	f.adopt(newLink(t, adoptedC, "lc", "claude", "tc", 0), t0)
	f.adopt(awareness.UpstreamLink{Session: ref(t, "global"), ID: "lg", CatalogID: "claude", ThreadID: "tg", Source: "/g", Marker: 0}, t0)
	f.watch(watcherW, adoptedA, t0)
	f.watch(watcherV, adoptedA, t0) // two watchers: listed once
	f.watch(watcherW, adoptedC, t0)
	// A cursor on the bare key under another agent does not make main's link watched.
	if _, _, err := f.s.Watch(f.ctx, watcherW, ref(t, "global", "ops"), "", t0); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{adoptedC, adoptedA}, keysOf(f.list(awareness.UpstreamQuery{Watched: true}))); d != "" {
		t.Errorf("watched links, by catalog then agent then key (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{adoptedB, "global", adoptedA}, keysOf(f.list(awareness.UpstreamQuery{AgentID: "main"}))); d != "" {
		t.Errorf("links of agent main (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{adoptedA}, keysOf(f.list(awareness.UpstreamQuery{AgentID: "main", Watched: true}))); d != "" {
		t.Errorf("watched links of agent main (-want +got):\n%s", d)
	}
	if n := len(f.list(awareness.UpstreamQuery{})); n != 4 {
		t.Errorf("all links = %d, want 4", n)
	}
}

func testFreshEmpty(t *testing.T, f *upFixture) {
	if ls := f.list(awareness.UpstreamQuery{Watched: true}); len(ls) != 0 {
		t.Errorf("watched links on a fresh store = %v", ls)
	}
	if ls := f.list(awareness.UpstreamQuery{}); len(ls) != 0 {
		t.Errorf("links on a fresh store = %v", ls)
	}
	if n, err := f.us.ForgetUnwatchedMisses(f.ctx); err != nil || n != 0 {
		t.Errorf("ForgetUnwatchedMisses = %d, %v", n, err)
	}
}

func testSettleConcurrent(t *testing.T, f *upFixture) {
	l, _ := f.adopt(newLink(t, adoptedA, "l1", "claude", "t1", 10), t0)
	var (
		wg   sync.WaitGroup
		wins = make([]bool, 2)
	)
	for i := range wins {
		wg.Go(func() {
			ok, err := f.us.SettleUpstream(f.ctx, []awareness.UpstreamCheck{{Expect: l, Marker: 20 + int64(i), CheckedAt: t0}})
			if err != nil {
				t.Errorf("SettleUpstream: %v", err)
				return
			}
			wins[i] = ok[0]
		})
	}
	wg.Wait()
	if wins[0] == wins[1] {
		t.Fatalf("settlements = %v, want exactly one winner", wins)
	}
	winner := int64(20)
	if wins[1] {
		winner = 21
	}
	if got := f.mustLink(adoptedA).Marker; got != winner {
		t.Errorf("marker = %d, want the winner's %d", got, winner)
	}
}

func testSettleBatch(t *testing.T, f *upFixture) {
	a, _ := f.adopt(newLink(t, adoptedA, "la", "claude", "ta", 10), t0)
	b, _ := f.adopt(newLink(t, adoptedB, "lb", "claude", "tb", 10), t0)
	c, _ := f.adopt(newLink(t, adoptedC, "lc", "claude", "tc", 10), t0)
	// b is adopted again (same source) after the check read it.
	f.adopt(newLink(t, adoptedB, "lb2", "claude", "tb", 0), t0.Add(time.Second))
	at := t0.Add(time.Minute)
	got := f.settle(
		awareness.UpstreamCheck{Expect: a, Marker: 30, CheckedAt: at},
		awareness.UpstreamCheck{Expect: b, Marker: 30, CheckedAt: at},
		awareness.UpstreamCheck{Expect: c, Marker: 10, ConsecutiveMisses: 1, BlockedReason: "upstream not found", CheckedAt: at},
	)
	if d := cmp.Diff([]bool{true, false, true}, got); d != "" {
		t.Errorf("applied (-want +got):\n%s", d)
	}
	if l := f.mustLink(adoptedA); l.Marker != 30 || !l.LastCheckedAt.Equal(at) || l.BlockedReason != "" {
		t.Errorf("a = %+v", l)
	}
	if l := f.mustLink(adoptedB); l.Marker != 10 || !l.LastCheckedAt.IsZero() {
		t.Errorf("b = %+v, want untouched", l)
	}
	if l := f.mustLink(adoptedC); l.Marker != 10 || l.ConsecutiveMisses != 1 || l.BlockedReason != "upstream not found" {
		t.Errorf("c = %+v", l)
	}
	// A second settlement from the same read no longer matches.
	if got := f.settle(awareness.UpstreamCheck{Expect: c, Marker: 10, ConsecutiveMisses: 1, CheckedAt: at}); got[0] {
		t.Errorf("a settlement from a stale read applied")
	}
	if got, err := f.us.SettleUpstream(f.ctx, nil); err != nil || len(got) != 0 {
		t.Errorf("SettleUpstream(nil) = %v, %v", got, err)
	}
}

func testMarkerForward(t *testing.T, f *upFixture) {
	l, _ := f.adopt(newLink(t, adoptedA, "l1", "claude", "t1", 10), t0)
	_, err := f.us.SettleUpstream(f.ctx, []awareness.UpstreamCheck{{Expect: l, Marker: 9, CheckedAt: t0}})
	if awareness.ErrorCode(err) != awareness.EINVALID {
		t.Errorf("a backwards marker = %v, want INVALID_ARGUMENT", err)
	}
	if got := f.mustLink(adoptedA).Marker; got != 10 {
		t.Errorf("marker = %d", got)
	}
}

func testForgetUnwatched(t *testing.T, f *upFixture) {
	a, _ := f.adopt(newLink(t, adoptedA, "la", "claude", "ta", 0), t0)
	b, _ := f.adopt(newLink(t, adoptedB, "lb", "claude", "tb", 0), t0)
	f.watch(watcherW, adoptedA, t0)
	f.settle(awareness.UpstreamCheck{Expect: a, ConsecutiveMisses: 2, CheckedAt: t0},
		awareness.UpstreamCheck{Expect: b, ConsecutiveMisses: 2, CheckedAt: t0})
	n, err := f.us.ForgetUnwatchedMisses(f.ctx)
	if err != nil || n != 1 {
		t.Errorf("ForgetUnwatchedMisses = %d, %v; want 1", n, err)
	}
	if got := f.mustLink(adoptedA).ConsecutiveMisses; got != 2 {
		t.Errorf("watched link's misses = %d, want 2", got)
	}
	if got := f.mustLink(adoptedB).ConsecutiveMisses; got != 0 {
		t.Errorf("unwatched link's misses = %d, want 0", got)
	}
}

func testOwnPrompts(t *testing.T, f *upFixture) {
	r := ref(t, adoptedA)
	if ok, err := f.us.AddOwnPrompt(f.ctx, r, "h0", t0, 3); err != nil || ok {
		t.Errorf("AddOwnPrompt without a link = %v, %v; want false", ok, err)
	}
	f.adopt(newLink(t, adoptedA, "l1", "claude", "t1", 0), t0)
	f.adopt(newLink(t, adoptedB, "l2", "claude", "t2", 0), t0)
	for i := range 5 {
		if ok, err := f.us.AddOwnPrompt(f.ctx, r, fmt.Sprintf("h%d", i), t0, 3); err != nil || !ok {
			t.Fatalf("AddOwnPrompt = %v, %v", ok, err)
		}
	}
	if _, err := f.us.AddOwnPrompt(f.ctx, ref(t, adoptedB), "hb", t0, 3); err != nil {
		t.Fatal(err)
	}
	got, err := f.us.OwnPrompts(f.ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"h2", "h3", "h4"}, got); d != "" {
		t.Errorf("OwnPrompts (-want +got):\n%s", d)
	}
	if got, _ := f.us.OwnPrompts(f.ctx, ref(t, adoptedB)); !slices.Equal(got, []string{"hb"}) {
		t.Errorf("other session's prompts = %v", got)
	}
	// Concurrent reports for one session all land and keep the window.
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			if _, err := f.us.AddOwnPrompt(f.ctx, r, fmt.Sprintf("c%d", i), t0, 3); err != nil {
				t.Errorf("AddOwnPrompt: %v", err)
			}
		})
	}
	wg.Wait()
	if got, _ := f.us.OwnPrompts(f.ctx, r); len(got) != 3 {
		t.Errorf("window after concurrent reports = %v, want 3 hashes", got)
	}
}

func testSalt(t *testing.T, f *upFixture) {
	var (
		wg    sync.WaitGroup
		salts = make([][]byte, 4)
	)
	for i := range salts {
		wg.Go(func() {
			s, err := f.us.UpstreamSalt(f.ctx)
			if err != nil {
				t.Errorf("UpstreamSalt: %v", err)
			}
			salts[i] = s
		})
	}
	wg.Wait()
	if len(salts[0]) < 16 {
		t.Fatalf("salt is %d bytes, want at least 16", len(salts[0]))
	}
	for _, s := range salts[1:] {
		if !slices.Equal(s, salts[0]) {
			t.Errorf("salts differ: %x vs %x", s, salts[0])
		}
	}
}

func testDeleteSessionDeletesLink(t *testing.T, f *upFixture) {
	r := ref(t, adoptedA)
	f.adopt(newLink(t, adoptedA, "l1", "claude", "t1", 0), t0)
	if _, err := f.us.AddOwnPrompt(f.ctx, r, "h", t0, 3); err != nil {
		t.Fatal(err)
	}
	ne, err := awareness.ValidateRecord(awareness.RecordInput{SessionKey: adoptedA, Kind: awareness.Adopted, ActorType: awareness.ActorSystem}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.s.Append(f.ctx, []*awareness.AppendOp{awareness.NewAppendOp(ne, t0)}); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := deleteSession(f.ctx, f.s, r, t0); err != nil || !ok {
		t.Fatalf("DeleteSession = %v, %v", ok, err)
	}
	if _, ok := f.link(adoptedA); ok {
		t.Errorf("WAT-5: the upstream link survived DeleteSession")
	}
	if got, _ := f.us.OwnPrompts(f.ctx, r); len(got) != 0 {
		t.Errorf("own prompts after DeleteSession = %v", got)
	}
}

// testRecordedEnd: the activity event of a byte range is found by the link and the
// range's start, and by nothing else (another link, another start, another session,
// a key that only looks alike).
func testRecordedEnd(t *testing.T, f *upFixture) {
	a, c := ref(t, adoptedA), ref(t, adoptedC)
	rec := func(r awareness.SessionRef, key string) {
		t.Helper()
		in := awareness.RecordInput{SessionKey: r.Key, AgentID: &r.AgentID, Kind: awareness.HumanDirectMessage,
			ActorType: awareness.ActorHuman, DedupeKey: &key}
		ne, err := awareness.ValidateRecord(in, t0)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.s.Append(f.ctx, []*awareness.AppendOp{awareness.NewAppendOp(ne, t0)}); err != nil {
			t.Fatal(err)
		}
	}
	rec(a, awareness.UpstreamDedupeKey("l1", 100, 250))
	rec(a, awareness.UpstreamDedupeKey("l1", 250, 300))
	rec(a, "upstream:l1:1000-x")                        // not a range
	rec(a, "upstream:l1:10-")                           // no end
	rec(c, awareness.UpstreamDedupeKey("l1", 300, 400)) // another session
	for _, tt := range []struct {
		ref   awareness.SessionRef
		link  string
		start int64
		end   int64
		ok    bool
	}{
		{a, "l1", 100, 250, true},
		{a, "l1", 250, 300, true},
		{a, "l1", 300, 0, false},
		{a, "l1", 10, 0, false},
		{a, "l1", 1000, 0, false},
		{a, "l1", 1, 0, false}, // "upstream:l1:1-" is not a prefix of "upstream:l1:100-250"
		{a, "l2", 100, 0, false},
		{c, "l1", 300, 400, true},
		{c, "l1", 100, 0, false},
	} {
		end, ok, err := f.us.UpstreamRecordedEnd(f.ctx, tt.ref, tt.link, tt.start)
		if err != nil || ok != tt.ok || end != tt.end {
			t.Errorf("UpstreamRecordedEnd(%s, %s, %d) = %d %v %v, want %d %v", tt.ref.Key, tt.link, tt.start, end, ok, err, tt.end, tt.ok)
		}
	}
}
