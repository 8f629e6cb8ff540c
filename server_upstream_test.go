package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestParseServeConfigUpstream(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	os.Mkdir(a, 0o755)
	os.Mkdir(b, 0o755)
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    []catalogSpec
		wantErr string
	}{
		{name: "repeatable flag", args: []string{"--catalog", "claude=" + a, "--catalog", "Codex=" + b},
			want: []catalogSpec{{"claude", a}, {"codex", b}}},
		{name: "environment list", env: map[string]string{"AWARENESS_CATALOGS": "claude=" + a + ", codex=" + b},
			want: []catalogSpec{{"claude", a}, {"codex", b}}},
		{name: "flag beats environment", args: []string{"--catalog", "x=" + a}, env: map[string]string{"AWARENESS_CATALOGS": "y=" + b},
			want: []catalogSpec{{"x", a}}},
		{name: "missing dir", args: []string{"--catalog", "claude=" + filepath.Join(dir, "nope")}, wantErr: "not an existing directory"},
		{name: "dir is a file", args: []string{"--catalog", "claude=" + file}, wantErr: "not an existing directory"},
		{name: "bad id", args: []string{"--catalog", "bad id=" + a}, wantErr: "not a valid id"},
		{name: "duplicate id", args: []string{"--catalog", "c=" + a, "--catalog", "c=" + b}, wantErr: "given twice"},
		{name: "no equals", args: []string{"--catalog", a}, wantErr: "want ID=DIR"},
		{name: "bad env", env: map[string]string{"AWARENESS_CATALOGS": "=x"}, wantErr: "AWARENESS_CATALOGS"},
		{name: "interval too short", args: []string{"--upstream-interval", "10ms"}, wantErr: "--upstream-interval"},
		{name: "zero first check", args: []string{"--upstream-first-check", "0s"}, wantErr: "--upstream-first-check"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseOrRefuse(t, tt.args, tt.env, tt.wantErr)
			if !ok {
				return
			}
			if d := cmp.Diff(tt.want, got.Catalogs); d != "" {
				t.Errorf("catalogs (-want +got):\n%s", d)
			}
		})
	}
	got, err := parseServeConfig([]string{"--upstream-first-check", "2s", "--upstream-interval", "5s"}, func(string) (string, bool) { return "", false }, io.Discard)
	if err != nil || got.UpstreamFirstCheck != 2*time.Second || got.UpstreamInterval != 5*time.Second {
		t.Errorf("cadence flags = %v, %v, %v", got.UpstreamFirstCheck, got.UpstreamInterval, err)
	}
}

// TestServeMonitorsAdoptedSessions runs the composition root with a catalog: a session
// adopted and watched over GraphQL gets a human_direct_message when a prompt is
// appended to its transcript, from the monitor the server started.
func TestServeMonitorsAdoptedSessions(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	dir := t.TempDir()
	cat := filepath.Join(dir, "claude")
	os.Mkdir(cat, 0o755)
	transcript := filepath.Join(cat, "t1.jsonl")
	os.WriteFile(transcript, []byte(`{"type":"user","message":{"role":"user","content":"history"}}`+"\n"), 0o644)
	addr := freeAddr(t)
	base := "http://" + addr
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr syncBuffer
	exited := make(chan struct{})
	code := -1
	go func() {
		defer close(exited)
		code = run(ctx, []string{"serve", "--addr", addr, "--db", filepath.Join(dir, "a.db"), "--catalog", "claude=" + cat,
			"--upstream-first-check", "10ms", "--upstream-interval", "1s"}, io.Discard, &stderr)
	}()
	waitReady(t, client, base, exited)
	postQuery(t, client, base, `mutation { adoptSession(input: {sessionKey: "agent:main:acp:ext", catalogId: "claude", threadId: "t1"}) { marker } }`)
	postQuery(t, client, base, `mutation { watch(input: {watcher: "agent:main:main", target: "agent:main:acp:ext"}) { watched } }`)
	f, _ := os.OpenFile(transcript, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"type":"user","message":{"role":"user","content":"typed in the terminal"}}` + "\n")
	f.Close()

	// The cycle records the event (and so the notice) before it settles the link in a
	// later transaction; the cycle's metrics are counted once both committed.
	deadline := time.Now().Add(10 * time.Second)
	for scrape(t, client, base, "")["awareness_upstream_events_total"] < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no event from the upstream monitor; log:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if data := postQuery(t, client, base, `{ pendingNotices(watcher: "agent:main:main") { target } }`); len(data["pendingNotices"].([]any)) != 1 {
		t.Errorf("pendingNotices = %v", data["pendingNotices"])
	}
	data := postQuery(t, client, base, `{ upstreamLinks { marker lastCheckedAt } }`)
	if links := data["upstreamLinks"].([]any); len(links) != 1 || links[0].(map[string]any)["lastCheckedAt"] == nil {
		t.Errorf("upstreamLinks = %v", links)
	}
	cancel()
	<-exited
	if code != exitOK {
		t.Errorf("exit code = %d; log:\n%s", code, stderr.String())
	}
	if log := stderr.String(); !strings.Contains(log, "shutdown: upstream monitor stopped") || !strings.Contains(log, "claude="+cat) {
		t.Errorf("log lacks the monitor's configuration or shutdown:\n%s", log)
	}
}
