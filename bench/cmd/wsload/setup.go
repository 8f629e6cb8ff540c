package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/awareness/awareness/bench/internal/loadkeys"
)

// setup creates, through the API, every cursor of the run (child_spawned on each target
// with its watchers as producer-passed watchers, at most 32 per event) and the L3
// session of 1,000 events.
func (r *runner) setup(ctx context.Context) error {
	t0 := time.Now()
	var jobs []map[string]any
	spawn := func(target string, watchers []string) {
		jobs = append(jobs, map[string]any{"sessionKey": target, "kind": "child_spawned", "actorType": "agent", "watchers": watchers})
	}
	for i := range r.cfg.subs {
		spawn(loadkeys.Target('a', i), []string{loadkeys.Watcher(i)})
		if !r.cfg.noA2 {
			spawn(loadkeys.Target('u', i), []string{loadkeys.Watcher(i)})
		}
	}
	cursors := r.cfg.subs * 2
	group := func(set byte, rounds, n int) {
		for round := range rounds {
			for lo := 0; lo < n; lo += 32 {
				var ws []string
				for i := lo; i < min(lo+32, n); i++ {
					ws = append(ws, loadkeys.Watcher(i))
				}
				spawn(loadkeys.Target(set, round), ws)
			}
			cursors += n
		}
	}
	group('c', r.cfg.roundsSmall, r.cfg.small)
	group('b', r.cfg.roundsBig, r.cfg.subs)
	for i := range 1000 {
		run := "run-" + strconv.Itoa(i)
		switch i % 3 {
		case 0:
			jobs = append(jobs, map[string]any{"sessionKey": loadkeys.StatusSession, "kind": "run_completed", "actorType": "agent", "actorId": "agent:bench:main", "runId": run})
		case 1:
			jobs = append(jobs, map[string]any{"sessionKey": loadkeys.StatusSession, "kind": "human_direct_message", "actorType": "human", "actorId": "user:alice", "channel": "webchat"})
		default:
			jobs = append(jobs, map[string]any{"sessionKey": loadkeys.StatusSession, "kind": "run_failed", "actorType": "agent", "runId": run, "outcome": "timeout"})
		}
	}
	logf("setup: %d appends", len(jobs))
	ch := make(chan map[string]any)
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range r.cfg.setupWorkers {
		wg.Go(func() {
			for in := range ch {
				if _, err := r.record(ctx, in); err != nil {
					once.Do(func() { firstErr = err })
				}
			}
		})
	}
	for _, in := range jobs {
		if firstErr != nil || ctx.Err() != nil {
			break
		}
		ch <- in
	}
	close(ch)
	wg.Wait()
	r.res.SetupAppends = len(jobs)
	r.res.SetupSeconds = time.Since(t0).Seconds()
	r.res.CursorsAtRestart = cursors
	logf("setup done in %.1fs", r.res.SetupSeconds)
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}
