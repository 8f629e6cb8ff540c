package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/graph"
	"github.com/awareness/awareness/internal/wsgorilla"
)

const (
	testPingInterval = 300 * time.Millisecond
	testInitTimeout  = 500 * time.Millisecond
)

func startProtocolServer(t *testing.T) *server {
	t.Helper()
	return startServerWith(t, filepath.Join(t.TempDir(), "awareness.db"), serverOpts{args: []string{
		"--ws-ping-interval", testPingInterval.String(), "--ws-init-timeout", testInitTimeout.String(),
	}})
}

func rawInit(t *testing.T, c *websocket.Conn) {
	t.Helper()
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"connection_init"}`)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var f frame
	if err := c.ReadJSON(&f); err != nil || f.Type != "connection_ack" {
		t.Fatalf("%+v %v, want connection_ack", f, err)
	}
}

// A silent dead peer (it completed connection_init, then never answers a ping) is
// dropped by the server within about three ping intervals (--ws-ping-interval): the
// first ping after one, then twice the interval to answer it.
func TestDeadPeer_PingPongDropsSilentClient(t *testing.T) {
	t.Parallel()
	s := startProtocolServer(t)
	c := dialRaw(t, s.wsURL, nil)
	rawInit(t, c)
	acked := time.Now()
	pings := 0
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var end time.Time
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			end = time.Now()
			break
		}
		if strings.Contains(string(data), `"ping"`) {
			pings++ // and no pong
		}
	}
	took := end.Sub(acked)
	t.Logf("silent peer dropped %v after connection_ack (ping interval %v, %d pings unanswered)", took.Round(time.Millisecond), testPingInterval, pings)
	if limit := 2*testPingInterval + time.Second; took > limit {
		t.Errorf("the silent peer was dropped after %v, want within %v", took, limit)
	}
	// A peer that answers stays connected well past that.
	ws := dialWS(t, s.wsURL)
	time.Sleep(4 * testPingInterval)
	ws.subscribe("alive", mainWatcher)
	s.spawn(t, "agent:main:subagent:p", mainWatcher)
	s.humanTurn(t, "agent:main:subagent:p")
	ws.nextNotice("alive")
}

// The graphql-transport-ws close codes gqlgen does not send, through the real
// server: 4408 init timeout, 4400 invalid message, 4409 duplicate id, 4429 second
// init, 4401 subscribe before init; and 1009 for a message over the 1 MiB limit.
func TestProtocol_CloseCodes(t *testing.T) {
	t.Parallel()
	s := startProtocolServer(t)
	sub := func(id string) string {
		return `{"type":"subscribe","id":"` + id + `","payload":{"query":"subscription { staleNotices(watcher: \"agent:main:main\") { text } }"}}`
	}
	tests := []struct {
		name   string
		init   bool
		frames []string
		want   int
	}{
		{"init timeout", false, nil, wsgorilla.CloseInitTimeout},
		{"invalid JSON", true, []string{`{"type":`}, wsgorilla.CloseBadRequest},
		{"unknown type", true, []string{`{"type":"start","id":"1"}`}, wsgorilla.CloseBadRequest},
		{"duplicate id", true, []string{sub("a"), sub("a")}, wsgorilla.CloseSubscriberExists},
		{"second init", true, []string{`{"type":"connection_init"}`}, wsgorilla.CloseTooManyInitRequests},
		{"subscribe before init", false, []string{sub("a")}, wsgorilla.CloseUnauthorized},
		{"over 1 MiB", true, []string{`{"type":"subscribe","id":"big","payload":{"query":"{ __typename }","variables":{"pad":"` + strings.Repeat("x", graph.MaxRequestBytes) + `"}}}`}, websocket.CloseMessageTooBig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := dialRaw(t, s.wsURL, nil)
			if tc.init {
				rawInit(t, c)
			}
			start := time.Now()
			for _, f := range tc.frames {
				if err := c.WriteMessage(websocket.TextMessage, []byte(f)); err != nil {
					t.Fatal(err)
				}
			}
			got, end := closeCodeOf(t, c, wait)
			if got != tc.want {
				t.Errorf("close code %d, want %d", got, tc.want)
			}
			if tc.want == wsgorilla.CloseInitTimeout {
				if d := end.Sub(start); d < testInitTimeout-50*time.Millisecond || d > testInitTimeout+2*time.Second {
					t.Errorf("closed after %v, want about %v", d, testInitTimeout)
				}
			}
		})
	}
}

// At most MaxSubscriptionsPerConn operations are active on one connection; the next
// subscribe gets an error frame and the connection keeps serving the others.
func TestProtocol_SubscriptionCapPerConnection(t *testing.T) {
	t.Parallel()
	s := startProtocolServer(t)
	ws := dialWS(t, s.wsURL)
	for i := range wsgorilla.MaxSubscriptionsPerConn {
		ws.subscribe(fmt.Sprintf("s%d", i), fmt.Sprintf("agent:main:cap%d", i))
	}
	ws.subscribe("over", mainWatcher)
	f, ok := ws.nextFrame(wait)
	if !ok {
		t.Fatalf("no answer to the subscribe over the cap (reader: %v)", ws.readerErr())
	}
	if f.ID != "over" {
		t.Fatalf("unexpected %s frame for %q: %s", f.Type, f.ID, f.Payload)
	}
	var errs []gqlError
	if f.Type != "error" || json.Unmarshal(f.Payload, &errs) != nil || len(errs) != 1 || errs[0].Extensions["code"] != "INVALID_ARGUMENT" {
		t.Fatalf("over the cap: %s %s, want an error frame INVALID_ARGUMENT", f.Type, f.Payload)
	}
	// The first subscriptions still work.
	s.spawn(t, "agent:main:subagent:capt", "agent:main:cap7")
	s.humanTurn(t, "agent:main:subagent:capt")
	n, _ := ws.nextNotice("s7")
	wantNotice(t, n, "agent:main:cap7", "agent:main:subagent:capt", 1)
}
