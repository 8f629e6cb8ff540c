package models

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/awareness/awareness/internal/awareness"
	"github.com/awareness/awareness/internal/startstop"
)

// Listener defaults.
const (
	// DefaultNoticePoll is how often a Listener rescans the pending notices of the
	// watchers of interest even when its connection is healthy: the safety net for a
	// hint lost in between.
	DefaultNoticePoll = 30 * time.Second
	// ListenerAppName prefixes the application_name of a listener connection, followed
	// by the process id as in "awareness-listener/1234", so an operator can find it in
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
	// Observer is told of every reconnect and every hint received; nil: nobody.
	Observer awareness.Observer
	// Bus, when set, carries the hints in place of LISTEN; the store publishes on the
	// same bus, Options.Bus. The listener subscribes to the subjects of its interest
	// and opens no connection of its own.
	Bus HintBus
}

// Listener carries notices and events across processes that share one PostgreSQL
// database. It owns one dedicated connection outside the pools, since LISTEN is
// session state, and one goroutine between Start and Stop, which receives the hints;
// while connected a second one handles them, every hint queued meanwhile in one batch.
// With ListenerConfig.Bus it opens no connection: the hints come from the bus, on the
// subjects of its interest only, and a reconnect of the bus is a rescan.
//
// Hints of this process's own store are skipped: its service has published their
// notices and events already.
//
// It reads only what this process has live subscribers for: the hub tells it, through
// awareness.Interest, which watchers and sessions are subscribed here. On every
// connect it first LISTENs, then scans the pending notices of the watchers of
// interest, so that nothing committed while it was away is missed; then it waits for
// hints. On a hint it reads the pending notices of the named watchers that are of
// interest and publishes to the hub those it has not published before, and it loads
// the events another process recorded in sessions of interest and publishes them. A
// hint that names nothing of interest costs no read at all. Every Poll it pings the
// connection and rescans the watchers of interest. Any connection error closes the
// connection and reconnects after a jittered backoff doubling from 100ms to 30s.
//
// A subscription without a watcher, such as a dashboard's staleNotices for every
// watcher, is interest in every watcher: while one is live the listener reads every
// named watcher and rescans every pending notice, as a process with all subscriptions
// must; likewise a stateEvents subscription without a session loads every foreign
// event span.
//
// Delivery is at least once: a notice may reach the hub from the writer's own process
// and from the listener, or from a hint and a rescan; Service.SubscribeNotices sends
// each opened notice once per subscription. No notice is lost to the interest filter:
// the hub announces a subscription's interest before the service reads its pending
// notices, so a commit whose hint came before the interest is in that read. Events are
// best effort: those recorded while the listener is disconnected are not replayed, as
// subscribers reconcile with changesSince, and hints carry events of other processes
// only.
type Listener struct {
	cfg     ListenerConfig
	appName string
	conns   atomic.Int64 // successful connects, for tests and logs
	hints   atomic.Int64 // hints handled
	scans   atomic.Int64 // full rescans (connect, poll, too-long hint) done
	reads   atomic.Int64 // reads of pending notices
	gaps    atomic.Int64 // gaps the bus reported

	lifecycle startstop.Base

	// imu guards the interest and published; it is never held across a read or a
	// publish, because the hub calls Notice/EventInterest under its own lock.
	imu sync.Mutex
	// allWatchers counts as interest in every watcher; watchers are the keys of
	// interest otherwise.
	allWatchers bool
	watchers    map[string]struct{}
	// allSessions is interest in every session's events; otherwise sessions are the
	// refs of interest, where an empty AgentID means the key under every agent.
	allSessions bool
	sessions    map[awareness.SessionRef]struct{}
	// published: watcher → pair → ID of the notice last published for that pair, for
	// the pending pairs of the watchers of interest at their last read.
	published map[string]map[string]string
}

