package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// SIG-2, UPS-3: no message content reaches the database files or the logs. Distinct
// marker strings travel every way content could leak — a gateway's own prompt
// (recordOwnPrompt keeps a salted hash), a human prompt in an adopted session's
// upstream transcript (the monitor records only "human message via <catalog>"),
// rejected inputs (a multi-line summary, a malformed key, a malformed sessions.json,
// a query that does not parse) — while the server logs at debug level. Then every
// byte of the database, its WAL and shared memory (while running and after a clean
// stop) and of the server's log is searched. A control marker in an accepted
// one-line summary (stored by design) must be found: the search is proven to see
// the data.
func TestPrivacy_NoMessageContentInDatabaseOrLogs_SIG2_UPS3(t *testing.T) {
	t.Parallel()
	mark := func(what string) string {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		return "PRIVATE-" + what + "-" + hex.EncodeToString(b)
	}
	var (
		mPrompt   = mark("prompt")
		mUpstream = mark("upstream")
		mSummary  = mark("summary")
		mKey      = mark("key")
		mImport   = mark("import")
		mQuery    = mark("query")
		mPayload  = mark("payload")
		control   = mark("control")
	)
	dbDir, catDir := t.TempDir(), t.TempDir()
	transcript := filepath.Join(catDir, "t1.jsonl")
	userLine := func(text string) string {
		b, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
		return string(b) + "\n"
	}
	if err := os.WriteFile(transcript, []byte(userLine("the first prompt, before adoption")), 0o600); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(dbDir, "awareness.db")
	s := startServerWith(t, db, serverOpts{args: []string{
		"--log-level", "debug", "--catalog", "cc=" + catDir,
		"--upstream-first-check", "100ms", "--upstream-interval", "1s",
	}})
	adopted := "agent:main:subagent:adopted"
	s.mustDo(t, "", `mutation($k: String!) { adoptSession(input: {sessionKey: $k, catalogId: "cc", threadId: "t1"}) { marker } }`, map[string]any{"k": adopted}, nil)
	s.mustDo(t, "", `mutation($k: String!) { watch(input: {watcher: "agent:main:main", target: $k}) { watched } }`, map[string]any{"k": adopted}, nil)

	c := s.do("", `mutation($k: String!, $x: String!) { recordOwnPrompt(sessionKey: $k, text: $x) }`, map[string]any{"k": adopted, "x": "please summarise " + mPrompt})
	switch {
	case c.err != nil:
		t.Fatal(c.err)
	case c.code() == "UNIMPLEMENTED":
		t.Log("recordOwnPrompt is not implemented: that vector is skipped")
	case len(c.resp.Errors) > 0:
		t.Fatalf("recordOwnPrompt: %+v", c.resp.Errors)
	}

	// A human prompt upstream: the monitor records it without its text.
	f, err := os.OpenFile(transcript, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(userLine("a person typed " + mUpstream)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	deadline := time.Now().Add(wait)
	for {
		events, _, _ := s.readLog(t, "", adopted)
		if len(events) > 0 && events[len(events)-1].Kind == "human_direct_message" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream prompt was not recorded within %v: %+v", wait, events)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Rejected inputs carrying content.
	rejected := []call{
		s.do("", recordMutation, map[string]any{"in": map[string]any{"sessionKey": adopted, "kind": "goal_changed", "actorType": "agent", "summary": "goal\n" + mSummary}}),
		s.do("", recordMutation, map[string]any{"in": map[string]any{"sessionKey": "agent:main:\x01" + mKey, "kind": "goal_changed", "actorType": "agent"}}),
		s.do("", `mutation($j: String!) { importSessions(agentId: "main", sessionsJson: $j) }`, map[string]any{"j": `{"agent:main:x": {"sessionId": 7, "lastMessage": "` + mImport + `"`}),
		s.do("", `{ sessionStatus(sessionKey: "`+mQuery+`" `, nil),
		s.do("", `mutation($k: String!) { upsertSession(input: {sessionKey: $k, extra: "`+mPayload+`"}) { sessionKey } }`, map[string]any{"k": adopted}),
	}
	for i, r := range rejected {
		if r.err != nil || len(r.resp.Errors) == 0 {
			t.Errorf("rejected input %d was accepted: %v %s", i, r.err, r.resp.Data)
		}
	}
	// The control: a one-line summary is stored by design.
	s.mustDo(t, "", recordMutation, map[string]any{"in": map[string]any{"sessionKey": adopted, "kind": "goal_changed", "actorType": "agent", "summary": "goal " + control}}, nil)

	secrets := []string{mPrompt, mUpstream, mSummary, mKey, mImport, mQuery, mPayload}
	scan := func(when string) {
		t.Helper()
		found := map[string]bool{}
		entries, err := os.ReadDir(dbDir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(dbDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, e.Name())
			for _, m := range append(secrets, control) {
				if bytes.Contains(data, []byte(m)) {
					found[m] = true
					if m != control {
						t.Errorf("%s: %s holds %s", when, e.Name(), m)
					}
				}
			}
		}
		if !found[control] {
			t.Errorf("%s: the control marker is in none of %v: the search does not see the data", when, names)
		}
		logs := s.logs.String()
		for _, m := range secrets {
			if strings.Contains(logs, m) {
				i := strings.Index(logs, m)
				t.Errorf("%s: the server log holds %s: …%s…", when, m, logs[max(0, i-200):min(len(logs), i+100)])
			}
		}
		t.Logf("%s: searched %v and %d bytes of log for %d markers", when, names, len(logs), len(secrets))
	}
	scan("running")
	if st := s.stop(syscall.SIGTERM); !st.Success() {
		t.Fatalf("SIGTERM: %v", st)
	}
	scan("stopped")
}
