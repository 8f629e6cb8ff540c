package hook

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/awareness/awareness/client"
)

// DefaultWaitTimeout is how long `awareness hook wait` holds its subscription before
// it exits 0; the harness starts it again after the next turn. Give the hook's own
// timeout in the harness's settings a margin above it.
const DefaultWaitTimeout = 10 * time.Minute

// Exit codes of Wait.
const (
	WaitTimedOut = 0 // nothing woke the session within the timeout
	WaitError    = 1 // the service refused the watcher (a bad token, a bad key)
	WaitWoke     = 2 // notices printed on stderr: Claude Code's asyncRewake wakes the model
)

// claimRetry is the pause before claiming again after the service did not answer.
const claimRetry = 250 * time.Millisecond

// Wait runs one `awareness hook wait`: it holds a staleNotices subscription of the
// watcher until a notice with wake set (NTC-6) is pending, claims the pending wake
// notices exactly as Inject does, prints them on stderr and returns WaitWoke. Claude
// Code runs it as an asyncRewake hook: exit 2 wakes the idle session with stderr as
// the model's next input, or adds it to the turn in progress. Wait acknowledges what
// it printed, as Inject does, because the woken turn's own hooks would otherwise
// print the same notices a second time. It returns WaitTimedOut after timeout, and at
// once under a one-shot `claude -p`, and WaitError when the stream is refused for
// good. The service being down is no error: the subscription reconnects.
func Wait(ctx context.Context, cfg Config, timeout time.Duration, stdin io.Reader, stderr io.Writer) int {
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	if oneShot() {
		return WaitTimedOut
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The hook input only names the session, as {session_id}; a wait started by hand
	// has none.
	inCtx, inCancel := context.WithTimeout(ctx, DefaultBound)
	in, _ := readInput(inCtx, stdin)
	inCancel()
	watcher := cfg.watcherFor(in)
	w, err := cfg.Client.Watch([]string{watcher}, client.WatcherOptions{MaxBackoff: 2 * time.Second})
	if err != nil {
		fmt.Fprintf(stderr, "awareness hook wait: %v\n", err)
		return WaitError
	}
	defer w.Close()
	limit := cfg.MaxContext
	if limit <= 0 {
		limit = MaxContext
	}
	now := time.Now
	if cfg.Now != nil {
		now = cfg.Now
	}
	// A notice already pending when the wait starts is the business of the inject
	// hook that runs beside it at the same Stop and continues the turn with it; the
	// wait takes it only if it is still pending after a grace period.
	start := now()
	grace := start.Add(2 * DefaultBound)
	retry := time.NewTimer(0)
	<-retry.C
	for {
		select {
		case <-ctx.Done():
			if err := w.Err(); err != nil {
				fmt.Fprintf(stderr, "awareness hook wait: %v\n", err)
				return WaitError
			}
			return WaitTimedOut
		case <-w.Notify():
		case <-retry.C:
		}
		if err := w.Err(); err != nil {
			fmt.Fprintf(stderr, "awareness hook wait: %v\n", err)
			return WaitError
		}
		var wake []client.Notice
		held := false
		for _, n := range w.Pending(watcher) {
			switch {
			case !n.Wake:
			case n.OpenedAt.Before(start) && now().Before(grace):
				held = true
			default:
				wake = append(wake, n)
			}
		}
		if held && len(wake) == 0 {
			retry.Reset(grace.Sub(now()))
		}
		if len(wake) == 0 {
			continue
		}
		fit := Fit(wake, limit)
		claimed, err := Claim(ctx, cfg.Client, watcher, wake[:fit])
		if err != nil {
			retry.Reset(claimRetry)
			continue
		}
		// Take what was claimed, or what someone else acknowledged, out of the
		// Watcher's set; the closed items would do it, a little later.
		w.Drain(watcher)
		if len(claimed) == 0 {
			continue
		}
		fmt.Fprintln(stderr, Render(claimed, len(wake)-fit))
		return WaitWoke
	}
}

// oneShot reports whether the harness that started this hook is a `claude -p` run
// without stream-json input: it answers one prompt and exits, but waits for its
// background hooks first, so a wait would hold it up to the timeout with nothing
// to wake. It looks for the claude process among the hook's ancestors in Linux's
// /proc; elsewhere it reports false.
func oneShot() bool {
	pid := os.Getppid()
	for range 8 {
		if pid <= 1 {
			return false
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return false
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if base := filepath.Base(args[0]); base == "claude" || base == "claude.exe" {
			print, stream := false, false
			for i, a := range args[1:] {
				switch {
				case a == "-p" || a == "--print":
					print = true
				case a == "--input-format=stream-json" || a == "--input-format" && i+2 < len(args) && args[i+2] == "stream-json":
					stream = true
				}
			}
			return print && !stream
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return false
		}
		// The parent pid is the fourth field, after the command in parentheses.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil {
			return false
		}
	}
	return false
}
