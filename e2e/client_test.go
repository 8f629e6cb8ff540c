package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/awareness/awareness/client"
	"github.com/awareness/awareness/internal/testenv"
)

// The Go client (package client) against the real binary: CLT-2, SIG-7, NTC-3.

// freeAddr returns a loopback address nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startServerAt starts the binary on addr (so that a client keeps its URL across a
// restart) and waits for /readyz.
func startServerAt(t *testing.T, db, addr string, args ...string) *server {
	t.Helper()
	s := &server{
		t: t, db: db, addr: addr, base: "http://" + addr, wsURL: "ws://" + addr + "/query",
		logs: &syncBuffer{}, exited: make(chan struct{}),
		client: &http.Client{Timeout: 30 * time.Second},
	}
	s.cmd = exec.Command(serverBin, append([]string{"serve", "--addr", addr, "--db", db}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = s.cmd.Wait()
		s.state = s.cmd.ProcessState
		close(s.exited)
	}()
	t.Cleanup(func() {
		s.kill()
		if t.Failed() {
			t.Logf("server %s logs:\n%s", addr, tail(s.logs.String(), 3000))
		}
	})
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			t.Fatalf("the server exited before it was ready: %v\n%s", s.state, tail(s.logs.String(), 3000))
		default:
		}
		if resp, err := s.client.Get(s.base + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the server was not ready within %v", wait)
	return nil
}

func newClient(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New("http://"+addr+"/query", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runIDs reads a session's whole log and returns its runIds in sequence order.
func runIDs(t *testing.T, c *client.Client, key string) []string {
	t.Helper()
	r, err := c.Reconcile(context.Background(), client.Target{SessionKey: key}, 0)
	if err != nil {
		t.Fatalf("reconcile %s: %v", key, err)
	}
	if r.FullRefresh {
		t.Fatalf("reconcile %s: full refresh: %s", key, r.Reason)
	}
	var out []string
	for i, e := range r.Events {
		if e.Sequence != int64(i+1) {
			t.Fatalf("%s: event %d has sequence %d", key, i, e.Sequence)
		}
		if e.RunID != nil {
			out = append(out, *e.RunID)
		}
	}
	return out
}

// checkExactlyOnce checks that every acknowledged run id of each session is in its
// log exactly once and in recording order, and that the log holds nothing else but
// ids whose Record returned an error (their fate is unknown by contract).
func checkExactlyOnce(t *testing.T, c *client.Client, acked map[string][]string, attempted map[string]bool) {
	t.Helper()
	total := 0
	for key, want := range acked {
		got := runIDs(t, c, key)
		seen := map[string]bool{}
		var ackedInLog []string
		for _, id := range got {
			if seen[id] {
				t.Errorf("%s: run %s is in the log twice", key, id)
			}
			seen[id] = true
			if !attempted[id] {
				t.Errorf("%s: run %s in the log was never recorded", key, id)
			}
			ackedInLog = append(ackedInLog, id)
		}
		ackedSet := map[string]bool{}
		for _, id := range want {
			ackedSet[id] = true
		}
		ackedInLog = slices.DeleteFunc(ackedInLog, func(id string) bool { return !ackedSet[id] })
		if !slices.Equal(ackedInLog, want) {
			t.Errorf("%s: %d acknowledged records, the log has %d of them (order or loss): first difference near %v",
				key, len(want), len(ackedInLog), firstDiff(ackedInLog, want))
		}
		total += len(want)
	}
	t.Logf("%d acknowledged records over %d sessions, each in the log exactly once, in order", total, len(acked))
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("index %d: log %s, recorded %s", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(a), len(b))
}

func TestClient_RecorderSurvivesServiceKillNine_CLT2_SIG7(t *testing.T) {
	db := filepath.Join(t.TempDir(), "awareness.db")
	addr := freeAddr(t)
	s := startServerAt(t, db, addr)
	c := newClient(t, addr, client.WithTimeout(2*time.Second))
	rec, err := c.OpenRecorder(filepath.Join(t.TempDir(), "outbox"), client.RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()

	const goroutines, sessionsEach = 4, 2
	var mu sync.Mutex
	acked := map[string][]string{}
	attempted := map[string]bool{}
	var maxRecord time.Duration
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("agent:main:subagent:k%d-%d", g, i%sessionsEach)
				id := fmt.Sprintf("r%d-%d", g, i)
				mu.Lock()
				attempted[id] = true
				mu.Unlock()
				t0 := time.Now()
				err := rec.Record(context.Background(), client.Event{SessionKey: key, Kind: "compacted", ActorType: "system", RunID: id})
				d := time.Since(t0)
				mu.Lock()
				maxRecord = max(maxRecord, d)
				if err == nil {
					acked[key] = append(acked[key], id)
				}
				mu.Unlock()
				if errors.Is(err, client.ErrRecordTimeout) {
					t.Logf("a Record timed out (the disk stalled past the bound; its event may or may not be recorded)")
				} else if err != nil {
					t.Errorf("Record failed during a service outage: %v", err)
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	s.kill() // mid-flight: some requests are lost with their answers
	time.Sleep(time.Second)
	if rec.Pending() == 0 {
		t.Error("nothing was spooled while the service was down")
	}
	startServerAt(t, db, addr)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := rec.Flush(ctx); err != nil {
		t.Fatalf("flush: %v (pending %d)", err, rec.Pending())
	}
	t.Logf("longest Record: %v (bound %v)", maxRecord, client.DefaultRecordTimeout)
	if maxRecord > client.DefaultRecordTimeout+500*time.Millisecond {
		t.Errorf("a Record took %v: it does not honour its bound %v", maxRecord, client.DefaultRecordTimeout)
	}
	checkExactlyOnce(t, c, acked, attempted)
}

var gatewayProc struct {
	once sync.Once
	bin  string
	err  error
}

// gatewayBin builds e2e/gatewayproc once.
func gatewayBin(t *testing.T) string {
	t.Helper()
	gatewayProc.once.Do(func() {
		gatewayProc.bin = filepath.Join(filepath.Dir(serverBin), "gatewayproc")
		cmd := exec.Command("go", "build", "-o", gatewayProc.bin, "./e2e/gatewayproc")
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			gatewayProc.err = fmt.Errorf("build gatewayproc: %v\n%s", err, out)
		}
	})
	if gatewayProc.err != nil {
		t.Fatal(gatewayProc.err)
	}
	return gatewayProc.bin
}

// gatewayRun is one gatewayproc process.
type gatewayRun struct {
	cmd    *exec.Cmd
	lines  chan string
	done   chan struct{}
	stderr *syncBuffer
}

func startGateway(t *testing.T, args ...string) *gatewayRun {
	t.Helper()
	g := &gatewayRun{cmd: exec.Command(gatewayBin(t), args...), lines: make(chan string, 1<<16), done: make(chan struct{}), stderr: &syncBuffer{}}
	out, err := g.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g.cmd.Stderr = g.stderr
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(g.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			g.lines <- sc.Text()
		}
		_ = g.cmd.Wait()
		close(g.lines)
	}()
	t.Cleanup(func() { _ = g.cmd.Process.Kill(); <-g.done })
	return g
}

// collect reads OK lines into acked until n were read (then kill -9s the process) or
// the process ends; it returns whether the process was killed.
func (g *gatewayRun) collect(t *testing.T, acked map[string][]string, killAfter int) {
	t.Helper()
	n := 0
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-g.lines:
			if !ok {
				if killAfter > 0 {
					t.Fatalf("the gateway ended before it was killed: %s", g.stderr.String())
				}
				return
			}
			f := strings.Fields(line)
			if len(f) == 3 && f[0] == "OK" {
				acked[f[1]] = append(acked[f[1]], f[2])
				n++
				if killAfter > 0 && n == killAfter {
					_ = g.cmd.Process.Kill() // SIGKILL: no Close, no flush of anything
					// Lines already written before the kill are acknowledged too.
					for line := range g.lines {
						if f := strings.Fields(line); len(f) == 3 && f[0] == "OK" {
							acked[f[1]] = append(acked[f[1]], f[2])
						}
					}
					return
				}
			}
		case <-timeout:
			t.Fatalf("the gateway did not finish: %s", g.stderr.String())
		}
	}
}

func TestClient_RecorderSurvivesGatewayKillNine_CLT2_SIG7(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "awareness.db")
	addr := freeAddr(t)
	outbox := filepath.Join(dir, "outbox")
	endpoint := "http://" + addr + "/query"
	acked := map[string][]string{}
	attempted := map[string]bool{}
	for s := range 4 {
		for i := range 2000 {
			for _, p := range []string{"a", "b"} {
				attempted[fmt.Sprintf("%s-%d-%d", p, s, i)] = true
			}
		}
	}

	// 1. The service is down: everything spools; the gateway dies mid-record.
	g := startGateway(t, "-endpoint", endpoint, "-outbox", outbox, "-record", "2000", "-prefix", "a")
	g.collect(t, acked, 1500)
	if fi, err := os.Stat(outbox); err != nil || fi.Size() == 0 {
		t.Fatalf("the outbox is empty after the crash: %v", err)
	}

	// 2. The service is up: a new gateway process delivers the spool while it records
	// more, and dies again mid-way.
	s := startServerAt(t, db, addr)
	g = startGateway(t, "-endpoint", endpoint, "-outbox", outbox, "-record", "2000", "-prefix", "b")
	g.collect(t, acked, 3000)

	// 3. A third process delivers what is left.
	g = startGateway(t, "-endpoint", endpoint, "-outbox", outbox, "-flush")
	g.collect(t, acked, 0)
	if g.cmd.ProcessState == nil || !g.cmd.ProcessState.Success() {
		t.Fatalf("the flushing gateway failed: %v %s", g.cmd.ProcessState, g.stderr.String())
	}
	checkExactlyOnce(t, newClient(t, s.addr), acked, attempted)
}

