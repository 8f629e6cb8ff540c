// Command pgscale measures the cross-process path on PostgreSQL with several real
// `awareness serve` processes sharing one database, and writes a Markdown report (-out,
// also printed); bench/SCALE-RESULTS.md is one. By default (-cluster private) it runs
// its own PostgreSQL cluster (initdb under /var/tmp) with pg_stat_statements preloaded
// and connects each process as a role of its own (aw_p0, aw_p1, …), so that statements
// are attributed per process; -cluster shared uses the server of -admin instead. It
// runs a private nats-server for the bus. Each measurement gets a fresh database.
//
// The hint transports compared (-modes, plus -before, a binary such as the main
// branch's with its default hints): NOTIFY in the commit or after it (--pg-hints) and
// the bus (--bus).
//
//	notify  the floor of X2: bare NOTIFY → LISTEN between two connections.
//	lock    the NOTIFY commit lock alone: 16 connections commit one-row UPDATEs with
//	    a NOTIFY inside the transaction, after it, or none (store.go).
//	x1  for each transport and P in -procs: -watchers staleNotices subscribers on
//	    process 0 only, -appends appends round-robin over the P processes (-writers at
//	    a time), each naming one subscribed watcher. X1 rows read per notice (table
//	    counters, and per process from pg_stat_statements); X2 latency from the
//	    recordEvent answer to the frame, same process and across; the hints sent and
//	    received; X5 lost and duplicate notices over the measured appends and a
//	    second segment under a fault: process 0's listener connection killed
//	    (pg_terminate_backend), or the NATS server killed and started again.
//	x3  for each transport (and "off") and P: -writers×4 closed-loop writers over
//	    HTTP spread over the P processes for -duration, no subscriber: appends/s, the
//	    recordEvent round trip, server and PostgreSQL CPU per append; -rounds
//	    interleaved rounds.
//	hints  the CPU a hint of no interest costs: the largest P, appends through
//	    process 0 only, the other processes' CPU and their listen backends' against
//	    an idle window of the same length (hints.go).
//	store  the append path without HTTP: P child processes (pgscale -child store)
//	    run the service with its listener, -writers×4 writers between them (store.go).
//	x4  one process with -watchers subscribers, over a database holding -pending
//	    pending notices of other watchers (inserted by SQL) and over one holding none:
//	    the process's RSS after a few --notice-poll rescans.
//	start  a process starting beside a serving one over -pending pending notices among
//	    -start-cursors cursors, for each binary of -start-bins in -rounds interleaved
//	    rounds: the cursors table's scans during the start, the exact acknowledgements
//	    of the serving process before and during it, the starting process's RSS
//	    (start.go).
//
// PostgreSQL's statistics reach the views when a backend is idle, at most every 10s
// (PGSTAT_IDLE_INTERVAL): x1 waits -settle before each snapshot.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/bench/internal/pgcluster"
	"github.com/awareness/awareness/bench/internal/proc"
)

type config struct {
	bin, admin, out, label, phases string
	modes, before, beforeLabel     string
	cluster, natsBin               string
	startBins                      string
	startCursors                   int
	startBaseline                  time.Duration
	procs                          []int
	watchers, appends, faultN      int
	writers, pending, seed, rounds int
	duration, settle, wait         time.Duration
	timeout                        time.Duration
	keepLogs                       string
}

