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
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/bench/internal/pgcluster"
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
	flag.DurationVar(&c.timeout, "timeout", 25*time.Minute, "bound of the whole run (every phase: about 17 minutes on 2 cores)")
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