func drainWait(t *testing.T, w *client.Watcher, n int) []client.Notice {
	t.Helper()
	var got []client.Notice
	deadline := time.After(wait)
	for len(got) < n {
		got = append(got, w.Drain()...)
		if len(got) >= n {
			break
		}
		select {
		case <-w.Notify():
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			t.Fatalf("drained %d notices, want %d: %+v", len(got), n, got)
		}
	}
	if len(got) != n {
		t.Fatalf("drained %d notices, want %d: %+v", len(got), n, got)
	}
	return got
}

func newWatcher(t *testing.T, c *client.Client, watchers ...string) *client.Watcher {
	t.Helper()
	return startWatcher(t, c, client.WatcherOptions{}, watchers...)
}

// NTC-5, NTC-7 at the gateway: a pending notice is delivered again after every
// restart of the service, and the Watcher hands it out once.
func TestClient_WatcherOnceAcrossServerRestarts_NTC5_NTC7(t *testing.T) {
	db := filepath.Join(t.TempDir(), "awareness.db")
	addr := freeAddr(t)
	s := startServerAt(t, db, addr)
	c := newClient(t, addr)
	const child = "agent:main:subagent:w1"
	s.spawn(t, child, mainWatcher)
	w := newWatcher(t, c, mainWatcher)
	s.humanTurn(t, child)
	first := drainWait(t, w, 1)
	wantNotice(t, notice{Watcher: first[0].Watcher, Target: first[0].Target, ChangesSince: first[0].ChangesSince, Text: first[0].Text,
		NotifiedVersion: first[0].NotifiedVersion, Wake: first[0].Wake}, mainWatcher, child, 1)

	for round := range 2 {
		dups := w.Duplicates()
		s.kill()
		s = startServerAt(t, db, addr)
		waitFor(t, wait, fmt.Sprintf("round %d: the replayed notice to arrive and be dropped", round), func() bool { return w.Duplicates() > dups })
		time.Sleep(quiet)
		if got := w.Drain(); len(got) != 0 {
			t.Fatalf("round %d: after the restart Drain handed out %d notices again: %+v", round, len(got), got)
		}
		if round == 0 {
			// M moves; acknowledging the drained notice opens one follow-up, handed
			// out once although it comes both from Ack and from the stream.
			s.humanTurn(t, child)
			acks, err := w.Ack(context.Background(), first)
			if err != nil {
				t.Fatal(err)
			}
			if len(acks) != 1 || acks[0].Outcome != client.AckAcknowledged || acks[0].FollowUp == nil || acks[0].FollowUp.ChangesSince != first[0].NotifiedVersion {
				t.Fatalf("acknowledgements %+v, want one acknowledged with a follow-up from %d", acks, first[0].NotifiedVersion)
			}
			first = drainWait(t, w, 1)
			time.Sleep(quiet)
			if got := w.Drain(); len(got) != 0 {
				t.Fatalf("the follow-up was handed out twice: %+v", got)
			}
		}
	}
}

