package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

// RunRegistry runs the conformance suite of awareness.RegistryStore (REG-1..3). open
// must return a new, empty store that implements RegistryStore, like Run's.
func RunRegistry(t *testing.T, open func(t *testing.T) awareness.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f *regFixture)
	}{
		{"REG-1_upsert_creates_and_merges", testUpsertMerge},
		{"REG-1_upsert_keeps_head", testUpsertKeepsHead},
		{"REG-1_exact_round_trip", testRegistryRoundTrip},
		{"REG-1_read_status_returns_the_entry", testReadStatusEntry},
		{"REG-2_replace_import", testReplaceImport},
		{"REG-2_batch_atomic", testRegistryBatchAtomic},
		{"REG-2_concurrent_upserts_one_row", testConcurrentUpserts},
		{"REG-2_large_batch_two_agents_repeats", testLargeBatch},
		{"REG-3_compacted_counts_once", testCompactedCounts},
		{"REG-3_memory_flush", testMemoryFlush},
		{"WAT-5_delete_clears_entry_upsert_revives", testDeleteClearsEntry},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			reg, ok := s.(awareness.RegistryStore)
			if !ok {
				t.Fatalf("%T does not implement awareness.RegistryStore", s)
			}
			tt.fn(t, &regFixture{fixture: fixture{t: t, s: s, ctx: t.Context()}, reg: reg})
		})
	}
}

type regFixture struct {
	fixture
	reg awareness.RegistryStore
}

func (f *regFixture) put(now time.Time, ws ...awareness.SessionWrite) []awareness.Session {
	f.t.Helper()
	out, err := f.reg.UpsertSessions(f.ctx, ws, now)
	if err != nil {
		f.t.Fatalf("UpsertSessions: %v", err)
	}
	if len(out) != len(ws) {
		f.t.Fatalf("UpsertSessions returned %d sessions for %d writes", len(out), len(ws))
	}
	return out
}

func (f *regFixture) session(r awareness.SessionRef) awareness.Session {
	f.t.Helper()
	s, ok, err := f.s.Session(f.ctx, r)
	if err != nil || !ok {
		f.t.Fatalf("Session(%v): ok=%v err=%v", r, ok, err)
	}
	return s
}

func regRaw(s string) json.RawMessage { return json.RawMessage(s) }

func regExtra(kv ...string) map[string]json.RawMessage {
	m := map[string]json.RawMessage{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = regRaw(kv[i+1])
	}
	return m
}

// testReadStatusEntry: ReadStatus returns the registry entry as Session does, for a
// registered session with and without a log.
func testReadStatusEntry(t *testing.T, f *regFixture) {
	r := ref(t, parentKey)
	f.put(t0, awareness.SessionWrite{Ref: r, Entry: awareness.SessionEntry{DisplayName: ptr("Main"), Extra: regExtra("subject", `"Ops"`)}})
	if _, sess := f.status(r, 0, 10); sess == nil || !sess.Registered || *sess.Entry.DisplayName != "Main" {
		t.Errorf("registered session without a log: %+v", sess)
	}
	f.append(t0.Add(time.Second), human(parentKey))
	if ch, sess := f.status(r, 0, 10); sess == nil || !sess.Registered || ch.Head.Version != 1 || sess.StateVersion != 1 {
		t.Errorf("registered session with a log: head %+v, session %+v", ch.Head, sess)
	}
}

