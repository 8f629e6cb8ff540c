package wsgorilla_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/testserver"
	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/wsgorilla"
)

// With Conns, Transport serves a connection on a goroutine of its own: the HTTP
// handler returns once the connection is hijacked, the connection goes on serving
// subscriptions, and CloseAll still ends it with 1012. Without Conns the handler
// serves the connection itself.
func TestTransportServesConnectionsOffTheHandler(t *testing.T) {
	t.Parallel()
	for _, tracked := range []bool{true, false} {
		conns := new(wsgorilla.Conns)
		impl := wsgorilla.Transport{}
		if tracked {
			impl.Conns = conns
		}
		srv := testserver.New()
		srv.AddTransport(impl)
		var headers atomic.Pointer[http.Header]
		srv.AroundOperations(func(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
			h := graphql.GetOperationContext(ctx).Headers
			headers.Store(&h)
			return next(ctx)
		})
		var returned atomic.Int32
		hs := httptest.NewServer(impl.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer returned.Add(1)
			srv.ServeHTTP(w, r)
		})))
		t.Cleanup(hs.Close)
		c := initialised(t, "ws"+strings.TrimPrefix(hs.URL, "http"))
		if tracked {
			waitFor(t, func() bool { return returned.Load() == 1 }, "the handler returns once the connection is hijacked")
		} else if returned.Load() != 0 {
			t.Fatal("untracked: the handler returned with the connection open")
		}
		send(t, c, frame{Type: "subscribe", ID: "1", Payload: subscribePayload()})
		srv.SendNextSubscriptionMessage()
		if f := next(t, c); f.Type != "next" || string(f.Payload) != `{"data":{"name":"test"}}` {
			t.Fatalf("tracked %v: got %+v, want the next frame", tracked, f)
		}
		// The operations of a handed-over connection see only the Upgrade header.
		if h := *headers.Load(); (len(h) == 1) != tracked || h.Get("Upgrade") == "" {
			t.Errorf("tracked %v: the operation's headers = %v", tracked, h)
		}
		if !tracked {
			c.Close()
			waitFor(t, func() bool { return returned.Load() == 1 }, "the handler returns when the connection ends")
			continue
		}
		if n := conns.CloseAll(wsgorilla.CloseServiceRestart, "service restart"); n != 1 {
			t.Errorf("CloseAll closed %d, want 1", n)
		}
		if got := closeCode(t, c); got != websocket.CloseServiceRestart {
			t.Errorf("close code = %d, want 1012", got)
		}
	}
}

// A handshake that fails answers 400 through the handler as before.
func TestTransportHandshakeFailure(t *testing.T) {
	t.Parallel()
	impl := wsgorilla.Transport{Conns: new(wsgorilla.Conns)}
	srv := testserver.New()
	srv.AddTransport(impl)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	req, _ := http.NewRequest(http.MethodGet, hs.URL, nil)
	req.Header.Set("Upgrade", "websocket") // no Connection, no key: the upgrade fails
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status = %d (%v), want 400", resp.StatusCode, body)
	}
}
