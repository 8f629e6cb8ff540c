package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/awareness/awareness/bench/internal/proc"
)

// The server under test.

// stopGrace is how long a stopped server may take to exit before it is killed.
const stopGrace = 20 * time.Second

// start starts the server under test (-bin) on a free port and waits for /readyz.
func (r *runner) start(ctx context.Context) (*proc.Server, error) {
	s, err := proc.Start(ctx, proc.Config{
		Bin:  r.cfg.bin,
		Args: r.serverArgs,
		Log:  r.cfg.logFile,
		HTTP: r.http, ReadyWithin: 60 * time.Second, Poll: 2 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	logf("server %s ready after %v (pid %d)", s.Addr, s.ReadyAfter, s.Pid())
	return s, nil
}

// serverArgs is the command line of the server under test listening on addr.
func (r *runner) serverArgs(addr string) []string {
	var args []string
	if r.cfg.mode == "service" {
		// A load generator is one client far above every default budget.
		args = []string{"serve", "--addr", addr, "--db", r.cfg.db, "--log-level", "warn", "--rate-limit", "0", "--query-rate", "0", "--max-streams", "0"}
		// The peers send no keep-alive on graphql-transport-ws (gqlgen pings only with
		// PingPongInterval set; graphql-ws and the gorilla baseline never do), while
		// the service pings every connection every 20 s and reads its pong: at 10,000
		// connections as many frames each way as phase a's notices. Without -pings the
		// service does what the peers do, so that a phase's CPU per frame is the
		// frame's; the run with -pings measures what dead-peer detection costs.
		if !r.cfg.pings {
			args = append(args, "--ws-ping-interval", "1h")
		}
	} else {
		args = []string{"-addr", addr}
		if r.cfg.frameBytes > 0 {
			args = append(args, "-frame-bytes", strconv.Itoa(r.cfg.frameBytes))
		}
	}
	return append(args, strings.Fields(r.cfg.serverArgs)...)
}

// stats reads /debug/stats when the server has it (profserve, wsbaseline).
func (r *runner) stats(ctx context.Context) map[string]float64 {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.srv.Base+"/debug/stats", nil)
	resp, err := r.http.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	var m map[string]float64
	if json.NewDecoder(resp.Body).Decode(&m) != nil {
		return nil
	}
	return m
}

// profile starts or stops a CPU profile on profserve (with -profile-dir).
func (r *runner) profile(ctx context.Context, action, name string) {
	if r.cfg.profileDir == "" {
		return
	}
	u := r.srv.Base + "/debug/cpuprofile/" + action
	if action == "start" {
		u += "?file=" + filepath.Join(r.cfg.profileDir, "cpu-"+name+".pprof")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if resp, err := r.http.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func (r *runner) heapProfile(ctx context.Context, name string) {
	if r.cfg.profileDir == "" {
		return
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.srv.Base+"/debug/pprof/heap", nil)
	resp, err := r.http.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		if f, err := os.Create(filepath.Join(r.cfg.profileDir, "heap-"+name+".pprof")); err == nil {
			_, _ = io.Copy(f, resp.Body)
			f.Close()
		}
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, r.srv.Base+"/debug/pprof/goroutine?debug=1", nil)
	if resp, err := r.http.Do(req); err == nil {
		if f, err := os.Create(filepath.Join(r.cfg.profileDir, "goroutine-"+name+".txt")); err == nil {
			_, _ = io.Copy(f, resp.Body)
			f.Close()
		}
		resp.Body.Close()
	}
}
