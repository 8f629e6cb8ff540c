// Package proc starts and measures the server processes the bench drivers
// (bench/cmd/wsload, bench/cmd/pgscale) load: a child process on a free loopback port,
// ready once GET /readyz answers 200, stopped with SIGTERM, and its CPU time and
// resident set read from /proc (Linux).
package proc

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config says how to start one server.
type Config struct {
	// Bin is the server binary; Args its arguments for the listen address addr.
	Bin  string
	Args func(addr string) []string
	// Log, when set, is a file the server's stdout and stderr are appended to
	// (created if missing); otherwise they are discarded.
	Log string
	// HTTP polls /readyz.
	HTTP *http.Client
	// ReadyWithin bounds the start; Poll is the pause between two /readyz requests.
	ReadyWithin, Poll time.Duration
}

// Server is a started server process.
type Server struct {
	Cmd *exec.Cmd
	// Addr is the listen address; Base its http:// URL and WS the ws:// URL of /query.
	Addr, Base, WS string
	// ReadyAfter is the time from the process's start to the first /readyz 200.
	ReadyAfter time.Duration
	// Exited is closed when the process has exited.
	Exited chan struct{}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// Start starts the server and waits until it is ready. A server that exits first, is
// not ready within c.ReadyWithin or outlives ctx is killed and reported.
func Start(ctx context.Context, c Config) (*Server, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: addr, Base: "http://" + addr, WS: "ws://" + addr + "/query", Exited: make(chan struct{})}
	s.Cmd = exec.Command(c.Bin, c.Args(addr)...)
	var log *os.File
	if c.Log != "" {
		if log, err = os.OpenFile(c.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, err
		}
		s.Cmd.Stdout, s.Cmd.Stderr = log, log
	}
	t0 := time.Now()
	if err := s.Cmd.Start(); err != nil {
		if log != nil {
			log.Close()
		}
		return nil, err
	}
	go func() {
		_ = s.Cmd.Wait()
		if log != nil {
			log.Close()
		}
		close(s.Exited)
	}()
	deadline := t0.Add(c.ReadyWithin)
	for {
		select {
		case <-s.Exited:
			return nil, fmt.Errorf("%s exited before it was ready: %v", c.Bin, s.Cmd.ProcessState)
		default:
		}
		if resp, err := c.HTTP.Get(s.Base + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.ReadyAfter = time.Since(t0)
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			s.kill()
			return nil, fmt.Errorf("%s was not ready within %v", c.Bin, c.ReadyWithin)
		}
		select {
		case <-ctx.Done():
			s.kill()
			return nil, ctx.Err()
		case <-time.After(c.Poll):
		}
	}
}

func (s *Server) kill() {
	_ = s.Cmd.Process.Kill()
	<-s.Exited
}

// Pid is the server's process id.
func (s *Server) Pid() int { return s.Cmd.Process.Pid }

// Stop sends SIGTERM and waits for the exit, killing the server after grace. Stopping
// an exited server does nothing.
func (s *Server) Stop(grace time.Duration) {
	select {
	case <-s.Exited:
		return
	default:
	}
	_ = s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.Exited:
	case <-time.After(grace):
		s.kill()
	}
}

// CPU is the server's CPU time so far (user + system).
func (s *Server) CPU() time.Duration { return CPU(s.Pid()) }

// RSSKB is the server's resident set in kB.
func (s *Server) RSSKB() int64 { return RSSKB(s.Pid()) }

// CPU is the CPU time (utime + stime of /proc/PID/stat) process pid has used; 0 when
// it cannot be read.
func CPU(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which is in parentheses and may hold spaces).
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// RSSKB is the resident set (VmRSS of /proc/PID/status) of process pid in kB; 0 when
// it cannot be read.
func RSSKB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// CPUPrecise is the CPU time process pid's threads have used, summed from their
// /proc/PID/task/*/schedstat (nanoseconds, where /proc/PID/stat counts 10 ms ticks);
// the time of threads that exited is not counted (Go's threads rarely exit). It falls
// back to CPU when schedstat cannot be read.
func CPUPrecise(pid int) time.Duration {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return CPU(pid)
	}
	var sum time.Duration
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(data))
		if len(f) < 1 {
			continue
		}
		ns, _ := strconv.ParseInt(f[0], 10, 64)
		sum += time.Duration(ns)
	}
	return sum
}
