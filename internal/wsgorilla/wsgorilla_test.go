package wsgorilla_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/testserver"
	"github.com/google/go-cmp/cmp"
	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"github.com/awareness/awareness/internal/wsgorilla"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// frame is a message of either GraphQL WebSocket protocol.
type frame struct {
	Type    string          `json:"type"`
	ID      string          `json:"id,omitempty"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// newServer serves gqlgen's test schema (Subscription.name) over tr.
func newServer(t *testing.T, tr wsgorilla.Transport, guard bool) (*testserver.TestServer, string) {
	t.Helper()
	srv := testserver.New()
	srv.AddTransport(tr)
	var h http.Handler = srv
	if guard {
		h = tr.Guard(srv)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return srv, "ws" + strings.TrimPrefix(hs.URL, "http")
}

func dial(t *testing.T, url string, header http.Header, protocols ...string) *websocket.Conn {
	t.Helper()
	d := websocket.Dialer{Subprotocols: protocols, HandshakeTimeout: 5 * time.Second}
	c, resp, err := d.Dial(url, header)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial %s: %v (status %d)", url, err, status)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func send(t *testing.T, c *websocket.Conn, f frame) {
	t.Helper()
	if err := c.WriteJSON(f); err != nil {
		t.Fatalf("write %s: %v", f.Type, err)
	}
}

// readFrame reads one frame within 5 s; a failure names what was being waited for.
func readFrame(t *testing.T, c *websocket.Conn, what string) frame {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var f frame
	if err := c.ReadJSON(&f); err != nil {
		t.Fatalf("read (%s): %v", what, err)
	}
	return f
}

// next reads the next frame, skipping keep-alives ("ka", "ping", "pong").
func next(t *testing.T, c *websocket.Conn) frame {
	t.Helper()
	for {
		f := readFrame(t, c, "next frame")
		if f.Type == "ka" || f.Type == "ping" || f.Type == "pong" {
			continue
		}
		return f
	}
}

func subscribePayload() json.RawMessage {
	return json.RawMessage(`{"query":"subscription { name }"}`)
}

func TestSubscribeGraphQLTransportWS(t *testing.T) {
	srv, url := newServer(t, wsgorilla.Transport{}, false)
	c := dial(t, url, nil, "graphql-transport-ws")
	if got, want := c.Subprotocol(), "graphql-transport-ws"; got != want {
		t.Fatalf("subprotocol = %q, want %q", got, want)
	}
	send(t, c, frame{Type: "connection_init"})
	if f := next(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	send(t, c, frame{Type: "subscribe", ID: "1", Payload: subscribePayload()})
	srv.SendNextSubscriptionMessage()
	got := next(t, c)
	want := frame{Type: "next", ID: "1", Payload: json.RawMessage(`{"data":{"name":"test"}}`)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("next frame (-want +got):\n%s", diff)
	}
	send(t, c, frame{Type: "complete", ID: "1"})
	if err := c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "")); err != nil {
		t.Fatal(err)
	}
	// The server answers a normal close with its own close frame.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			var ce *websocket.CloseError
			if !errors.As(err, &ce) {
				t.Fatalf("read after close: %v, want a close frame", err)
			}
			break
		}
	}
}

func TestSubscribeLegacyGraphQLWS(t *testing.T) {
	srv, url := newServer(t, wsgorilla.Transport{KeepAliveInterval: 10 * time.Millisecond}, false)
	c := dial(t, url, nil, "graphql-ws")
	if got, want := c.Subprotocol(), "graphql-ws"; got != want {
		t.Fatalf("subprotocol = %q, want %q", got, want)
	}
	send(t, c, frame{Type: "connection_init"})
	if f := next(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	send(t, c, frame{Type: "start", ID: "a", Payload: subscribePayload()})
	srv.SendNextSubscriptionMessage()
	got := next(t, c)
	want := frame{Type: "data", ID: "a", Payload: json.RawMessage(`{"data":{"name":"test"}}`)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("data frame (-want +got):\n%s", diff)
	}
	send(t, c, frame{Type: "stop", ID: "a"})
	if f := next(t, c); f.Type != "complete" || f.ID != "a" {
		t.Fatalf("got %+v, want complete a", f)
	}
}

func TestSubprotocolPreference(t *testing.T) {
	_, url := newServer(t, wsgorilla.Transport{}, false)
	c := dial(t, url, nil, "graphql-ws", "graphql-transport-ws")
	if got, want := c.Subprotocol(), "graphql-transport-ws"; got != want {
		t.Errorf("subprotocol = %q, want %q (the server prefers the maintained protocol)", got, want)
	}
}

func TestOriginAllowList(t *testing.T) {
	impl := wsgorilla.Transport{AllowedOrigins: []string{"dash.example.com", "https://*.example.org", "localhost:*"}}
	tests := []struct {
		name   string
		origin string
		guard  bool
		want   int // HTTP status of the handshake
	}{
		{"no origin (gateway)", "", true, http.StatusSwitchingProtocols},
		{"same host", "http://HOST", true, http.StatusSwitchingProtocols},
		{"host pattern", "http://dash.example.com", true, http.StatusSwitchingProtocols},
		{"scheme pattern", "https://a.example.org", true, http.StatusSwitchingProtocols},
		{"scheme pattern wrong scheme", "http://a.example.org", true, http.StatusForbidden},
		{"port wildcard", "http://localhost:3000", true, http.StatusSwitchingProtocols},
		{"foreign", "http://evil.example.net", true, http.StatusForbidden},
		{"null origin", "null", true, http.StatusForbidden},
		{"foreign without guard", "http://evil.example.net", false, http.StatusBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, url := newServer(t, impl, tt.guard)
			h := http.Header{}
			if tt.origin != "" {
				h.Set("Origin", strings.Replace(tt.origin, "HOST", strings.TrimPrefix(url, "ws://"), 1))
			}
			d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 5 * time.Second}
			c, resp, err := d.Dial(url, h)
			if c != nil {
				c.Close()
			}
			if resp == nil {
				t.Fatalf("dial: %v, no response", err)
			}
			if resp.StatusCode != tt.want {
				t.Errorf("status = %d, want %d (err %v)", resp.StatusCode, tt.want, err)
			}
		})
	}
}

func TestOriginAllowed(t *testing.T) {
	patterns := []string{"dash.example.com", "https://*.example.org"}
	tests := []struct {
		origin, host string
		want         bool
	}{
		{"", "svc:8080", true},
		{"http://svc:8080", "svc:8080", true},
		{"http://SVC:8080", "svc:8080", true},
		{"http://svc:9090", "svc:8080", false},
		{"https://DASH.example.com", "svc", true},
		{"https://x.example.org", "svc", true},
		{"http://x.example.org", "svc", false},
		{"null", "svc", false},
		{"::", "svc", false},
	}
	for _, tt := range tests {
		if got := wsgorilla.OriginAllowed(tt.origin, tt.host, patterns); got != tt.want {
			t.Errorf("OriginAllowed(%q, %q) = %v, want %v", tt.origin, tt.host, got, tt.want)
		}
	}
}

func TestValidateOriginPatterns(t *testing.T) {
	if err := wsgorilla.ValidateOriginPatterns([]string{"a.example.com", "https://*.b.org"}); err != nil {
		t.Errorf("valid patterns: %v", err)
	}
	for _, bad := range [][]string{{"["}, {" "}} {
		if err := wsgorilla.ValidateOriginPatterns(bad); err == nil {
			t.Errorf("ValidateOriginPatterns(%q) = nil, want an error", bad)
		}
	}
}

// closeCode reads until the connection fails and returns the close code (0 when the
// connection ended without a close frame).
func closeCode(t *testing.T, c *websocket.Conn) int {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code
			}
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("connection still open: %v", err)
			}
			t.Logf("connection ended without a close frame: %v", err)
			return 0
		}
	}
}

func TestReadLimit(t *testing.T) {
	limit := int64(1024)
	_, url := newServer(t, wsgorilla.Transport{PayloadReadLimit: limit}, false)
	c := dial(t, url, nil, "graphql-transport-ws")
	send(t, c, frame{Type: "connection_init"})
	if f := next(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	big := `{"type":"subscribe","id":"1","payload":{"query":"subscription { name }","variables":{"pad":"` + strings.Repeat("x", 2048) + `"}}}`
	if err := c.WriteMessage(websocket.TextMessage, []byte(big)); err != nil {
		t.Fatal(err)
	}
	if got, want := closeCode(t, c), websocket.CloseMessageTooBig; got != want {
		t.Errorf("close code = %d, want %d (message too big)", got, want)
	}
}

func TestInvalidUTF8TextMessage(t *testing.T) {
	_, url := newServer(t, wsgorilla.Transport{}, false)
	c := dial(t, url, nil, "graphql-transport-ws")
	send(t, c, frame{Type: "connection_init"})
	if f := next(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	msg := []byte(`{"type":"subscribe","id":"1","payload":{"query":"subscription { name }","variables":{"k":"agent:main:` + "\xff" + `"}}}`)
	if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
		t.Fatal(err)
	}
	if got, want := closeCode(t, c), websocket.CloseInvalidFramePayloadData; got != want {
		t.Errorf("close code = %d, want %d (invalid frame payload data)", got, want)
	}
}

// TestPingPongDeadPeer checks the read deadline: a graphql-transport-ws client that
// never answers the server's ping is dropped after about twice PingPongInterval.
func TestPingPongDeadPeer(t *testing.T) {
	_, url := newServer(t, wsgorilla.Transport{PingInterval: 50 * time.Millisecond}, false)
	c := dial(t, url, nil, "graphql-transport-ws")
	send(t, c, frame{Type: "connection_init"})
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		if _, _, err := c.ReadMessage(); err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("a peer that never pongs is still connected after %v", time.Since(start))
			}
			break // the server dropped the connection
		}
	}
}

// TestServerReadTimeoutDoesNotEndStreams: http.Server.ReadTimeout bounds reading a
// request, not the life of the WebSocket that replaces it (net/http clears the
// deadlines when gorilla hijacks the connection).
func TestServerReadTimeoutDoesNotEndStreams(t *testing.T) {
	srv := testserver.New()
	srv.AddTransport(wsgorilla.Transport{})
	hs := httptest.NewUnstartedServer(srv)
	hs.Config.ReadTimeout = 100 * time.Millisecond
	hs.Start()
	t.Cleanup(hs.Close)
	c := dial(t, "ws"+strings.TrimPrefix(hs.URL, "http"), nil, "graphql-ws")
	send(t, c, frame{Type: "connection_init"})
	if f := next(t, c); f.Type != "connection_ack" {
		t.Fatalf("got %+v, want connection_ack", f)
	}
	send(t, c, frame{Type: "start", ID: "a", Payload: subscribePayload()})
	time.Sleep(300 * time.Millisecond) // well past ReadTimeout
	srv.SendNextSubscriptionMessage()
	if f := next(t, c); f.Type != "data" {
		t.Fatalf("got %+v, want data after the server's ReadTimeout", f)
	}
}
