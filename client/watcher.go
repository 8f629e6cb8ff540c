package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Notice is a stale notice: the GraphQL StaleNotice (NTC-1..7).
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
	// Wake: run the watcher's turn now, as for a main session (NTC-6); otherwise it
	// sees the notice on its next turn.
	Wake     bool      `json:"wake"`
	OpenedAt time.Time `json:"openedAt"`
	// TargetGeneration and WatcherGeneration are the generations of the target and of
	// the watcher the notice was opened for, starting at 1 and one more per reset
	// (LIF-2). Ack names WatcherGeneration, so a notice drained before the watcher's
	// reset is never acknowledged for its new incarnation: CodeStaleGeneration.
	TargetGeneration  int64 `json:"targetGeneration"`
	WatcherGeneration int64 `json:"watcherGeneration"`
	// Closed is set on the item that tells the notice was acknowledged or removed.
	Closed bool `json:"closed"`
	// Redelivered is set on a notice that came back after a DrainNotices that was
	// neither acknowledged nor released (RDL-1).
	Redelivered bool `json:"redelivered"`
	// Delivery counts the times the service handed this notice out again, by
	// redelivery or at the end of a snooze (RDL-1, RDL-2).
	Delivery int `json:"delivery"`
	// Digest is what changed between ChangesSince and NotifiedVersion, without
	// content (DIG-1); only PendingDigests and the other calls that select it set it.
	Digest *NoticeDigest `json:"digest,omitempty"`
}

// NoticeDigest is a notice's digest (DIG-1): the events after ChangesSince up to
// and including NotifiedVersion counted by kind and actor type, the human events,
// the channel of the latest human event, and N. Counted + Pruned = N − L: Pruned
// events were removed by retention before the digest was read.
type NoticeDigest struct {
	ByKind []struct {
		Kind  string `json:"kind"`
		Count int    `json:"count"`
	} `json:"byKind"`
	ByActorType []struct {
		ActorType string `json:"actorType"`
		Count     int    `json:"count"`
	} `json:"byActorType"`
	HumanEvents      int     `json:"humanEvents"`
	LastHumanChannel *string `json:"lastHumanChannel"`
	LatestVersion    int64   `json:"latestVersion"`
	Counted          int     `json:"counted"`
	Pruned           int     `json:"pruned"`
}

// TargetRef is the session the notice is about, to pass to Reconcile.
func (n Notice) TargetRef() Target { return Target{SessionKey: n.Target, AgentID: n.TargetAgentID} }

type noticeKey struct{ watcher, agent, target string }

func (n Notice) key() noticeKey { return noticeKey{n.Watcher, n.TargetAgentID, n.Target} }

// Transport selects how a Watcher follows staleNotices.
type Transport int

// Transports of a Watcher.
const (
	// TransportAuto uses WebSocket, switches to SSE when a proxy refuses the
	// WebSocket upgrade, and tries WebSocket again every WatcherOptions.WebSocketRetry.
	TransportAuto Transport = iota
	// TransportWebSocket uses graphql-transport-ws only.
	TransportWebSocket
	// TransportSSE uses graphql-sse in distinct connections mode only: one POST
	// stream per watcher session.
	TransportSSE
)

func (t Transport) String() string {
	switch t {
	case TransportWebSocket:
		return "websocket"
	case TransportSSE:
		return "sse"
	}
	return "auto"
}

// Defaults of WatcherOptions.
const (
	DefaultMinBackoff     = 100 * time.Millisecond
	DefaultMaxBackoff     = 10 * time.Second
	DefaultWebSocketRetry = 30 * time.Second
	// streamPing is how often the watcher pings the service over WebSocket; a
	// connection or SSE stream silent for streamDead is dropped and opened again. The
	// service sends a keep-alive every 15 s on both.
	streamPing  = 15 * time.Second
	streamDead  = 45 * time.Second
	wsAckWait   = 10 * time.Second
	wsWriteWait = 10 * time.Second
	// closeAckWait bounds the last try of Close to send the acknowledgements still owed.
	closeAckWait = time.Second
	// errBuffer is how many errors Errors holds for a caller that does not read.
	errBuffer = 16
)

