package e2e

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestMeasureAppendP99WithStalledSubscriber measures, on the real binary, the promise
// "a subscriber that stops reading does not raise append p99 by more than 10%"
// (RELIABILITY.md §3). Interleaved rounds of sequential recordEvent appends over HTTP:
// A rounds with no subscriber, B rounds with a raw gorilla graphql-transport-ws client
// that completed connection_init, subscribed to staleNotices (every watcher) and
// stateEvents, and then never read again. Every append passes a producer watcher, so it
// opens a notice and publishes both a notice and an event to the stalled client. It
// only logs numbers (no timed assertion): p50/p99 of A and B, the ratio B/A of the p99,
// and how the server ended each stalled subscriber.
//
//	AWARENESS_MEASURE=1 go test -run TestMeasureAppendP99WithStalledSubscriber -v -count=1 ./e2e/
func TestMeasureAppendP99WithStalledSubscriber(t *testing.T) {
	if os.Getenv("AWARENESS_MEASURE") != "1" {
		t.Skip("set AWARENESS_MEASURE=1 to measure append p99 with a stalled subscriber")
	}
	s := startServer(t, filepath.Join(t.TempDir(), "awareness.db"))
	const (
		warm     = 100
		rounds   = 8 // alternating A, B, A, B, ...
		perRound = 400
		// aliases of the notice text make each notice frame about 27 KiB, so the
		// stalled client's socket buffers fill within a round (as in TestSlowConsumer_*).
		aliases = 200
	)
	deadline := time.Now().Add(3 * time.Minute) // bounds the whole measurement

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

	var lat [2][]time.Duration // 0: A (no subscriber), 1: B (stalled subscriber)
	for r := range rounds {
		if time.Now().After(deadline) {
			t.Logf("stopped after %d rounds: time bound reached", r)
			break
		}
		b := r%2 == 1
		watcher := "agent:main:stall:w" + itoa(r)
		var st *stalledClient
		if b {
			st = dialStalled(t, s.wsURL, aliases)
		}
		began := time.Now()
		for range perRound {
			lat[r%2] = append(lat[r%2], appendOne(watcher))
		}
		elapsed := time.Since(began)
		// The round's notices are acknowledged so the next subscriber does not replay them.
		s.ack(t, watcher)
		if !b {
			t.Logf("round %d A: %d appends in %v", r, perRound, elapsed.Round(time.Millisecond))
			continue
		}
		notices, events, how, after := st.drain(t, 30*time.Second)
		t.Logf("round %d B: %d appends in %v; stalled client then read %d notice and %d event frames before the end (%s), %v after it stopped reading",
			r, perRound, elapsed.Round(time.Millisecond), notices, events, how, after.Round(time.Millisecond))
		st.c.Close()
	}
	a, bs := summarize(lat[0]), summarize(lat[1])
	ratio := float64(bs.p99) / float64(a.p99)
	t.Logf("append latency, no subscriber (%d appends): p50 %v p90 %v p99 %v max %v", len(lat[0]), a.p50, a.p90, a.p99, a.max)
	t.Logf("append latency, stalled subscriber (%d appends): p50 %v p90 %v p99 %v max %v", len(lat[1]), bs.p50, bs.p90, bs.p99, bs.max)
	t.Logf("p99 ratio stalled/none = %.3f (p50 ratio %.3f); within 1.10: %v",
		ratio, float64(bs.p50)/float64(a.p50), ratio <= 1.10)
}

// stalledClient is a graphql-transport-ws connection that stopped reading after
// subscribing.
type stalledClient struct {
	c       *websocket.Conn
	stalled time.Time
}

// dialStalled completes connection_init, subscribes to staleNotices (every watcher,
// the text under aliases extra aliases) and stateEvents, and returns without reading.
func dialStalled(t *testing.T, url string, aliases int) *stalledClient {
	t.Helper()
	c := dialRaw(t, url, nil)
	initRaw(t, c)
	sel := bigNoticeSelection(aliases)
	for id, q := range map[string]string{
		"notices": "subscription { staleNotices { " + sel + " } }",
		"events":  "subscription { stateEvents { sequence kind sessionKey } }",
	} {
		payload, _ := json.Marshal(map[string]any{"query": q})
		if err := c.WriteJSON(frame{Type: "subscribe", ID: id, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	return &stalledClient{c: c, stalled: time.Now()}
}

// drain reads, after the round, until both subscriptions or the connection end; it
// returns the frames read, how it ended and how long after the stall the end was read
// (an upper bound of when the server dropped the client: the end is only seen once the
// buffered frames before it are read).
func (s *stalledClient) drain(t *testing.T, limit time.Duration) (notices, events int, how string, after time.Duration) {
	t.Helper()
	_ = s.c.SetReadDeadline(time.Now().Add(limit))
	ended := map[string]string{}
	for len(ended) < 2 {
		_, data, err := s.c.ReadMessage()
		if err != nil {
			if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
				return notices, events, "still open after " + limit.String(), time.Since(s.stalled)
			}
			return notices, events, "connection ended: " + err.Error(), time.Since(s.stalled)
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			t.Fatalf("bad frame: %v", err)
		}
		switch f.Type {
		case "next":
			if f.ID == "notices" {
				notices++
			} else {
				events++
			}
		case "error":
			ended[f.ID] = "error " + tail(string(f.Payload), 120)
		case "complete":
			ended[f.ID] = "complete"
		}
	}
	return notices, events, "notices: " + ended["notices"] + "; events: " + ended["events"], time.Since(s.stalled)
}
