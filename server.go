// Command awareness is the session state awareness service: a durable signal log of
// typed session changes, watchers with one consolidated stale notice each, and
// reconciliation through sessionStatus(changesSince:), served over GraphQL.
//
// Usage:
//
//	awareness [serve] [flags]   run the service, the default command
//	awareness status [--json]   print the database's state
//	awareness sessions [--json] list the sessions registry
//	awareness import --agent ID FILE   import a gateway's sessions.json
//	awareness help              print this help
//
// This file and serve_config.go are the composition root: only they, and the tools of
// cli.go through the loader of config.go, read flags and environment variables; serve
// validates them all before opening anything, and Main in serve.go opens the store,
// the service, the background services and the HTTP server in order and closes them
// in reverse.
package main

//go:generate go run ./graph/bindcheck
//go:generate go tool gqlgen generate
//go:generate go run ./internal/vocabgen -o clients/ts/src/vocab_tables.ts

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Exit codes of run.
const (
	exitOK    = 0
	exitError = 1 // the service could not start or failed while running
	exitUsage = 2 // bad command line or environment
)

// HTTP server timeouts. ReadTimeout bounds reading one request; net/http clears it
// when a WebSocket hijacks the connection. There is no write timeout: WebSocket
// streams are long-lived and bound their own writes with wsgorilla.WriteTimeout.
const (
	readHeaderTimeout = 10 * time.Second
	readTimeout       = 30 * time.Second
	idleTimeout       = 2 * time.Minute
	readyzTimeout     = 2 * time.Second
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command and returns the process exit code. Cancelling ctx, on
// SIGINT or SIGTERM in main, shuts the service down gracefully.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	} else if len(args) > 0 && isHelpFlag(args[0]) {
		// "awareness -h" is the whole binary's help; "awareness serve -h" is serve's.
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	switch cmd {
	case "serve":
		cfg, err := parseServeConfig(args, os.LookupEnv, stdout)
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		if err != nil {
			fmt.Fprintf(stderr, "awareness serve: %v\nRun 'awareness serve -h' for the flags.\n", err)
			return exitUsage
		}
		return serve(ctx, cfg, stderr)
	case "demo":
		cfg, err := parseServeConfig(append([]string{"--demo"}, args...), os.LookupEnv, stdout)
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		if err != nil {
			fmt.Fprintf(stderr, "awareness demo: %v\nRun 'awareness demo -h' for the flags.\n", err)
			return exitUsage
		}
		return serve(ctx, cfg, stderr)
	case "status", "sessions", "import":
		return runTool(ctx, cmd, args, processToolEnv(stdout, stderr))
	case "mcp":
		return mcpCmd(ctx, args, os.Stdin, stdout, stderr, os.LookupEnv)
	case "hook":
		return hookCmd(ctx, args, os.Stdin, stdout, stderr, os.LookupEnv)
	case "help":
		if len(args) == 1 && args[0] != "help" {
			return run(ctx, []string{args[0], "--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usageText)
		return exitOK
	default:
		fmt.Fprintf(stderr, "awareness: unknown command %q\n\n%s", cmd, usageText)
		return exitUsage
	}
}

func isHelpFlag(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

const usageText = `awareness — session state awareness service

Tells AI-agent sessions when another actor changed a session they depend on, once,
and lets them catch up before they act (GraphQL over HTTP, WebSocket and Server-Sent
Events; MCP).

Usage:
  awareness [serve] [flags]   run the service (the default command)
  awareness demo [flags]      run the service with a live demo scene (serve --demo)
  awareness status [--json]   print the database's state: counts, retention, last prune
  awareness sessions [--json] [--agent ID] [--active MINUTES]
                              list the sessions registry with state versions
  awareness import --agent ID FILE
                              import a gateway's sessions.json into the registry
  awareness mcp [--url URL] [--token-file FILE]
                              serve MCP on stdin/stdout in front of a running service's /mcp
  awareness hook inject|wait|install ...
                              the hooks of Claude Code and Codex: notices into the
                              model's next request, an idle session woken
  awareness help [COMMAND]    print this help, or a command's

serve, demo, status, sessions and import take --db (default ./awareness.db,
$AWARENESS_DB); mcp takes the running service's --url instead. Run
'awareness <command> --help' for its flags. Every flag can also be set through the
environment variable named in its help; the flag wins over the variable. Exit
status: 0 ok, 1 failure, 2 bad command line.
`

const serveAbout = `
Run the service: the GraphQL API on /query (POST, GET, WebSocket and Server-Sent
Events), the Model Context Protocol on /mcp (streamable HTTP: tools in toolsets,
--mcp-read-only, sessions bound to their token and closed after --mcp-session-idle),
the dashboard on /, GraphiQL on /playground, /healthz, /readyz and Prometheus metrics
on /metrics.
The database is a SQLite file (created if missing; one serving process per file, held
by an exclusive lock on FILE.lock) or a PostgreSQL URL; its schema is migrated at
startup, after the port is bound. SIGINT or SIGTERM shuts down gracefully: /readyz
answers 503, WebSockets are closed with 1012 (service restart), running requests
finish, then the port closes. The socket may come from systemd (socket activation);
--reuse-port lets the next process bind the port while this one drains.

Every route answers only requests whose Host is an IP address, localhost or the
--addr host (DNS rebinding protection; others get 403 FORBIDDEN). On an address other
machines reach (--addr 0.0.0.0:8080, a LAN address), give --auth-file (required, or
--insecure) and --allowed-hosts with every name clients use to reach the service
(its DNS name, a proxy's public name), and --allowed-origins for browser pages of
another origin. Each token (each remote address without --auth-file) has a budget:
--query-rate/--query-burst query points, --rate-limit/--rate-burst writes,
--max-streams open subscriptions.

Tracing is off unless the standard OpenTelemetry variables configure an OTLP
exporter: OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or
OTEL_TRACES_EXPORTER=otlp), OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, ... (OTLP over
HTTP/protobuf).`

const demoAbout = `
Run the service with a demo scene: a manager with three sub-agents, a person typing
into one, a goal change and a child run timing out, then gentle ongoing activity.
It is 'awareness serve --demo'; every flag of serve applies.`

// printServeHelp prints the help of serve, or of demo, with fs's flags.
func printServeHelp(w io.Writer, fs *flagSet, demo bool) {
	name, about := "serve", serveAbout
	if demo {
		name, about = "demo", demoAbout
	}
	fmt.Fprintf(w, "Usage: awareness %s [flags]\n\n%s\n\nFlags:\n", name, strings.TrimSpace(about))
	fs.printDefaults(w)
	fmt.Fprint(w, "\nEvery flag can also be set through the environment variable in its help; the flag wins.\n"+
		"Exit status: 0 after a clean shutdown, 1 when the service failed, 2 for a bad command line.\n")
}
