package awareness

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func regPtrTo[T any](v T) *T { return &v }

func TestREG3CompactionPolicyThresholds(t *testing.T) {
	// contextWindow 200000, reserve 16384, soft 4000: compaction above 183616, flush
	// above 179616.
	const window, reserve, soft = 200000, 16384, 4000
	sess := func(ctx *int64, count int64, flushed *int64) Session {
		return Session{CompactionCount: count, Registered: true,
			Entry: SessionEntry{ContextTokens: ctx, MemoryFlushCompactionCount: flushed}}
	}
	tests := []struct {
		name             string
		s                Session
		flush, compact   bool
		wantContextToken int64
	}{
		{"unknown context", sess(nil, 0, nil), false, false, 0},
		{"well below", sess(regPtrTo[int64](100000), 0, nil), false, false, 100000},
		{"at the flush threshold is not over it", sess(regPtrTo[int64](179616), 0, nil), false, false, 179616},
		{"just over the flush threshold", sess(regPtrTo[int64](179617), 0, nil), true, false, 179617},
		{"at the compaction threshold", sess(regPtrTo[int64](183616), 2, regPtrTo[int64](1)), true, false, 183616},
		{"over both", sess(regPtrTo[int64](183617), 0, nil), true, true, 183617},
		{"flush already ran this cycle", sess(regPtrTo[int64](181000), 3, regPtrTo[int64](3)), false, false, 181000},
		{"flush ran this cycle, compaction due", sess(regPtrTo[int64](190000), 3, regPtrTo[int64](3)), false, true, 190000},
		{"flush ran in an earlier cycle", sess(regPtrTo[int64](181000), 4, regPtrTo[int64](3)), true, false, 181000},
		{"flush ran before the first compaction", sess(regPtrTo[int64](181000), 0, regPtrTo[int64](0)), false, false, 181000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := EvaluateCompaction(tt.s, window, reserve, soft)
			if err != nil {
				t.Fatal(err)
			}
			if p.MemoryFlushDue != tt.flush || p.CompactionDue != tt.compact || p.ContextTokens != tt.wantContextToken {
				t.Errorf("got flush=%v compact=%v contextTokens=%d, want %v %v %d",
					p.MemoryFlushDue, p.CompactionDue, p.ContextTokens, tt.flush, tt.compact, tt.wantContextToken)
			}
			if p.MemoryFlushThreshold != 179616 || p.CompactionThreshold != 183616 || p.CompactionCount != tt.s.CompactionCount {
				t.Errorf("thresholds %d/%d count %d, want 179616/183616 %d", p.MemoryFlushThreshold, p.CompactionThreshold, p.CompactionCount, tt.s.CompactionCount)
			}
		})
	}
}

func TestREG3CompactionPolicyRejectsBadArguments(t *testing.T) {
	for _, tt := range []struct {
		name                  string
		window, reserve, soft int64
	}{
		{"zero window", 0, 0, 0},
		{"negative window", -1, 0, 0},
		{"huge window", 1<<40 + 1, 0, 0},
		{"negative reserve", 1000, -1, 0},
		{"negative soft", 1000, 0, -1},
		{"reserve equals window", 1000, 1000, 0},
		{"reserve over window", 1000, 2000, 0},
		{"soft leaves no room", 1000, 600, 400},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := EvaluateCompaction(Session{}, tt.window, tt.reserve, tt.soft)
			if ErrorCode(err) != EINVALID {
				t.Errorf("got %v, want INVALID_ARGUMENT", err)
			}
		})
	}
	if _, err := EvaluateCompaction(Session{}, 1000, 0, 999); err != nil {
		t.Errorf("soft just below the room: %v", err)
	}
}

func readSessionsFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestREG2ParseSessionsJSONFixture(t *testing.T) {
	ws, err := ParseSessionsJSON("Main", readSessionsFixture(t, "sessions.json"))
	if err != nil {
		t.Fatalf("ParseSessionsJSON: %v", err)
	}
	byKey := map[string]SessionWrite{}
	var order []string
	for _, w := range ws {
		if w.Ref.AgentID != "main" || !w.Replace {
			t.Errorf("%s: agent %q replace %v, want main true", w.Ref.Key, w.Ref.AgentID, w.Replace)
		}
		byKey[w.Ref.Key] = w
		order = append(order, w.Ref.Key)
	}
	if len(ws) != 13 || order[0] != "agent:main:main" || order[12] != "agent:main:explicit:model-run-9f8e7d6c" {
		t.Errorf("entries: got %d in order %v, want 13 in document order", len(ws), order)
	}
	m := byKey["agent:main:main"]
	flush := time.UnixMilli(1772363400000).UTC()
	upd := time.UnixMilli(1772366100000).UTC()
	want := SessionWrite{
		Ref: SessionRef{AgentID: "main", Key: "agent:main:main"}, Replace: true, UpdatedAt: &upd, CompactionCount: regPtrTo[int64](3),
		Entry: SessionEntry{
			SessionID: regPtrTo("0f6c1d2e-3b4a-4c5d-8e9f-a0b1c2d3e4f5"), ChatType: regPtrTo("direct"), Provider: regPtrTo("telegram"),
			DisplayName: regPtrTo("Ana (Telegram)"), InputTokens: regPtrTo[int64](181234), OutputTokens: regPtrTo[int64](20456),
			TotalTokens: regPtrTo[int64](201690), ContextTokens: regPtrTo[int64](171000), MemoryFlushAt: &flush,
			MemoryFlushCompactionCount: regPtrTo[int64](3),
		},
	}
	gotExtra := m.Entry.Extra
	m.Entry.Extra = nil
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("agent:main:main (-want +got):\n%s", diff)
	}
	for _, k := range []string{"sessionStartedAt", "lastInteractionAt", "sessionFile", "origin", "thinkingLevel", "verboseLevel",
		"reasoningLevel", "elevatedLevel", "sendPolicy", "providerOverride", "modelOverride", "authProfileOverride",
		"abortedLastRun", "systemSent", "skillsSnapshot", "deliveryContext"} {
		if _, ok := gotExtra[k]; !ok {
			t.Errorf("agent:main:main: extra lacks %s", k)
		}
	}
	for _, k := range []string{"sessionId", "updatedAt", "contextTokens", "compactionCount", "memoryFlushAt"} {
		if _, ok := gotExtra[k]; ok {
			t.Errorf("agent:main:main: typed field %s is in extra too", k)
		}
	}
	// Lineage: spawnedBy gives the parent and is kept; parentSessionKey wins over it.
	sub := byKey["agent:main:subagent:7d2e9c41-5a6b-4f1e-9d3c-2b8a7e6f5d4c"]
	if sub.Entry.ParentSessionKey == nil || *sub.Entry.ParentSessionKey != "agent:main:main" || string(sub.Entry.Extra["spawnedBy"]) != `"agent:main:main"` {
		t.Errorf("subagent lineage: parent %v extra %s", sub.Entry.ParentSessionKey, sub.Entry.Extra["spawnedBy"])
	}
	if acp := byKey["agent:main:acp:codex-4711"]; *acp.Entry.ParentSessionKey != "agent:main:main" {
		t.Errorf("acp parent: %v, want parentSessionKey over spawnedBy", *acp.Entry.ParentSessionKey)
	}
	if run := byKey["cron:nightly-report:run:r-20260301"]; *run.Entry.ParentSessionKey != "cron:nightly-report" {
		t.Errorf("cron run parent: %v", *run.Entry.ParentSessionKey)
	}
	// Mixed-case keys are canonical; integral floats are integers; nulls are dropped.
	if _, ok := byKey["agent:main:whatsapp:work:direct:+15550101"]; !ok {
		t.Errorf("mixed-case key not canonicalised: %v", order)
	}
	if g := byKey["global"]; g.Entry.TotalTokens == nil || *g.Entry.TotalTokens != 1000 {
		t.Errorf("global totalTokens 1e3: got %v", g.Entry.TotalTokens)
	}
	if p := byKey["agent:main:explicit:model-run-9f8e7d6c"]; p.Entry.Extra != nil {
		t.Errorf("null unknown field kept: %v", p.Entry.Extra)
	}
	if h := byKey["hook:5b7c2a9e-0d1f-4e3a-8b6c-9f2e1d0c3b4a"]; string(h.Entry.Extra["retries"]) != "2.5" || string(h.Entry.Extra["tags"]) != `["webhook", "github"]` {
		t.Errorf("unknown fields not kept as written: %v", h.Entry.Extra)
	}
}

