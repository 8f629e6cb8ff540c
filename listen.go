package main

// The HTTP port of serve, and how a restart hands it over without refusing a
// connection. The socket is one of:
//
//   - a socket systemd passes: systemd keeps it open across restarts, so connections
//     wait in its queue while no process serves;
//   - the --addr port bound with SO_REUSEPORT under --reuse-port: the next process
//     binds it too while this one still serves;
//   - the --addr port bound plainly.
//
// At shutdown a socket that another process or systemd also holds is closed first, so
// that new connections go to the next process; a plain one is kept accepting until
// the last moment, drainHTTP in serve.go, since nobody else can take its connections.

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
)

// newConnGrace is how long shutdown leaves a connection in net/http's StateNew,
// accepted without a request yet, to send one: a request already on its way is
// served; a socket a client opened ahead of need is closed then, instead of holding
// http.Server.Shutdown for up to the 5 s net/http gives such connections.
const newConnGrace = 100 * time.Millisecond

// socketKind says where the HTTP socket came from.
type socketKind string

const (
	socketBound     socketKind = "bound"      // --addr, bound by this process alone
	socketReusePort socketKind = "reuse-port" // --addr with SO_REUSEPORT (--reuse-port)
	socketSystemd   socketKind = "systemd"    // passed by systemd (LISTEN_FDS)
)

// handedOver reports whether another process or systemd holds the socket too: the
// next process can then take new connections as soon as this one stops accepting.
func (k socketKind) handedOver() bool { return k != socketBound }

// listenHTTP returns the HTTP socket: the one systemd passed, else --addr bound,
// with SO_REUSEPORT under --reuse-port. A passed socket is checked against the rule
// validate applies to --addr: without --auth-file it must be loopback unless
// --insecure.
func listenHTTP(cfg serveConfig) (net.Listener, socketKind, error) {
	passed, err := activation.Listeners()
	if err != nil {
		return nil, "", fmt.Errorf("socket activation: %w", err)
	}
	if len(passed) > 0 {
		if len(passed) != 1 || passed[0] == nil {
			for _, ln := range passed {
				if ln != nil {
					ln.Close()
				}
			}
			return nil, "", fmt.Errorf("socket activation: systemd passed %d file descriptors; want exactly one listening TCP socket (one ListenStream= in the .socket unit)", len(passed))
		}
		ln := passed[0]
		host, _, _ := net.SplitHostPort(ln.Addr().String())
		if cfg.AuthFile == "" && !cfg.Insecure && !loopbackHost(host) {
			ln.Close()
			return nil, "", fmt.Errorf("socket activation: the socket %s accepts connections from other machines, and no --auth-file is given: every caller would be admin; give --auth-file, listen on 127.0.0.1, or pass --insecure", ln.Addr())
		}
		return ln, socketSystemd, nil
	}
	if cfg.ReusePort {
		ln, err := listenReusePort(cfg.Addr)
		return ln, socketReusePort, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	return ln, socketBound, err
}

// onceListener is a listener whose Close closes it once and returns nil after: the
// drain closes it itself, before http.Server.Shutdown closes it again.
type onceListener struct {
	net.Listener
	once sync.Once
	err  error
}

func (l *onceListener) Close() error {
	l.once.Do(func() { l.err = l.Listener.Close() })
	return l.err
}

// newConns tracks the connections in net/http's StateNew, accepted with no request
// read yet; its hook is the server's ConnState. After closeSoon, such a connection is
// left newConnGrace to send its request, then closed.
type newConns struct {
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closing bool // closeSoon ran: new connections get the grace from then on
	closed  bool // the grace is over: a new connection is closed at once
}

func (n *newConns) hook(c net.Conn, state http.ConnState) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if state != http.StateNew {
		delete(n.conns, c)
		return
	}
	switch {
	case n.closed:
		_ = c.Close()
	case n.closing:
		// Accepted while the listener was closing: it gets the same grace.
		n.conns[c] = struct{}{}
	default:
		if n.conns == nil {
			n.conns = map[net.Conn]struct{}{}
		}
		n.conns[c] = struct{}{}
	}
}

// closeSoon closes, after newConnGrace, every connection still without a request, and
// every one accepted from then on at once; it returns the number waiting now.
func (n *newConns) closeSoon() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closing {
		return 0
	}
	n.closing = true
	if n.conns == nil {
		n.conns = map[net.Conn]struct{}{}
	}
	time.AfterFunc(newConnGrace, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.closed = true
		for c := range n.conns {
			_ = c.Close()
		}
		clear(n.conns)
	})
	return len(n.conns)
}
