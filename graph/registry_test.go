package graph_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
)

const sessionFields = `sessionKey agentId kind sessionId parentSessionKey chatType provider displayName updatedAt
	stateVersion inputTokens outputTokens totalTokens contextTokens compactionCount memoryFlushAt
	memoryFlushCompactionCount extra`

// TestREG2ImportRoundTripsThroughSessionsList imports the fixture sessions.json with
// the mutation and reads every field back through sessionsList: typed fields in their
// own fields (times as RFC 3339), every other field in extra, unchanged.
func TestREG2ImportRoundTripsThroughSessionsList(t *testing.T) {
	e := newEnv(t)
	doc, err := os.ReadFile(filepath.Join("..", "testdata", "sessions.json"))
	if err != nil {
		t.Fatal(err)
	}
	data := e.mustPost(t, `mutation($a: String!, $j: String!) { importSessions(agentId: $a, sessionsJson: $j) }`,
		map[string]any{"a": "main", "j": string(doc)})
	if string(data) != `{"importSessions":13}` {
		t.Fatalf("importSessions: %s", data)
	}
	data = e.mustPost(t, `{ sessionsList(filter: {agentId: "main"}, first: 100) { sessions { `+sessionFields+` } } }`, nil)
	var got struct {
		SessionsList struct{ Sessions []map[string]any }
	}
	decodeNumbers(t, data, &got)

	var want map[string]map[string]any
	decodeNumbers(t, doc, &want)
	if len(got.SessionsList.Sessions) != len(want) {
		t.Fatalf("sessionsList has %d sessions, the fixture %d", len(got.SessionsList.Sessions), len(want))
	}
	byKey := map[string]map[string]any{}
	for _, s := range got.SessionsList.Sessions {
		byKey[s["sessionKey"].(string)] = s
	}
	typed := map[string]bool{"sessionId": true, "chatType": true, "provider": true, "displayName": true, "inputTokens": true,
		"outputTokens": true, "totalTokens": true, "contextTokens": true, "compactionCount": true,
		"memoryFlushCompactionCount": true, "parentSessionKey": true}
	for rawKey, entry := range want {
		ref, err := awareness.ResolveSession(rawKey, regPtr("main"))
		if err != nil {
			t.Fatal(err)
		}
		s, ok := byKey[ref.Key]
		if !ok {
			t.Errorf("%s: not listed", ref.Key)
			continue
		}
		extra, _ := s["extra"].(map[string]any)
		for field, v := range entry {
			switch {
			case v == nil:
				if _, ok := extra[field]; ok {
					t.Errorf("%s: null field %s kept", ref.Key, field)
				}
			case field == "updatedAt" || field == "memoryFlushAt":
				ms, _ := v.(json.Number).Int64()
				if w := time.UnixMilli(ms).UTC().Format(time.RFC3339Nano); s[field] != w {
					t.Errorf("%s: %s = %v, want %s", ref.Key, field, s[field], w)
				}
			case typed[field]:
				if !jsonEqual(s[field], v) {
					t.Errorf("%s: %s = %v, want %v", ref.Key, field, s[field], v)
				}
			default:
				if !jsonEqual(extra[field], v) {
					t.Errorf("%s: extra.%s = %v, want %v", ref.Key, field, extra[field], v)
				}
			}
		}
		if entry["parentSessionKey"] == nil && entry["spawnedBy"] != nil && s["parentSessionKey"] != entry["spawnedBy"] {
			t.Errorf("%s: parentSessionKey %v, want spawnedBy %v", ref.Key, s["parentSessionKey"], entry["spawnedBy"])
		}
		if s["stateVersion"] != nil {
			t.Errorf("%s: stateVersion %v of a session that never logged, want null", ref.Key, s["stateVersion"])
		}
	}
	if k := byKey["agent:main:telegram:group:-1001234567890:topic:42"]["kind"]; k != "group" {
		t.Errorf("kind of a group topic key: %v", k)
	}

	// A malformed import is rejected with the entry named, and changes nothing.
	before := e.snapshot(t)
	_, r, raw := e.post(t, `mutation($j: String!) { importSessions(agentId: "main", sessionsJson: $j) }`,
		map[string]any{"j": `{"agent:main:new": {}, "agent:main:main": {"inputTokens": -3}}`})
	if r.code() != awareness.EINVALID || !strings.Contains(r.Errors[0].Message, `"agent:main:main"`) {
		t.Errorf("malformed import: %s", raw)
	}
	if diff := cmp.Diff(before, e.snapshot(t)); diff != "" {
		t.Errorf("a rejected import changed the database (-before +after):\n%s", diff)
	}
}

