package wsgorilla

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/errcode"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/awareness/awareness/internal/jsontext"
	"github.com/awareness/awareness/internal/substream"
)

// This file is the connection's reader and the protocols' message state machine: the
// part of gqlgen's transport.Websocket (v0.17.98, wsConnection) the service serves
// itself, with the same messages, frames and operation semantics, but no goroutine
// beside the reader (see the package doc). Client messages were checked against the
// protocol first (protocol.go: close codes, the operation cap, pings before init).

// errPeerClosed is the reader's error when the peer closed the connection normally
// (1000, 1001 going away, 1005 no status) or answered the server's close frame.
var errPeerClosed = transport.ErrWebsocketClosed

// errBadMessage is the reader's error for a legacy message that is not a JSON object
// with a known type.
var errBadMessage = errors.New("wsgorilla: invalid message")

// opState is the part of Conn that tracks the operations gqlgen's response loop
// serves, each with the function that cancels its context.
type opState struct {
	opMu     sync.Mutex
	ops      map[string]*operation
	opsEnded bool // the connection closed: every operation was cancelled
	// stopWatch ends the watch of the connection's context (context.AfterFunc).
	stopWatch func() bool
	// initPayload is connection_init's payload.
	initPayload transport.InitPayload
}

// serve is the connection's reader: connection_init, then every client message, until
// the connection ends. It is the one goroutine an idle connection owns.
func (c *Conn) serve() {
	defer c.finish()
	defer func() {
		// A panic while an operation is created (an extension's) ends the connection,
		// not the process: a tracked connection's reader has no HTTP handler around it.
		if r := recover(); r != nil {
			c.reportError(fmt.Errorf("wsgorilla: panic serving the connection: %v", r), true)
			c.close(websocket.CloseInternalServerErr, "internal error")
		}
	}()
	if !c.init() {
		return
	}
	// The connection's end when its context ends (the server's shutdown without
	// Conns, an InitFunc's expiring context), without a goroutine that waits for it.
	c.stopWatch = context.AfterFunc(c.ctx, func() { c.close(websocket.CloseNormalClosure, "terminated") })
	for {
		start := graphql.Now()
		f, err := c.next()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) && !errors.Is(err, errPeerClosed) {
				c.reportError(err, true)
			}
			return
		}
		if !c.handle(start, f) {
			return
		}
	}
}

// finish ends the connection once the reader returns, and calls CloseFunc with the
// code of the close frame the connection ended with.
func (c *Conn) finish() {
	if c.stopWatch != nil {
		c.stopWatch()
	}
	c.close(websocket.CloseNormalClosure, "terminated")
	if c.closeFunc != nil {
		c.closeFunc(c.ctx, int(c.closeCode.Load()))
	}
}

// close sends a close frame (unless one was sent) and closes the connection.
func (c *Conn) close(code int, reason string) {
	_ = c.writeClose(code, reason)
	_ = c.Close()
}

// cancelOps cancels every operation of the closing connection.
func (c *Conn) cancelOps() {
	c.opMu.Lock()
	ops := c.ops
	c.ops, c.opsEnded = nil, true
	c.opMu.Unlock()
	for _, op := range ops {
		op.cancel()
	}
}

// next returns the next client message to handle, read whole (the read limit bounds
// its size) and checked (inspect). A text message that is not valid UTF-8 closes the
// connection with 1007; one that escapes a lone surrogate is refused (refuseText).
func (c *Conn) next() (clientFrame, error) {
	for {
		typ, r, err := c.ws.NextReader()
		if err != nil {
			if _, ok := errors.AsType[*websocket.CloseError](err); ok && c.closeSent.Load() {
				return clientFrame{}, errPeerClosed // the peer answered our close
			}
			return clientFrame{}, mapReadError(err)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return clientFrame{}, mapReadError(err)
		}
		if typ == websocket.TextMessage && !utf8.Valid(data) {
			return clientFrame{}, c.closeWith(websocket.CloseInvalidFramePayloadData, "text message is not valid UTF-8")
		}
		if typ == websocket.TextMessage && !jsontext.Valid(data) {
			if err := c.refuseText(data); err != nil {
				return clientFrame{}, err
			}
			continue
		}
		f, deliver, err := c.inspect(typ, data)
		if err != nil {
			return clientFrame{}, err
		}
		if deliver {
			return f, nil
		}
	}
}

func mapReadError(err error) error {
	if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived) {
		return errPeerClosed
	}
	return err
}

// legacy reports whether the connection speaks the legacy graphql-ws protocol.
func (c *Conn) legacy() bool { return c.proto.name == protoLegacyWS }

