package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/awareness/awareness/bench/internal/loadkeys"
)

// noticeSubscription is what every client subscribes to, for its own watcher
// (loadkeys.Watcher of its index).
const noticeSubscription = `subscription($w: String) { staleNotices(watcher: $w) {
  watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt } }`

// noticeFeedSubscription is noticeSubscription as a feed (-feed, FEED-3): the same
// notice fields, and the feed's markers, which the recorder does not count.
const noticeFeedSubscription = `subscription($w: String) { staleNoticeFeed(watcher: $w) { __typename
  ... on StaleNotice { watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt }
  ... on FeedSynced { replayed } ... on FeedBookmark { at } } }`

// wsClient is one graphql-transport-ws connection with one subscription (id "1").
// Writes are serialised by wmu; done is closed when its reader ends.
type wsClient struct {
	idx  int
	c    *websocket.Conn
	wmu  sync.Mutex
	done chan struct{}
	once sync.Once
}

// connect dials clients lo..hi-1, 64 at a time; each sends connection_init, waits for
// connection_ack, subscribes (id "1") and starts its reader.
func (r *runner) connect(ctx context.Context, lo, hi int) error {
	t0 := time.Now()
	sem := make(chan struct{}, 64)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	fresh := make([]*wsClient, hi-lo)
	for i := lo; i < hi; i++ {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var c *wsClient
			var err error
			for attempt := range 3 {
				if c, err = r.dial(ctx, i); err == nil {
					break
				}
				time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if firstErr == nil {
					firstErr = fmt.Errorf("client %d: %w", i, err)
				}
				return
			}
			fresh[i-lo] = c
		})
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break
		}
	}
	wg.Wait()
	for _, c := range fresh {
		if c != nil {
			r.clients = append(r.clients, c)
		}
	}
	logf("connected clients %d..%d in %v", lo, hi-1, time.Since(t0).Round(time.Millisecond))
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

func (r *runner) dial(ctx context.Context, i int) (*wsClient, error) {
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 20 * time.Second}
	hdr := http.Header{}
	if k, v, ok := strings.Cut(r.cfg.header, ":"); ok {
		hdr.Set(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	conn, resp, err := d.DialContext(ctx, r.srv.WS, hdr)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return nil, err
	}
	c := &wsClient{idx: i, c: conn, done: make(chan struct{})}
	initPayload := map[string]any{}
	if k, v, ok := strings.Cut(r.cfg.header, ":"); ok {
		initPayload[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	if err := c.write(map[string]any{"type": "connection_init", "payload": initPayload}); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		var f struct {
			Type string `json:"type"`
		}
		if err := conn.ReadJSON(&f); err != nil {
			conn.Close()
			return nil, fmt.Errorf("waiting for connection_ack: %w", err)
		}
		if f.Type == "connection_ack" {
			break
		}
		if f.Type == "ping" {
			_ = c.write(map[string]any{"type": "pong"})
			continue
		}
		if f.Type != "pong" {
			conn.Close()
			return nil, fmt.Errorf("got %q before connection_ack", f.Type)
		}
	}
	_ = conn.SetReadDeadline(time.Time{})
	query := noticeSubscription
	if r.cfg.feed {
		query = noticeFeedSubscription
	}
	payload := map[string]any{"query": query, "variables": map[string]any{"w": loadkeys.Watcher(i)}}
	if err := c.write(map[string]any{"type": "subscribe", "id": "1", "payload": payload}); err != nil {
		conn.Close()
		return nil, err
	}
	go r.read(c)
	return c, nil
}

func (c *wsClient) write(v any) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.c.WriteJSON(v)
}

func (c *wsClient) close() {
	c.once.Do(func() {
		c.wmu.Lock()
		_ = c.c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
		c.wmu.Unlock()
		_ = c.c.Close()
	})
	<-c.done
}

type inFrame struct {
	Type    string `json:"type"`
	ID      string `json:"id"`
	Payload struct {
		Data struct {
			StaleNotices *inNotice `json:"staleNotices"`
			Feed         *inNotice `json:"staleNoticeFeed"`
		} `json:"data"`
	} `json:"payload"`
}

type inNotice struct {
	Typename string `json:"__typename"`
	Watcher  string `json:"watcher"`
	Target   string `json:"target"`
}

// read timestamps every frame as soon as ReadMessage returns it, answers pings and
// records notices.
func (r *runner) read(c *wsClient) {
	defer close(c.done)
	for {
		_, data, err := c.c.ReadMessage()
		at := time.Now().UnixNano()
		if err != nil {
			r.rec.ended(c.idx, err)
			return
		}
		var f inFrame
		if err := json.Unmarshal(data, &f); err != nil {
			r.rec.bad.Add(1)
			continue
		}
		switch f.Type {
		case "ping":
			_ = c.write(map[string]any{"type": "pong"})
		case "next":
			n := f.Payload.Data.StaleNotices
			if f := f.Payload.Data.Feed; f != nil {
				if f.Typename != "StaleNotice" {
					continue // a marker of the feed
				}
				n = f
			}
			if n == nil {
				r.rec.bad.Add(1)
				continue
			}
			r.frames.Add(1)
			r.frameBytes.Add(int64(len(data)))
			if n.Watcher != "" && n.Watcher != loadkeys.Watcher(c.idx) {
				r.rec.mismatch.Add(1)
			}
			r.rec.frame(c.idx, n.Target, at)
		case "error", "complete":
			r.rec.ended(c.idx, fmt.Errorf("subscription ended: %s", data))
		}
	}
}
