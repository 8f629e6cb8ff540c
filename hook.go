package main

// `awareness hook`: the commands agent harnesses run, from internal/hook (CLT-4).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/awareness/awareness/client"
	"github.com/awareness/awareness/internal/hook"
)

const hookUsage = `Usage:
  awareness hook inject --watcher KEY [--url URL] [--token-file FILE] [--format claude|codex]
  awareness hook wait --watcher KEY [--url URL] [--token-file FILE] [--timeout 10m]
  awareness hook install claude|codex --watcher KEY [--url URL] [--token-file FILE] [--project DIR]

The commands Claude Code and Codex run as hooks, so that a stale notice reaches the
model (not only a socket) and is told once.

inject reads the hook's JSON on stdin and prints the watcher's pending notices in the
form the harness reads for the hook's event: additionalContext for SessionStart,
UserPromptSubmit and PostToolUse, the decision that continues the turn for Stop. It
acknowledges exactly the notices it prints (NTC-3), prints nothing when nothing is
pending, and prints nothing and exits 0 when the service does not answer within
--bound (1s): it never holds a turn up longer, and never blocks one.

wait (Claude Code's "asyncRewake" hook) holds a staleNotices subscription and, when a
notice that wakes the watcher opens, prints it on stderr, acknowledges it and exits 2,
which wakes the idle session; it exits 0 after --timeout.

install writes the hooks, the MCP server ('awareness mcp', always loaded) and the MCP
tools' permissions into the harness's settings: Claude Code's ~/.claude/settings.json
and ~/.claude.json, or DIR/.claude/settings.json and DIR/.mcp.json with --project;
Codex's $CODEX_HOME/hooks.json and config.toml (~/.codex), or DIR/.codex/ with
--project. What is there already is kept; running it again changes nothing.

"{session_id}" in --watcher is replaced by the harness's session id.
Exit status: inject 0 (1 for a bad command line: 2 would block the prompt); wait 0 on
timeout, 2 woken, 1 refused; install 0, 1 failure, 2 bad command line.

Flags:
`

// hookCmd runs `awareness hook SUB …`.
func hookCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	if len(args) == 0 || isHelpFlag(args[0]) || args[0] == "help" {
		fs, _ := hookFlags("inject")
		w := stdout
		if len(args) == 0 {
			w = stderr
		}
		fmt.Fprint(w, hookUsage)
		fs.printDefaults(w)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	sub, args := args[0], args[1:]
	// A bad command line exits 1 for inject: Claude Code takes exit 2 of a
	// UserPromptSubmit hook as "block this prompt".
	usage := exitUsage
	if sub == "inject" {
		usage = exitError
	}
	fs, f := hookFlags(sub)
	if fs == nil {
		fmt.Fprintf(stderr, "awareness hook: unknown subcommand %q (want inject, wait or install)\n", sub)
		return exitUsage
	}
	pos, err := fs.parse(args, lookupEnv, true)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, hookUsage)
		fs.printDefaults(stdout)
		return exitOK
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "awareness hook %s: %s\nRun 'awareness hook --help' for the flags.\n", sub, fmt.Sprintf(format, a...))
		return usage
	}
	if err != nil {
		return fail("%v", err)
	}
	if strings.TrimSpace(*f.watcher) == "" {
		return fail("--watcher is required: the session whose notices the hook delivers, e.g. agent:main:main")
	}
	switch sub {
	case "install":
		if len(pos) != 1 {
			return fail("name the harness: install claude or install codex")
		}
		harness, err := hook.ParseFormat(pos[0])
		if err != nil {
			return fail("harness %q: want claude or codex", pos[0])
		}
		return hookInstall(harness, f, stdout, stderr, lookupEnv)
	default:
		if len(pos) > 0 {
			return fail("unexpected arguments: %q", pos)
		}
	}
	format, err := hook.ParseFormat(*f.format)
	if err != nil {
		return fail("%v", err)
	}
	opts := []client.Option{client.WithTimeout(*f.bound)}
	if *f.tokenFile != "" {
		tok, err := readMetricsToken(*f.tokenFile) // the same rule as every token file
		if err != nil {
			return fail("--token-file: %v", err)
		}
		opts = append(opts, client.WithToken(tok))
	}
	c, err := client.New(*f.url, opts...)
	if err != nil {
		return fail("--url: %v", err)
	}
	cfg := hook.Config{Client: c, Watcher: strings.TrimSpace(*f.watcher), Format: format, Bound: *f.bound}
	if sub == "wait" {
		return hook.Wait(ctx, cfg, *f.timeout, stdin, stderr)
	}
	return hook.Inject(ctx, cfg, stdin, stdout, stderr)
}

