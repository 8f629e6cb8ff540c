package wsgorilla

import (
	"context"
	"net/http"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
)

// This file is the push path of subscriptions: an operation the application adopts
// (Adopt) is served by the connection itself instead of by gqlgen's goroutine per
// operation. gqlgen still creates and executes the operation (parsing, validation,
// authentication, the cost and depth limits, the resolver); the resolver then hands
// the operation's stream to the connection and lets gqlgen's part end at once. The
// publisher pushes each value into the connection's queue (Stream.Push, which never
// blocks), and one writer goroutine per connection, started when the queue becomes
// non-empty and gone when it is empty again, encodes and writes the frames. An idle
// subscription therefore costs no goroutine: a connection with any number of them
// holds only gqlgen's reader (and its cancel watcher).

// Encoder appends the payload of one `next` frame (graphql-transport-ws; `data` on
// graphql-ws) for a value pushed with Stream.Push: a GraphQL response, such as
// {"data":{"field":{…}}}. It runs on the connection's writer goroutine.
type Encoder func(b []byte, v any) []byte

// Stream is an operation of a connection whose frames the connection writes itself
// (see Adopt). Its methods are safe for concurrent use.
type Stream struct {
	c     *Conn
	id    string
	enc   Encoder
	limit int // live frames queued at most (Push)

	// Guarded by c.pushMu.
	queued int    // live frames in c.queue
	unsub  func() // ends the application's subscription; nil until Start
	// gqlgen is true until gqlgen's own part of the operation ended (its `complete`,
	// which the connection swallows: the operation goes on).
	gqlgen bool
	// done is set when the stream ended: by the client's complete, the connection's
	// end, Fail, End or Abandon. byClient marks the client's complete.
	done, byClient bool
}

// pushFrame is one frame of the connection's queue: a value of s to encode, or
// s's final frame (an error with payload, or a complete).
type pushFrame struct {
	s       *Stream
	v       any
	kind    string // "": a value; "error" or "complete": s's final frame
	payload []byte // the error frame's payload
}

// OperationID returns the id of the operation gqlgen is creating on ctx's connection
// (the id of the subscribe message, or legacy start, that NextReader returned last).
// It is only meaningful while gqlgen creates that operation on the connection's
// reader goroutine, i.e. from an OperationParameterMutator or OperationContextMutator:
// by the time the operation runs, the reader may have delivered the next message. ok
// is false when ctx is not the context of a connection accepted through Guard.
func OperationID(ctx context.Context) (id string, ok bool) {
	c := connOf(ctx)
	if c == nil {
		return "", false
	}
	c.proto.mu.Lock()
	defer c.proto.mu.Unlock()
	return c.proto.delivering, c.proto.delivering != ""
}

func connOf(ctx context.Context) *Conn {
	slot, ok := ctx.Value(connSlotKey{}).(*connSlot)
	if !ok {
		return nil
	}
	return slot.c.Load()
}

// Adopt makes operation id of ctx's connection a push stream: from now on the
// connection writes its frames, each value given to Push encoded by enc, at most
// limit of them waiting (the values pushed with replay are not counted). The
// operation's resolver calls it, then subscribes with Push as its sink and calls
// Start with the unsubscribe function (or Abandon when the subscription failed), and
// lets gqlgen's part of the operation end: the `complete` gqlgen then writes for id is
// not sent. The stream ends when the client completes it (the connection answers
// with `complete`, as gqlgen does), when the connection ends, or when the application
// ends it (Fail, End); in the first two cases the unsubscribe function is called.
// ok is false when ctx is not a connection's, when the client completed id already,
// or when the connection is closing: the caller then serves the operation as usual.
func Adopt(ctx context.Context, id string, enc Encoder, limit int) (*Stream, bool) {
	c := connOf(ctx)
	if c == nil || id == "" {
		return nil, false
	}
	c.proto.mu.Lock()
	defer c.proto.mu.Unlock()
	if _, active := c.proto.active[id]; !active {
		return nil, false
	}
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	if c.pushClosed || c.streams[id] != nil {
		return nil, false
	}
	s := &Stream{c: c, id: id, enc: enc, limit: limit, gqlgen: true}
	if c.streams == nil {
		c.streams = map[string]*Stream{}
	}
	c.streams[id] = s
	return s, true
}

// Push queues one value of the stream and returns at once; the connection's writer
// writes it. It returns false when limit live values wait already (replay values do
// not count and are always taken): the application then drops the subscription as
// slow. Values of an ended stream are discarded (true).
func (s *Stream) Push(v any, replay bool) bool {
	c := s.c
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	if s.done || c.pushClosed {
		return true
	}
	if !replay {
		if s.queued >= s.limit {
			return false
		}
		s.queued++
	}
	c.enqueueLocked(pushFrame{s: s, v: v})
	return true
}

