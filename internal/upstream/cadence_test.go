package upstream

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"
)

// newBareMonitor returns a monitor whose cycle is fn, for cadence tests.
func newBareMonitor(first, every time.Duration, fn func(ctx context.Context) (CycleStats, error)) *Monitor {
	m := &Monitor{cfg: Config{FirstCheck: first, Interval: every}, log: slog.New(slog.DiscardHandler)}
	m.cycle = fn
	return m
}

func TestCadenceFirstCheckThenInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		m := newBareMonitor(DefaultFirstCheck, DefaultInterval, func(context.Context) (CycleStats, error) {
			at = append(at, time.Since(start))
			return CycleStats{}, nil
		})
		m.Stop() // stop before start is fine
		m.Start(t.Context())
		m.Start(t.Context()) // a second start does nothing
		time.Sleep(185 * time.Second)
		synctest.Wait()
		m.Stop()
		m.Stop()
		want := []time.Duration{15 * time.Second, 60 * time.Second, 120 * time.Second, 180 * time.Second}
		if len(at) != len(want) {
			t.Fatalf("checks at %v, want %v", at, want)
		}
		for i := range want {
			if at[i] != want[i] {
				t.Errorf("check %d at %v, want %v", i, at[i], want[i])
			}
		}
	})
}

func TestCyclesNeverOverlapAndStopAbortsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var running, maxRunning, runs int
		m := newBareMonitor(time.Second, 10*time.Second, func(ctx context.Context) (CycleStats, error) {
			running++
			runs++
			maxRunning = max(maxRunning, running)
			defer func() { running-- }()
			select { // a slow cycle: 25 s, longer than two intervals
			case <-time.After(25 * time.Second):
				return CycleStats{}, nil
			case <-ctx.Done():
				return CycleStats{}, ctx.Err()
			}
		})
		m.Start(t.Context())
		time.Sleep(60 * time.Second)
		synctest.Wait()
		stopped := time.Now()
		m.Stop() // the cycle in flight is aborted, not waited out
		if d := time.Since(stopped); d != 0 {
			t.Errorf("Stop took %v of fake time, want an immediate abort", d)
		}
		if maxRunning != 1 {
			t.Errorf("at most %d cycles ran at once, want 1", maxRunning)
		}
		if runs < 2 || runs > 3 {
			t.Errorf("runs = %d in 60 s of 25 s cycles", runs)
		}
	})
}

func TestRunOnceSkipsWhileACycleRuns(t *testing.T) {
	m := &Monitor{}
	m.running.Lock()
	st, err := m.RunOnce(context.Background())
	m.running.Unlock()
	if err != nil || !st.Skipped {
		t.Errorf("RunOnce during a cycle = %+v, %v; want skipped", st, err)
	}
}
