// Command wsbaseline is the bare gorilla/websocket broadcast server that the notice
// latency (L1) and idle memory (L2) runs compare the service with. It speaks just
// enough graphql-transport-ws for bench/cmd/wsload: connection_init → connection_ack,
// subscribe (variables.w names the watcher), ping → pong, complete.
//
// It is the leanest correct gorilla server: one goroutine per connection (the read
// loop, in the HTTP handler's goroutine), no per-connection queue; frames are written
// synchronously, under the connection's write mutex, with a write deadline. A
// broadcast marshals the frame once and writes it to each subscriber in turn.
//
//	POST /notify     {"watcher": i, "target": T}   one frame to subscriber i (L1 a)
//	POST /broadcast  {"target": T, "count": n}     one frame to subscribers 0..n-1 (L1 b)
//	GET  /readyz, /healthz                         ok
//	GET  /debug/stats                              goroutines, heap, stack, frames
//
// Frames are padded to -frame-bytes, the mean size of the service's notice frames. Both
// triggers answer first (flushed) and then write, as the service answers recordEvent
// while its subscribers' frames are still being written.
//
// Usage: wsbaseline -addr 127.0.0.1:PORT -frame-bytes N
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/bench/internal/loadkeys"
	"github.com/awareness/awareness/bench/internal/serve"
)

const writeTimeout = 10 * time.Second

type client struct {
	conn *websocket.Conn
	mu   sync.Mutex // serialises writes
	id   string     // subscription id
}

type server struct {
	frameBytes int
	mu         sync.RWMutex
	subs       map[int]*client
	failed     atomic.Int64
	sent       atomic.Int64
	upgrader   websocket.Upgrader
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	frameBytes := flag.Int("frame-bytes", 420, "size of each notice frame")
	flag.Parse()
	s := &server{frameBytes: *frameBytes, subs: map[int]*client{}}
	s.upgrader = websocket.Upgrader{
		Subprotocols: []string{"graphql-transport-ws"},
		CheckOrigin:  func(*http.Request) bool { return true },
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/query", s.serveWS)
	serve.Triggers{Notify: s.notify, Broadcast: s.broadcast}.Register(mux)
	serve.Health(mux)
	mux.HandleFunc("GET /debug/stats", s.stats)
	ctx, stop := serve.SignalContext()
	defer stop()
	if err := serve.Run(ctx, *addr, mux, 2*time.Second, nil); err != nil {
		log.Fatal(err)
	}
}

type inMsg struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Payload struct {
		Variables struct {
			W string `json:"w"`
		} `json:"variables"`
	} `json:"payload"`
}

// serveWS upgrades and runs the connection's read loop in this goroutine.
func (s *server) serveWS(w http.ResponseWriter, r *http.Request) {
	conn, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	c := &client{conn: conn}
	idx := -1
	defer func() {
		s.mu.Lock()
		if idx >= 0 && s.subs[idx] == c {
			delete(s.subs, idx)
		}
		s.mu.Unlock()
		conn.Close()
	}()
	conn.SetReadLimit(1 << 20)
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return
		}
		var m inMsg
		if err := json.Unmarshal(data, &m); err != nil {
			return
		}
		switch m.Type {
		case "connection_init":
			if c.write([]byte(`{"type":"connection_ack"}`)) != nil {
				return
			}
		case "ping":
			if c.write([]byte(`{"type":"pong"}`)) != nil {
				return
			}
		case "subscribe":
			i, ok := loadkeys.ParseWatcher(m.Payload.Variables.W)
			if !ok {
				return
			}
			c.mu.Lock()
			c.id = m.ID
			c.mu.Unlock()
			idx = i
			s.mu.Lock()
			s.subs[i] = c
			s.mu.Unlock()
		case "complete":
			s.mu.Lock()
			if s.subs[idx] == c {
				delete(s.subs, idx)
			}
			s.mu.Unlock()
		}
	}
}

func (c *client) write(msg []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	err := c.conn.WriteMessage(websocket.TextMessage, msg)
	if err != nil {
		c.conn.Close() // the read loop ends and unregisters
	}
	return err
}

func (s *server) deliver(c *client, msg []byte) {
	if c.write(msg) != nil {
		s.failed.Add(1)
		return
	}
	s.sent.Add(1)
}

// frame builds a next frame of exactly frameBytes bytes (or the unpadded size if that
// is larger), padding the text field.
func (s *server) frame(id, watcher, target string) []byte {
	head := `{"id":"` + id + `","type":"next","payload":{"data":{"staleNotices":{`
	if watcher != "" {
		head += `"watcher":"` + watcher + `",`
	}
	head += `"target":"` + target + `","text":"`
	tail := `"}}}}`
	pad := max(0, s.frameBytes-len(head)-len(tail))
	return []byte(head + strings.Repeat("x", pad) + tail)
}

// notify prepares the frame of subscriber watcher (none when it is not subscribed).
func (s *server) notify(watcher int, target string) (int, func(), error) {
	s.mu.RLock()
	c := s.subs[watcher]
	s.mu.RUnlock()
	if c == nil {
		return 0, nil, nil
	}
	c.mu.Lock()
	id := c.id
	c.mu.Unlock()
	msg := s.frame(id, loadkeys.Watcher(watcher), target)
	return 1, func() { s.deliver(c, msg) }, nil
}

// broadcast prepares one frame, marshalled once, for subscribers 0..count-1.
func (s *server) broadcast(target string, count int) (int, func(), error) {
	msg := s.frame("1", "", target) // every wsload subscription has id "1"
	targets := make([]*client, 0, count)
	s.mu.RLock()
	for i := range count {
		if c := s.subs[i]; c != nil {
			targets = append(targets, c)
		}
	}
	s.mu.RUnlock()
	return len(targets), func() {
		for _, c := range targets {
			s.deliver(c, msg)
		}
	}, nil
}

func (s *server) stats(w http.ResponseWriter, _ *http.Request) {
	s.mu.RLock()
	subs := len(s.subs)
	s.mu.RUnlock()
	serve.WriteStats(w, subs, map[string]any{"frames_sent": s.sent.Load(), "frames_failed": s.failed.Load()})
}
