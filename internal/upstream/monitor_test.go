package upstream_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/awareness/hubtest"
	"github.com/awareness/awareness/internal/upstream"
)

func TestAdoptSession(t *testing.T) {
	e := newEnv(t)
	history := userLine("typed before adoption") + assistantLine("answer")
	e.write("t1", history+`{"type":"user","message":{"role":"user","content":"half a li`)

	l := e.adopt(adoptedKey, "t1")
	if got, want := l.Marker, int64(len(history)); got != want {
		t.Errorf("marker = %d, want %d (the end of the last complete line: history is not activity)", got, want)
	}
	if l.CatalogID != catalogID || l.ThreadID != "t1" || l.ConsecutiveMisses != 0 || l.ID == "" {
		t.Errorf("link = %+v", l)
	}
	ad := e.eventsOf(adoptedKey, awareness.Adopted)
	if len(ad) != 1 {
		t.Fatalf("adopted events = %d, want 1", len(ad))
	}
	if a := ad[0]; a.Summary != "session adopted via claude" || a.Payload.Channel != catalogID || a.ActorType != awareness.ActorSystem ||
		a.DedupeKey != "adopted:"+l.ID {
		t.Errorf("adopted event = %+v", a)
	}

	// Adopting again from the same source keeps the link and its marker, and records
	// nothing new.
	e.write("t1", "ne\n"+userLine("after"))
	again := e.adopt(adoptedKey, "t1")
	if again.ID != l.ID || again.Marker != l.Marker {
		t.Errorf("re-adoption = %+v, want the same link %s at marker %d", again, l.ID, l.Marker)
	}
	if n := len(e.eventsOf(adoptedKey, awareness.Adopted)); n != 1 {
		t.Errorf("adopted events after re-adoption = %d, want 1", n)
	}

	// Errors, and nothing written by them.
	for _, tt := range []struct {
		name, cat, thread, code string
	}{
		{"unknown catalog", "codex", "t1", awareness.EINVALID},
		{"missing thread", catalogID, "nope", awareness.ENOTFOUND},
		{"path separator", catalogID, "../t1", awareness.EINVALID},
		{"dot dot", catalogID, "a..b", awareness.EINVALID},
		{"backslash", catalogID, `a\b`, awareness.EINVALID},
		{"empty", catalogID, "", awareness.EINVALID},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := e.svc.AdoptSession(e.ctx, otherKey, nil, tt.cat, tt.thread)
			if got := awareness.ErrorCode(err); got != tt.code {
				t.Errorf("code = %q (%v), want %s", got, err, tt.code)
			}
			if _, ok := e.link(otherKey); ok {
				t.Errorf("a failed adoption left a link")
			}
		})
	}
	if n := len(e.events(otherKey)); n != 0 {
		t.Errorf("failed adoptions recorded %d events", n)
	}
}

func TestHumanPromptUpstreamRecordsOneEventAndNotifiesWatcher(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	sub := hubtest.Notices(e.svc.Hub(), watcherKey)
	defer sub.Unsubscribe()

	e.write("t1", userLine("please also update the docs"))
	st := e.cycle()
	if st.Events != 1 || st.Checked != 1 {
		t.Errorf("stats = %+v, want 1 checked, 1 event", st)
	}
	evs := e.eventsOf(adoptedKey, awareness.HumanDirectMessage)
	if len(evs) != 1 {
		t.Fatalf("human_direct_message events = %d, want 1", len(evs))
	}
	ev := evs[0]
	if ev.ActorType != awareness.ActorHuman || ev.Payload.Channel != catalogID || ev.Payload.Turns != 0 ||
		ev.Summary != "human message via claude" {
		t.Errorf("event = %+v", ev)
	}
	if got := drain(sub); len(got) != 1 || got[0].Target.Key != adoptedKey {
		t.Errorf("notices published to the watcher = %+v, want 1 on %s", got, adoptedKey)
	}
	if got, want := e.mustLink(adoptedKey).Marker, fileSize(t, e.path("t1")); got != want {
		t.Errorf("marker = %d, want %d (end of file)", got, want)
	}
	if l2 := e.mustLink(adoptedKey); l2.LastCheckedAt.IsZero() || l2.BlockedReason != "" || l2.ID != l.ID {
		t.Errorf("link after check = %+v", l2)
	}

	// Nothing new: no event.
	if st := e.cycle(); st.Events != 0 {
		t.Errorf("second cycle recorded %d events", st.Events)
	}
}