func testUpsertMerge(t *testing.T, f *regFixture) {
	r := ref(t, "agent:main:telegram:group:-100:topic:7")
	got := f.put(t0, awareness.SessionWrite{Ref: r, Entry: awareness.SessionEntry{
		SessionID: ptr("s1"), ChatType: ptr("group"), ContextTokens: ptr[int64](1000),
		Extra: regExtra("subject", `"Ops"`, "thinkingLevel", `"low"`),
	}})[0]
	want := awareness.Session{
		Ref: r, Kind: awareness.KindGroup, Registered: true, CreatedAt: t0, UpdatedAt: t0,
		Entry: awareness.SessionEntry{SessionID: ptr("s1"), ChatType: ptr("group"), ContextTokens: ptr[int64](1000),
			Extra: regExtra("subject", `"Ops"`, "thinkingLevel", `"low"`)},
	}
	if diff := cmp.Diff(want, got, emptyOK); diff != "" {
		t.Errorf("created (-want +got):\n%s", diff)
	}
	// Nil fields stay; extra merges key by key and null removes a key.
	t1 := t0.Add(time.Minute)
	got = f.put(t1, awareness.SessionWrite{Ref: r, Entry: awareness.SessionEntry{
		Provider: ptr("telegram"), ContextTokens: ptr[int64](2000),
		Extra: regExtra("thinkingLevel", "null", "room", `"#ops"`),
	}})[0]
	want.UpdatedAt = t1
	want.Entry.Provider = ptr("telegram")
	want.Entry.ContextTokens = ptr[int64](2000)
	want.Entry.Extra = regExtra("subject", `"Ops"`, "room", `"#ops"`)
	if diff := cmp.Diff(want, got, emptyOK); diff != "" {
		t.Errorf("merged (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, f.session(r), emptyOK); diff != "" {
		t.Errorf("read back (-want +got):\n%s", diff)
	}
	// Removing the last extra key leaves no extra.
	got = f.put(t1, awareness.SessionWrite{Ref: r, Entry: awareness.SessionEntry{Extra: regExtra("subject", "null", "room", "null")}})[0]
	if got.Entry.Extra != nil {
		t.Errorf("extra after removing every key: got %v, want nil", got.Entry.Extra)
	}
	ss, err := f.s.ListSessions(f.ctx, awareness.SessionQuery{})
	if err != nil || len(ss) != 1 || !ss[0].Registered || *ss[0].Entry.ContextTokens != 2000 {
		t.Errorf("ListSessions: got %+v %v, want the registered session", ss, err)
	}
}

func testUpsertKeepsHead(t *testing.T, f *regFixture) {
	r := ref(t, parentKey)
	f.append(t0, human(parentKey), system(parentKey, awareness.Compacted), human(parentKey))
	f.prune(awareness.RetentionPolicy{MaxRows: 1}, t0)
	before := f.session(r)
	if before.Registered {
		t.Fatalf("a logged session is registered before any upsert")
	}
	got := f.put(t0.Add(time.Second), awareness.SessionWrite{Ref: r, Entry: awareness.SessionEntry{SessionID: ptr("s")}})[0]
	if got.StateVersion != 3 || got.PrunedThrough != 2 || got.CompactionCount != 1 || !got.Registered ||
		!got.CreatedAt.Equal(before.CreatedAt) {
		t.Errorf("upsert on a head: got %+v, want version 3, pruned 2, compactions 1, registered, created kept", got)
	}
	if ch := f.read(r, 0, 10); ch.Head.Version != 3 || len(ch.Events) != 1 {
		t.Errorf("log after upsert: version %d, %d events; want 3 and 1", ch.Head.Version, len(ch.Events))
	}
	// The next append continues the sequence and keeps the entry.
	if op := f.append1(t0.Add(2*time.Second), human(parentKey)); op.Version != 4 {
		t.Errorf("append after upsert: version %d, want 4", op.Version)
	}
	if s := f.session(r); !s.Registered || s.Entry.SessionID == nil || *s.Entry.SessionID != "s" {
		t.Errorf("an append lost the entry: %+v", s)
	}
}

func testRegistryRoundTrip(t *testing.T, f *regFixture) {
	r := ref(t, "cron:nightly", "ops")
	flush := time.UnixMilli(1772363400123).UTC()
	updated := time.UnixMilli(1772366400456).UTC()
	e := awareness.SessionEntry{
		SessionID: ptr("7d2e"), ParentSessionKey: ptr("agent:ops:main"), ChatType: ptr("direct"), Provider: ptr("slack"),
		DisplayName: ptr("Bea \"B\" Ortiz\tü"), InputTokens: ptr[int64](1), OutputTokens: ptr[int64](2),
		TotalTokens: ptr[int64](1 << 52), ContextTokens: ptr[int64](0), MemoryFlushAt: &flush,
		MemoryFlushCompactionCount: ptr[int64](4),
		Extra: regExtra("origin", `{"from":"slack:U1","threadId":"1.2"}`, "tags", `["a","b"]`, "ratio", `2.5`,
			"abortedLastRun", `true`, "unicode", `"ñ€😀"`),
	}
	f.put(t0, awareness.SessionWrite{Ref: r, Entry: e, Replace: true, UpdatedAt: &updated, CompactionCount: ptr[int64](5)})
	want := awareness.Session{Ref: r, Kind: awareness.KindCron, Registered: true, CompactionCount: 5, Entry: e,
		CreatedAt: t0, UpdatedAt: updated}
	if diff := cmp.Diff(want, f.session(r), emptyOK); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	// The same key under another agent is another session (KEY-1).
	if _, ok, _ := f.s.Session(f.ctx, ref(t, "cron:nightly")); ok {
		t.Errorf("cron:nightly of main exists after writing the ops one")
	}
}

func testReplaceImport(t *testing.T, f *regFixture) {
	r := ref(t, childKey)
	old := t0.Add(-time.Hour)
	f.put(t0, awareness.SessionWrite{Ref: r, Replace: true, UpdatedAt: &old, CompactionCount: ptr[int64](2),
		Entry: awareness.SessionEntry{SessionID: ptr("a"), ContextTokens: ptr[int64](9), Extra: regExtra("label", `"x"`, "goal", `"g"`)}})
	s := f.session(r)
	if !s.UpdatedAt.Equal(old) || s.CompactionCount != 2 {
		t.Errorf("new entry: updatedAt %v compactions %d, want %v (as given) and 2", s.UpdatedAt, s.CompactionCount, old)
	}
	// A replace clears what it does not give and keeps the count when it gives none;
	// an older updatedAt does not move a live session's time back.
	older := old.Add(-time.Hour)
	got := f.put(t0.Add(time.Minute), awareness.SessionWrite{Ref: r, Replace: true, UpdatedAt: &older,
		Entry: awareness.SessionEntry{SessionID: ptr("b"), Extra: regExtra("label", `"y"`)}})[0]
	want := awareness.Session{Ref: r, Kind: awareness.KindSubagent, Registered: true, CompactionCount: 2,
		CreatedAt: t0, UpdatedAt: old, Entry: awareness.SessionEntry{SessionID: ptr("b"), Extra: regExtra("label", `"y"`)}}
	if diff := cmp.Diff(want, got, emptyOK); diff != "" {
		t.Errorf("replaced (-want +got):\n%s", diff)
	}
	newer := t0.Add(time.Hour)
	got = f.put(t0.Add(time.Minute), awareness.SessionWrite{Ref: r, Replace: true, UpdatedAt: &newer, CompactionCount: ptr[int64](0)})[0]
	if !got.UpdatedAt.Equal(newer) || got.CompactionCount != 0 || got.Entry.SessionID != nil || got.Entry.Extra != nil {
		t.Errorf("replace with an empty entry: got %+v, want a cleared entry, count 0, updatedAt %v", got, newer)
	}
}

func testRegistryBatchAtomic(t *testing.T, f *regFixture) {
	a, b := ref(t, parentKey), ref(t, childKey)
	f.append1(t0, human(childKey))
	before := f.stats()
	big := `"` + strings.Repeat("x", awareness.MaxExtraBytes) + `"`
	_, err := f.reg.UpsertSessions(f.ctx, []awareness.SessionWrite{
		{Ref: a, Entry: awareness.SessionEntry{SessionID: ptr("a")}},
		{Ref: b, Entry: awareness.SessionEntry{SessionID: ptr("b"), Extra: regExtra("huge", big)}},
	}, t0.Add(time.Minute))
	if code := awareness.ErrorCode(err); code != awareness.EINVALID {
		t.Fatalf("oversized extra: got %v (code %q), want INVALID_ARGUMENT", err, code)
	}
	if _, ok, _ := f.s.Session(f.ctx, a); ok {
		t.Errorf("the first write of a failed batch committed")
	}
	if s := f.session(b); s.Registered {
		t.Errorf("the failed write registered its session")
	}
	if diff := cmp.Diff(before, f.stats()); diff != "" {
		t.Errorf("a failed batch changed Stats (-before +after):\n%s", diff)
	}
	if _, err := f.reg.UpsertSessions(f.ctx, []awareness.SessionWrite{{Entry: awareness.SessionEntry{}}}, t0); awareness.ErrorCode(err) != awareness.EINVALID {
		t.Errorf("empty session ref: got %v, want INVALID_ARGUMENT", err)
	}
	if _, err := f.reg.UpsertSessions(f.ctx, []awareness.SessionWrite{{Ref: a}}, time.Time{}); err == nil {
		t.Errorf("zero now: got nil error")
	}
}

func testConcurrentUpserts(t *testing.T, f *regFixture) {
	r := ref(t, targetKey)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			_, err := f.reg.UpsertSessions(f.ctx, []awareness.SessionWrite{{Ref: r,
				Entry: awareness.SessionEntry{Extra: regExtra("k"+string(rune('a'+i)), "1")}}}, t0)
			if awareness.ErrorCode(err) == awareness.EUNAVAILABLE {
				err = nil // a retryable conflict is a correct answer; the others must merge
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent upsert: %v", err)
		}
	}
	s := f.session(r)
	if !s.Registered || len(s.Entry.Extra) == 0 {
		t.Errorf("after concurrent upserts: %+v", s)
	}
	if st := f.stats(); st.Sessions != 1 {
		t.Errorf("sessions after concurrent upserts of one key: %d, want 1", st.Sessions)
	}
}

