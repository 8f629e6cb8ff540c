package wsgorilla

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/jsontext"
)

// MaxSubscriptionsPerConn is the default cap on the operations (subscriptions, and
// queries or mutations sent over the socket) active at once on one connection. A
// subscribe over the cap is answered with an `error` frame for its id, and the
// connection stays open.
const MaxSubscriptionsPerConn = 100

// Close codes of graphql-transport-ws (enisdenjo/graphql-ws, PROTOCOL.md and the
// CloseCode enum) that the transport sends.
const (
	CloseBadRequest          = 4400 // invalid message
	CloseUnauthorized        = 4401 // subscribe before connection_init
	CloseInitTimeout         = 4408 // no connection_init within InitTimeout
	CloseSubscriberExists    = 4409 // subscribe with an id that is still active
	CloseTooManyInitRequests = 4429 // a second connection_init
)

// Close codes of RFC 6455 (IANA registry) the transport sends on both subprotocols
// when the server, not the client, ends a healthy connection. graphql-ws 6.x (and so
// Apollo Client's GraphQLWsLink and urql's subscriptionExchange on it) reconnects on
// both with its default options and subscribes again; a code of 1000 would make it
// give up once the closed port refuses the first retry.
const (
	// CloseServiceRestart (1012) ends every connection at shutdown (Conns.CloseAll).
	CloseServiceRestart = websocket.CloseServiceRestart
	// CloseTryAgainLater (1013) ends a connection one of whose subscriptions fell
	// behind (dropSlow): its client reconnects after its backoff and resumes from
	// durable state.
	CloseTryAgainLater = websocket.CloseTryAgainLater
)

// Subprotocol names.
const (
	protoTransportWS = "graphql-transport-ws"
	protoLegacyWS    = "graphql-ws"
)

// overCapCode is the extensions.code of the error frame answering a subscribe over
// the cap (ERR-1: a code of the service's fixed list).
const overCapCode = "INVALID_ARGUMENT"

// CloseError is the reader's error after the transport closed the connection because
// the peer broke the protocol.
type CloseError struct {
	Code   int
	Reason string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("wsgorilla: closed the connection with %d: %s", e.Code, e.Reason)
}

// protocolState is what the transport tracks of one connection's protocol: whether
// connection_init arrived, and the ids of the operations active between a client's
// subscribe and the complete or error that ends them (from either side).
type protocolState struct {
	name    string // negotiated subprotocol
	maxSubs int

	mu     sync.Mutex
	inited bool
	active map[string]struct{}
	timer  *time.Timer // the init timeout; nil when none
}

func (t Transport) newConn(ws *websocket.Conn) *Conn {
	c := &Conn{ws: ws, initFunc: t.InitFunc, errorFunc: t.ErrorFunc, closeFunc: t.CloseFunc}
	c.watch = newWriteWatch(WriteTimeout, c.abort)
	c.proto.name = ws.Subprotocol()
	if c.proto.name == "" {
		// A client that asks for no subprotocol speaks the legacy one (as gqlgen
		// assumes, for compatibility with older clients).
		c.proto.name = protoLegacyWS
	}
	c.proto.maxSubs = t.MaxSubscriptions
	if c.proto.maxSubs <= 0 {
		c.proto.maxSubs = MaxSubscriptionsPerConn
	}
	c.proto.active = map[string]struct{}{}
	c.keep = t.newKeepAlive(c)
	if t.InitTimeout > 0 {
		c.proto.timer = time.AfterFunc(t.InitTimeout, func() {
			c.proto.mu.Lock()
			inited := c.proto.inited
			c.proto.mu.Unlock()
			if !inited {
				_ = c.closeWith(CloseInitTimeout, "Connection initialisation timeout")
			}
		})
	}
	return c
}

// stop stops the init timer. The timer is set before the connection is shared and
// never replaced, so no lock is needed (and inspect calls Close with p.mu held).
func (p *protocolState) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}