func TestREG2ParseSessionsJSONRejects(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // substrings of the message
	}{
		{"empty", ``, []string{"empty"}},
		{"whitespace", "  \n", []string{"empty"}},
		{"array", `[]`, []string{"must be a JSON object"}},
		{"string", `"x"`, []string{"must be a JSON object"}},
		{"truncated in an entry", `{"agent:main:main": {"sessionId": "a"}, "agent:main:x": {"updatedAt": 12`, []string{`"agent:main:x"`, "truncated"}},
		{"truncated after an entry", `{"agent:main:main": {}`, []string{`"agent:main:main"`, "truncated"}},
		{"truncated key", `{"agent:main:main": {}, "agent:ma`, []string{`after entry "agent:main:main"`}},
		{"trailing comma", `{"agent:main:main": {}, }`, []string{`after entry "agent:main:main"`, "not valid JSON"}},
		{"trailing data", `{} {}`, []string{"data after"}},
		{"bad key", `{"agent:main:": {}}`, []string{`entry "agent:main:"`, "malformed"}},
		{"empty key", `{"": {}}`, []string{`entry ""`, "empty"}},
		{"control char key", `{"agent:main:a\u0001b": {}}`, []string{"control character"}},
		{"other agent", `{"agent:main:main": {}, "agent:ops:main": {}}`, []string{`entry "agent:ops:main"`, `agent "ops"`}},
		{"entry not an object", `{"agent:main:main": 5}`, []string{`entry "agent:main:main"`, "want an object"}},
		{"token as string", `{"agent:main:main": {"inputTokens": "12"}}`, []string{`entry "agent:main:main"`, "inputTokens", "integer"}},
		{"negative tokens", `{"agent:main:main": {"contextTokens": -1}}`, []string{"contextTokens"}},
		{"fractional tokens", `{"agent:main:main": {"totalTokens": 1.5}}`, []string{"totalTokens"}},
		{"huge tokens", `{"agent:main:main": {"totalTokens": 1e300}}`, []string{"totalTokens"}},
		{"sessionId number", `{"agent:main:main": {"sessionId": 7}}`, []string{"sessionId", "want a string"}},
		{"updatedAt string", `{"agent:main:main": {"updatedAt": "2026-03-01"}}`, []string{"updatedAt", "epoch milliseconds"}},
		{"bad spawnedBy", `{"agent:main:x": {"spawnedBy": "agent:"}}`, []string{"spawnedBy"}},
		{"spawnedBy number", `{"agent:main:x": {"spawnedBy": 1}}`, []string{"spawnedBy", "string"}},
		{"origin string", `{"agent:main:main": {"origin": "x"}}`, []string{"origin", "object"}},
		{"abortedLastRun string", `{"agent:main:main": {"abortedLastRun": "no"}}`, []string{"abortedLastRun", "boolean"}},
		{"duplicate session", `{"agent:main:main": {}, "AGENT:MAIN:MAIN": {}}`, []string{"same session"}},
		{"sessionId line break", `{"agent:main:main": {"sessionId": "a\nb"}}`, []string{"sessionId"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws, err := ParseSessionsJSON("main", []byte(tt.doc))
			if ErrorCode(err) != EINVALID {
				t.Fatalf("got %d writes, err %v; want INVALID_ARGUMENT", len(ws), err)
			}
			for _, w := range tt.want {
				if !strings.Contains(ErrorMessage(err), w) {
					t.Errorf("message %q lacks %q", ErrorMessage(err), w)
				}
			}
		})
	}
	if _, err := ParseSessionsJSON("Not An Agent", []byte(`{}`)); ErrorCode(err) != EINVALID {
		t.Errorf("bad agent id: %v", err)
	}
	if ws, err := ParseSessionsJSON("main", []byte(` {} `)); err != nil || len(ws) != 0 {
		t.Errorf("empty object: %d writes, %v", len(ws), err)
	}
}

