// Package startstop is the lifecycle every background service of the binary shares:
// one goroutine owned between Start and Stop (the pruner, the upstream monitor, the
// PostgreSQL listener). It imports the standard library only,
// so that the domain core can use it.
//
// The rules, the same for every service: Start on a started service does nothing;
// Stop on a stopped (or never started) service does nothing; Stop returns only once the
// goroutine has ended, also when several goroutines call it at once; a stopped service
// can be started again; a service whose goroutine returned on its own counts as
// stopped.
package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrStop is the cause (context.Cause) of a service's context when Stop cancels it,
// which tells a controlled stop from the end of the context Start was given.
var ErrStop = errors.New("service stopped")

// Base runs one goroutine of a service between Start and Stop. A service keeps one as
// a field and implements its own Start(ctx) and Stop with it. The zero value is a
// stopped service; a Base must not be copied after first use.
type Base struct {
	// mu is held by Start and by Stop, across Stop's wait: Start and Stop are
	// serialised, so that a Start during a Stop starts after it.
	mu     sync.Mutex
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when run has returned; nil when stopped
}

// Start runs run in a new goroutine, with a context derived from ctx that Stop
// cancels (with cause ErrStop), and reports whether it started one: it does nothing
// and returns false while the service runs. run must not call Start or Stop of its own
// Base.
func (b *Base) Start(ctx context.Context, run func(ctx context.Context)) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done != nil {
		select {
		case <-b.done: // run returned on its own: the service is stopped
			b.cancel(ErrStop)
		default:
			return false
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	b.cancel, b.done = cancel, done
	go func() {
		defer close(done)
		run(ctx)
	}()
	return true
}

// Stop cancels the goroutine's context and waits until run has returned.
func (b *Base) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done == nil {
		return
	}
	b.cancel(ErrStop)
	<-b.done
	b.cancel, b.done = nil, nil
}
