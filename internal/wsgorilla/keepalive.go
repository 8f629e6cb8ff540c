package wsgorilla

import (
	"sync"
	"time"
)

// keepAlive sends the connection's keep-alive frames from a timer: the
// graphql-transport-ws ping, whose missing pong drops the peer, or the legacy
// graphql-ws `ka`. gqlgen's transport.Websocket (PingPongInterval,
// KeepAlivePingInterval) does the same with a goroutine and a ticker per connection,
// which an idle subscriber pays for the whole of its life (a goroutine stack is several KiB); a timer costs a few hundred
// bytes, and its function runs on a goroutine only while it sends.
//
// The ping follows gqlgen's rules, counted from the ping rather than from
// connection_init: once a ping is written, the peer must answer within twice the
// interval (a read deadline, which ends the connection's reader and with it the
// connection); a pong clears the deadline, and the next ping sets it again. A first
// ping written late (a loaded machine) thus leaves the peer its whole deadline, instead
// of dropping a peer that was never asked.
type keepAlive struct {
	c        *Conn
	interval time.Duration
	frame    []byte
	pingPong bool // graphql-transport-ws: enforce pongs

	mu       sync.Mutex
	timer    *time.Timer
	pong     bool // a pong arrived since the last ping (true before the first ping)
	stopped  bool
	deadline time.Duration // 2 × interval
}

// newKeepAlive returns the keep-alive of c for the negotiated subprotocol, or nil when
// its interval is not set.
func (t Transport) newKeepAlive(c *Conn) *keepAlive {
	switch {
	case c.proto.name == protoTransportWS && t.PingInterval > 0:
		return &keepAlive{c: c, interval: t.PingInterval, frame: []byte(`{"type":"ping"}`), pingPong: true, pong: true, deadline: 2 * t.PingInterval}
	case c.proto.name == protoLegacyWS && t.KeepAliveInterval > 0:
		return &keepAlive{c: c, interval: t.KeepAliveInterval, frame: []byte(`{"type":"ka"}`)}
	}
	return nil
}

// start arms the timer, once connection_init arrived. A nil keepAlive does nothing.
func (k *keepAlive) start() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped || k.timer != nil {
		return
	}
	k.timer = time.AfterFunc(k.interval, k.tick)
}

// tick sends one frame, then re-arms the timer: a write stuck behind a peer that does
// not read (bounded by WriteTimeout) delays the next frame instead of piling up. A ping
// sets the read deadline once written, unless an earlier unanswered ping set it.
func (k *keepAlive) tick() {
	_ = k.c.writeText(k.frame)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return
	}
	if k.pingPong {
		if k.pong {
			_ = k.c.ws.SetReadDeadline(time.Now().Add(k.deadline))
		}
		k.pong = false
	}
	k.timer.Reset(k.interval)
}

// gotPong notes the peer's pong and clears the read deadline. A nil keepAlive does
// nothing.
func (k *keepAlive) gotPong() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pong = true
	_ = k.c.ws.SetReadDeadline(time.Time{})
}

// stop stops the timer for good (the connection is closing). A nil keepAlive does
// nothing.
func (k *keepAlive) stop() {
	if k == nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.stopped = true
	if k.timer != nil {
		k.timer.Stop()
	}
}
