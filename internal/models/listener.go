package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/internal/awareness"
)

// Listener defaults.
const (
	// DefaultNoticePoll is how often a Listener rescans every pending notice even when
	// its connection is healthy: the safety net for a hint lost in between.
	DefaultNoticePoll = 30 * time.Second
	// ListenerAppName prefixes the application_name of a listener connection; the
	// process id follows ("awareness-listener/1234"), so an operator can find it in
	// pg_stat_activity.
	ListenerAppName = "awareness-listener"

	listenerMinBackoff = 100 * time.Millisecond
	listenerMaxBackoff = 30 * time.Second
	listenerOpTimeout  = 10 * time.Second // one scan, ping or LISTEN
)

// ListenerConfig configures a Listener.
type ListenerConfig struct {
	// Store is the process's PostgreSQL store: the listener reads rows through it and
	// connects with its configuration.
	Store *Store
	// Hub receives the notices and events committed by other processes.
	Hub *awareness.Hub
	// Poll is the safety poll interval; 0 means DefaultNoticePoll.
	Poll   time.Duration
	Logger *slog.Logger
}

// Listener carries notices and events across processes that share one PostgreSQL
// database. It owns one dedicated connection (outside the pools: LISTEN is a session
// state) and one goroutine between Start and Stop.
//
// On every (re)connect it first LISTENs, then scans every pending notice, so that
// nothing committed while it was away is missed; then it waits for hints (notify.go).
// On a hint it reads the pending notices of the named watchers (all of them for a
// rescan hint) and publishes to the hub those it has not published before, and it
// loads the events another process recorded and publishes them. Every Poll it pings
// the connection and rescans. Any connection error closes the connection and
// reconnects after a jittered backoff doubling from 100ms to 30s.
//
// Delivery is at least once: a notice may reach the hub from the writer's own process
// and from the listener, or from a hint and a rescan; Service.SubscribeNotices sends
// each opened notice once per subscription. Events are best effort: those recorded
// while the listener is disconnected are not replayed (subscribers reconcile with
// changesSince), and hints carry events of other processes only.
type Listener struct {
	cfg     ListenerConfig
	appName string
	conns   atomic.Int64 // successful connects, for tests and logs

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}

	// published is owned by the run goroutine: watcher → pair → ID of the notice last
	// published for that pair, for the pairs pending at the last scan.
	published map[string]map[string]string
}

// NewListener returns a stopped listener. The store must be a PostgreSQL store.
func NewListener(cfg ListenerConfig) (*Listener, error) {
	if cfg.Store == nil || cfg.Store.pg == nil {
		return nil, errors.New("models: a Listener needs a PostgreSQL store")
	}
	if cfg.Hub == nil {
		return nil, errors.New("models: a Listener needs a hub")
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultNoticePoll
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Listener{cfg: cfg, appName: fmt.Sprintf("%s/%d", ListenerAppName, os.Getpid())}, nil
}

// Connects returns how many times the listener has connected and listened.
func (l *Listener) Connects() int64 { return l.conns.Load() }

// Start connects and listens in the background until Stop. Starting a started
// listener does nothing.
func (l *Listener) Start(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	l.cancel = cancel
	l.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		l.run(ctx)
	}(l.done)
}

