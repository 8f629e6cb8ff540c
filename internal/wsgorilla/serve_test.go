package wsgorilla_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/substream"
	"github.com/awareness/awareness/internal/wsgorilla"
	"github.com/awareness/awareness/internal/wsgorilla/wsgorillatest"
)

// settled waits, as goleak does, until no goroutine of the package runs (the
// connections of earlier tests have ended) and returns the goroutine count then.
func settled(t *testing.T) int {
	t.Helper()
	var total int
	waitFor(t, func() bool {
		var in int
		total, in = wsgorillatest.Goroutines()
		return in == 0
	}, "the connections of earlier tests end")
	return total
}

// An idle connection owns exactly one goroutine, its reader, on both subprotocols,
// tracked (Conns: read on a goroutine of its own, the HTTP handler returned) or not
// (read on the handler's goroutine): no goroutine waits for the connection's context
// (context.AfterFunc), and the init timeout, the pings and the `ka`s are timers. An
// operation served by gqlgen's response loop adds one goroutine while it is active,
// and none once it ended.
func TestIdleConnectionOwnsOneGoroutine(t *testing.T) {
	for _, tracked := range []bool{true, false} {
		t.Run(fmt.Sprintf("tracked=%v", tracked), func(t *testing.T) {
			tr := wsgorilla.Transport{InitTimeout: time.Hour, PingInterval: time.Hour, KeepAliveInterval: time.Hour}
			if tracked {
				tr.Conns = new(wsgorilla.Conns)
			}
			srv, url := newServer(t, tr, true)
			before := settled(t)
			const n = 10
			conns := make([]*websocket.Conn, n)
			for i := range conns {
				if i%2 == 0 {
					conns[i] = initialised(t, url)
					// A query ran and ended on the connection.
					send(t, conns[i], frame{Type: "subscribe", ID: "q", Payload: json.RawMessage(`{"query":"{ name }"}`)})
				} else {
					conns[i] = dial(t, url, nil, "graphql-ws")
					send(t, conns[i], frame{Type: "connection_init"})
					send(t, conns[i], frame{Type: "start", ID: "q", Payload: json.RawMessage(`{"query":"{ name }"}`)})
				}
				for f := next(t, conns[i]); f.Type != "complete"; f = next(t, conns[i]) {
				}
			}
			var total, in int
			waitFor(t, func() bool { total, in = wsgorillatest.Goroutines(); return total-before == n && in == n },
				fmt.Sprintf("%d idle connections own %d goroutines", n, n))

			// A subscription on gqlgen's response loop holds one while it is active.
			send(t, conns[0], frame{Type: "subscribe", ID: "s", Payload: subscribePayload()})
			waitFor(t, func() bool { total, in = wsgorillatest.Goroutines(); return total-before == n+1 && in == n+1 },
				"an active subscription adds its response loop")
			srv.SendNextSubscriptionMessage()
			if f := next(t, conns[0]); f.Type != "next" || f.ID != "s" {
				t.Fatalf("got %+v, want next s", f)
			}
			send(t, conns[0], frame{Type: "complete", ID: "s"})
			waitFor(t, func() bool { total, in = wsgorillatest.Goroutines(); return total-before == n && in == n },
				"a completed subscription leaves the connection its reader only")
			for _, c := range conns {
				c.Close()
			}
			waitFor(t, func() bool { total, in = wsgorillatest.Goroutines(); return in == 0 }, "closed connections leave no goroutine")
		})
	}
}

// The connection's context is watched without a goroutine: when the context InitFunc
// gave the connection ends, the connection closes (1000), and its operations end.
func TestConnectionContextEndClosesConnection(t *testing.T) {
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		t.Run(proto, func(t *testing.T) {
			var mu sync.Mutex
			var cancel context.CancelFunc
			tr := wsgorilla.Transport{
				Conns: new(wsgorilla.Conns),
				InitFunc: func(ctx context.Context, _ string, _ transport.InitPayload) (context.Context, *transport.InitPayload, error) {
					mu.Lock()
					defer mu.Unlock()
					ctx, cancel = context.WithCancel(ctx)
					return ctx, nil, nil
				},
			}
			srv, url := newServer(t, tr, false)
			start := map[string]string{"graphql-transport-ws": "subscribe", "graphql-ws": "start"}[proto]
			c := dial(t, url, nil, proto)
			send(t, c, frame{Type: "connection_init"})
			if f := next(t, c); f.Type != "connection_ack" {
				t.Fatalf("got %+v, want connection_ack", f)
			}
			send(t, c, frame{Type: start, ID: "s", Payload: subscribePayload()})
			srv.SendNextSubscriptionMessage()
			if f := next(t, c); f.ID != "s" {
				t.Fatalf("got %+v, want a frame for s", f)
			}
			mu.Lock()
			cancel()
			mu.Unlock()
			if got := closeCode(t, c); got != websocket.CloseNormalClosure {
				t.Errorf("close code = %d, want 1000", got)
			}
			waitFor(t, func() bool { return tr.Conns.Len() == 0 }, "the connection ends")
			waitFor(t, func() bool { _, in := wsgorillatest.Goroutines(); return in == 0 }, "the subscription's response loop ends")
		})
	}
}

