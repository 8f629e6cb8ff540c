package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/testenv"
	"github.com/awareness/awareness/internal/wsgorilla"
)

// The "Done means" flow (NTC-1..3, REC-1): a gateway subscribes to its main session's
// notices, a child is spawned, a person writes into the child: exactly one notice with
// the exact text; the gateway reconciles and acknowledges; with nothing recorded
// nothing more comes; a later foreign change opens the next notice from the acked N.
func TestDoneMeans_NoticeAckQuietThenNext_NTC1_NTC3(t *testing.T) {
	t.Parallel()
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	child := "agent:main:subagent:research"
	ws := dialWS(t, s.wsURL)
	ws.subscribe("n", mainWatcher)

	seed := s.spawn(t, child, mainWatcher)
	r := s.humanTurn(t, child)
	if r.NoticesOpened != 1 {
		t.Fatalf("human turn opened %d notices, want 1", r.NoticesOpened)
	}
	n, _ := ws.nextNotice("n")
	wantNotice(t, n, mainWatcher, child, seed)
	if !n.Wake || n.NotifiedVersion != r.Event.Sequence {
		t.Fatalf("notice = %+v; want wake and N=%d", n, r.Event.Sequence)
	}
	ws.none("n")

	// Reconcile with the notice's own changesSince: exactly the human turn.
	var st struct {
		SessionStatus struct {
			StateVersion int64 `json:"stateVersion"`
			StateChanges struct {
				Events []struct {
					Sequence int64  `json:"sequence"`
					Kind     string `json:"kind"`
				} `json:"events"`
				HistoryGap bool `json:"historyGap"`
			} `json:"stateChanges"`
		} `json:"sessionStatus"`
	}
	s.mustGQL(t, `query($k: String!, $c: Int) { sessionStatus(sessionKey: $k, changesSince: $c) {
	  stateVersion stateChanges { events { sequence kind } historyGap } } }`,
		map[string]any{"k": child, "c": n.ChangesSince}, &st)
	if ev := st.SessionStatus.StateChanges.Events; len(ev) != 1 || ev[0].Kind != "human_direct_message" || st.SessionStatus.StateChanges.HistoryGap {
		t.Fatalf("reconciliation = %+v", st.SessionStatus)
	}

	if follow := s.ack(t, mainWatcher); len(follow) != 0 {
		t.Fatalf("ack opened %d follow-ups, want 0", len(follow))
	}
	ws.none("n") // nothing recorded: nothing more
	if p := s.pendingNotices(t, mainWatcher); len(p) != 0 {
		t.Fatalf("pending after ack: %+v", p)
	}

	r2 := s.mustRecord(t, map[string]any{
		"sessionKey": child, "kind": "goal_changed", "actorType": "agent", "actorId": "agent:ops:main",
	})
	if r2.NoticesOpened != 1 {
		t.Fatalf("foreign change opened %d notices, want 1", r2.NoticesOpened)
	}
	n2, _ := ws.nextNotice("n")
	wantNotice(t, n2, mainWatcher, child, r.Event.Sequence)
	ws.none("n")
}