// ListenerStats are counters of a listener, for tests and measurements.
type ListenerStats struct {
	Connects int64 // successful connects (with a bus: its (re)connects and drops, synced and rescanned)
	Hints    int64 // hints handled
	Rescans  int64 // full rescans of the watchers of interest
	Reads    int64 // reads of pending notices (a scan with nothing of interest reads nothing)
	// Tracked is the number of pending pairs remembered as published: the listener's
	// memory, proportional to the pending notices of the watchers of interest.
	Tracked int
	// Watchers and Sessions are the filters of interest; AllWatchers and AllSessions
	// report interest in everything.
	Watchers, Sessions       int
	AllWatchers, AllSessions bool
}

// Stats returns the listener's counters.
func (l *Listener) Stats() ListenerStats {
	l.imu.Lock()
	defer l.imu.Unlock()
	st := ListenerStats{Connects: l.conns.Load(), Hints: l.hints.Load(), Rescans: l.scans.Load(), Reads: l.reads.Load(),
		Watchers: len(l.watchers), Sessions: len(l.sessions), AllWatchers: l.allWatchers, AllSessions: l.allSessions}
	for _, m := range l.published {
		st.Tracked += len(m)
	}
	return st
}

// NoticeInterest implements awareness.Interest. With a bus it subscribes to the
// watcher's subject, or to every watcher's while interest in every watcher lasts;
// when that ends, it subscribes to the single ones again before leaving the wildcard.
func (l *Listener) NoticeInterest(watcher string, on bool) {
	l.imu.Lock()
	defer l.imu.Unlock()
	switch {
	case watcher == "":
		l.allWatchers = on
		if on {
			l.subscribe(noticeSubject(""))
			for w := range l.watchers {
				l.unsubscribe(noticeSubject(w))
			}
			return
		}
		for w := range l.published {
			if _, ok := l.watchers[w]; !ok {
				delete(l.published, w)
			}
		}
		for w := range l.watchers {
			l.subscribe(noticeSubject(w))
		}
		l.unsubscribe(noticeSubject(""))
	case on:
		l.watchers[watcher] = struct{}{}
		if !l.allWatchers {
			l.subscribe(noticeSubject(watcher))
		}
	default:
		delete(l.watchers, watcher)
		if !l.allWatchers {
			delete(l.published, watcher)
			l.unsubscribe(noticeSubject(watcher))
		}
	}
}

// EventInterest implements awareness.Interest; with a bus it subscribes to the
// session's subject, as NoticeInterest does to a watcher's.
func (l *Listener) EventInterest(ref *awareness.SessionRef, on bool) {
	l.imu.Lock()
	defer l.imu.Unlock()
	switch {
	case ref == nil:
		l.allSessions = on
		if on {
			l.subscribe(eventSubject(nil))
			for r := range l.sessions {
				l.unsubscribe(eventSubject(&r))
			}
			return
		}
		for r := range l.sessions {
			l.subscribe(eventSubject(&r))
		}
		l.unsubscribe(eventSubject(nil))
	case on:
		l.sessions[*ref] = struct{}{}
		if !l.allSessions {
			l.subscribe(eventSubject(ref))
		}
	default:
		delete(l.sessions, *ref)
		if !l.allSessions {
			l.unsubscribe(eventSubject(ref))
		}
	}
}

// subscribe and unsubscribe change the bus's subjects, if there is a bus. A failure is
// logged: the watcher's notices then come with the polls.
func (l *Listener) subscribe(subject string) {
	if l.cfg.Bus == nil {
		return
	}
	if err := l.cfg.Bus.Subscribe(subject); err != nil {
		l.cfg.Logger.Error("notice listener: bus subscription failed; the subject's notices wait for --notice-poll", "subject", subject, "err", err)
	}
}

func (l *Listener) unsubscribe(subject string) {
	if l.cfg.Bus == nil {
		return
	}
	if err := l.cfg.Bus.Unsubscribe(subject); err != nil {
		l.cfg.Logger.Warn("notice listener: bus unsubscription failed", "subject", subject, "err", err)
	}
}

// SyncInterest implements awareness.InterestSync: with a bus, it returns once the bus
// server has the subscriptions announced so far, so that a subscription's read of
// durable state that follows misses no hint: listen, then read. Without a bus the one
// LISTEN covers every watcher and it returns at once. While the bus is down it fails
// at once; the reconnect rescans.
func (l *Listener) SyncInterest(ctx context.Context) error {
	if l.cfg.Bus == nil {
		return nil
	}
	return l.cfg.Bus.Sync(ctx, false)
}

