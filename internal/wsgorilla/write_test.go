package wsgorilla

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/99designs/gqlgen/graphql/handler/testserver"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
)

// msgType and msg have the shape of gqlgen's server message structs.
type msgType string

func (t msgType) MarshalText() ([]byte, error) { return []byte(t), nil }

type msg struct {
	Payload json.RawMessage `json:"payload,omitempty"`
	ID      string          `json:"id,omitempty"`
	Type    msgType         `json:"type"`
}

// The frame written without a second json.Marshal is byte for byte what json.Marshal
// writes, for every id a client may choose and payloads as gqlgen encodes them.
func TestAppendMessageMatchesEncodingJSON(t *testing.T) {
	payload, _ := json.Marshal(map[string]any{"data": map[string]any{"text": "a <b> & \"c\" \u2028 é 😀"}})
	ids := []string{"", "1", "notices", "a\"b", `back\slash`, "tab\there", "\x00\x1f", "<script>&", "é", "😀", "\u2028\u2029", "bad\xffutf8"}
	c := &Conn{}
	for _, id := range ids {
		for _, p := range []json.RawMessage{nil, payload, json.RawMessage(`[{"message":"x"}]`)} {
			for _, typ := range []msgType{"next", "complete", "error", "pong"} {
				v := &msg{Payload: p, ID: id, Type: typ}
				want, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				m, ok := c.decompose(v)
				if !ok {
					t.Fatalf("decompose(%+v) refused gqlgen's shape", v)
				}
				if got := appendMessage(nil, m); string(got) != string(want) {
					t.Errorf("id %q payload %s type %s:\n got %s\nwant %s", id, p, typ, got, want)
				}
			}
		}
	}
}

// A struct of any other shape is left to encoding/json.
func TestDecomposeRefusesOtherShapes(t *testing.T) {
	c := &Conn{}
	for _, v := range []any{
		nil, 42, "x", map[string]any{"type": "next"},
		&struct {
			Payload json.RawMessage `json:"payload"`
			ID      string          `json:"id,omitempty"`
			Type    string          `json:"type"`
		}{},
		&struct {
			Payload json.RawMessage `json:"payload,omitempty"`
			ID      string          `json:"id,omitempty"`
			Type    string          `json:"type"`
			Extra   int             `json:"extra"`
		}{},
		&struct { // gqlgen's fields in another order: encoding/json writes them in it
			ID      string          `json:"id,omitempty"`
			Payload json.RawMessage `json:"payload,omitempty"`
			Type    msgType         `json:"type"`
		}{},
	} {
		if _, ok := c.decompose(v); ok {
			t.Errorf("decompose(%T) accepted a shape that is not gqlgen's", v)
		}
	}
}

// gqlgen's own message types, of both protocols, take the fast path.
func TestGqlgenMessagesTakeTheFastPath(t *testing.T) {
	for _, proto := range []string{protoTransportWS, protoLegacyWS} {
		t.Run(proto, func(t *testing.T) {
			if l := gqlgenConn(t, proto).layout.Load(); l == nil || !l.ok {
				t.Fatalf("layout %+v: gqlgen's message was encoded by encoding/json", l)
			}
		})
	}
}

// gqlgenConn runs one subscription of gqlgen's test server over proto until its first
// next frame and returns the connection the adapter accepted, whose layout is then
// the one of gqlgen's message struct of that protocol.
func gqlgenConn(t *testing.T, proto string) *Conn {
	t.Helper()
	var (
		mu    sync.Mutex
		conns []*Conn
	)
	impl := Implementation{}
	srv := testserver.New()
	srv.AddTransport(transport.Websocket{Implementation: recordingImpl{impl, func(c *Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}}})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	d := websocket.Dialer{Subprotocols: []string{proto}, HandshakeTimeout: 5 * time.Second}
	c, _, err := d.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := "subscribe"
	if proto == protoLegacyWS {
		start = "start"
	}
	for _, f := range []map[string]any{
		{"type": "connection_init"},
		{"type": start, "id": "1", "payload": map[string]any{"query": "subscription { name }"}},
	} {
		if err := c.WriteJSON(f); err != nil {
			t.Fatal(err)
		}
	}
	srv.SendNextSubscriptionMessage()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		var f struct{ Type, ID string }
		if err := c.ReadJSON(&f); err != nil {
			t.Fatal(err)
		}
		if f.Type == "next" || f.Type == "data" {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("%d connections accepted, want 1", len(conns))
	}
	return conns[0]
}

type recordingImpl struct {
	Implementation
	accepted func(*Conn)
}

func (r recordingImpl) Accept(w http.ResponseWriter, req *http.Request, o transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	c, err := r.Implementation.Accept(w, req, o)
	if err == nil {
		r.accepted(c.(*Conn))
	}
	return c, err
}

// The write watch ends a write that has run for the timeout, measured from the start
// of that write, and never one that finished; idle connections hold no armed timer.
func TestWriteWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 10 * time.Second
		var expired atomic.Int32
		w := newWriteWatch(timeout, func() { expired.Add(1) })
		defer w.stop()

		// Short writes, back to back for longer than the timeout: never expired.
		for range 30 {
			w.begin()
			time.Sleep(timeout / 4)
			w.end()
		}
		// Idle for long: the timer fires once, finds nothing, and disarms.
		time.Sleep(3 * timeout)
		synctest.Wait()
		if got := expired.Load(); got != 0 {
			t.Fatalf("expired %d times during short writes", got)
		}
		if w.armed.Load() {
			t.Fatal("the timer is still armed on an idle connection")
		}

		// A write that blocks: still alive just before its own timeout, which counts
		// from its start even though the timer was armed earlier.
		w.begin()
		time.Sleep(timeout / 2)
		w.end()
		w.begin()
		time.Sleep(timeout - time.Nanosecond)
		synctest.Wait()
		if got := expired.Load(); got != 0 {
			t.Fatalf("expired %d times before the write's timeout", got)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := expired.Load(); got != 1 {
			t.Fatalf("expired %d times at the write's timeout, want 1", got)
		}
	})
}