// NTC-5: pending notices are durable. They survive a graceful SIGTERM restart and a
// SIGKILL of the real process unchanged (same N, text and opening time); after each
// restart a WebSocket subscriber gets them again. An append acknowledged just before
// SIGKILL is kept (SIG-7).
func TestRestart_PendingNoticesSurviveSIGTERMAndSIGKILL_NTC5(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "awareness.db")
	c1, c2 := "agent:main:subagent:one", "agent:main:subagent:two"

	s1 := startServer(t, db)
	seed := s1.spawn(t, c1, mainWatcher)
	first := s1.humanTurn(t, c1).Event.Sequence
	ws := dialWS(t, s1.wsURL)
	ws.subscribe("a", mainWatcher)
	n, _ := ws.nextNotice("a")
	wantNotice(t, n, mainWatcher, c1, seed)
	text := n.Text
	second := s1.humanTurn(t, c1).Event.Sequence // M > N: the notice stays as it is
	ws.none("a")
	ws.close()
	if st := s1.stop(syscall.SIGTERM); !st.Success() {
		t.Fatalf("SIGTERM exit: %v", st)
	}

	s2 := startServer(t, db)
	ws2 := dialWS(t, s2.wsURL)
	ws2.subscribe("b", mainWatcher)
	n2, _ := ws2.nextNotice("b")
	if n2.Text != text || n2.OpenedAt != n.OpenedAt {
		t.Fatalf("after SIGTERM restart: %+v, want text %q opened at %s", n2, text, n.OpenedAt)
	}
	if n2.NotifiedVersion != first || n2.MaterialVersion != second {
		t.Errorf("after the restart N,M = %d,%d, want %d,%d", n2.NotifiedVersion, n2.MaterialVersion, first, second)
	}
	ws2.none("b")

	// A new pair opened live, and one more change on the first, then SIGKILL right
	// after the last append was acknowledged.
	seed2 := s2.spawn(t, c2, mainWatcher)
	s2.humanTurn(t, c2)
	n3, _ := ws2.nextNotice("b")
	wantNotice(t, n3, mainWatcher, c2, seed2)
	last := s2.humanTurn(t, c1).Event.Sequence
	if st := s2.stop(syscall.SIGKILL); st.Success() {
		t.Fatalf("SIGKILL exit: %v", st)
	}
	ws2.close()

	s3 := startServer(t, db)
	ws3 := dialWS(t, s3.wsURL)
	ws3.subscribe("c", mainWatcher)
	got := map[string]notice{}
	for range 2 {
		n, _ := ws3.nextNotice("c")
		got[n.Target] = n
	}
	ws3.none("c")
	if got[c1].Text != text || got[c1].NotifiedVersion != first || got[c1].MaterialVersion != last || got[c1].OpenedAt != n.OpenedAt {
		t.Errorf("after SIGKILL restart, %s: %+v; want text %q, N=%d, M=%d, opened at %s", c1, got[c1], text, first, last, n.OpenedAt)
	}
	if got[c2].Text != n3.Text {
		t.Errorf("after SIGKILL restart, %s: text %q, want %q", c2, got[c2].Text, n3.Text)
	}
	if p := s3.pendingNotices(t, mainWatcher); len(p) != 2 {
		t.Errorf("pendingNotices after SIGKILL restart = %d, want 2", len(p))
	}
	if st := s3.stop(syscall.SIGTERM); !st.Success() {
		t.Fatalf("SIGTERM exit with an open subscription: %v", st)
	}
}

var npmOnce struct {
	sync.Once
	err error // a missing prerequisite: npm, or the registry npm ci needs
}

// nodeClient returns the node binary and the directory of subscribe.mjs, installing
// the npm clients when they are missing (npm ci, which needs the npm registry). When
// node, npm or the registry is missing the test skips, saying so (and fails under CI:
// testenv.Missing).
func nodeClient(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.Missing(t, "third-party GraphQL clients", "node >= 20 is not installed (apt-get install nodejs npm); .ci/run then runs npm ci in e2e/node")
		return "", ""
	}
	dir = filepath.Join(repoRoot, "e2e", "node")
	npmOnce.Do(func() {
		installed := true
		for _, pkg := range []string{"graphql-ws", "subscriptions-transport-ws", "@apollo/client", "@urql/core", "graphql-sse", "graphql-http"} {
			if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg)); err != nil {
				installed = false
			}
		}
		if installed {
			return
		}
		npm, err := exec.LookPath("npm")
		if err != nil {
			npmOnce.err = errors.New("e2e/node/node_modules is missing and npm is not installed")
			return
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			npmOnce.err = errors.New("npm ci in e2e/node failed (it needs the npm registry, or run it beforehand): " + err.Error() + "\n" + tail(string(out), 2000))
		}
	})
	if npmOnce.err != nil {
		testenv.Missing(t, "Node client suite", npmOnce.err.Error())
	}
	return node, dir
}