func main() {
	var c config
	var procs string
	flag.StringVar(&c.bin, "bin", "./awareness", "the awareness binary")
	flag.StringVar(&c.admin, "admin", os.Getenv("TEST_DATABASE_URL"), "PostgreSQL URL of a role that may create databases (default $TEST_DATABASE_URL)")
	flag.StringVar(&c.out, "out", "pgscale.md", "Markdown report")
	flag.StringVar(&c.label, "label", "", "label of the binary in the report")
	flag.StringVar(&c.phases, "phases", "notify,x1,x3,hints,x4,start", "phases to run")
	flag.StringVar(&procs, "procs", "1,3,5", "process counts of x1 and x3")
	flag.StringVar(&c.modes, "modes", "commit,after-commit,bus", "hint transports of -bin compared by x1, x3 and hints: NOTIFY modes (--pg-hints) and bus (--bus on a private nats-server)")
	flag.StringVar(&c.before, "before", "", "a binary to compare first in x1, x3 and hints, with its default hints (e.g. the main branch's)")
	flag.StringVar(&c.beforeLabel, "before-label", "before", "the label of -before")
	flag.StringVar(&c.cluster, "cluster", "private", "private: a PostgreSQL cluster of the run's own (initdb; pg_stat_statements and a role per process); shared: the server of -admin")
	flag.StringVar(&c.natsBin, "nats-server", "", "the nats-server binary (default: from PATH)")
	flag.IntVar(&c.watchers, "watchers", 100, "subscribed watchers on process 0")
	flag.IntVar(&c.appends, "appends", 600, "measured appends per x1 run")
	flag.IntVar(&c.faultN, "fault-appends", 200, "appends of the x1 segment with the listener killed")
	flag.IntVar(&c.writers, "writers", 4, "concurrent writers of x1 (x3 uses 4×)")
	flag.IntVar(&c.pending, "pending", 100000, "pending notices of other watchers in x4")
	flag.IntVar(&c.rounds, "rounds", 3, "interleaved rounds of x3")
	flag.IntVar(&c.seed, "seed", 100000, "sessions, and pending notices of other watchers, in x1's database")
	flag.DurationVar(&c.duration, "duration", 6*time.Second, "length of each x3 run")
	flag.DurationVar(&c.settle, "settle", 11*time.Second, "wait before a statistics snapshot")
	flag.DurationVar(&c.wait, "wait", 15*time.Second, "how long a notice may take before it counts as lost")
	flag.DurationVar(&c.timeout, "timeout", 8*time.Minute, "bound of the whole run")
	flag.StringVar(&c.keepLogs, "logs", "", "directory for the servers' logs (default: discarded)")
	flag.StringVar(&c.startBins, "start-bins", "", "comma-separated binaries the start phase compares, round by round (default: -bin)")
	flag.IntVar(&c.startCursors, "start-cursors", 600000, "cursors in all in the start phase's database (-pending of them pending)")
	flag.DurationVar(&c.startBaseline, "start-baseline", 3*time.Second, "acknowledgements before the process starts, in the start phase")
	var child, childDSN, childMode, childNATS string
	var childWriters int
	var childWarm time.Duration
	flag.StringVar(&child, "child", "", "internal: run as a child process of the store phase")
	flag.StringVar(&childDSN, "child-dsn", "", "internal: the child's database")
	flag.StringVar(&childMode, "child-mode", "", "internal: the child's hint mode, or bus")
	flag.StringVar(&childNATS, "child-nats", "", "internal: the child's NATS server")
	flag.IntVar(&childWriters, "child-writers", 1, "internal: the child's writers")
	flag.DurationVar(&childWarm, "child-warm", 2*time.Second, "internal: the child's warm-up")
	flag.Parse()
	if child == "store" {
		if err := childStore(childDSN, childMode, childNATS, childWriters, childWarm, c.duration); err != nil {
			fatalf("child: %v", err)
		}
		return
	}
	for _, p := range strings.Split(procs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			fatalf("-procs %q", procs)
		}
		c.procs = append(c.procs, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	r := &runner{cfg: c, http: &http.Client{Timeout: 30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	pgVersion := ""
	switch c.cluster {
	case "private":
		cl, err := pgcluster.Start("/var/tmp", "shared_preload_libraries=pg_stat_statements", "max_connections=400",
			"pg_stat_statements.max=10000")
		if err != nil {
			fatalf("private cluster: %v", err)
		}
		defer cl.Stop()
		r.cluster, c.admin, r.cfg.admin, r.roles, pgVersion = cl, cl.URL("postgres"), cl.URL("postgres"), true, cl.Version
		if err := createRoles(ctx, c.admin); err != nil {
			fatalf("roles: %v", err)
		}
	case "shared":
		if c.admin == "" {
			fatalf("no -admin and no TEST_DATABASE_URL")
		}
	default:
		fatalf("-cluster %q: want private or shared", c.cluster)
	}
	if pgVersion == "" {
		if conn, err := pgx.Connect(ctx, c.admin); err == nil {
			_ = conn.QueryRow(ctx, "SELECT version()").Scan(&pgVersion)
			conn.Close(context.Background())
		}
	}
	n, err := startNATS(c.natsBin)
	if err != nil {
		fatalf("%v", err)
	}
	defer n.kill()
	r.nats = n
	var rep bytes.Buffer
	host, _ := os.Hostname()
	fmt.Fprintf(&rep, "Run: %s on %s, %d cores, load average %s at the start; PostgreSQL: %s (%s cluster); NATS: %s.\n\n",
		time.Now().UTC().Format(time.RFC3339), host, runtime.NumCPU(), loadavg(), pgVersion, c.cluster, n.version)
	fmt.Fprintf(&rep, "Binary: %s (%s)", c.label, c.bin)
	if c.before != "" {
		fmt.Fprintf(&rep, "; before: %s (%s)", c.beforeLabel, c.before)
	}
	fmt.Fprintf(&rep, ". %d subscribed watchers; x1 %d appends (+%d with the listener killed or the NATS server restarted), %d writers; x3 %v per run, %d writers; %d pending notices in x4 and start.\n\n",
		c.watchers, c.appends, c.faultN, c.writers, c.duration, 4*c.writers, c.pending)
	for _, ph := range strings.Split(c.phases, ",") {
		var err error
		ph = strings.TrimSpace(ph)
		logf("phase %s, load average %s", ph, loadavg())
		fmt.Fprintf(&rep, "<!-- phase %s: load average %s at its start -->\n", ph, loadavg())
		switch ph {
		case "x1":
			err = r.x1(ctx, &rep)
		case "x3":
			err = r.x3(ctx, &rep)
		case "x4":
			err = r.x4(ctx, &rep)
		case "notify":
			err = r.bareNotify(ctx, &rep)
		case "start":
			err = r.startPhase(ctx, &rep)
		case "hints":
			err = r.hintCost(ctx, &rep)
		case "store":
			err = r.storePhase(ctx, &rep)
		case "lock":
			err = r.lockPhase(ctx, &rep)
		default:
			err = fmt.Errorf("unknown phase %q", ph)
		}
		if err != nil {
			fatalf("%s: %v", ph, err)
		}
	}
	fmt.Fprintf(&rep, "Load average at the end: %s.\n", loadavg())
	if err := os.WriteFile(c.out, rep.Bytes(), 0o644); err != nil {
		fatalf("%v", err)
	}
	os.Stdout.Write(rep.Bytes())
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "pgscale: "+format+"\n", args...)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s pgscale: "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

type runner struct {
	cfg  config
	http *http.Client
	seq  atomic.Int64
	// cluster is the run's private PostgreSQL cluster (nil: -cluster shared); roles
	// is set with it (a role per process, pg_stat_statements).
	cluster *pgcluster.Cluster
	roles   bool
	nats    *natsServer
	helpMu  sync.Mutex
	help    map[string]string // serve --help by binary
}

// ---------------------------------------------------------------------------------------
// Databases and processes

// freshDB creates an empty database and returns its URL and a function dropping it.
func (r *runner) freshDB(ctx context.Context) (string, func(), error) {
	name := fmt.Sprintf("pgscale_%d_%d", os.Getpid(), r.seq.Add(1))
	conn, err := pgx.Connect(ctx, r.cfg.admin)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(r.cfg.admin)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	if r.roles {
		dc, err := pgx.Connect(ctx, u.String())
		if err != nil {
			return "", nil, err
		}
		_, err = dc.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
		dc.Close(context.Background())
		if err != nil {
			return "", nil, err
		}
	}
	drop := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(dctx, r.cfg.admin); err == nil {
			_, _ = c.Exec(dctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(dctx)
		}
	}
	return u.String(), drop, nil
}

// server is one started `awareness serve` process; idx is its place in the run.
type server struct {
	*proc.Server
	idx int
}

// start starts one server process and waits for /readyz.
func (r *runner) start(ctx context.Context, idx int, dsn string, extra ...string) (*server, error) {
	return r.startBin(ctx, r.cfg.bin, idx, dsn, extra...)
}

// startBin is start with another binary than -bin.
func (r *runner) startBin(ctx context.Context, bin string, idx int, dsn string, extra ...string) (*server, error) {
	log := ""
	if r.cfg.keepLogs != "" {
		log = fmt.Sprintf("%s/server-%d-%d.log", r.cfg.keepLogs, r.seq.Add(1), idx)
	}
	s, err := proc.Start(ctx, proc.Config{
		Bin: bin,
		Args: func(addr string) []string {
			// A load generator is one client far above every default budget.
			args := []string{"serve", "--addr", addr, "--db", r.roleDSN(dsn, idx), "--log-level", "warn", "--rate-limit", "0"}
			if r.knows(bin, "--query-rate") { // older binaries (a -before) have no query budget
				args = append(args, "--query-rate", "0", "--max-streams", "0")
			}
			return append(args, extra...)
		},
		Log:  log,
		HTTP: r.http, ReadyWithin: 30 * time.Second, Poll: 20 * time.Millisecond,
	})
	if err != nil {
		return nil, fmt.Errorf("server %d: %w", idx, err)
	}
	return &server{Server: s, idx: idx}, nil
}

// knows reports whether bin's serve has the flag (its help names it).
func (r *runner) knows(bin, flag string) bool {
	r.helpMu.Lock()
	defer r.helpMu.Unlock()
	if r.help == nil {
		r.help = map[string]string{}
	}
	h, ok := r.help[bin]
	if !ok {
		out, _ := exec.Command(bin, "serve", "--help").CombinedOutput()
		h = string(out)
		r.help[bin] = h
	}
	return strings.Contains(h, flag)
}

func (s *server) stop() { s.Stop(15 * time.Second) }

func stopAll(ps []*server) {
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(p.stop)
	}
	wg.Wait()
}

// backendCPU returns the CPU time used by the PostgreSQL backends connected to the
// database at dsn (this machine only).
func backendCPU(ctx context.Context, dsn string) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return 0, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, pid := range pids {
		sum += proc.CPUPrecise(int(pid))
	}
	return sum, nil
}

// ---------------------------------------------------------------------------------------
// Clients

const recordMutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded noticesOpened } }`

// record appends one human turn into target naming watcher and returns when the answer
// was read.
func (r *runner) record(ctx context.Context, p *server, target, watcher string) (time.Time, error) {
	body, _ := json.Marshal(map[string]any{"query": recordMutation, "variables": map[string]any{"in": map[string]any{
		"sessionKey": target, "kind": "human_direct_message", "actorType": "human", "watchers": []string{watcher}}}})
	req, err := http.NewRequestWithContext(ctx, "POST", p.Base+"/query", bytes.NewReader(body))
	if err != nil {
		return time.Time{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	at := time.Now()
	if err != nil {
		return at, err
	}
	var a struct {
		Errors []json.RawMessage `json:"errors"`
		Data   struct {
			RecordEvent struct {
				NoticesOpened int `json:"noticesOpened"`
			} `json:"recordEvent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &a); err != nil || len(a.Errors) > 0 || a.Data.RecordEvent.NoticesOpened != 1 {
		return at, fmt.Errorf("recordEvent %s: %s", target, b)
	}
	return at, nil
}

