// Package wsgorilla is the service's GraphQL-over-WebSocket transport: a
// graphql.Transport (Transport) that frames with github.com/gorilla/websocket and runs
// every operation through gqlgen's executor (graphql.GraphExecutor: parsing,
// validation, the handler's extensions, error presenter and recover function), and
// implements only the two subprotocols' message state machines itself:
// graphql-transport-ws (preferred) and the legacy graphql-ws.
//
// Why its own protocol code: gqlgen's transport.Websocket serves each connection with
// a goroutine that only waits for the connection's context to end (closeOnCancel),
// beside its reader, and that cannot be removed from outside; an idle subscriber then
// pays two goroutine stacks. Here an idle connection owns exactly one goroutine, its
// reader: the connection's context is watched with context.AfterFunc, the init
// timeout, pings and `ka`s run from timers (keepalive.go), and subscriptions the
// application writes itself (Serve, push.go) park nothing. An operation the push path
// does not take (a query or mutation sent over the socket, a selection the push path
// cannot write) runs gqlgen's response loop on a goroutine of its own while it is
// active, as gqlgen's transport does.
//
// On top of the protocols, the transport gives:
//
//   - a bound on every write (WriteTimeout), so a client that stops reading cannot
//     hold a writer forever, and a capped socket send buffer (DefaultSendBuffer), so
//     that a stalled client is found early and costs bounded memory (write.go);
//   - the read limit (PayloadReadLimit) and read deadlines, so PingInterval detects
//     dead peers;
//   - pings and legacy `ka`s from a timer per connection (PingInterval,
//     KeepAliveInterval, keepalive.go), a small read buffer, pooled write buffers and
//     net/http's hijacked buffers released, so that an idle connection costs little
//     memory; a tracked connection (Conns) is read on a fresh goroutine, not the HTTP
//     handler's, whose stack holds the whole handler chain;
//   - every operation's context carries the operation as its transport (a
//     substream.Op): a subscription's resolver hands it its subscription value, which
//     the connection then serves and owns; a subscription that ends as dropped closes
//     the connection (close code 1013, or at once when its write is stuck), and Conns,
//     to close every connection with 1012 at shutdown, before any stream is
//     cancelled, so that default graphql-ws clients reconnect;
//   - RFC 6455 §8.1: a text message that is not valid UTF-8 closes the connection
//     with 1007;
//   - an origin allow-list with coder/websocket's rules (see OriginAllowed);
//   - the close codes of graphql-transport-ws (see protocol.go): 4400 invalid message,
//     4401 subscribe before connection_init, 4408 initialisation timeout, 4409
//     duplicate subscription id, 4429 second connection_init, and the code an InitFunc
//     refuses a connection with (InitError); and a cap on the operations active on one
//     connection (MaxSubscriptionsPerConn).
package wsgorilla

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/edge"
)

const (
	// WriteTimeout bounds the write of every frame, data or control. A peer that does
	// not drain its socket within it loses the connection.
	WriteTimeout = 10 * time.Second
	// HandshakeTimeout bounds the opening handshake.
	HandshakeTimeout = 10 * time.Second
	// maxCloseReason is the longest close reason a close frame can carry (125 bytes of
	// control payload minus the 2-byte code).
	maxCloseReason = 123
)

// Subprotocols are the GraphQL subprotocols offered, in order of preference.
var Subprotocols = []string{"graphql-transport-ws", "graphql-ws"}

