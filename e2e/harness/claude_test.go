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

// CLT-4: a notice that opens while a tool runs reaches the model in the request that
// carries the tool's result (PostToolUse), after that result, once.
func TestClaudeCode_NoticeDuringToolCallAfterResult_CLT4(t *testing.T) {
	svc := startService(t)
	m := startFakeModel(t, "anthropic")
	kid := children(svc, "tool", 1)[0]
	fifo := filepath.Join(t.TempDir(), "gate")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// The tool blocks on the fifo until the test has recorded the event.
	toolCalled := make(chan struct{})
	m.setScript(func(i int, r modelRequest) reply {
		if i == 0 {
			close(toolCalled)
			return reply{Tool: "Bash", ToolArgs: map[string]any{"command": "cat " + fifo + " && echo tool-finished", "description": "wait for the gate"}}
		}
		return reply{Text: "done"}
	})
	s := startClaude(t, svc, m, false, "--allowedTools", "Bash")
	s.send("run the tool")
	<-toolCalled
	svc.human(kid)
	text := noticeText(kid, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err == nil {
			f.WriteString("gate open\n")
			f.Close()
		}
	}()
	s.turnEnd()
	rs := m.mainRequests()
	if len(rs) < 2 {
		t.Fatalf("%d model requests, want the tool's result in a second", len(rs))
	}
	second := lastUserText(rs[1])
	result, notice := strings.Index(second, "tool-finished"), strings.Index(second, jsonText(text))
	if result < 0 || notice < 0 || notice < result {
		t.Errorf("the request after the tool call: tool result at %d, notice at %d, want the notice after the result:\n%s", result, notice, second)
	}
	if rs[0].Count(text) != 0 {
		t.Errorf("the notice was in the request before the tool ran")
	}
	t.Logf("the request after the tool call ends with: %s", second)
	checkOnce(t, rs[len(rs)-1], []string{text})
}

// CLT-4: a notice that opens while the model answers continues the turn at Stop,
// exactly once: one more request with the notice, then the turn ends (nothing is
// pending at the second Stop).
func TestClaudeCode_StopContinuesOnce_CLT4(t *testing.T) {
	svc := startService(t)
	m := startFakeModel(t, "anthropic")
	kid := children(svc, "stop", 1)[0]
	m.setScript(func(i int, r modelRequest) reply {
		if i == 0 {
			svc.human(kid) // while the model "thinks": after UserPromptSubmit ran
		}
		return reply{Text: fmt.Sprintf("answer %d", i)}
	})
	s := startClaude(t, svc, m, false)
	s.send("hello")
	s.turnEnd()
	rs := m.mainRequests()
	text := noticeText(kid, 1)
	if len(rs) != 2 {
		t.Fatalf("%d model requests in the turn, want 2 (the answer, then the continuation with the notice)", len(rs))
	}
	if rs[0].Count(text) != 0 || lastUserCount(rs[1], text) != 1 {
		t.Errorf("the notice: %d times in the first request, %d in the continuation's new message; want 0 and 1:\n%s",
			rs[0].Count(text), lastUserCount(rs[1], text), lastUserText(rs[1]))
	}
	if p := svc.pending(ccWatcher); len(p) != 0 {
		t.Errorf("still pending: %+v", p)
	}
	t.Logf("the continuation's new message: %s", lastUserText(rs[1]))
}

// CLT-4: hook wait (asyncRewake) wakes an idle stream-json session when a notice
// opens: the model gets a request with the notice and no prompt, once; the notice is
// acknowledged.
func TestClaudeCode_WaitWakesIdleSession_CLT4(t *testing.T) {
	svc := startService(t)
	m := startFakeModel(t, "anthropic")
	kids := children(svc, "idle", 3)
	s := startClaude(t, svc, m, true)
	s.send("hello")
	s.turnEnd()
	var took []time.Duration
	var texts []string
	for round, kid := range kids {
		n := len(m.mainRequests())
		// The Stop hook's wait subscribes in the background: a notice opened before
		// it listens is pending when it does, and it takes it after its grace.
		recorded := svc.human(kid)
		rs := m.waitMain(n+1, wait)
		took = append(took, rs[n].At.Sub(recorded))
		text := noticeText(kid, 1)
		if c := lastUserCount(rs[n], text); c != 1 {
			t.Errorf("round %d: the wake request shows the notice %d times, want 1:\n%s", round, c, lastUserText(rs[n]))
		}
		texts = append(texts, text)
		s.turnEnd()
		if p := svc.pending(ccWatcher); len(p) != 0 {
			t.Errorf("round %d: still pending after the woken turn: %+v", round, p)
		}
	}
	rs := m.mainRequests()
	dups := checkOnce(t, rs[len(rs)-1], texts)
	t.Logf("Claude Code wake: recordEvent → the model's request: %v; %d shown twice (%s)", took, dups, netns)
}

func jsonText(s string) string {
	enc, _ := json.Marshal(s)
	return string(enc[1 : len(enc)-1])
}