const noticeSubscription = `subscription($w: String) { staleNotices(watcher: $w) { watcher target notifiedVersion } }`

// watchSet is one WebSocket connection to process 0 with one staleNotices
// subscription per watcher; it records when each target's notices arrived.
type watchSet struct {
	c      *websocket.Conn
	mu     sync.Mutex
	frames map[string][]time.Time // target → arrival of each frame
	n      atomic.Int64
	err    atomic.Value
}

func subscribe(ctx context.Context, p *server, watchers []string) (*watchSet, error) {
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 20 * time.Second}
	c, _, err := d.DialContext(ctx, p.WS, nil)
	if err != nil {
		return nil, err
	}
	if err := c.WriteJSON(map[string]any{"type": "connection_init"}); err != nil {
		return nil, err
	}
	var ack struct{ Type string }
	if err := c.ReadJSON(&ack); err != nil || ack.Type != "connection_ack" {
		return nil, fmt.Errorf("connection_init: %v %q", err, ack.Type)
	}
	for i, w := range watchers {
		if err := c.WriteJSON(map[string]any{"id": strconv.Itoa(i), "type": "subscribe",
			"payload": map[string]any{"query": noticeSubscription, "variables": map[string]any{"w": w}}}); err != nil {
			return nil, err
		}
	}
	ws := &watchSet{c: c, frames: map[string][]time.Time{}}
	go ws.read()
	return ws, nil
}