// Transport serves GraphQL over WebSocket (a graphql.Transport: add it to gqlgen's
// handler with AddTransport). The zero value accepts requests without an Origin
// header and same-host origins only.
type Transport struct {
	// AllowedOrigins are extra origins a browser may connect from. A pattern is matched
	// with path.Match, case-insensitively, against the Origin's host ("*.example.com",
	// "localhost:*"), or against scheme://host when it contains "://"
	// ("https://dash.example.com"). Check patterns with ValidateOriginPatterns.
	AllowedOrigins []string
	// Logger receives refused handshakes at debug level; nil discards.
	Logger *slog.Logger
	// ReadBufferSize is the connection's read buffer, held for its whole life; 0 means
	// DefaultReadBufferSize. WriteBufferSize is the size of the write buffers, taken
	// from a pool for each message and returned after it, so an idle connection holds
	// none; 0 means DefaultWriteBufferSize. Either way net/http's own buffers of the
	// hijacked connection are released (see releaseHijacked).
	ReadBufferSize, WriteBufferSize int
	// PingInterval, when positive, makes the transport send a graphql-transport-ws
	// ping every interval and drop a peer that answers none within twice the interval
	// of the ping (a read deadline), from a timer per connection.
	PingInterval time.Duration
	// KeepAliveInterval, when positive, makes the transport send the legacy
	// graphql-ws `ka` every interval, from a timer per connection.
	KeepAliveInterval time.Duration
	// InitTimeout is how long a client has to send connection_init before the
	// connection is closed with 4408; 0 waits forever.
	InitTimeout time.Duration
	// MaxSubscriptions caps the operations active at once on one connection; 0 means
	// MaxSubscriptionsPerConn.
	MaxSubscriptions int
	// SendBufferSize is the socket send buffer requested for each connection; 0 means
	// DefaultSendBuffer, a negative value leaves the kernel's autotuning alone.
	SendBufferSize int
	// PayloadReadLimit is the largest client message accepted, in bytes; a larger one
	// closes the connection with 1009. 0 means DefaultPayloadReadLimit, a negative
	// value sets no limit.
	PayloadReadLimit int64
	// Conns, when set, tracks every open connection so that the server can close them
	// all with a close code of its choice at shutdown (Conns.CloseAll). A tracked
	// connection is served on a goroutine of its own and outlives its HTTP handler
	// (see Do).
	Conns *Conns

	// InitFunc, when set, is called with the handshake's Authorization header and the
	// connection_init payload, on the connection's reader. The context it returns is the connection's from then on
	// (every operation runs under it, and its end closes the connection with 1000);
	// the payload it returns, when not nil, is connection_ack's. An error refuses the
	// connection: on graphql-ws it is sent as connection_error first, and the
	// connection closes with the *InitError's code and reason (1000 "terminated" for
	// any other error).
	InitFunc InitFunc
	// ErrorFunc, when set, is told of read errors (other than the peer's close) and
	// failed writes, as gqlgen's transport.WebsocketError.
	ErrorFunc transport.WebsocketErrorFunc
	// CloseFunc, when set, is called once when the connection closes, with the close
	// code the server sent (or would have sent, when the peer was gone).
	CloseFunc transport.WebsocketCloseFunc
}

// DefaultPayloadReadLimit is the read limit when Transport.PayloadReadLimit is 0
// (gqlgen's default too).
const DefaultPayloadReadLimit = 1 << 20

// InitFunc authenticates a connection at connection_init. authorization is the
// handshake's Authorization header, "" when it had none: a browser cannot set one, so
// a token may come in the payload instead.
type InitFunc func(ctx context.Context, authorization string, payload transport.InitPayload) (context.Context, *transport.InitPayload, error)

// InitError is what an InitFunc returns to refuse a connection with a close code of
// its choice (4401 for a missing token, 4403 …). Its message is Err's.
type InitError struct {
	Code   int    // the close code
	Reason string // the close reason
	Err    error
}

func (e *InitError) Error() string { return e.Err.Error() }
func (e *InitError) Unwrap() error { return e.Err }

var _ graphql.Transport = Transport{}

// ErrOriginNotAllowed is the handshake error of a request whose Origin is refused.
var ErrOriginNotAllowed = errors.New("wsgorilla: request origin not allowed")

// Supports implements graphql.Transport: what edge.Of calls a WebSocket handshake.
func (t Transport) Supports(r *http.Request) bool { return edge.Of(r) == edge.WebSocket }

// Do implements graphql.Transport: it upgrades the request and serves the connection.
// A failed handshake is answered with 400 "unable to upgrade" (put Guard in front to
// refuse foreign origins with 403 instead).
//
// With Conns set, the connection is read on a fresh goroutine and Do returns at once:
// net/http runs a handler on the goroutine that read the request, whose stack holds
// the whole handler chain and grew with everything it ran, an idle subscriber's
// largest cost if it became the connection's reader. The connection's context is
// then the request's without its cancellation (net/http cancels it when the handler
// returns): the connection ends when the peer or the server closes it (CloseAll), and
// its operations see only the Upgrade header of the handshake (the middleware in
// front has read the others; see trimHeader). Without Conns the handler's goroutine
// reads the connection, under the request's context.
func (t Transport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	c, err := t.accept(w, r)
	if err != nil {
		transport.SendErrorf(w, http.StatusBadRequest, "unable to upgrade")
		return
	}
	c.exec = exec
	if t.InitFunc != nil {
		c.authorization = strings.Clone(r.Header.Get("Authorization"))
	}
	if t.Conns == nil {
		c.ctx, c.headers = r.Context(), r.Header
		c.serve()
		return
	}
	// No cancellation at all: the contexts of the operations under it then register
	// with no parent.
	c.ctx, c.headers = context.WithoutCancel(r.Context()), trimHeader(r.Header)
	if !t.Conns.add(c) {
		// Shutting down: the connection opened after CloseAll ran. It is closed at
		// once; its reader ends at the peer's close frame.
		c.closeWithin(CloseServiceRestart, "service restart", closeFrameTimeout)
	}
	go c.serve()
}

