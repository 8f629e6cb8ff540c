package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/syncbuf"
)

const ccWatcher = "agent:main:main"

// claudeSession is one Claude Code process in stream-json mode: a long-lived session
// that takes user messages on stdin and reports each turn's end with a result line.
type claudeSession struct {
	t       *testing.T
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	results chan map[string]any
	stderr  *syncbuf.Buffer
	model   *fakeModel
	svc     *service
}

// startClaude installs the hooks into a fresh project with `awareness hook install
// claude --project`, then starts Claude Code there against the fake model.
func startClaude(t *testing.T, svc *service, m *fakeModel, wake bool, extraArgs ...string) *claudeSession {
	t.Helper()
	claude := harnessBin(t, "claude")
	home := t.TempDir()
	proj := filepath.Join(home, "project")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	install := exec.Command(serverBin, "hook", "install", "claude", "--project", proj, "--url", svc.url, "--watcher", ccWatcher, fmt.Sprintf("--wake=%v", wake))
	install.Env = []string{"HOME=" + home}
	if out, err := install.CombinedOutput(); err != nil {
		t.Fatalf("hook install claude: %v\n%s", err, out)
	}
	args := append([]string{"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--model", "claude-sonnet-4-5"}, extraArgs...)
	s := &claudeSession{t: t, results: make(chan map[string]any, 16), stderr: new(syncbuf.Buffer), model: m, svc: svc}
	s.cmd = exec.Command(claude, args...)
	s.cmd.Dir = proj
	s.cmd.Env = quietEnv(home, "ANTHROPIC_BASE_URL="+m.url, "ANTHROPIC_API_KEY=sk-ant-test-key")
	s.cmd.Stderr = s.stderr
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) == nil && line["type"] == "result" {
				s.results <- line
			}
		}
		close(s.results)
	}()
	t.Cleanup(func() {
		s.stdin.Close()
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("claude stderr:\n%s", s.stderr.String())
		}
	})
	return s
}

// send sends one user message.
func (s *claudeSession) send(text string) {
	s.t.Helper()
	b, _ := json.Marshal(map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}})
	if _, err := s.stdin.Write(append(b, '\n')); err != nil {
		s.t.Fatal(err)
	}
}

// turnEnd waits for the end of the current turn.
func (s *claudeSession) turnEnd() map[string]any {
	s.t.Helper()
	select {
	case r, ok := <-s.results:
		if !ok {
			s.t.Fatalf("claude exited:\n%s", s.stderr.String())
		}
		if isErr, _ := r["is_error"].(bool); isErr {
			s.t.Fatalf("the turn failed: %v", r)
		}
		return r
	case <-time.After(wait):
		s.t.Fatalf("no turn end within %v", wait)
	}
	return nil
}

// children spawns n sub-agents of the watcher (their notices are the test's).
func children(svc *service, prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("agent:main:subagent:%s%d", prefix, i)
		svc.spawn(ccWatcher, out[i])
	}
	return out
}

// checkOnce fails unless every text occurs exactly once in the last request (the
// whole conversation), and returns how many occur more often.
func checkOnce(t *testing.T, last modelRequest, texts []string) (dups int) {
	t.Helper()
	for _, text := range texts {
		if n := last.Count(text); n != 1 {
			t.Errorf("the model was shown %q %d times, want 1", text, n)
			if n > 1 {
				dups++
			}
		}
	}
	return dups
}

// CLT-4, CLT-5: notices opened before a prompt reach the model in that prompt's
// request, each exactly once, are acknowledged, and are not repeated by the
// following prompts; 10 turns of 10 notices each, in one long-lived session.
func TestClaudeCode_NoticeInNextRequestOnce_CLT4_CLT5(t *testing.T) {
	svc := startService(t)
	m := startFakeModel(t, "anthropic")
	kids := children(svc, "k", 10)
	// Without the wake hook: a notice opened between two prompts would wake the idle
	// session first (TestClaudeCode_WaitWakesIdleSession).
	s := startClaude(t, svc, m, false)
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
		s.send(fmt.Sprintf("prompt %d", turn))
		s.turnEnd()
		rs := m.mainRequests()
		if len(rs) != before+1 {
			t.Fatalf("turn %d: %d model requests, want 1", turn, len(rs)-before)
		}
		first := rs[before]
		latency = append(latency, first.At.Sub(recorded))
		for _, text := range texts {
			if n := lastUserCount(first, text); n != 1 {
				t.Errorf("turn %d: the prompt's request shows %q %d times, want 1", turn, text, n)
			}
		}
		if p := svc.pending(ccWatcher); len(p) != 0 {
			t.Errorf("turn %d: still pending after the turn: %+v", turn, p)
		}
		all = append(all, texts...)
	}
	// One more prompt with nothing new: nothing is injected again.
	s.send("and now?")
	s.turnEnd()
	rs := m.mainRequests()
	last := rs[len(rs)-1]
	if strings.Contains(lastUserText(last), "[awareness]") {
		t.Errorf("a prompt with nothing pending got a notice: %s", lastUserText(last))
	}
	dups := checkOnce(t, last, all)
	t.Logf("Claude Code: %d notices over %d prompts, %d shown twice; recordEvent → the model's request (prompt sent at once): %v (%s)",
		len(all), 11, dups, latency, netns)
}

// lastUserCount counts text in the request's last user message (what this request
// added to the conversation).
func lastUserCount(r modelRequest, text string) int {
	enc, _ := json.Marshal(text)
	return strings.Count(lastUserText(r), string(enc[1:len(enc)-1]))
}
