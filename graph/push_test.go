package graph_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/telemetry"
	"github.com/awareness/awareness/internal/wsgorilla"
	"github.com/awareness/awareness/internal/wsgorilla/wsgorillatest"
)

// waitUntil polls cond until it holds, failing after a generous deadline (a condition,
// not a timing assertion).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("never happened: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An idle WebSocket subscription holds no goroutine: the connection writes its
// frames from the publish side (the push path), so N subscriptions on a connection
// add none to what the connection holds, on both subprotocols; each of them is live.
func TestPushIdleSubscriptionsHoldNoGoroutine(t *testing.T) {
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		t.Run(proto, func(t *testing.T) {
			e := newEnv(t)
			w := e.dialWS(t, proto)
			before := runtime.NumGoroutine()
			const n = 40
			for i := range n {
				w.subscribe(fmt.Sprintf("s%d", i), `subscription { stateEvents(sessionKey: "agent:main:subagent:child") { sequence summary } }`)
			}
			waitUntil(t, "every subscription registered", func() bool { _, ev := e.hub.Subscribers(); return ev == n })
			// gqlgen's part of each operation ends once it has subscribed; nothing is
			// left waiting for the stream (a few goroutines of slack for the runtime's
			// and the test server's own comings and goings).
			waitUntil(t, fmt.Sprintf("at most %d goroutines (had %d before %d subscriptions, now %d)",
				before+3, before, n, runtime.NumGoroutine()), func() bool { return runtime.NumGoroutine() <= before+3 })

			e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "channel": "slack"})
			seen := map[string]bool{}
			for range n {
				f := w.next()
				if (f.Type != "next" && f.Type != "data") || seen[f.ID] {
					t.Fatalf("got %s frame for %q (seen before: %v): %s", f.Type, f.ID, seen[f.ID], f.Payload)
				}
				seen[f.ID] = true
				if !strings.Contains(string(f.Payload), `"summary":"human message via slack"`) {
					t.Errorf("frame %s: payload %s", f.ID, f.Payload)
				}
			}
		})
	}
}

// An idle WebSocket connection with subscriptions on the push path owns exactly one
// goroutine, its reader, whether the server tracks it (WSConns: read on a goroutine
// of its own) or not (read on the HTTP handler's): nothing waits for the connection's
// context, for its subscriptions, or for its pings (timers). Counted as the change in
// runtime.NumGoroutine once the connections' goroutines settled.
func TestWSIdleConnectionOwnsOneGoroutine(t *testing.T) {
	for _, tracked := range []bool{true, false} {
		t.Run(fmt.Sprintf("tracked=%v", tracked), func(t *testing.T) {
			e := newEnv(t, func(c *graph.Config) {
				if tracked {
					c.WSConns = new(wsgorilla.Conns)
				}
			})
			var total, conn int
			waitUntil(t, "the connections of earlier tests end", func() bool { total, conn = wsgorillatest.Goroutines(); return conn == 0 })
			before := total
			const n = 10
			for i := range n {
				w := e.dialWS(t, []string{"graphql-transport-ws", "graphql-ws"}[i%2])
				w.subscribe("n", `subscription { staleNotices(watcher: "agent:main:main") { watcher target text } }`)
				w.subscribe("e", `subscription { stateEvents(sessionKey: "`+child+`") { sequence summary } }`)
			}
			waitUntil(t, "every subscription registered", func() bool { nt, ev := e.hub.Subscribers(); return nt == n && ev == n })
			waitUntil(t, fmt.Sprintf("%d idle connections own %d goroutines", n, n), func() bool {
				total, conn = wsgorillatest.Goroutines()
				return total-before == n && conn == n
			})
		})
	}
}