// A real third-party client: npm graphql-ws (graphql-transport-ws) and
// subscriptions-transport-ws (legacy graphql-ws) each receive the NTC-1 notice.
func TestThirdPartyNodeClients_TransportAndLegacy_NTC1(t *testing.T) {
	t.Parallel()
	node, dir := nodeClient(t)
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	for _, proto := range []string{"transport", "legacy"} {
		t.Run(proto, func(t *testing.T) {
			child := "agent:main:subagent:node-" + proto
			ctx := withTimeout(t, 2*wait)
			cmd := exec.CommandContext(ctx, node, "subscribe.mjs", s.wsURL, proto, mainWatcher, "1", "30000")
			cmd.Dir = dir
			stderr := &syncBuffer{}
			cmd.Stderr = stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := make(chan error, 1)
			lines := make(chan string, 16)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
				exited <- cmd.Wait()
			}()
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
				}
				if t.Failed() {
					t.Logf("node stderr:\n%s", stderr.String())
				}
			})
			next := func(what string) string {
				t.Helper()
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("node exited before %s: %s", what, stderr.String())
					}
					return l
				case <-ctx.Done():
					t.Fatalf("no %s from node", what)
				}
				return ""
			}
			if l := next("READY"); l != "READY" {
				t.Fatalf("first line %q, want READY", l)
			}
			seed := s.spawn(t, child, mainWatcher)
			s.humanTurn(t, child)
			var n notice
			line := next("the notice")
			if err := json.Unmarshal([]byte(line), &n); err != nil {
				t.Fatalf("notice line %q: %v", line, err)
			}
			wantNotice(t, n, mainWatcher, child, seed)
			if !n.Wake || n.TargetAgentID != "main" {
				t.Errorf("notice = %+v", n)
			}
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("node exit: %v\n%s", err, stderr.String())
				}
			case <-ctx.Done():
				t.Fatal("node did not exit after its notice")
			}
			s.ack(t, mainWatcher) // the next client starts with nothing pending
		})
	}
}

// The hub never waits for a subscriber: a client that subscribes to every notice and
// stops reading does not slow appends down or stop other subscribers, and the server
// eventually ends its subscription (hub drop and/or the WebSocket write timeout).
func TestSlowConsumer_AppendsContinueAndSlowStreamEnds(t *testing.T) {
	t.Parallel()
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	const (
		appends   = 2000
		workers   = 4
		readerKey = "agent:main:reader"
		every     = 100 // one append in every..th goes to the reading subscriber
	)

	reader := dialWS(t, s.wsURL)
	reader.subscribe("r", readerKey)
	slow := dialSlow(t, s.wsURL)

	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      []error
	)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				target, watcher := "agent:main:flood:t"+itoa(i), "agent:main:flood:w"+itoa(i)
				if i%every == 0 {
					target, watcher = "agent:main:flood:r"+itoa(i), readerKey
				}
				start := time.Now()
				r, err := s.record(map[string]any{
					"sessionKey": target, "kind": "human_direct_message", "actorType": "human",
					"actorId": "user:bob", "watchers": []string{watcher},
				})
				d := time.Since(start)
				if err == nil && r.NoticesOpened != 1 {
					err = errors.New("append " + itoa(i) + " opened " + itoa(r.NoticesOpened) + " notices, want 1")
				}
				mu.Lock()
				latencies = append(latencies, d)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		}()
	}
	began := time.Now()
	for i := range appends {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	elapsed := time.Since(began)
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("%d of %d appends failed: %v", len(errs), appends, tail(err.Error(), 2000))
	}
	st := summarize(latencies)
	t.Logf("%d appends with a stalled subscriber in %v: latency p50 %v p99 %v max %v", appends, elapsed.Round(time.Millisecond), st.p50, st.p99, st.max)

	// The reading subscriber got every one of its notices, and still gets new ones.
	for i := 0; i < appends; i += every {
		n, _ := reader.nextNotice("r")
		if n.Watcher != readerKey || n.ChangesSince != 0 {
			t.Fatalf("reader notice = %+v", n)
		}
	}
	s.mustRecord(t, map[string]any{
		"sessionKey": "agent:main:flood:after", "kind": "human_direct_message", "actorType": "human",
		"watchers": []string{readerKey},
	})
	n, _ := reader.nextNotice("r")
	wantNotice(t, n, readerKey, "agent:main:flood:after", 0)

	// The slow subscription was ended by the server: reading again drains what the
	// socket buffers hold, then finds the end (an error frame, complete, or the
	// connection closed), never all the notices.
	got, how := slow.drainUntilEnd(t, 60*time.Second)
	t.Logf("slow subscriber: %d of %d notices buffered before the server ended it (%s)", got, appends+1, how)
	if got >= appends+1 {
		t.Errorf("the slow subscriber received all %d notices; it was never slow (raise the frame size)", got)
	}
}

