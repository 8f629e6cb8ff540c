// Command awareness is the session state awareness service: a durable signal log of
// typed session changes, watchers with one consolidated stale notice each, and
// reconciliation through sessionStatus(changesSince:), served over GraphQL.
//
// Usage:
//
//	awareness [serve] [flags]   run the service (the default command)
//	awareness status [--json]   print the database's state (cli.go)
//	awareness sessions [--json] list the sessions registry (cli.go)
//	awareness import --agent ID FILE   import a gateway's sessions.json (cli.go)
//	awareness help              print this help
//
// This file is the composition root: only it (and the tools of cli.go, through the
// loader of config.go) reads flags and environment variables; it validates them all
// before opening anything, and Main opens the store, the service, the background
// services and the HTTP server in order and closes them in reverse.
package main

//go:generate go tool gqlgen generate

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/bus"
	"github.com/awareness/awareness/internal/demo"
	"github.com/awareness/awareness/internal/edge"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/telemetry"
	"github.com/awareness/awareness/internal/upstream"
	"github.com/awareness/awareness/internal/wsgorilla"
	"github.com/awareness/awareness/web"
)

// Exit codes of run.
const (
	exitOK    = 0
	exitError = 1 // the service could not start or failed while running
	exitUsage = 2 // bad command line or environment
)

// HTTP server timeouts. ReadTimeout bounds reading one request (net/http clears it
// when a WebSocket hijacks the connection). There is no write timeout: WebSocket
// streams are long-lived and bound their own writes (wsgorilla.WriteTimeout).
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

// run executes one command and returns the process exit code. Cancelling ctx (SIGINT
// or SIGTERM in main) shuts the service down gracefully.
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

// printServeHelp prints the help of serve (or demo) with fs's flags.
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

// serveConfig is the validated configuration of serve.
type serveConfig struct {
	Addr           string
	DB             string
	Retention      time.Duration
	MaxRows        int
	PruneInterval  time.Duration
	AllowedOrigins []string
	// AllowedHosts are the Host names served besides IP addresses, localhost and the
	// listen host (edge.Hosts; "*" serves every name).
	AllowedHosts    []string
	LogLevel        slog.Level
	ShutdownTimeout time.Duration
	Demo            bool
	DemoPace        time.Duration
	// Catalogs are the catalogs sessions can be adopted from (UPS-1).
	Catalogs           []catalogSpec
	UpstreamFirstCheck time.Duration
	UpstreamInterval   time.Duration
	// Auth holds the tokens of --auth-file; nil serves without authentication, which
	// is refused on a non-loopback address unless Insecure.
	Auth         *auth.Keyring
	AuthFile     string
	AuthWarnings []string
	Insecure     bool
	// ReusePort binds Addr with SO_REUSEPORT, so that the next process can bind it
	// while this one drains (listen.go).
	ReusePort bool
	// WSPingInterval and WSInitTimeout are the WebSocket ping cadence (a peer silent
	// for twice it is dropped) and the connection_init deadline.
	WSPingInterval time.Duration
	WSInitTimeout  time.Duration
	// NoticePoll is the safety poll of the cross-process notice listener
	// (PostgreSQL only).
	NoticePoll time.Duration
	// FeedBookmark is the longest a feed subscription goes idle without a bookmark
	// (FEED-3).
	FeedBookmark time.Duration
	// Holds is the redelivery and snooze policy (RDL-1, RDL-2) and HoldPoll how often
	// the due holds are woken.
	Holds    awareness.HoldPolicy
	HoldPoll time.Duration
	// MetricsToken, read from MetricsTokenFile, is the bearer token /metrics requires
	// ("": /metrics is open).
	MetricsTokenFile string
	MetricsToken     string
	// Tracing is true when the standard OTEL_* environment configures an OTLP
	// exporter (telemetry.TracingEnabled).
	Tracing bool
	// Hints is how cross-process hints are sent (--pg-hints; "" is the default).
	Hints models.HintMode
	// Bus is the NATS server that carries the hints in place of NOTIFY (--bus; ""
	// for none).
	Bus string
	// CheckpointInCommit leaves SQLite's checkpoints inside the commit
	// (--sqlite-checkpoint commit) instead of the store's checkpointer.
	CheckpointInCommit bool
	// TestHoldUpstreamSettlement is a test-only crash point, from
	// $AWARENESS_TEST_HOLD_UPSTREAM_SETTLEMENT=1 (no flag): after the upstream monitor
	// commits a cycle's activity events it holds their settlement (logging
	// testHoldUpstreamLog) until it is stopped, so that an end-to-end test can kill -9
	// the process between the event commit and the settlement (e2e/upstream_crash_test.go).
	// Never set it in production: watched links stop advancing.
	TestHoldUpstreamSettlement bool
	// Budget is the budget of each caller (internal/budget): query points (--query-rate,
	// --query-burst), writes and subscriptions started (--rate-limit, --rate-burst),
	// open streams (--max-streams).
	Budget budget.Limits
	// NoticeTool is the reconcile tool the notice text names (NTC-1).
	NoticeTool awareness.NoticeTool
	// MCP configures /mcp (mcp.go).
	MCP mcpConfig
}

// testHoldUpstreamEnv is the environment variable of serveConfig.TestHoldUpstreamSettlement,
// and testHoldUpstreamLog the message logged when the hold is reached.
const (
	testHoldUpstreamEnv = "AWARENESS_TEST_HOLD_UPSTREAM_SETTLEMENT"
	testHoldUpstreamLog = "test crash point: upstream activity committed, settlement held"
)

