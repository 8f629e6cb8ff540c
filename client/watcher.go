package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Notice is a stale notice (the GraphQL StaleNotice, NTC-1..7).
type Notice struct {
	Watcher       string `json:"watcher"`
	Target        string `json:"target"`
	TargetAgentID string `json:"targetAgentId"`
	// ChangesSince is L: where the watcher reconciles from.
	ChangesSince int64 `json:"changesSince"`
	// NotifiedVersion is N: what acknowledging this notice covers.
	NotifiedVersion int64 `json:"notifiedVersion"`
	MaterialVersion int64 `json:"materialVersion"`
	// Text is the exact line to put into the watcher's prompt (NTC-1).
	Text string `json:"text"`
	// Wake: run the watcher's turn now (a main session, NTC-6); otherwise it sees the
	// notice on its next turn.
	Wake     bool      `json:"wake"`
	OpenedAt time.Time `json:"openedAt"`
	// Closed is set on the item that tells the notice was acknowledged or removed.
	Closed bool `json:"closed"`
}

// TargetRef is the session the notice is about, to pass to Reconcile.
func (n Notice) TargetRef() Target { return Target{SessionKey: n.Target, AgentID: n.TargetAgentID} }

type noticeKey struct{ watcher, agent, target string }

func (n Notice) key() noticeKey { return noticeKey{n.Watcher, n.TargetAgentID, n.Target} }

// Defaults of WatcherOptions.
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 10 * time.Second
	// wsPing is how often the watcher pings the service; a connection silent for
	// wsDead is dropped and opened again.
	wsPing      = 15 * time.Second
	wsDead      = 45 * time.Second
	wsAckWait   = 10 * time.Second
	wsWriteWait = 10 * time.Second
)

// WatcherOptions configure Watch.
type WatcherOptions struct {
	// MinBackoff and MaxBackoff bound the wait before reconnecting (exponential with
	// jitter; defaults DefaultMinBackoff and DefaultMaxBackoff).
	MinBackoff, MaxBackoff time.Duration
	// Dialer replaces the WebSocket dialer (default websocket.DefaultDialer).
	Dialer *websocket.Dialer
	// OnChange, when set, is called (from the Watcher's goroutine, or from Ack for its
	// follow-ups) for every item that changes what the service has pending: a notice
	// that opened, or one that closed. Replays are not reported. It must not block.
	OnChange func(Notice)
}

// ErrWatcherClosed is returned by a closed Watcher.
var ErrWatcherClosed = errors.New("awareness watcher: closed")