// interestedIn returns the watchers of names that are of interest; a nil names asks
// for every watcher of interest, and all reports interest in every watcher.
func (l *Listener) interestedIn(names []string) (ws []string, all bool) {
	l.imu.Lock()
	defer l.imu.Unlock()
	if l.allWatchers {
		return names, true
	}
	if names == nil {
		ws = make([]string, 0, len(l.watchers))
		for w := range l.watchers {
			ws = append(ws, w)
		}
		slices.Sort(ws)
		return ws, false
	}
	for _, w := range names {
		if _, ok := l.watchers[w]; ok {
			ws = append(ws, w)
		}
	}
	return ws, false
}

// wantsEvents reports whether ref's events are of interest.
func (l *Listener) wantsEvents(ref awareness.SessionRef) bool {
	l.imu.Lock()
	defer l.imu.Unlock()
	if l.allSessions {
		return true
	}
	if _, ok := l.sessions[ref]; ok {
		return true
	}
	_, ok := l.sessions[awareness.SessionRef{Key: ref.Key}]
	return ok
}

// interestedLocked reports whether watcher w is of interest; the caller holds imu.
func (l *Listener) interestedLocked(w string) bool {
	if l.allWatchers {
		return true
	}
	_, ok := l.watchers[w]
	return ok
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
	cfg.Observer = awareness.ObserverOr(cfg.Observer)
	l := &Listener{cfg: cfg, appName: fmt.Sprintf("%s/%d", ListenerAppName, os.Getpid()),
		watchers: map[string]struct{}{}, sessions: map[awareness.SessionRef]struct{}{},
		published: map[string]map[string]string{}}
	// The hub announces the subscriptions live now and every later change.
	cfg.Hub.SetInterest(l)
	return l, nil
}

// Connects returns how many times the listener has connected and listened.
func (l *Listener) Connects() int64 { return l.conns.Load() }

// Start connects and listens in the background until Stop. Starting a started
// listener does nothing.
func (l *Listener) Start(ctx context.Context) { l.lifecycle.Start(ctx, l.run) }

// Stop closes the connection and waits for the goroutine. Stopping a stopped or never
// started listener does nothing.
func (l *Listener) Stop() { l.lifecycle.Stop() }

func (l *Listener) run(ctx context.Context) {
	if l.cfg.Bus != nil {
		l.runBus(ctx)
		return
	}
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
		l.cfg.Observer.ListenerReconnect()
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
// error. healthy reports whether it got as far as waiting for hints, so the reconnect
// backoff starts over.
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
	// the scan, announced by a hint, or both, and publishing is idempotent. The scan
	// covers the watchers of interest only: a subscription that comes later reads its
	// own pending notices after announcing its interest.
	if err := l.scan(ctx, nil); err != nil {
		return false, err
	}
	// This goroutine receives hints; a worker reads and publishes, taking every hint
	// queued meanwhile in one batch with one read for all their watchers, so that a
	// burst of hints does not queue a read each behind one another. A failed read ends
	// the session through sctx.
	sctx, stop := context.WithCancel(ctx)
	work := make(chan string, listenerQueue)
	werr := make(chan error, 1)
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		if err := l.work(sctx, work); err != nil {
			werr <- err
			stop()
		}
	}()
	defer func() { stop(); <-wdone }()
	queue := func(item string) error {
		select {
		case work <- item:
			return nil
		case <-sctx.Done():
			return l.ended(ctx, werr)
		}
	}
	nextPoll := time.Now().Add(l.cfg.Poll)
	for {
		wctx, cancel := context.WithDeadline(sctx, nextPoll)
		note, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case sctx.Err() != nil:
			return true, l.ended(ctx, werr)
		case err == nil:
			l.cfg.Observer.ListenerHint()
			if err := queue(note.Payload); err != nil {
				return true, err
			}
		case errors.Is(err, context.DeadlineExceeded) && !conn.IsClosed():
			// The safety poll: check the connection, then rescan.
			pctx, cancel := context.WithTimeout(sctx, listenerOpTimeout)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return true, err
			}
			if err := queue(rescanItem); err != nil {
				return true, err
			}
			nextPoll = time.Now().Add(l.cfg.Poll)
		default:
			return true, err
		}
	}
}