// A client that stalls longer than the server's write timeout, with fewer notices than
// the hub buffers (so the hub never drops it): the server must end the connection once
// a write times out, not keep it open while dropping every later frame until the
// ping/pong deadline (40 s). The client then resumes from durable state (NTC-5).
func TestStalledClient_ConnectionEndsAfterWriteTimeout(t *testing.T) {
	t.Parallel()
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	const notices = 200                    // < awareness.SubscriberBuffer: no hub drop
	slow := dialSlowSized(t, s.wsURL, 600) // about 80 KiB a frame: far beyond the socket buffers
	for i := range notices {
		s.mustRecord(t, map[string]any{
			"sessionKey": "agent:main:stall:t" + itoa(i), "kind": "human_direct_message", "actorType": "human",
			"watchers": []string{"agent:main:stall:w" + itoa(i)},
		})
	}
	time.Sleep(wsgorilla.WriteTimeout + 3*time.Second) // the stall itself, not an assertion
	// Without the close on write failure, the connection would stay open until the
	// ping/pong deadline, ~27 s after this point.
	got, how := slow.drainUntilEnd(t, 20*time.Second)
	t.Logf("stalled subscriber: %d of %d notices read before the end (%s)", got, notices, how)
	if got >= notices {
		t.Errorf("the stalled subscriber received all %d notices; it never stalled the writer", got)
	}
	ws := dialWS(t, s.wsURL)
	ws.subscribe("again", "agent:main:stall:w7")
	n, _ := ws.nextNotice("again")
	wantNotice(t, n, "agent:main:stall:w7", "agent:main:stall:t7", 0)
}

// slowClient is a raw graphql-transport-ws connection that subscribes to every notice with a large selection (big frames), then stops reading.
type slowClient struct {
	c *websocket.Conn
}

func dialSlow(t *testing.T, url string) *slowClient {
	t.Helper()
	return dialSlowSized(t, url, 200) // about 27 KiB a frame
}

// dialSlowSized selects the notice text under `aliases` extra aliases, to make frames
// big (about 135 bytes each).
func dialSlowSized(t *testing.T, url string, aliases int) *slowClient {
	t.Helper()
	// Default socket buffers: shrinking SO_RCVBUF below the loopback MSS makes TCP
	// trickle (silly-window avoidance), which is not the scenario under test.
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: wait}
	c, resp, err := d.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	resp.Body.Close()
	t.Cleanup(func() { c.Close() })
	initRaw(t, c)
	sel := bigNoticeSelection(aliases)
	payload, _ := json.Marshal(map[string]any{"query": "subscription { staleNotices { " + sel + " } }"})
	if err := c.WriteJSON(frame{Type: "subscribe", ID: "slow", Payload: payload}); err != nil {
		t.Fatal(err)
	}
	return &slowClient{c: c}
}

// drainUntilEnd reads until the server ends the subscription or the connection; it
// returns how many notices were read and how it ended. Pings are not answered: the
// server would rightly drop a peer that never pongs, which is also an end.
func (s *slowClient) drainUntilEnd(t *testing.T, limit time.Duration) (int, string) {
	t.Helper()
	_ = s.c.SetReadDeadline(time.Now().Add(limit))
	got := 0
	for {
		_, data, err := s.c.ReadMessage()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the slow subscription was still open after %v (%d notices read)", limit, got)
			}
			return got, "connection ended: " + err.Error()
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("bad frame: %v", err)
		}
		switch {
		case f.Type == "next" && f.ID == "slow":
			got++
		case f.Type == "error" && f.ID == "slow":
			return got, "error frame " + string(f.Payload)
		case f.Type == "complete" && f.ID == "slow":
			return got, "complete"
		}
	}
}

type latencyStats struct{ p50, p90, p99, max, min time.Duration }

func summarize(ds []time.Duration) latencyStats {
	if len(ds) == 0 {
		return latencyStats{}
	}
	s := append([]time.Duration(nil), ds...)
	slices.Sort(s)
	q := func(p float64) time.Duration { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return latencyStats{p50: q(0.50), p90: q(0.90), p99: q(0.99), max: s[len(s)-1], min: s[0]}
}

func itoa[T ~int | ~int64](v T) string { return strconv.FormatInt(int64(v), 10) }
