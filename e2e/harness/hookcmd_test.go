package harness

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// runInject runs `awareness hook inject` with input on stdin.
func runInject(t testing.TB, url, input string, extra ...string) (stdout, stderr string, took time.Duration) {
	t.Helper()
	cmd := exec.Command(serverBin, append([]string{"hook", "inject", "--url", url, "--watcher", ccWatcher}, extra...)...)
	cmd.Stdin = strings.NewReader(input)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("hook inject: %v\n%s", err, errb.String())
	}
	return out.String(), errb.String(), time.Since(start)
}

const promptInput = `{"hook_event_name":"UserPromptSubmit","session_id":"s","cwd":"/tmp","prompt":"hi"}`

// CLT-4: the hook never holds a turn past its bound and prints nothing when the
// service is down or does not answer; nothing when nothing is pending.
func TestHookInject_DownSlowOrNothingPending_PrintsNothing_CLT4(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
	}))
	defer slow.Close()
	svc := startService(t)
	for name, url := range map[string]string{"down": "http://127.0.0.1:1/query", "slow": slow.URL + "/query", "nothing pending": svc.url} {
		out, _, took := runInject(t, url, promptInput, "--bound", "500ms")
		if out != "" {
			t.Errorf("%s: printed %q, want nothing", name, out)
		}
		// Generous: the bound plus the process's start on a loaded machine.
		if took > 5*time.Second {
			t.Errorf("%s: took %v with --bound 500ms", name, took)
		}
	}
	svc.spawn(ccWatcher, "agent:main:subagent:h")
	svc.human("agent:main:subagent:h")
	for _, event := range []string{"Notification", "PreToolUse", "SessionEnd"} {
		if out, _, _ := runInject(t, svc.url, `{"hook_event_name":"`+event+`"}`); out != "" {
			t.Errorf("%s: printed %q, want nothing (the event takes no context)", event, out)
		}
	}
	if p := svc.pending(ccWatcher); len(p) != 1 {
		t.Fatalf("pending = %+v, want the notice untouched by hooks that print nothing", p)
	}
	out, _, _ := runInject(t, svc.url, promptInput)
	if !strings.Contains(out, jsonText(noticeText("agent:main:subagent:h", 1))) || !strings.Contains(out, `"hookEventName":"UserPromptSubmit"`) {
		t.Errorf("printed %q, want the notice as the prompt's additionalContext", out)
	}
	if out, _, _ := runInject(t, svc.url, promptInput); out != "" {
		t.Errorf("the second inject printed %q, want nothing (acknowledged)", out)
	}
}

// BenchmarkHookInject measures one `awareness hook inject` as the harness runs it
// (process start, stdin, the service on loopback): with nothing pending (one query)
// and with one notice (the query, the claim, the output), against the baseline of
// starting the same binary for its version of nothing (`hook --help`).
func BenchmarkHookInject(b *testing.B) {
	svc := startService(b)
	b.Run("impl=baseline-exec", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command(serverBin, "hook", "--help").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=inject/pending=0", func(b *testing.B) {
		for b.Loop() {
			runInject(b, svc.url, promptInput)
		}
	})
	b.Run("impl=inject/pending=1", func(b *testing.B) {
		target := "agent:main:subagent:bench"
		svc.spawn(ccWatcher, target)
		for b.Loop() {
			b.StopTimer()
			svc.human(target)
			b.StartTimer()
			if out, _, _ := runInject(b, svc.url, promptInput); out == "" {
				b.Fatal("nothing injected")
			}
		}
	})
}