// Pending notices first, then the live ones, with notices opening while the
// subscription starts: every notice exactly once, none lost (NTC-5, NTC-7).
func TestPushReplayThenLiveConcurrent(t *testing.T) {
	e := newEnv(t)
	const targets = 12
	key := func(i int) string { return fmt.Sprintf("agent:main:subagent:t%d", i) }
	for i := range targets {
		e.record(t, map[string]any{"sessionKey": key(i), "kind": "child_spawned", "actorType": "agent", "actorId": parent, "watchers": []string{parent}})
	}
	for i := range targets / 2 { // pending before the subscription
		e.record(t, map[string]any{"sessionKey": key(i), "kind": "human_direct_message", "actorType": "human", "channel": "telegram"})
	}
	w := e.dialWS(t, "graphql-transport-ws")
	var wg sync.WaitGroup
	wg.Go(func() { // opening while the subscription reads the pending ones
		for i := targets / 2; i < targets; i++ {
			e.record(t, map[string]any{"sessionKey": key(i), "kind": "human_direct_message", "actorType": "human", "channel": "telegram"})
		}
	})
	w.subscribe("n", `subscription { staleNotices(watcher: "agent:main:main") { target notifiedVersion } }`)
	got := map[string]int{}
	for len(got) < targets {
		var r struct {
			StaleNotices struct {
				Target          string `json:"target"`
				NotifiedVersion int    `json:"notifiedVersion"`
			} `json:"staleNotices"`
		}
		if err := json.Unmarshal(w.nextData(), &r); err != nil {
			t.Fatal(err)
		}
		n := r.StaleNotices
		if got[n.Target] != 0 {
			t.Fatalf("notice on %s sent twice (versions %d, %d)", n.Target, got[n.Target], n.NotifiedVersion)
		}
		got[n.Target] = n.NotifiedVersion
	}
	wg.Wait()
	// Nothing more: an ack-free watcher has exactly one notice per target.
	e.record(t, map[string]any{"sessionKey": "agent:main:subagent:other", "kind": "child_spawned", "actorType": "agent", "actorId": parent, "watchers": []string{parent}})
	e.record(t, map[string]any{"sessionKey": "agent:main:subagent:other", "kind": "human_direct_message", "actorType": "human", "channel": "telegram"})
	var last struct {
		StaleNotices struct {
			Target string `json:"target"`
		} `json:"staleNotices"`
	}
	if err := json.Unmarshal(w.nextData(), &last); err != nil {
		t.Fatal(err)
	}
	if last.StaleNotices.Target != "agent:main:subagent:other" {
		t.Errorf("after the %d notices: got one on %s, want the new target's", targets, last.StaleNotices.Target)
	}
}

// Subscriptions completed at once, while events are published to them, end cleanly
// on both subprotocols: every hub subscription goes, no frame of an operation follows
// its complete, and the connection goes on serving.
func TestPushCompleteRaces(t *testing.T) {
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		t.Run(proto, func(t *testing.T) {
			e := newEnv(t)
			w := e.dialWS(t, proto)
			stop := "complete"
			if proto == "graphql-ws" {
				stop = "stop"
			}
			done := make(chan struct{})
			var pub sync.WaitGroup
			pub.Go(func() {
				ev := awareness.Event{Session: awareness.SessionRef{AgentID: "main", Key: child}, Sequence: 1,
					Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, Summary: "x", OccurredAt: time.Now()}
				for {
					select {
					case <-done:
						return
					default:
						e.hub.PublishEvents(ev)
						time.Sleep(50 * time.Microsecond)
					}
				}
			})
			// The reader keeps reading (a client that stops is dropped as slow) and
			// checks every frame as it comes.
			var (
				mu       sync.Mutex
				failures []string
			)
			lastSeen := make(chan struct{})
			_ = w.c.SetReadDeadline(time.Time{}) // the test's own deadline below
			go func() {
				completed := map[string]bool{}
				for {
					var f wsFrame
					if err := w.c.ReadJSON(&f); err != nil {
						mu.Lock()
						failures = append(failures, "read: "+err.Error())
						mu.Unlock()
						return
					}
					data := f.Type == "next" || f.Type == "data"
					mu.Lock()
					switch {
					case data && completed[f.ID]:
						failures = append(failures, f.Type+" frame for "+f.ID+" after its complete")
					case f.Type == "error":
						failures = append(failures, "error frame for "+f.ID+": "+string(f.Payload))
					}
					mu.Unlock()
					if f.Type == "complete" {
						completed[f.ID] = true
					}
					if f.ID == "last" && data {
						close(lastSeen)
						return
					}
				}
			}()
			const n = 100
			for i := range n {
				id := fmt.Sprintf("c%d", i)
				w.subscribe(id, `subscription { stateEvents { sequence } }`)
				w.send(wsFrame{Type: stop, ID: id})
			}
			waitUntil(t, "every completed subscription left the hub", func() bool { _, ev := e.hub.Subscribers(); return ev == 0 })
			close(done)
			pub.Wait()
			w.subscribe("last", `subscription { stateEvents(sessionKey: "agent:main:subagent:child") { summary } }`)
			// The last subscription is live once an event reaches it (an operation
			// completed just before may still be coming and going in the hub).
			for deadline := time.Now().Add(10 * time.Second); ; {
				e.record(t, map[string]any{"sessionKey": child, "kind": "human_direct_message", "actorType": "human", "channel": "slack"})
				select {
				case <-lastSeen:
				case <-time.After(20 * time.Millisecond):
					if time.Now().Before(deadline) {
						continue
					}
					mu.Lock()
					t.Fatalf("the last subscription's event never came (%v)", failures)
				}
				break
			}
			mu.Lock()
			defer mu.Unlock()
			for _, f := range failures {
				t.Error(f)
			}
		})
	}
}