// NTC-3 at the gateway: Ack acknowledges exactly what was drained; a notice opened
// after the Drain — on another target, or on the same target after someone else
// acknowledged — stays pending; a notice acknowledged elsewhere before the Drain is
// dropped from the closed item.
func TestClient_WatcherAckOnlyWhatWasDrained_NTC3(t *testing.T) {
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	c := newClient(t, s.addr)
	c1, c2, c3 := "agent:main:subagent:a1", "agent:main:subagent:a2", "agent:main:subagent:a3"
	for _, k := range []string{c1, c2, c3} {
		s.spawn(t, k, mainWatcher)
	}
	w := newWatcher(t, c, mainWatcher)
	exactAck := func(target string, version int64) {
		t.Helper()
		s.mustGQL(t, `mutation($w: String!, $n: [NoticeRef!]) { ackNotices(watcher: $w, notices: $n) { target } }`,
			map[string]any{"w": mainWatcher, "n": []map[string]any{{"target": target, "notifiedVersion": version}}}, nil)
	}

	// Acknowledged elsewhere before the Drain: the closed item drops it.
	s.humanTurn(t, c3)
	waitFor(t, wait, "the c3 notice", func() bool { return len(w.Pending()) == 1 })
	exactAck(c3, w.Pending()[0].NotifiedVersion)
	waitFor(t, wait, "the closed c3 notice to be dropped", func() bool { return len(w.Pending()) == 0 })

	s.humanTurn(t, c1)
	drained := drainWait(t, w, 1)
	old := drained[0].NotifiedVersion
	// After the Drain: another gateway acknowledges c1 and a person types into it
	// again (a new notice on the same pair), and c2 gets its first notice.
	exactAck(c1, old)
	s.humanTurn(t, c1)
	s.humanTurn(t, c2)
	later := drainWait(t, w, 2)
	if _, err := w.Ack(context.Background(), drained); err != nil {
		t.Fatal(err)
	}
	pending := s.pendingNotices(t, mainWatcher)
	got := map[string]int64{}
	for _, n := range pending {
		got[n.Target] = n.NotifiedVersion
	}
	if len(pending) != 2 || got[c1] <= old || got[c2] == 0 {
		t.Fatalf("after Ack of the drained c1@%d: pending %+v, want the newer c1 notice and c2's", old, pending)
	}
	// Acknowledging what the second Drain handed out clears both.
	if _, err := w.Ack(context.Background(), later); err != nil {
		t.Fatal(err)
	}
	if p := s.pendingNotices(t, mainWatcher); len(p) != 0 {
		t.Fatalf("pending after acknowledging everything drained: %+v", p)
	}
}