// listenerQueue bounds the hints received and not yet handled; the receiver waits
// when it is full, and PostgreSQL queues the rest.
const listenerQueue = 1024

// rescanItem, queued to the worker, asks for the safety poll's rescan.
const rescanItem = "\x00rescan"

// ended returns why a session's context ended: the worker's error, or nil when the
// listener is stopping.
func (l *Listener) ended(ctx context.Context, werr chan error) error {
	select {
	case err := <-werr:
		return err
	default:
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("notice listener: worker stopped")
}

// work handles queued hints until ctx ends or a read fails: it takes one item and
// every item queued behind it, and handles them as one.
func (l *Listener) work(ctx context.Context, work <-chan string) error {
	for {
		var batch []string
		select {
		case <-ctx.Done():
			return nil
		case item := <-work:
			batch = append(batch, item)
		}
	more:
		for len(batch) < listenerQueue {
			select {
			case item := <-work:
				batch = append(batch, item)
			default:
				break more
			}
		}
		if err := l.handle(ctx, batch); err != nil {
			return err
		}
	}
}

// handle acts on a batch of hints and rescan requests received together: one read of
// the pending notices of all their watchers of interest, a rescan when any asks for
// one, then the foreign event spans of sessions of interest.
func (l *Listener) handle(ctx context.Context, batch []string) error {
	defer l.hints.Add(int64(len(batch)))
	rescan := false
	watchers := map[string]struct{}{}
	var (
		spans  []eventSpan
		closed []awareness.Notice
	)
	for _, payload := range batch {
		switch payload {
		case rescanItem:
			rescan = true
			continue
		case gapItem:
			if err := l.syncBus(ctx); err != nil {
				l.cfg.Logger.Debug("notice listener: bus not in sync; its reconnect rescans", "err", err)
			} else {
				l.conns.Add(1)
			}
			rescan = true
			continue
		}
		var h hintPayload
		if err := json.Unmarshal([]byte(payload), &h); err != nil {
			l.cfg.Logger.Warn("notice listener: unreadable hint; rescanning", "err", err)
			rescan = true
			continue
		}
		if h.Origin == l.cfg.Store.origin {
			continue // this process published its own notices and events already
		}
		rescan = rescan || h.All
		for _, w := range h.Watchers {
			watchers[w] = struct{}{}
		}
		for _, c := range h.Closed {
			n := c.n
			n.Text = l.cfg.Store.notices.Text(n.Target, n.ChangesSince) // the hint carries no text
			closed = append(closed, n)
		}
		for _, e := range h.Events {
			// Spans are loaded one by one, not merged: the gap between two spans of a
			// session may hold this process's own events, published already.
			if e.From >= 1 && e.To >= e.From && !slices.Contains(spans, e) && l.wantsEvents(e.Ref) {
				spans = append(spans, e)
			}
		}
	}
	// Closed notices before the scan, so that a follow-up opened by an ack comes after
	// the item that closes its predecessor.
	l.cfg.Hub.PublishNotices(closed...)
	switch {
	case rescan:
		if err := l.scan(ctx, nil); err != nil {
			return err
		}
	case len(watchers) > 0:
		names := make([]string, 0, len(watchers))
		for w := range watchers {
			names = append(names, w)
		}
		slices.Sort(names)
		if err := l.scan(ctx, names); err != nil {
			return err
		}
	}
	for _, e := range spans {
		if err := l.loadEvents(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// scan reads the pending notices of those of names that are of interest, or of every
// watcher of interest when names is nil, and publishes those not published before. A
// scan with nothing of interest reads nothing. A failed read ends the connection: the
// next one scans again.
func (l *Listener) scan(ctx context.Context, names []string) error {
	rescan := names == nil
	if rescan {
		l.scans.Add(1)
	}
	watchers, all := l.interestedIn(names)
	if !all && len(watchers) == 0 {
		if rescan {
			l.imu.Lock()
			clear(l.published)
			l.imu.Unlock()
		}
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, listenerOpTimeout)
	defer cancel()
	l.reads.Add(1)
	ns, err := l.cfg.Store.pendingOf(rctx, watchers)
	if err != nil {
		return fmt.Errorf("scan pending notices: %w", err)
	}
	now := make(map[string]map[string]string)
	var fresh []awareness.Notice
	l.imu.Lock()
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
	// Remember only the watchers still of interest: one whose last subscriber left
	// during the read is forgotten, so the memory follows the subscriptions.
	if watchers == nil {
		clear(l.published)
		for w, m := range now {
			if l.interestedLocked(w) {
				l.published[w] = m
			}
		}
	} else {
		for _, w := range watchers {
			if now[w] == nil || !l.interestedLocked(w) {
				delete(l.published, w)
			} else {
				l.published[w] = now[w]
			}
		}
		if rescan {
			for w := range l.published {
				if now[w] == nil {
					delete(l.published, w)
				}
			}
		}
	}
	l.imu.Unlock()
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

// The listener reads pending notices with their holds (RDL-1, RDL-2) in one
// statement, so that it publishes them as the service marks them: a snoozed notice
// not at all, a redelivered or woken one with its delivery, whose new ID the
// listener's dedupe then publishes.
var (
	heldNoticesSQL = strings.Replace(cursorSelect, " FROM cursors ",
		", ho.redeliveries, ho.deliveries, ho.snoozed_until FROM cursors LEFT JOIN notice_holds ho ON "+
			"ho.watcher_key = cursors.watcher_key AND ho.target_agent_id = cursors.target_agent_id AND "+
			"ho.target_key = cursors.target_key AND ho.n = cursors.n ", 1) + " WHERE "
	heldNoticesOrder = " ORDER BY cursors.opened_at, cursors.watcher_key, cursors.target_agent_id, cursors.target_key"
)

// heldNotice is a pending notice with its hold's marks as read.
type heldNotice struct {
	n       awareness.Notice
	ok      bool
	snoozed time.Time
}

func (s *Store) scanHeldNotice(rows *sql.Rows) (heldNotice, error) {
	var (
		r                      CursorRow
		redeliveries, delivers sql.NullInt64
		snoozed                sql.NullInt64
	)
	if err := rows.Scan(append(r.columns(), &redeliveries, &delivers, &snoozed)...); err != nil {
		return heldNotice{}, err
	}
	n, ok := s.notices.Notice(r.cursor())
	n.Redelivered, n.Delivery = redeliveries.Int64 > 0, int(delivers.Int64)
	return heldNotice{n: n, ok: ok, snoozed: nullTime(snoozed)}, nil
}

// markedNotices keeps the notices that are pending and not snoozed now.
func markedNotices(hs []heldNotice) []awareness.Notice {
	now := time.Now()
	out := make([]awareness.Notice, 0, len(hs))
	for _, h := range hs {
		if h.ok && !now.Before(h.snoozed) {
			out = append(out, h.n)
		}
	}
	return out
}

// pendingOf lists the pending notices of watchers; of every watcher when nil.
func (s *Store) pendingOf(ctx context.Context, watchers []string) ([]awareness.Notice, error) {
	if s.closed.Load() {
		return nil, s.wrapErr(errClosed)
	}
	if watchers == nil {
		out, err := scanAll(s.reader(ctx), s.scanHeldNotice, heldNoticesSQL+"cursors.n > cursors.l"+heldNoticesOrder)
		return markedNotices(out), s.wrapErr(err)
	}
	var out []awareness.Notice
	for i := 0; i < len(watchers); i += 500 {
		chunk := watchers[i:min(i+500, len(watchers))]
		ns, err := scanAll(s.reader(ctx), s.scanHeldNotice, heldNoticesSQL+"cursors.watcher_key IN ? AND cursors.n > cursors.l"+heldNoticesOrder, chunk)
		if err != nil {
			return nil, s.wrapErr(err)
		}
		out = append(out, markedNotices(ns)...)
	}
	return out, nil
}

// gapItem, queued to the worker, asks for a round trip to the bus server, so that it
// has every subscription, then a rescan: the bus reconnected or lost messages.
const gapItem = "\x00gap"