// Watcher follows the stale notices of one or more watcher sessions over
// graphql-transport-ws (staleNotices(watcher, includeClosed: true)), reconnecting with
// backoff, and keeps the notices not yet consumed:
//
//   - a notice replayed after a reconnect, or delivered both by the stream and as a
//     follow-up of Ack, is handed out once;
//   - a notice acknowledged elsewhere (another gateway, the dashboard) or removed is
//     dropped, from its closed item, or, when the stream was down then, from the
//     pendingNotices query the Watcher runs after each reconnect;
//   - Drain hands out what to put into the prompt now; Ack acknowledges exactly those
//     notices (NTC-3): a notice opened after the Drain stays pending.
type Watcher struct {
	c        *Client
	watchers []string
	opts     WatcherOptions
	log      *slog.Logger

	mu        sync.Mutex
	open      map[noticeKey]*tracked // received, not drained
	drained   map[noticeKey]int64    // drained, not known closed: notifiedVersion
	err       error                  // fatal: the stream will not be opened again
	dups      int                    // replayed items dropped
	connected chan struct{}          // closed while a stream is up; replaced on loss
	up        bool

	notify chan struct{} // cap 1
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type tracked struct {
	n         Notice
	confirmed bool // seen since the last reconnect
}

// Watch starts following the notices of watchers. Close stops it.
func (c *Client) Watch(watchers []string, opts WatcherOptions) (*Watcher, error) {
	if len(watchers) == 0 {
		return nil, errors.New("awareness watcher: name at least one watcher session")
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.Dialer == nil {
		opts.Dialer = websocket.DefaultDialer
	}
	w := &Watcher{
		c: c, watchers: append([]string(nil), watchers...), opts: opts, log: c.log.With("component", "watcher"),
		open: map[noticeKey]*tracked{}, drained: map[noticeKey]int64{},
		connected: make(chan struct{}), notify: make(chan struct{}, 1),
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.wg.Add(1)
	go w.run()
	return w, nil
}

// Notify receives a value when notices become available to Drain.
func (w *Watcher) Notify() <-chan struct{} { return w.notify }

// WaitConnected waits until the stream is up (subscribed), or ctx ends.
func (w *Watcher) WaitConnected(ctx context.Context) error {
	w.mu.Lock()
	ch, err := w.connected, w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Err returns the fatal error that stopped the stream (a refused token), if any.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Pending returns the notices that Drain would hand out now, without draining them:
// those of the given watchers, or of all when none is given.
func (w *Watcher) Pending(watchers ...string) []Notice {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sortedOpenLocked(watchers)
}

func (w *Watcher) sortedOpenLocked(watchers []string) []Notice {
	out := make([]Notice, 0, len(w.open))
	for _, t := range w.open {
		if len(watchers) == 0 || slices.Contains(watchers, t.n.Watcher) {
			out = append(out, t.n)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].OpenedAt.Equal(out[j].OpenedAt) {
			return out[i].OpenedAt.Before(out[j].OpenedAt)
		}
		return out[i].key().target < out[j].key().target
	})
	return out
}

// Drain hands out the notices to put into the prompt now (oldest first), each once:
// those of the given watchers (the session whose turn is being built), or of all when
// none is given. Pass what the turn actually consumed to Ack.
func (w *Watcher) Drain(watchers ...string) []Notice {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.sortedOpenLocked(watchers)
	for _, n := range out {
		delete(w.open, n.key())
		w.drained[n.key()] = n.NotifiedVersion
	}
	return out
}

const ackMutation = `mutation($w: String!, $n: [NoticeRef!]) { ackNotices(watcher: $w, notices: $n) {
  watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt closed } }`

// Ack acknowledges exactly the given drained notices (NTC-3): each pair is
// acknowledged only while its pending notice is still the one drained. It returns the
// follow-up notices the acknowledgement opened (events arrived since the notice
// opened); they are also kept for the next Drain.
func (w *Watcher) Ack(ctx context.Context, drained []Notice) ([]Notice, error) {
	byWatcher := map[string][]map[string]any{}
	var order []string
	for _, n := range drained {
		if _, ok := byWatcher[n.Watcher]; !ok {
			order = append(order, n.Watcher)
		}
		byWatcher[n.Watcher] = append(byWatcher[n.Watcher], map[string]any{
			"target": n.Target, "targetAgentId": n.TargetAgentID, "notifiedVersion": n.NotifiedVersion,
		})
	}
	var followUps []Notice
	for _, watcher := range order {
		var res struct {
			AckNotices []Notice `json:"ackNotices"`
		}
		if err := w.c.Do(ctx, ackMutation, map[string]any{"w": watcher, "n": byWatcher[watcher]}, &res); err != nil {
			return followUps, err
		}
		followUps = append(followUps, res.AckNotices...)
	}
	w.mu.Lock()
	for _, n := range drained {
		if w.drained[n.key()] == n.NotifiedVersion {
			delete(w.drained, n.key())
		}
	}
	var changed []Notice
	for _, n := range followUps {
		if w.acceptLocked(n, true) {
			changed = append(changed, n)
		}
	}
	w.mu.Unlock()
	w.changed(changed...)
	return followUps, nil
}

func (w *Watcher) changed(ns ...Notice) {
	if w.opts.OnChange == nil {
		return
	}
	for _, n := range ns {
		w.opts.OnChange(n)
	}
}

// Duplicates returns how many replayed items the Watcher dropped so far.
func (w *Watcher) Duplicates() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dups
}

// acceptLocked applies one item of the stream (or a follow-up of Ack); it reports
// whether the item changed what the service has pending (not a replay).
func (w *Watcher) acceptLocked(n Notice, fresh bool) bool {
	k := n.key()
	if n.Closed {
		if t, ok := w.open[k]; ok && t.n.NotifiedVersion <= n.NotifiedVersion {
			delete(w.open, k)
		}
		if v, ok := w.drained[k]; ok && v <= n.NotifiedVersion {
			delete(w.drained, k)
		}
		return true
	}
	if v, ok := w.drained[k]; ok && v >= n.NotifiedVersion {
		w.dups++
		return false // drained already: a replay
	}
	if t, ok := w.open[k]; ok && t.n.NotifiedVersion >= n.NotifiedVersion {
		t.confirmed = t.confirmed || fresh
		w.dups++
		return false // a replay
	}
	delete(w.drained, k) // a newer notice supersedes the drained one
	w.open[k] = &tracked{n: n, confirmed: fresh}
	select {
	case w.notify <- struct{}{}:
	default:
	}
	return true
}

// Close stops the stream. Notices not acknowledged stay pending in the service.
func (w *Watcher) Close() error {
	w.cancel()
	w.wg.Wait()
	return nil
}

// run keeps a stream up until Close or a fatal refusal.
func (w *Watcher) run() {
	defer w.wg.Done()
	delay := w.opts.MinBackoff
	for {
		start := time.Now()
		err := w.stream()
		if w.ctx.Err() != nil {
			return
		}
		if fatal, ok := errors.AsType[*fatalError](err); ok {
			w.mu.Lock()
			w.err = fatal.err
			w.mu.Unlock()
			w.log.Error("notice stream refused; not reconnecting", "err", fatal.err)
			return
		}
		if time.Since(start) > 2*w.opts.MaxBackoff {
			delay = w.opts.MinBackoff // it was up for a while: start the backoff again
		}
		w.log.Info("notice stream lost; reconnecting", "err", err, "in", delay)
		t := time.NewTimer(delay + rand.N(delay/2+1))
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return
		}
		delay = min(2*delay, w.opts.MaxBackoff)
	}
}

type fatalError struct{ err error }

func (f *fatalError) Error() string { return f.err.Error() }

type wsMessage struct {
	ID      string          `json:"id,omitempty"`
	Type    string          `json:"type"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

const subscribeNotices = `subscription($w: String) { staleNotices(watcher: $w, includeClosed: true) {
  watcher target targetAgentId changesSince notifiedVersion materialVersion text wake openedAt closed } }`

// stream runs one connection: init, one subscription per watcher, then reads until
// the connection fails.
func (w *Watcher) stream() error {
	header := http.Header{}
	if a := w.c.authorization(); a != "" {
		header.Set("Authorization", a)
	}
	dialer := *w.opts.Dialer
	dialer.Subprotocols = []string{"graphql-transport-ws"}
	dctx, cancel := context.WithTimeout(w.ctx, wsAckWait)
	conn, resp, err := dialer.DialContext(dctx, w.c.wsURL, header)
	cancel()
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return &fatalError{fmt.Errorf("awareness watcher: %s refused the token (HTTP 401)", w.c.wsURL)}
		}
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(w.ctx, func() { _ = conn.Close() })
	defer stop()

	var wmu sync.Mutex
	write := func(m wsMessage) error {
		wmu.Lock()
		defer wmu.Unlock()
		_ = conn.SetWriteDeadline(time.Now().Add(wsWriteWait))
		return conn.WriteJSON(m)
	}
	initPayload, _ := json.Marshal(map[string]string{"Authorization": w.c.authorization()})
	if w.c.authorization() == "" {
		initPayload = nil
	}
	if err := write(wsMessage{Type: "connection_init", Payload: initPayload}); err != nil {
		return err
	}
	_ = conn.SetReadDeadline(time.Now().Add(wsAckWait))
	for {
		var m wsMessage
		if err := conn.ReadJSON(&m); err != nil {
			return closeError(err)
		}
		if m.Type == "connection_ack" {
			break
		}
		if m.Type == "ping" {
			_ = write(wsMessage{Type: "pong"})
		}
	}
	for i, watcher := range w.watchers {
		payload, _ := json.Marshal(map[string]any{"query": subscribeNotices, "variables": map[string]any{"w": watcher}})
		if err := write(wsMessage{ID: strconv.Itoa(i + 1), Type: "subscribe", Payload: payload}); err != nil {
			return err
		}
	}
	w.reconnected()
	defer w.disconnected()
	// Confirm the notices kept from before: those no longer pending were closed while
	// the stream was down.
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		w.confirm()
	}()
	// Our pings keep a quiet connection alive through proxies and detect a dead peer.
	pingDone := make(chan struct{})
	defer close(pingDone)
	go func() {
		t := time.NewTicker(wsPing)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if write(wsMessage{Type: "ping"}) != nil {
					return
				}
			case <-pingDone:
				return
			}
		}
	}()
	for {
		_ = conn.SetReadDeadline(time.Now().Add(wsDead))
		var m wsMessage
		if err := conn.ReadJSON(&m); err != nil {
			return closeError(err)
		}
		switch m.Type {
		case "ping":
			_ = write(wsMessage{Type: "pong"})
		case "next":
			var p struct {
				Data struct {
					StaleNotices *Notice `json:"staleNotices"`
				} `json:"data"`
				Errors []gqlError `json:"errors"`
			}
			if err := json.Unmarshal(m.Payload, &p); err != nil {
				return fmt.Errorf("awareness watcher: malformed next: %w", err)
			}
			if len(p.Errors) > 0 {
				return p.Errors[0].err(0)
			}
			if n := p.Data.StaleNotices; n != nil {
				w.mu.Lock()
				changed := w.acceptLocked(*n, true)
				w.mu.Unlock()
				if changed {
					w.changed(*n)
				}
			}
		case "error":
			var errs []gqlError
			_ = json.Unmarshal(m.Payload, &errs)
			if len(errs) > 0 {
				e := errs[0].err(0)
				switch e.Code {
				case CodeUnavailable, CodeInternal, "":
					return e // the service ended the stream: subscribe again
				}
				return &fatalError{e}
			}
			return errors.New("awareness watcher: subscription error")
		case "complete":
			return errors.New("awareness watcher: the service completed the stream")
		}
	}
}

// closeError turns the close codes that retrying cannot fix into fatal errors.
func closeError(err error) error {
	if ce, ok := errors.AsType[*websocket.CloseError](err); ok {
		switch ce.Code {
		case 4401, 4403, 4400:
			return &fatalError{fmt.Errorf("awareness watcher: the service closed the stream: %d %s", ce.Code, ce.Text)}
		}
	}
	return err
}

func (w *Watcher) reconnected() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.open {
		t.confirmed = false
	}
	if !w.up {
		w.up = true
		close(w.connected)
	}
}

func (w *Watcher) disconnected() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.up {
		w.up = false
		w.connected = make(chan struct{})
	}
}

const pendingQuery = `query($w: String!) { pendingNotices(watcher: $w) { watcher target targetAgentId notifiedVersion } }`

// confirm drops the kept notices (open or drained) that the service no longer has
// pending: they were acknowledged or removed while the stream was down.
func (w *Watcher) confirm() {
	pending := map[noticeKey]int64{}
	asked := map[string]bool{}
	for _, watcher := range w.watchers {
		var res struct {
			PendingNotices []Notice `json:"pendingNotices"`
		}
		if err := w.c.Do(w.ctx, pendingQuery, map[string]any{"w": watcher}, &res); err != nil {
			w.log.Debug("confirm pending notices", "watcher", watcher, "err", err)
			continue
		}
		asked[watcher] = true
		for _, n := range res.PendingNotices {
			pending[n.key()] = n.NotifiedVersion
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, t := range w.open {
		if v, ok := pending[k]; asked[k.watcher] && !t.confirmed && (!ok || v != t.n.NotifiedVersion) {
			delete(w.open, k)
		}
	}
	for k, v := range w.drained {
		if p, ok := pending[k]; asked[k.watcher] && (!ok || p != v) {
			delete(w.drained, k)
		}
	}
}