func TestOwnPromptEchoAdvancesMarkerWithoutEvent(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	e.ownPrompt(adoptedKey, "Run the   migration\n\tnow ")
	e.write("t1", userBlocks("  Run the migration", "now"))
	if st := e.cycle(); st.Events != 0 {
		t.Errorf("an echo of an own prompt recorded %d events", st.Events)
	}
	if n := len(e.eventsOf(adoptedKey, awareness.HumanDirectMessage)); n != 0 {
		t.Errorf("human events = %d, want 0", n)
	}
	if got, want := e.mustLink(adoptedKey).Marker, fileSize(t, e.path("t1")); got != want {
		t.Errorf("marker = %d, want %d: an echo is classified and passed", got, want)
	}
	if n := len(e.pending(watcherKey)); n != 0 {
		t.Errorf("pending notices = %d, want 0", n)
	}
}

func TestOwnPromptWindowKeepsTen(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	for i := range 11 {
		e.ownPrompt(adoptedKey, "prompt "+strings.Repeat("x", i))
	}
	ref, _ := awareness.ResolveSession(adoptedKey, nil)
	hashes, err := e.store.OwnPrompts(e.ctx, ref)
	if err != nil || len(hashes) != awareness.OwnPromptWindow {
		t.Fatalf("OwnPrompts = %d, %v; want %d", len(hashes), err, awareness.OwnPromptWindow)
	}
	// The oldest fell out of the window: its echo is external again.
	e.write("t1", userLine("prompt ")+userLine("prompt x"))
	e.cycle()
	if evs := e.eventsOf(adoptedKey, awareness.HumanDirectMessage); len(evs) != 1 || evs[0].Payload.Turns != 0 {
		t.Errorf("events = %+v, want one single-turn event (the 11th-last prompt only)", evs)
	}
	// Empty text and unadopted sessions keep nothing.
	if ok, err := e.svc.RecordOwnPrompt(e.ctx, adoptedKey, nil, " \n\t "); ok || err != nil {
		t.Errorf("RecordOwnPrompt(blank) = %v, %v; want false, nil", ok, err)
	}
	if ok, err := e.svc.RecordOwnPrompt(e.ctx, otherKey, nil, "hello"); ok || err != nil {
		t.Errorf("RecordOwnPrompt(unadopted) = %v, %v; want false, nil", ok, err)
	}
}

func TestNonHumanLinesRecordNothing(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	e.write("t1", toolResultLine()+assistantLine("done")+metaLine("<command-name>/clear</command-name>")+
		"{not json\n"+"\n"+
		`{"type":"user","isSidechain":true,"message":{"role":"user","content":"sub-agent task"}}`+"\n"+
		`{"type":"user","message":{"role":"user","content":[{"type":"image","source":{}}]}}`+"\n"+
		`{"type":"summary","summary":"user said things"}`+"\n")
	if st := e.cycle(); st.Events != 0 {
		t.Errorf("non-human lines recorded %d events", st.Events)
	}
	if got, want := e.mustLink(adoptedKey).Marker, fileSize(t, e.path("t1")); got != want {
		t.Errorf("marker = %d, want %d", got, want)
	}
}

func TestPartialLastLineWaits(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	full := userLine("finish the report")
	e.write("t1", full[:10])
	if st := e.cycle(); st.Events != 0 {
		t.Fatalf("a partial line recorded an event")
	}
	if got := e.mustLink(adoptedKey).Marker; got != l.Marker {
		t.Fatalf("marker = %d, want %d: a line without its newline waits", got, l.Marker)
	}
	e.write("t1", full[10:])
	if st := e.cycle(); st.Events != 1 {
		t.Errorf("the completed line recorded %d events, want 1", st.Events)
	}
}