// init reads connection_init, runs InitFunc and acknowledges. It reports whether the
// connection goes on.
func (c *Conn) init() bool {
	f, err := c.next()
	if err != nil {
		if errors.Is(err, errBadMessage) {
			c.connectionError("invalid json")
		}
		c.close(websocket.CloseProtocolError, "decoding error")
		return false
	}
	switch {
	case f.Type == nil:
		c.connectionError("invalid json")
		c.close(websocket.CloseProtocolError, "decoding error")
		return false
	case *f.Type == "connection_init":
	case *f.Type == "connection_terminate" && c.legacy():
		c.close(websocket.CloseNormalClosure, "terminated")
		return false
	default:
		c.connectionError("unexpected message " + *f.Type)
		c.close(websocket.CloseProtocolError, "unexpected message")
		return false
	}
	if len(f.Payload) > 0 {
		if err := json.Unmarshal(f.Payload, &c.initPayload); err != nil {
			c.connectionError("invalid json")
			c.close(websocket.CloseProtocolError, "decoding error")
			return false
		}
	}
	var ack *transport.InitPayload
	if c.initFunc != nil {
		ctx, payload, err := c.initFunc(c.ctx, c.authorization, c.initPayload)
		c.authorization = ""
		if err != nil {
			c.connectionError(err.Error())
			code, reason := websocket.CloseNormalClosure, "terminated"
			if ie, ok := errors.AsType[*InitError](err); ok {
				code, reason = ie.Code, ie.Reason
			}
			c.close(code, reason)
			return false
		}
		c.ctx, ack = ctx, payload
	}
	var payload []byte
	if ack != nil {
		if payload, err = json.Marshal(*ack); err != nil {
			c.reportError(err, false)
			c.close(websocket.CloseInternalServerErr, "connection_ack payload")
			return false
		}
	}
	c.send(message{kind: "connection_ack", payload: payload})
	if c.legacy() {
		c.send(message{kind: "ka"})
	}
	return true
}

// handle serves one client message after connection_init; it reports whether the
// connection goes on.
func (c *Conn) handle(start time.Time, f clientFrame) bool {
	if f.Type == nil {
		// A legacy message that is not an object with a type (graphql-transport-ws
		// closed with 4400 in inspect).
		c.reportError(errBadMessage, true)
		return false
	}
	id := ""
	if f.ID != nil {
		id = *f.ID
	}
	switch t := *f.Type; {
	case t == "subscribe" && !c.legacy(), t == "start" && c.legacy():
		c.subscribe(start, id, f.Payload)
	case t == "complete" && !c.legacy(), t == "stop" && c.legacy():
		c.opMu.Lock()
		op := c.ops[id]
		c.opMu.Unlock()
		if op != nil {
			op.cancel()
		}
	case t == "ping" && !c.legacy():
		c.send(message{kind: "pong", payload: f.Payload})
	case t == "connection_terminate" && c.legacy():
		c.close(websocket.CloseNormalClosure, "terminated")
		return false
	case c.legacy() && !legacyClientType(t):
		c.reportError(fmt.Errorf("%w: type %q", errBadMessage, truncate(t, 40)), true)
		return false
	default:
		c.connectionError("unexpected message " + t)
		c.close(websocket.CloseProtocolError, "unexpected message")
		return false
	}
	return true
}

// legacyClientType reports whether t is a message type of the legacy protocol (of
// either side: a server's type from a client is unexpected, an unknown one invalid).
func legacyClientType(t string) bool {
	switch t {
	case "connection_init", "connection_terminate", "start", "stop", "connection_ack", "connection_error",
		"data", "error", "complete", "ka":
		return true
	}
	return false
}

// subscribe starts operation id: gqlgen's executor creates it (parsing, validation,
// the mutators), and its response loop runs on a goroutine of its own while the
// operation is active. The operation's context carries the operation as its
// transport (substream.With): a subscription the push path takes (Serve) ends that
// loop at once, its resolver returning a closed channel.
func (c *Conn) subscribe(start time.Time, id string, payload json.RawMessage) {
	ctx := graphql.StartOperationTrace(c.ctx)
	params := &graphql.RawParams{}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(params); err != nil {
		c.sendError(id, &gqlerror.Error{Message: "invalid json"})
		c.complete(id)
		return
	}
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	params.Headers = c.headers
	op := &operation{c: c, id: id}
	ctx = substream.With(ctx, op)
	rc, errs := c.exec.CreateOperationContext(ctx, params)
	if errs != nil {
		resp := c.exec.DispatchError(graphql.WithOperationContext(ctx, rc), errs)
		if errcode.GetErrorKind(errs) == errcode.KindProtocol {
			c.sendError(id, resp.Errors...)
		} else {
			c.sendResponse(id, &graphql.Response{Errors: errs})
		}
		c.complete(id)
		return
	}
	ctx = graphql.WithOperationContext(ctx, rc)
	ctx, cancel := context.WithCancel(ctx)
	c.opMu.Lock()
	if c.opsEnded {
		c.opMu.Unlock()
		cancel()
		return
	}
	if c.ops == nil {
		c.ops = map[string]*operation{}
	}
	op.cancel = cancel
	c.ops[id] = op
	c.opMu.Unlock()
	go c.run(ctx, op, id, rc)
}