// closeWith sends a close frame with code and closes the connection. The read that is
// waiting (the reader's) fails at once, which ends the connection's operations.
func (c *Conn) closeWith(code int, reason string) error {
	_ = c.writeClose(code, reason)
	_ = c.Close()
	return &CloseError{Code: code, Reason: reason}
}

// clientFrame is the envelope of a client message of either protocol. Pointers tell a
// missing field from an empty one.
type clientFrame struct {
	Type    *string         `json:"type"`
	ID      *string         `json:"id"`
	Payload json.RawMessage `json:"payload"`
}

// inspect checks one client message against the negotiated protocol and returns it
// parsed. It returns deliver=false for a message it handled itself, and a *CloseError
// when it closed the connection. A legacy message that is not a JSON object with a
// type is delivered unparsed (f.Type nil): the reader refuses it.
func (c *Conn) inspect(typ int, data []byte) (f clientFrame, deliver bool, err error) {
	if c.proto.name == protoTransportWS {
		deliver, err = c.inspectTransportWS(typ, data, &f)
	} else {
		deliver, err = c.inspectLegacy(data, &f)
	}
	return f, deliver, err
}

func (c *Conn) inspectTransportWS(typ int, data []byte, f *clientFrame) (bool, error) {
	if typ != websocket.TextMessage {
		return false, c.closeWith(CloseBadRequest, "Invalid message: binary messages are not part of graphql-transport-ws")
	}
	if err := json.Unmarshal(data, f); err != nil {
		return false, c.closeWith(CloseBadRequest, "Invalid message: not a JSON object")
	}
	if f.Type == nil {
		return false, c.closeWith(CloseBadRequest, "Invalid message: no type")
	}
	p := &c.proto
	p.mu.Lock()
	defer p.mu.Unlock()
	switch *f.Type {
	case "connection_init":
		if p.inited {
			return false, c.closeWith(CloseTooManyInitRequests, "Too many initialisation requests")
		}
		if !objectOrAbsent(f.Payload) {
			return false, c.closeWith(CloseBadRequest, "Invalid message: connection_init payload must be an object")
		}
		p.inited = true
		if p.timer != nil {
			p.timer.Stop()
		}
		c.keep.start()
		return true, nil
	case "ping", "pong":
		if !objectOrAbsent(f.Payload) {
			return false, c.closeWith(CloseBadRequest, "Invalid message: "+*f.Type+" payload must be an object")
		}
		if !p.inited {
			// The protocol allows a ping at any time, before connection_init too.
			if *f.Type == "ping" {
				_ = c.writeText([]byte(`{"type":"pong"}`))
			}
			return false, nil
		}
		if *f.Type == "pong" {
			c.keep.gotPong() // nil-safe: without PingInterval nothing waits for it
			return false, nil
		}
		return true, nil
	case "subscribe":
		if !p.inited {
			return false, c.closeWith(CloseUnauthorized, "Unauthorized")
		}
		if f.ID == nil || *f.ID == "" {
			return false, c.closeWith(CloseBadRequest, "Invalid message: subscribe needs a non-empty id")
		}
		if !validSubscribePayload(f.Payload) {
			return false, c.closeWith(CloseBadRequest, "Invalid message: subscribe payload must be an object with a query string")
		}
		id := *f.ID
		if _, ok := p.active[id]; ok {
			return false, c.closeWith(CloseSubscriberExists, "Subscriber for "+truncate(id, 80)+" already exists")
		}
		if len(p.active) >= p.maxSubs {
			_ = c.writeText(overCapFrame(id, p.maxSubs))
			return false, nil
		}
		p.active[id] = struct{}{}
		return true, nil
	case "complete":
		if f.ID == nil || *f.ID == "" {
			return false, c.closeWith(CloseBadRequest, "Invalid message: complete needs a non-empty id")
		}
		delete(p.active, *f.ID)
		// Ending an adopted operation ends its hub subscription, whose locks come
		// before p.mu's (push.go): without p.mu.
		p.mu.Unlock()
		c.completeStream(*f.ID)
		p.mu.Lock()
		return true, nil
	default:
		return false, c.closeWith(CloseBadRequest, "Invalid message: unknown type "+strconv.Quote(truncate(*f.Type, 40)))
	}
}