// parseServeConfig reads the flags of serve, then the environment for every flag not
// given on the command line, and validates the result. It opens nothing.
func parseServeConfig(args []string, lookupEnv func(string) (string, bool), usageOut io.Writer) (serveConfig, error) {
	// Errors are returned (run prints them); help is printed by printServeHelp.
	fs := newFlagSet("serve")
	var (
		addr            = envFlag(fs, fs.String, "addr", "127.0.0.1:8080", "AWARENESS_ADDR", "listen address host:port (unused when systemd passes the socket: socket activation)")
		reusePort       = envFlag(fs, fs.Bool, "reuse-port", false, "AWARENESS_REUSE_PORT", "bind --addr with SO_REUSEPORT (Linux), so that a new process can bind it while the old one still serves: a restart without a refused connection; on SQLite the new process waits for the old one's database lock")
		db              = fs.dbFlag("SQLite database file (created if missing), or a postgres:// URL of an existing PostgreSQL database that several processes may share")
		retention       = envFlag(fs, fs.Duration, "retention", awareness.DefaultRetention, "AWARENESS_RETENTION", "prune log rows and untouched cursors older than this; 0 keeps them")
		maxRows         = envFlag(fs, fs.Int, "max-rows", awareness.DefaultMaxRows, "AWARENESS_MAX_ROWS", "keep at most this many log rows in all; 0 means no cap")
		pruneInterval   = envFlag(fs, fs.Duration, "prune-interval", awareness.DefaultPruneInterval, "AWARENESS_PRUNE_INTERVAL", "how often retention runs, after once at startup")
		allowedOrigins  = envFlag(fs, fs.String, "allowed-origins", "", "AWARENESS_ALLOWED_ORIGINS", "comma-separated browser origins allowed to call /query (HTTP with CORS, SSE and WebSockets), e.g. 'dash.example.com,https://*.example.org'; requests without an Origin header and pages of the service's own host are always accepted")
		allowedHosts    = envFlag(fs, fs.String, "allowed-hosts", "", "AWARENESS_ALLOWED_HOSTS", "comma-separated host names requests may name in Host besides IP addresses, localhost and the --addr host (DNS rebinding protection): 'awareness.example.com,*.corp.example', or '*' for any; a request naming another host gets 403 FORBIDDEN")
		logLevel        = envFlag(fs, fs.String, "log-level", "info", "AWARENESS_LOG_LEVEL", "debug, info, warn or error")
		shutdownTimeout = envFlag(fs, fs.Duration, "shutdown-timeout", 10*time.Second, "AWARENESS_SHUTDOWN_TIMEOUT", "how long shutdown waits for in-flight requests")
		demoMode        = envFlag(fs, fs.Bool, "demo", false, "AWARENESS_DEMO", "seed a demo scene (a manager, three sub-agents, a person typing into one) and keep it lively")
		demoPace        = envFlag(fs, fs.Duration, "demo-pace", 3*time.Second, "AWARENESS_DEMO_PACE", "how often the demo records activity")
		firstCheck      = envFlag(fs, fs.Duration, "upstream-first-check", upstream.DefaultFirstCheck, "AWARENESS_UPSTREAM_FIRST_CHECK", "delay of the first check of adopted sessions' upstream transcripts")
		upInterval      = envFlag(fs, fs.Duration, "upstream-interval", upstream.DefaultInterval, "AWARENESS_UPSTREAM_INTERVAL", "how often adopted sessions' upstream transcripts are checked")
		authFile        = envFlag(fs, fs.String, "auth-file", "", "AWARENESS_AUTH_FILE", "JSON file of bearer tokens and their roles, mode 600: {\"tokens\":[{\"name\":\"dash\",\"role\":\"admin\" or \"agent:<id>\",\"token\":\"<32+ characters>\"}]}; without it every caller is admin")
		insecure        = envFlag(fs, fs.Bool, "insecure", false, "AWARENESS_INSECURE", "allow serving without --auth-file on a non-loopback address")
		wsPing          = envFlag(fs, fs.Duration, "ws-ping-interval", graph.WSPingPongInterval, "AWARENESS_WS_PING_INTERVAL", "WebSocket ping cadence; a client that leaves a ping unanswered for twice this is dropped")
		wsInit          = envFlag(fs, fs.Duration, "ws-init-timeout", graph.WSInitTimeout, "AWARENESS_WS_INIT_TIMEOUT", "time a WebSocket client has to send connection_init")
		noticePoll      = envFlag(fs, fs.Duration, "notice-poll", models.DefaultNoticePoll, "AWARENESS_NOTICE_POLL", "PostgreSQL: how often each process rescans pending notices besides LISTEN/NOTIFY")
		feedBookmark    = envFlag(fs, fs.Duration, "feed-bookmark", awareness.DefaultFeedBookmark, "AWARENESS_FEED_BOOKMARK", "the longest a feed subscription (staleNoticeFeed, stateEventFeed) stays silent: an idle one gets a FeedBookmark this often (100ms to 30s)")
		redeliverTurns  = envFlag(fs, fs.Int, "redeliver-turns", awareness.DefaultRedeliverTurns, "AWARENESS_REDELIVER_TURNS", "RDL-1: a notice drained (drainNotices) and neither acknowledged nor released comes back, marked redelivered, after this many later turns of its watcher (acknowledgements that do not name it) or --redeliver-after, whichever comes first")
		redeliverAfter  = envFlag(fs, fs.Duration, "redeliver-after", awareness.DefaultRedeliverAfter, "AWARENESS_REDELIVER_AFTER", "RDL-1: the longest a drained, unacknowledged notice waits before it comes back (at most the watch's maxRedeliver times per opening, default 1)")
		maxSnooze       = envFlag(fs, fs.Duration, "max-snooze", awareness.DefaultMaxSnooze, "AWARENESS_MAX_SNOOZE", "RDL-2: how far ahead snoozeNotice's until may be")
		holdPoll        = envFlag(fs, fs.Duration, "hold-poll", awareness.DefaultHoldPoll, "AWARENESS_HOLD_POLL", "RDL-1, RDL-2: how often snoozes that ended and drained notices past --redeliver-after are delivered again")
		metricsToken    = envFlag(fs, fs.String, "metrics-token-file", "", "AWARENESS_METRICS_TOKEN_FILE", "file holding the bearer token (at least 32 characters, mode 600) that /metrics then requires; without it /metrics is open to whoever reaches --addr")
		busURL          = envFlag(fs, fs.String, "bus", "", "AWARENESS_BUS", "PostgreSQL: a NATS server (nats://host:4222; several of one cluster comma-separated) that carries the hints between the processes in place of NOTIFY: each process receives only the hints of the watchers and sessions its own subscribers wait for; PostgreSQL stays the truth and --notice-poll still rescans")
		pgHints         = envFlag(fs, fs.String, "pg-hints", string(models.DefaultHints), "AWARENESS_PG_HINTS", "PostgreSQL without --bus: how a commit that opens notices or records events wakes the other processes: after-commit (a NOTIFY right after it: no instance-wide lock across the commit's WAL flush; a hint lost to a crash in between waits for --notice-poll), commit (a NOTIFY in the transaction) or off (--notice-poll only)")
		sqliteCkpt      = envFlag(fs, fs.String, "sqlite-checkpoint", "background", "AWARENESS_SQLITE_CHECKPOINT", "SQLite: where the write-ahead log is copied into the database file: background (beside the writer, never inside a commit; the log file stays under 64 MiB) or commit (SQLite's own checkpoint inside the commit that crosses 1,000 log pages)")
		queryRate       = envFlag(fs, fs.Float64, "query-rate", budget.DefaultPointsPerSecond, "AWARENESS_QUERY_RATE", "query points restored per second per token (per remote address without --auth-file); every operation spends its cost (about a microsecond of CPU a point); beyond it RATE_LIMITED with retryAfterMs; 0 sets no limit")
		queryBurst      = envFlag(fs, fs.Int, "query-burst", budget.DefaultPointsBurst, "AWARENESS_QUERY_BURST", "the most query points a token (an address) holds, spent at once before --query-rate applies")
		rateLimit       = envFlag(fs, fs.Float64, "rate-limit", budget.DefaultWritesPerSecond, "AWARENESS_RATE_LIMIT", "writes per second per token (per remote address without --auth-file): each event recorded (recordEvents counts its inputs), other mutation field and subscription started; beyond it RATE_LIMITED with retryAfterMs; 0 sets no limit")
		rateBurst       = envFlag(fs, fs.Int, "rate-burst", budget.DefaultWritesBurst, "AWARENESS_RATE_BURST", "the most writes a token (an address) may make at once before --rate-limit applies")
		maxStreams      = envFlag(fs, fs.Int, "max-streams", budget.DefaultMaxStreams, "AWARENESS_MAX_STREAMS", "subscriptions and SSE streams one token (one address) may hold open at once, over every connection; 0 sets no cap")
		noticeTool      = envFlag(fs, fs.String, "notice-tool", awareness.DefaultNoticeTool, "AWARENESS_NOTICE_TOOL", "the reconcile tool every notice's text names (NTC-1), e.g. the name a gateway registers for this service when its own session_status reads another log; the rest of the text is unchanged")
		catalogs        []catalogSpec
		mcpOpts         = mcpFlags(fs)
	)
	fs.Func("catalog", "`ID=DIR`: a directory of JSONL transcripts (<DIR>/<threadId>.jsonl) sessions can be adopted from; repeatable, or comma-separated ($AWARENESS_CATALOGS=\"id=dir,id2=dir2\")", func(v string) error {
		specs, err := parseCatalogSpecs(v)
		catalogs = append(catalogs, specs...)
		return err
	})
	fs.setEnv("catalog", "AWARENESS_CATALOGS")
	pos, err := fs.parse(args, lookupEnv, false)
	if errors.Is(err, flag.ErrHelp) {
		printServeHelp(usageOut, fs, len(args) > 0 && args[0] == "--demo")
	}
	if err != nil {
		return serveConfig{}, err
	}
	if len(pos) > 0 {
		return serveConfig{}, fmt.Errorf("unexpected arguments: %q", pos)
	}

	cfg := serveConfig{
		Addr:               strings.TrimSpace(*addr),
		ReusePort:          *reusePort,
		DB:                 strings.TrimSpace(*db),
		Retention:          *retention,
		MaxRows:            *maxRows,
		PruneInterval:      *pruneInterval,
		ShutdownTimeout:    *shutdownTimeout,
		Demo:               *demoMode,
		DemoPace:           *demoPace,
		Catalogs:           catalogs,
		UpstreamFirstCheck: *firstCheck,
		UpstreamInterval:   *upInterval,
		AuthFile:           strings.TrimSpace(*authFile),
		Insecure:           *insecure,
		WSPingInterval:     *wsPing,
		WSInitTimeout:      *wsInit,
		NoticePoll:         *noticePoll,
		FeedBookmark:       *feedBookmark,
		Holds:              awareness.HoldPolicy{RedeliverTurns: *redeliverTurns, RedeliverAfter: *redeliverAfter, MaxSnooze: *maxSnooze},
		HoldPoll:           *holdPoll,
		Budget: budget.Limits{PointsPerSecond: *queryRate, PointsBurst: *queryBurst,
			WritesPerSecond: *rateLimit, WritesBurst: *rateBurst, MaxStreams: *maxStreams},
		MetricsTokenFile: strings.TrimSpace(*metricsToken),
		NoticeTool:       awareness.NoticeTool(strings.TrimSpace(*noticeTool)),
	}
	if cfg.MCP, err = mcpOpts(); err != nil {
		return serveConfig{}, err
	}
	switch h := models.HintMode(strings.TrimSpace(*pgHints)); h {
	case models.HintsInCommit, models.HintsAfterCommit, models.HintsOff:
		if h != models.DefaultHints {
			cfg.Hints = h
		}
	default:
		return serveConfig{}, fmt.Errorf("--pg-hints %q: want commit, after-commit or off", *pgHints)
	}
	if cfg.Bus = strings.TrimSpace(*busURL); cfg.Bus != "" {
		if err := bus.CheckURL(cfg.Bus); err != nil {
			return serveConfig{}, fmt.Errorf("--bus: %v", err)
		}
		if !models.IsPostgresDSN(cfg.DB) {
			return serveConfig{}, errors.New("--bus needs a PostgreSQL --db: a SQLite database serves one process, which needs no hints")
		}
		hintsGiven := false
		fs.Visit(func(f *flag.Flag) { hintsGiven = hintsGiven || f.Name == "pg-hints" })
		if hintsGiven {
			return serveConfig{}, errors.New("--pg-hints and --bus exclude each other: with --bus the hints go on the bus after each commit, not by NOTIFY")
		}
	}
	switch strings.TrimSpace(*sqliteCkpt) {
	case "background":
	case "commit":
		cfg.CheckpointInCommit = true
	default:
		return serveConfig{}, fmt.Errorf("--sqlite-checkpoint %q: want background or commit", *sqliteCkpt)
	}
	if v, ok := lookupEnv(testHoldUpstreamEnv); ok && v != "" {
		if v != "1" {
			return serveConfig{}, fmt.Errorf("%s=%q: want 1 or unset (a test-only crash point)", testHoldUpstreamEnv, v)
		}
		cfg.TestHoldUpstreamSettlement = true
	}
	cfg.AllowedOrigins = splitList(*allowedOrigins)
	cfg.AllowedHosts = splitList(*allowedHosts)
	if cfg.LogLevel, err = parseLogLevel(*logLevel); err != nil {
		return serveConfig{}, err
	}
	if err := cfg.validate(); err != nil {
		return serveConfig{}, err
	}
	tracing, err := telemetry.TracingEnabled(lookupEnv)
	if err != nil {
		return serveConfig{}, err
	}
	cfg.Tracing = tracing
	if cfg.MetricsTokenFile != "" {
		tok, err := readMetricsToken(cfg.MetricsTokenFile)
		if err != nil {
			return serveConfig{}, fmt.Errorf("--metrics-token-file: %v", err)
		}
		cfg.MetricsToken = tok
	}
	if cfg.AuthFile != "" {
		k, warnings, err := auth.Load(cfg.AuthFile)
		if err != nil {
			return serveConfig{}, fmt.Errorf("--auth-file: %v", err)
		}
		cfg.Auth, cfg.AuthWarnings = k, warnings
	}
	return cfg, nil
}