// Start gives the stream the function that ends the application's subscription. A
// stream that ended in the meantime (the client completed it, the connection ended)
// calls it at once.
func (s *Stream) Start(unsubscribe func()) {
	c := s.c
	c.pushMu.Lock()
	if !s.done {
		s.unsub = unsubscribe
		c.pushMu.Unlock()
		return
	}
	c.pushMu.Unlock()
	unsubscribe()
}

// Abandon forgets a stream whose subscription failed: gqlgen answers the operation
// (its error, its complete) as it would have without Adopt.
func (s *Stream) Abandon() {
	c := s.c
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	s.done = true
	s.gqlgen = false
	if c.streams[s.id] == s {
		delete(c.streams, s.id)
	}
}

// Fail ends the stream from the application's side with an `error` frame whose
// payload is the JSON array of GraphQL errors, written after the values queued before
// it. It does not block and does not call the unsubscribe function (the application's
// subscription ended already).
func (s *Stream) Fail(payload []byte) {
	c := s.c
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	if s.done || c.pushClosed {
		return
	}
	s.done = true
	c.enqueueLocked(pushFrame{s: s, kind: "error", payload: payload})
}

// End ends the stream from the application's side without a frame (its subscription
// was dropped, and the connection is being closed for it). It does not block.
func (s *Stream) End() {
	c := s.c
	c.pushMu.Lock()
	defer c.pushMu.Unlock()
	s.done = true
	c.forgetLocked(s)
}

// forgetLocked removes an ended stream from the connection once gqlgen's part of the
// operation ended too. The caller holds c.pushMu.
func (c *Conn) forgetLocked(s *Stream) {
	if s.done && !s.gqlgen && c.streams[s.id] == s {
		delete(c.streams, s.id)
	}
}

// enqueueLocked queues f and starts the writer when none runs. The caller holds
// c.pushMu.
func (c *Conn) enqueueLocked(f pushFrame) {
	c.queue = append(c.queue, f)
	if !c.flushing {
		c.flushing = true
		go c.flush()
	}
}

// flush is the connection's writer: it writes the queued frames in order and exits
// when the queue is empty. The values of a stream that ended meanwhile are dropped.
func (c *Conn) flush() {
	for {
		c.pushMu.Lock()
		if len(c.queue) == 0 || c.pushClosed {
			c.queue = nil // an emptied queue gives its memory back
			c.flushing = false
			c.pushMu.Unlock()
			return
		}
		f := c.queue[0]
		c.queue[0] = pushFrame{}
		c.queue = c.queue[1:]
		s := f.s
		skip := false
		switch f.kind {
		case "":
			s.queued--
			skip = s.done
		default:
			// The stream's last frame: its operation is over on both sides.
			c.forgetLocked(s)
		}
		c.pushMu.Unlock()
		if skip || c.closeSent.Load() {
			continue
		}
		b := frames.Get().(*[]byte)
		switch f.kind {
		case "":
			*b = appendNext((*b)[:0], s, f.v)
		default:
			*b = appendMessage((*b)[:0], message{payload: f.payload, id: s.id, kind: f.kind})
		}
		err := c.writeText(*b)
		if cap(*b) <= maxPooledFrame {
			frames.Put(b)
		}
		if f.kind == "error" {
			c.ended(s.id) // the client may use the id again
		}
		if err != nil {
			// The connection is closed (writeText closed it); its end clears the queue.
			c.pushMu.Lock()
			c.flushing = false
			c.pushMu.Unlock()
			return
		}
	}
}

// appendNext encodes one value frame of s as appendMessage encodes gqlgen's.
func appendNext(b []byte, s *Stream, v any) []byte {
	b = append(b, `{"payload":`...)
	b = s.enc(b, v)
	b = append(b, `,"id":`...)
	b = appendString(b, s.id)
	if s.c.proto.name == protoLegacyWS {
		return append(b, `,"type":"data"}`...)
	}
	return append(b, `,"type":"next"}`...)
}

// swallow reports whether a frame gqlgen writes for operation id must not be sent:
// the `complete` that ends gqlgen's part of an adopted operation that goes on. An
// `error` from gqlgen ends the stream (it is sent). Either ends gqlgen's part.
func (c *Conn) swallow(id, kind string) bool {
	c.pushMu.Lock()
	s := c.streams[id]
	if s == nil || !s.gqlgen {
		c.pushMu.Unlock()
		return false
	}
	s.gqlgen = false
	var unsub func()
	if kind == "error" && !s.done {
		s.done = true
		unsub, s.unsub = s.unsub, nil
	}
	drop := kind == "complete" && !s.byClient
	c.forgetLocked(s)
	c.pushMu.Unlock()
	if unsub != nil {
		unsub()
	}
	return drop
}

// completeStream ends adopted operation id on the client's complete (stop): the
// application's subscription is ended and, when gqlgen's part of the operation is
// over, the connection answers with `complete` itself (gqlgen answers otherwise).
// The caller holds no lock.
func (c *Conn) completeStream(id string) {
	c.pushMu.Lock()
	s := c.streams[id]
	if s == nil || s.done {
		c.pushMu.Unlock()
		return
	}
	s.done, s.byClient = true, true
	unsub := s.unsub
	s.unsub = nil
	if !s.gqlgen {
		c.enqueueLocked(pushFrame{s: s, kind: "complete"})
	}
	c.pushMu.Unlock()
	if unsub != nil {
		unsub()
	}
}