// WatcherOptions configure Watch.
type WatcherOptions struct {
	// MinBackoff and MaxBackoff bound the exponential, jittered wait before
	// reconnecting and before a failed acknowledgement is sent again; they default to
	// DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// Transport defaults to TransportAuto.
	Transport Transport
	// WebSocketRetry is how long TransportAuto stays on SSE after a refused upgrade
	// before it tries WebSocket again; default DefaultWebSocketRetry.
	WebSocketRetry time.Duration
	// Dialer replaces websocket.DefaultDialer.
	Dialer *websocket.Dialer
	// OnChange, when set, is called for every item that changes what the service has
	// pending: a notice that opened, or one that closed. Replays are not reported. It
	// runs on the Watcher's goroutines, or in Ack for its follow-ups, and must not block.
	OnChange func(Notice)
	// OnAck, when set, is called with every outcome of an acknowledgement the Watcher
	// sent again by itself after Ack failed (ErrAckDeferred). It must not block.
	OnAck func(NoticeAck)
}

// Errors of a Watcher.
var (
	// ErrWatcherClosed is returned by a closed Watcher.
	ErrWatcherClosed = errors.New("awareness watcher: closed")
	// ErrAckDeferred: Ack could not reach the service because it is down or the call
	// timed out. The notices stay held: the Watcher sends the acknowledgement again by
	// itself until the service answers, with outcomes to OnAck, unless Release hands
	// them back first. errors.Is(err, ErrAckDeferred) tells this from a refusal.
	ErrAckDeferred = errors.New("awareness watcher: the acknowledgement did not reach the service; the Watcher sends it again")
)

// StreamError is why a stream of the Watcher failed: a WebSocket connection, or the
// SSE stream of one watcher session.
type StreamError struct {
	Transport Transport
	// Watcher is the watcher session of an SSE stream or of a refused subscription;
	// "" for a WebSocket connection.
	Watcher string
	// Status is the HTTP status of a refused upgrade or stream request; 0 otherwise.
	Status int
	// Fatal: retrying cannot help, e.g. the token was refused; the stream is not
	// opened again.
	Fatal bool
	Err   error
}

func (e *StreamError) Error() string {
	s := "awareness watcher: " + e.Transport.String()
	if e.Watcher != "" {
		s += " stream of " + e.Watcher
	}
	if e.Status != 0 {
		s += fmt.Sprintf(": HTTP %d", e.Status)
	}
	return s + ": " + e.Err.Error()
}

func (e *StreamError) Unwrap() error { return e.Err }

// Watcher follows the stale notices of watcher sessions, as
// staleNotices(watcher, includeClosed: true), over one WebSocket connection or one
// SSE stream per watcher, reconnecting with backoff, and keeps each notice in one of
// three states (CLT-5):
//
//   - open: received, not handed out; Drain hands it out and it becomes held;
//   - held: handed out by Drain and not yet settled. Ack settles it, the service
//     answering per notice; Release, after a failed turn, makes it open again. A
//     failed Ack keeps it held and is sent again by the Watcher: ErrAckDeferred;
//   - done: acknowledged by anyone, or closed: never handed out again, whatever the
//     service replays.
//
// After every reconnect and restart the service replays every pending notice; a
// replayed notice is handed out only if it is neither open, held nor done. A notice
// acknowledged elsewhere or removed is dropped from its closed item, or, when the
// stream was down then, from the pendingNotices query the Watcher runs after each
// subscription. Add and Remove change the watcher sessions of a running Watcher.
// Errors reach the caller through Errors and Err, never only the log.
type Watcher struct {
	c    *Client
	opts WatcherOptions
	log  *slog.Logger

	mu       sync.Mutex
	subs     map[string]*sub // watcher session → its subscription
	open     map[noticeKey]*tracked
	held     map[noticeKey]*heldNotice
	done     map[noticeKey]int64 // highest notifiedVersion acknowledged or closed
	fatal    error               // the Watcher stopped for good
	lastErr  error               // the last stream failure, cleared when all are up
	dups     int
	conn     *wsConn // the WebSocket connection while one is up
	sse      map[string]*sseStream
	current  Transport
	upAll    chan struct{} // closed while every subscription is up; replaced on loss
	allUp    bool
	ackOwed  bool
	closed   bool
	sseGroup sync.WaitGroup // the SSE stream goroutines, started under mu while !closed
	confirmQ map[string]bool

	notify      chan struct{} // cap 1
	errs        chan error    // cap errBuffer
	ackWake     chan struct{} // cap 1
	confirmWake chan struct{} // cap 1
	ctx         context.Context
	cancel      context.CancelFunc
	wg          sync.WaitGroup
}

