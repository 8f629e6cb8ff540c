// Databases and processes of the run: a fresh database per phase, servers started and
// stopped, the backends' CPU.

package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/bench/internal/proc"
)

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
