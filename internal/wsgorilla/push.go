package wsgorilla

import (
	"sync"

	"github.com/awareness/awareness/internal/substream"
)

// This file is the push path of subscriptions: a subscription value
// (substream.Subscription) the resolver hands the operation's transport (Serve) is
// served by the connection itself instead of by a goroutine running gqlgen's response
// loop. gqlgen's executor still creates and executes the operation (parsing,
// validation, authentication, the cost and depth limits, the resolver); the resolver
// then hands its subscription to the connection and lets gqlgen's part end at once.
// The publisher pushes each value into the connection's queue (Stream.Push, which never
// blocks), and one writer goroutine per connection, started when the queue becomes
// non-empty and gone when it is empty again, encodes and writes the frames. An idle
// subscription therefore costs no goroutine: a connection with any number of them
// holds only its reader.

// Encoder appends the payload of one `next` frame (graphql-transport-ws; `data` on
// graphql-ws) for a value pushed with Stream.Push: a GraphQL response, such as
// {"data":{"field":{…}}} (substream.Subscription.Frame). It runs on the connection's
// writer goroutine.
type Encoder func(b []byte, v any) []byte

// Stream is an operation of a connection whose frames the connection writes itself
// (see Serve). Its methods are safe for concurrent use.
type Stream struct {
	c     *Conn
	id    string
	enc   Encoder
	limit int // live frames queued at most (Push)

	// Guarded by c.pushMu.
	queued int    // live frames in c.queue
	unsub  func() // ends the application's subscription; nil until Start
	// gqlgen is true until gqlgen's own part of the operation ended (its response
	// loop's end, whose `complete` the connection swallows: the operation goes on).
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

// Serve implements substream.Op: a subscription whose frames the application can
// write (sub.Frame) becomes a push stream of the connection (adopt), opened with the
// stream's queue as its sink; the resolver then lets gqlgen's part of the operation
// end (its response stream yields nil), and the `complete` that would end the
// operation then is not sent. The stream ends when the client completes it (the
// connection answers with `complete`, as for any operation), when the connection
// ends (both unsubscribe), or when the subscription ends (its sink's End): a drop
// closes the connection with 1013 (dropSlow), errors end the operation with an
// `error` frame. A subscription without Frame, an operation the client completed
// already, or a closing connection is NotServed: the resolver serves it on gqlgen's
// channel.
func (op *operation) Serve(sub *substream.Subscription) (substream.Mode, error) {
	if sub.Frame == nil {
		return substream.NotServed, nil
	}
	s, ok := op.c.adopt(op.id, sub.Frame, sub.Limit)
	if !ok {
		return substream.NotServed, nil
	}
	unsubscribe, err := sub.Open(substream.Sink{Push: s.Push, End: s.end})
	if err != nil {
		s.Abandon()
		return substream.NotServed, err
	}
	s.Start(unsubscribe)
	return substream.Pushed, nil
}

// Ended implements substream.Op for a subscription served by gqlgen's response loop
// (run): a drop closes the connection at once (dropSlow); errors make run end the
// operation with an `error` frame in place of `complete`.
func (op *operation) Ended(e substream.End) {
	switch {
	case e.Dropped:
		op.c.dropSlow()
	case e.Errors != nil:
		op.mu.Lock()
		op.errs = e.Errors
		op.mu.Unlock()
	}
}

// LastEventID implements substream.Op: a WebSocket does not resume streams.
func (*operation) LastEventID() string { return "" }

// end is the End of a push stream's sink.
func (s *Stream) end(e substream.End) {
	switch {
	case e.Dropped:
		s.End()
		s.c.dropSlow()
	case e.Errors != nil:
		s.Fail(e.Errors)
	default:
		s.End() // unsubscribed: the client's complete, the connection's end
	}
}

// adopt makes operation id a push stream: from now on the connection writes its
// frames, each value given to Push encoded by enc, at most limit of them waiting
// (the values pushed with replay are not counted). The caller subscribes with Push as
// its sink and calls Start with the unsubscribe function (or Abandon when the
// subscription failed). ok is false when the client completed id already, or when
// the connection is closing.
func (c *Conn) adopt(id string, enc Encoder, limit int) (*Stream, bool) {
	if id == "" {
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
// (its error, its complete) as it would have without Serve.
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

// appendNext encodes one value frame of s as appendMessage encodes a message.
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

// swallow reports whether a frame ending operation id must not be sent: the
// `complete` that ends gqlgen's part of an adopted operation that goes on. An `error`
// from gqlgen's part ends the stream (it is sent). Either ends gqlgen's part.
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
// over, the connection answers with `complete` itself (the end of gqlgen's part
// answers otherwise).
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
