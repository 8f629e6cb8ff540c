// Main, the process of serve: its parts opened in order and closed in reverse, its HTTP
// routes, and the drain of a shutdown.

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/budget"
	"github.com/awareness/awareness/internal/bus"
	"github.com/awareness/awareness/internal/demo"
	"github.com/awareness/awareness/internal/models"
	"github.com/awareness/awareness/internal/telemetry"
	"github.com/awareness/awareness/internal/upstream"
	"github.com/awareness/awareness/internal/wsgorilla"
	"github.com/awareness/awareness/web"
)

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
		Bus: m.hintBus(), NoticeTool: m.cfg.NoticeTool})
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