// The reference gateway (examples/gateway) end to end against the real binary.
func TestClient_ReferenceGateway_CLT2(t *testing.T) {
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	bin := filepath.Join(t.TempDir(), "gateway")
	build := exec.Command("go", "build", "-o", bin, "./examples/gateway")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build examples/gateway: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--url", s.base+"/query", "--timeout", "60s").CombinedOutput()
	t.Logf("examples/gateway:\n%s", out)
	if err != nil {
		t.Fatalf("the reference gateway failed: %v", err)
	}
	for _, want := range []string{
		`[notice wake=true] Session "agent:main:subagent:writer" changed (other actor).`,
		`[notice wake=false] Session "agent:main:subagent:researcher" changed (other actor).`,
		"agent:main:subagent:writer #2 human_direct_message: human message via webchat",
		"done: every notice was drained, reconciled and acknowledged exactly",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the transcript lacks %q", want)
		}
	}
}

// The Go and TypeScript clients share the outbox format: what one spooled and did not
// deliver (the service was down, the process was killed), the other delivers, exactly
// once.
func TestClient_OutboxSharedBetweenGoAndTypeScript_CLT2(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "client outbox interop", "node >= 20 is not installed")
	}
	tsProc := filepath.Join(repoRoot, "clients", "ts", "test", "gatewayproc.mjs")
	if _, err := os.Stat(filepath.Join(repoRoot, "clients", "ts", "dist", "index.js")); err != nil {
		testenv.Missing(t, "client outbox interop", "clients/ts is not built: cd clients/ts && npm ci && npm run build")
	}
	dir := t.TempDir()
	db, addr := filepath.Join(dir, "awareness.db"), freeAddr(t)
	endpoint := "http://" + addr + "/query"
	acked := map[string][]string{}
	attempted := map[string]bool{}
	for s := range 4 {
		for i := range 300 {
			attempted[fmt.Sprintf("go-%d-%d", s, i)] = true
			attempted[fmt.Sprintf("ts-%d-%d", s, i)] = true
		}
	}
	goOutbox, tsOutbox := filepath.Join(dir, "go-outbox"), filepath.Join(dir, "ts-outbox")
	// The service is down: each client spools and is killed -9.
	startGateway(t, "-endpoint", endpoint, "-outbox", goOutbox, "-record", "300", "-prefix", "go").collect(t, acked, 900)
	ts := &gatewayRun{cmd: exec.Command(node, tsProc, endpoint, tsOutbox, "300", "ts"), lines: make(chan string, 1<<16), done: make(chan struct{}), stderr: &syncBuffer{}}
	out, err := ts.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ts.cmd.Stderr = ts.stderr
	if err := ts.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(ts.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ts.lines <- sc.Text()
		}
		_ = ts.cmd.Wait()
		close(ts.lines)
	}()
	t.Cleanup(func() { _ = ts.cmd.Process.Kill(); <-ts.done })
	ts.collect(t, acked, 900)

	// The service is up: the TypeScript client delivers the Go outbox, and the Go
	// client the TypeScript one.
	s := startServerAt(t, db, addr)
	flushTS := exec.Command(node, tsProc, endpoint, goOutbox, "0", "x", "--flush")
	if out, err := flushTS.CombinedOutput(); err != nil || !strings.Contains(string(out), "FLUSHED") {
		t.Fatalf("the TypeScript client did not deliver the Go outbox: %v\n%s", err, out)
	}
	g := startGateway(t, "-endpoint", endpoint, "-outbox", tsOutbox, "-flush")
	g.collect(t, acked, 0)
	if !g.cmd.ProcessState.Success() {
		t.Fatalf("the Go client did not deliver the TypeScript outbox: %s", g.stderr.String())
	}
	checkExactlyOnce(t, newClient(t, s.addr), acked, attempted)
}