// operation is one operation of the connection: the transport's side of it
// (substream.Op, in the context it runs under) and, while gqlgen's response loop
// serves it, the function that cancels its context.
type operation struct {
	c      *Conn
	id     string
	cancel context.CancelFunc
	mu     sync.Mutex
	errs   []byte // the errors that end its stream (Ended); nil for `complete`
}

// errors returns what Ended recorded.
func (op *operation) errors() []byte {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.errs
}

// run is gqlgen's response loop of one operation: every response is a `next` (legacy
// `data`) frame; the stream's errors (Ended) or a recovered panic end it with an
// `error` frame, anything else with `complete` (unless the connection ended).
func (c *Conn) run(ctx context.Context, op *operation, id string, rc *graphql.OperationContext) {
	defer func() {
		if r := recover(); r != nil {
			err := rc.Recover(ctx, r)
			gqlerr, ok := errors.AsType[*gqlerror.Error](err)
			if !ok {
				gqlerr = &gqlerror.Error{}
				if err != nil {
					gqlerr.Message = err.Error()
				}
			}
			c.sendError(id, gqlerr)
		}
		if errs := op.errors(); errs != nil {
			c.send(message{kind: "error", id: id, payload: errs})
		} else if c.ctx.Err() == nil {
			// A cancelled connection context closes the socket; complete would signal
			// a normal end.
			c.complete(id)
		}
		c.opMu.Lock()
		if c.ops[id] == op { // the client may have reused the id already
			delete(c.ops, id)
		}
		c.opMu.Unlock()
		op.cancel()
	}()
	responses, ctx := c.exec.DispatchOperation(ctx, rc)
	for {
		resp := responses(ctx)
		if resp == nil {
			return
		}
		c.sendResponse(id, resp)
	}
}

// send writes one server message, named as gqlgen names its message types: data
// (`next` on graphql-transport-ws), error, complete, connection_ack, ka and
// connection_error (legacy only), pong (graphql-transport-ws only). A message ending
// an operation frees its id (and is dropped for an adopted operation that goes on,
// see swallow). A failed write is reported to ErrorFunc.
func (c *Conn) send(m message) {
	switch m.kind {
	case "data":
		if !c.legacy() {
			m.kind = "next"
		}
	case "complete", "error":
		if c.swallow(m.id, m.kind) {
			return // an adopted operation goes on (push.go)
		}
		c.ended(m.id)
	case "ka", "connection_error":
		if !c.legacy() {
			return
		}
	case "pong":
		if c.legacy() {
			return
		}
	}
	if c.closeSent.Load() {
		return // the connection is closing: no frame is for anyone any more
	}
	b := frames.Get().(*[]byte)
	*b = appendMessage((*b)[:0], m)
	err := c.writeText(*b)
	if cap(*b) <= maxPooledFrame {
		frames.Put(b)
	}
	if err != nil {
		c.reportError(err, false)
	}
}

// frames reuses frame encodings across connections (a sync.Pool, as encoding/json and
// fmt keep theirs: it holds no state a caller can observe).
var frames = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func (c *Conn) sendResponse(id string, resp *graphql.Response) {
	b, err := json.Marshal(resp)
	if err != nil {
		panic(err) // as gqlgen: a response always encodes
	}
	c.send(message{kind: "data", id: id, payload: b})
}

func (c *Conn) complete(id string) { c.send(message{kind: "complete", id: id}) }

func (c *Conn) sendError(id string, errs ...*gqlerror.Error) {
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	b, err := json.Marshal(list)
	if err != nil {
		panic(err)
	}
	c.send(message{kind: "error", id: id, payload: b})
}

// connectionError sends the legacy connection_error (graphql-transport-ws has none).
func (c *Conn) connectionError(msg string) {
	if !c.legacy() {
		return
	}
	b, _ := json.Marshal(&gqlerror.Error{Message: msg})
	c.send(message{kind: "connection_error", payload: b})
}

func (c *Conn) reportError(err error, read bool) {
	if c.errorFunc != nil && err != nil {
		c.errorFunc(c.ctx, transport.WebsocketError{Err: err, IsReadError: read})
	}
}
