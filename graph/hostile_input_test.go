package graph_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/models/pgtest"
	"github.com/awareness/awareness/internal/testenv"
)

// hostileInput is one request the two databases once answered differently,
// or that did silently nothing.
type hostileInput struct {
	name  string
	query string
	vars  map[string]any
	code  string // "" when it must be served
}

func hostileInputs() []hostileInput {
	nul := "a\x00b"
	upsert := `mutation($in: SessionInput!) { upsertSession(input: $in) { sessionKey displayName } }`
	record := `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded } }`
	imp := `mutation($j: String!) { importSessions(agentId: "main", sessionsJson: $j) }`
	list := `query($f: SessionFilter, $after: String) { sessionsList(filter: $f, after: $after) { sessions { sessionKey } } }`
	ev := func(field string, v any) map[string]any {
		in := map[string]any{"sessionKey": "agent:main:subagent:h", "kind": "run_failed", "actorType": "agent"}
		in[field] = v
		return map[string]any{"in": in}
	}
	sess := func(field string, v any) map[string]any {
		return map[string]any{"in": map[string]any{"sessionKey": "agent:main:hostile", field: v}}
	}
	return []hostileInput{
		{"displayName with NUL", upsert, sess("displayName", nul), awareness.EINVALID},
		{"displayName with a newline", upsert, sess("displayName", "two\nlines"), awareness.EINVALID},
		{"displayName with ESC", upsert, sess("displayName", "\x1b[31mred"), awareness.EINVALID},
		{"an empty displayName stays allowed", upsert, sess("displayName", ""), ""},
		{"displayName with emoji and accents", upsert, sess("displayName", "Zoë 🚀 — ops"), ""},
		{"sessionId with NUL", upsert, sess("sessionId", nul), awareness.EINVALID},
		{"extra value with NUL", upsert, sess("extra", map[string]any{"subject": nul}), awareness.EINVALID},
		{"extra key with NUL", upsert, sess("extra", map[string]any{nul: 1}), awareness.EINVALID},
		{"nested extra value with NUL", upsert, sess("extra", map[string]any{"deep": []any{map[string]any{"x": nul}}}), awareness.EINVALID},
		{"negative token count", upsert, sess("inputTokens", -1), awareness.EINVALID},
		{"import: displayName with NUL", imp, map[string]any{"j": `{"agent:main:i":{"sessionId":"s","updatedAt":1767225600000,"displayName":"a\u0000b"}}`}, awareness.EINVALID},
		{"import: unknown field with NUL", imp, map[string]any{"j": `{"agent:main:i":{"sessionId":"s","updatedAt":1767225600000,"note":{"k":"a\u0000b"}}}`}, awareness.EINVALID},
		{"import: key with NUL", imp, map[string]any{"j": `{"agent:main:a\u0000b":{"sessionId":"s","updatedAt":1767225600000}}`}, awareness.EINVALID},
		{"keyPrefix with NUL", list, map[string]any{"f": map[string]any{"keyPrefix": nul}}, awareness.EINVALID},
		{"keyPrefix with a control character", list, map[string]any{"f": map[string]any{"keyPrefix": "agent:\x07"}}, awareness.EINVALID},
		{"after naming a key with NUL", list, map[string]any{"after": base64.RawURLEncoding.EncodeToString([]byte("main\x00a\x00b"))}, awareness.EINVALID},
		{"activeMinutes 2147483647 is clamped", list, map[string]any{"f": map[string]any{"activeMinutes": 2147483647}}, ""},
		{"sessionKey with NUL", record, map[string]any{"in": map[string]any{"sessionKey": "agent:main:" + nul, "kind": "goal_changed", "actorType": "agent"}}, awareness.EINVALID},
		{"summary with NUL", record, ev("summary", nul), awareness.EINVALID},
		{"actorId with NUL", record, ev("actorId", nul), awareness.EINVALID},
		{"runId with NUL", record, ev("runId", nul), awareness.EINVALID},
		{"channel with NUL", record, ev("channel", nul), awareness.EINVALID},
		{"dedupeKey with NUL", record, ev("dedupeKey", nul), awareness.EINVALID},
		{"turns beyond 2^53", record, ev("turns", int64(1)<<60), awareness.EINVALID},
		// WAT-4: a malformed producer-passed watcher is skipped and reported; the event is recorded.
		{"watcher with NUL is skipped", record, ev("watchers", []string{"agent:main:" + nul}), ""},
		{"watch target with NUL", `mutation($t: String!) { watch(input: {watcher: "agent:main:main", target: $t}) { watched } }`, map[string]any{"t": "agent:main:" + nul}, awareness.EINVALID},
		{"ack target with NUL", `mutation($t: [String!]) { ackNotices(watcher: "agent:main:main", targets: $t) { target } }`, map[string]any{"t": []string{nul}}, awareness.EINVALID},
		// recordEvents refuses an input on its own: the field is served, the item says why.
		{"recordEvents input with NUL", `mutation($ins: [RecordEventInput!]!) { recordEvents(inputs: $ins) { index error { code message } } }`,
			map[string]any{"ins": []any{map[string]any{"sessionKey": "agent:main:" + nul, "kind": "goal_changed", "actorType": "agent"}}}, ""},
		{"acknowledgeNotices target with NUL", `mutation($n: [NoticeRef!]!) { acknowledgeNotices(watcher: "agent:main:main", notices: $n) { outcome } }`,
			map[string]any{"n": []any{map[string]any{"target": nul, "notifiedVersion": 1}}}, awareness.EINVALID},
		{"acknowledgeNotices of a version no sequence reaches", `mutation { acknowledgeNotices(watcher: "agent:main:main", notices: [{target: "agent:main:subagent:h", notifiedVersion: 2147483647}]) { outcome } }`, nil, ""},
		{"changesSince far ahead", `{ sessionStatus(sessionKey: "agent:main:main", changesSince: 2147483647) { stateVersion } }`, nil, awareness.ECURSORAHEAD},
		{"contextWindow beyond the limit", `{ compactionPolicy(sessionKey: "agent:main:main", contextWindow: 9007199254740991) { compactionDue } }`, nil, awareness.EINVALID},
	}
}

