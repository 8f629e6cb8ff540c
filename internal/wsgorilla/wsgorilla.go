// Package wsgorilla adapts github.com/gorilla/websocket to gqlgen's WebSocket transport
// (transport.WebsocketImplementation). gqlgen ≥ v0.17.92 ships only a coder/websocket
// adapter; this one adds what the service needs on top of the interface:
//
//   - a bound on every write (WriteTimeout), so a client that stops reading cannot
//     hold a writer forever, and a capped socket send buffer (DefaultSendBuffer), so
//     that a stalled client is found early and costs bounded memory (write.go);
//   - the read limit (transport.WebsocketReadLimiter, fed from PayloadReadLimit) and
//     read deadlines (transport.WebsocketReadDeadliner), so PingPongInterval detects
//     dead peers;
//   - its own pings and legacy `ka`s from a timer per connection (PingInterval,
//     KeepAliveInterval, keepalive.go) instead of gqlgen's goroutine and ticker per
//     connection, a small read buffer, pooled write buffers and net/http's hijacked
//     buffers released, so that an idle connection costs little memory;
//   - subscriptions the connection writes itself (Adopt, push.go): gqlgen executes
//     the operation, then its goroutine for it ends and the publisher's values go
//     to the connection's queue, written by a goroutine that runs only while the
//     queue is not empty; and Transport, which serves a tracked connection on a
//     fresh goroutine instead of the HTTP handler's, whose stack holds the whole
//     handler chain. An idle subscription thus costs no goroutine and a connection
//     two small ones (gqlgen's reader and its cancel watcher);
//   - DropSlow, for the application to end a connection one of whose subscriptions
//     fell behind (close code 1013, or at once when its write is stuck), and Conns,
//     to close every connection with 1012 at shutdown, before any stream is
//     cancelled, so that default graphql-ws clients reconnect;
//   - a normal close (1000, 1001, 1005) mapped to transport.ErrWebsocketClosed;
//   - RFC 6455 §8.1: a text message that is not valid UTF-8 closes the connection
//     with 1007;
//   - the subprotocols graphql-transport-ws (preferred) and graphql-ws;
//   - an origin allow-list with coder/websocket's rules (see OriginAllowed);
//   - the close codes of graphql-transport-ws that gqlgen does not send (see
//     protocol.go): 4400 invalid message, 4401 subscribe before connection_init,
//     4408 initialisation timeout, 4409 duplicate subscription id, 4429 second
//     connection_init; and a cap on the operations active on one connection
//     (MaxSubscriptionsPerConn).
package wsgorilla

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/internal/edge"
	"github.com/awareness/awareness/internal/jsontext"
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

// Implementation accepts WebSocket connections for gqlgen with gorilla/websocket. The
// zero value accepts requests without an Origin header and same-host origins only.
type Implementation struct {
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
	// PingInterval, when positive, makes the adapter send a graphql-transport-ws ping
	// every interval and drop a peer that answers none within twice the interval of
	// the ping (a read deadline), as gqlgen's PingPongInterval does but with a timer instead of a
	// goroutine and a ticker per connection. Leave gqlgen's PingPongInterval at 0 with
	// it: the adapter consumes the pongs.
	PingInterval time.Duration
	// KeepAliveInterval, when positive, makes the adapter send the legacy graphql-ws
	// `ka` every interval (gqlgen's KeepAlivePingInterval, without its goroutine);
	// leave gqlgen's at 0 with it.
	KeepAliveInterval time.Duration
	// InitTimeout is how long a client has to send connection_init before the
	// connection is closed with 4408; 0 waits forever. Leave gqlgen's own
	// transport.Websocket.InitTimeout at 0: it would close with 1002 instead.
	InitTimeout time.Duration
	// MaxSubscriptions caps the operations active at once on one connection; 0 means
	// MaxSubscriptionsPerConn.
	MaxSubscriptions int
	// SendBufferSize is the socket send buffer requested for each connection; 0 means
	// DefaultSendBuffer, a negative value leaves the kernel's autotuning alone.
	SendBufferSize int
	// Conns, when set, tracks every open connection so that the server can close them
	// all with a close code of its choice at shutdown (Conns.CloseAll).
	Conns *Conns
}

var _ transport.WebsocketImplementation = Implementation{}