// trimHeader returns the header the operations of a tracked connection see: the one
// field they read (Upgrade, which tells a WebSocket operation from others), instead of
// the handshake's whole header, which the connection would otherwise keep for its
// whole life.
func trimHeader(h http.Header) http.Header {
	// A copy: net/http carves every value of a header from one allocation.
	return http.Header{"Upgrade": {strings.Clone(h.Get("Upgrade"))}}
}

// accept upgrades the request; on failure nothing has been written to w.
func (t Transport) accept(w http.ResponseWriter, r *http.Request) (*Conn, error) {
	if err := t.checkOrigin(r); err != nil {
		t.logger().Debug("websocket handshake refused", "remote", r.RemoteAddr, "err", err)
		return nil, err
	}
	var handshakeErr error
	readSize, writeSize := t.ReadBufferSize, t.WriteBufferSize
	if readSize <= 0 {
		readSize = DefaultReadBufferSize
	}
	if writeSize <= 0 {
		writeSize = DefaultWriteBufferSize
	}
	up := websocket.Upgrader{
		HandshakeTimeout: HandshakeTimeout,
		ReadBufferSize:   readSize,
		WriteBufferSize:  writeSize,
		WriteBufferPool:  writeBufferPool(writeSize),
		Subprotocols:     Subprotocols,
		CheckOrigin:      func(*http.Request) bool { return true }, // checked above
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			// Do answers the request itself.
			handshakeErr = fmt.Errorf("wsgorilla: handshake failed (%d): %w", status, reason)
		},
	}
	h := &hijacker{ResponseWriter: w}
	ws, err := up.Upgrade(h, r, nil)
	if err != nil {
		if handshakeErr != nil {
			err = handshakeErr
		}
		t.logger().Debug("websocket handshake failed", "remote", r.RemoteAddr, "err", err)
		return nil, err
	}
	releaseHijacked(h.brw)
	t.capSendBuffer(ws)
	limit := t.PayloadReadLimit
	if limit == 0 {
		limit = DefaultPayloadReadLimit
	}
	if limit > 0 {
		ws.SetReadLimit(limit)
	}
	return t.newConn(ws), nil
}

// capSendBuffer applies SendBufferSize (see DefaultSendBuffer). A connection that is
// not a socket keeps its buffering.
func (t Transport) capSendBuffer(ws *websocket.Conn) {
	n := t.SendBufferSize
	if n == 0 {
		n = DefaultSendBuffer
	}
	if n < 0 {
		return
	}
	if s, ok := ws.NetConn().(interface{ SetWriteBuffer(int) error }); ok {
		if err := s.SetWriteBuffer(n); err != nil {
			t.logger().Debug("websocket send buffer not set", "err", err)
		}
	}
}