// readMetricsToken reads the bearer token of /metrics: one line of at least 32
// printable characters, in a file other users cannot read.
func readMetricsToken(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("%q has mode %#o: others may read the token; run 'chmod 600 %s'", path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 32 || strings.ContainsFunc(tok, func(r rune) bool { return r <= ' ' || r > '~' }) {
		return "", fmt.Errorf("%q: want one token of at least 32 printable characters without spaces (e.g. 'openssl rand -hex 32')", path)
	}
	return tok, nil
}

// hintsLabel says how this process's hints travel, for the log of the effective
// configuration: "" on SQLite (one process, no hints).
func (c serveConfig) hintsLabel() string {
	switch {
	case !models.IsPostgresDSN(c.DB):
		return ""
	case c.Bus != "":
		return "bus " + bus.Redact(c.Bus)
	case c.Hints == "":
		return "notify " + string(models.DefaultHints)
	}
	return "notify " + string(c.Hints)
}

// loopbackHost reports whether host (of --addr) only accepts connections from this
// machine.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c serveConfig) validate() error {
	host, port, err := net.SplitHostPort(c.Addr)
	if err != nil {
		return fmt.Errorf("--addr %q: want host:port (e.g. 127.0.0.1:8080): %v", c.Addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("--addr %q: port %q is not a number between 0 and 65535", c.Addr, port)
	}
	if strings.ContainsAny(host, " /") {
		return fmt.Errorf("--addr %q: host %q is not a host name or IP address", c.Addr, host)
	}
	if err := validateDB(c.DB); err != nil {
		return err
	}
	if err := awareness.CheckNoticeTool(string(c.NoticeTool)); err != nil {
		return fmt.Errorf("--notice-tool: %v", err)
	}
	for _, b := range []struct {
		rate        float64
		burst       int
		name, bname string
	}{{c.Budget.PointsPerSecond, c.Budget.PointsBurst, "--query-rate", "--query-burst"}, {c.Budget.WritesPerSecond, c.Budget.WritesBurst, "--rate-limit", "--rate-burst"}} {
		if b.rate < 0 || math.IsNaN(b.rate) || math.IsInf(b.rate, 0) {
			return fmt.Errorf("%s %v must be a number per second, 0 or more (0 sets no limit)", b.name, b.rate)
		}
		if b.rate > 0 && b.burst < 1 {
			return fmt.Errorf("%s %d must be at least 1 when %s is set", b.bname, b.burst, b.name)
		}
	}
	if c.Budget.PointsPerSecond > 0 && c.Budget.PointsBurst < graph.CostBudget {
		return fmt.Errorf("--query-burst %d is below the cost one request may have (%d): such requests could never run", c.Budget.PointsBurst, graph.CostBudget)
	}
	if c.Budget.MaxStreams < 0 {
		return fmt.Errorf("--max-streams %d must be 0 (no cap) or more", c.Budget.MaxStreams)
	}
	switch {
	case c.Holds.RedeliverTurns < 1:
		return fmt.Errorf("--redeliver-turns %d is below 1", c.Holds.RedeliverTurns)
	case c.Holds.RedeliverAfter < time.Second:
		return fmt.Errorf("--redeliver-after %v is shorter than 1s", c.Holds.RedeliverAfter)
	case c.Holds.MaxSnooze < time.Minute:
		return fmt.Errorf("--max-snooze %v is shorter than 1m", c.Holds.MaxSnooze)
	case c.HoldPoll < 100*time.Millisecond:
		return fmt.Errorf("--hold-poll %v is shorter than 100ms", c.HoldPoll)
	}
	if c.NoticePoll < 100*time.Millisecond {
		return fmt.Errorf("--notice-poll %v is shorter than 100ms", c.NoticePoll)
	}
	if c.FeedBookmark < 100*time.Millisecond || c.FeedBookmark > awareness.DefaultFeedBookmark {
		return fmt.Errorf("--feed-bookmark %v is not between 100ms and %v", c.FeedBookmark, awareness.DefaultFeedBookmark)
	}
	if c.Retention < 0 {
		return fmt.Errorf("--retention %v is negative (0 keeps rows forever)", c.Retention)
	}
	if c.Retention > 0 && c.Retention < time.Minute {
		return fmt.Errorf("--retention %v is shorter than a minute", c.Retention)
	}
	if c.MaxRows < 0 {
		return fmt.Errorf("--max-rows %d is negative (0 means no cap)", c.MaxRows)
	}
	if c.PruneInterval < time.Second {
		return fmt.Errorf("--prune-interval %v is shorter than a second", c.PruneInterval)
	}
	if err := wsgorilla.ValidateOriginPatterns(c.AllowedOrigins); err != nil {
		return fmt.Errorf("--allowed-origins: %v", err)
	}
	if _, err := c.hosts(); err != nil {
		return fmt.Errorf("--allowed-hosts: %v", err)
	}
	if c.Demo && c.DemoPace < 100*time.Millisecond {
		return fmt.Errorf("--demo-pace %v is shorter than 100ms", c.DemoPace)
	}
	if err := validateCatalogs(c.Catalogs); err != nil {
		return err
	}
	if c.UpstreamFirstCheck <= 0 || c.UpstreamInterval < time.Second {
		return fmt.Errorf("--upstream-first-check %v must be positive and --upstream-interval %v at least a second", c.UpstreamFirstCheck, c.UpstreamInterval)
	}
	if c.AuthFile == "" && !c.Insecure && !loopbackHost(host) {
		return fmt.Errorf("--addr %q accepts connections from other machines, and no --auth-file is given: every caller would be admin; give --auth-file, listen on 127.0.0.1, or pass --insecure to serve without authentication anyway", c.Addr)
	}
	if c.WSPingInterval < 10*time.Millisecond || c.WSInitTimeout < 10*time.Millisecond {
		return fmt.Errorf("--ws-ping-interval %v and --ws-init-timeout %v must be at least 10ms", c.WSPingInterval, c.WSInitTimeout)
	}
	if c.ShutdownTimeout <= 0 {
		return fmt.Errorf("--shutdown-timeout %v must be positive", c.ShutdownTimeout)
	}
	return nil
}

// hosts is the Host allowlist of every route (edge.Hosts): IP addresses, localhost,
// the --addr host and --allowed-hosts.
func (c serveConfig) hosts() (*edge.Hosts, error) {
	return edge.NewHosts(c.Addr, c.AllowedHosts)
}

// serve runs the service until ctx is cancelled, then shuts it down (Main).
func serve(ctx context.Context, cfg serveConfig, stderr io.Writer) int {
	m := newMain(cfg, stderr)
	if err := m.Open(ctx); err != nil {
		return exitError
	}
	code := exitOK
	if err := m.Run(ctx); err != nil {
		code = exitError
	}
	m.Close()
	return code
}

// Main is the process of serve. Open builds its parts in order: tracing and metrics,
// the HTTP port (bound first: a port in use fails the start before anything touched the
// database, and connections that arrive meanwhile wait in the socket's queue), the
// SQLite database's lock (lock.go), the hint bus of --bus, the database, the notice
// hub, the PostgreSQL listener, the service (after its startup sweep), the upstream monitor, the pruner,
// the demo and last the HTTP server. Run serves until its context ends; Close stops
// and closes the parts in the reverse order, so the HTTP server drains first
// (drainHTTP) and the database closes last, before its lock is released. When a step
// of Open fails, Open closes what the steps before it opened, in reverse, and returns
// the error: nothing is left open.
type Main struct {
	cfg serveConfig
	log *slog.Logger

	tracer trace.Tracer
	tel    *telemetry.Telemetry
	store  *models.Store
	bus    *bus.Bus // nil without --bus
	hub    *awareness.Hub
	svc    *awareness.Service
	// budget is what each caller may spend, on every front (GraphQL and MCP).
	budget *budget.Budget
	srv    *http.Server
	ln     net.Listener
	sock   socketKind
	lock   *dbLock // SQLite only
	// draining is set when shutdown begins: /readyz answers 503 from then on.
	draining atomic.Bool

	// streams is the context of every WebSocket and SSE stream and of the demo;
	// endStreams ends them at shutdown.
	streams    context.Context
	endStreams context.CancelFunc
	// closers close the parts Open opened, in order (nil: nothing to close); Close
	// runs them in reverse.
	closers []func()
}

// step is one part of Main.Open: open builds the part, and returns what stops or
// closes it (nil: nothing). A failing open logs its error and leaves nothing open.
type step struct {
	name string
	open func(ctx context.Context) (close func(), err error)
}

// newMain returns a Main that logs to stderr; it opens nothing.
func newMain(cfg serveConfig, stderr io.Writer) *Main {
	return &Main{cfg: cfg, log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))}
}