func TestMissingFileRecordsUpstreamMissingOnThirdCheck(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	sub := hubtest.Notices(e.svc.Hub(), watcherKey)
	defer sub.Unsubscribe()
	if err := os.Remove(e.path("t1")); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if st := e.cycle(); st.Missing != 0 {
			t.Fatalf("check %d recorded upstream_missing", i)
		}
		if got := e.mustLink(adoptedKey); got.ConsecutiveMisses != i || got.BlockedReason == "" {
			t.Fatalf("after check %d: link = %+v, want %d misses and a reason", i, got, i)
		}
	}
	if n := len(drain(sub)); n != 0 {
		t.Fatalf("notices before the third miss = %d", n)
	}
	if st := e.cycle(); st.Missing != 1 {
		t.Fatalf("third check: stats = %+v, want 1 missing", st)
	}
	if _, ok := e.link(adoptedKey); ok {
		t.Errorf("link still there after upstream_missing")
	}
	ms := e.eventsOf(adoptedKey, awareness.UpstreamMissing)
	if len(ms) != 1 || ms[0].ActorType != awareness.ActorSystem || ms[0].Payload.Channel != catalogID ||
		ms[0].DedupeKey != "upstream_missing:"+l.ID {
		t.Fatalf("upstream_missing events = %+v", ms)
	}
	if got := drain(sub); len(got) != 1 {
		t.Errorf("notices to the watcher = %d, want 1", len(got))
	}
	if st := e.cycle(); st.Links != 0 {
		t.Errorf("a removed link was listed again: %+v", st)
	}
}

func TestReadoptAfterMissingCreatesNewLink(t *testing.T) {
	e := newEnv(t)
	old := e.adoptedWatched("t1")
	if err := os.Remove(e.path("t1")); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		e.cycle()
	}
	e.write("t1", userLine("recreated"))
	l := e.adopt(adoptedKey, "t1")
	if l.ID == old.ID || l.ConsecutiveMisses != 0 || l.Marker != fileSize(t, e.path("t1")) {
		t.Errorf("re-adoption = %+v, want a new link at the end of the new file", l)
	}
	if n := len(e.eventsOf(adoptedKey, awareness.Adopted)); n != 2 {
		t.Errorf("adopted events = %d, want 2 (one per link)", n)
	}
	e.write("t1", userLine("hello again"))
	if st := e.cycle(); st.Events != 1 {
		t.Errorf("the new link recorded %d events, want 1", st.Events)
	}
}

