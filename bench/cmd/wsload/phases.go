package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/awareness/awareness/bench/internal/loadkeys"
	"github.com/awareness/awareness/bench/internal/wsresult"
)

// The measured phases.

// broadcastPhase runs rounds broadcasts on set's targets, each to subscribers 0..n-1.
func (r *runner) broadcastPhase(ctx context.Context, name string, set byte, rounds, n int) error {
	logf("phase %s: %d rounds to %d subscribers", name, rounds, n)
	pr := &wsresult.Phase{}
	r.res.Phases[name] = pr
	t0 := time.Now()
	dupes0, mism0 := r.rec.dupes.Load(), r.rec.mismatch.Load()
	var fromCommit, fromResp, fromSend, trig, commits []int64
	r.profile(ctx, "start", name)
	var cpu time.Duration
	for round := range rounds {
		m0 := r.appendTx(ctx)
		cpu0 := r.srv.CPU()
		sent, answered, opened, err := r.trigger(ctx, loadkeys.Target(set, round), 0, n)
		if err != nil {
			r.profile(ctx, "stop", name)
			return fmt.Errorf("%s round %d: %w", name, round, err)
		}
		if opened != n {
			pr.Mismatch++
		}
		r.rec.waitFor(ctx, set, round, int64(n), r.cfg.wait)
		if round > 0 {
			cpu += r.srv.CPU() - cpu0
		}
		commit, commitOK := r.appendTx(ctx).since(m0)
		got := r.rec.counts[set][round].Load()
		logf("  round %d: trigger %v, %d/%d frames, opened %d%s", round, answered.Sub(sent).Round(time.Microsecond), got, n, opened, txNote(commit, commitOK))
		if round == 0 {
			continue // warm-up
		}
		trig = append(trig, answered.Sub(sent).Nanoseconds())
		pr.Opened += opened
		if commitOK {
			commits = append(commits, commit.Nanoseconds())
		}
		pr.Expected += n
		committed := answered.UnixNano()
		for i := range n {
			if at := r.rec.sets[set][round][i].Load(); at != 0 && at < committed {
				committed = at
			}
		}
		for i := range n {
			at := r.rec.sets[set][round][i].Load()
			if at == 0 {
				pr.Lost++
				continue
			}
			pr.Received++
			fromCommit = append(fromCommit, at-committed)
			fromResp = append(fromResp, at-answered.UnixNano())
			fromSend = append(fromSend, at-sent.UnixNano())
		}
		settle(ctx, 300*time.Millisecond)
	}
	r.profile(ctx, "stop", name)
	pr.Seconds = time.Since(t0).Seconds()
	pr.FromCommit, pr.FromResp, pr.FromSend, pr.TriggerMS = wsresult.Summarize(fromCommit), wsresult.Summarize(fromResp), wsresult.Summarize(fromSend), wsresult.Summarize(trig)
	pr.StoreAppendMS = wsresult.Summarize(commits)
	pr.ServerCPUMS = float64(cpu.Microseconds()) / 1e3
	if pr.Received > 0 {
		pr.CPUPerFrameUS = pr.ServerCPUMS * 1e3 / float64(pr.Received)
	}
	pr.Dupes = int(r.rec.dupes.Load() - dupes0)
	pr.Mismatch += int(r.rec.mismatch.Load() - mism0)
	logf("phase %s: p50 %.2fms p99 %.2fms max %.2fms, lost %d", name, pr.FromCommit.P50, pr.FromCommit.P99, pr.FromCommit.Max, pr.Lost)
	return ctx.Err()
}