// Stop closes the connection and waits for the goroutine. Stopping a stopped (or never
// started) listener does nothing.
func (l *Listener) Stop() {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

func (l *Listener) run(ctx context.Context) {
	l.published = map[string]map[string]string{}
	backoff := listenerMinBackoff
	for {
		healthy, err := l.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if healthy {
			backoff = listenerMinBackoff
		}
		pause := backoff/2 + rand.N(backoff/2+1)
		l.cfg.Logger.Warn("notice listener: connection lost; reconnecting", "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		backoff = min(2*backoff, listenerMaxBackoff)
	}
}

// session runs one connection: connect, LISTEN, scan, then wait for hints until an
// error. healthy reports whether it got as far as waiting for hints (the reconnect
// backoff then starts over).
func (l *Listener) session(ctx context.Context) (healthy bool, err error) {
	cfg := l.cfg.Store.pg.Copy()
	cfg.RuntimeParams["application_name"] = l.appName
	cctx, cancel := context.WithTimeout(ctx, listenerOpTimeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	cctx, cancel = context.WithTimeout(ctx, listenerOpTimeout)
	_, err = conn.Exec(cctx, "LISTEN "+hintChannel)
	cancel()
	if err != nil {
		return false, err
	}
	n := l.conns.Add(1)
	l.cfg.Logger.Info("notice listener: listening", "connects", n, "poll", l.cfg.Poll)
	// Listen first, then read durable state: a notice committed in between is seen by
	// the scan or announced by a hint (or both; publishing is idempotent).
	if err := l.scan(ctx, nil); err != nil {
		return false, err
	}
	nextPoll := time.Now().Add(l.cfg.Poll)
	for {
		wctx, cancel := context.WithDeadline(ctx, nextPoll)
		note, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return true, nil
		case err == nil:
			if err := l.handle(ctx, note.Payload); err != nil {
				return true, err
			}
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// The safety poll: check the connection, then rescan.
			pctx, cancel := context.WithTimeout(ctx, listenerOpTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return true, err
			}
			if err := l.scan(ctx, nil); err != nil {
				return true, err
			}
			nextPoll = time.Now().Add(l.cfg.Poll)
		default:
			return true, err
		}
	}
}

// handle acts on one hint.
func (l *Listener) handle(ctx context.Context, payload string) error {
	var h hintPayload
	if err := json.Unmarshal([]byte(payload), &h); err != nil {
		l.cfg.Logger.Warn("notice listener: unreadable hint; rescanning", "err", err)
		return l.scan(ctx, nil)
	}
	if h.Origin != l.cfg.Store.origin && len(h.Closed) > 0 {
		// Before the scan, so that a follow-up opened by an ack comes after the item
		// that closes its predecessor.
		closed := make([]awareness.Notice, len(h.Closed))
		for i, c := range h.Closed {
			closed[i] = c.n
		}
		l.cfg.Hub.PublishNotices(closed...)
	}
	if h.All {
		if err := l.scan(ctx, nil); err != nil {
			return err
		}
	} else if len(h.Watchers) > 0 {
		if err := l.scan(ctx, h.Watchers); err != nil {
			return err
		}
	}
	if h.Origin == l.cfg.Store.origin {
		return nil // this process published its own events and closed notices already
	}

	for _, e := range h.Events {
		if err := l.loadEvents(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// scan reads the pending notices of watchers (every watcher when nil) and publishes
// those not published before. A failed read ends the connection: the next one scans
// again.
func (l *Listener) scan(ctx context.Context, watchers []string) error {
	rctx, cancel := context.WithTimeout(ctx, listenerOpTimeout)
	defer cancel()
	ns, err := l.cfg.Store.pendingOf(rctx, watchers)
	if err != nil {
		return fmt.Errorf("scan pending notices: %w", err)
	}
	now := make(map[string]map[string]string)
	var fresh []awareness.Notice
	for _, n := range ns {
		pair, id := n.Target.AgentID+"\x00"+n.Target.Key, n.ID()
		if l.published[n.Watcher][pair] != id {
			fresh = append(fresh, n)
		}
		if now[n.Watcher] == nil {
			now[n.Watcher] = map[string]string{}
		}
		now[n.Watcher][pair] = id
	}
	if watchers == nil {
		l.published = now
	} else {
		for _, w := range watchers {
			if now[w] == nil {
				delete(l.published, w)
			} else {
				l.published[w] = now[w]
			}
		}
	}
	l.cfg.Hub.PublishNotices(fresh...)
	return nil
}

// loadEvents publishes the events of one span recorded by another process. Events
// already pruned or deleted are skipped.
func (l *Listener) loadEvents(ctx context.Context, e eventSpan) error {
	if e.From < 1 || e.To < e.From {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, listenerOpTimeout)
	defer cancel()
	ch, err := l.cfg.Store.ReadChanges(rctx, e.Ref, e.From-1, int(min(e.To-e.From+1, awareness.MaxChangesLimit)))
	if err != nil {
		return fmt.Errorf("load events: %w", err)
	}
	var evs []awareness.Event
	for _, ev := range ch.Events {
		if ev.Sequence <= e.To {
			evs = append(evs, ev)
		}
	}
	l.cfg.Hub.PublishEvents(evs...)
	return nil
}

// pendingOf lists the pending notices of the given watchers (every watcher when nil).
func (s *Store) pendingOf(ctx context.Context, watchers []string) ([]awareness.Notice, error) {
	if watchers == nil {
		return s.Pending(ctx, "")
	}
	if s.closed.Load() {
		return nil, s.wrapErr(errClosed)
	}
	var out []awareness.Notice
	for i := 0; i < len(watchers); i += 500 {
		chunk := watchers[i:min(i+500, len(watchers))]
		curs, err := findCursors(s.r.WithContext(ctx), "watcher_key IN ? AND n > l", []any{chunk},
			"opened_at, watcher_key, target_agent_id, target_key", "")
		if err != nil {
			return nil, s.wrapErr(err)
		}
		for _, c := range curs {
			if n, ok := awareness.NoticeOf(c); ok {
				out = append(out, n)
			}
		}
	}
	return out, nil
}
