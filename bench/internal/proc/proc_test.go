package proc

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is also the server Start starts: with PROC_TEST_SERVE set it serves
// /readyz on the address given after -addr (or exits at once with "exit"), until
// SIGTERM.
func TestMain(m *testing.M) {
	switch os.Getenv("PROC_TEST_SERVE") {
	case "":
		os.Exit(m.Run())
	case "exit":
		os.Exit(3)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	srv := &http.Server{Addr: os.Args[len(os.Args)-1], ReadHeaderTimeout: time.Second}
	http.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	go func() { <-ctx.Done(); srv.Close() }()
	fmt.Println("serving")
	_ = srv.ListenAndServe()
}

func config(t *testing.T, log string) Config {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Config{Bin: bin, Args: func(addr string) []string { return []string{"-addr", addr} }, Log: log,
		HTTP: &http.Client{Timeout: 5 * time.Second}, ReadyWithin: 30 * time.Second, Poll: 5 * time.Millisecond}
}

func TestStartWaitsForReadyAndStopEndsTheProcess(t *testing.T) {
	t.Setenv("PROC_TEST_SERVE", "serve")
	log := t.TempDir() + "/server.log"
	s, err := Start(t.Context(), config(t, log))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(s.Base + "/readyz")
	if err != nil {
		t.Fatalf("the server is not serving once Start returned: %v", err)
	}
	resp.Body.Close()
	if !strings.HasPrefix(s.WS, "ws://"+s.Addr) || s.ReadyAfter <= 0 {
		t.Errorf("Server = %+v, want its URLs and the time it took to be ready", s)
	}
	if got := s.RSSKB(); got <= 0 {
		t.Errorf("RSSKB() = %d, want the server's resident set", got)
	}
	s.Stop(10 * time.Second)
	select {
	case <-s.Exited:
	default:
		t.Fatal("Stop returned before the server exited")
	}
	if !s.Cmd.ProcessState.Exited() {
		t.Errorf("the server was killed (%v), want it to exit on SIGTERM", s.Cmd.ProcessState)
	}
	s.Stop(time.Second) // stopping a stopped server does nothing
	out, err := os.ReadFile(log)
	if err != nil || !strings.Contains(string(out), "serving") {
		t.Errorf("log file = %q, %v; want the server's output", out, err)
	}
}

func TestStartReportsAServerThatExits(t *testing.T) {
	t.Setenv("PROC_TEST_SERVE", "exit")
	_, err := Start(t.Context(), config(t, ""))
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("Start = %v, want an error saying the server exited", err)
	}
}

// sink keeps the busy loop of TestCPUAndRSSOfThisProcess from being optimised away.
var sink int

func TestCPUAndRSSOfThisProcess(t *testing.T) {
	deadline := time.Now().Add(5 * time.Second)
	for CPU(os.Getpid()) == 0 && time.Now().Before(deadline) {
		for i := range 1_000_000 {
			sink += i * i
		}
	}
	if CPU(os.Getpid()) <= 0 {
		t.Error("CPU of this process is 0 after a busy loop")
	}
	if RSSKB(os.Getpid()) <= 0 || RSSKB(-1) != 0 || CPU(-1) != 0 {
		t.Error("RSSKB and CPU do not read this process, or read a process that does not exist")
	}
}
