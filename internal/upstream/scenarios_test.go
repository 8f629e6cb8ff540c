package upstream_test

// Scenario tests of the upstream monitor (SPEC §6) replaying the OpenClaw acceptance
// checklist, reference openclaw-awareness.md §8 groups F and G, where it applies.
//
// Mapping: OpenClaw's "tick" is one Monitor.RunOnce; its provider outcome list is
// one DirCatalog.Scan per link; its in-memory missing counters are the link row's
// consecutive_misses (durable here).
//
// Not applicable (no test): F41, F42, F50, F53, F54 (embedded runs, session entries
// and sessionIds belong to the gateway; this service has no run state to defer on),
// G61 (the exact-key read cache: this store has none; every read goes to the
// database). F51 is TestScenarioF51; F58 uses a real SQL trigger; the store-level G
// scenarios (G62–G64, G66) also run in the conformance suite (storetest.RunUpstream).

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	_ "github.com/mattn/go-sqlite3"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/upstream"
)

// openRaw opens a second connection to the database file, as another process would.
func openRaw(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite3", "file:"+path+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func TestScenarioF39_WatchedLinkRecordsOnceAndAdvancesOverTwoTicks(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("watched")
	e.write("unwatched", userLine("history"))
	e.adopt(otherKey, "unwatched")

	e.write("watched", userLine("hi from the terminal"))
	e.write("unwatched", userLine("nobody watches this"))
	e.cycle()
	e.cycle()
	evs := e.eventsOf(adoptedKey, awareness.HumanDirectMessage)
	if len(evs) != 1 {
		t.Fatalf("events over two ticks = %d, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Summary != "human message via claude" || ev.Payload != (awareness.Payload{Channel: catalogID}) {
		t.Errorf("event = %+v", ev)
	}
	if want := fmt.Sprintf("upstream:%s:%d-%d", l.ID, l.Marker, fileSize(t, e.path("watched"))); ev.DedupeKey != want {
		t.Errorf("dedupe key = %q, want %q", ev.DedupeKey, want)
	}
	if got, want := e.mustLink(adoptedKey).Marker, fileSize(t, e.path("watched")); got != want {
		t.Errorf("marker = %d, want %d", got, want)
	}
	if n := e.spies[catalogID].count("unwatched"); n != 0 {
		t.Errorf("unwatched link probed %d times", n)
	}
	if n := len(e.eventsOf(otherKey, awareness.HumanDirectMessage)); n != 0 {
		t.Errorf("unwatched session got %d events", n)
	}
}

func TestScenarioF40_ThreeMissesRecordOneUpstreamMissingAndRemoveLink(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	os.Remove(e.path("t1"))
	for range 3 {
		e.cycle()
	}
	ms := e.eventsOf(adoptedKey, awareness.UpstreamMissing)
	if len(ms) != 1 {
		t.Fatalf("upstream_missing events = %d, want 1", len(ms))
	}
	if m := ms[0]; m.ActorType != awareness.ActorSystem || m.Summary != "upstream missing via claude" ||
		m.Payload != (awareness.Payload{Channel: catalogID}) {
		t.Errorf("event = %+v", m)
	}
	if _, ok := e.link(adoptedKey); ok {
		t.Errorf("link not removed")
	}
	if n := len(e.pending(watcherKey)); n != 1 {
		t.Errorf("pending notices = %d, want 1 (upstream_missing notifies)", n)
	}
	before := e.spies[catalogID].count("t1")
	e.cycle()
	if after := e.spies[catalogID].count("t1"); after != before {
		t.Errorf("a 4th tick probed the removed link")
	}
}

func TestScenarioF43_StopMidProbePublishesNothing(t *testing.T) {
	// The same scenario as TestStopAbortsInFlightCheckAndWaits, through a catalog that
	// answers only after the stop: its answer is dropped.
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	e.write("t1", userLine("late"))
	ctx, cancel := context.WithCancel(e.ctx)
	e.spies[catalogID].onScan = func(context.Context, awareness.ScanRequest) { cancel() }
	if _, err := e.mon.RunOnce(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce = %v, want context.Canceled", err)
	}
	if got := e.mustLink(adoptedKey); got.Marker != l.Marker {
		t.Errorf("marker moved to %d", got.Marker)
	}
	if n := len(e.eventsOf(adoptedKey, awareness.HumanDirectMessage)); n != 0 {
		t.Errorf("events = %d", n)
	}
}

func TestScenarioF44_ActivityResetsConsecutiveMisses(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	content, _ := os.ReadFile(e.path("t1"))
	os.Remove(e.path("t1"))
	e.cycle() // miss
	e.cycle() // miss
	os.WriteFile(e.path("t1"), append(content, userLine("back")...), 0o644)
	if st := e.cycle(); st.Events != 1 { // activity
		t.Fatalf("activity tick: %+v", st)
	}
	os.Remove(e.path("t1"))
	e.cycle() // miss
	e.cycle() // miss
	if got := e.mustLink(adoptedKey).ConsecutiveMisses; got != 2 {
		t.Errorf("misses = %d, want 2", got)
	}
	if n := len(e.eventsOf(adoptedKey, awareness.UpstreamMissing)); n != 0 {
		t.Errorf("upstream_missing recorded")
	}
}

func TestScenarioF45_SuccessfulCheckWithoutActivityBreaksStreak(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	content, _ := os.ReadFile(e.path("t1"))
	os.Remove(e.path("t1"))
	e.cycle()
	os.WriteFile(e.path("t1"), content, 0o644)
	if st := e.cycle(); st.Events != 0 {
		t.Fatalf("no activity expected: %+v", st)
	}
	if got := e.mustLink(adoptedKey).ConsecutiveMisses; got != 0 {
		t.Errorf("misses = %d, want 0", got)
	}
}

func TestScenarioF46_SameSourceReadoptRestartsStreak(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	content, _ := os.ReadFile(e.path("t1"))
	os.Remove(e.path("t1"))
	e.cycle()
	e.cycle()
	// The thread comes back long enough to be adopted again (same source).
	os.WriteFile(e.path("t1"), content, 0o644)
	e.adopt(adoptedKey, "t1")
	os.Remove(e.path("t1"))
	e.cycle()
	if got := e.mustLink(adoptedKey).ConsecutiveMisses; got != 1 {
		t.Errorf("misses = %d, want 1: the re-adoption restarted the streak", got)
	}
}

func TestScenarioF46_SourceChangingAdoptionDuringScanAbortsRecordAndDelete(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	e.write("t2", userLine("another thread"))
	os.Remove(e.path("t1"))
	e.cycle()
	e.cycle()
	spy := e.spies[catalogID]
	spy.onScan = func(context.Context, awareness.ScanRequest) {
		spy.onScan = nil
		e.adopt(adoptedKey, "t2") // a different source, mid-scan
	}
	e.cycle()
	if n := len(e.eventsOf(adoptedKey, awareness.UpstreamMissing)); n != 0 {
		t.Errorf("upstream_missing recorded for a replaced link")
	}
	l := e.mustLink(adoptedKey)
	if l.ThreadID != "t2" || l.ConsecutiveMisses != 0 {
		t.Errorf("link = %+v, want the new t2 link untouched", l)
	}
}

func TestScenarioF47_UnwatchedLinkForgetsItsStreak(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	os.Remove(e.path("t1"))
	e.cycle()
	e.cycle()
	if _, err := e.svc.Unwatch(e.ctx, watcherKey, adoptedKey, nil); err != nil {
		t.Fatal(err)
	}
	e.cycle()
	if got := e.mustLink(adoptedKey).ConsecutiveMisses; got != 0 {
		t.Fatalf("misses of an unwatched link = %d, want 0", got)
	}
	e.watch(watcherKey, adoptedKey)
	e.cycle()
	if n := len(e.eventsOf(adoptedKey, awareness.UpstreamMissing)); n != 0 {
		t.Errorf("upstream_missing on the first miss after re-watching")
	}
	if got := e.mustLink(adoptedKey).ConsecutiveMisses; got != 1 {
		t.Errorf("misses = %d, want 1", got)
	}
}

func TestScenarioF48_SkewedTranscriptTimeIsClamped(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	e.write("t1", userLineAt("from a skewed clock", e.clk.Now().Add(-72*time.Hour)))
	e.cycle()
	evs := e.eventsOf(adoptedKey, awareness.HumanDirectMessage)
	if len(evs) != 1 {
		t.Fatalf("events = %d", len(evs))
	}
	ev := evs[0]
	if got, want := ev.OccurredAt, ev.RecordedAt.Add(-awareness.MaxClockSkew); !got.Equal(want) {
		t.Errorf("occurredAt = %v, want recordedAt−24h = %v", got, want)
	}
	c, _ := e.svc.Watches(e.ctx, ptr(watcherKey), ptr(adoptedKey), nil)
	if len(c) != 1 || !c[0].UpdatedAt.Equal(ev.RecordedAt) {
		t.Errorf("cursor = %+v, want updatedAt = the service's now %v", c, ev.RecordedAt)
	}
}

func ptr[T any](v T) *T { return &v }

func TestScenarioF49_LinkRefreshedMidScanRecordsNothing(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	e.write("t1", userLine("typed during a refresh"))
	spy := e.spies[catalogID]
	spy.onScan = func(context.Context, awareness.ScanRequest) {
		spy.onScan = nil
		e.adopt(adoptedKey, "t1") // same source: the link is refreshed, its marker kept
	}
	if st := e.cycle(); st.Events != 0 {
		t.Fatalf("a scan of a refreshed link recorded %d events", st.Events)
	}
	if got := e.mustLink(adoptedKey).Marker; got != l.Marker {
		t.Errorf("marker = %d, want the refreshed value %d", got, l.Marker)
	}
	if st := e.cycle(); st.Events != 1 {
		t.Errorf("next tick: %+v, want the activity recorded", st)
	}
}

func TestScenarioF51_CoalescedBurstKeepsTurns3(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	e.write("t1", userLine("one")+assistantLine("ok")+userLine("two")+toolResultLine()+userBlocks("three"))
	if st := e.cycle(); st.Events != 1 {
		t.Fatalf("stats = %+v", st)
	}
	evs := e.eventsOf(adoptedKey, awareness.HumanDirectMessage)
	if len(evs) != 1 || evs[0].Payload.Turns != 3 {
		t.Fatalf("events = %+v, want one with turns 3", evs)
	}
	if n := len(e.pending(watcherKey)); n != 1 {
		t.Errorf("pending = %d, want 1", n)
	}
}

func TestScenarioF52_OneCatalogFailingDoesNotBlockOthers(t *testing.T) {
	e := newEnv(t, withCatalogs("codex"))
	e.adoptedWatched("t1")
	e.writeIn("codex", "c1", userLine("history"))
	e.adoptFrom("codex", otherKey, "c1")
	e.watch(watcherKey, otherKey)
	e.spies[catalogID].fail = awareness.Unavailable(errors.New("provider down"))
	e.write("t1", userLine("lost for now"))
	e.writeIn("codex", "c1", userLine("codex prompt"))
	st := e.cycle()
	if st.Errors != 1 || st.Events != 1 {
		t.Fatalf("stats = %+v, want 1 error and 1 event", st)
	}
	if n := len(e.eventsOf(otherKey, awareness.HumanDirectMessage)); n != 1 {
		t.Errorf("codex events = %d, want 1", n)
	}
	if l := e.mustLink(adoptedKey); l.BlockedReason == "" || l.ConsecutiveMisses != 0 {
		t.Errorf("failing link = %+v, want a reason and no miss (inconclusive)", l)
	}
	e.spies[catalogID].fail = nil
	if st := e.cycle(); st.Events != 1 {
		t.Errorf("after recovery: %+v", st)
	}
	if l := e.mustLink(adoptedKey); l.BlockedReason != "" {
		t.Errorf("blockedReason = %q after a good check", l.BlockedReason)
	}
}

func TestScenarioF55_DecoratedOwnPromptIsEcho(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	e.ownPrompt(adoptedKey, " exact   decorated prompt ")
	e.write("t1", userLine("exact decorated prompt"))
	if st := e.cycle(); st.Events != 0 {
		t.Fatalf("echo recorded: %+v", st)
	}
	if got, want := e.mustLink(adoptedKey).Marker, fileSize(t, e.path("t1")); got != want {
		t.Errorf("marker = %d, want %d", got, want)
	}
}

func TestScenarioF56_PromptFromCatalogHistoryIsNotOwnText(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1") // history holds "old history prompt"
	e.write("t1", userLine("old history prompt"))
	if st := e.cycle(); st.Events != 1 {
		t.Errorf("a repeat of a history prompt: %+v, want external activity", st)
	}
}

func TestScenarioF57_ExternalPromptRightAfterOwnActivityIsRecorded(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	e.ownPrompt(adoptedKey, "gateway prompt")
	e.write("t1", userLine("gateway prompt")+assistantLine("sure")+userLine("human follow-up five seconds later"))
	e.cycle()
	evs := e.eventsOf(adoptedKey, awareness.HumanDirectMessage)
	if len(evs) != 1 || evs[0].Payload.Turns != 0 {
		t.Errorf("events = %+v, want one single-turn event (no time heuristic)", evs)
	}
}

func TestScenarioF58_InsertFailureBySQLTriggerKeepsMarker(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	db := openRaw(t, e.dbPath)
	if _, err := db.Exec(`CREATE TRIGGER fail_human BEFORE INSERT ON events WHEN NEW.kind = 'human_direct_message'
BEGIN SELECT RAISE(ABORT, 'injected'); END`); err != nil {
		t.Fatal(err)
	}
	e.write("t1", userLine("blocked by a trigger"))
	if st := e.cycle(); st.Errors != 1 || st.Events != 0 {
		t.Fatalf("stats = %+v", st)
	}
	if got := e.mustLink(adoptedKey).Marker; got != l.Marker {
		t.Fatalf("marker = %d, want %d", got, l.Marker)
	}
	if _, err := db.Exec("DROP TRIGGER fail_human"); err != nil {
		t.Fatal(err)
	}
	e.cycle()
	e.cycle()
	if n := len(e.eventsOf(adoptedKey, awareness.HumanDirectMessage)); n != 1 {
		t.Errorf("events = %d, want 1", n)
	}
}

func TestScenarioF59_OneSettlementFailingOthersSettle(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	e.write("t2", userLine("history"))
	l2 := e.adopt(otherKey, "t2")
	e.watch(watcherKey, otherKey)
	e.write("t1", assistantLine("x"))
	e.write("t2", assistantLine("y"))
	// t1's link is refreshed while t2 is scanned (t1 sorts first): t1's settlement
	// no longer matches, t2's still does.
	spy := e.spies[catalogID]
	spy.onScan = func(_ context.Context, req awareness.ScanRequest) {
		if req.ThreadID == "t2" {
			spy.onScan = nil
			e.adopt(adoptedKey, "t1")
		}
	}
	e.cycle()
	if got, want := e.mustLink(otherKey).Marker, fileSize(t, e.path("t2")); got != want || got == l2.Marker {
		t.Errorf("t2 marker = %d, want %d", got, want)
	}
	if got := e.mustLink(adoptedKey); !got.LastCheckedAt.IsZero() {
		t.Errorf("t1 settled despite its refresh: %+v", got)
	}
	e.cycle()
	if got, want := e.mustLink(adoptedKey).Marker, fileSize(t, e.path("t1")); got != want {
		t.Errorf("t1 marker after the next tick = %d, want %d", got, want)
	}
}

func TestScenarioF60_AbortBeforeDiscoveryProbesNothing(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	os.Remove(e.path("t1"))
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := e.mon.RunOnce(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce = %v", err)
	}
	if n := e.spies[catalogID].count("t1"); n != 0 {
		t.Errorf("probed %d times", n)
	}
	if got := e.mustLink(adoptedKey).ConsecutiveMisses; got != 0 {
		t.Errorf("misses = %d, want untouched", got)
	}
}

func TestScenarioG63_WatchedListingHasEachLinkOnce(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	e.watch("agent:ops:main", adoptedKey) // a second watcher
	if st := e.cycle(); st.Links != 1 || st.Checked != 1 {
		t.Errorf("stats = %+v, want the link once", st)
	}
}

func TestScenarioG65_SameSourceKeepsMarkerChangedSourceRebases(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	e.write("t1", userLine("pending activity"))
	if again := e.adopt(adoptedKey, "t1"); again.Marker != l.Marker || again.ID != l.ID {
		t.Errorf("same source: %+v, want marker %d kept", again, l.Marker)
	}
	e.write("t2", userLine("other thread history"))
	moved := e.adopt(adoptedKey, "t2")
	if moved.ID == l.ID || moved.Marker != fileSize(t, e.path("t2")) {
		t.Errorf("changed source: %+v, want a new link at the end of t2", moved)
	}
}

func TestScenarioG66_FreshDatabaseDiscoversNothing(t *testing.T) {
	e := newEnv(t)
	if st := e.cycle(); st != (upstream.CycleStats{}) {
		t.Errorf("stats = %+v, want zero", st)
	}
	links, err := e.svc.UpstreamLinks(e.ctx, nil)
	if err != nil || len(links) != 0 {
		t.Errorf("UpstreamLinks = %v, %v", links, err)
	}
}

// The activity of a cycle is committed in one transaction; when that fails, each
// event is tried alone, so a link whose insert fails does not hold back the others.
func TestScenarioF58_BatchFailureFallsBackToOneByOne(t *testing.T) {
	e := newEnv(t)
	l1 := e.adoptedWatched("t1")
	e.write("t2", userLine("history"))
	e.adopt(otherKey, "t2")
	e.watch(watcherKey, otherKey)
	db := openRaw(t, e.dbPath)
	if _, err := db.Exec(`CREATE TRIGGER fail_one BEFORE INSERT ON events
WHEN NEW.kind = 'human_direct_message' AND NEW.session_key = '` + adoptedKey + `'
BEGIN SELECT RAISE(ABORT, 'injected'); END`); err != nil {
		t.Fatal(err)
	}
	e.write("t1", userLine("fails"))
	e.write("t2", userLine("lands"))
	if st := e.cycle(); st.Events != 1 || st.Errors != 1 {
		t.Fatalf("stats = %+v, want 1 event and 1 error", st)
	}
	if got := e.mustLink(adoptedKey).Marker; got != l1.Marker {
		t.Errorf("failing link's marker = %d, want %d", got, l1.Marker)
	}
	if got, want := e.mustLink(otherKey).Marker, fileSize(t, e.path("t2")); got != want {
		t.Errorf("other link's marker = %d, want %d", got, want)
	}
	if n := len(e.eventsOf(otherKey, awareness.HumanDirectMessage)); n != 1 {
		t.Errorf("other session's events = %d, want 1", n)
	}
}