func TestREG1UpsertEntryValidation(t *testing.T) {
	for _, tt := range []struct {
		name string
		e    SessionEntry
	}{
		{"typed field in extra", SessionEntry{Extra: map[string]json.RawMessage{"sessionId": json.RawMessage(`"x"`)}}},
		{"reserved name in extra", SessionEntry{Extra: map[string]json.RawMessage{"stateVersion": json.RawMessage(`1`)}}},
		{"wrong type of a documented extra field", SessionEntry{Extra: map[string]json.RawMessage{"origin": json.RawMessage(`1`)}}},
		{"empty extra name", SessionEntry{Extra: map[string]json.RawMessage{" ": json.RawMessage(`1`)}}},
		{"negative tokens", SessionEntry{InputTokens: regPtrTo[int64](-1)}},
		{"bad parent", SessionEntry{ParentSessionKey: regPtrTo("agent::")}},
		{"long display name", SessionEntry{DisplayName: regPtrTo(strings.Repeat("x", MaxEntryFieldBytes+1))}},
		{"sessionId with a line break", SessionEntry{SessionID: regPtrTo("a\nb")}},
		{"huge extra", SessionEntry{Extra: map[string]json.RawMessage{"x": json.RawMessage(`"` + strings.Repeat("x", MaxExtraBytes) + `"`)}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := upsertEntry(tt.e); ErrorCode(err) != EINVALID {
				t.Errorf("got %v, want INVALID_ARGUMENT", err)
			}
		})
	}
	got, err := upsertEntry(SessionEntry{ParentSessionKey: regPtrTo(" Agent:Main:Main "),
		Extra: map[string]json.RawMessage{"spawnedBy": json.RawMessage(`"agent:x:y"`), "gone": json.RawMessage(`null`)}})
	if err != nil {
		t.Fatal(err)
	}
	if *got.ParentSessionKey != "agent:main:main" || string(got.Extra["gone"]) != "null" {
		t.Errorf("got parent %q extra %v; want the canonical parent (over spawnedBy) and the null kept for the merge", *got.ParentSessionKey, got.Extra)
	}
	got, _ = upsertEntry(SessionEntry{Extra: map[string]json.RawMessage{"spawnedBy": json.RawMessage(`"agent:x:y"`)}})
	if got.ParentSessionKey == nil || *got.ParentSessionKey != "agent:x:y" {
		t.Errorf("spawnedBy in extra did not give the parent: %v", got.ParentSessionKey)
	}
}

// FuzzParseSessionsJSON checks that the parser never panics, accepts only what it can
// name, and gives the same answer twice.
func FuzzParseSessionsJSON(f *testing.F) {
	f.Add([]byte(`{"agent:main:main": {"sessionId": "a", "updatedAt": 1, "extra": [1, {"x": null}]}}`))
	f.Add([]byte(`{"global": {"contextTokens": 1.0e2, "spawnedBy": "agent:main:main"}, "cron:x": {}}`))
	f.Add([]byte(`{"agent:ops:main": {}}`))
	f.Add([]byte(`{"a":`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ws, err := ParseSessionsJSON("main", data)
		if err != nil {
			if ErrorCode(err) != EINVALID || len(ws) != 0 {
				t.Fatalf("error %v with %d writes", err, len(ws))
			}
			return
		}
		seen := map[SessionRef]bool{}
		for _, w := range ws {
			if w.Ref.AgentID != "main" || w.Ref.Key == "" || seen[w.Ref] {
				t.Fatalf("bad or duplicate ref %+v", w.Ref)
			}
			seen[w.Ref] = true
			for k, v := range w.Entry.Extra {
				if !json.Valid(v) || isNull(v) {
					t.Fatalf("extra %s is %q", k, v)
				}
			}
		}
		again, err := ParseSessionsJSON("main", data)
		if err != nil || !cmp.Equal(ws, again) {
			t.Fatalf("second parse differs: %v", err)
		}
	})
}

