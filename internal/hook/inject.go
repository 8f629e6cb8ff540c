// Package hook is the agent-harness side of the notice path (CLT-4): the hooks that
// Claude Code and Codex run, which put a watcher's pending notices into the model's
// next request and acknowledge exactly what they put there, the long-lived wait that
// wakes an idle session, and the installer of both harnesses' settings. It speaks
// only the service's public GraphQL API, through the client package.
package hook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/awareness/awareness/client"
)

// Defaults of the hook commands.
const (
	// DefaultBound is the longest an inject adds to a turn, service down or slow
	// included: after it the hook prints nothing and exits 0.
	DefaultBound = time.Second
	// MaxContext bounds the text one hook prints: Claude Code replaces context over
	// 10,000 characters by a file reference, which the model would have to read.
	MaxContext = 9000
	// maxInput bounds the hook input read from stdin.
	maxInput = 1 << 20
)

// Format is the harness whose output form the hook prints.
type Format string

// The harnesses.
const (
	Claude Format = "claude"
	Codex  Format = "codex"
)

// ParseFormat checks a --format value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case Claude, Codex:
		return f, nil
	}
	return "", fmt.Errorf("--format %q: want claude or codex", s)
}

// Input is the fields a hook uses of what a harness writes to a command hook's
// stdin; Claude Code and Codex share the names.
type Input struct {
	HookEventName  string `json:"hook_event_name"`
	SessionID      string `json:"session_id"`
	Cwd            string `json:"cwd"`
	TranscriptPath string `json:"transcript_path"`
	StopHookActive bool   `json:"stop_hook_active"`
}

// Config is what inject and wait need.
type Config struct {
	Client *client.Client
	// Watcher is the session whose notices the hook delivers. "{session_id}" in it is
	// replaced by the harness's session id.
	Watcher string
	Format  Format
	// Bound is the longest an inject runs; DefaultBound when 0.
	Bound time.Duration
	// MaxContext bounds the printed text; the package's MaxContext when 0.
	MaxContext int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

func (c Config) watcherFor(in Input) string {
	return strings.ReplaceAll(c.Watcher, "{session_id}", in.SessionID)
}

// events says what each harness reads for an event: "context" is additionalContext,
// added to the model's next request, which Claude Code's Stop continues the turn with
// once, where its decision:block form would show the text twice; "continue" is the
// decision:block form that continues Codex's turn with the text as a prompt. Other
// events get nothing.
var events = map[Format]map[string]string{
	Claude: {
		"SessionStart": "context", "UserPromptSubmit": "context", "PostToolUse": "context",
		"PostToolUseFailure": "context", "Stop": "context", "SubagentStop": "context",
	},
	Codex: {
		"SessionStart": "context", "UserPromptSubmit": "context", "PostToolUse": "context",
		"Stop": "continue",
	},
}

// Inject runs one `awareness hook inject`: it reads the hook input from stdin, claims
// the watcher's pending notices that fit in the output with an exact acknowledgement
// (NTC-3), and prints those it claimed in the form the harness reads for the input's
// event. It prints nothing when nothing is pending, when the event takes no context,
// or when the service does not answer within the bound. Diagnostics go to stderr;
// Inject never fails the harness's turn, and returns the process's exit code, 0.
func Inject(ctx context.Context, cfg Config, stdin io.Reader, stdout, stderr io.Writer) int {
	bound := cfg.Bound
	if bound <= 0 {
		bound = DefaultBound
	}
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	in, err := readInput(ctx, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "awareness hook: %v\n", err)
		return 0
	}
	how := events[cfg.Format][in.HookEventName]
	if how == "" {
		return 0
	}
	watcher := cfg.watcherFor(in)
	pending, err := Pending(ctx, cfg.Client, watcher)
	if err != nil {
		fmt.Fprintf(stderr, "awareness hook: pending notices of %s: %v (nothing injected)\n", watcher, err)
		return 0
	}
	if len(pending) == 0 {
		return 0
	}
	limit := cfg.MaxContext
	if limit <= 0 {
		limit = MaxContext
	}
	fit := Fit(pending, limit)
	claimed, err := Claim(ctx, cfg.Client, watcher, pending[:fit])
	if err != nil {
		fmt.Fprintf(stderr, "awareness hook: acknowledging the notices of %s: %v (nothing injected; they stay pending)\n", watcher, err)
		return 0
	}
	if len(claimed) == 0 {
		return 0
	}
	text := Render(claimed, len(pending)-fit)
	out, err := Output(cfg.Format, in.HookEventName, how, text)
	if err != nil {
		fmt.Fprintf(stderr, "awareness hook: %v\n", err)
		return 0
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "awareness hook: writing the output: %v (%d acknowledged notices not delivered)\n", err, len(claimed))
	}
	return 0
}

// readInput reads and decodes the hook input, waiting at most until ctx ends.
func readInput(ctx context.Context, stdin io.Reader) (Input, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(stdin, maxInput+1))
		done <- result{b, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return Input{}, errors.New("no hook input on stdin within the bound")
	}
	if r.err != nil {
		return Input{}, fmt.Errorf("reading the hook input: %v", r.err)
	}
	if len(r.b) > maxInput {
		return Input{}, fmt.Errorf("the hook input is over %d bytes", maxInput)
	}
	var in Input
	if err := json.Unmarshal(r.b, &in); err != nil {
		return Input{}, fmt.Errorf("the hook input is not a JSON object: %v", err)
	}
	return in, nil
}

// Output is the hook's stdout for event: additionalContext for how "context", or, for
// "continue", the decision that continues the turn with text as its instruction.
func Output(f Format, event, how, text string) ([]byte, error) {
	var v any
	switch how {
	case "context":
		v = map[string]any{"hookSpecificOutput": map[string]any{"hookEventName": event, "additionalContext": text}}
	case "continue":
		v = map[string]any{"decision": "block", "reason": text}
	default:
		return nil, fmt.Errorf("%s hooks of %s take no notices", event, f)
	}
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}