// ownTargetPhase is L1(a): rate appends per second, each on one subscriber's own
// target, every subscriber once in a random order; with l3, sessionStatus queries run
// alongside at statusRate.
func (r *runner) ownTargetPhase(ctx context.Context, name string, set byte, l3 bool) error {
	n := r.cfg.subs
	logf("phase %s: %d appends at %d/s (L3: %v)", name, n, r.cfg.rate, l3)
	pr := &wsresult.Phase{Expected: n}
	r.res.Phases[name] = pr
	dupes0, mism0 := r.rec.dupes.Load(), r.rec.mismatch.Load()
	sent := make([]int64, n)
	answered := make([]int64, n)
	var trigErrs, openedWrong atomic.Int64
	var firstErr atomic.Value
	order := rand.Perm(n)
	interval := time.Second / time.Duration(r.cfg.rate)
	duration := time.Duration(n) * interval

	var l3wg sync.WaitGroup
	var l3lat []int64
	var l3errs atomic.Int64
	if l3 {
		l3wg.Go(func() { l3lat = r.statusLoad(ctx, duration, &l3errs) })
	}
	r.profile(ctx, "start", name)
	cpu0 := r.srv.CPU()
	t0 := time.Now()
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	for k, i := range order {
		if ctx.Err() != nil {
			break
		}
		if d := time.Until(t0.Add(time.Duration(k) * interval)); d > 0 {
			time.Sleep(d)
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s, a, opened, err := r.trigger(ctx, loadkeys.Target(set, i), i, 0)
			if err != nil {
				trigErrs.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			if opened != 1 {
				openedWrong.Add(1)
			}
			atomic.StoreInt64(&sent[i], s.UnixNano())
			atomic.StoreInt64(&answered[i], a.UnixNano())
		})
	}
	wg.Wait()
	r.rec.waitFor(ctx, set, 0, int64(n), r.cfg.wait)
	pr.ServerCPUMS = float64((r.srv.CPU() - cpu0).Microseconds()) / 1e3
	r.profile(ctx, "stop", name)
	l3wg.Wait()
	pr.Seconds = time.Since(t0).Seconds()
	var fromCommit, fromResp, fromSend, trig []int64
	for i := range n {
		at := r.rec.sets[set][0][i].Load()
		s, a := atomic.LoadInt64(&sent[i]), atomic.LoadInt64(&answered[i])
		if at == 0 || a == 0 {
			pr.Lost++
			continue
		}
		pr.Received++
		fromCommit = append(fromCommit, at-min(a, at))
		fromResp = append(fromResp, at-a)
		fromSend = append(fromSend, at-s)
		trig = append(trig, a-s)
	}
	pr.FromCommit, pr.FromResp, pr.FromSend, pr.TriggerMS = wsresult.Summarize(fromCommit), wsresult.Summarize(fromResp), wsresult.Summarize(fromSend), wsresult.Summarize(trig)
	pr.TriggerMS.Errors = int(trigErrs.Load())
	if pr.Received > 0 {
		pr.CPUPerFrameUS = pr.ServerCPUMS * 1e3 / float64(pr.Received)
	}
	pr.Dupes = int(r.rec.dupes.Load() - dupes0)
	pr.Mismatch = int(r.rec.mismatch.Load()-mism0) + int(openedWrong.Load())
	logf("phase %s: p50 %.2fms p99 %.2fms max %.2fms, lost %d, trigger errors %d", name, pr.FromCommit.P50, pr.FromCommit.P99, pr.FromCommit.Max, pr.Lost, trigErrs.Load())
	if l3 {
		s := wsresult.Summarize(l3lat)
		s.Errors = int(l3errs.Load())
		r.res.L3 = &s
		logf("L3: %d requests, p50 %.2fms p99 %.2fms, %d errors", s.N, s.P50, s.P99, s.Errors)
	}
	if err, _ := firstErr.Load().(error); err != nil {
		r.res.Errors = append(r.res.Errors, fmt.Sprintf("%s: %d trigger errors, first: %v", name, trigErrs.Load(), err))
	}
	return ctx.Err()
}

const statusQuery = `query($k: String!, $s: Int) { sessionStatus(sessionKey: $k, changesSince: $s) {
  sessionKey agentId stateVersion
  stateChanges { events { sequence kind actorType actorId summary occurredAt runId payload }
    historyGap truncated earliestAvailableSequence nextChangesSince } } }`

// statusLoad sends sessionStatus(changesSince) queries returning 200 events at
// statusRate for duration and returns their latencies (send → body read). A request
// fails on a transport error, a non-200 status, GraphQL errors or a page that is not
// 200 events.
func (r *runner) statusLoad(ctx context.Context, duration time.Duration, errs *atomic.Int64) []int64 {
	total := int(duration.Seconds() * float64(r.cfg.statusRate))
	interval := time.Second / time.Duration(r.cfg.statusRate)
	lat := make([]int64, total)
	sem := make(chan struct{}, 256)
	var wg sync.WaitGroup
	t0 := time.Now()
	var firstErr atomic.Value
	stopAt := t0.Add(duration + 5*time.Second)
	unsent := 0
	for k := range total {
		if ctx.Err() != nil || time.Now().After(stopAt) {
			unsent = total - k
			break
		}
		if d := time.Until(t0.Add(time.Duration(k) * interval)); d > 0 {
			time.Sleep(d)
		}
		select {
		case sem <- struct{}{}:
		case <-time.After(time.Until(stopAt)):
			unsent = total - k
		}
		if unsent > 0 {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			after := rand.IntN(801)
			s := time.Now()
			var d struct {
				SessionStatus struct {
					StateChanges struct {
						Events []struct {
							Sequence int64 `json:"sequence"`
						} `json:"events"`
					} `json:"stateChanges"`
				} `json:"sessionStatus"`
			}
			// The clock stops when the body is read: the answer's decoding is the load
			// generator's work (B4's baseline decodes nothing either), done after.
			data, err := r.post(ctx, "/query", map[string]any{"query": statusQuery,
				"variables": map[string]any{"k": loadkeys.StatusSession, "s": after}})
			took := time.Since(s)
			if err == nil {
				err = decodeGQL(data, &d)
			}
			if err == nil && len(d.SessionStatus.StateChanges.Events) != 200 {
				err = fmt.Errorf("got %d events", len(d.SessionStatus.StateChanges.Events))
			}
			if err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			lat[k] = took.Nanoseconds()
		})
	}
	wg.Wait()
	if unsent > 0 {
		errs.Add(int64(unsent))
		r.res.Errors = append(r.res.Errors, fmt.Sprintf("L3: %d of %d requests not sent: 256 in flight and the phase over (the server did not keep up)", unsent, total))
	}
	if err, _ := firstErr.Load().(error); err != nil {
		r.res.Errors = append(r.res.Errors, fmt.Sprintf("L3: %d errors, first: %v", errs.Load(), err))
	}
	out := lat[:0]
	for _, v := range lat {
		if v > 0 {
			out = append(out, v)
		}
	}
	return out
}
