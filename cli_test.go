package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/models"
)

var updateCLIGolden = flag.Bool("update", false, "rewrite the CLI golden files in testdata/cli/")

// cliNow is the fixed clock of the CLI tests: the fixture's updatedAt values are
// minutes to days before it.
var cliNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type toolResult struct {
	code           int
	stdout, stderr string
}

func runToolAt(t testing.TB, now time.Time, args ...string) toolResult {
	t.Helper()
	var stdout, stderr bytes.Buffer
	env := toolEnv{stdout: &stdout, stderr: &stderr, stdin: strings.NewReader(""),
		lookupEnv: func(string) (string, bool) { return "", false }, now: func() time.Time { return now }}
	code := runTool(context.Background(), args[0], args[1:], env)
	return toolResult{code, stdout.String(), stderr.String()}
}

// cliWorld builds a database with both fixtures imported and some log activity: two
// compactions of agent:main:main, a person typing into the sub-agent while the main
// session watches it (one pending notice), and one prune.
func cliWorld(t *testing.T) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "awareness.db")
	for _, imp := range [][]string{
		{"import", "--db", db, "--agent", "main", filepath.Join("testdata", "sessions.json")},
		{"import", filepath.Join("testdata", "sessions-ops.json"), "--agent", "ops", "--db", db},
	} {
		if r := runToolAt(t, cliNow, imp...); r.code != exitOK {
			t.Fatalf("%q: exit %d: %s", imp, r.code, r.stderr)
		}
	}
	store, err := models.OpenSQLite(context.Background(), db, models.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// After the fixtures' updatedAt of these two sessions, so their time moves on.
	at := cliNow.Add(-5 * time.Minute)
	svc := awareness.NewService(awareness.Config{Store: store, Now: func() time.Time { return at }})
	ctx := t.Context()
	const sub = "agent:main:subagent:7d2e9c41-5a6b-4f1e-9d3c-2b8a7e6f5d4c"
	steps := []awareness.RecordInput{
		{SessionKey: "agent:main:main", Kind: awareness.Compacted, ActorType: awareness.ActorSystem},
		{SessionKey: sub, Kind: awareness.ChildSpawned, ActorType: awareness.ActorAgent, ActorID: regPtr("agent:main:main"), Watchers: []string{"agent:main:main"}},
		{SessionKey: sub, Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, Channel: regPtr("telegram")},
		{SessionKey: "agent:main:main", Kind: awareness.Compacted, ActorType: awareness.ActorSystem},
	}
	for _, in := range steps {
		at = at.Add(time.Minute)
		if _, err := svc.RecordEvent(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := store.Prune(ctx, awareness.RetentionPolicy{MaxAge: awareness.DefaultRetention}, cliNow.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	return db
}

func regPtr[T any](v T) *T { return &v }

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "cli", name)
	if *updateCLIGolden {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got):\n%s", path, diff)
	}
}

// TestREG4CLIGolden pins the output of status and sessions, for people and scripts.
func TestREG4CLIGolden(t *testing.T) {
	db := cliWorld(t)
	for _, tt := range []struct {
		golden string
		args   []string
	}{
		{"status.txt", []string{"status"}},
		{"status.json", []string{"status", "--json"}},
		{"sessions.txt", []string{"sessions"}},
		{"sessions.json", []string{"sessions", "--json"}},
		{"sessions-ops-active.txt", []string{"sessions", "--agent", "OPS", "--active", "60"}},
	} {
		t.Run(tt.golden, func(t *testing.T) {
			r := runToolAt(t, cliNow, append(tt.args, "--db", db)...)
			if r.code != exitOK || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
			checkGolden(t, tt.golden, strings.ReplaceAll(r.stdout, db, "$DB"))
		})
	}
}

