package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// UPS-2 end to end: the real binary is killed with SIGKILL between the commit of an
// upstream human_direct_message and the settlement of its link's marker (the
// test-only crash point AWARENESS_TEST_HOLD_UPSTREAM_SETTLEMENT=1 of serve_config.go holds
// the settlement; the test kills the process while it is held). Prompts appended
// before the restart are then recorded exactly once: the prompt already recorded is
// not recorded again, the new ones are not lost.
func TestUpstreamKillNineBetweenEventAndSettlement_UPS2(t *testing.T) {
	dbDir, catDir := t.TempDir(), t.TempDir()
	transcript := filepath.Join(catDir, "t1.jsonl")
	userLine := func(text string) string {
		b, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
		return string(b) + "\n"
	}
	appendLines := func(lines ...string) {
		t.Helper()
		f, err := os.OpenFile(transcript, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(strings.Join(lines, "")); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	appendLines(userLine("history, before adoption"))
	db := filepath.Join(dbDir, "awareness.db")
	args := []string{"--catalog", "cc=" + catDir, "--upstream-first-check", "100ms", "--upstream-interval", "1s"}
	held := startServerWith(t, db, serverOpts{args: args, wrap: func(bin string, args []string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "AWARENESS_TEST_HOLD_UPSTREAM_SETTLEMENT=1")
		return cmd
	}})
	const adopted, watcher = "agent:main:acp:ext", "agent:main:main"
	held.mustDo(t, "", `mutation($k: String!) { adoptSession(input: {sessionKey: $k, catalogId: "cc", threadId: "t1"}) { marker } }`,
		map[string]any{"k": adopted}, nil)
	held.mustDo(t, "", `mutation($k: String!) { watch(input: {watcher: "agent:main:main", target: $k}) { watched } }`,
		map[string]any{"k": adopted}, nil)
	adoptedAt := linkMarker(t, held, adopted)

	appendLines(userLine("first prompt"))
	waitFor(t, 10*time.Second, "the crash point (event committed, settlement held)", func() bool {
		return strings.Contains(held.logs.String(), "test crash point: upstream activity committed, settlement held")
	})
	if n := upstreamTurns(t, held, adopted); n != 1 {
		t.Fatalf("prompts recorded before the kill = %d, want 1 (the event committed)", n)
	}
	if m := linkMarker(t, held, adopted); m != adoptedAt {
		t.Fatalf("marker = %d before the kill, want %d (settlement held)", m, adoptedAt)
	}
	held.kill() // SIGKILL between the event commit and the settlement

	appendLines(userLine("second prompt"), userLine("third prompt"))
	end := fileLen(t, transcript)
	s := startServerWith(t, db, serverOpts{args: args})
	waitFor(t, 15*time.Second, "the marker to reach the end of the transcript", func() bool {
		return linkMarker(t, s, adopted) == end
	})
	// One more cycle must not record anything again.
	time.Sleep(1500 * time.Millisecond)
	if n := upstreamTurns(t, s, adopted); n != 3 {
		t.Errorf("prompts recorded after the restart = %d, want 3 (each once)", n)
	}
	var d struct {
		PendingNotices []struct {
			Target string `json:"target"`
		} `json:"pendingNotices"`
	}
	s.mustDo(t, "", `query($w: String!) { pendingNotices(watcher: $w) { target } }`, map[string]any{"w": watcher}, &d)
	if len(d.PendingNotices) != 1 || d.PendingNotices[0].Target != adopted {
		t.Errorf("pending notices = %+v, want one on %s", d.PendingNotices, adopted)
	}
}

// upstreamTurns sums the prompts the session's human_direct_message events record
// (payload.turns, 1 when absent).
func upstreamTurns(t *testing.T, s *server, key string) int {
	t.Helper()
	var d struct {
		SessionStatus struct {
			StateChanges struct {
				Events []struct {
					Kind    string `json:"kind"`
					Payload struct {
						Turns int `json:"turns"`
					} `json:"payload"`
				} `json:"events"`
			} `json:"stateChanges"`
		} `json:"sessionStatus"`
	}
	s.mustDo(t, "", `query($k: String!) { sessionStatus(sessionKey: $k, changesSince: 0) { stateChanges { events { kind payload } } } }`,
		map[string]any{"k": key}, &d)
	n := 0
	for _, e := range d.SessionStatus.StateChanges.Events {
		if e.Kind == "human_direct_message" {
			n += max(e.Payload.Turns, 1)
		}
	}
	return n
}

func linkMarker(t *testing.T, s *server, key string) int64 {
	t.Helper()
	var d struct {
		UpstreamLinks []struct {
			SessionKey string `json:"sessionKey"`
			Marker     int64  `json:"marker"`
		} `json:"upstreamLinks"`
	}
	s.mustDo(t, "", `{ upstreamLinks { sessionKey marker } }`, nil, &d)
	for _, l := range d.UpstreamLinks {
		if l.SessionKey == key {
			return l.Marker
		}
	}
	t.Fatalf("no upstream link on %s", key)
	return 0
}

func fileLen(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// waitFor polls cond until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