// sub is one watcher session the Watcher follows.
type sub struct {
	notify chan struct{} // cap 1
	up     bool          // its subscription is live
}

type tracked struct {
	n         Notice
	confirmed bool // seen since the last (re)subscription
}

type heldNotice struct {
	n Notice
	// gone: the service no longer has this notice pending because it was
	// acknowledged elsewhere, removed or replaced; Release drops it.
	gone bool
	// owed: an Ack of it failed to reach the service; the Watcher sends it again.
	owed bool
	// confirmed: seen since the last subscription, as tracked.confirmed.
	confirmed bool
}

// Watch starts following the notices of watchers; the list may be empty, to Add
// them later. Close stops it.
func (c *Client) Watch(watchers []string, opts WatcherOptions) (*Watcher, error) {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.WebSocketRetry <= 0 {
		opts.WebSocketRetry = DefaultWebSocketRetry
	}
	if opts.Dialer == nil {
		opts.Dialer = websocket.DefaultDialer
	}
	w := &Watcher{
		c: c, opts: opts, log: c.log.With("component", "watcher"),
		subs: map[string]*sub{}, open: map[noticeKey]*tracked{}, held: map[noticeKey]*heldNotice{},
		done: map[noticeKey]int64{}, sse: map[string]*sseStream{},
		upAll: make(chan struct{}), notify: make(chan struct{}, 1), errs: make(chan error, errBuffer),
		ackWake: make(chan struct{}, 1), confirmWake: make(chan struct{}, 1), confirmQ: map[string]bool{},
	}
	for _, watcher := range watchers {
		if watcher == "" {
			return nil, errors.New("awareness watcher: a watcher session key is empty")
		}
		w.subs[watcher] = &sub{notify: make(chan struct{}, 1)}
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	w.wg.Add(3)
	go w.run()
	go w.ackRetrier()
	go w.confirmer()
	return w, nil
}

// Add starts following the notices of more watcher sessions on the running Watcher,
// with a new subscription on its WebSocket or a new SSE stream. It first asks the
// service for the watcher's pending notices with the client's credentials, so a
// watcher the token may not read is refused here with the service's *Error; when the
// service cannot be reached the watcher is added all the same and subscribed once it
// can.
func (w *Watcher) Add(ctx context.Context, watchers ...string) error {
	for _, watcher := range watchers {
		if watcher == "" {
			return errors.New("awareness watcher: a watcher session key is empty")
		}
		if _, err := w.c.PendingNotices(ctx, watcher); err != nil && Permanent(err) {
			return err
		}
	}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return ErrWatcherClosed
	}
	var added []string
	for _, watcher := range watchers {
		if _, ok := w.subs[watcher]; !ok {
			w.subs[watcher] = &sub{notify: make(chan struct{}, 1)}
			added = append(added, watcher)
		}
	}
	if w.current == TransportSSE {
		for _, watcher := range added {
			w.startSSELocked(watcher)
		}
	}
	w.updateUpLocked()
	conn := w.conn
	w.mu.Unlock()
	if conn != nil {
		for _, watcher := range added {
			conn.subscribe(watcher)
		}
	}
	return nil
}