// steps are the parts of Open, in order.
func (m *Main) steps() []step {
	return []step{
		{"telemetry", m.openTelemetry},
		{"listen", m.openListen},
		{"lock", m.openLock},
		{"bus", m.openBus},
		{"database", m.openStore},
		{"hub", m.openHub},
		{"listener", m.openListener},
		{"service", m.openService},
		{"upstream monitor", m.openMonitor},
		{"pruner", m.openPruner},
		{"hold poll", m.openHoldPoll},
		{"demo", m.openDemo},
		{"http", m.openHTTP},
	}
}

// Open builds the service's parts in order (steps) and starts its background services.
// On an error it has closed what it opened.
func (m *Main) Open(ctx context.Context) error { return m.open(ctx, m.steps()) }

func (m *Main) open(ctx context.Context, steps []step) error {
	cfg := m.cfg
	m.log.Info("starting",
		"addr", cfg.Addr, "db", models.RedactDSN(cfg.DB), "retention", cfg.Retention, "max_rows", cfg.MaxRows,
		"prune_interval", cfg.PruneInterval, "allowed_origins", cfg.AllowedOrigins,
		"log_level", cfg.LogLevel, "shutdown_timeout", cfg.ShutdownTimeout, "demo", cfg.Demo,
		"catalogs", cfg.Catalogs, "upstream_first_check", cfg.UpstreamFirstCheck, "upstream_interval", cfg.UpstreamInterval,
		"notice_poll", cfg.NoticePoll, "feed_bookmark", cfg.FeedBookmark, "allowed_hosts", cfg.AllowedHosts, "query_rate", cfg.Budget.PointsPerSecond, "query_burst", cfg.Budget.PointsBurst,
		"rate_limit", cfg.Budget.WritesPerSecond, "rate_burst", cfg.Budget.WritesBurst, "max_streams", cfg.Budget.MaxStreams, "notice_tool", cfg.NoticeTool,
		"hints", cfg.hintsLabel())
	// Cancelled at shutdown: every WebSocket and SSE stream ends, while plain requests
	// finish under http.Server.Shutdown.
	m.streams, m.endStreams = context.WithCancel(context.WithoutCancel(ctx))
	for _, s := range steps {
		closeFn, err := s.open(ctx)
		if err != nil {
			m.unwind()
			return fmt.Errorf("%s: %w", s.name, err)
		}
		m.closers = append(m.closers, closeFn)
	}
	return nil
}