// TestREG2CLIImportRoundTrip reads `sessions --json` back and finds every field of
// both fixtures, with the same JSON values (times stay epoch milliseconds).
func TestREG2CLIImportRoundTrip(t *testing.T) {
	db := cliWorld(t)
	r := runToolAt(t, cliNow, "sessions", "--json", "--db", db)
	if r.code != exitOK {
		t.Fatalf("sessions --json: exit %d: %s", r.code, r.stderr)
	}
	var got []map[string]any
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("sessions --json is not a JSON array: %v", err)
	}
	byRef := map[awareness.SessionRef]map[string]any{}
	for _, s := range got {
		byRef[awareness.SessionRef{AgentID: s["agentId"].(string), Key: s["sessionKey"].(string)}] = s
	}
	total := 0
	for agent, file := range map[string]string{"main": "sessions.json", "ops": "sessions-ops.json"} {
		doc, err := os.ReadFile(filepath.Join("testdata", file))
		if err != nil {
			t.Fatal(err)
		}
		var want map[string]map[string]any
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		total += len(want)
		for key, entry := range want {
			ref, err := awareness.ResolveSession(key, &agent)
			if err != nil {
				t.Fatal(err)
			}
			s, ok := byRef[ref]
			if !ok {
				t.Errorf("%v: not listed", ref)
				continue
			}
			if s["registered"] != true || s["kind"] != string(awareness.ClassifyKey(ref.Key)) {
				t.Errorf("%v: registered %v kind %v", ref, s["registered"], s["kind"])
			}
			for field, v := range entry {
				switch {
				case field == "compactionCount" && ref.Key == "agent:main:main":
					v = json.Number("5") // 3 imported + 2 compacted events
				case field == "updatedAt" && ref.Key == "agent:main:main":
					v = json.Number(fmt.Sprint(cliNow.Add(-time.Minute).UnixMilli())) // the last compaction
				case field == "updatedAt" && strings.HasPrefix(ref.Key, "agent:main:subagent:"):
					v = json.Number(fmt.Sprint(cliNow.Add(-2 * time.Minute).UnixMilli())) // the human message
				}
				if v == nil {
					if _, ok := s[field]; ok {
						t.Errorf("%v: null field %s printed", ref, field)
					}
					continue
				}
				if !numbersEqual(s[field], v) {
					t.Errorf("%v: %s = %v, want %v", ref, field, s[field], v)
				}
			}
		}
	}
	if len(got) != total {
		t.Errorf("sessions --json lists %d sessions, the fixtures have %d", len(got), total)
	}
	if v := byRef[awareness.SessionRef{AgentID: "main", Key: "agent:main:main"}]["stateVersion"]; v != json.Number("2") {
		t.Errorf("stateVersion of agent:main:main: %v, want 2", v)
	}
	if _, ok := byRef[awareness.SessionRef{AgentID: "main", Key: "global"}]["stateVersion"]; ok {
		t.Errorf("stateVersion printed for a session that never logged")
	}
}

func numbersEqual(a, b any) bool {
	return cmp.Equal(a, b, cmp.Comparer(func(x, y json.Number) bool {
		fx, errx := x.Float64()
		fy, erry := y.Float64()
		return errx == nil && erry == nil && fx == fy
	}))
}

// TestREG2CLIMalformedImportChangesNothing: a bad key, a wrong type or truncated JSON
// fails with exit 1 naming the entry, and the database is exactly as before.
func TestREG2CLIMalformedImportChangesNothing(t *testing.T) {
	db := cliWorld(t)
	state := func() string {
		t.Helper()
		a := runToolAt(t, cliNow, "status", "--json", "--db", db)
		b := runToolAt(t, cliNow, "sessions", "--json", "--db", db)
		if a.code != exitOK || b.code != exitOK {
			t.Fatalf("status/sessions failed: %s %s", a.stderr, b.stderr)
		}
		return a.stdout + b.stdout
	}
	before := state()
	dir := t.TempDir()
	for name, tt := range map[string]struct{ doc, entry string }{
		"bad key":     {`{"agent:main:brand-new": {"sessionId": "n"}, "agent:main:main": {"sessionId": "x"}, "agent:main:": {}}`, `"agent:main:"`},
		"wrong type":  {`{"agent:main:brand-new": {}, "agent:main:main": {"contextTokens": "lots"}}`, `"agent:main:main"`},
		"truncated":   {`{"agent:main:brand-new": {}, "agent:main:main": {"sessionId": "x", "updatedAt": 17723`, `"agent:main:main"`},
		"other agent": {`{"agent:main:brand-new": {}, "agent:ops:main": {}}`, `"agent:ops:main"`},
	} {
		file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if err := os.WriteFile(file, []byte(tt.doc), 0o644); err != nil {
			t.Fatal(err)
		}
		r := runToolAt(t, cliNow, "import", "--db", db, "--agent", "main", file)
		if r.code != exitError || !strings.Contains(r.stderr, tt.entry) || r.stdout != "" {
			t.Errorf("%s: exit %d, stderr %q; want 1 naming %s", name, r.code, r.stderr, tt.entry)
		}
	}
	if after := state(); after != before {
		t.Errorf("a rejected import changed the database:\n%s", cmp.Diff(before, after))
	}
	// Nor does a rejected import create a database.
	fresh := filepath.Join(dir, "fresh.db")
	if r := runToolAt(t, cliNow, "import", "--db", fresh, "--agent", "main", filepath.Join(dir, "truncated.json")); r.code != exitError {
		t.Errorf("import into a fresh database: exit %d", r.code)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a rejected import created the database: %v", err)
	}
}

