package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// codexRun runs one `codex exec` (resume: continue the last session) in home's
// project with the hooks `awareness hook install codex` wrote, against the fake
// Responses API.
func codexRun(t *testing.T, home string, m *fakeModel, resume bool, prompt string) string {
	t.Helper()
	codex := harnessBin(t, "codex")
	args := []string{"exec"}
	if resume {
		args = append(args, "resume", "--last")
	}
	args = append(args, "--dangerously-bypass-hook-trust", "--skip-git-repo-check", prompt)
	cmd := exec.CommandContext(runCtx(t), codex, args...)
	cmd.Dir = filepath.Join(home, "project")
	cmd.Env = quietEnv(home, "FAKE_MODEL_KEY=sk-test", "RUST_LOG=error")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("codex %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// setupCodex writes Codex's config (the fake provider, no telemetry) into a fresh
// home, then runs `awareness hook install codex` over it, which keeps it.
func setupCodex(t *testing.T, svc *service, m *fakeModel) string {
	t.Helper()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, "project"), 0o755); err != nil {
		t.Fatal(err)
	}
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o755); err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`# the test's provider: the fake Responses API on loopback
model = "gpt-5.1-codex"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.fake]
name = "fake"
base_url = "%s/v1"
wire_api = "responses"
env_key = "FAKE_MODEL_KEY"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false
`, m.url)
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	install := exec.Command(serverBin, "hook", "install", "codex", "--url", svc.url, "--watcher", ccWatcher)
	install.Env = []string{"HOME=" + home, "CODEX_HOME=" + codexHome}
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("hook install codex: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(filepath.Join(codexHome, "config.toml"))
	if !strings.HasPrefix(string(b), config) || !strings.Contains(string(b), "[mcp_servers.awareness]") {
		t.Fatalf("hook install codex did not keep the config and add the server:\n%s", b)
	}
	return home
}

// CLT-4, CLT-5: Codex gets the notices through its hooks (developer messages of the
// next request), each exactly once, acknowledged, not repeated on the next prompt:
// 10 prompts (each a `codex exec`, the later ones resuming the session) with 10 new
// notices before each, 100 in all, then one prompt with nothing new.
func TestCodex_NoticeInNextRequestOnce_CLT4_CLT5(t *testing.T) {
	svc := startService(t)
	m := startFakeModel(t, "responses")
	kids := children(svc, "cx", 10)
	home := setupCodex(t, svc, m)
	var all []string
	var latency []time.Duration
	for turn := range 10 {
		var texts []string
		var recorded time.Time
		for _, k := range kids {
			recorded = svc.human(k)
			texts = append(texts, noticeText(k, int64(1+turn)))
		}
		before := len(m.mainRequests())
		out := codexRun(t, home, m, turn > 0, fmt.Sprintf("prompt %d", turn))
		rs := m.mainRequests()
		if len(rs) <= before {
			t.Fatalf("turn %d: no request reached the fake model:\n%s", turn, out)
		}
		first := rs[before]
		latency = append(latency, first.At.Sub(recorded).Round(time.Millisecond))
		for _, text := range texts {
			if n := first.Count(text); n != 1 {
				t.Errorf("turn %d: the prompt's first request shows %q %d times, want 1", turn, text, n)
			}
		}
		if p := svc.pending(ccWatcher); len(p) != 0 {
			t.Errorf("turn %d: still pending after the turn: %+v", turn, p)
		}
		all = append(all, texts...)
	}
	// One more prompt with nothing new: the conversation it sends holds every notice
	// once (none injected again).
	codexRun(t, home, m, true, "and now?")
	rs := m.mainRequests()
	dups := checkOnce(t, rs[len(rs)-1], all)
	t.Logf("Codex: %d notices over %d prompts, %d shown twice, %d model requests; recordEvent → the model's request (a codex exec started at once): %v (%s)",
		len(all), 11, dups, len(rs), latency, netns)
}

// CLT-4: in Codex a notice that opens while the model answers continues the turn at
// Stop ({"decision":"block"}), once.
func TestCodex_StopContinuesOnce_CLT4(t *testing.T) {
	svc := startService(t)
	m := startFakeModel(t, "responses")
	kid := children(svc, "cxstop", 1)[0]
	home := setupCodex(t, svc, m)
	m.setScript(func(i int, r modelRequest) reply {
		if i == 0 {
			svc.human(kid)
		}
		return reply{Text: fmt.Sprintf("answer %d", i)}
	})
	codexRun(t, home, m, false, "hello")
	rs := m.mainRequests()
	text := noticeText(kid, 1)
	if len(rs) != 2 {
		t.Fatalf("%d model requests in the turn, want 2 (the answer, then the continuation with the notice)", len(rs))
	}
	if rs[0].Count(text) != 0 || rs[1].Count(text) != 1 {
		t.Errorf("the notice: %d times in the first request, %d in the continuation; want 0 and 1", rs[0].Count(text), rs[1].Count(text))
	}
	if p := svc.pending(ccWatcher); len(p) != 0 {
		t.Errorf("still pending: %+v", p)
	}
}