// Run serves HTTP on the listener Open bound until ctx ends (nil) or the server fails
// (its error). Close shuts the server down either way.
func (m *Main) Run(ctx context.Context) error {
	serveErr := make(chan error, 1)
	go func() { serveErr <- m.srv.Serve(m.ln) }()
	m.log.Info("listening", "addr", m.ln.Addr().String())
	select {
	case <-ctx.Done():
		m.log.Info("shutdown: signal received")
		return nil
	case err := <-serveErr:
		m.log.Error("http server failed", "err", err)
		return err
	}
}

// Close stops and closes what Open opened, in reverse order, each step logged.
func (m *Main) Close() {
	m.unwind()
	m.log.Info("shutdown complete")
}

func (m *Main) unwind() {
	for i := len(m.closers) - 1; i >= 0; i-- {
		if c := m.closers[i]; c != nil {
			c()
		}
	}
	m.closers = nil
	if m.endStreams != nil {
		m.endStreams()
	}
}

// openTelemetry sets up traces (off unless OTEL_* configures them) and metrics, first:
// every part below reports to m.tel.
func (m *Main) openTelemetry(ctx context.Context) (func(), error) {
	var tracerProvider *sdktrace.TracerProvider
	if m.cfg.Tracing {
		tp, err := telemetry.NewOTLPTracerProvider(ctx)
		if err != nil {
			m.log.Error("tracing", "err", err)
			return nil, err
		}
		tracerProvider, m.tracer = tp, tp.Tracer(telemetry.TracerName)
		m.log.Info("tracing on: OTLP/HTTP exporter configured by OTEL_* environment variables")
	}
	dbSystem := "sqlite"
	if models.IsPostgresDSN(m.cfg.DB) {
		dbSystem = "postgresql"
	}
	m.tel = telemetry.New(telemetry.Config{
		Tracer: m.tracer, DBSystem: dbSystem, Logger: m.log.With("component", "metrics"),
		Pending: func(ctx context.Context) (int64, error) {
			st, err := m.store.Stats(ctx)
			return st.PendingNotices, err
		},
	})
	if tracerProvider == nil {
		return nil, nil
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tracerProvider.Shutdown(sctx); err != nil {
			m.log.Warn("shutdown: flushing traces", "err", err)
		}
	}, nil
}