// Remove stops following the notices of watcher sessions. Their open notices are
// dropped but stay pending in the service; held ones stay until Ack or Release.
func (w *Watcher) Remove(watchers ...string) {
	w.mu.Lock()
	conn := w.conn
	for _, watcher := range watchers {
		delete(w.subs, watcher)
		for k := range w.open {
			if k.watcher == watcher {
				delete(w.open, k)
			}
		}
		if s := w.sse[watcher]; s != nil {
			s.cancel()
			delete(w.sse, watcher)
		}
	}
	w.updateUpLocked()
	w.mu.Unlock()
	if conn != nil {
		for _, watcher := range watchers {
			conn.unsubscribe(watcher)
		}
	}
}

// Watchers returns the watcher sessions followed, sorted.
func (w *Watcher) Watchers() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]string, 0, len(w.subs))
	for k := range w.subs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Notify receives a value when notices of any watcher session become available to
// Drain.
func (w *Watcher) Notify() <-chan struct{} { return w.notify }

// NotifyOf receives a value when notices of watcher become available to Drain. It
// is nil, never ready, for a watcher session the Watcher does not follow.
func (w *Watcher) NotifyOf(watcher string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if s := w.subs[watcher]; s != nil {
		return s.notify
	}
	return nil
}

// Errors receives every stream failure as a *StreamError: a refused upgrade with its
// HTTP status, a lost connection, a refused subscription. It also receives every
// failure of an acknowledgement the Watcher sends again by itself. It holds the last
// errBuffer errors for a caller that reads late; older ones are dropped.
func (w *Watcher) Errors() <-chan error { return w.errs }

// Err returns why the Watcher is not following its notices now: the error that
// stopped it for good, such as a refused token, or, while a stream is down and being
// retried, its last failure. It is nil while every subscription is up.
func (w *Watcher) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fatal != nil {
		return w.fatal
	}
	if w.allUp {
		return nil
	}
	return w.lastErr
}