func testCompactedCounts(t *testing.T, f *regFixture) {
	r := ref(t, parentKey)
	f.put(t0, awareness.SessionWrite{Ref: r, Entry: awareness.SessionEntry{ContextTokens: ptr[int64](5)}})
	compacted := system(parentKey, awareness.Compacted)
	compacted.DedupeKey = ptr("compaction-1")
	if op := f.append1(t0, compacted); !op.Recorded {
		t.Fatalf("first compacted not recorded")
	}
	if op := f.append1(t0, compacted); op.Recorded {
		t.Fatalf("deduplicated compacted recorded")
	}
	f.append(t0, system(parentKey, awareness.RunCompleted), human(parentKey))
	if got := f.session(r).CompactionCount; got != 1 {
		t.Errorf("compactionCount after one compaction (deduplicated twice) and other kinds: %d, want 1", got)
	}
	second := system(parentKey, awareness.Compacted)
	f.append1(t0, second)
	if s := f.session(r); s.CompactionCount != 2 || !s.Registered || *s.Entry.ContextTokens != 5 {
		t.Errorf("after a second compaction: %+v, want count 2 and the entry kept", s)
	}
	// A failed batch counts nothing.
	bad := f.op(system(parentKey, awareness.Compacted), t0)
	badOp := &awareness.AppendOp{New: bad.New}
	if err := f.s.Append(f.ctx, []*awareness.AppendOp{f.op(system(parentKey, awareness.Compacted), t0), badOp}); err == nil {
		t.Fatalf("a batch with a zero Now committed")
	}
	if got := f.session(r).CompactionCount; got != 2 {
		t.Errorf("compactionCount after a failed batch: %d, want 2", got)
	}
}

