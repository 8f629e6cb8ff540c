package awareness_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

func newRegistryService(t *testing.T) (*awareness.Service, *memStore, *clock) {
	t.Helper()
	store := newMemStore()
	hub := awareness.NewHub()
	t.Cleanup(func() {
		hub.Close()
		store.Close()
	})
	clk := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	return awareness.NewService(awareness.Config{Store: store, Hub: hub, Now: clk.Now}), store, clk
}

func regPtrOf[T any](v T) *T { return &v }

// regSnapshot is everything a rejected import could have touched.
type regSnapshot struct {
	Stats    awareness.Stats
	Sessions []awareness.Session
}

func takeRegSnapshot(t *testing.T, store *memStore) regSnapshot {
	t.Helper()
	st, err := store.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ss, err := store.ListSessions(t.Context(), awareness.SessionQuery{})
	if err != nil {
		t.Fatal(err)
	}
	return regSnapshot{st, ss}
}

func TestREG2MalformedImportChangesNothing(t *testing.T) {
	svc, store, _ := newRegistryService(t)
	ctx := t.Context()
	fixture, err := os.ReadFile(filepath.Join("..", "..", "testdata", "sessions.json"))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := svc.ImportSessions(ctx, "main", fixture); err != nil || n != 13 {
		t.Fatalf("import fixture: %d %v, want 13 nil", n, err)
	}
	if _, err := svc.RecordEvent(ctx, awareness.RecordInput{SessionKey: "agent:main:main", Kind: awareness.Compacted, ActorType: awareness.ActorSystem}); err != nil {
		t.Fatal(err)
	}
	before := takeRegSnapshot(t, store)
	for name, doc := range map[string]string{
		// The first entries are valid: they must not be half-imported.
		"bad key":       `{"agent:main:new1": {"sessionId": "n1"}, "agent:main:main": {"sessionId": "changed"}, "agent:main:": {}}`,
		"wrong type":    `{"agent:main:new1": {"sessionId": "n1"}, "agent:main:main": {"contextTokens": "many"}}`,
		"truncated":     `{"agent:main:new1": {"sessionId": "n1"}, "agent:main:main": {"sessionId": "chan`,
		"other agent":   `{"agent:main:new1": {}, "agent:ops:main": {}}`,
		"not an object": `["agent:main:new1"]`,
	} {
		n, err := svc.ImportSessions(ctx, "main", []byte(doc))
		if awareness.ErrorCode(err) != awareness.EINVALID || n != 0 {
			t.Errorf("%s: got %d %v, want 0 INVALID_ARGUMENT", name, n, err)
		}
	}
	if diff := cmp.Diff(before, takeRegSnapshot(t, store)); diff != "" {
		t.Errorf("a rejected import changed the database (-before +after):\n%s", diff)
	}
}

func TestREG3CompactionBookkeepingThroughService(t *testing.T) {
	svc, _, _ := newRegistryService(t)
	ctx := t.Context()
	const key = "agent:main:main"
	policy := func() (awareness.CompactionPolicy, error) {
		return svc.CompactionPolicy(ctx, awareness.CompactionQuery{SessionKey: key, ContextWindow: 200000,
			ReserveTokens: awareness.DefaultReserveTokens, SoftThresholdTokens: awareness.DefaultSoftThresholdTokens})
	}
	compacted := func(dedupe string) {
		t.Helper()
		in := awareness.RecordInput{SessionKey: key, Kind: awareness.Compacted, ActorType: awareness.ActorSystem}
		if dedupe != "" {
			in.DedupeKey = &dedupe
		}
		if _, err := svc.RecordEvent(ctx, in); err != nil {
			t.Fatal(err)
		}
	}

	// Unknown, then logged but not registered: NOT_FOUND.
	if _, err := policy(); awareness.ErrorCode(err) != awareness.ENOTFOUND {
		t.Errorf("policy of an unknown session: %v, want NOT_FOUND", err)
	}
	compacted("c1")
	if _, err := policy(); awareness.ErrorCode(err) != awareness.ENOTFOUND {
		t.Errorf("policy of an unregistered session: %v, want NOT_FOUND", err)
	}
	if _, err := svc.RecordMemoryFlush(ctx, key, nil); awareness.ErrorCode(err) != awareness.ENOTFOUND {
		t.Errorf("flush of an unregistered session: %v, want NOT_FOUND", err)
	}
	st, err := svc.SessionStatus(ctx, key, nil, nil, nil)
	if err != nil || st.Session != nil {
		t.Errorf("sessionStatus of an unregistered session: session %+v err %v, want nil", st.Session, err)
	}

	s, err := svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: key, Entry: awareness.SessionEntry{ContextTokens: regPtrOf[int64](181000)}})
	if err != nil || s.CompactionCount != 1 || s.Kind != awareness.KindMain {
		t.Fatalf("upsert: %+v %v", s, err)
	}
	st, err = svc.SessionStatus(ctx, key, nil, nil, nil)
	if err != nil || st.Session == nil || *st.Session.Entry.ContextTokens != 181000 {
		t.Errorf("sessionStatus of a registered session: %+v %v, want its entry", st.Session, err)
	}
	p, err := policy()
	if err != nil || !p.MemoryFlushDue || p.CompactionDue || p.CompactionCount != 1 {
		t.Fatalf("before the flush: %+v %v, want flush due, compaction not, count 1", p, err)
	}
	s, err = svc.RecordMemoryFlush(ctx, key, nil)
	if err != nil || s.Entry.MemoryFlushAt == nil || *s.Entry.MemoryFlushCompactionCount != 1 {
		t.Fatalf("flush: %+v %v", s, err)
	}
	if p, _ := policy(); p.MemoryFlushDue {
		t.Errorf("flush due again in the same cycle")
	}
	compacted("c1") // deduplicated: not a new cycle
	if p, _ := policy(); p.MemoryFlushDue || p.CompactionCount != 1 {
		t.Errorf("a deduplicated compacted started a new cycle: %+v", p)
	}
	compacted("c2")
	if p, _ := policy(); !p.MemoryFlushDue || p.CompactionCount != 2 {
		t.Errorf("after the next compaction: %+v, want flush due and count 2", p)
	}
	if _, err := svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: key, Entry: awareness.SessionEntry{ContextTokens: regPtrOf[int64](190000)}}); err != nil {
		t.Fatal(err)
	}
	if p, _ := policy(); !p.CompactionDue {
		t.Errorf("compaction not due at 190000 of 200000-16384")
	}
	for _, q := range []awareness.CompactionQuery{
		{SessionKey: key, ContextWindow: 1000, ReserveTokens: 1000},
		{SessionKey: key, ContextWindow: -5},
		{SessionKey: "agent:main:", ContextWindow: 1000},
	} {
		if _, err := svc.CompactionPolicy(ctx, q); awareness.ErrorCode(err) != awareness.EINVALID {
			t.Errorf("CompactionPolicy(%+v): %v, want INVALID_ARGUMENT", q, err)
		}
	}
}