// Guard refuses WebSocket upgrades from origins Do would refuse, with 403 and a
// GraphQL-shaped JSON body, before next runs. Other requests pass through.
func (t Transport) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if edge.Of(r) == edge.WebSocket {
			if err := t.checkOrigin(r); err != nil {
				t.logger().Debug("websocket handshake refused", "remote", r.RemoteAddr, "err", err)
				edge.Forbid(w, err.Error())
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (t Transport) logger() *slog.Logger {
	if t.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return t.Logger
}

func (t Transport) checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if OriginAllowed(origin, r.Host, t.AllowedOrigins) {
		return nil
	}
	return fmt.Errorf("%w: origin %q may not connect to host %q", ErrOriginNotAllowed, origin, r.Host)
}

// OriginAllowed reports whether a request with the given Origin header may open a
// WebSocket on host. The rules are coder/websocket's: no Origin header (a gateway or
// another non-browser client) is allowed; an origin whose host equals the request's
// host is allowed; otherwise one of patterns must match the origin's host (or
// scheme://host for patterns containing "://"). An Origin that is not a URL with a
// host ("null") is refused.
func OriginAllowed(origin, host string, patterns []string) bool {
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	if strings.EqualFold(u.Host, host) {
		return true
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, err := path.Match(strings.ToLower(p), strings.ToLower(target)); err == nil && ok {
			return true
		}
	}
	return false
}

// ValidateOriginPatterns reports the first malformed pattern of AllowedOrigins.
func ValidateOriginPatterns(patterns []string) error {
	for _, p := range patterns {
		if strings.TrimSpace(p) == "" {
			return errors.New("empty origin pattern")
		}
		if _, err := path.Match(strings.ToLower(p), ""); err != nil {
			return fmt.Errorf("origin pattern %q: %w", p, err)
		}
	}
	return nil
}

// Conn is one accepted connection: its reader (serve.go), its writes (one at a time,
// as gorilla allows) and the operations it serves.
type Conn struct {
	ws    *websocket.Conn
	mu    sync.Mutex // guards data-frame writes
	watch *writeWatch

	closeSent atomic.Bool  // a close frame was written; later ones are dropped
	closeCode atomic.Int32 // the code of the first close frame; 0 before it
	proto     protocolState
	keep      *keepAlive // nil without PingInterval / KeepAliveInterval
	conns     *Conns     // the registry that tracks the connection; nil when none
	pushState            // the operations the connection writes itself (push.go)
	opState              // the operations gqlgen's response loop serves (serve.go)

	// Set before the reader starts and only read after.
	exec      graphql.GraphExecutor
	headers   http.Header // every operation's Headers
	errorFunc transport.WebsocketErrorFunc
	closeFunc transport.WebsocketCloseFunc
	initFunc  InitFunc
	// authorization is the handshake's Authorization header for initFunc, dropped
	// once it ran.
	authorization string
	// ctx is the connection's context: the request's, then InitFunc's. Written by the
	// reader at connection_init, before any operation starts.
	ctx context.Context
}

// writeText writes one text message within WriteTimeout; a failed write closes the
// connection, with a reset (abort): gorilla's write errors are permanent (a timed-out
// write may have sent half a frame), what failed is a write timeout or a peer that is
// gone, and the frames queued before it are not for anyone any more. Closing ends the
// reader at once, which cancels every operation of the connection; the client sees
// the connection end and resubscribes from durable state (NTC-5). A write after the
// close frame (gorilla refuses it) leaves the connection to the closing handshake,
// which ends it: closing here would queue a FIN behind the backlog ahead of the close
// frame, where the handshake's cut-off can no longer discard it.
func (c *Conn) writeText(data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watch.begin()
	err := c.ws.WriteMessage(websocket.TextMessage, data)
	c.watch.end()
	if err != nil && !errors.Is(err, websocket.ErrCloseSent) {
		c.abort()
	}
	return err
}

// writeClose sends a close frame, within WriteTimeout. It does not wait for the peer's
// reply. Only the first close frame is sent: when the transport closed the connection
// with a protocol code, a later close (1000 at the reader's end) is dropped.
func (c *Conn) writeClose(code int, reason string) error {
	if !c.closeSent.CompareAndSwap(false, true) {
		return nil
	}
	c.closeCode.Store(int32(code))
	if len(reason) > maxCloseReason {
		reason = strings.ToValidUTF8(reason[:maxCloseReason], "")
	}
	return c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(WriteTimeout))
}

// Close closes the network connection: the reader's next read fails, the timers stop,
// and every operation of the connection ends (the adopted ones unsubscribe, the
// others' contexts are cancelled).
func (c *Conn) Close() error {
	if c.conns != nil {
		c.conns.remove(c)
	}
	c.proto.stop()
	c.watch.stop()
	c.keep.stop()
	err := c.ws.Close()
	c.closeStreams()
	c.cancelOps()
	return err
}

// Subprotocol returns the negotiated subprotocol.
func (c *Conn) Subprotocol() string { return c.ws.Subprotocol() }

// hijacker makes sure gorilla finds an http.Hijacker even behind middleware that
// wraps the ResponseWriter (gorilla only asserts the interface, while
// http.ResponseController also follows Unwrap), and keeps the buffers net/http hands
// over with the connection so that the transport can release them.
type hijacker struct {
	http.ResponseWriter
	brw *bufio.ReadWriter
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	h.brw = brw
	return conn, brw, err
}

// releaseHijacked drops the 4 KiB read and write buffers net/http hands over with a
// hijacked connection. gorilla uses neither (the transport gives it its own read buffer
// and a write buffer pool) once it has written the handshake response, but net/http's
// connection struct keeps pointing at both for as long as the handler runs, that is
// the WebSocket's whole life: 8 KiB per idle connection. Zeroing the bufio values
// (they are net/http's own, which it no longer touches once hijacked) lets them go.
func releaseHijacked(brw *bufio.ReadWriter) {
	if brw == nil {
		return
	}
	if brw.Reader != nil {
		*brw.Reader = bufio.Reader{}
	}
	if brw.Writer != nil {
		*brw.Writer = bufio.Writer{}
	}
}