func testMemoryFlush(t *testing.T, f *regFixture) {
	r := ref(t, parentKey)
	if _, ok, err := f.reg.RecordMemoryFlush(f.ctx, r, t0); ok || err != nil {
		t.Errorf("flush of an unknown session: ok=%v err=%v, want false nil", ok, err)
	}
	f.append1(t0, system(parentKey, awareness.Compacted))
	if _, ok, err := f.reg.RecordMemoryFlush(f.ctx, r, t0); ok || err != nil {
		t.Errorf("flush of a logged, unregistered session: ok=%v err=%v, want false nil", ok, err)
	}
	f.put(t0, awareness.SessionWrite{Ref: r, Entry: awareness.SessionEntry{ContextTokens: ptr[int64](10)}})
	t1 := t0.Add(time.Minute)
	s, ok, err := f.reg.RecordMemoryFlush(f.ctx, r, t1)
	if err != nil || !ok {
		t.Fatalf("RecordMemoryFlush: ok=%v err=%v", ok, err)
	}
	if s.Entry.MemoryFlushAt == nil || !s.Entry.MemoryFlushAt.Equal(t1) || s.Entry.MemoryFlushCompactionCount == nil ||
		*s.Entry.MemoryFlushCompactionCount != 1 {
		t.Errorf("after flush: memoryFlushAt %v count %v, want %v and 1", s.Entry.MemoryFlushAt, s.Entry.MemoryFlushCompactionCount, t1)
	}
	if diff := cmp.Diff(s, f.session(r), emptyOK); diff != "" {
		t.Errorf("flush result differs from a read (-result +read):\n%s", diff)
	}
	f.append1(t1, system(parentKey, awareness.Compacted))
	if s := f.session(r); s.CompactionCount != 2 || *s.Entry.MemoryFlushCompactionCount != 1 {
		t.Errorf("after the next compaction: count %d, flush count %d; want 2 and 1", s.CompactionCount, *s.Entry.MemoryFlushCompactionCount)
	}
}