func (ws *watchSet) read() {
	for {
		_, data, err := ws.c.ReadMessage()
		at := time.Now()
		if err != nil {
			ws.err.Store(err)
			return
		}
		var m struct {
			Type    string
			Payload struct {
				Data struct {
					StaleNotices struct{ Target string } `json:"staleNotices"`
				} `json:"data"`
			} `json:"payload"`
		}
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		switch m.Type {
		case "next":
			ws.mu.Lock()
			t := m.Payload.Data.StaleNotices.Target
			ws.frames[t] = append(ws.frames[t], at)
			ws.mu.Unlock()
			ws.n.Add(1)
		case "ping":
			_ = ws.c.WriteJSON(map[string]any{"type": "pong"})
		case "error", "complete":
			ws.err.Store(fmt.Errorf("subscription ended: %s", data))
		}
	}
}

// waitFor waits until every target has a frame or the wait is over.
func (ws *watchSet) waitFor(targets []string, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		ws.mu.Lock()
		missing := 0
		for _, t := range targets {
			if len(ws.frames[t]) == 0 {
				missing++
			}
		}
		ws.mu.Unlock()
		if missing == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// count returns lost and duplicate notices of targets (each should have one frame).
func (ws *watchSet) count(targets []string) (lost, dupes int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, t := range targets {
		switch n := len(ws.frames[t]); {
		case n == 0:
			lost++
		case n > 1:
			dupes += n - 1
		}
	}
	return lost, dupes
}

func (ws *watchSet) first(target string) (time.Time, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	f := ws.frames[target]
	if len(f) == 0 {
		return time.Time{}, false
	}
	return f[0], true
}

// ---------------------------------------------------------------------------------------
// Statistics

type pgStats struct {
	rows, scans int64
	tables      map[string]int64 // rows read per table
}

func readStats(ctx context.Context, dsn string) (pgStats, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return pgStats{}, err
	}
	defer conn.Close(context.Background())
	s := pgStats{tables: map[string]int64{}}
	rows, err := conn.Query(ctx, `SELECT relname, (coalesce(seq_tup_read,0) + coalesce(idx_tup_fetch,0))::bigint,
	(coalesce(seq_scan,0) + coalesce(idx_scan,0))::bigint FROM pg_stat_user_tables`)
	if err != nil {
		return s, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var read, scans int64
		if err := rows.Scan(&name, &read, &scans); err != nil {
			return s, err
		}
		s.rows += read
		s.scans += scans
		s.tables[name] = read
	}
	return s, rows.Err()
}