func TestREG1MergeSessionWrite(t *testing.T) {
	t.Parallel()
	ref := SessionRef{AgentID: "main", Key: "agent:main:telegram:group:-100"}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	earlier, later := now.Add(-time.Hour), now.Add(time.Hour)
	extra := func(kv ...string) map[string]json.RawMessage {
		m := map[string]json.RawMessage{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = json.RawMessage(kv[i+1])
		}
		return m
	}
	// live is a registered session with a log, last updated at now.
	live := Session{Ref: ref, Kind: KindGroup, StateVersion: 7, PrunedThrough: 2, CompactionCount: 3, Registered: true,
		Entry: SessionEntry{SessionID: regPtrTo("s1"), DisplayName: regPtrTo("Ops"), ContextTokens: regPtrTo[int64](10),
			Extra: extra("subject", `"x"`, "room", `"#ops"`)},
		CreatedAt: earlier, UpdatedAt: now}
	with := func(mod func(*Session)) Session {
		s := live
		s.Entry.Extra = extra("subject", `"x"`, "room", `"#ops"`)
		mod(&s)
		return s
	}
	tests := []struct {
		name string
		row  RegistryRow
		w    SessionWrite
		want Session
	}{
		{"new row takes the given time, even an earlier one, and is classified",
			RegistryRow{Session: Session{Ref: ref, CreatedAt: now, UpdatedAt: now}, New: true},
			SessionWrite{Ref: ref, Entry: SessionEntry{ChatType: regPtrTo("group")}, UpdatedAt: &earlier},
			Session{Ref: ref, Kind: KindGroup, Registered: true, Entry: SessionEntry{ChatType: regPtrTo("group")},
				CreatedAt: now, UpdatedAt: earlier}},
		{"nil fields stay, set fields replace, extra merges and null removes",
			RegistryRow{Session: live},
			SessionWrite{Ref: ref, Entry: SessionEntry{DisplayName: regPtrTo("Ops 2"), Extra: extra("room", "null", "topic", `{ "id" : 7 }`)}},
			with(func(s *Session) {
				s.Entry.DisplayName = regPtrTo("Ops 2")
				s.Entry.Extra = extra("subject", `"x"`, "topic", `{"id":7}`)
			})},
		{"extra values come back as encoding/json writes them",
			RegistryRow{Session: live},
			SessionWrite{Ref: ref, Entry: SessionEntry{Extra: extra("subject", `"<a & b>"`)}},
			with(func(s *Session) { s.Entry.Extra = extra("subject", `"\u003ca \u0026 b\u003e"`, "room", `"#ops"`) })},
		{"removing every extra key leaves none",
			RegistryRow{Session: live},
			SessionWrite{Ref: ref, Entry: SessionEntry{Extra: extra("subject", "null", "room", "null")}},
			with(func(s *Session) { s.Entry.Extra = nil })},
		{"a live session's time never goes backwards",
			RegistryRow{Session: live},
			SessionWrite{Ref: ref, UpdatedAt: &earlier},
			live},
		{"a later time moves it, and an import's count replaces the count",
			RegistryRow{Session: live},
			SessionWrite{Ref: ref, UpdatedAt: &later, CompactionCount: regPtrTo[int64](9)},
			with(func(s *Session) { s.UpdatedAt, s.CompactionCount = later, 9 })},
		{"replace makes the entry exactly the write",
			RegistryRow{Session: live},
			SessionWrite{Ref: ref, Replace: true, Entry: SessionEntry{Provider: regPtrTo("telegram"), Extra: extra("a", "1", "b", "null")}},
			with(func(s *Session) { s.Entry = SessionEntry{Provider: regPtrTo("telegram"), Extra: extra("a", "1")} })},
		{"a deleted session is revived anew",
			RegistryRow{Session: live, Deleted: true},
			SessionWrite{Ref: ref, Entry: SessionEntry{ChatType: regPtrTo("group")}, UpdatedAt: &earlier},
			Session{Ref: ref, Kind: KindGroup, StateVersion: 7, PrunedThrough: 2, Registered: true,
				Entry: SessionEntry{ChatType: regPtrTo("group")}, CreatedAt: now, UpdatedAt: earlier}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := cloneSession(tt.row.Session)
			got, err := MergeSessionWrite(tt.row, tt.w, now)
			if err != nil {
				t.Fatalf("MergeSessionWrite: %v", err)
			}
			if diff := cmp.Diff(RegistryRow{Session: tt.want}, got); diff != "" {
				t.Errorf("merged (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, tt.row.Session); diff != "" {
				t.Errorf("the input row changed (-before +after):\n%s", diff)
			}
		})
	}

	// Two writes of one new session in one call: the second merges into the first,
	// and no longer takes an earlier time.
	first, err := MergeSessionWrite(RegistryRow{Session: Session{Ref: ref, CreatedAt: now, UpdatedAt: now}, New: true},
		SessionWrite{Ref: ref, UpdatedAt: &later}, now)
	if err != nil {
		t.Fatal(err)
	}
	second, err := MergeSessionWrite(first, SessionWrite{Ref: ref, UpdatedAt: &earlier}, now)
	if err != nil || !second.Session.UpdatedAt.Equal(later) {
		t.Errorf("second write of a new session: updated %v (%v), want %v", second.Session.UpdatedAt, err, later)
	}

	// The merged extra fields, encoded, stay within MaxExtraBytes.
	big := `"` + strings.Repeat("x", MaxExtraBytes/2) + `"`
	half, err := MergeSessionWrite(RegistryRow{Session: live}, SessionWrite{Ref: ref, Entry: SessionEntry{Extra: extra("a", big)}}, now)
	if err != nil {
		t.Fatalf("half the limit: %v", err)
	}
	if _, err := MergeSessionWrite(half, SessionWrite{Ref: ref, Entry: SessionEntry{Extra: extra("b", big)}}, now); ErrorCode(err) != EINVALID {
		t.Errorf("merged extra over the limit: got %v, want INVALID_ARGUMENT", err)
	}
}

func cloneSession(s Session) Session {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	var c Session
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return c
}
