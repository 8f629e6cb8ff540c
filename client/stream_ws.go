package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

const subscribeNotices = `subscription($w: String) { staleNotices(watcher: $w, includeClosed: true) { ` + noticeFields + ` } }`

// wsConn is one graphql-transport-ws connection with a subscription per watcher
// session. Its maps are guarded by the Watcher's mu.
type wsConn struct {
	w    *Watcher
	conn *websocket.Conn
	wmu  sync.Mutex
	ids  map[string]string // watcher session → subscription id
	byID map[string]string // subscription id → watcher session
	next int
}

func (c *wsConn) write(m wsMessage) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
	return c.conn.WriteJSON(m)
}

// subscribe starts the subscription of watcher, once per connection, and asks for its
// confirmation.
func (c *wsConn) subscribe(watcher string) {
	c.w.mu.Lock()
	if _, ok := c.ids[watcher]; ok || c.w.subs[watcher] == nil {
		c.w.mu.Unlock()
		return
	}
	c.next++
	id := strconv.Itoa(c.next)
	c.ids[watcher], c.byID[id] = id, watcher
	c.w.mu.Unlock()
	payload, _ := json.Marshal(map[string]any{"query": subscribeNotices, "variables": map[string]any{"w": watcher}})
	if c.write(wsMessage{ID: id, Type: "subscribe", Payload: payload}) != nil {
		_ = c.conn.Close() // the reader sees the failure and reconnects
		return
	}
	// Unless the connection ended meanwhile: the next one subscribes again.
	if c.w.setUpIf(func() bool { return c.w.conn == c }, true, watcher) {
		c.w.enqueueConfirm(watcher)
	}
}

// unsubscribe completes the subscription of watcher.
func (c *wsConn) unsubscribe(watcher string) {
	c.w.mu.Lock()
	id, ok := c.ids[watcher]
	delete(c.ids, watcher)
	delete(c.byID, id)
	c.w.mu.Unlock()
	if ok {
		_ = c.write(wsMessage{ID: id, Type: "complete"})
	}
}

func (c *wsConn) watcherOf(id string) string {
	c.w.mu.Lock()
	defer c.w.mu.Unlock()
	return c.byID[id]
}

// dialWS opens a graphql-transport-ws connection and waits for connection_ack.
func (w *Watcher) dialWS(ctx context.Context) (*wsConn, *StreamError) {
	fail := func(status int, fatal bool, err error) *StreamError {
		return &StreamError{Transport: TransportWebSocket, Status: status, Fatal: fatal, Err: err}
	}
	header := http.Header{}
	if a := w.c.authorization(); a != "" {
		header.Set("Authorization", a)
	}
	dialer := *w.opts.Dialer
	dialer.Subprotocols = []string{"graphql-transport-ws"}
	dctx, cancel := context.WithTimeout(ctx, wsAckWait)
	defer cancel()
	conn, resp, err := dialer.DialContext(dctx, w.c.wsURL, header)
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols {
			if resp.StatusCode == http.StatusUnauthorized {
				return nil, fail(resp.StatusCode, true, fmt.Errorf("%s refused the token", w.c.wsURL))
			}
			return nil, fail(resp.StatusCode, false, fmt.Errorf("%s refused the WebSocket upgrade (%s)", w.c.wsURL, resp.Status))
		}
		return nil, fail(0, false, err)
	}
	stop := context.AfterFunc(dctx, func() { _ = conn.Close() })
	defer stop()
	c := &wsConn{w: w, conn: conn, ids: map[string]string{}, byID: map[string]string{}}
	var initPayload json.RawMessage
	if a := w.c.authorization(); a != "" {
		initPayload, _ = json.Marshal(map[string]string{"Authorization": a})
	}
	if err := c.write(wsMessage{Type: "connection_init", Payload: initPayload}); err != nil {
		_ = conn.Close()
		return nil, fail(0, false, err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(wsAckWait))
	for {
		var m wsMessage
		if err := conn.ReadJSON(&m); err != nil {
			_ = conn.Close()
			return nil, closeError(err)
		}
		switch m.Type {
		case "connection_ack":
			return c, nil
		case "ping":
			_ = c.write(wsMessage{Type: "pong"})
		}
	}
}