// openStore opens the database and migrates its schema.
func (m *Main) openStore(ctx context.Context) (func(), error) {
	store, err := models.Open(ctx, m.cfg.DB, models.Options{Logger: m.log.With("component", "store"), Observer: m.tel, Hints: m.cfg.Hints,
		Bus: m.hintBus(), Checkpoint: models.CheckpointConfig{InCommit: m.cfg.CheckpointInCommit}, NoticeTool: m.cfg.NoticeTool})
	if err != nil {
		m.log.Error("open database", "db", models.RedactDSN(m.cfg.DB), "err", err)
		return nil, err
	}
	m.store = store
	m.log.Info("database open", "db", models.RedactDSN(m.cfg.DB), "dialect", store.Dialect())
	return func() {
		if err := store.Close(); err != nil {
			m.log.Error("shutdown: close database", "err", err)
			return
		}
		m.log.Info("shutdown: database closed")
	}, nil
}

// openBus connects to the hint bus of --bus, before the database: the store publishes
// on it. A server that cannot be reached yet does not stop the start (the bus keeps
// trying; --notice-poll covers meanwhile). It closes after the database.
func (m *Main) openBus(context.Context) (func(), error) {
	if m.cfg.Bus == "" {
		return nil, nil
	}
	b, err := bus.Open(bus.Config{URL: m.cfg.Bus, Logger: m.log.With("component", "bus")})
	if err != nil {
		m.log.Error("hint bus", "err", err)
		return nil, err
	}
	m.bus = b
	return func() {
		b.Close()
		m.log.Info("shutdown: hint bus closed")
	}, nil
}

// hintBus is the bus as the store and the listener take it: nil without --bus.
func (m *Main) hintBus() models.HintBus {
	if m.bus == nil {
		return nil
	}
	return m.bus
}

func (m *Main) openHub(ctx context.Context) (func(), error) {
	hub := awareness.NewHubObserved(m.tel)
	m.hub = hub
	// The bookmarks of every feed (FEED-3) come from one ticker.
	ticker := awareness.NewFeedTicker(hub, m.cfg.FeedBookmark, nil)
	ticker.Start(context.WithoutCancel(ctx))
	return func() {
		ticker.Stop()
		hub.Close()
		m.log.Info("shutdown: notice hub closed")
	}, nil
}

// openListener starts, on PostgreSQL, the listener that carries the notices and events
// of other processes sharing the database to this process's hub. It listens before
// the startup sweep.
func (m *Main) openListener(ctx context.Context) (func(), error) {
	if m.store.Dialect() != "postgres" {
		return nil, nil
	}
	listener, err := models.NewListener(models.ListenerConfig{
		Store: m.store, Hub: m.hub, Poll: m.cfg.NoticePoll, Logger: m.log.With("component", "listener"), Observer: m.tel,
		Bus: m.hintBus(),
	})
	if err != nil {
		m.log.Error("notice listener", "err", err)
		return nil, err
	}
	// It ends on Stop, in shutdown order, not when ctx is cancelled; so do the
	// services below.
	listener.Start(context.WithoutCancel(ctx))
	return func() {
		listener.Stop()
		m.log.Info("shutdown: notice listener stopped")
	}, nil
}

// openService opens the catalogs and builds the service, then runs the startup sweep
// (NTC-5: pending notices survive restarts unchanged; the sweep opens only what no
// committed write leaves behind, and locks no pending notice).
func (m *Main) openService(ctx context.Context) (func(), error) {
	var catalogs []awareness.Catalog
	for _, c := range m.cfg.Catalogs {
		cat, err := upstream.NewDirCatalog(c.ID, c.Dir)
		if err != nil {
			m.log.Error("open catalog", "err", err)
			return nil, err
		}
		catalogs = append(catalogs, cat)
	}
	var grants awareness.Grants
	if m.cfg.Auth != nil {
		grants = m.cfg.Auth.Grants()
	}
	m.budget = budget.New(m.cfg.Budget)
	m.svc = awareness.NewService(awareness.Config{Store: m.store, Hub: m.hub, Logger: m.log.With("component", "service"),
		Catalogs: catalogs, Observer: m.tel, Grants: grants, Streams: m.budget, Holds: m.cfg.Holds})
	n, err := m.svc.Sweep(ctx)
	if err != nil {
		m.log.Error("startup sweep", "err", err)
		return nil, err
	}
	m.log.Info("startup sweep done", "notices_opened", n)
	return nil, nil
}

// openMonitor starts the upstream monitor (UPS-2), after the sweep.
func (m *Main) openMonitor(ctx context.Context) (func(), error) {
	upCfg := upstream.Config{
		Service: m.svc, FirstCheck: m.cfg.UpstreamFirstCheck, Interval: m.cfg.UpstreamInterval,
		Logger: m.log.With("component", "upstream"), Observer: m.tel,
	}
	if m.cfg.TestHoldUpstreamSettlement {
		m.log.Warn("test-only crash point enabled: upstream settlements are held", "env", testHoldUpstreamEnv)
		upCfg.AfterRecord = func(ctx context.Context) {
			m.log.Warn(testHoldUpstreamLog)
			<-ctx.Done()
		}
	}
	monitor, err := upstream.New(upCfg)
	if err != nil {
		m.log.Error("upstream monitor", "err", err)
		return nil, err
	}
	monitor.Start(context.WithoutCancel(ctx))
	return func() {
		monitor.Stop()
		m.log.Info("shutdown: upstream monitor stopped")
	}, nil
}

