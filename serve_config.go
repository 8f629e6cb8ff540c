// The configuration of serve: its flags and environment variables, all validated before
// anything opens.

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/auth"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/bus"
	"github.com/awareness/awareness/internal/edge"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/telemetry"
	"github.com/awareness/awareness/internal/upstream"
	"github.com/awareness/awareness/internal/wsgorilla"
)

// serveConfig is the validated configuration of serve.
type serveConfig struct {
	Addr           string
	DB             string
	Retention      time.Duration
	MaxRows        int
	PruneInterval  time.Duration
	AllowedOrigins []string
	// AllowedHosts are the Host names served besides IP addresses, localhost and the
	// listen host; "*" serves every name. See edge.Hosts.
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
	// while this one drains.
	ReusePort bool
	// WSPingInterval and WSInitTimeout are the WebSocket ping cadence, a peer silent
	// for twice it being dropped, and the connection_init deadline.
	WSPingInterval time.Duration
	WSInitTimeout  time.Duration
	// NoticePoll is the safety poll of the cross-process notice listener, on
	// PostgreSQL only.
	NoticePoll time.Duration
	// FeedBookmark is the longest a feed subscription goes idle without a bookmark
	// (FEED-3).
	FeedBookmark time.Duration
	// Holds is the redelivery and snooze policy (RDL-1, RDL-2) and HoldPoll how often
	// the due holds are woken.
	Holds    awareness.HoldPolicy
	HoldPoll time.Duration
	// MetricsToken, read from MetricsTokenFile, is the bearer token /metrics requires;
	// with "" /metrics is open.
	MetricsTokenFile string
	MetricsToken     string
	// Tracing is true when the standard OTEL_* environment configures an OTLP
	// exporter; see telemetry.TracingEnabled.
	Tracing bool
	// Hints is how cross-process hints are sent: --pg-hints, "" for the default.
	Hints models.HintMode
	// Bus is the NATS server that carries the hints in place of NOTIFY: --bus, ""
	// for none.
	Bus string
	// TestHoldUpstreamSettlement is a test-only crash point, set by
	// $AWARENESS_TEST_HOLD_UPSTREAM_SETTLEMENT=1 and no flag: after the upstream
	// monitor commits a cycle's activity events it logs testHoldUpstreamLog and holds
	// their settlement until it is stopped, so that e2e/upstream_crash_test.go can
	// kill -9 the process between the event commit and the settlement. Never set it in
	// production: watched links stop advancing.
	TestHoldUpstreamSettlement bool
	// Budget is the budget of each caller: query points by --query-rate and
	// --query-burst, writes and subscriptions started by --rate-limit and
	// --rate-burst, open streams by --max-streams.
	Budget budget.Limits
	// NoticeTool is the reconcile tool the notice text names (NTC-1).
	NoticeTool awareness.NoticeTool
	// MCP configures /mcp.
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
	// Errors are returned for run to print; printServeHelp prints the help.
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
// configuration: "" on SQLite, where one process sends no hints.
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

// loopbackHost reports whether host, of --addr, only accepts connections from this
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

// hosts is the edge.Hosts allowlist of every route: IP addresses, localhost, the
// --addr host and --allowed-hosts.
func (c serveConfig) hosts() (*edge.Hosts, error) {
	return edge.NewHosts(c.Addr, c.AllowedHosts)
}

// catalogSpec is one --catalog ID=DIR.
type catalogSpec struct {
	ID  string
	Dir string
}

func (c catalogSpec) String() string { return c.ID + "=" + c.Dir }

// parseCatalogSpecs parses "id=dir[,id2=dir2…]"; a DIR cannot contain a comma.
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

// validateCatalogs checks that ids are unique and agent-id-like and that the
// directories exist.
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
