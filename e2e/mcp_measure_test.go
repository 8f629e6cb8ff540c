package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMeasureMCP measures, on the real binary, what an MCP session and a resource
// subscription hold (descriptors, goroutines, heap and RSS, from /metrics) and what
// the hostile 3.9 MiB JSON-RPC batch of 26,418 session_status calls costs in CPU.
// With AWARENESS_BASELINE_BIN naming another build of the binary (e.g. of main), it
// measures that one the same way first, for a before/after in one run. It only logs.
//
//	AWARENESS_MEASURE=1 [AWARENESS_BASELINE_BIN=/tmp/awareness-main] go test -run TestMeasureMCP -v ./e2e/
func TestMeasureMCP(t *testing.T) {
	if os.Getenv("AWARENESS_MEASURE") != "1" {
		t.Skip("set AWARENESS_MEASURE=1 to measure the MCP server")
	}
	type build struct {
		name, bin string
		args      []string
	}
	// This build's caps would refuse the 200 sessions measured.
	bins := []build{{"this build", serverBin, []string{"--mcp-max-sessions", "1000", "--mcp-max-subscriptions", "1000"}}}
	if b := os.Getenv("AWARENESS_BASELINE_BIN"); b != "" {
		bins = append([]build{{"baseline " + b, b, nil}}, bins...)
	}
	for _, b := range bins {
		t.Run(filepath.Base(b.bin), func(t *testing.T) { measureMCP(t, b.name, b.bin, b.args) })
	}
}

func measureMCP(t *testing.T, name, bin string, extra []string) {
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: extra, wrap: func(_ string, args []string) *exec.Cmd {
		return exec.Command(bin, args...)
	}})
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	const n = 200
	time.Sleep(time.Second)
	base := readProcMetrics(t, s)
	ids := make([]string, 0, n)
	for range n {
		id, r := mcpOpen(t, hc, s.base, "")
		if id == "" {
			t.Fatalf("initialize: %d %s", r.status, r.body)
		}
		ids = append(ids, id)
	}
	time.Sleep(time.Second)
	sessions := readProcMetrics(t, s)
	for i, id := range ids {
		r := mcpDo(t, hc, s.base, http.MethodPost, "", id, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"awareness://notices/agent:main:w%d"}}`, i))
		if errCode(r.body) != "" || r.status != http.StatusOK {
			t.Fatalf("subscribe: %d %s", r.status, r.body)
		}
	}
	time.Sleep(2 * time.Second) // the old server's feeds dial their WebSockets
	subs := readProcMetrics(t, s)
	per := func(a, b procMetrics) string {
		return fmt.Sprintf("%.2f fds, %.2f goroutines, %.1f KiB heap in use, %.1f KiB RSS",
			float64(b.fds-a.fds)/n, float64(b.goroutines-a.goroutines)/n, (b.heap-a.heap)/n/1024, (b.rss-a.rss)/n/1024)
	}
	t.Logf("%s: per idle MCP session: %s", name, per(base, sessions))
	t.Logf("%s: per resource subscription: %s", name, per(sessions, subs))
	for _, id := range ids {
		mcpDo(t, hc, s.base, http.MethodDelete, "", id, "")
	}
	time.Sleep(6 * time.Second) // the sweep
	after := readProcMetrics(t, s)
	t.Logf("%s: after DELETE of every session: %+v (before any: %+v)", name, after, base)

	// The hostile batch, on a session of its own.
	id, _ := mcpOpen(t, hc, s.base, "")
	msgs := make([]string, 26418)
	for i := range msgs {
		msgs[i] = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"session_status","arguments":{"sessionKey":"agent:main:main"}}}`, i+10)
	}
	body := "[" + strings.Join(msgs, ",") + "]"
	cpu0 := processCPU(t, s.cmd.Process.Pid)
	t0 := time.Now()
	req, _ := http.NewRequest(http.MethodPost, s.base+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", id)
	req.Header.Set("Mcp-Protocol-Version", "2025-03-26")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		size += len(sc.Bytes()) + 1
	}
	resp.Body.Close()
	wall := time.Since(t0)
	time.Sleep(200 * time.Millisecond)
	cpu := processCPU(t, s.cmd.Process.Pid) - cpu0
	t.Logf("%s: a %.2f MiB batch of 26,418 session_status calls: HTTP %d, %d bytes answered, %v of server CPU, %v wall (load %s)",
		name, float64(len(body))/(1<<20), resp.StatusCode, size, cpu, wall.Round(time.Millisecond), loadAvg())
}

type procMetrics struct {
	fds, goroutines int
	heap, rss       float64
}

// readProcMetrics reads the process's Go and process metrics from /metrics.
func readProcMetrics(t *testing.T, s *server) procMetrics {
	t.Helper()
	resp, err := http.Get(s.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m procMetrics
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "process_open_fds":
			m.fds = int(v)
		case "go_goroutines":
			m.goroutines = int(v)
		case "go_memstats_heap_inuse_bytes":
			m.heap = v
		case "process_resident_memory_bytes":
			m.rss = v
		}
	}
	return m
}

// processCPU is the user and system CPU a process has used, from /proc.
func processCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // CLK_TCK 100
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
