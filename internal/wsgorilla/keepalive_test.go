package wsgorilla_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/wsgorilla"
)

// The transport's own pings (PingInterval): a
// graphql-transport-ws client that never answers is dropped.
func TestAdapterPingDropsSilentPeer(t *testing.T) {
	_, url := newServer(t, wsgorilla.Transport{PingInterval: 50 * time.Millisecond}, false)
	c := dial(t, url, nil, "graphql-transport-ws")
	send(t, c, frame{Type: "connection_init"})
	pings := 0
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		var f frame
		if err := c.ReadJSON(&f); err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("a peer that never pongs is still connected after %d pings", pings)
			}
			break // the server dropped the connection
		}
		if f.Type == "ping" {
			pings++
		}
	}
	if pings == 0 {
		t.Error("the server sent no ping before dropping the peer")
	}
}

// A client that answers every ping stays connected across several deadlines, and its
// subscription still works: the pongs clear the deadline. (The interval leaves the
// client 400 ms to answer each ping, ample even on a loaded machine.)
func TestAdapterPingAnsweredKeepsConnection(t *testing.T) {
	srv, url := newServer(t, wsgorilla.Transport{PingInterval: 200 * time.Millisecond}, false)
	c := dial(t, url, nil, "graphql-transport-ws")
	send(t, c, frame{Type: "connection_init"})
	if f := next(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	send(t, c, frame{Type: "subscribe", ID: "a", Payload: subscribePayload()})
	for pings := 0; pings < 5; { // 5 intervals: past 2 deadlines
		if f := readFrame(t, c, strconv.Itoa(pings)+" pings answered"); f.Type == "ping" {
			pings++
			send(t, c, frame{Type: "pong"})
		}
	}
	srv.SendNextSubscriptionMessage()
	if f := nextSkippingPings(t, c); f.Type != "next" || f.ID != "a" {
		t.Fatalf("got %+v, want next for a", f)
	}
}

// nextSkippingPings is next that answers pings, so the transport keeps the connection.
func nextSkippingPings(t *testing.T, c *websocket.Conn) frame {
	t.Helper()
	for {
		f := readFrame(t, c, "next frame, answering pings")
		if f.Type == "ping" {
			send(t, c, frame{Type: "pong"})
			continue
		}
		if f.Type == "ka" || f.Type == "pong" {
			continue
		}
		return f
	}
}

// The legacy graphql-ws `ka` comes from a timer (KeepAliveInterval).
func TestAdapterLegacyKeepAlive(t *testing.T) {
	_, url := newServer(t, wsgorilla.Transport{KeepAliveInterval: 10 * time.Millisecond}, false)
	c := dial(t, url, nil, "graphql-ws")
	send(t, c, frame{Type: "connection_init"})
	kas := 0
	for kas < 3 { // one after the ack, then the timer's
		if f := readFrame(t, c, strconv.Itoa(kas)+" ka"); f.Type == "ka" {
			kas++
		}
	}
}