// openPruner starts retention (SIG-6, WAT-5): a prune now, then every interval.
func (m *Main) openPruner(ctx context.Context) (func(), error) {
	pruner := awareness.NewPruner(awareness.PrunerConfig{
		Store:    m.store,
		Publish:  m.svc.PublishCommitted, // expired cursors' notices go out closed (staleNotices includeClosed)
		Policy:   awareness.RetentionPolicy{MaxAge: m.cfg.Retention, MaxRows: m.cfg.MaxRows, CursorTTL: m.cfg.Retention},
		Interval: m.cfg.PruneInterval,
		Logger:   m.log.With("component", "pruner"),
	})
	pruner.Start(context.WithoutCancel(ctx))
	return func() {
		pruner.Stop()
		m.log.Info("shutdown: pruner stopped")
	}, nil
}

// openHoldPoll wakes the due notice holds (RDL-1, RDL-2) every --hold-poll.
func (m *Main) openHoldPoll(ctx context.Context) (func(), error) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.svc.RunHoldPoll(ctx, m.cfg.HoldPoll)
	}()
	return func() {
		cancel()
		<-done
		m.log.Info("shutdown: hold poll stopped")
	}, nil
}

// openDemo starts the demo scene with --demo; it runs until the streams end.
func (m *Main) openDemo(context.Context) (func(), error) {
	if !m.cfg.Demo {
		return nil, nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := demo.Run(m.streams, m.svc, m.log.With("component", "demo"), m.cfg.DemoPace); err != nil {
			m.log.Error("demo", "err", err)
		}
	}()
	m.log.Info("demo scene running", "pace", m.cfg.DemoPace)
	return func() {
		m.endStreams()
		<-done
	}, nil
}

// openListen binds the HTTP port (or takes the socket systemd passed) before anything
// opens the database: a port in use fails the start first, and a restarted process
// holds the port while it migrates and sweeps. Run serves on it; connections that
// arrive before then wait in the socket's queue.
func (m *Main) openListen(context.Context) (func(), error) {
	ln, kind, err := listenHTTP(m.cfg)
	if err != nil {
		m.log.Error("listen", "addr", m.cfg.Addr, "err", err)
		return nil, err
	}
	if kind == socketSystemd && m.cfg.ReusePort {
		m.log.Warn("--reuse-port has no effect on a socket passed by systemd")
	}
	m.ln, m.sock = &onceListener{Listener: ln}, kind
	m.log.Info("bound", "addr", ln.Addr().String(), "socket", string(kind))
	return func() { _ = m.ln.Close() }, nil
}

// openLock takes the SQLite database's lock (lock.go); PostgreSQL needs none.
func (m *Main) openLock(ctx context.Context) (func(), error) {
	if models.IsPostgresDSN(m.cfg.DB) {
		return nil, nil
	}
	l, err := lockDatabase(ctx, m.cfg.DB, m.ln.Addr().String(), m.sock == socketReusePort, m.log)
	if err != nil {
		m.log.Error("database lock", "err", err)
		return nil, err
	}
	m.lock = l
	return func() {
		if err := l.release(); err != nil {
			m.log.Error("shutdown: release the database lock", "err", err)
			return
		}
		m.log.Info("shutdown: database lock released")
	}, nil
}

// openHTTP builds the HTTP server with /mcp on it; Run serves it. Its closer drains
// it (drainHTTP).
func (m *Main) openHTTP(ctx context.Context) (func(), error) {
	cfg := m.cfg
	wsConns := new(sync.WaitGroup) // upgraded connections and SSE streams still being served
	ws := new(wsgorilla.Conns)
	fresh := new(newConns)
	srv := &http.Server{
		Handler:           routes(m.svc, m.store, m.budget, m.tel, m.tracer, cfg, m.log, m.streams, wsConns, ws),
		MaxHeaderBytes:    graph.MaxHeaderBytes,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		ConnState:         fresh.hook,
	}
	// CLT-3: /mcp on the same listener, in process.
	mcpHandler, mcpSrv := mountMCP(srv.Handler, cfg, m.log, m.svc, m.budget)
	hosts, err := cfg.hosts()
	if err != nil {
		return nil, err
	}
	// Every route but the health probes answers only the allowed hosts, /mcp included.
	srv.Handler = hosts.Guard(mcpHandler, "/healthz", "/readyz")
	m.srv = srv
	reqs := new(inflight)
	srv.Handler = m.drainAware(srv.Handler, reqs)
	return func() {
		m.drainHTTP(ctx, drainParts{srv: srv, ws: ws, wsConns: wsConns, reqs: reqs, fresh: fresh, closeMCP: func() {
			mcpSrv.Close() // its sessions and their notice feeds
			m.log.Info("shutdown: mcp server closed")
		}})
	}, nil
}

// drainParts are the parts of the HTTP server drainHTTP stops.
type drainParts struct {
	srv      *http.Server
	ws       *wsgorilla.Conns
	wsConns  *sync.WaitGroup
	reqs     *inflight
	fresh    *newConns
	closeMCP func()
}

// drainHTTP shuts the HTTP server down without a window in which a reconnecting client
// is refused for longer than the process needs to exit (a refused connection is fatal
// to graphql-ws, Apollo's GraphQLWsLink and urql with their default options):
//
//  1. /readyz answers 503 and the lock file says draining; a socket that the next
//     process or systemd also holds stops accepting now, so new connections go there;
//  2. keep-alives end (idle connections close, every response says Connection: close);
//  3. every WebSocket is closed with 1012 (service restart: default graphql-ws clients
//     reconnect on it), the MCP server closes, the streams end;
//  4. the requests still running finish, while a socket of this process's own keeps
//     accepting (a client that reconnects meanwhile is served; a WebSocket or SSE
//     stream it opens ends at once, as in 3);
//  5. the socket closes, connections that sent no request get newConnGrace to send
//     one, and http.Server.Shutdown waits for the rest.
func (m *Main) drainHTTP(ctx context.Context, p drainParts) {
	m.draining.Store(true)
	if m.lock != nil {
		if err := m.lock.draining(); err != nil {
			m.log.Warn("shutdown: mark the database lock draining", "err", err)
		}
	}
	if m.sock.handedOver() {
		_ = m.ln.Close()
		m.log.Info("shutdown: stopped accepting; the socket stays open for the next process", "socket", string(m.sock))
	}
	p.srv.SetKeepAlivesEnabled(false)
	closed := p.ws.CloseAll(wsgorilla.CloseServiceRestart, "service restart")
	m.log.Info("shutdown: WebSocket connections closed with 1012 (service restart)", "connections", closed)
	p.closeMCP()
	m.endStreams()
	m.log.Info("shutdown: WebSocket and SSE streams cancelled")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ShutdownTimeout)
	defer cancel()
	if !p.reqs.wait(sctx) {
		m.log.Warn("shutdown: requests still running after the shutdown timeout")
	}
	_ = m.ln.Close()
	waiting := p.fresh.closeSoon()
	if err := p.srv.Shutdown(sctx); err != nil {
		m.log.Warn("shutdown: http server did not drain in time; closing connections", "err", err)
		_ = p.srv.Close()
	} else {
		m.log.Info("shutdown: http server stopped", "connections_without_request", waiting)
	}
	// Wait for the cancelled WebSocket connections to close before the hub does: a
	// stream the hub ended first would send its client an UNAVAILABLE error instead
	// of a closed socket. (After Shutdown no connection can start: every Add is done.)
	if !waitGroup(sctx, p.wsConns) {
		m.log.Warn("shutdown: WebSocket connections still open after the shutdown timeout")
	}
}

