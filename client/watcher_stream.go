// The Watcher's connection to the service: accepting notices, reporting and stopping,
// which watchers are up, confirming pending notices after a subscription, and the
// stream loop.

package client

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

func (w *Watcher) changed(ns ...Notice) {
	if w.opts.OnChange == nil {
		return
	}
	for _, n := range ns {
		w.opts.OnChange(n)
	}
}

func (w *Watcher) notifyLocked(watcher string) {
	select {
	case w.notify <- struct{}{}:
	default:
	}
	if s := w.subs[watcher]; s != nil {
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

// Duplicates returns how many replayed items the Watcher dropped so far: copies of
// a notice open, held or done.
func (w *Watcher) Duplicates() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dups
}

// acceptLocked applies one item of a stream or a follow-up of Ack; it reports
// whether the item changed what the service has pending, i.e. was not a replay.
// fresh says the item comes from the service now, not from before a reconnect.
func (w *Watcher) acceptLocked(n Notice, fresh bool) bool {
	k := n.key()
	if w.subs[n.Watcher] == nil {
		return false // not followed (removed)
	}
	if n.Closed {
		w.doneLocked(k, n.NotifiedVersion)
		return true
	}
	if n.NotifiedVersion <= w.done[k] {
		w.dups++
		return false
	}
	if h := w.held[k]; h != nil {
		if h.n.NotifiedVersion == n.NotifiedVersion && n.Delivery > h.n.Delivery {
			// The service handed the held notice out again by redelivery (RDL-1) or at
			// the end of a snooze: it is open again, for the next Drain.
			delete(w.held, k)
			w.open[k] = &tracked{n: n, confirmed: fresh}
			w.notifyLocked(n.Watcher)
			return true
		}
		if h.n.NotifiedVersion >= n.NotifiedVersion {
			h.confirmed = h.confirmed || fresh
			w.dups++
			return false // in the caller's hands: Ack settles it, Release hands it back
		}
		h.gone = true // the service has a newer one pending: the held one is settled
	}
	if t := w.open[k]; t != nil && t.n.NotifiedVersion >= n.NotifiedVersion && !(t.n.NotifiedVersion == n.NotifiedVersion && n.Delivery > t.n.Delivery) {
		t.confirmed = t.confirmed || fresh
		w.dups++
		return false
	}
	w.open[k] = &tracked{n: n, confirmed: fresh}
	w.notifyLocked(n.Watcher)
	return true
}

// accept applies one stream item.
func (w *Watcher) accept(n Notice) {
	w.mu.Lock()
	changed := w.acceptLocked(n, true)
	w.mu.Unlock()
	if changed {
		w.changed(n)
	}
}

// report hands err to Errors, dropping the oldest when the buffer is full.
func (w *Watcher) report(err error) {
	for {
		select {
		case w.errs <- err:
			return
		default:
		}
		select {
		case <-w.errs:
		default:
		}
	}
}

// streamFailed records a stream failure: in Err while it lasts, in Errors, and in
// the log.
func (w *Watcher) streamFailed(err *StreamError) {
	w.mu.Lock()
	w.lastErr = err
	w.mu.Unlock()
	w.report(err)
	lvl := slog.LevelInfo
	if err.Status != 0 || err.Fatal {
		lvl = slog.LevelWarn
	}
	w.log.Log(context.Background(), lvl, "notice stream failed", "transport", err.Transport.String(),
		"watcher", err.Watcher, "status", err.Status, "fatal", err.Fatal, "err", err.Err)
}

// stop ends the Watcher for good with err.
func (w *Watcher) stop(err error) {
	w.mu.Lock()
	if w.fatal == nil {
		w.fatal = err
	}
	w.mu.Unlock()
	w.log.Error("notice stream refused; not reconnecting", "err", err)
	w.cancel()
}

// dropWatcher stops following one watcher session whose subscription the service
// refused for good, e.g. FORBIDDEN or INVALID_ARGUMENT; the others go on.
func (w *Watcher) dropWatcher(watcher string, err *StreamError) {
	w.streamFailed(err)
	w.Remove(watcher)
}

// setUp marks the subscriptions of watchers up or down and resets the confirmation
// of their open notices when they come up.
func (w *Watcher) setUp(up bool, watchers ...string) { w.setUpIf(nil, up, watchers...) }

// setUpIf is setUp applied only while live holds, called with mu held; a nil live
// always applies. It reports whether it applied.
func (w *Watcher) setUpIf(live func() bool, up bool, watchers ...string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if live != nil && !live() {
		return false
	}
	for _, watcher := range watchers {
		s := w.subs[watcher]
		if s == nil {
			continue
		}
		s.up = up
		if up {
			for k, t := range w.open {
				if k.watcher == watcher {
					t.confirmed = false
				}
			}
			for k, h := range w.held {
				if k.watcher == watcher {
					h.confirmed = false
				}
			}
		}
	}
	w.updateUpLocked()
	return true
}

func (w *Watcher) updateUpLocked() {
	all := w.conn != nil || w.current == TransportSSE
	for _, s := range w.subs {
		all = all && s.up
	}
	switch {
	case all && !w.allUp:
		w.allUp = true
		w.lastErr = nil
		close(w.upAll)
	case !all && w.allUp:
		w.allUp = false
		w.upAll = make(chan struct{})
	}
}

// enqueueConfirm asks the confirmer to run confirm for watcher.
func (w *Watcher) enqueueConfirm(watchers ...string) {
	w.mu.Lock()
	for _, watcher := range watchers {
		w.confirmQ[watcher] = true
	}
	w.mu.Unlock()
	select {
	case w.confirmWake <- struct{}{}:
	default:
	}
}

// confirmer runs the confirmations asked for, one watcher at a time.
func (w *Watcher) confirmer() {
	defer w.wg.Done()
	for {
		select {
		case <-w.confirmWake:
		case <-w.ctx.Done():
			return
		}
		for {
			w.mu.Lock()
			var next string
			for watcher := range w.confirmQ {
				next = watcher
				break
			}
			delete(w.confirmQ, next)
			w.mu.Unlock()
			if next == "" {
				break
			}
			w.confirm(next)
		}
	}
}

// confirm drops the open notices of watcher that the service no longer has pending,
// and marks such held ones gone: they were acknowledged or removed while its stream
// was down. It runs after each subscription and leaves alone what the stream
// delivered since, the confirmed ones: the query's answer may be older than that.
func (w *Watcher) confirm(watcher string) {
	pending, err := w.c.PendingNotices(w.ctx, watcher)
	if err != nil {
		w.log.Debug("confirm pending notices", "watcher", watcher, "err", err)
		return
	}
	w.applyPending(watcher, pending)
}

// applyPending is confirm with the service's answer.
func (w *Watcher) applyPending(watcher string, pending []Notice) {
	have := map[noticeKey]int64{}
	for _, n := range pending {
		have[n.key()] = n.NotifiedVersion
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, t := range w.open {
		if v, ok := have[k]; k.watcher == watcher && !t.confirmed && (!ok || v != t.n.NotifiedVersion) {
			delete(w.open, k)
		}
	}
	for k, h := range w.held {
		if v, ok := have[k]; k.watcher == watcher && !h.confirmed && (!ok || v != h.n.NotifiedVersion) {
			h.gone = true
		}
	}
}

// Close stops the streams; Close never fails. Acknowledgements still owed are tried
// once more, for at most a second; notices not acknowledged stay pending in the
// service, which delivers them again to the next Watcher.
func (w *Watcher) Close() error {
	w.mu.Lock()
	owed := w.ackOwed && w.ctx.Err() == nil
	w.mu.Unlock()
	if owed {
		ctx, cancel := context.WithTimeout(context.Background(), closeAckWait)
		w.sendOwed(ctx)
		cancel()
	}
	w.cancel()
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.wg.Wait()
	w.sseGroup.Wait()
	return nil
}

// run keeps the streams up until Close or a fatal refusal: WebSocket, or SSE when
// the transport says so or TransportAuto found the upgrade refused.
func (w *Watcher) run() {
	defer w.wg.Done()
	mode := TransportWebSocket
	if w.opts.Transport == TransportSSE {
		mode = TransportSSE
	}
	delay := w.opts.MinBackoff
	var handover *wsConn
	for w.ctx.Err() == nil {
		if mode == TransportSSE {
			handover = w.runSSE()
			mode = TransportWebSocket
			continue
		}
		start := time.Now()
		err := w.runWS(handover)
		handover = nil
		if w.ctx.Err() != nil {
			return
		}
		if err.Fatal {
			w.streamFailed(err)
			w.stop(err)
			return
		}
		w.streamFailed(err)
		if w.opts.Transport == TransportAuto && upgradeRefused(err.Status) {
			w.log.Warn("the WebSocket upgrade was refused; following the notices over SSE", "status", err.Status,
				"retry_websocket_in", w.opts.WebSocketRetry)
			mode = TransportSSE
			continue
		}
		if time.Since(start) > 2*w.opts.MaxBackoff {
			delay = w.opts.MinBackoff // it was up for a while: start the backoff again
		}
		wait := max(delay+rand.N(delay/2+1), RetryAfter(err.Err))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-w.ctx.Done():
			t.Stop()
			return
		}
		delay = min(2*delay, w.opts.MaxBackoff)
	}
}

// upgradeRefused reports whether the HTTP status answering a WebSocket upgrade says
// that upgrades do not pass: a proxy's 400, 403, 404, 405, 426 or 501, or a 200
// from a proxy that dropped the Upgrade header. An outage (502, 503, 504), a refused
// token (401) and a limit (408, 429) are not.
func upgradeRefused(status int) bool {
	switch {
	case status == 0 || status == 401 || status == 408 || status == 429:
		return false
	case status >= 500:
		return status == 501 || status == 505
	}
	return status != 101
}