type hookFlagValues struct {
	url, watcher, tokenFile, format, project *string
	bound, timeout                           *time.Duration
	wake                                     *bool
}

// hookFlags defines the flags of one hook subcommand; nil for an unknown one.
func hookFlags(sub string) (*flagSet, hookFlagValues) {
	if sub != "inject" && sub != "wait" && sub != "install" {
		return nil, hookFlagValues{}
	}
	fs := newFlagSet("hook " + sub)
	var f hookFlagValues
	f.url = envFlag(fs, fs.String, "url", "http://127.0.0.1:8080/query", "AWARENESS_URL", "the service's GraphQL endpoint")
	f.watcher = envFlag(fs, fs.String, "watcher", "", "AWARENESS_WATCHER", "the watcher session whose notices reach this harness's model, e.g. agent:main:main")
	f.tokenFile = envFlag(fs, fs.String, "token-file", "", "AWARENESS_TOKEN_FILE", "a file holding the bearer token (mode 600), when the service runs with --auth-file")
	f.format = envFlag(fs, fs.String, "format", string(hook.Claude), "AWARENESS_HOOK_FORMAT", "the harness whose hook output to print: claude or codex")
	f.bound = envFlag(fs, fs.Duration, "bound", hook.DefaultBound, "AWARENESS_HOOK_BOUND", "inject: the longest the hook adds to a turn; past it the hook prints nothing")
	f.timeout = envFlag(fs, fs.Duration, "timeout", hook.DefaultWaitTimeout, "AWARENESS_HOOK_TIMEOUT", "wait: how long to hold the subscription before exiting 0")
	f.project = fs.String("project", "", "install: the project directory whose settings to write (default: the user's)")
	f.wake = fs.Bool("wake", true, "install claude: add the asyncRewake hook (hook wait) that wakes an idle session")
	return fs, f
}

func hookInstall(harness hook.Format, f hookFlagValues, stdout, stderr io.Writer, lookupEnv func(string) (string, bool)) int {
	bin, err := os.Executable()
	if err == nil {
		bin, err = filepath.EvalSymlinks(bin)
	}
	if err != nil {
		fmt.Fprintf(stderr, "awareness hook install: the path of this binary: %v\n", err)
		return exitError
	}
	home, _ := lookupEnv("HOME")
	if home == "" {
		if home, err = os.UserHomeDir(); err != nil {
			fmt.Fprintf(stderr, "awareness hook install: %v\n", err)
			return exitError
		}
	}
	codexHome, _ := lookupEnv("CODEX_HOME")
	cfg := hook.InstallConfig{Harness: harness, Project: *f.project, Home: home, CodexHome: codexHome, Binary: bin,
		URL: *f.url, Watcher: strings.TrimSpace(*f.watcher), TokenFile: *f.tokenFile, WaitTimeout: int(f.timeout.Seconds()), NoWake: !*f.wake}
	if cfg.TokenFile != "" {
		if cfg.TokenFile, err = filepath.Abs(cfg.TokenFile); err != nil {
			fmt.Fprintf(stderr, "awareness hook install: --token-file: %v\n", err)
			return exitError
		}
	}
	files, err := hook.Install(cfg)
	if err != nil {
		fmt.Fprintf(stderr, "awareness hook install %s: %v\n", harness, err)
		return exitError
	}
	for _, p := range files {
		fmt.Fprintf(stdout, "wrote %s\n", p)
	}
	return exitOK
}
