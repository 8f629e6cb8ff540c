// Package natstest gives tests a NATS server: the machine's (TEST_NATS_URL, default
// nats://127.0.0.1:4222) for tests that only publish and subscribe, or a private
// nats-server on a free port for tests that stop and restart it (never the machine's,
// which other tests share). When neither can be had the test skips, saying so, and
// fails under CI (internal/testenv).
package natstest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/awareness/awareness/internal/testenv"
)

// EnvVar names the URL of the machine's NATS server.
const EnvVar = "TEST_NATS_URL"

// DefaultURL is the machine's NATS server when EnvVar is not set.
const DefaultURL = "nats://127.0.0.1:4222"

// URL returns the machine's NATS server, after checking that it accepts connections;
// when it does not, the test skips (fails under CI).
func URL(tb testing.TB) string {
	tb.Helper()
	u := os.Getenv(EnvVar)
	if u == "" {
		u = DefaultURL
	}
	pu, err := url.Parse(u)
	if err != nil {
		tb.Fatalf("%s=%q: %v", EnvVar, u, err)
	}
	c, err := net.DialTimeout("tcp", pu.Host, 2*time.Second)
	if err != nil {
		testenv.Missing(tb, "NATS suite", fmt.Sprintf("no NATS server at %s (%v): install nats-server and run `nats-server -a 127.0.0.1 -p 4222`, or set %s", u, err, EnvVar))
	}
	c.Close()
	return u
}

// Server is a private nats-server process.
type Server struct {
	tb   testing.TB
	bin  string
	port int
	cmd  *exec.Cmd
	// URL is the server's client URL; it stays the same across Stop and Start.
	URL string
}

// Start starts a private nats-server on a free loopback port, stopped when the test
// ends. When there is no nats-server binary the test skips (fails under CI).
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nats-server"); serr == nil {
			bin, err = "/usr/sbin/nats-server", nil
		}
	}
	if err != nil {
		testenv.Missing(tb, "NATS restart suite", "no nats-server binary to run a private server (Debian: apt-get install -y nats-server)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{tb: tb, bin: bin, port: port, URL: "nats://127.0.0.1:" + strconv.Itoa(port)}
	s.Start()
	tb.Cleanup(s.Stop)
	return s
}

// Start starts the server (again) on its port and waits until it accepts
// connections.
func (s *Server) Start() {
	s.tb.Helper()
	if s.cmd != nil {
		s.tb.Fatal("natstest: the server runs already")
	}
	cmd := exec.Command(s.bin, "-a", "127.0.0.1", "-p", strconv.Itoa(s.port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start nats-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(s.port), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.Stop()
			s.tb.Fatalf("nats-server on port %d did not accept connections: %v\n%s", s.port, err, out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: no goodbye to its clients) and waits for it.
// Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
