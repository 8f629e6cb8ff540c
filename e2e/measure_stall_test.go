package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestMeasureAppendP99WithStalledSubscriber measures, on the real binary, the promise
// "a subscriber that stops reading does not raise append p99 by more than 10%"
// (RELIABILITY.md §3). It only logs numbers (no timed assertion).
//
// Serving any subscriber costs CPU (every append builds and writes its frames), so a
// stalled subscriber is compared with the same subscriber reading, not only with no
// subscriber at all. Interleaved rounds of sequential recordEvent appends over HTTP,
// in three arms whose order rotates every cycle:
//
//   - A0: no subscriber;
//   - A1: one graphql-transport-ws client subscribed to staleNotices (every watcher)
//     and stateEvents, reading everything;
//   - B:  the same client, which stops reading once its subscriptions are live.
//
// Every append passes a producer watcher, so it opens a notice and publishes both a
// notice and an event to the subscriber. Two frame sizes: the service's normal notice
// frame (the plain notice fields, a few hundred bytes) and a 27 KiB frame (the notice
// text under 200 extra aliases) that fills socket buffers within a round. After each
// B round the test waits (up to a minute) for the server to end the stalled
// connection, seen in the server's debug log as the failed write or read naming the
// client's address, and reports how long after the stall that was. The server's RSS
// is sampled at the end of every round.
//
//	AWARENESS_MEASURE=1 go test -run TestMeasureAppendP99WithStalledSubscriber -v -count=1 -timeout 30m ./e2e/
func TestMeasureAppendP99WithStalledSubscriber(t *testing.T) {
	if os.Getenv("AWARENESS_MEASURE") != "1" {
		t.Skip("set AWARENESS_MEASURE=1 to measure append p99 with a stalled subscriber")
	}
	for _, size := range []struct {
		name    string
		aliases int
	}{{"normal", 0}, {"27KiB", 200}} {
		t.Run(size.name, func(t *testing.T) { measureStall(t, size.aliases) })
	}
}

const (
	armA0 = iota // no subscriber
	armA1        // a subscriber reading
	armB         // the same subscriber stalled
)

var armNames = [...]string{"A0 none", "A1 reading", "B stalled"}

func measureStall(t *testing.T, aliases int) {
	s := startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"),
		serverOpts{args: []string{"--log-level", "debug"}}) // debug: the server logs why a socket ended
	const (
		warm     = 100
		cycles   = 4 // each cycle runs A0, A1 and B once, in a rotating order
		perRound = 300
	)
	seq := 0
	appendOne := func(watcher string) time.Duration {
		seq++
		start := time.Now()
		r, err := s.record(map[string]any{
			"sessionKey": "agent:main:stall:t" + itoa(seq), "kind": "human_direct_message",
			"actorType": "human", "actorId": "user:bob", "watchers": []string{watcher},
		})
		d := time.Since(start)
		if err != nil {
			t.Fatalf("append %d: %v", seq, err)
		}
		if r.NoticesOpened != 1 {
			t.Fatalf("append %d opened %d notices, want 1", seq, r.NoticesOpened)
		}
		return d
	}
	for range warm {
		appendOne("agent:main:stall:warm")
	}
	s.ack(t, "agent:main:stall:warm")

	var (
		lat        [3][]time.Duration
		rss        [3]int64 // the largest RSS seen at the end of a round, KiB
		frameBytes int64    // mean notice frame size seen by the reading client
		closes     []string
	)
	round := 0
	for cycle := range cycles {
		for k := range 3 {
			arm := (cycle + k) % 3
			watcher := "agent:main:stall:w" + itoa(round)
			round++
			var sub *measureClient
			if arm != armA0 {
				sub = dialMeasure(t, s, aliases, arm == armA1, func() { appendOne("agent:main:stall:probe" + itoa(round)) })
			}
			began := time.Now()
			var ds []time.Duration
			for range perRound {
				ds = append(ds, appendOne(watcher))
			}
			elapsed := time.Since(began)
			lat[arm] = append(lat[arm], ds...)
			if arm == armA1 {
				// The round ends when the reader has every frame, so that serving it does
				// not spill into the next round.
				sub.waitRead(t, perRound)
				frameBytes = sub.noticeBytes.Load() / sub.notices.Load()
			}
			rss[arm] = max(rss[arm], serverRSS(t, s))
			st := summarize(ds)
			t.Logf("round %2d %-10s %d appends in %v: p50 %v p99 %v", round, armNames[arm], perRound,
				elapsed.Round(time.Millisecond), st.p50, st.p99)
			switch arm {
			case armA1:
				sub.c.Close()
			case armB:
				closes = append(closes, sub.waitServerEnd(t, time.Minute))
				sub.c.Close()
			}
			// The round's notices are acknowledged so that the next subscriber does not
			// replay them.
			s.ack(t, watcher)
			s.ack(t, "agent:main:stall:probe"+itoa(round))
		}
	}
	a0, a1, b := summarize(lat[armA0]), summarize(lat[armA1]), summarize(lat[armB])
	t.Logf("frames: notice frame %d bytes (selection with %d extra aliases)", frameBytes, aliases)
	for arm, st := range []latencyStats{a0, a1, b} {
		t.Logf("%-10s %d appends: p50 %v p90 %v p99 %v max %v; server RSS at round end ≤ %d KiB",
			armNames[arm], len(lat[arm]), st.p50, st.p90, st.p99, st.max, rss[arm])
	}
	t.Logf("p99 B/A1 = %.3f, B/A0 = %.3f, A1/A0 = %.3f (p50 B/A1 = %.3f, B/A0 = %.3f)",
		ratio(b.p99, a1.p99), ratio(b.p99, a0.p99), ratio(a1.p99, a0.p99), ratio(b.p50, a1.p50), ratio(b.p50, a0.p50))
	t.Logf("stalled connections ended by the server: %s", strings.Join(closes, "; "))
}

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// measureClient is a graphql-transport-ws client subscribed to staleNotices (every
// watcher) and stateEvents that either reads everything (A1) or stopped reading (B).
type measureClient struct {
	s       *server
	c       *websocket.Conn
	stalled time.Time

	notices, events, noticeBytes atomic.Int64
	mu                           sync.Mutex
	cond                         *sync.Cond
	readErr                      error
}