func TestREG4CLIUsageAndHelp(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "awareness.db")
	for _, args := range [][]string{
		{"status", "--db", db, "extra"},
		{"status", "--bogus"},
		{"status", "--db", db, "--retention", "-1h"},
		{"sessions", "--db", db, "--active", "0"},
		{"sessions", "--db", db, "--agent", "Not Valid"},
		{"sessions", "--db", filepath.Join(dir, "missing", "x.db")},
		{"import", "--db", db, "file.json"},
		{"import", "--db", db, "--agent", "main"},
		{"import", "--db", db, "--agent", "main", "a.json", "b.json"},
		{"import", "--db", ":memory:", "--agent", "main", "a.json"},
	} {
		r := runToolAt(t, cliNow, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--help") {
			t.Errorf("%q: exit %d stderr %q, want 2 and a pointer to --help", args, r.code, r.stderr)
		}
	}
	for _, cmd := range []string{"status", "sessions", "import"} {
		for _, h := range []string{"-h", "--help"} {
			r := runToolAt(t, cliNow, cmd, h)
			if r.code != exitOK || !strings.HasPrefix(r.stdout, "Usage: awareness "+cmd) || !strings.Contains(r.stdout, "-db") {
				t.Errorf("%s %s: exit %d, stdout %q", cmd, h, r.code, r.stdout)
			}
		}
	}
	// Reading tools do not create a database.
	for _, cmd := range []string{"status", "sessions"} {
		if r := runToolAt(t, cliNow, cmd, "--db", db); r.code != exitError || !strings.Contains(r.stderr, "no database") {
			t.Errorf("%s on a missing database: exit %d %q", cmd, r.code, r.stderr)
		}
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a reading tool created the database: %v", err)
	}
	// $AWARENESS_DB is the default of --db; the flag wins.
	world := cliWorld(t)
	var stdout bytes.Buffer
	env := toolEnv{stdout: &stdout, stderr: io.Discard, now: func() time.Time { return cliNow },
		lookupEnv: func(k string) (string, bool) { return world, k == "AWARENESS_DB" }}
	if code := runTool(context.Background(), "status", nil, env); code != exitOK || !strings.Contains(stdout.String(), world) {
		t.Errorf("status with $AWARENESS_DB: exit %d %q", code, stdout.String())
	}
	// Through run, as the binary dispatches.
	if code := run(context.Background(), []string{"sessions", "--db", world, "--json"}, io.Discard, io.Discard); code != exitOK {
		t.Errorf("run sessions: exit %d", code)
	}
	var usage bytes.Buffer
	run(context.Background(), []string{"help"}, &usage, io.Discard)
	for _, cmd := range []string{"status", "sessions", "import"} {
		if !strings.Contains(usage.String(), "awareness "+cmd) {
			t.Errorf("help does not mention %s", cmd)
		}
	}
}

// BenchmarkREG4SessionsJSON10k measures `awareness sessions --json` over 10,000
// registered sessions (open, page through, encode, close).
func BenchmarkREG4SessionsJSON10k(b *testing.B) {
	db := filepath.Join(b.TempDir(), "awareness.db")
	var doc bytes.Buffer
	doc.WriteString("{")
	for i := range 10000 {
		if i > 0 {
			doc.WriteString(",")
		}
		fmt.Fprintf(&doc, `"agent:main:subagent:%05d": {"sessionId": "s-%05d", "updatedAt": %d, "chatType": "direct",
			"provider": "telegram", "contextTokens": %d, "compactionCount": %d, "modelOverride": "claude-opus-4-5",
			"origin": {"label": "user %d", "provider": "telegram"}}`, i, i, 1772366400000-int64(i)*1000, i*10, i%5, i)
	}
	doc.WriteString("}")
	file := filepath.Join(b.TempDir(), "sessions.json")
	if err := os.WriteFile(file, doc.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if r := runToolAt(b, cliNow, "import", "--db", db, "--agent", "main", file); r.code != exitOK {
		b.Fatalf("import: %s", r.stderr)
	}
	b.Logf("import of 10,000 sessions (%d bytes): %v", doc.Len(), time.Since(start))
	b.ResetTimer()
	for b.Loop() {
		r := runToolAt(b, cliNow, "sessions", "--json", "--db", db)
		if r.code != exitOK || len(r.stdout) < 10000 {
			b.Fatalf("sessions --json: %d %s", r.code, r.stderr)
		}
	}
}
