package wsgorilla

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
)

// This file is the server's write path: every frame to every subscriber goes through
// writeText, so it is kept to one encoding pass, one pooled buffer and no goroutine
// per frame.

// DefaultSendBuffer is the socket send buffer (SO_SNDBUF) requested for an accepted
// connection when Transport.SendBufferSize is 0. Left to itself, Linux grows the
// send buffer of a socket whose peer stops reading up to net.ipv4.tcp_wmem's maximum
// (4 MiB by default): a stalled subscriber then costs that much kernel memory, and the
// server keeps building and writing frames for it until those megabytes are full.
// Capped, the writer blocks after a few hundred KiB at most (the kernel doubles the
// value, and the peer's receive buffer holds some more), so the write timeout starts
// early and a stalled connection costs a bounded amount of memory. 64 KiB is still
// far more than a notice frame, and than a burst of them, to a client that reads.
const DefaultSendBuffer = 64 << 10

// maxPooledFrame is the largest frame buffer kept for reuse (frames), so that one
// huge frame does not pin its buffer.
const maxPooledFrame = 64 << 10

// DefaultReadBufferSize is the read buffer of a connection when
// Transport.ReadBufferSize is 0. Every idle connection holds it while it waits
// for the next message, so it is small: client messages (connection_init, subscribe,
// pong) are a few hundred bytes, and a larger one is read in several pieces.
const DefaultReadBufferSize = 512

// DefaultWriteBufferSize is the size of the pooled write buffers when
// Transport.WriteBufferSize is 0. gorilla's server writes a message as one frame:
// the header and the message's first bytes from this buffer, the rest from the
// message itself, in one writev. So the buffer need not hold a frame, and small
// buffers keep a broadcast (every subscriber's writer takes one at once, and the pool
// empties at every GC) from allocating a burst of large ones.
const DefaultWriteBufferSize = 1 << 10

// writePools holds one buffer pool per write buffer size (gorilla takes a pool's
// buffers as they come, so sizes must not mix). Like frames, pools hold no state a
// caller can observe.
var writePools sync.Map // int → *sync.Pool

func writeBufferPool(size int) websocket.BufferPool {
	if p, ok := writePools.Load(size); ok {
		return p.(*sync.Pool)
	}
	p, _ := writePools.LoadOrStore(size, new(sync.Pool))
	return p.(*sync.Pool)
}

// message is one server message: its payload is JSON already.
type message struct {
	payload  []byte
	id, kind string
}

// appendMessage encodes m as gqlgen's transport.Websocket writes its messages
// (encoding/json of a struct with Payload json.RawMessage `json:"payload,omitempty"`,
// ID `json:"id,omitempty"`, Type `json:"type"`, in that order), so that clients see the
// same frames, byte for byte, without encoding the payload again: it is the output of
// json.Marshal (compact, valid, HTML-escaped), which json.Marshal would only have
// scanned and copied a second time.
func appendMessage(b []byte, m message) []byte {
	b = append(b, '{')
	if len(m.payload) > 0 {
		b = append(b, `"payload":`...)
		b = append(b, m.payload...)
		b = append(b, ',')
	}
	if m.id != "" {
		b = append(b, `"id":`...)
		b = appendString(b, m.id)
		b = append(b, ',')
	}
	b = append(b, `"type":`...)
	b = appendString(b, m.kind)
	return append(b, '}')
}

// appendString appends s as a JSON string the way encoding/json does. Operation ids
// are client-chosen: anything that needs escaping (quotes, backslashes, control
// characters, the HTML characters json.Marshal escapes, U+2028/U+2029, invalid UTF-8)
// goes through encoding/json; plain ASCII, the usual case, is copied.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= utf8.RuneSelf || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// writeWatch enforces WriteTimeout without a socket deadline. gorilla sets the
// socket's write deadline before each frame it writes, a runtime timer modified
// under the poller's locks per frame and subscriber, which a broadcast to thousands
// of connections pays thousands of times. Instead the connection keeps no deadline,
// each write records when it started, and one timer per connection, armed by the
// first write after an idle period, checks the write in progress when it fires: one
// that has run for WriteTimeout gets its connection closed (which fails the write at
// once), a younger one re-arms the timer for the rest of its time. A write is thus
// bounded by WriteTimeout, as with a deadline. A write that ends stops the timer
// (end): a timer left to fire on an idle connection would start a goroutine (the
// timer's function) WriteTimeout after every frame that follows an idle period,
// which for a connection receiving a frame now and then, the usual subscriber, is a
// goroutine started and a thread woken per frame; stopping it costs a timer lock.
type writeWatch struct {
	started atomic.Int64 // UnixNano when the write in progress started; 0 when idle
	armed   atomic.Bool
	timer   *time.Timer // stopped until the first write
	timeout time.Duration
	expire  func() // closes the connection
}

func newWriteWatch(timeout time.Duration, expire func()) *writeWatch {
	w := &writeWatch{timeout: timeout, expire: expire}
	w.timer = time.AfterFunc(time.Hour, w.fire)
	w.timer.Stop()
	return w
}

// begin notes a write starting. The caller holds Conn.mu (one write at a time).
func (w *writeWatch) begin() {
	w.started.Store(time.Now().UnixNano())
	// started is stored before armed is read and fire clears armed before it reads
	// started, so at least one of them sees the other and the write is watched.
	if !w.armed.Load() && w.armed.CompareAndSwap(false, true) {
		w.timer.Reset(w.timeout)
	}
}

// end notes the write finished and stops the timer. The caller holds Conn.mu. The
// timer is stopped before armed is cleared: fire, running meanwhile, may re-arm it
// (armed true, then Reset), and whatever the interleaving, armed ends true only with
// the timer set, so the next begin never finds it armed and not set (at worst the
// timer fires once more, to an idle connection, and disarms itself).
func (w *writeWatch) end() {
	w.started.Store(0)
	if w.armed.Load() {
		w.timer.Stop()
		w.armed.Store(false)
	}
}

// writing reports whether a write is in progress.
func (w *writeWatch) writing() bool { return w.started.Load() != 0 }

// fire runs on the timer's goroutine.
func (w *writeWatch) fire() {
	w.armed.Store(false)
	s := w.started.Load()
	if s == 0 {
		return // idle: the next write arms the timer again
	}
	left := time.Duration(s + int64(w.timeout) - time.Now().UnixNano())
	if left <= 0 {
		w.expire()
		return
	}
	if w.armed.CompareAndSwap(false, true) {
		w.timer.Reset(left)
	}
}

// stop stops the timer (the connection is closing).
func (w *writeWatch) stop() { w.timer.Stop() }