// dialMeasure connects, subscribes, and calls probe (one append) until the probe's
// notice and event arrive, so that both subscriptions are live; then a reading client
// keeps reading in a goroutine (answering pings) and a stalled one reads no more.
func dialMeasure(t *testing.T, s *server, aliases int, reading bool, probe func()) *measureClient {
	t.Helper()
	c := dialRaw(t, s.wsURL, nil)
	initRaw(t, c)
	sel := noticeFields
	if aliases > 0 {
		sel = bigNoticeSelection(aliases)
	}
	for id, q := range map[string]string{
		"notices": "subscription { staleNotices { " + sel + " } }",
		"events":  "subscription { stateEvents { sequence kind sessionKey } }",
	} {
		payload, _ := json.Marshal(map[string]any{"query": q})
		if err := c.WriteJSON(frame{Type: "subscribe", ID: id, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	m := &measureClient{s: s, c: c}
	m.cond = sync.NewCond(&m.mu)
	probe()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	for got := map[string]bool{}; !got["notices"] || !got["events"]; {
		var f frame
		if err := c.ReadJSON(&f); err != nil {
			t.Fatalf("waiting for the probe: %v", err)
		}
		if f.Type == "next" {
			got[f.ID] = true
		} else if f.Type != "ping" && f.Type != "pong" {
			t.Fatalf("waiting for the probe: got %s %s", f.Type, f.Payload)
		}
	}
	_ = c.SetReadDeadline(time.Time{})
	m.stalled = time.Now()
	if reading {
		go m.read()
	}
	return m
}

func (m *measureClient) read() {
	var err error
	defer func() {
		m.mu.Lock()
		m.readErr = err
		m.cond.Broadcast()
		m.mu.Unlock()
	}()
	for {
		var data []byte
		if _, data, err = m.c.ReadMessage(); err != nil {
			return
		}
		var f frame
		if err = json.Unmarshal(data, &f); err != nil {
			return
		}
		switch {
		case f.Type == "ping":
			if err = m.c.WriteJSON(frame{Type: "pong"}); err != nil {
				return
			}
		case f.Type == "next" && f.ID == "notices":
			m.noticeBytes.Add(int64(len(data)))
			m.notices.Add(1)
		case f.Type == "next":
			m.events.Add(1)
		case f.Type == "error" || f.Type == "complete":
			err = fmt.Errorf("the reading subscriber's %s ended: %s %s", f.ID, f.Type, f.Payload)
			return
		}
		m.mu.Lock()
		m.cond.Broadcast()
		m.mu.Unlock()
	}
}

// waitRead waits until the reader has n notices and n events after the probe.
func (m *measureClient) waitRead(t *testing.T, n int64) {
	t.Helper()
	timer := time.AfterFunc(time.Minute, func() {
		m.mu.Lock()
		m.readErr = fmt.Errorf("not all frames within a minute")
		m.cond.Broadcast()
		m.mu.Unlock()
	})
	defer timer.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for m.readErr == nil && (m.notices.Load() < n || m.events.Load() < n) {
		m.cond.Wait()
	}
	if m.notices.Load() < n || m.events.Load() < n {
		t.Fatalf("reading subscriber: %d notices, %d events of %d: %v", m.notices.Load(), m.events.Load(), n, m.readErr)
	}
}

// waitServerEnd waits until the server's log shows the connection ended (gqlgen logs
// the failed write or read with the peer's address at debug level) and says how and
// how long after the stall. The log line is written when the server gives up on the
// socket, so this is the server's time, not when the client would notice.
func (m *measureClient) waitServerEnd(t *testing.T, limit time.Duration) string {
	t.Helper()
	addr := "->" + m.c.LocalAddr().String() + ":"
	deadline := time.Now().Add(limit)
	for {
		sc := bufio.NewScanner(strings.NewReader(m.s.logs.String()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if line := sc.Text(); strings.Contains(line, addr) {
				how := "write"
				if strings.Contains(line, "read tcp") {
					how = "read"
				}
				if strings.Contains(line, "timeout") {
					how += " timeout"
				} else if strings.Contains(line, "closed network connection") {
					how += " on closed connection"
				}
				return how + " after " + time.Since(m.stalled).Round(100*time.Millisecond).String()
			}
		}
		if time.Now().After(deadline) {
			return "still open after " + limit.String()
		}
		time.Sleep(50 * time.Millisecond) // polling a log file: nothing to wait on
	}
}

// serverRSS is the server process's resident set in KiB.
func serverRSS(t *testing.T, s *server) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			v, _ := strconv.ParseInt(f[1], 10, 64)
			return v
		}
	}
	return 0
}