// A push subscriber that does not read is dropped once SubscriberBuffer frames wait
// for it: its connection ends with 1013, or at once when a write was stuck behind it
// (1006, as a browser and graphql-ws report the reset: see wsgorilla's Conn.dropSlow), on
// both subprotocols; its hub subscription goes and publishing never waits for it. Its
// receive buffer is smaller than a loopback segment, so TCP trickles what the server
// queued: a close that waited behind the queue would not reach it within the read
// deadline.
func TestPushSlowSubscriberDropped(t *testing.T) {
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		t.Run(proto, func(t *testing.T) {
			e := newEnv(t)
			w := e.dialWS(t, proto)
			if tc, ok := w.c.UnderlyingConn().(interface{ SetReadBuffer(int) error }); ok {
				_ = tc.SetReadBuffer(1024)
			}
			w.subscribe("e", `subscription { stateEvents { sequence summary } }`)
			waitUntil(t, "the subscription registered", func() bool { _, ev := e.hub.Subscribers(); return ev == 1 })
			evs := make([]awareness.Event, 4*awareness.SubscriberBuffer)
			for i := range evs {
				evs[i] = awareness.Event{Session: awareness.SessionRef{AgentID: "main", Key: child}, Sequence: int64(i + 1),
					Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, Summary: strings.Repeat("s", 1000), OccurredAt: time.Now()}
			}
			start := time.Now()
			e.hub.PublishEvents(evs...)
			t.Logf("published in %v", time.Since(start))
			waitUntil(t, "the slow subscription dropped", func() bool { _, ev := e.hub.Subscribers(); return ev == 0 })
			t.Logf("dropped after %v", time.Since(start))
			// Ending the connection discards what the server's socket still queues for
			// the client: it needs not read it to see the end.
			waitUntil(t, "the server's socket holds nothing for the dropped client", func() bool { return serverBacklog(t, w.c) == 0 })
			frames, err := readToEnd(w.c)
			if !closedTryAgain(err) {
				t.Fatalf("after %d frames: %v, want close 1013 (or 1006)", frames, err)
			}
			t.Logf("after %d frames: %v", frames, err)
		})
	}
}

