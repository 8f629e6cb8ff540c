package wsgorilla_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/testserver"
	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/jsontext"
	"github.com/awareness/awareness/internal/substream"
	"github.com/awareness/awareness/internal/wsgorilla"
)

// At shutdown Conns.CloseAll closes every connection of both protocols with 1012
// (service restart), which default graphql-ws clients reconnect on, and a connection
// accepted afterwards is closed with 1012 too.
func TestCloseAllSends1012(t *testing.T) {
	t.Parallel()
	conns := new(wsgorilla.Conns)
	_, url := newServer(t, wsgorilla.Transport{Conns: conns}, false)
	a := initialised(t, url)
	b := dial(t, url, nil, "graphql-ws")
	send(t, b, frame{Type: "connection_init"})
	if f := next(t, b); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	send(t, a, frame{Type: "subscribe", ID: "1", Payload: subscribePayload()})
	if n := conns.Len(); n != 2 {
		t.Fatalf("Conns.Len = %d, want 2", n)
	}
	if n := conns.CloseAll(wsgorilla.CloseServiceRestart, "service restart"); n != 2 {
		t.Errorf("CloseAll closed %d, want 2", n)
	}
	for name, c := range map[string]*websocket.Conn{"graphql-transport-ws": a, "graphql-ws": b} {
		if got := closeCode(t, c); got != websocket.CloseServiceRestart {
			t.Errorf("%s: close code = %d, want 1012", name, got)
		}
	}
	late := dial(t, url, nil, "graphql-transport-ws")
	if got := closeCode(t, late); got != websocket.CloseServiceRestart {
		t.Errorf("connection after CloseAll: close code = %d, want 1012", got)
	}
	waitFor(t, func() bool { return conns.Len() == 0 }, "closed connections leave Conns")
}

// A subscription that ends as dropped (substream.End.Dropped, told to the operation's
// Op) ends its connection with 1013 (try again later), which default graphql-ws
// clients retry, and never blocks its caller.
func TestDropSends1013(t *testing.T) {
	t.Parallel()
	impl := wsgorilla.Transport{}
	ops := make(chan substream.Op, 1)
	srv := testserver.New()
	srv.AddTransport(impl)
	srv.AroundOperations(func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
		ops <- substream.From(ctx)
		return next(ctx)
	})
	hs := httptest.NewServer(impl.Guard(srv))
	t.Cleanup(hs.Close)
	c := initialised(t, "ws"+strings.TrimPrefix(hs.URL, "http"))
	send(t, c, frame{Type: "subscribe", ID: "s", Payload: subscribePayload()})
	op := <-ops
	if op == nil {
		t.Fatal("the Op of a WebSocket operation's context = nil")
	}
	// connection_ack reached the client a moment before its write is marked done; a
	// drop during a write closes at once, without a frame (see dropSlow).
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	op.Ended(substream.End{Dropped: true})
	op.Ended(substream.End{Dropped: true}) // idempotent
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("drop blocked for %v", d)
	}
	if got := closeCode(t, c); got != websocket.CloseTryAgainLater {
		t.Errorf("close code = %d, want 1013", got)
	}
}

func TestLegacyInitStopsInitTimeout(t *testing.T) {
	t.Parallel()
	srv, url := newServer(t, wsgorilla.Transport{InitTimeout: 100 * time.Millisecond}, false)
	c := dial(t, url, nil, "graphql-ws")
	send(t, c, frame{Type: "connection_init"})
	if f := next(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	time.Sleep(300 * time.Millisecond)
	send(t, c, frame{Type: "start", ID: "a", Payload: subscribePayload()})
	srv.SendNextSubscriptionMessage()
	if f := next(t, c); f.Type != "data" || f.ID != "a" {
		t.Fatalf("got %+v, want data a after the init timeout passed", f)
	}
	idle := dial(t, url, nil, "graphql-ws")
	if got := closeCode(t, idle); got != wsgorilla.CloseInitTimeout {
		t.Errorf("uninitialised legacy connection: close code = %d, want 4408", got)
	}
}

// A message escaping a lone UTF-16 surrogate is refused as HTTP refuses it: a
// subscribe gets an INVALID_ARGUMENT error frame (the connection stays), anything else
// closes the connection with 4400.
func TestLoneSurrogateRefused(t *testing.T) {
	t.Parallel()
	bad := `{"query":"subscription { name(x: \"a\ud800\") }"}`
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		srv, url := newServer(t, wsgorilla.Transport{}, false)
		c := dial(t, url, nil, proto)
		send(t, c, frame{Type: "connection_init"})
		if f := next(t, c); f.Type != "connection_ack" {
			t.Fatalf("%s: got %+v, want connection_ack", proto, f)
		}
		typ := map[string]string{"graphql-transport-ws": "subscribe", "graphql-ws": "start"}[proto]
		if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"`+typ+`","id":"x","payload":`+bad+`}`)); err != nil {
			t.Fatal(err)
		}
		f := next(t, c)
		if f.Type != "error" || f.ID != "x" || !strings.Contains(string(f.Payload), jsontext.Message) || !strings.Contains(string(f.Payload), "INVALID_ARGUMENT") {
			t.Fatalf("%s: got %+v, want an INVALID_ARGUMENT error frame for x", proto, f)
		}
		send(t, c, frame{Type: typ, ID: "ok", Payload: subscribePayload()})
		srv.SendNextSubscriptionMessage()
		if f := next(t, c); (f.Type != "next" && f.Type != "data") || f.ID != "ok" {
			t.Fatalf("%s: got %+v, want the next subscription served", proto, f)
		}
	}
	_, url := newServer(t, wsgorilla.Transport{}, false)
	c := initialised(t, url)
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"ping","payload":{"k":"\udc00"}}`)); err != nil {
		t.Fatal(err)
	}
	if got := closeCode(t, c); got != wsgorilla.CloseBadRequest {
		t.Errorf("ping with a lone surrogate: close code = %d, want 4400", got)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
	}
}
