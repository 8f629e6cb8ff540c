package upstream_test

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/awareness/awareness/internal/awareness"
)

// injectSettleFault makes every settlement of key's link fail, with a real SQLite
// trigger (as the original's tests inject write faults), until the returned function
// drops it.
func injectSettleFault(t *testing.T, e *env, key string) (clear func()) {
	t.Helper()
	db := openRaw(t, e.dbPath)
	if _, err := db.Exec(fmt.Sprintf(`CREATE TRIGGER settle_fault BEFORE UPDATE ON upstream_links
WHEN NEW.session_key = '%s' BEGIN SELECT RAISE(ABORT, 'injected settlement fault'); END`, key)); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := db.Exec("DROP TRIGGER settle_fault"); err != nil {
			t.Fatal(err)
		}
	}
}

// recordedTurns checks that the human_direct_message events of key tile the byte range
// [from, to) exactly, each range once (its dedupe key upstream:<link>:<start>-<end>),
// and returns how many prompts they record in all.
func recordedTurns(t *testing.T, e *env, key string, l awareness.UpstreamLink, from, to int64) int {
	t.Helper()
	at, turns := from, 0
	for _, ev := range e.eventsOf(key, awareness.HumanDirectMessage) {
		prefix := "upstream:" + l.ID + ":" + strconv.FormatInt(at, 10) + "-"
		end, ok := awareness.ParseUpstreamDedupeEnd(ev.DedupeKey, prefix)
		if !ok {
			t.Fatalf("event %d has dedupe key %q, want a range starting at %d (%s…)", ev.Sequence, ev.DedupeKey, at, prefix)
		}
		at = end
		n := ev.Payload.Turns
		if n == 0 {
			n = 1
		}
		turns += n
	}
	if at != to {
		t.Fatalf("recorded ranges end at %d, want %d", at, to)
	}
	return turns
}

// UPS-2: one link's settlement fails (a database trigger): the other link settles in
// the same cycle; the prompts appended to the failing link while the fault holds are
// all recorded, once each, after it clears — never fewer, never twice.
func TestSettlementFaultOnOneLink_OthersSettle_PromptsRecordedOnce_UPS2(t *testing.T) {
	e := newEnv(t)
	a := e.adoptedWatched("a")
	e.write("b", userLine("old b"))
	b := e.adopt(otherKey, "b")
	e.watch(watcherKey, otherKey)

	clear := injectSettleFault(t, e, adoptedKey)
	e.write("a", userLine("a1")+userLine("a2"))
	e.write("b", userLine("b1"))
	st := e.cycle()
	if st.Events != 2 || st.Errors != 1 {
		t.Fatalf("cycle with the fault: %+v, want 2 events and 1 error (a's settlement)", st)
	}
	if got, want := e.mustLink(otherKey).Marker, fileSize(t, e.path("b")); got != want {
		t.Errorf("b's marker = %d, want %d: settled in the same cycle as a's failure", got, want)
	}
	if lb := e.mustLink(otherKey); lb.LastCheckedAt.IsZero() {
		t.Errorf("b's lastCheckedAt not set")
	}
	if got := e.mustLink(adoptedKey).Marker; got != a.Marker {
		t.Errorf("a's marker = %d, want %d: its settlement failed", got, a.Marker)
	}
	// More prompts while the fault holds; every cycle retries a's settlement.
	e.write("a", userLine("a3"))
	e.cycle()
	e.write("a", userLine("a4")+assistantLine("reply")+userLine("a5"))
	e.write("b", userLine("b2"))
	e.cycle()
	if got, want := e.mustLink(otherKey).Marker, fileSize(t, e.path("b")); got != want {
		t.Errorf("b's marker = %d while a fails, want %d", got, want)
	}
	clear()
	e.cycle()
	e.cycle()
	end := fileSize(t, e.path("a"))
	if got := e.mustLink(adoptedKey).Marker; got != end {
		t.Errorf("a's marker = %d after the fault cleared, want %d", got, end)
	}
	if n := recordedTurns(t, e, adoptedKey, a, a.Marker, end); n != 5 {
		t.Errorf("a's prompts recorded = %d, want 5 (a1..a5, each once)", n)
	}
	if n := recordedTurns(t, e, otherKey, b, b.Marker, fileSize(t, e.path("b"))); n != 2 {
		t.Errorf("b's prompts recorded = %d, want 2", n)
	}
	// The watcher was told once: one pending notice on a.
	var onA int
	for _, n := range e.pending(watcherKey) {
		if n.Target.Key == adoptedKey {
			onA++
		}
	}
	if onA != 1 {
		t.Errorf("pending notices on a = %d, want 1", onA)
	}
}

// UPS-2: the settlement is lost after the event committed (the marker rolled back, as
// after a crash), and prompts were appended meanwhile: the retry records exactly the
// new ones, in a range of its own.
func TestLostSettlementWithNewPrompts_RecordsOnlyTheNewOnes_UPS2(t *testing.T) {
	e := newEnv(t)
	l := e.adoptedWatched("t")
	e.write("t", userLine("one"))
	e.cycle()
	forceMarker(t, e, l.Marker)
	e.write("t", userLine("two")+userLine("three"))
	if st := e.cycle(); st.Events != 1 {
		t.Fatalf("retry: %+v, want 1 event (two, three)", st)
	}
	end := fileSize(t, e.path("t"))
	if n := recordedTurns(t, e, adoptedKey, l, l.Marker, end); n != 3 {
		t.Errorf("prompts recorded = %d, want 3", n)
	}
	if got := e.mustLink(adoptedKey).Marker; got != end {
		t.Errorf("marker = %d, want %d", got, end)
	}
}