func terminateListener(ctx context.Context, dsn string, pid int) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = $1 AND datname = current_database()`, fmt.Sprintf("awareness-listener/%d", pid)).Scan(&n)
	return n, err
}

type dist struct{ p50, p99, max time.Duration }

func summarize(ds []time.Duration) dist {
	if len(ds) == 0 {
		return dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return dist{at(0.50), at(0.99), s[len(s)-1]}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// ---------------------------------------------------------------------------------------
// x1, x2, x5

func watcherKey(i int) string { return fmt.Sprintf("agent:main:subagent:w%03d", i) }

type appendRec struct {
	target   string
	proc     int
	answered time.Time
}

// appendAll makes n appends named by prefix, round-robin over ps, writers at a time;
// onDone runs after the i-th append answered.
func (r *runner) appendAll(ctx context.Context, ps []*server, prefix string, n, watchers int, onDone func(i int)) ([]appendRec, error) {
	recs := make([]appendRec, n)
	var next atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range r.cfg.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				p := ps[i%len(ps)]
				t := fmt.Sprintf("agent:main:subagent:%s-%d", prefix, i)
				at, err := r.record(ctx, p, t, watcherKey(i%watchers))
				if err != nil {
					mu.Lock()
					firstErr = cmpErr(firstErr, err)
					mu.Unlock()
				}
				recs[i] = appendRec{target: t, proc: p.idx, answered: at}
				if onDone != nil {
					onDone(i)
				}
			}
		}()
	}
	wg.Wait()
	return recs, firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

type x1Result struct {
	hc                  string
	bus                 bool
	procs               int
	delivered           int
	rows, scans         int64
	same, cross         dist
	nSame, nCross       int
	lost, dupes         int
	faultLost, faultDup int
	killed              int
	tables              string
	// hints and hintBytes are the hints sent over the measured appends (NOTIFY
	// payloads, or bus messages published); deliveries the copies received (NOTIFY:
	// every listener's; the bus: the subscribers').
	hints, hintBytes, deliveries int64
	// stmts are pg_stat_statements' counts by role over the measured appends.
	stmts map[string]stmtStat
	load  string
}

func (r *runner) x1(ctx context.Context, rep *bytes.Buffer) error {
	var res []x1Result
	for _, hc := range r.hintConfigs(false) {
		for _, P := range r.cfg.procs {
			x, err := r.x1Run(ctx, hc, P)
			if err != nil {
				return fmt.Errorf("%s with %d processes: %w", hc.label, P, err)
			}
			res = append(res, x)
		}
	}
	fmt.Fprintf(rep, "### X1, X2, X5: subscribers on process 0 only, appends round-robin over P processes\n\n")
	fmt.Fprintf(rep, "| hints | P | notices delivered | rows read per notice | index/seq scans per notice | X2 same-process p50 / p99 | X2 across p50 / p99 | X5 lost / dupes | X5 under a fault: lost / dupes (fault) | hints per append, bytes per hint | copies received per append | load |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, x := range res {
		cross := "—"
		if x.nCross > 0 {
			cross = ms(x.cross.p50) + " / " + ms(x.cross.p99)
		}
		fault := fmt.Sprintf("listener killed ×%d", x.killed)
		if x.bus {
			fault = "NATS server killed and restarted"
		}
		n := float64(max(1, x.delivered))
		fmt.Fprintf(rep, "| %s | %d | %d | %.2f | %.2f | %s / %s | %s | %d / %d | %d / %d (%s) | %.2f, %.0f | %.2f | %s |\n", x.hc, x.procs, x.delivered,
			float64(x.rows)/n, float64(x.scans)/n, ms(x.same.p50), ms(x.same.p99), cross, x.lost, x.dupes, x.faultLost, x.faultDup, fault,
			float64(x.hints)/float64(r.cfg.appends), float64(x.hintBytes)/float64(max(1, x.hints)), float64(x.deliveries)/float64(r.cfg.appends), x.load)
	}
	fmt.Fprintf(rep, "\nRows read per notice by table:\n\n")
	for _, x := range res {
		fmt.Fprintf(rep, "- %s, P=%d: %s\n", x.hc, x.procs, x.tables)
	}
	if r.roles {
		fmt.Fprintf(rep, "\nStatements per notice by process (pg_stat_statements, a role per process): statements / rows returned / execution ms, and the reads of pending notices by watcher among them (calls / rows):\n\n")
		for _, x := range res {
			fmt.Fprintf(rep, "- %s, P=%d:", x.hc, x.procs)
			n := float64(max(1, x.delivered))
			for i := range x.procs {
				st := x.stmts[roleName(i)]
				fmt.Fprintf(rep, " p%d %.2f / %.2f / %.3f (reads %.2f / %.2f);", i, float64(st.calls)/n, float64(st.rows)/n, st.ms/n,
					float64(st.readCalls)/n, float64(st.readRows)/n)
			}
			fmt.Fprintf(rep, "\n")
		}
	}
	fmt.Fprintf(rep, "\nX2 across p99 against its goal, 2 × same-process p99 + 2 ms:")
	for _, x := range res {
		if x.nCross > 0 {
			fmt.Fprintf(rep, " %s P=%d %s vs %s;", x.hc, x.procs, ms(x.cross.p99), ms(2*x.same.p99+2*time.Millisecond))
		}
	}
	fmt.Fprintf(rep, "\n\n")
	return nil
}

func (r *runner) x1Run(ctx context.Context, hc hintConfig, P int) (x1Result, error) {
	x := x1Result{hc: hc.label, bus: hc.bus, procs: P}
	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return x, err
	}
	defer drop()
	// A database of some size (-seed sessions, and as many pending notices of other
	// watchers, analyzed) before the processes start, so that the plans are those of
	// production, index scans: the foreign-key checks' plans are made once per
	// connection, and over a table of a few rows they are sequential scans whose row
	// counts would swamp everything else.
	p, err := r.startHC(ctx, hc, 0, dsn)
	if err != nil {
		return x, err
	}
	p.stop()
	if err := seedPending(ctx, dsn, r.cfg.seed, r.cfg.seed); err != nil {
		return x, err
	}
	var ps []*server
	defer func() { stopAll(ps) }()
	for i := range P {
		// No safety poll inside the run: rescans are x4's subject; a reconnect scans.
		p, err := r.startHC(ctx, hc, i, dsn, "--notice-poll", "10m")
		if err != nil {
			return x, err
		}
		ps = append(ps, p)
	}
	var watchers []string
	for i := range r.cfg.watchers {
		watchers = append(watchers, watcherKey(i))
	}
	ws, err := subscribe(ctx, ps[0], watchers)
	if err != nil {
		return x, err
	}
	defer ws.c.Close()
	// Warm-up: one append per watcher, round-robin over the processes, until every
	// frame came (this also proves every subscription live). One per watcher whatever
	// P: a hint costs a read of the named watcher's pending notices, so every P starts
	// with the same number pending.
	recs, err := r.appendAll(ctx, ps, "warm", r.cfg.watchers, r.cfg.watchers, nil)
	if err != nil {
		return x, err
	}
	ws.waitFor(targetsOf(recs), r.cfg.wait)
	if lost, _ := ws.count(targetsOf(recs)); lost > 0 {
		return x, fmt.Errorf("warm-up: %d notices did not arrive", lost)
	}
	logf("x1 %s P=%d: warm; settling %v for the statistics", hc.label, P, r.cfg.settle)
	time.Sleep(r.cfg.settle)
	s0, err := readStats(ctx, dsn)
	if err != nil {
		return x, err
	}
	if err := r.resetStatements(ctx, dsn); err != nil {
		return x, err
	}
	var (
		notes *notifyCounter
		v0    natsVarz
	)
	if hc.bus {
		if v0, err = r.nats.varz(ctx); err != nil {
			return x, err
		}
	} else if notes, err = countNotifies(ctx, dsn); err != nil {
		return x, err
	}
	x.load = loadavg()
	d0 := ws.n.Load()
	recs, err = r.appendAll(ctx, ps, "m", r.cfg.appends, r.cfg.watchers, nil)
	if err != nil {
		return x, err
	}
	targets := targetsOf(recs)
	ws.waitFor(targets, r.cfg.wait)
	x.delivered = int(ws.n.Load() - d0)
	x.lost, x.dupes = ws.count(targets)
	if hc.bus {
		v1, err := r.nats.varz(ctx)
		if err != nil {
			return x, err
		}
		x.hints, x.hintBytes, x.deliveries = v1.InMsgs-v0.InMsgs, v1.InBytes-v0.InBytes, v1.OutMsgs-v0.OutMsgs
	} else {
		x.hints, x.hintBytes = notes.stop()
		x.deliveries = x.hints * int64(P) // every listener receives every hint
	}
	var same, cross []time.Duration
	for _, rc := range recs {
		if at, ok := ws.first(rc.target); ok {
			if rc.proc == 0 {
				same = append(same, at.Sub(rc.answered))
			} else {
				cross = append(cross, at.Sub(rc.answered))
			}
		}
	}
	x.same, x.cross, x.nSame, x.nCross = summarize(same), summarize(cross), len(same), len(cross)
	if x.stmts, err = r.statements(ctx, dsn); err != nil {
		return x, err
	}
	logf("x1 %s P=%d: %d appends delivered %d; settling %v", hc.label, P, len(recs), x.delivered, r.cfg.settle)
	time.Sleep(r.cfg.settle)
	s1, err := readStats(ctx, dsn)
	if err != nil {
		return x, err
	}
	x.rows, x.scans = s1.rows-s0.rows, s1.scans-s0.scans
	var names []string
	for n := range s1.tables {
		if s1.tables[n] > s0.tables[n] {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		x.tables += fmt.Sprintf("%s %.1f, ", n, float64(s1.tables[n]-s0.tables[n])/float64(max(1, x.delivered)))
	}
	x.tables = strings.TrimSuffix(x.tables, ", ")

	// X5 under a fault: process 0's listener connection is killed a quarter in
	// (NOTIFY); the NATS server is killed a quarter in and started again half way (bus).
	pid0 := ps[0].Pid()
	var faultErr error
	frecs, err := r.appendAll(ctx, ps, "f", r.cfg.faultN, r.cfg.watchers, func(i int) {
		switch {
		case hc.bus && i == r.cfg.faultN/4:
			r.nats.kill()
		case hc.bus && i == r.cfg.faultN/2:
			faultErr = r.nats.start()
		case !hc.bus && i == r.cfg.faultN/4:
			n, err := terminateListener(ctx, dsn, pid0)
			if err != nil {
				logf("terminate: %v", err)
			}
			x.killed += n
		}
	})
	if err != nil {
		return x, err
	}
	if faultErr != nil {
		return x, faultErr
	}
	ft := targetsOf(frecs)
	ws.waitFor(ft, r.cfg.wait)
	time.Sleep(300 * time.Millisecond) // late duplicates
	x.faultLost, x.faultDup = ws.count(ft)
	x.lost, x.dupes = ws.count(targets)
	if e := ws.err.Load(); e != nil {
		return x, fmt.Errorf("subscriber: %v", e)
	}
	logf("x1 %s P=%d: rows %d per notice %.2f; X2 same p99 %s across p99 %s; lost %d dupes %d; fault lost %d dupes %d (killed %d)", hc.label, P, x.rows,
		float64(x.rows)/float64(max(1, x.delivered)), ms(x.same.p99), ms(x.cross.p99), x.lost, x.dupes, x.faultLost, x.faultDup, x.killed)
	return x, nil
}

func targetsOf(recs []appendRec) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.target
	}
	return out
}

// ---------------------------------------------------------------------------------------
// x3

type x3Result struct {
	procs   int
	hints   string
	appends int
	rate    float64
	lat     dist
	errors  int
	// CPU per append, of the servers and of their PostgreSQL backends
	srvCPU, pgCPU time.Duration
	load          string
}

func (r *runner) x3(ctx context.Context, rep *bytes.Buffer) error {
	hcs := r.hintConfigs(true)
	type conf struct {
		hc    int
		procs int
	}
	var confs []conf
	for i := range hcs {
		for _, P := range r.cfg.procs {
			confs = append(confs, conf{i, P})
		}
	}
	runs := map[conf][]x3Result{}
	// Interleaved rounds: the machine's drift (and the other users of the PostgreSQL
	// server) hit every configuration alike; the median round is reported.
	for round := range r.cfg.rounds {
		for _, c := range confs {
			x, err := r.x3Run(ctx, hcs[c.hc], c.procs)
			if err != nil {
				return fmt.Errorf("round %d P=%d hints=%s: %w", round, c.procs, hcs[c.hc].label, err)
			}
			runs[c] = append(runs[c], x)
		}
	}
	med := map[conf]x3Result{}
	for c, xs := range runs {
		s := slices.Clone(xs)
		slices.SortFunc(s, func(a, b x3Result) int { return int(a.rate - b.rate) })
		med[c] = s[len(s)/2]
	}
	fmt.Fprintf(rep, "### X3: appends/s, %d closed-loop writers spread over P processes, no subscribers (median of %d interleaved rounds)\n\n", 4*r.cfg.writers, r.cfg.rounds)
	fmt.Fprintf(rep, "| hints | P | appends/s (median; every round) | recordEvent p50 | p99 | errors | server CPU per append | PostgreSQL backends' CPU per append | load (median round) |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range confs {
		x := med[c]
		var all []string
		for _, y := range runs[c] {
			all = append(all, fmt.Sprintf("%.0f", y.rate))
		}
		fmt.Fprintf(rep, "| %s | %d | %.0f (%s) | %s | %s | %d | %s | %s | %s |\n", x.hints, x.procs, x.rate, strings.Join(all, ", "),
			ms(x.lat.p50), ms(x.lat.p99), x.errors, ms(x.srvCPU), ms(x.pgCPU), x.load)
	}
	// Ratios against NOTIFY in the commit at the same P, round by round (the rounds
	// are interleaved, so a round's configurations shared the machine's state).
	base := -1
	for i, hc := range hcs {
		if hc.label == "notify commit" {
			base = i
		}
	}
	if base >= 0 {
		fmt.Fprintf(rep, "\nAgainst NOTIFY in the commit at the same P (median of the per-round ratios):")
		for i, hc := range hcs {
			if i == base {
				continue
			}
			for _, P := range r.cfg.procs {
				var ratios []float64
				for k := range runs[conf{i, P}] {
					ratios = append(ratios, runs[conf{i, P}][k].rate/max(1, runs[conf{base, P}][k].rate))
				}
				slices.Sort(ratios)
				fmt.Fprintf(rep, " %s P=%d %.2f×;", hc.label, P, ratios[len(ratios)/2])
			}
		}
		fmt.Fprintf(rep, "\n\n")
	}
	return nil
}

func (r *runner) x3Run(ctx context.Context, hc hintConfig, P int) (x3Result, error) {
	x := x3Result{procs: P, hints: hc.label}
	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return x, err
	}
	defer drop()
	var ps []*server
	defer func() { stopAll(ps) }()
	for i := range P {
		p, err := r.startHC(ctx, hc, i, dsn, "--notice-poll", "10m")
		if err != nil {
			return x, err
		}
		ps = append(ps, p)
	}
	writers := 4 * r.cfg.writers
	var (
		mu      sync.Mutex
		lat     []time.Duration
		errs    int
		wg      sync.WaitGroup
		measure atomic.Bool
	)
	stop := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[w%P]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				_, err := r.record(ctx, p, fmt.Sprintf("agent:main:subagent:x3-%d-%d", w, i), watcherKey(rand.N(r.cfg.watchers)))
				d := time.Since(t0)
				if measure.Load() {
					mu.Lock()
					if err != nil {
						errs++
					} else {
						lat = append(lat, d)
					}
					mu.Unlock()
				}
			}
		}()
	}
	time.Sleep(time.Second) // warm-up
	srv0, pg0 := time.Duration(0), time.Duration(0)
	for _, p := range ps {
		srv0 += proc.CPUPrecise(p.Pid())
	}
	pg0, _ = backendCPU(ctx, dsn)
	x.load = loadavg()
	measure.Store(true)
	t0 := time.Now()
	time.Sleep(r.cfg.duration)
	measure.Store(false)
	el := time.Since(t0)
	srv1 := time.Duration(0)
	for _, p := range ps {
		srv1 += proc.CPUPrecise(p.Pid())
	}
	pg1, _ := backendCPU(ctx, dsn)
	close(stop)
	wg.Wait()
	x.appends, x.errors, x.lat = len(lat), errs, summarize(lat)
	x.rate = float64(len(lat)) / el.Seconds()
	if len(lat) > 0 {
		x.srvCPU, x.pgCPU = (srv1-srv0)/time.Duration(len(lat)), (pg1-pg0)/time.Duration(len(lat))
	}
	logf("x3 %s P=%d: %.0f appends/s p99 %s errors %d", hc.label, P, x.rate, ms(x.lat.p99), errs)
	return x, nil
}

// ---------------------------------------------------------------------------------------
// x4

func (r *runner) x4(ctx context.Context, rep *bytes.Buffer) error {
	type row struct {
		pending       int
		before        bool
		rss, rssAfter int64
	}
	var res []row
	for _, c := range []row{{0, false, 0, 0}, {r.cfg.pending, false, 0, 0}, {r.cfg.pending, true, 0, 0}} {
		rs, ra, err := r.x4Run(ctx, c.pending, c.before)
		if err != nil {
			return fmt.Errorf("pending=%d: %w", c.pending, err)
		}
		c.rss, c.rssAfter = rs, ra
		res = append(res, c)
	}
	fmt.Fprintf(rep, "### X4: one process, %d local subscribers, pending notices of other watchers in the database\n\n", r.cfg.watchers)
	fmt.Fprintf(rep, "| pending notices of others | when they were written | RSS after subscribing | RSS after 5 rescans (--notice-poll 1s) |\n|---|---|---|---|\n")
	for _, x := range res {
		when := "while the process runs"
		if x.before {
			when = "before the process started (its startup sweep reads them)"
		} else if x.pending == 0 {
			when = "—"
		}
		fmt.Fprintf(rep, "| %d | %s | %.1f MiB | %.1f MiB |\n", x.pending, when, float64(x.rss)/(1<<20), float64(x.rssAfter)/(1<<20))
	}
	d := func(x row) string {
		b := x.rssAfter - res[0].rssAfter
		return fmt.Sprintf("%+.1f MiB (%.0f bytes per pending notice)", float64(b)/(1<<20), float64(b)/float64(max(1, x.pending)))
	}
	fmt.Fprintf(rep, "\nDifference due to the %d pending, steady state: %s; after a startup over them: %s.\n\n", r.cfg.pending, d(res[1]), d(res[2]))
	return nil
}

// seedPending inserts sessions other sessions (none of the run) and pending notices of 1,000 other
// watchers × pending/1000 targets (l < n = m: nothing for a sweep to re-freeze), and
// analyzes the database.
func seedPending(ctx context.Context, dsn string, pending, sessions int) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if sessions > 0 {
		_, err = conn.Exec(ctx, `INSERT INTO sessions (agent_id, session_key, kind, created_at, updated_at)