// drainAware counts the requests in reqs, and answers /readyz with 503 once shutdown
// has begun, so that a load balancer sends no new traffic.
func (m *Main) drainAware(next http.Handler, reqs *inflight) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" && m.draining.Load() {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "draining\n")
			return
		}
		reqs.begin()
		defer reqs.end()
		next.ServeHTTP(w, r)
	})
}

// inflight counts the requests being served.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0
}

func (f *inflight) begin() {
	f.mu.Lock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
	f.mu.Unlock()
}

func (f *inflight) end() {
	f.mu.Lock()
	if f.n--; f.n == 0 {
		close(f.idle)
	}
	f.mu.Unlock()
}

// wait waits until no request is being served, or ctx ends (false).
func (f *inflight) wait(ctx context.Context) bool {
	f.mu.Lock()
	n, idle := f.n, f.idle
	f.mu.Unlock()
	if n == 0 {
		return true
	}
	select {
	case <-idle:
		return true
	case <-ctx.Done():
		return false
	}
}

// routes builds the HTTP routes.
func routes(svc *awareness.Service, store awareness.Store, bud *budget.Budget, tel *telemetry.Telemetry, tracer trace.Tracer, cfg serveConfig,
	log *slog.Logger, streams context.Context, wsConns *sync.WaitGroup, ws *wsgorilla.Conns) http.Handler {
	mux := http.NewServeMux()
	if cfg.Auth != nil {
		log.Info("authentication on", "auth_file", cfg.AuthFile, "tokens", cfg.Auth.Roles())
		for _, w := range cfg.AuthWarnings {
			log.Warn(w)
		}
	} else if cfg.Insecure {
		log.Warn("authentication off on a non-loopback address (--insecure): every caller is admin", "addr", cfg.Addr)
	} else {
		log.Info("authentication off: every caller is admin (loopback only; give --auth-file to require tokens)")
	}
	if host, _, err := net.SplitHostPort(cfg.Addr); err == nil && !loopbackHost(host) && len(cfg.AllowedHosts) == 0 {
		log.Warn("listening beyond loopback without --allowed-hosts: requests that name the service by a DNS name (not an IP address) get 403; give --allowed-hosts with the names clients use", "addr", cfg.Addr)
	}
	gcfg := graph.Config{
		Service: svc, Logger: log.With("component", "graphql"), AllowedOrigins: cfg.AllowedOrigins,
		Auth: cfg.Auth, WSPingPongInterval: cfg.WSPingInterval, WSInitTimeout: cfg.WSInitTimeout, WSConns: ws,
		Budget: bud,
	}
	var query http.Handler
	if tracer != nil {
		gcfg.Extensions = append(gcfg.Extensions, telemetry.GraphQLTracing{Tracer: tracer})
		query = telemetry.Extract(graph.NewHandler(gcfg))
	} else {
		query = graph.NewHandler(gcfg)
	}
	mux.Handle("/query", endWith(streams, wsConns, query))
	mux.Handle("GET /metrics", tel.Handler(cfg.MetricsToken))
	mux.Handle("GET /playground", web.Playground())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyzTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := store.Ping(ctx); err != nil {
			log.Warn("readyz: database not ready", "err", err)
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	static := web.Files()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		static.ServeHTTP(w, r)
	})
	return mux
}

// endWith cancels WebSocket and SSE requests when streams ends. http.Server.Shutdown
// does not track hijacked connections, and would wait for an SSE stream until the
// shutdown timeout, so this is what ends them at shutdown.
func endWith(streams context.Context, conns *sync.WaitGroup, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !graph.IsStream(r) {
			next.ServeHTTP(w, r)
			return
		}
		conns.Add(1)
		defer conns.Done()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(streams, cancel)
		defer stop()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// catalogSpec is one --catalog ID=DIR.
type catalogSpec struct {
	ID  string
	Dir string
}

func (c catalogSpec) String() string { return c.ID + "=" + c.Dir }

// parseCatalogSpecs parses "id=dir[,id2=dir2…]" (a DIR cannot contain a comma).
func parseCatalogSpecs(v string) ([]catalogSpec, error) {
	var out []catalogSpec
	for _, part := range strings.Split(v, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		id, dir, ok := strings.Cut(part, "=")
		id, dir = strings.ToLower(strings.TrimSpace(id)), strings.TrimSpace(dir)
		if !ok || id == "" || dir == "" {
			return out, fmt.Errorf("%q: want ID=DIR", part)
		}
		out = append(out, catalogSpec{ID: id, Dir: dir})
	}
	return out, nil
}

// validateCatalogs checks ids (agent-id-like, unique) and directories (they exist).
func validateCatalogs(cs []catalogSpec) error {
	seen := map[string]bool{}
	for _, c := range cs {
		if !awareness.ValidAgentID(c.ID) {
			return fmt.Errorf("--catalog %s: id %q is not a valid id ([a-z0-9][a-z0-9_-]{0,63})", c, c.ID)
		}
		if seen[c.ID] {
			return fmt.Errorf("--catalog %s: id %q is given twice", c, c.ID)
		}
		seen[c.ID] = true
		if fi, err := os.Stat(c.Dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("--catalog %s: %q is not an existing directory", c, c.Dir)
		}
	}
	return nil
}

// waitGroup waits for wg until ctx ends; it reports whether wg finished.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
