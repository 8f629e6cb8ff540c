package hook

import (
	"context"
	"fmt"
	"io"
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
// watcher until a notice that wakes it (wake: true, NTC-6) is pending, claims the
// pending wake notices exactly as Inject does, prints them on stderr and returns
// WaitWoke. Claude Code runs it as an asyncRewake hook: exit 2 wakes the idle session
// with stderr as the model's next input, or adds it to the turn in progress. Wait
// acknowledges what it printed, as Inject does, because the woken turn's own hooks
// would otherwise print the same notices a second time. It returns WaitTimedOut
// after timeout, and WaitError when the stream is refused for good. The service
// being down is no error: the subscription reconnects.
func Wait(ctx context.Context, cfg Config, timeout time.Duration, stdin io.Reader, stderr io.Writer) int {
	if timeout <= 0 {
		timeout = DefaultWaitTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The hook input only names the session ({session_id}); a wait started by hand
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
		for _, n := range w.Pending(watcher) {
			if n.Wake {
				wake = append(wake, n)
			}
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
