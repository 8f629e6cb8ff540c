// The run's clients and statistics: appends and watch sets, PostgreSQL statistics,
// latency distributions.

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
)

const recordMutation = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { recorded noticesOpened } }`

// record appends one human turn into target naming watcher and returns when the answer
// was read.
func (r *runner) record(ctx context.Context, p *server, target, watcher string) (time.Time, error) {
	body, _ := json.Marshal(map[string]any{"query": recordMutation, "variables": map[string]any{"in": map[string]any{
		"sessionKey": target, "kind": "human_direct_message", "actorType": "human", "watchers": []string{watcher}}}})
	req, err := http.NewRequestWithContext(ctx, "POST", p.Base+"/query", bytes.NewReader(body))
	if err != nil {
		return time.Time{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.http.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	at := time.Now()
	if err != nil {
		return at, err
	}
	var a struct {
		Errors []json.RawMessage `json:"errors"`
		Data   struct {
			RecordEvent struct {
				NoticesOpened int `json:"noticesOpened"`
			} `json:"recordEvent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &a); err != nil || len(a.Errors) > 0 || a.Data.RecordEvent.NoticesOpened != 1 {
		return at, fmt.Errorf("recordEvent %s: %s", target, b)
	}
	return at, nil
}

const noticeSubscription = `subscription($w: String) { staleNotices(watcher: $w) { watcher target notifiedVersion } }`

// watchSet is one WebSocket connection to process 0 with one staleNotices
// subscription per watcher; it records when each target's notices arrived.
type watchSet struct {
	c      *websocket.Conn
	mu     sync.Mutex
	frames map[string][]time.Time // target → arrival of each frame
	n      atomic.Int64
	err    atomic.Value
}

func subscribe(ctx context.Context, p *server, watchers []string) (*watchSet, error) {
	d := websocket.Dialer{Subprotocols: []string{"graphql-transport-ws"}, HandshakeTimeout: 20 * time.Second}
	c, _, err := d.DialContext(ctx, p.WS, nil)
	if err != nil {
		return nil, err
	}
	if err := c.WriteJSON(map[string]any{"type": "connection_init"}); err != nil {
		return nil, err
	}
	var ack struct{ Type string }
	if err := c.ReadJSON(&ack); err != nil || ack.Type != "connection_ack" {
		return nil, fmt.Errorf("connection_init: %v %q", err, ack.Type)
	}
	for i, w := range watchers {
		if err := c.WriteJSON(map[string]any{"id": strconv.Itoa(i), "type": "subscribe",
			"payload": map[string]any{"query": noticeSubscription, "variables": map[string]any{"w": w}}}); err != nil {
			return nil, err
		}
	}
	ws := &watchSet{c: c, frames: map[string][]time.Time{}}
	go ws.read()
	return ws, nil
}

func (ws *watchSet) read() {
	for {
		_, data, err := ws.c.ReadMessage()
		at := time.Now()
		if err != nil {
			ws.err.Store(err)
			return
		}
		var m struct {
			Type    string
			Payload struct {
				Data struct {
					StaleNotices struct{ Target string } `json:"staleNotices"`
				} `json:"data"`
			} `json:"payload"`
		}
		if json.Unmarshal(data, &m) != nil {
			continue
		}
		switch m.Type {
		case "next":
			ws.mu.Lock()
			t := m.Payload.Data.StaleNotices.Target
			ws.frames[t] = append(ws.frames[t], at)
			ws.mu.Unlock()
			ws.n.Add(1)
		case "ping":
			_ = ws.c.WriteJSON(map[string]any{"type": "pong"})
		case "error", "complete":
			ws.err.Store(fmt.Errorf("subscription ended: %s", data))
		}
	}
}

// waitFor waits until every target has a frame or the wait is over.
func (ws *watchSet) waitFor(targets []string, wait time.Duration) {
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		ws.mu.Lock()
		missing := 0
		for _, t := range targets {
			if len(ws.frames[t]) == 0 {
				missing++
			}
		}
		ws.mu.Unlock()
		if missing == 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// count returns lost and duplicate notices of targets (each should have one frame).
func (ws *watchSet) count(targets []string) (lost, dupes int) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, t := range targets {
		switch n := len(ws.frames[t]); {
		case n == 0:
			lost++
		case n > 1:
			dupes += n - 1
		}
	}
	return lost, dupes
}

func (ws *watchSet) first(target string) (time.Time, bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	f := ws.frames[target]
	if len(f) == 0 {
		return time.Time{}, false
	}
	return f[0], true
}

type pgStats struct {
	rows, scans int64
	tables      map[string]int64 // rows read per table
}

func readStats(ctx context.Context, dsn string) (pgStats, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return pgStats{}, err
	}
	defer conn.Close(context.Background())
	s := pgStats{tables: map[string]int64{}}
	rows, err := conn.Query(ctx, `SELECT relname, (coalesce(seq_tup_read,0) + coalesce(idx_tup_fetch,0))::bigint,
	(coalesce(seq_scan,0) + coalesce(idx_scan,0))::bigint FROM pg_stat_user_tables`)
	if err != nil {
		return s, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var read, scans int64
		if err := rows.Scan(&name, &read, &scans); err != nil {
			return s, err
		}
		s.rows += read
		s.scans += scans
		s.tables[name] = read
	}
	return s, rows.Err()
}

func terminateListener(ctx context.Context, dsn string, pid int) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var n int
	err = conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = $1 AND datname = current_database()`, fmt.Sprintf("awareness-listener/%d", pid)).Scan(&n)
	return n, err
}

type dist struct{ p50, p99, max time.Duration }

func summarize(ds []time.Duration) dist {
	if len(ds) == 0 {
		return dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return dist{at(0.50), at(0.99), s[len(s)-1]}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