SELECT 'main', 'agent:main:subagent:seed' || i, 'subagent', $1::bigint, $1::bigint FROM generate_series(1, $2::int) AS i`,
			time.Now().UnixNano(), sessions)
		if err != nil {
			return err
		}
	}
	if pending > 0 {
		now := time.Now().UnixNano()
		_, err = conn.Exec(ctx, `INSERT INTO cursors (watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at)
SELECT 'agent:main:subagent:bulk' || (i % 1000), 'main', 'agent:main:subagent:bt' || (i / 1000), 0, 1, 1, $1::bigint + i, $1::bigint
FROM generate_series(0, $2::int - 1) AS i`, now, pending)
		if err != nil {
			return err
		}
	}
	// VACUUM too: autovacuum would otherwise visit the new rows during a measured
	// window, and its reads would count with the processes'.
	_, err = conn.Exec(ctx, "VACUUM ANALYZE")
	return err
}

func (r *runner) x4Run(ctx context.Context, pending int, before bool) (int64, int64, error) {
	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer drop()
	// The schema, from a process that then exits.
	p, err := r.start(ctx, 0, dsn)
	if err != nil {
		return 0, 0, err
	}
	p.stop()
	if before {
		if err := seedPending(ctx, dsn, pending, 0); err != nil {
			return 0, 0, err
		}
	}
	p, err = r.start(ctx, 0, dsn, "--notice-poll", "1s")
	if err != nil {
		return 0, 0, err
	}
	defer p.stop()
	if !before {
		if err := seedPending(ctx, dsn, pending, 0); err != nil {
			return 0, 0, err
		}
	}
	var watchers []string
	for i := range r.cfg.watchers {
		watchers = append(watchers, watcherKey(i))
	}
	ws, err := subscribe(ctx, p, watchers)
	if err != nil {
		return 0, 0, err
	}
	defer ws.c.Close()
	// One notice for each subscriber, from a second process (through the listener).
	q, err := r.start(ctx, 1, dsn, "--notice-poll", "10m")
	if err != nil {
		return 0, 0, err
	}
	recs, err := r.appendAll(ctx, []*server{q}, "x4", r.cfg.watchers, r.cfg.watchers, nil)
	q.stop()
	if err != nil {
		return 0, 0, err
	}
	ws.waitFor(targetsOf(recs), r.cfg.wait)
	if lost, _ := ws.count(targetsOf(recs)); lost > 0 {
		return 0, 0, fmt.Errorf("%d notices lost", lost)
	}
	time.Sleep(500 * time.Millisecond)
	r0 := p.RSSKB() << 10
	time.Sleep(5500 * time.Millisecond)
	r1 := p.RSSKB() << 10
	logf("x4 pending=%d: RSS %d → %d KiB", pending, r0>>10, r1>>10)
	return r0, r1, nil
}

// ---------------------------------------------------------------------------------------
// notify: the floor of X2

func (r *runner) bareNotify(ctx context.Context, rep *bytes.Buffer) error {
	dsn, drop, err := r.freshDB(ctx)
	if err != nil {
		return err
	}
	defer drop()
	lc, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer lc.Close(context.Background())
	if _, err := lc.Exec(ctx, "LISTEN pgscale"); err != nil {
		return err
	}
	sc, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer sc.Close(context.Background())
	n := r.cfg.appends
	arrived := make([]time.Time, n)
	got := make(chan struct{})
	go func() {
		defer close(got)
		for range n {
			wctx, cancel := context.WithTimeout(ctx, r.cfg.wait)
			note, err := lc.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return
			}
			if i, err := strconv.Atoi(note.Payload); err == nil && i < n {
				arrived[i] = time.Now()
			}
		}
	}()
	answered := make([]time.Time, n)
	for i := range n {
		if _, err := sc.Exec(ctx, "SELECT pg_notify('pgscale', $1)", strconv.Itoa(i)); err != nil {
			return err
		}
		answered[i] = time.Now()
		time.Sleep(3 * time.Millisecond) // about x1's pace
	}
	<-got
	var ds []time.Duration
	lost := 0
	for i := range n {
		if arrived[i].IsZero() {
			lost++
			continue
		}
		ds = append(ds, arrived[i].Sub(answered[i]))
	}
	d := summarize(ds)
	fmt.Fprintf(rep, "### X2's floor: bare NOTIFY → LISTEN, two connections of one process, %d notifications\n\n", n)
	fmt.Fprintf(rep, "From the sender's answer to the receipt: p50 %s, p99 %s, max %s; lost %d.\n\n", ms(d.p50), ms(d.p99), ms(d.max), lost)
	logf("notify: p50 %s p99 %s lost %d", ms(d.p50), ms(d.p99), lost)
	return nil
}