// inspectLegacy applies the operation cap to the legacy graphql-ws protocol, stops the
// init timeout and starts the `ka` keep-alive at connection_init; its other rules are
// the reader's (serve.go).
func (c *Conn) inspectLegacy(data []byte, f *clientFrame) (bool, error) {
	if json.Unmarshal(data, f) != nil || f.Type == nil {
		f.Type = nil
		return true, nil
	}
	p := &c.proto
	p.mu.Lock()
	defer p.mu.Unlock()
	if *f.Type == "connection_init" {
		// The init timeout ends here, as on graphql-transport-ws: a legacy client that
		// initialised in time is never closed with 4408.
		p.inited = true
		if p.timer != nil {
			p.timer.Stop()
		}
		c.keep.start()
		return true, nil
	}
	if f.ID == nil {
		return true, nil
	}
	switch *f.Type {
	case "start":
		if _, ok := p.active[*f.ID]; !ok && len(p.active) >= p.maxSubs {
			_ = c.writeText(overCapFrame(*f.ID, p.maxSubs))
			return false, nil
		}
		p.active[*f.ID] = struct{}{}
	case "stop":
		delete(p.active, *f.ID)
		p.mu.Unlock() // as for graphql-transport-ws's complete
		c.completeStream(*f.ID)
		p.mu.Lock()
	}
	return true, nil
}

// refuseText answers a text message that is valid UTF-8 but escapes a lone UTF-16
// surrogate (jsontext.Valid), the same refusal HTTP gives (ERR-3): a subscribe
// (start) gets an `error` frame for its id with INVALID_ARGUMENT and is not run; any
// other message closes the connection with 4400. It returns the *CloseError when it
// closed the connection.
func (c *Conn) refuseText(data []byte) error {
	var f clientFrame
	_ = json.Unmarshal(data, &f)
	op := "subscribe"
	if c.proto.name == protoLegacyWS {
		op = "start"
	}
	if f.Type != nil && *f.Type == op && f.ID != nil && *f.ID != "" {
		c.proto.mu.Lock()
		inited := c.proto.inited || c.proto.name != protoTransportWS
		c.proto.mu.Unlock()
		if inited {
			_ = c.writeText(errorFrame(*f.ID, jsontext.Message))
			return nil
		}
	}
	return c.closeWith(CloseBadRequest, "Invalid message: "+jsontext.Message)
}

// ended frees the slot of operation id.
func (c *Conn) ended(id string) {
	c.proto.mu.Lock()
	delete(c.proto.active, id)
	c.proto.mu.Unlock()
}

func objectOrAbsent(raw json.RawMessage) bool {
	if len(raw) == 0 || string(raw) == "null" {
		return true
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil
}

// validSubscribePayload reports whether a subscribe payload is an object whose query,
// when present, is a string (automatic persisted queries send only extensions).
func validSubscribePayload(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil || m == nil {
		return false
	}
	q, ok := m["query"]
	if !ok || string(q) == "null" {
		return true
	}
	var s string
	return json.Unmarshal(q, &s) == nil
}

func overCapFrame(id string, max int) []byte {
	return errorFrame(id, fmt.Sprintf("too many operations active on this connection (at most %d): complete one before subscribing again", max))
}

// errorFrame is an `error` frame for operation id with one INVALID_ARGUMENT error.
func errorFrame(id, msg string) []byte {
	b, _ := json.Marshal(map[string]any{
		"id":   id,
		"type": "error",
		"payload": []map[string]any{{
			"message":    msg,
			"extensions": map[string]any{"code": overCapCode},
		}},
	})
	return b
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