func testDeleteClearsEntry(t *testing.T, f *regFixture) {
	r := ref(t, childKey)
	f.append1(t0, system(childKey, awareness.Compacted))
	f.put(t0, awareness.SessionWrite{Ref: r, Entry: awareness.SessionEntry{SessionID: ptr("old"), Extra: regExtra("label", `"l"`)}})
	if ok, _, err := deleteSession(f.ctx, f.s, r, t0.Add(time.Minute)); !ok || err != nil {
		t.Fatalf("DeleteSession: %v %v", ok, err)
	}
	if _, ok, err := f.reg.RecordMemoryFlush(f.ctx, r, t0); ok || err != nil {
		t.Errorf("flush of a deleted session: ok=%v err=%v, want false nil", ok, err)
	}
	t2 := t0.Add(2 * time.Minute)
	got := f.put(t2, awareness.SessionWrite{Ref: r, Entry: awareness.SessionEntry{DisplayName: ptr("new")}})[0]
	// The deleted event is sequence 2 (LIF-1).
	want := awareness.Session{Ref: r, Kind: awareness.KindSubagent, StateVersion: 2, PrunedThrough: 1, Registered: true,
		CreatedAt: t2, UpdatedAt: t2, Entry: awareness.SessionEntry{DisplayName: ptr("new")}}
	if diff := cmp.Diff(want, got, emptyOK); diff != "" {
		t.Errorf("revived by upsert (-want +got):\n%s", diff)
	}
}

func testLargeBatch(t *testing.T, f *regFixture) {
	// More sessions than one statement chunk, over two agents, one session written
	// twice (the second write merges into the first) and one that already has a head.
	f.append1(t0, human("agent:ops:subagent:0007"))
	var ws []awareness.SessionWrite
	for i := range 1203 {
		agent := []string{"main", "ops"}[i%2]
		key := fmt.Sprintf("agent:%s:subagent:%04d", agent, i)
		ws = append(ws, awareness.SessionWrite{Ref: ref(t, key), Replace: true,
			Entry: awareness.SessionEntry{SessionID: ptr(fmt.Sprint(i)), Extra: regExtra("n", fmt.Sprint(i))}})
	}
	repeat := ws[10].Ref
	ws = append(ws, awareness.SessionWrite{Ref: repeat, Entry: awareness.SessionEntry{DisplayName: ptr("again"), Extra: regExtra("m", "1")}})
	out := f.put(t0, ws...)
	if s := out[10]; s.Entry.DisplayName != nil {
		t.Errorf("result of the first write shows the second: %+v", s)
	}
	last := out[len(out)-1]
	if *last.Entry.SessionID != "10" || *last.Entry.DisplayName != "again" || len(last.Entry.Extra) != 2 {
		t.Errorf("the repeated write did not merge into the first: %+v", last)
	}
	if diff := cmp.Diff(last, f.session(repeat), emptyOK); diff != "" {
		t.Errorf("repeated session read back (-result +read):\n%s", diff)
	}
	if s := f.session(ref(t, "agent:ops:subagent:0007")); s.StateVersion != 1 || *s.Entry.SessionID != "7" {
		t.Errorf("session with a head: %+v", s)
	}
	if st := f.stats(); st.Sessions != 1203 {
		t.Errorf("sessions: %d, want 1203", st.Sessions)
	}
}
