package startstop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// service is the smallest service on a Base: run blocks until its context ends (or
// returns at once when early is set) and records what it saw.
type service struct {
	base    Base
	early   bool
	runs    atomic.Int64 // runs started
	ended   atomic.Int64 // runs returned
	running chan struct{}
	cause   atomic.Value // context.Cause of the last run's context, once it ended
}

func newService() *service { return &service{running: make(chan struct{}, 16)} }

func (s *service) Start(ctx context.Context) bool {
	return s.base.Start(ctx, func(ctx context.Context) {
		defer s.ended.Add(1)
		s.runs.Add(1)
		s.running <- struct{}{}
		if s.early {
			return
		}
		<-ctx.Done()
		s.cause.Store(context.Cause(ctx))
	})
}

func (s *service) Stop() { s.base.Stop() }

// waitRunning waits until a run has started.
func (s *service) waitRunning() { <-s.running }

func check(t *testing.T, what string, got, want int64) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %d, want %d", what, got, want)
	}
}

func TestStartStop(t *testing.T) {
	s := newService()
	if !s.Start(t.Context()) {
		t.Fatal("first Start did not start")
	}
	s.waitRunning()
	s.Stop()
	check(t, "runs", s.runs.Load(), 1)
	check(t, "ended", s.ended.Load(), 1)
	if got := s.cause.Load(); !errors.Is(got.(error), ErrStop) {
		t.Errorf("cause of the stopped run's context = %v, want ErrStop", got)
	}
}

func TestDoubleStartRunsOnce(t *testing.T) {
	s := newService()
	s.Start(t.Context())
	if s.Start(t.Context()) {
		t.Error("second Start started a second run")
	}
	s.waitRunning()
	s.Stop()
	check(t, "runs", s.runs.Load(), 1)
}

func TestStopBeforeStartAndStopTwice(t *testing.T) {
	s := newService()
	s.Stop() // never started: nothing to do
	s.Start(t.Context())
	s.waitRunning()
	s.Stop()
	s.Stop()
	check(t, "runs", s.runs.Load(), 1)
	check(t, "ended", s.ended.Load(), 1)
}

func TestStartAfterStopRunsAgain(t *testing.T) {
	s := newService()
	for i := range 3 {
		if !s.Start(t.Context()) {
			t.Fatalf("Start %d after Stop did not start", i+1)
		}
		s.waitRunning()
		s.Stop()
	}
	check(t, "runs", s.runs.Load(), 3)
	check(t, "ended", s.ended.Load(), 3)
}

// A run that returns on its own leaves a stopped service: Stop returns at once and
// Start runs it again.
func TestRunReturningEarlyIsStopped(t *testing.T) {
	s := newService()
	s.early = true
	s.Start(t.Context())
	s.waitRunning()
	s.Stop()
	check(t, "ended", s.ended.Load(), 1)
	s.Start(t.Context())
	s.waitRunning()
	// Without a Stop in between: once the second run has returned, Start starts a
	// third.
	s.base.mu.Lock()
	done := s.base.done
	s.base.mu.Unlock()
	<-done
	if !s.Start(t.Context()) {
		t.Fatal("Start after a run returned on its own did not start")
	}
	s.waitRunning()
	s.Stop()
	check(t, "runs", s.runs.Load(), 3)
}

// The end of the context given to Start ends the run; the service is then stopped.
func TestParentContextEndsTheRun(t *testing.T) {
	s := newService()
	ctx, cancel := context.WithCancel(t.Context())
	s.Start(ctx)
	s.waitRunning()
	cancel()
	s.Stop()
	if got := s.cause.Load(); !errors.Is(got.(error), context.Canceled) {
		t.Errorf("cause = %v, want the parent's context.Canceled", got)
	}
	if !s.Start(t.Context()) {
		t.Fatal("Start after the parent context ended did not start")
	}
	s.waitRunning()
	s.Stop()
}

// Every one of several concurrent Stops returns only once the run has returned.
func TestConcurrentStopWaitsForTheRun(t *testing.T) {
	s := newService()
	s.Start(t.Context())
	s.waitRunning()
	var wg sync.WaitGroup
	var early atomic.Int64
	for range 8 {
		wg.Go(func() {
			s.Stop()
			if s.ended.Load() != 1 {
				early.Add(1)
			}
		})
	}
	wg.Wait()
	check(t, "Stops that returned before the run ended", early.Load(), 0)
	check(t, "runs", s.runs.Load(), 1)
}

// Start and Stop from many goroutines at once: no race, no leak, and after a last
// Stop nothing runs.
func TestConcurrentStartAndStop(t *testing.T) {
	s := newService()
	s.running = make(chan struct{}, 1000)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for range 20 {
				if i%2 == 0 {
					s.Start(t.Context())
				} else {
					s.Stop()
				}
			}
		})
	}
	wg.Wait()
	s.Stop()
	check(t, "runs still running", s.runs.Load()-s.ended.Load(), 0)
}