// closeStreams ends every adopted operation when the connection closes: their
// subscriptions are ended and what they queued is dropped.
func (c *Conn) closeStreams() {
	c.pushMu.Lock()
	if c.pushClosed {
		c.pushMu.Unlock()
		return
	}
	c.pushClosed = true
	c.queue = nil
	var unsubs []func()
	for id, s := range c.streams {
		s.done = true
		if s.unsub != nil {
			unsubs = append(unsubs, s.unsub)
			s.unsub = nil
		}
		delete(c.streams, id)
	}
	c.pushMu.Unlock()
	for _, u := range unsubs {
		u()
	}
}

// pushState is the push path's part of Conn.
type pushState struct {
	pushMu     sync.Mutex
	streams    map[string]*Stream // adopted operations by id; nil until the first
	queue      []pushFrame
	flushing   bool // a flush goroutine runs
	pushClosed bool // the connection closed: nothing is queued any more
}

// Transport is gqlgen's WebSocket transport with the connection served on a
// goroutine of its own. net/http runs a handler on the goroutine that read the
// request, whose stack holds the whole handler chain (the middleware, gqlgen's
// handler) and grew with everything it ran: for a WebSocket that goroutine is the
// connection's reader for the connection's whole life, an idle subscriber's largest
// cost. Transport starts a fresh goroutine for gqlgen's transport (the handshake, the
// init, the read loop), whose stack holds only what reading needs once the GC shrinks
// it, and lets the handler return as soon as the connection is hijacked.
//
// Once the handshake is done, the operations see only the Upgrade header of the
// handshake (see trimHeader): the middleware in front of gqlgen has read the others.
//
// The connection's context is then the request's without its cancellation (net/http
// cancels it when the handler returns): the connection ends when the peer or the
// server closes it. So Transport serves connections this way only when the
// Implementation tracks them in Conns, whose CloseAll the server calls at shutdown;
// otherwise it runs gqlgen's transport on the handler's goroutine, as gqlgen does.
type Transport struct {
	transport.Websocket
}

var _ graphql.Transport = Transport{}

// handoff tells the handler's goroutine that it may return: the connection is
// hijacked, or the handshake failed and its answer is written.
type handoff struct {
	once sync.Once
	done chan struct{}
	w    *handedWriter
}

func (h *handoff) release() { h.once.Do(func() { close(h.done) }) }

// handedWriter is the ResponseWriter gqlgen's transport gets from Transport. It lets
// go of net/http's writer once the connection is hijacked: gqlgen's transport keeps
// its argument for the connection's life, and net/http's writer holds the request
// and the connection's server-side state, none of which a hijacked connection needs.
type handedWriter struct {
	http.ResponseWriter
}

// Unwrap lets http.ResponseController (Accept's hijack) reach net/http's writer.
func (w *handedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type handoffKey struct{}

// handOver lets the handler of a request Transport handed over return, once its
// header is trimmed (trimHeader); other requests are left alone.
func handOver(r *http.Request) {
	if h, ok := r.Context().Value(handoffKey{}).(*handoff); ok {
		trimHeader(r)
		h.w.ResponseWriter = nil // hijacked: gqlgen writes no HTTP answer any more
		h.release()
	}
}

// trimHeader replaces the header of a request Transport handed over, once its
// handshake is done, with the one field the operations read (Upgrade, which tells a
// WebSocket operation from others): gqlgen keeps the request's header for the
// connection's whole life, as every operation's Headers. The request is Transport's
// own shallow copy; the caller's is not changed.
func trimHeader(r *http.Request) {
	// A copy: net/http carves every value of a header from one allocation.
	r.Header = http.Header{"Upgrade": {strings.Clone(r.Header.Get("Upgrade"))}}
}

// Do implements graphql.Transport.
func (t Transport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	impl, ok := t.Implementation.(Implementation)
	if !ok || impl.Conns == nil {
		t.Websocket.Do(w, r, exec)
		return
	}
	h := &handoff{done: make(chan struct{}), w: &handedWriter{ResponseWriter: w}}
	// No cancellation at all: gqlgen's own contexts under it (the connection's, each
	// operation's) then register with no parent, which would keep a map of them.
	r = r.WithContext(context.WithValue(context.WithoutCancel(r.Context()), handoffKey{}, h))
	go t.serve(h, r, exec) // arguments, not a closure's: nothing keeps them but gqlgen
	<-h.done
}

func (t Transport) serve(h *handoff, r *http.Request, exec graphql.GraphExecutor) {
	defer h.release() // the handshake failed: gqlgen answered on h.w
	t.Websocket.Do(h.w, r, exec)
}