// backend is one database the hostile-input table runs against.
type backend struct {
	name string
	open func(t *testing.T) *models.Store
}

func backends() []backend {
	return []backend{
		{"sqlite", func(t *testing.T) *models.Store {
			s, err := models.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "awareness.db"), models.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
		{"postgres", func(t *testing.T) *models.Store {
			if os.Getenv(pgtest.EnvVar) == "" {
				testenv.Missing(t, "hostile inputs on PostgreSQL", pgtest.EnvVar+" is not set (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable)")
			}
			s, err := models.OpenPostgres(context.Background(), pgtest.NewDatabase(t), models.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
}

// TestHostileInputsSameOnBothDatabases_ERR3: every hostile input gets the same coded
// answer, message included, on SQLite and PostgreSQL, and a refused one writes
// nothing on either: no input reaches a database that would answer INTERNAL.
func TestHostileInputsSameOnBothDatabases_ERR3(t *testing.T) {
	t.Parallel()
	answers := map[string]map[string]string{} // input → backend → code and message
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			store := b.open(t)
			svc := awareness.NewService(awareness.Config{Store: store})
			hs := httptest.NewServer(graph.NewHandler(graph.Config{Service: svc}))
			t.Cleanup(func() {
				hs.Close()
				svc.Hub().Close()
				store.Close()
			})
			ctx := context.Background()
			if _, err := svc.UpsertSession(ctx, awareness.SessionInput{SessionKey: "agent:main:main"}); err != nil {
				t.Fatal(err)
			}
			for _, in := range hostileInputs() {
				before, err := store.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := json.Marshal(map[string]any{"query": in.query, "variables": in.vars})
				resp, err := http.Post(hs.URL+"/query", "application/json", strings.NewReader(string(body)))
				if err != nil {
					t.Fatal(err)
				}
				var r gqlResponse
				err = json.NewDecoder(resp.Body).Decode(&r)
				resp.Body.Close()
				if err != nil {
					t.Fatalf("%s: %v", in.name, err)
				}
				if r.code() != in.code {
					t.Errorf("%s: code %q (%+v), want %q", in.name, r.code(), r.Errors, in.code)
				}
				after, err := store.Stats(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if in.code != "" && !sameCounts(before, after) {
					t.Errorf("%s: a refused input wrote: %+v → %+v", in.name, before, after)
				}
				msg := ""
				if len(r.Errors) > 0 {
					msg = r.Errors[0].Message
				}
				if answers[in.name] == nil {
					answers[in.name] = map[string]string{}
				}
				answers[in.name][b.name] = r.code() + ": " + msg + " " + string(r.Data)
			}
		})
	}
	for name, by := range answers {
		if len(by) == 2 && by["sqlite"] != by["postgres"] {
			t.Errorf("%s: SQLite answers %q, PostgreSQL %q", name, by["sqlite"], by["postgres"])
		}
	}
}
