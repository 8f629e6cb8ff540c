package wsgorilla_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/wsgorilla"
)

// initialised dials graphql-transport-ws and completes connection_init.
func initialised(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	c := dial(t, url, nil, "graphql-transport-ws")
	send(t, c, frame{Type: "connection_init"})
	if f := next(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	return c
}

// The graphql-transport-ws close codes gqlgen does not send itself (PROTOCOL.md).
func TestTransportWSCloseCodes(t *testing.T) {
	t.Parallel()
	_, url := newServer(t, wsgorilla.Transport{}, false)
	raw := func(s string) func(*testing.T, *websocket.Conn) {
		return func(t *testing.T, c *websocket.Conn) {
			if err := c.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
				t.Fatal(err)
			}
		}
	}
	sub := `{"type":"subscribe","id":"1","payload":{"query":"subscription { name }"}}`
	tests := []struct {
		name   string
		init   bool
		frames []func(*testing.T, *websocket.Conn)
		want   int
	}{
		{"invalid JSON", true, []func(*testing.T, *websocket.Conn){raw(`{"type":`)}, wsgorilla.CloseBadRequest},
		{"not an object", true, []func(*testing.T, *websocket.Conn){raw(`[1,2]`)}, wsgorilla.CloseBadRequest},
		{"no type", true, []func(*testing.T, *websocket.Conn){raw(`{"id":"1"}`)}, wsgorilla.CloseBadRequest},
		{"unknown type", true, []func(*testing.T, *websocket.Conn){raw(`{"type":"start","id":"1"}`)}, wsgorilla.CloseBadRequest},
		{"server type from a client", true, []func(*testing.T, *websocket.Conn){raw(`{"type":"next","id":"1"}`)}, wsgorilla.CloseBadRequest},
		{"subscribe without id", true, []func(*testing.T, *websocket.Conn){raw(`{"type":"subscribe","payload":{"query":"subscription { name }"}}`)}, wsgorilla.CloseBadRequest},
		{"subscribe payload not an object", true, []func(*testing.T, *websocket.Conn){raw(`{"type":"subscribe","id":"1","payload":"subscription { name }"}`)}, wsgorilla.CloseBadRequest},
		{"subscribe query not a string", true, []func(*testing.T, *websocket.Conn){raw(`{"type":"subscribe","id":"1","payload":{"query":7}}`)}, wsgorilla.CloseBadRequest},
		{"complete without id", true, []func(*testing.T, *websocket.Conn){raw(`{"type":"complete"}`)}, wsgorilla.CloseBadRequest},
		{"binary message", true, []func(*testing.T, *websocket.Conn){func(t *testing.T, c *websocket.Conn) {
			if err := c.WriteMessage(websocket.BinaryMessage, []byte(sub)); err != nil {
				t.Fatal(err)
			}
		}}, wsgorilla.CloseBadRequest},
		{"init payload not an object", false, []func(*testing.T, *websocket.Conn){raw(`{"type":"connection_init","payload":"token"}`)}, wsgorilla.CloseBadRequest},
		{"subscribe before init", false, []func(*testing.T, *websocket.Conn){raw(sub)}, wsgorilla.CloseUnauthorized},
		{"second init", true, []func(*testing.T, *websocket.Conn){raw(`{"type":"connection_init"}`)}, wsgorilla.CloseTooManyInitRequests},
		{"duplicate id", true, []func(*testing.T, *websocket.Conn){raw(sub), raw(sub)}, wsgorilla.CloseSubscriberExists},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c *websocket.Conn
			if tc.init {
				c = initialised(t, url)
			} else {
				c = dial(t, url, nil, "graphql-transport-ws")
			}
			for _, f := range tc.frames {
				f(t, c)
			}
			if got := closeCode(t, c); got != tc.want {
				t.Errorf("close code = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestInitTimeoutCloses4408(t *testing.T) {
	t.Parallel()
	_, url := newServer(t, wsgorilla.Transport{InitTimeout: 100 * time.Millisecond}, false)
	c := dial(t, url, nil, "graphql-transport-ws")
	start := time.Now()
	if got, want := closeCode(t, c), wsgorilla.CloseInitTimeout; got != want {
		t.Errorf("close code = %d, want %d", got, want)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("closed after %v, want about 100ms", d)
	}
	// A client that initialises in time is not closed by the timer.
	c2 := initialised(t, url)
	time.Sleep(250 * time.Millisecond)
	send(t, c2, frame{Type: "subscribe", ID: "q", Payload: json.RawMessage(`{"query":"{ name }"}`)})
	if f := next(t, c2); f.Type != "next" || f.ID != "q" {
		t.Fatalf("got %+v, want next q after the init timeout passed", f)
	}
}

// A ping before connection_init is answered (the protocol allows it at any time);
// gqlgen alone would close the connection.
func TestPingBeforeInitIsAnswered(t *testing.T) {
	t.Parallel()
	_, url := newServer(t, wsgorilla.Transport{}, false)
	c := dial(t, url, nil, "graphql-transport-ws")
	send(t, c, frame{Type: "ping"})
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var f frame
	if err := c.ReadJSON(&f); err != nil || f.Type != "pong" {
		t.Fatalf("got %+v, %v; want pong", f, err)
	}
	send(t, c, frame{Type: "connection_init"})
	if f := next(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
}

// Ids are reusable once their operation ended, whichever side ended it.
func TestIDReusableAfterComplete(t *testing.T) {
	t.Parallel()
	srv, url := newServer(t, wsgorilla.Transport{}, false)
	c := initialised(t, url)
	// The server ends a query by itself.
	for range 3 {
		send(t, c, frame{Type: "subscribe", ID: "q", Payload: json.RawMessage(`{"query":"{ name }"}`)})
		if f := next(t, c); f.Type != "next" {
			t.Fatalf("got %+v, want next", f)
		}
		if f := next(t, c); f.Type != "complete" || f.ID != "q" {
			t.Fatalf("got %+v, want complete q", f)
		}
	}
	// The client ends a subscription.
	sub := frame{Type: "subscribe", ID: "s", Payload: subscribePayload()}
	send(t, c, sub)
	send(t, c, frame{Type: "complete", ID: "s"})
	send(t, c, sub)
	srv.SendNextSubscriptionMessage()
	f := next(t, c)
	if f.Type == "complete" && f.ID == "s" {
		// gqlgen acknowledges a client's complete with its own (the protocol says to
		// ignore it); it may arrive after the new subscribe.
		f = next(t, c)
	}
	if f.Type != "next" || f.ID != "s" {
		t.Fatalf("got %+v, want next s on the reused id", f)
	}
}

// A subscribe over the cap gets an error frame for its id; the connection and the
// other operations stay; a completed one frees a slot.
func TestSubscriptionCap(t *testing.T) {
	t.Parallel()
	srv, url := newServer(t, wsgorilla.Transport{MaxSubscriptions: 2}, false)
	c := initialised(t, url)
	for _, id := range []string{"a", "b"} {
		send(t, c, frame{Type: "subscribe", ID: id, Payload: subscribePayload()})
	}
	send(t, c, frame{Type: "subscribe", ID: "c", Payload: subscribePayload()})
	f := next(t, c)
	if f.Type != "error" || f.ID != "c" {
		t.Fatalf("got %+v, want error c", f)
	}
	var errs []struct {
		Message    string         `json:"message"`
		Extensions map[string]any `json:"extensions"`
	}
	if err := json.Unmarshal(f.Payload, &errs); err != nil || len(errs) != 1 || errs[0].Extensions["code"] != "INVALID_ARGUMENT" {
		t.Fatalf("error payload %s: %v", f.Payload, err)
	}
	send(t, c, frame{Type: "complete", ID: "a"})
	send(t, c, frame{Type: "subscribe", ID: "c", Payload: subscribePayload()})
	// The test server hands each message to one live subscription, chosen at
	// random; ending b leaves c the only one, so c must get the next messages. The
	// pong comes from gqlgen's read loop once it has handled the frames before it.
	send(t, c, frame{Type: "complete", ID: "b"})
	send(t, c, frame{Type: "ping"})
	awaitPong(t, c)
	for range 20 {
		srv.SendNextSubscriptionMessage()
		f := next(t, c)
		if f.Type == "error" {
			t.Fatalf("got %+v after a slot was freed", f)
		}
		if f.Type == "next" && f.ID == "c" {
			return
		}
	}
	t.Fatal("subscription c never received a message")
}

func TestLegacySubscriptionCap(t *testing.T) {
	t.Parallel()
	_, url := newServer(t, wsgorilla.Transport{MaxSubscriptions: 1}, false)
	c := dial(t, url, nil, "graphql-ws")
	send(t, c, frame{Type: "connection_init"})
	if f := next(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	send(t, c, frame{Type: "start", ID: "a", Payload: subscribePayload()})
	send(t, c, frame{Type: "start", ID: "b", Payload: subscribePayload()})
	if f := next(t, c); f.Type != "error" || f.ID != "b" {
		t.Fatalf("got %+v, want error b", f)
	}
}

// awaitPong reads until the server's pong, failing on an error frame on the way.
func awaitPong(t *testing.T, c *websocket.Conn) {
	t.Helper()
	for {
		switch f := readFrame(t, c, "pong"); f.Type {
		case "pong":
			return
		case "error":
			t.Fatalf("got %+v while waiting for pong", f)
		}
	}
}