// dropSlow ends the connection because one of its subscriptions fell behind (a
// drop, substream.End.Dropped). The connection, not only the stream, ends, with close
// code 1013 (Try Again Later, RFC 6455): an `error` frame would end the operation for
// good in graphql-ws's client, while on 1013 it reconnects with its default options
// and subscribes again, and the service then sends every notice still pending first
// (NTC-5). When a write is in progress it is stuck behind a client that does not
// read, and would hold the connection until WriteTimeout: the socket is then closed
// at once, without a close frame and with a reset that discards the frames still
// queued for the client (see abort; the client sees 1006, which it retries too). It
// does not block (it runs on the publishing goroutine) and may run more than once;
// the close frame is written on a goroutine of its own within closeFrameTimeout.
func (c *Conn) dropSlow() {
	if c.watch.writing() {
		c.abort()
		return
	}
	go c.closeWithin(CloseTryAgainLater, "Try again later: a subscription of this connection fell behind", closeFrameTimeout)
}

// closeFrameTimeout bounds the close frame written when the server ends a connection
// (shutdown, a slow subscriber), so that one stuck client cannot hold up the others.
const closeFrameTimeout = time.Second

// closeWithin starts the closing handshake of RFC 6455 §7.1: it sends a close frame
// with code within d and leaves the connection open for the peer's close frame, which
// ends the connection's reader and with it the connection; a peer that does not answer
// within d more is cut off (abort). Closing the socket at once instead would let a
// frame the peer sent meanwhile (a pong) arrive at a closed socket, whose RST can make
// the peer lose the close frame and see 1006.
func (c *Conn) closeWithin(code int, reason string, d time.Duration) {
	if !c.closeSent.CompareAndSwap(false, true) {
		return
	}
	c.closeCode.Store(int32(code))
	if err := c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(d)); err != nil {
		c.abort()
		_ = c.Close()
		return
	}
	time.AfterFunc(d, func() {
		c.abort()
		_ = c.Close()
	})
}

// abort closes the socket with a reset (SO_LINGER 0), discarding what the kernel
// still holds for the peer, for a connection the server cuts off because its peer
// does not read (a stuck write, a close frame it does not answer). A plain close
// queues its FIN behind that backlog, up to the socket's send buffer of frames nobody
// wants any more: a peer that reads slowly, or whose receive window is smaller than
// a segment (TCP then trickles on the persist timer, backing off up to minutes),
// would learn that its connection ended only after reading all of it, and would sit
// on a dead connection instead of reconnecting (NTC-5). The reset reaches it at once,
// after what its own buffers hold: a browser and graphql-ws report 1006. The socket
// is closed, not the Conn: the read that fails then ends the connection.
func (c *Conn) abort() {
	nc := c.ws.NetConn()
	if t, ok := nc.(interface{ NetConn() net.Conn }); ok {
		nc = t.NetConn() // TLS: the TCP connection under it
	}
	if l, ok := nc.(interface{ SetLinger(int) error }); ok {
		_ = l.SetLinger(0)
	}
	_ = c.ws.Close()
}

// Conns tracks open connections (Transport.Conns). The zero value is ready to
// use; it belongs to the server that shuts the connections down.
type Conns struct {
	mu     sync.Mutex
	m      map[*Conn]struct{}
	closed bool
}

func (s *Conns) add(c *Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = map[*Conn]struct{}{}
	}
	s.m[c] = struct{}{}
	c.conns = s
	return true
}

func (s *Conns) remove(c *Conn) {
	s.mu.Lock()
	delete(s.m, c)
	s.mu.Unlock()
}

// Len returns the number of open connections.
func (s *Conns) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// CloseAll closes every open connection with code and reason (CloseServiceRestart at
// shutdown), each close frame written within closeFrameTimeout and all at once, waits
// for the peers' close frames (at most closeFrameTimeout more: then the connection is
// cut off, see abort) and closes connections accepted after it the same way. The end of a
// connection ends its reader, which ends the connection's operations: the
// close frame is on the wire before any stream learns it ended. It returns the number
// of connections it closed.
func (s *Conns) CloseAll(code int, reason string) int {
	s.mu.Lock()
	s.closed = true
	conns := make([]*Conn, 0, len(s.m))
	for c := range s.m {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		// A write in progress delays the close frame; a stuck one makes it fail
		// after closeFrameTimeout, and the connection is then cut off.
		wg.Go(func() { c.closeWithin(code, reason, closeFrameTimeout) })
	}
	wg.Wait()
	// The peers answer with their close frames (or are cut off after
	// closeFrameTimeout); each connection leaves s when it closes.
	for deadline := time.Now().Add(2 * closeFrameTimeout); s.Len() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	return len(conns)
}