// ErrOriginNotAllowed is returned by Accept when the request's Origin is refused.
var ErrOriginNotAllowed = errors.New("wsgorilla: request origin not allowed")

// Accept upgrades the request. On failure nothing has been written to w: gqlgen
// answers the request itself (400 "unable to upgrade"). Put Guard in front of the
// handler to refuse foreign origins with 403 before gqlgen sees them.
func (i Implementation) Accept(w http.ResponseWriter, r *http.Request, opts transport.WebsocketAcceptOptions) (transport.WebsocketConn, error) {
	if err := i.checkOrigin(r); err != nil {
		i.logger().Debug("websocket handshake refused", "remote", r.RemoteAddr, "err", err)
		return nil, err
	}
	protocols := slices.Clone(Subprotocols)
	for _, p := range opts.Subprotocols {
		if !slices.Contains(protocols, p) {
			protocols = append(protocols, p)
		}
	}
	var handshakeErr error
	readSize, writeSize := i.ReadBufferSize, i.WriteBufferSize
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
		Subprotocols:     protocols,
		CheckOrigin:      func(*http.Request) bool { return true }, // checked above
		Error: func(w http.ResponseWriter, r *http.Request, status int, reason error) {
			// gqlgen writes the response after Accept fails; writing here too would
			// produce a superfluous WriteHeader.
			handshakeErr = fmt.Errorf("wsgorilla: handshake failed (%d): %w", status, reason)
		},
	}
	h := &hijacker{ResponseWriter: w}
	ws, err := up.Upgrade(h, r, opts.ResponseHeader)
	if err != nil {
		if handshakeErr != nil {
			err = handshakeErr
		}
		i.logger().Debug("websocket handshake failed", "remote", r.RemoteAddr, "err", err)
		return nil, err
	}
	releaseHijacked(h.brw)
	i.capSendBuffer(ws)
	c := i.newConn(ws)
	if i.Conns != nil && !i.Conns.add(c) {
		// Shutting down: the connection opened after CloseAll ran. It is returned
		// closed (gqlgen's first read fails), as the handshake response is written.
		c.closeWithin(CloseServiceRestart, "service restart", closeFrameTimeout)
	}
	if slot, ok := r.Context().Value(connSlotKey{}).(*connSlot); ok {
		slot.c.Store(c)
	}
	handOver(r) // hijacked: the handler may return (Transport)
	return c, nil
}

// capSendBuffer applies SendBufferSize (see DefaultSendBuffer). A connection that is
// not a socket keeps its buffering.
func (i Implementation) capSendBuffer(ws *websocket.Conn) {
	n := i.SendBufferSize
	if n == 0 {
		n = DefaultSendBuffer
	}
	if n < 0 {
		return
	}
	if s, ok := ws.NetConn().(interface{ SetWriteBuffer(int) error }); ok {
		if err := s.SetWriteBuffer(n); err != nil {
			i.logger().Debug("websocket send buffer not set", "err", err)
		}
	}
}