func TestREG1UpsertSessionAndStatus(t *testing.T) {
	e := newEnv(t)
	const upsert = `mutation($in: SessionInput!) { upsertSession(input: $in) { ` + sessionFields + ` } }`
	e.mustPost(t, upsert, map[string]any{"in": map[string]any{
		"sessionKey": "Agent:Main:Subagent:C1", "sessionId": "s1", "parentSessionKey": "agent:main:main",
		"contextTokens": 100, "extra": map[string]any{"label": "research", "goal": "x", "nested": map[string]any{"a": []any{1, 2.5}}},
	}})
	data := e.mustPost(t, upsert, map[string]any{"in": map[string]any{
		"sessionKey": "agent:main:subagent:c1", "displayName": "Research", "extra": map[string]any{"goal": nil, "status": "running"},
	}})
	var got struct{ UpsertSession map[string]any }
	decodeNumbers(t, data, &got)
	s := got.UpsertSession
	wantExtra := map[string]any{"label": "research", "status": "running", "nested": map[string]any{"a": []any{json.Number("1"), json.Number("2.5")}}}
	if s["sessionKey"] != "agent:main:subagent:c1" || s["kind"] != "subagent" || s["sessionId"] != "s1" ||
		s["displayName"] != "Research" || !jsonEqual(s["contextTokens"], json.Number("100")) || !cmp.Equal(s["extra"], wantExtra) {
		t.Errorf("merged upsert: %v", s)
	}
	// sessionStatus carries the entry of a registered session.
	data = e.mustPost(t, `{ sessionStatus(sessionKey: "agent:main:subagent:c1") { stateVersion session { sessionId extra } } }`, nil)
	if !strings.Contains(string(data), `"sessionId":"s1"`) || !strings.Contains(string(data), `"label":"research"`) {
		t.Errorf("sessionStatus.session: %s", data)
	}
	for name, in := range map[string]map[string]any{
		"typed field in extra": {"sessionKey": "agent:main:main", "extra": map[string]any{"contextTokens": 5}},
		"negative tokens":      {"sessionKey": "agent:main:main", "inputTokens": -1},
		"bad key":              {"sessionKey": "agent:main:"},
		"bad parent":           {"sessionKey": "agent:main:main", "parentSessionKey": "agent::"},
	} {
		_, r, raw := e.post(t, upsert, map[string]any{"in": in})
		if r.code() != awareness.EINVALID {
			t.Errorf("%s: %s, want INVALID_ARGUMENT", name, raw)
		}
	}
}

func TestREG3CompactionPolicyAndMemoryFlush(t *testing.T) {
	e := newEnv(t)
	const policy = `{ compactionPolicy(sessionKey: "agent:main:main", contextWindow: 200000) {
		contextTokens memoryFlushDue compactionDue compactionCount memoryFlushThreshold compactionThreshold memoryFlushCompactionCount } }`
	if _, r, raw := e.post(t, policy, nil); r.code() != awareness.ENOTFOUND {
		t.Errorf("policy of an unregistered session: %s", raw)
	}
	if _, r, raw := e.post(t, `mutation { recordMemoryFlush(sessionKey: "agent:main:main") { memoryFlushAt } }`, nil); r.code() != awareness.ENOTFOUND {
		t.Errorf("flush of an unregistered session: %s", raw)
	}
	e.mustPost(t, `mutation { upsertSession(input: {sessionKey: "agent:main:main", contextTokens: 181000}) { sessionKey } }`, nil)
	e.record(t, map[string]any{"sessionKey": "agent:main:main", "kind": "compacted", "actorType": "system", "dedupeKey": "c1"})
	e.record(t, map[string]any{"sessionKey": "agent:main:main", "kind": "compacted", "actorType": "system", "dedupeKey": "c1"})

	want := `{"compactionPolicy":{"contextTokens":181000,"memoryFlushDue":true,"compactionDue":false,"compactionCount":1,"memoryFlushThreshold":179616,"compactionThreshold":183616,"memoryFlushCompactionCount":null}}`
	if got := string(e.mustPost(t, policy, nil)); got != want {
		t.Errorf("policy before the flush:\n got %s\nwant %s", got, want)
	}
	data := e.mustPost(t, `mutation { recordMemoryFlush(sessionKey: "agent:main:main") { memoryFlushAt memoryFlushCompactionCount compactionCount } }`, nil)
	if !strings.Contains(string(data), `"memoryFlushCompactionCount":1,"compactionCount":1`) {
		t.Errorf("recordMemoryFlush: %s", data)
	}
	want = `{"compactionPolicy":{"contextTokens":181000,"memoryFlushDue":false,"compactionDue":false,"compactionCount":1,"memoryFlushThreshold":179616,"compactionThreshold":183616,"memoryFlushCompactionCount":1}}`
	if got := string(e.mustPost(t, policy, nil)); got != want {
		t.Errorf("policy after the flush:\n got %s\nwant %s", got, want)
	}
	for name, q := range map[string]string{
		"reserve >= window":     `{ compactionPolicy(sessionKey: "agent:main:main", contextWindow: 1000, reserveTokens: 1000) { compactionDue } }`,
		"negative soft":         `{ compactionPolicy(sessionKey: "agent:main:main", contextWindow: 100000, softThresholdTokens: -1) { compactionDue } }`,
		"negative window":       `{ compactionPolicy(sessionKey: "agent:main:main", contextWindow: -1) { compactionDue } }`,
		"soft over the headway": `{ compactionPolicy(sessionKey: "agent:main:main", contextWindow: 20000, softThresholdTokens: 4000) { compactionDue } }`,
	} {
		if _, r, raw := e.post(t, q, nil); r.code() != awareness.EINVALID {
			t.Errorf("%s: %s, want INVALID_ARGUMENT", name, raw)
		}
	}
}

func regPtr[T any](v T) *T { return &v }

func decodeNumbers(t *testing.T, data []byte, v any) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
}

// jsonEqual compares decoded JSON values, numbers by value (1e3 equals 1000).
func jsonEqual(a, b any) bool {
	return cmp.Equal(a, b, cmp.Comparer(func(x, y json.Number) bool {
		fx, errx := x.Float64()
		fy, erry := y.Float64()
		return errx == nil && erry == nil && fx == fy
	}))
}
