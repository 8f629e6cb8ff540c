// Package harness holds the end-to-end tests of the last mile (CLT-4, CLT-5): the
// real Claude Code and Codex CLI from npm (pinned in package.json and its lock,
// installed by `npm ci` here), each run against a fake model API on loopback that
// logs what the model was shown, with the real service binary and `awareness hook`
// installed by `awareness hook install`. The tests run in a private network namespace
// of their own (unshare -n) when the machine allows it, with every endpoint on
// 127.0.0.1 and the harnesses' telemetry and update checks off either way.
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/syncbuf"
	"github.com/awareness/awareness/internal/testenv"
)

const (
	// wait bounds a wait for what must happen (generous: CI shares two cores).
	wait = 60 * time.Second
	// netnsEnv marks the test process re-executed inside its network namespace.
	netnsEnv = "AWARENESS_HARNESS_NETNS"
)

var (
	repoRoot, harnessDir string
	serverBin            string // the awareness binary built by TestMain
	netns                string // how the network is confined, for the log
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	wd, err := os.Getwd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		return 1
	}
	harnessDir, repoRoot = wd, filepath.Dir(filepath.Dir(wd))
	if os.Getenv(netnsEnv) == "" && os.Getuid() == 0 {
		if path, err := exec.LookPath("unshare"); err == nil {
			if _, err := exec.LookPath("ip"); err == nil {
				// Run this test binary again inside a network namespace with only
				// loopback up: nothing the harnesses try can leave the machine.
				cmd := exec.Command(path, append([]string{"-n", "--", "/bin/sh", "-c", `ip link set lo up && exec "$@"`, "sh", os.Args[0]}, os.Args[1:]...)...)
				cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
				cmd.Env = append(os.Environ(), netnsEnv+"=1")
				if err := cmd.Run(); err == nil {
					return 0
				} else if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() != 126 {
					return ee.ExitCode()
				}
				fmt.Fprintln(os.Stderr, "harness: unshare -n is not allowed here; the tests run on loopback only, telemetry off")
			}
		}
	}
	switch {
	case os.Getenv(netnsEnv) != "":
		netns = "private network namespace (loopback only)"
	default:
		netns = "host network (every endpoint on 127.0.0.1, telemetry and updates off)"
	}
	dir, err := os.MkdirTemp("", "awareness-harness-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "harness:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	serverBin = filepath.Join(dir, "awareness")
	build := exec.Command("go", "build", "-o", serverBin, ".")
	build.Dir = repoRoot
	build.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "harness: go build failed: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

// harnessBin returns the path of an npm-installed harness binary, or fails the test
// (skips it outside CI) when `npm ci` has not run in e2e/harness.
func harnessBin(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(harnessDir, "node_modules", ".bin", name)
	if _, err := os.Stat(p); err != nil {
		testenv.Missing(t, "harness "+name, name+" is not installed: run 'npm ci' in e2e/harness (it installs the pinned @anthropic-ai/claude-code and @openai/codex)")
	}
	return p
}

// ---------------------------------------------------------------------------------
// The service

type service struct {
	t      testing.TB
	url    string // the GraphQL endpoint
	cmd    *exec.Cmd
	logs   *syncbuf.Buffer
	client *http.Client
}

// startService starts the real binary on a free loopback port and a fresh database.
func startService(t testing.TB, extra ...string) *service {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := &service{t: t, url: "http://" + addr + "/query", logs: new(syncbuf.Buffer), client: &http.Client{Timeout: 10 * time.Second}}
	args := append([]string{"serve", "--addr", addr, "--db", filepath.Join(t.TempDir(), "a.db"), "--rate-limit", "0"}, extra...)
	s.cmd = exec.Command(serverBin, args...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		if t.Failed() {
			t.Logf("service log:\n%s", s.logs.String())
		}
	})
	deadline := time.Now().Add(wait)
	for {
		resp, err := s.client.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service was not ready within %v:\n%s", wait, s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// do runs one GraphQL operation that must succeed and decodes its data into out.
func (s *service) do(query string, vars map[string]any, out any) {
	s.t.Helper()
	body, _ := json.Marshal(map[string]any{"query": query, "variables": vars})
	resp, err := s.client.Post(s.url, "application/json", bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Data   json.RawMessage `json:"data"`
		Errors []any           `json:"errors"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Errors) > 0 {
		s.t.Fatalf("%s: %v %v", query, err, r.Errors)
	}
	if out != nil {
		if err := json.Unmarshal(r.Data, out); err != nil {
			s.t.Fatal(err)
		}
	}
}

// spawn records that watcher spawned child, which seeds watcher's cursor on it.
func (s *service) spawn(watcher, child string) {
	s.t.Helper()
	s.do(`mutation($k: String!, $w: String!) { recordEvent(input: {sessionKey: $k, kind: child_spawned, actorType: agent, actorId: $w, watchers: [$w]}) { recorded } }`,
		map[string]any{"k": child, "w": watcher}, nil)
}

// human records a person's message into key and returns when it was committed.
func (s *service) human(key string) time.Time {
	s.t.Helper()
	s.do(`mutation($k: String!) { recordEvent(input: {sessionKey: $k, kind: human_direct_message, actorType: human, channel: "telegram"}) { noticesOpened } }`,
		map[string]any{"k": key}, nil)
	return time.Now()
}

type pendingNotice struct {
	Target          string `json:"target"`
	NotifiedVersion int64  `json:"notifiedVersion"`
	ChangesSince    int64  `json:"changesSince"`
	Text            string `json:"text"`
}

func (s *service) pending(watcher string) []pendingNotice {
	s.t.Helper()
	var out struct {
		PendingNotices []pendingNotice `json:"pendingNotices"`
	}
	s.do(`query($w: String!) { pendingNotices(watcher: $w) { target notifiedVersion changesSince text } }`, map[string]any{"w": watcher}, &out)
	return out.PendingNotices
}

// noticeText is NTC-1's text with the default tool, written from the specification.
func noticeText(target string, l int64) string {
	return fmt.Sprintf(`Session %q changed (other actor). Reconcile before acting: session_status sessionKey %q changesSince %d.`, target, target, l)
}

// ---------------------------------------------------------------------------------
// The harnesses' environment

// quietEnv is the environment of a harness process: a home of its own, every
// endpoint on loopback, telemetry, error reports, update checks and other traffic
// that is not the model's off.
func quietEnv(home string, extra ...string) []string {
	env := []string{
		"HOME=" + home, "PATH=" + os.Getenv("PATH"), "TERM=dumb", "LANG=C.UTF-8", "TMPDIR=" + os.TempDir(),
		"NO_PROXY=*", "no_proxy=*",
		// Claude Code.
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
		"DISABLE_AUTOUPDATER=1", "DISABLE_UPDATES=1", "DISABLE_GROWTHBOOK=1", "CLAUDE_CODE_DISABLE_FEATURE_FLAGS=1",
		"DISABLE_COMPACT=1", "DISABLE_AUTO_COMPACT=1", "CLAUDE_CODE_DISABLE_CLAUDE_MDS=1", "DISABLE_BUG_COMMAND=1",
		// Codex.
		"CODEX_HOME=" + filepath.Join(home, ".codex"), "OTEL_SDK_DISABLED=true",
	}
	return append(env, extra...)
}

// runCtx bounds one harness run.
func runCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	t.Cleanup(cancel)
	return ctx
}

// count returns how many of the requests contain s.
func countIn(rs []modelRequest, s string) (total int) {
	for _, r := range rs {
		total += r.Count(s)
	}
	return total
}

func lastUserText(r modelRequest) string {
	msgs, _ := r.JSON["messages"].([]any)
	if len(msgs) == 0 {
		return ""
	}
	b, _ := json.Marshal(msgs[len(msgs)-1])
	return string(b)
}

var _ = strings.Contains
