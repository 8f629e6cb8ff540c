// The Listener on a hint bus, --bus: subjects subscribed as its interest says,
// synced before a scan, a rescan on every gap.

package models

import (
	"context"
	"math/rand/v2"
	"time"
)

// runBus is run with a bus: the store's own pools serve the reads, and the bus
// delivers the hints of the subjects of interest. It first syncs and scans, then
// hands every message to the worker; a gap, on a connect or dropped messages, and
// every Poll queue a rescan. A failed read starts it over after a jittered backoff,
// like a lost LISTEN connection.
func (l *Listener) runBus(ctx context.Context) {
	backoff := listenerMinBackoff
	for {
		healthy, err := l.busSession(ctx)
		if ctx.Err() != nil {
			return
		}
		if healthy {
			backoff = listenerMinBackoff
		}
		pause := backoff/2 + rand.N(backoff/2+1)
		l.cfg.Logger.Warn("notice listener: a read failed; rescanning", "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		backoff = min(2*backoff, listenerMaxBackoff)
	}
}

// busSession is one run of runBus, until a read fails or ctx ends; healthy says it
// got past its first scan.
func (l *Listener) busSession(ctx context.Context) (healthy bool, err error) {
	bus := l.cfg.Bus
	// The hub announced the interest: subscribed first, then read, with a round trip
	// to make sure the server has the subscriptions. While down, the gap rescans.
	if err := l.syncBus(ctx); err != nil {
		l.cfg.Logger.Debug("notice listener: bus not in sync; its connect rescans", "err", err)
	}
	if err := l.scan(ctx, nil); err != nil {
		return false, err
	}
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
	poll := time.NewTicker(l.cfg.Poll)
	defer poll.Stop()
	for {
		var item string
		select {
		case <-sctx.Done():
			return true, l.ended(ctx, werr)
		case data := <-bus.Messages():
			l.cfg.Observer.ListenerHint()
			item = string(data)
		case <-bus.Gaps():
			if l.gaps.Add(1) > 1 { // the first is the bus's first connect
				l.cfg.Observer.ListenerReconnect()
			}
			item = gapItem
		case <-poll.C:
			item = rescanItem
		}
		select {
		case work <- item:
		case <-sctx.Done():
			return true, l.ended(ctx, werr)
		}
	}
}

// syncBus makes a round trip to the bus server, so that it has every subscription.
func (l *Listener) syncBus(ctx context.Context) error {
	sctx, cancel := context.WithTimeout(ctx, listenerOpTimeout)
	defer cancel()
	return l.cfg.Bus.Sync(sctx, true)
}