func TestMissingStreakBrokenBySuccessRestartsAtZero(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	content, err := os.ReadFile(e.path("t1"))
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(e.path("t1"))
	e.cycle()
	e.cycle()
	if got := e.mustLink(adoptedKey).ConsecutiveMisses; got != 2 {
		t.Fatalf("misses = %d, want 2", got)
	}
	if err := os.WriteFile(e.path("t1"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	e.cycle()
	if got := e.mustLink(adoptedKey); got.ConsecutiveMisses != 0 || got.BlockedReason != "" {
		t.Fatalf("after a successful check: %+v, want 0 misses", got)
	}
	os.Remove(e.path("t1"))
	e.cycle()
	e.cycle()
	if got := e.mustLink(adoptedKey).ConsecutiveMisses; got != 2 {
		t.Errorf("misses = %d, want 2: the streak restarted at zero", got)
	}
	if n := len(e.eventsOf(adoptedKey, awareness.UpstreamMissing)); n != 0 {
		t.Errorf("upstream_missing events = %d, want 0", n)
	}
}

func TestMissingStreakSurvivesRestart(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	os.Remove(e.path("t1"))
	e.cycle()
	e.cycle()
	e.restart()
	if got := e.mustLink(adoptedKey).ConsecutiveMisses; got != 2 {
		t.Fatalf("misses after reopen = %d, want 2", got)
	}
	if st := e.cycle(); st.Missing != 1 {
		t.Errorf("the first check after the restart: %+v, want upstream_missing (third miss)", st)
	}
}

func TestOversizedLineBlocksMarker(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	big := userLine(strings.Repeat("y", 2<<20))
	e.write("t1", big+userLine("after the big line"))
	for i := range 3 {
		st := e.cycle()
		if st.Events != 0 || st.Blocked != 1 {
			t.Fatalf("cycle %d: %+v, want blocked and no event", i, st)
		}
	}
	got := e.mustLink(adoptedKey)
	if got.Marker != l.Marker {
		t.Errorf("marker = %d, want %d: bytes are never skipped", got.Marker, l.Marker)
	}
	if !strings.Contains(got.BlockedReason, "longer than the per-cycle scan limit") {
		t.Errorf("blockedReason = %q", got.BlockedReason)
	}
	if n := len(e.eventsOf(adoptedKey, awareness.HumanDirectMessage)); n != 0 {
		t.Errorf("the prompt after the big line was recorded (%d events): bytes were skipped", n)
	}
	links, err := e.svc.UpstreamLinks(e.ctx, nil)
	if err != nil || len(links) != 1 || links[0].BlockedReason == "" {
		t.Errorf("UpstreamLinks = %+v, %v; want the blocked reason", links, err)
	}
}

func TestLinesBeforeAnOversizedLineAreClassified(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	first := userLine("before the big line")
	e.write("t1", first+userLine(strings.Repeat("z", 2<<20)))
	if st := e.cycle(); st.Events != 1 || st.Blocked != 0 {
		t.Fatalf("first cycle: %+v, want the prompt before the big line", st)
	}
	if got, want := e.mustLink(adoptedKey).Marker, l.Marker+int64(len(first)); got != want {
		t.Errorf("marker = %d, want %d (start of the big line)", got, want)
	}
	if st := e.cycle(); st.Blocked != 1 {
		t.Errorf("second cycle: %+v, want blocked", st)
	}
}

// failingRecorder fails every human_direct_message while fail is set.
type failingRecorder struct {
	next  upstream.Recorder
	fail  atomic.Bool
	calls atomic.Int64
}

func (f *failingRecorder) RecordEvent(ctx context.Context, in awareness.RecordInput) (awareness.RecordResult, error) {
	f.calls.Add(1)
	if f.fail.Load() {
		return awareness.RecordResult{}, awareness.Unavailable(errors.New("injected insert failure"))
	}
	return f.next.RecordEvent(ctx, in)
}

func TestInsertFailureKeepsMarkerAndRetryDoesNotDouble(t *testing.T) {
	rec := &failingRecorder{}
	e := newEnv(t, withRecorder(func(next upstream.Recorder) upstream.Recorder { rec.next = next; return rec }))
	l := e.adoptedWatched("t1")
	e.write("t1", userLine("one")+userLine("two"))

	rec.fail.Store(true)
	if st := e.cycle(); st.Events != 0 || st.Errors != 1 {
		t.Fatalf("failing cycle: %+v", st)
	}
	if got := e.mustLink(adoptedKey).Marker; got != l.Marker {
		t.Fatalf("marker = %d after a failed insert, want %d", got, l.Marker)
	}
	rec.fail.Store(false)
	if st := e.cycle(); st.Events != 1 {
		t.Fatalf("retry: %+v, want 1 event", st)
	}
	if st := e.cycle(); st.Events != 0 {
		t.Fatalf("third cycle recorded again: %+v", st)
	}
	evs := e.eventsOf(adoptedKey, awareness.HumanDirectMessage)
	if len(evs) != 1 || evs[0].Payload.Turns != 2 {
		t.Errorf("events = %+v, want one with turns 2", evs)
	}
}

// UPS-2: a retry after an insert that committed but whose marker was not settled finds
// the recorded range (dedupe key upstream:<link>:<start>-<end>) and records nothing
// again; it settles the marker at the range's end.
func TestRetryAfterCommittedInsertIsNotRecordedAgain_UPS2(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	e.write("t1", userLine("one"))
	e.cycle()
	// Roll the marker back as if the settlement had been lost after the commit.
	forceMarker(t, e, l.Marker)
	if st := e.cycle(); st.Events != 0 || st.Errors != 0 {
		t.Fatalf("retry: %+v, want no event", st)
	}
	if n := len(e.eventsOf(adoptedKey, awareness.HumanDirectMessage)); n != 1 {
		t.Errorf("events = %d, want 1: the retry recorded nothing again", n)
	}
	if got, want := e.mustLink(adoptedKey).Marker, fileSize(t, e.path("t1")); got != want {
		t.Errorf("marker = %d after the retry, want %d", got, want)
	}
}

// forceMarker rewrites the link's marker behind the store's back (a lost settlement).
func forceMarker(t *testing.T, e *env, marker int64) {
	t.Helper()
	db := openRaw(t, e.dbPath)
	if _, err := db.Exec("UPDATE upstream_links SET marker = ?", marker); err != nil {
		t.Fatal(err)
	}
}

func TestUnwatchedLinksAreNeverRead(t *testing.T) {
	e := newEnv(t)
	e.write("watched", userLine("h"))
	e.write("unwatched", userLine("h"))
	e.adopt(adoptedKey, "watched")
	e.adopt(otherKey, "unwatched")
	e.watch(watcherKey, adoptedKey)
	// An unwatched link's file is unreadable and then gone: neither is noticed.
	if err := os.Chmod(e.path("unwatched"), 0); err != nil {
		t.Fatal(err)
	}
	e.write("watched", userLine("new"))
	for range 2 {
		e.cycle()
	}
	os.Remove(e.path("unwatched"))
	for range 4 {
		e.cycle()
	}
	spy := e.spies[catalogID]
	if n := spy.count("unwatched"); n != 0 {
		t.Errorf("the unwatched link was scanned %d times", n)
	}
	if n := spy.count("watched"); n != 6 {
		t.Errorf("the watched link was scanned %d times, want 6", n)
	}
	if l := e.mustLink(otherKey); l.ConsecutiveMisses != 0 || !l.LastCheckedAt.IsZero() {
		t.Errorf("unwatched link = %+v, want untouched", l)
	}
	if n := len(e.events(otherKey)); n != 1 {
		t.Errorf("unwatched session has %d events, want only adopted", n)
	}
}

func TestOwnPromptTextIsNeverStored(t *testing.T) {
	e := newEnv(t)
	e.adoptedWatched("t1")
	const secret = "zebra-quartz-7781 launch codes for the orbital platform"
	e.ownPrompt(adoptedKey, secret)
	e.ownPrompt(adoptedKey, "  "+strings.ToUpper(secret)+"  ")
	e.write("t1", userLine(secret))
	e.cycle()

	check := func(when string) {
		t.Helper()
		for _, suffix := range []string{"", "-wal", "-shm", "-journal"} {
			b, err := os.ReadFile(e.dbPath + suffix)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, needle := range []string{secret, strings.ToUpper(secret), "zebra-quartz", "ZEBRA-QUARTZ"} {
				if bytes.Contains(b, []byte(needle)) {
					t.Errorf("%s: %q occurs in %s", when, needle, "awareness.db"+suffix)
				}
			}
		}
	}
	check("open")
	e.close()
	check("closed")
}

func TestStopAbortsInFlightCheckAndWaits(t *testing.T) {
	// OpenClaw F43: stopping mid-probe joins the probe without publishing anything.
	e := newEnv(t)
	l := e.adoptedWatched("t1")
	e.write("t1", userLine("typed while the monitor stops"))
	entered := make(chan struct{})
	spy := e.spies[catalogID]
	spy.onScan = func(ctx context.Context, _ awareness.ScanRequest) {
		close(entered)
		<-ctx.Done()
	}
	mon, err := upstream.New(upstream.Config{Service: e.svc, FirstCheck: 1, Interval: 1 << 62})
	if err != nil {
		t.Fatal(err)
	}
	mon.Start(e.ctx)
	<-entered
	mon.Stop()
	mon.Stop() // double stop is fine
	spy.onScan = nil
	if got := e.mustLink(adoptedKey); got.Marker != l.Marker || !got.LastCheckedAt.IsZero() {
		t.Errorf("link after an aborted check = %+v, want unchanged", got)
	}
	if n := len(e.eventsOf(adoptedKey, awareness.HumanDirectMessage)); n != 0 {
		t.Errorf("an aborted check recorded %d events", n)
	}
	if n := len(e.pending(watcherKey)); n != 0 {
		t.Errorf("pending notices = %d", n)
	}
}