// closeError makes a StreamError of a read failure; the close codes that retrying
// cannot fix are fatal.
func closeError(err error) *StreamError {
	se := &StreamError{Transport: TransportWebSocket, Err: err}
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
		switch ce.Code {
		case 4401, 4403, 4400:
			se.Fatal = true
			se.Err = fmt.Errorf("the service closed the connection: %d %s", ce.Code, ce.Text)
		}
	}
	return se
}

// runWS runs one WebSocket connection, conn or a new one: a subscription per
// watcher session, then reads until the connection fails.
func (w *Watcher) runWS(c *wsConn) *StreamError {
	if c == nil {
		var serr *StreamError
		if c, serr = w.dialWS(w.ctx); serr != nil {
			return serr
		}
	}
	defer c.conn.Close()
	stop := context.AfterFunc(w.ctx, func() { _ = c.conn.Close() })
	defer stop()

	w.mu.Lock()
	w.conn, w.current = c, TransportWebSocket
	watchers := make([]string, 0, len(w.subs))
	for watcher := range w.subs {
		watchers = append(watchers, watcher)
	}
	w.updateUpLocked()
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.conn = nil
		for _, s := range w.subs {
			s.up = false
		}
		w.updateUpLocked()
		w.mu.Unlock()
	}()
	for _, watcher := range watchers {
		c.subscribe(watcher)
	}
	// Our pings keep a quiet connection alive through proxies and detect a dead peer.
	pingDone := make(chan struct{})
	defer close(pingDone)
	go func() {
		t := time.NewTicker(streamPing)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if c.write(wsMessage{Type: "ping"}) != nil {
					return
				}
			case <-pingDone:
				return
			}
		}
	}()
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(streamDead))
		var m wsMessage
		if err := c.conn.ReadJSON(&m); err != nil {
			return closeError(err)
		}
		switch m.Type {
		case "ping":
			_ = c.write(wsMessage{Type: "pong"})
		case "next":
			watcher := c.watcherOf(m.ID)
			if watcher == "" {
				continue // a subscription completed since
			}
			if serr := w.item(TransportWebSocket, watcher, m.Payload); serr != nil {
				return serr
			}
		case "error":
			watcher := c.watcherOf(m.ID)
			if watcher == "" {
				continue
			}
			var errs []gqlError
			_ = json.Unmarshal(m.Payload, &errs)
			e := &Error{Message: "subscription error"}
			if len(errs) > 0 {
				e = errs[0].err(0)
			}
			if serr := w.subscriptionError(TransportWebSocket, watcher, e); serr != nil {
				return serr
			}
		case "complete":
			if watcher := c.watcherOf(m.ID); watcher != "" {
				return &StreamError{Transport: TransportWebSocket, Watcher: watcher, Err: errors.New("the service completed the stream")}
			}
		}
	}
}

// item applies one `next` payload of the subscription of watcher. A payload with
// errors is handled as subscriptionError; the StreamError it returns ends the stream.
func (w *Watcher) item(t Transport, watcher string, payload []byte) *StreamError {
	var p struct {
		Data struct {
			StaleNotices *Notice `json:"staleNotices"`
		} `json:"data"`
		Errors []gqlError `json:"errors"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return &StreamError{Transport: t, Watcher: watcher, Err: fmt.Errorf("a malformed item: %w", err)}
	}
	if len(p.Errors) > 0 {
		return w.subscriptionError(t, watcher, p.Errors[0].err(0))
	}
	if n := p.Data.StaleNotices; n != nil {
		w.accept(*n)
	}
	return nil
}

// subscriptionError handles the service's error for the subscription of watcher: an
// outage or RATE_LIMITED ends the stream, to be opened again after RetryAfter; a
// refused token stops the Watcher; any other refusal, such as FORBIDDEN, drops that
// watcher session alone. It returns the error that ends the stream, or nil.
func (w *Watcher) subscriptionError(t Transport, watcher string, e *Error) *StreamError {
	serr := &StreamError{Transport: t, Watcher: watcher, Status: e.Status, Err: e}
	switch {
	case !Permanent(e):
		return serr
	case e.Code == CodeUnauthenticated:
		serr.Fatal = true
		return serr
	}
	serr.Fatal = true
	w.dropWatcher(watcher, serr)
	return nil
}