// Transport returns the transport in use now: TransportWebSocket or TransportSSE.
func (w *Watcher) Transport() Transport {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// WaitConnected waits until every watcher session's subscription is up, the Watcher
// stopped for good, or ctx ends.
func (w *Watcher) WaitConnected(ctx context.Context) error {
	w.mu.Lock()
	ch, err := w.upAll, w.fatal
	w.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-w.ctx.Done():
		if err := w.Err(); err != nil {
			return err
		}
		return ErrWatcherClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pending returns the open notices that Drain would hand out now, without draining
// them: those of the given watchers, or of all when none is given.
func (w *Watcher) Pending(watchers ...string) []Notice {
	w.mu.Lock()
	defer w.mu.Unlock()
	return of(w.open, watchers, func(t *tracked) Notice { return t.n })
}

// Held returns the notices handed out by Drain and neither acknowledged nor
// released: those of the given watchers, or of all when none is given.
func (w *Watcher) Held(watchers ...string) []Notice {
	w.mu.Lock()
	defer w.mu.Unlock()
	return of(w.held, watchers, func(h *heldNotice) Notice { return h.n })
}

// of returns the notices of a state map that belong to watchers, or all when none
// is given, oldest first.
func of[V any](m map[noticeKey]V, watchers []string, notice func(V) Notice) []Notice {
	out := make([]Notice, 0, len(m))
	for k, v := range m {
		if len(watchers) == 0 || slices.Contains(watchers, k.watcher) {
			out = append(out, notice(v))
		}
	}
	sortNotices(out)
	return out
}

func sortNotices(ns []Notice) {
	sort.Slice(ns, func(i, j int) bool {
		if !ns[i].OpenedAt.Equal(ns[j].OpenedAt) {
			return ns[i].OpenedAt.Before(ns[j].OpenedAt)
		}
		return ns[i].Target < ns[j].Target
	})
}

// Drain hands out, oldest first and each once, the open notices to put into the
// prompt now: those of the given watchers, the sessions whose turn is being built,
// or of all when none is given. Ack settles what the turn consumed; Release hands
// back what it did not.
func (w *Watcher) Drain(watchers ...string) []Notice {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := of(w.open, watchers, func(t *tracked) Notice { return t.n })
	for _, n := range out {
		k := n.key()
		w.held[k] = &heldNotice{n: n, confirmed: w.open[k].confirmed}
		delete(w.open, k)
	}
	return out
}

// Release hands drained notices back: each that is still held, and that the service
// has not acknowledged or replaced meanwhile, is open again for the next Drain; a
// turn that failed after Drain does this (CLT-5). A release also stops the Watcher
// sending again a failed Ack of it. It returns how many were handed back.
func (w *Watcher) Release(drained ...Notice) int {
	w.mu.Lock()
	n := 0
	for _, d := range drained {
		k := d.key()
		h := w.held[k]
		if h == nil || h.n.NotifiedVersion != d.NotifiedVersion {
			continue
		}
		delete(w.held, k)
		if h.gone || w.done[k] >= d.NotifiedVersion || w.subs[d.Watcher] == nil {
			continue
		}
		if t := w.open[k]; t != nil && t.n.NotifiedVersion >= d.NotifiedVersion {
			continue
		}
		w.open[k] = &tracked{n: h.n, confirmed: h.confirmed}
		w.notifyLocked(d.Watcher)
		n++
	}
	w.mu.Unlock()
	return n
}

// Snooze hides a notice until until with snoozeNotice (RDL-2): the Watcher forgets
// it, and the service delivers it again when the snooze ends with a higher
// Delivery, which the Watcher then hands out as open.
func (w *Watcher) Snooze(ctx context.Context, n Notice, until time.Time) error {
	if _, err := w.c.SnoozeNotice(ctx, n, until); err != nil {
		return err
	}
	w.mu.Lock()
	k := n.key()
	if h := w.held[k]; h != nil && h.n.NotifiedVersion == n.NotifiedVersion {
		delete(w.held, k)
	}
	if t := w.open[k]; t != nil && t.n.NotifiedVersion == n.NotifiedVersion {
		delete(w.open, k)
	}
	w.mu.Unlock()
	return nil
}

// Dismiss acknowledges a notice without reconciling, with dismissNotice (RDL-2), and
// settles it as Ack does; the answer has Dismissed set.
func (w *Watcher) Dismiss(ctx context.Context, n Notice) (NoticeAck, error) {
	a, err := w.c.DismissNotice(ctx, n)
	if err != nil {
		return a, err
	}
	w.settle([]NoticeAck{a})
	return a, nil
}

// Ack acknowledges exactly the given drained notices with acknowledgeNotices
// (NTC-3) and returns the service's outcome for each:
//
//   - AckAcknowledged, AckAlreadyAcknowledged: the notice is done; a FollowUp or
//     Pending notice is kept for the next Drain and handed out once, however often
//     the stream also delivers it;
//   - AckSuperseded, AckNotPending: the notice was never acknowledged and the service
//     has another one pending, kept for the next Drain, or none; the caller learns
//     that what its turn consumed is not what the service had pending.
//
// When the service cannot be reached, the error wraps ErrAckDeferred: the notices
// stay held and the Watcher sends the acknowledgement again until the service
// answers, with outcomes to OnAck, or until Release hands them back. A refusal, an
// *Error such as FORBIDDEN, leaves them held, to release.
func (w *Watcher) Ack(ctx context.Context, drained []Notice) ([]NoticeAck, error) {
	var out []NoticeAck
	var errs []error
	for watcher, group := range groupByWatcher(drained) {
		acks, err := w.c.AcknowledgeNotices(ctx, watcher, group)
		w.settle(acks) // a part answered before a failure is settled
		out = append(out, acks...)
		if err != nil {
			if Permanent(err) {
				errs = append(errs, err)
				continue
			}
			w.mu.Lock()
			for _, n := range group {
				if h := w.held[n.key()]; h != nil && h.n.NotifiedVersion == n.NotifiedVersion {
					h.owed = true
					w.ackOwed = true
				}
			}
			w.mu.Unlock()
			select {
			case w.ackWake <- struct{}{}:
			default:
			}
			errs = append(errs, fmt.Errorf("%w: %w", ErrAckDeferred, err))
		}
	}
	return out, errors.Join(errs...)
}

// groupByWatcher splits notices by watcher session, in order of first appearance.
func groupByWatcher(ns []Notice) func(func(string, []Notice) bool) {
	return func(yield func(string, []Notice) bool) {
		groups := map[string][]Notice{}
		var order []string
		for _, n := range ns {
			if _, ok := groups[n.Watcher]; !ok {
				order = append(order, n.Watcher)
			}
			groups[n.Watcher] = append(groups[n.Watcher], n)
		}
		for _, watcher := range order {
			if !yield(watcher, groups[watcher]) {
				return
			}
		}
	}
}

// settle applies the service's outcomes of an acknowledgement.
func (w *Watcher) settle(acks []NoticeAck) {
	w.mu.Lock()
	var changed []Notice
	for _, a := range acks {
		k := a.key()
		if h := w.held[k]; h != nil && h.n.NotifiedVersion == a.NotifiedVersion {
			delete(w.held, k)
		}
		if a.Outcome.Done() {
			w.doneLocked(k, a.NotifiedVersion)
		}
		for _, n := range []*Notice{a.FollowUp, a.Pending} {
			if n != nil && w.acceptLocked(*n, true) {
				changed = append(changed, *n)
			}
		}
	}
	w.mu.Unlock()
	w.changed(changed...)
}

// doneLocked records that the pair's notices up to version are done, and drops an
// open copy of them.
func (w *Watcher) doneLocked(k noticeKey, version int64) {
	if w.done[k] < version {
		w.done[k] = version
	}
	if t := w.open[k]; t != nil && t.n.NotifiedVersion <= version {
		delete(w.open, k)
	}
	if h := w.held[k]; h != nil && h.n.NotifiedVersion <= version {
		h.gone = true
	}
}

// ackRetrier sends again the acknowledgements Ack could not deliver, with backoff,
// until the service answers them, they are released, or the Watcher closes; Close
// tries once more.
func (w *Watcher) ackRetrier() {
	defer w.wg.Done()
	delay := w.opts.MinBackoff
	for {
		select {
		case <-w.ackWake:
		case <-w.ctx.Done():
			return
		}
		for {
			t := time.NewTimer(delay + rand.N(delay/2+1))
			select {
			case <-t.C:
			case <-w.ctx.Done():
				t.Stop()
				return
			}
			if w.sendOwed(w.ctx) {
				delay = w.opts.MinBackoff
				break
			}
			delay = min(2*delay, w.opts.MaxBackoff)
		}
	}
}

// sendOwed sends the owed acknowledgements once; it reports whether none is owed any
// more.
func (w *Watcher) sendOwed(ctx context.Context) bool {
	w.mu.Lock()
	var owed []Notice
	for _, h := range w.held {
		if h.owed {
			owed = append(owed, h.n)
		}
	}
	w.ackOwed = len(owed) > 0
	w.mu.Unlock()
	if len(owed) == 0 {
		return true
	}
	sortNotices(owed)
	settled := true
	for watcher, group := range groupByWatcher(owed) {
		acks, err := w.c.AcknowledgeNotices(ctx, watcher, group)
		w.settle(acks)
		if w.opts.OnAck != nil {
			for _, a := range acks {
				w.opts.OnAck(a)
			}
		}
		if err != nil {
			if ctx.Err() == nil {
				w.report(fmt.Errorf("%w: %w", ErrAckDeferred, err))
			}
			if !Permanent(err) {
				settled = false
				continue
			}
			w.mu.Lock() // refused: left held, to release
			for _, n := range group {
				if h := w.held[n.key()]; h != nil && h.n.NotifiedVersion == n.NotifiedVersion {
					h.owed = false
				}
			}
			w.mu.Unlock()
		}
	}
	return settled
}