// Guard refuses WebSocket upgrades from origins Accept would refuse, with 403 and a
// GraphQL-shaped JSON body, before next runs. Other requests pass through. An upgrade
// it lets through carries a slot in its context that Accept fills with the connection,
// so that code running under the request's context can reach it (DropSlow).
func (i Implementation) Guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if edge.Of(r) == edge.WebSocket {
			r = r.WithContext(context.WithValue(r.Context(), connSlotKey{}, new(connSlot)))
			if err := i.checkOrigin(r); err != nil {
				i.logger().Debug("websocket handshake refused", "remote", r.RemoteAddr, "err", err)
				type gqlError struct {
					Message    string         `json:"message"`
					Extensions map[string]any `json:"extensions"`
				}
				body, _ := json.Marshal(struct {
					Errors []gqlError `json:"errors"`
				}{[]gqlError{{Message: err.Error(), Extensions: map[string]any{"code": "FORBIDDEN"}}}})
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write(body)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func (i Implementation) logger() *slog.Logger {
	if i.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return i.Logger
}

func (i Implementation) checkOrigin(r *http.Request) error {
	origin := r.Header.Get("Origin")
	if OriginAllowed(origin, r.Host, i.AllowedOrigins) {
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

// Conn is one accepted connection. gqlgen serialises its writes; Conn serialises them
// again (gorilla allows one concurrent writer) so that it is safe on its own.
type Conn struct {
	ws    *websocket.Conn
	mu    sync.Mutex // guards data-frame writes
	watch *writeWatch
	// layout is where gqlgen's message struct keeps its fields (write.go).
	layout atomic.Pointer[messageLayout]

	closeSent atomic.Bool // a close frame was written; later ones are dropped
	proto     protocolState
	keep      *keepAlive // nil without PingInterval / KeepAliveInterval
	conns     *Conns     // the registry that tracks the connection; nil when none
	pushState            // the operations the connection writes itself (push.go)
}

var (
	_ transport.WebsocketConn          = (*Conn)(nil)
	_ transport.WebsocketReadLimiter   = (*Conn)(nil)
	_ transport.WebsocketReadDeadliner = (*Conn)(nil)
)

// NextReader returns the next message, read whole (the read limit bounds its size). A
// normal close by the peer (1000, 1001 going away, 1005 no status) returns
// transport.ErrWebsocketClosed. A text message that is not valid UTF-8 closes the
// connection with 1007.
//
// Every message is checked against the negotiated protocol before gqlgen sees it
// (protocol.go): a message that breaks graphql-transport-ws closes the connection with
// the protocol's close code and NextReader returns a *CloseError; a message the
// adapter answers itself (a ping before connection_init, a subscribe over the cap) is
// not returned.
func (c *Conn) NextReader() (int, io.Reader, error) {
	for {
		typ, r, err := c.ws.NextReader()
		if err != nil {
			if _, ok := errors.AsType[*websocket.CloseError](err); ok && c.closeSent.Load() {
				return typ, nil, transport.ErrWebsocketClosed // the peer answered our close
			}
			return typ, nil, mapReadError(err)
		}
		data, err := io.ReadAll(r)
		if err != nil {
			return typ, nil, mapReadError(err)
		}
		if typ == websocket.TextMessage && !utf8.Valid(data) {
			return typ, nil, c.closeWith(websocket.CloseInvalidFramePayloadData, "text message is not valid UTF-8")
		}
		if typ == websocket.TextMessage && !jsontext.Valid(data) {
			if err := c.refuseText(data); err != nil {
				return typ, nil, err
			}
			continue
		}
		deliver, err := c.inspect(typ, data)
		if err != nil {
			return typ, nil, err
		}
		if deliver {
			return typ, bytes.NewReader(data), nil
		}
	}
}

func mapReadError(err error) error {
	if websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived) {
		return transport.ErrWebsocketClosed
	}
	return err
}

// WriteJSON writes v as one text message, within WriteTimeout. A failed write closes
// the connection: gorilla's write errors are permanent (a timed-out write may have
// sent half a frame), and gqlgen only reports write errors, so without the close the
// connection would stay open, dropping every later frame, until the ping/pong read
// deadline. Closing ends gqlgen's read loop at once, which cancels every operation of
// the connection; the client sees the connection end and resubscribes from durable
// state (NTC-5).
//
// gqlgen's messages are written without a second json.Marshal: their payload is
// already JSON (see appendMessage). Anything else is encoded with encoding/json.
func (c *Conn) WriteJSON(v any) error {
	m, ok := c.decompose(v)
	if !ok {
		data, err := json.Marshal(v)
		if err != nil {
			return err
		}
		c.sent(v)
		return c.writeText(data)
	}
	if m.kind == "complete" || m.kind == "error" {
		if c.swallow(m.id, m.kind) {
			return nil // an adopted operation goes on (push.go)
		}
		c.ended(m.id)
	}
	b := frames.Get().(*[]byte)
	*b = appendMessage((*b)[:0], m)
	err := c.writeText(*b)
	if cap(*b) <= maxPooledFrame {
		frames.Put(b)
	}
	return err
}

// frames reuses frame encodings across connections (a sync.Pool, as encoding/json and
// fmt keep theirs: it holds no state a caller can observe).
var frames = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeText writes one text message within WriteTimeout; a failed write closes the
// connection (see WriteJSON), with a reset (abort): what failed is a write timeout or
// a peer that is gone, and the frames queued before it are not for anyone any more. A
// write after the close frame (gorilla refuses it) leaves the connection to the
// closing handshake, which ends it: closing here would queue a FIN behind the backlog
// ahead of the close frame, where the handshake's cut-off can no longer discard it.
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

// WriteClose sends a close frame, within WriteTimeout. It does not wait for the peer's
// reply: gqlgen closes the connection right after. Only the first close frame is
// sent: when the adapter closed the connection with a protocol code, gqlgen's own
// close (1000 or 1002) that follows is dropped.
func (c *Conn) WriteClose(code int, reason string) error {
	if !c.closeSent.CompareAndSwap(false, true) {
		return nil
	}
	if len(reason) > maxCloseReason {
		reason = strings.ToValidUTF8(reason[:maxCloseReason], "")
	}
	return c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(WriteTimeout))
}

// Close closes the underlying network connection.
func (c *Conn) Close() error {
	if c.conns != nil {
		c.conns.remove(c)
	}
	c.proto.stop()
	c.watch.stop()
	c.keep.stop()
	err := c.ws.Close()
	c.closeStreams()
	return err
}

// Subprotocol returns the negotiated subprotocol.
func (c *Conn) Subprotocol() string { return c.ws.Subprotocol() }

// SetReadLimit sets the largest message accepted; a larger one closes the connection
// with 1009.
func (c *Conn) SetReadLimit(limit int64) { c.ws.SetReadLimit(limit) }

// SetReadDeadline sets the read deadline; the zero time clears it. After a deadline
// passes the connection is unusable, which is how gqlgen's PingPongInterval ends a
// dead peer.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.ws.SetReadDeadline(t) }

// hijacker makes sure gorilla finds an http.Hijacker even behind middleware that
// wraps the ResponseWriter (gorilla only asserts the interface, while
// http.ResponseController also follows Unwrap), and keeps the buffers net/http hands
// over with the connection so that Accept can release them.
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
// hijacked connection. gorilla uses neither (the adapter gives it its own read buffer
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

// connSlot carries the Conn of an upgraded request (see Guard).
type connSlot struct{ c atomic.Pointer[Conn] }

type connSlotKey struct{}

// DropSlow returns a function that ends ctx's WebSocket connection because one of its
// subscriptions fell behind, for the application to call when it drops such a stream.
// The connection, not only the stream, ends, with close code 1013 (Try Again Later,
// RFC 6455): an `error` frame would end the operation for good in graphql-ws's
// client, while on 1013 it reconnects with its default options and subscribes again,
// and the service then sends every notice still pending first (NTC-5). When a write
// is in progress it is stuck behind a client that does not read, and would hold the
// connection until WriteTimeout: the socket is then closed at once, without a close
// frame and with a reset that discards the frames still queued for the client (see
// abort; the client sees 1006, which it retries too). The function does not block (it
// runs on the publishing goroutine); the close frame is written on a goroutine of its
// own within closeFrameTimeout. It returns nil when ctx is not the context of a
// request upgraded through Guard and Accept.
func DropSlow(ctx context.Context) func() {
	slot, ok := ctx.Value(connSlotKey{}).(*connSlot)
	if !ok {
		return nil
	}
	return func() {
		c := slot.c.Load()
		if c == nil {
			return
		}
		if c.watch.writing() {
			c.abort()
			return
		}
		go c.closeWithin(CloseTryAgainLater, "Try again later: a subscription of this connection fell behind", closeFrameTimeout)
	}
}

// closeFrameTimeout bounds the close frame written when the server ends a connection
// (shutdown, a slow subscriber), so that one stuck client cannot hold up the others.
const closeFrameTimeout = time.Second

// closeWithin starts the closing handshake of RFC 6455 §7.1: it sends a close frame
// with code within d and leaves the connection open for the peer's close frame, which
// ends gqlgen's read loop and with it the connection; a peer that does not answer
// within d more is cut off (abort). Closing the socket at once instead would let a
// frame the peer sent meanwhile (a pong) arrive at a closed socket, whose RST can make
// the peer lose the close frame and see 1006.
func (c *Conn) closeWithin(code int, reason string, d time.Duration) {
	if !c.closeSent.CompareAndSwap(false, true) {
		return
	}
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

// Conns tracks open connections (Implementation.Conns). The zero value is ready to
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
// connection ends gqlgen's read loop, which cancels the connection's operations: the
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