// At shutdown a connection whose writer is stuck behind a client that does not read
// is cut off once its 1012 cannot be written (wsgorilla.Conns.CloseAll): what the
// server's socket still queued for the client is discarded, so the client sees the
// end without reading it (a reset; 1006 in a browser), on both subprotocols.
func TestPushShutdownCutsOffStuckConnection(t *testing.T) {
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		t.Run(proto, func(t *testing.T) {
			conns := new(wsgorilla.Conns)
			e := newEnv(t, func(c *graph.Config) { c.WSConns = conns })
			w := e.dialWS(t, proto)
			if tc, ok := w.c.UnderlyingConn().(interface{ SetReadBuffer(int) error }); ok {
				_ = tc.SetReadBuffer(1024)
			}
			w.subscribe("e", `subscription { stateEvents { sequence summary } }`)
			waitUntil(t, "the subscription registered", func() bool { _, ev := e.hub.Subscribers(); return ev == 1 })
			// Fewer than the hub buffers (no drop), more than the sockets hold.
			evs := make([]awareness.Event, awareness.SubscriberBuffer*3/4)
			for i := range evs {
				evs[i] = awareness.Event{Session: awareness.SessionRef{AgentID: "main", Key: child}, Sequence: int64(i + 1),
					Kind: awareness.HumanDirectMessage, ActorType: awareness.ActorHuman, Summary: strings.Repeat("s", 1000), OccurredAt: time.Now()}
			}
			e.hub.PublishEvents(evs...)
			waitUntil(t, "the server's writer stuck behind the client", func() bool { return serverBacklog(t, w.c) >= 32<<10 })
			if n := conns.CloseAll(wsgorilla.CloseServiceRestart, "service restart"); n != 1 {
				t.Fatalf("CloseAll closed %d connections, want 1", n)
			}
			waitUntil(t, "the server's socket holds nothing for the client", func() bool { return serverBacklog(t, w.c) == 0 })
			frames, err := readToEnd(w.c)
			ce, ok := errors.AsType[*websocket.CloseError](err)
			if ok && ce.Code != websocket.CloseServiceRestart && ce.Code != websocket.CloseAbnormalClosure || !ok && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("after %d frames: %v, want close 1012 (or 1006)", frames, err)
			}
			t.Logf("after %d of %d frames: %v", frames, len(evs), err)
		})
	}
}

// readToEnd reads c's frames until the connection ends (within 10 s) and returns how
// many came and the error it ended with.
func readToEnd(c *websocket.Conn) (frames int, err error) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			return frames, err
		}
		frames++
	}
}

// serverBacklog returns the bytes the server's end of the client's connection c
// still holds for it, sent and not acknowledged or not sent yet (the kernel's
// tx_queue in /proc/net/tcp); 0 once that end is gone. The test is skipped where the
// table cannot be read.
func serverBacklog(t *testing.T, c *websocket.Conn) int {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Skipf("the kernel's socket table is not readable: %v", err)
	}
	client, server := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
	port := func(addr string) int {
		_, p, _ := strings.Cut(addr, ":")
		n, _ := strconv.ParseUint(p, 16, 16)
		return int(n)
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 5 || port(f[1]) != server.Port || port(f[2]) != client.Port {
			continue
		}
		tx, _, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseUint(tx, 16, 32)
		if err != nil {
			t.Fatalf("/proc/net/tcp: %q: %v", line, err)
		}
		return int(n)
	}
	return 0
}

// closedTryAgain reports whether a client's read error is the end of a connection the
// server dropped: close 1013, or the socket closed without a close frame (1006: gorilla
// reports a FIN so, and a reset as the read error it is).
func closedTryAgain(err error) bool {
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
		return ce.Code == websocket.CloseTryAgainLater || ce.Code == websocket.CloseAbnormalClosure
	}
	return errors.Is(err, syscall.ECONNRESET)
}

// The handler's extensions see every operation sent over the WebSocket, as over HTTP:
// the OpenTelemetry tracing extension (Config.Extensions) starts one server span per
// operation, a query's and a push-path subscription's alike, on both subprotocols.
func TestWSOperationsAreTraced(t *testing.T) {
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		t.Run(proto, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			e := newEnv(t, func(c *graph.Config) {
				c.Extensions = append(c.Extensions, telemetry.GraphQLTracing{Tracer: tp.Tracer("test")})
			})
			w := e.dialWS(t, proto)
			w.subscribe("q", `query Sessions { sessionsList(first: 10) { sessions { sessionKey } } }`)
			if f := w.next(); f.ID != "q" || (f.Type != "next" && f.Type != "data") {
				t.Fatalf("got %+v, want the query's result", f)
			}
			w.subscribe("s", `subscription Events { stateEvents(sessionKey: "`+child+`") { sequence } }`)
			waitUntil(t, "the subscription registered", func() bool { _, ev := e.hub.Subscribers(); return ev == 1 })
			waitUntil(t, "both operations traced", func() bool {
				names := map[string]bool{}
				for _, s := range rec.Ended() {
					if s.SpanKind() == trace.SpanKindServer {
						names[s.Name()] = true
					}
				}
				return names["query Sessions"] && names["subscription Events"]
			})
		})
	}
}