// InitFunc: the payload it returns is connection_ack's; an *InitError refuses the
// connection with its close code and reason (after a connection_error frame on
// graphql-ws); any other error closes with 1000. CloseFunc hears the code once.
func TestInitFunc(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var closed []int
	refusal := errors.New("no token")
	tr := wsgorilla.Transport{
		InitFunc: func(ctx context.Context, _ string, p transport.InitPayload) (context.Context, *transport.InitPayload, error) {
			switch p.GetString("mode") {
			case "refuse":
				return ctx, nil, &wsgorilla.InitError{Code: 4403, Reason: "Forbidden", Err: refusal}
			case "fail":
				return ctx, nil, refusal
			}
			return ctx, &transport.InitPayload{"welcome": p.GetString("name")}, nil
		},
		CloseFunc: func(_ context.Context, code int) {
			mu.Lock()
			closed = append(closed, code)
			mu.Unlock()
		},
	}
	_, url := newServer(t, tr, false)
	init := func(c *websocket.Conn, payload string) {
		t.Helper()
		if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"connection_init","payload":`+payload+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	c := dial(t, url, nil, "graphql-transport-ws")
	init(c, `{"name":"ada"}`)
	if f := next(t, c); f.Type != "connection_ack" || string(f.Payload) != `{"welcome":"ada"}` {
		t.Fatalf("got %+v, want connection_ack with InitFunc's payload", f)
	}

	c = dial(t, url, nil, "graphql-transport-ws")
	init(c, `{"mode":"refuse"}`)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err := c.ReadMessage()
	if ce, ok := errors.AsType[*websocket.CloseError](err); !ok || ce.Code != 4403 || ce.Text != "Forbidden" {
		t.Errorf("refused graphql-transport-ws: %v, want close 4403 Forbidden and no frame before it", err)
	}

	c = dial(t, url, nil, "graphql-ws")
	init(c, `{"mode":"refuse"}`)
	if f := readFrame(t, c, "connection_error"); f.Type != "connection_error" || !strings.Contains(string(f.Payload), "no token") {
		t.Errorf("refused graphql-ws: got %+v, want connection_error with the error's message", f)
	}
	if got := closeCode(t, c); got != 4403 {
		t.Errorf("refused graphql-ws: close code = %d, want 4403", got)
	}

	c = dial(t, url, nil, "graphql-transport-ws")
	init(c, `{"mode":"fail"}`)
	if got := closeCode(t, c); got != websocket.CloseNormalClosure {
		t.Errorf("InitFunc error without a code: close code = %d, want 1000", got)
	}
	waitFor(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(closed) == 3 }, "CloseFunc hears the three refusals")
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []int{4403, 4403, 1000} {
		found := false
		for i, got := range closed {
			if got == want {
				closed = append(closed[:i], closed[i+1:]...)
				found = true
				break
			}
		}
		if !found {
			t.Errorf("CloseFunc codes: %d missing (left: %v)", want, closed)
		}
	}
}

// The legacy protocol's own messages and refusals, as gqlgen's transport answers
// them: connection_terminate closes with 1000; a server's message type from the
// client gets connection_error and 1002; a message that is not JSON ends the
// connection (before connection_init with connection_error "invalid json" and
// 1002); a start whose payload is not an operation gets an `error` and `complete`.
func TestLegacyProtocolMessages(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var readErrs []error
	tr := wsgorilla.Transport{ErrorFunc: func(_ context.Context, err error) {
		mu.Lock()
		readErrs = append(readErrs, err)
		mu.Unlock()
	}}
	_, url := newServer(t, tr, false)
	legacy := func() *websocket.Conn {
		c := dial(t, url, nil, "graphql-ws")
		send(t, c, frame{Type: "connection_init"})
		if f := next(t, c); f.Type != "connection_ack" {
			t.Fatalf("got %+v, want connection_ack", f)
		}
		return c
	}
	raw := func(c *websocket.Conn, s string) {
		t.Helper()
		if err := c.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}

	c := legacy()
	send(t, c, frame{Type: "connection_terminate"})
	if got := closeCode(t, c); got != websocket.CloseNormalClosure {
		t.Errorf("connection_terminate: close code = %d, want 1000", got)
	}

	c = legacy()
	send(t, c, frame{Type: "ka"})
	if f := next(t, c); f.Type != "connection_error" || !strings.Contains(string(f.Payload), "unexpected message ka") {
		t.Errorf("client ka: got %+v, want connection_error", f)
	}
	if got := closeCode(t, c); got != websocket.CloseProtocolError {
		t.Errorf("client ka: close code = %d, want 1002", got)
	}

	c = legacy()
	raw(c, `{"type":`)
	if got := closeCode(t, c); got != websocket.CloseNormalClosure {
		t.Errorf("invalid JSON after init: close code = %d, want 1000", got)
	}
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, err := range readErrs {
			if we, ok := errors.AsType[transport.WebsocketError](err); ok && we.IsReadError {
				return true
			}
		}
		return false
	}, "ErrorFunc hears the invalid message as a read error")

	c = dial(t, url, nil, "graphql-ws")
	raw(c, `not json`)
	if f := readFrame(t, c, "connection_error"); f.Type != "connection_error" || !strings.Contains(string(f.Payload), "invalid json") {
		t.Errorf("invalid JSON before init: got %+v, want connection_error invalid json", f)
	}
	if got := closeCode(t, c); got != websocket.CloseProtocolError {
		t.Errorf("invalid JSON before init: close code = %d, want 1002", got)
	}

	c = legacy()
	raw(c, `{"type":"start","id":"x","payload":"{ name }"}`)
	if f := next(t, c); f.Type != "error" || f.ID != "x" || !strings.Contains(string(f.Payload), "invalid json") {
		t.Errorf("start with a string payload: got %+v, want error invalid json", f)
	}
	if f := next(t, c); f.Type != "complete" || f.ID != "x" {
		t.Errorf("start with a string payload: got %+v, want complete", f)
	}
}

// graphql-transport-ws messages the reader answers: a ping after connection_init gets
// a pong with the ping's payload; a complete before connection_init closes with 1002;
// a pong nobody asked for is ignored.
func TestTransportWSPingAndEarlyComplete(t *testing.T) {
	t.Parallel()
	_, url := newServer(t, wsgorilla.Transport{}, false)
	c := initialised(t, url)
	send(t, c, frame{Type: "pong"})
	send(t, c, frame{Type: "ping", Payload: json.RawMessage(`{"n":1}`)})
	if f := readFrame(t, c, "pong"); f.Type != "pong" || string(f.Payload) != `{"n":1}` {
		t.Errorf("got %+v, want pong with the ping's payload", f)
	}
	c = dial(t, url, nil, "graphql-transport-ws")
	send(t, c, frame{Type: "complete", ID: "1"})
	if got := closeCode(t, c); got != websocket.CloseProtocolError {
		t.Errorf("complete before connection_init: close code = %d, want 1002", got)
	}
}

// Operation errors over the socket, on both subprotocols: an operation that fails
// validation gets its errors, with their codes, in an `error` frame, then `complete`
// (as gqlgen's transport answers); a
// panic in the response loop is recovered (the handler's recover function) and ends
// the operation with an `error` frame (and `complete`, as gqlgen's transport
// answers); a stream whose Op is told of errors (Ended) ends with an `error` frame
// carrying them instead of `complete`.
func TestOperationErrors(t *testing.T) {
	t.Parallel()
	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		t.Run(proto, func(t *testing.T) {
			t.Parallel()
			srv, url := newServer(t, wsgorilla.Transport{}, false)
			srv.AroundResponses(func(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
				oc := graphql.GetOperationContext(ctx)
				if oc.Operation == nil {
					return next(ctx) // an operation refused before it was created
				}
				switch oc.Operation.Name {
				case "Panics":
					panic("boom")
				case "StreamFails":
					resp := next(ctx)
					if resp == nil {
						op := substream.From(ctx)
						if op == nil {
							panic("no Op outside a stream")
						}
						op.Ended(substream.End{Errors: []byte(`[{"message":"stream ended","extensions":{"code":"UNAVAILABLE"}}]`)})
					}
					return resp
				}
				return next(ctx)
			})
			c := dial(t, url, nil, proto)
			send(t, c, frame{Type: "connection_init"})
			if f := next(t, c); f.Type != "connection_ack" {
				t.Fatalf("got %+v, want connection_ack", f)
			}
			start, data := "subscribe", "next"
			if proto == "graphql-ws" {
				start, data = "start", "data"
			}
			send(t, c, frame{Type: start, ID: "v", Payload: json.RawMessage(`{"query":"{ nope }"}`)})
			if f := next(t, c); f.Type != "error" || f.ID != "v" || !strings.Contains(string(f.Payload), "GRAPHQL_VALIDATION_FAILED") {
				t.Errorf("invalid query: got %+v, want error with the validation errors", f)
			}
			if f := next(t, c); f.Type != "complete" || f.ID != "v" {
				t.Errorf("invalid query: got %+v, want complete", f)
			}

			send(t, c, frame{Type: start, ID: "p", Payload: json.RawMessage(`{"query":"query Panics { name }"}`)})
			if f := next(t, c); f.Type != "error" || f.ID != "p" {
				t.Errorf("panic: got %+v, want error", f)
			}
			if f := next(t, c); f.Type != "complete" || f.ID != "p" {
				t.Errorf("panic: got %+v, want complete after the error (as gqlgen's transport)", f)
			}

			send(t, c, frame{Type: start, ID: "s", Payload: json.RawMessage(`{"query":"subscription StreamFails { name }"}`)})
			srv.SendNextSubscriptionMessage()
			if f := next(t, c); f.Type != data || f.ID != "s" {
				t.Fatalf("stream: got %+v, want %s", f, data)
			}
			srv.SendCompleteSubscriptionMessage()
			f := next(t, c)
			if f.Type != "error" || f.ID != "s" || !strings.Contains(string(f.Payload), `"code":"UNAVAILABLE"`) {
				t.Errorf("stream error: got %+v, want error with the stream's error", f)
			}
		})
	}
}
