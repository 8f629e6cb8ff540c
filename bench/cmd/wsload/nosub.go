package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/awareness/awareness/bench/internal/loadkeys"
	"github.com/awareness/awareness/bench/internal/wsresult"
)

// The broadcast trigger with no subscriber (b_none): P6's baseline.
//
// b_big's round r appends one human message to Target('b', r), whose 10,000 cursors
// (one per watcher 0..n-1, from the setup) are synced, so the append opens 10,000
// notices. b_none sends the same triggers to the same targets after every client has
// disconnected. For the service the cursors are first brought back to that state: every
// watcher acknowledges its notices on those targets over the API (ackNotices, which
// sets L = N, a synced cursor, as the setup left it), so that each trigger again opens
// n notices — the same UPDATE of the same rows — with nobody to deliver them to; then
// the phase waits until the server is quiet (settleIdle). The trigger's answer says how
// many it opened, and the service's /metrics the Append transaction's duration, in both
// phases (Phase.StoreAppendMS).

// noSubscriberPhase closes every client, waits until the server has no subscription,
// restores the cursors of set's targets (service), and sends rounds broadcast triggers,
// each to watchers 0..n-1.
func (r *runner) noSubscriberPhase(ctx context.Context, name string, set byte, rounds, n int) error {
	logf("phase %s: %d rounds to %d watchers, no subscriber connected", name, rounds, n)
	pr := &wsresult.Phase{}
	r.res.Phases[name] = pr
	t0 := time.Now()
	var wg sync.WaitGroup
	for _, c := range r.clients {
		wg.Go(c.close)
	}
	wg.Wait()
	subs, err := r.waitNoSubscribers(ctx, 30*time.Second)
	pr.SubscribersLeft = subs
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if subs != 0 {
		return fmt.Errorf("%s: the server still counts %d subscriptions 30 s after every client closed", name, subs)
	}
	least := 3 * time.Second // as b_big starts after the connections settle
	if r.cfg.mode == "service" {
		followUps, err := r.ackAll(ctx, set, rounds, n)
		if err != nil {
			return fmt.Errorf("%s: acknowledging: %w", name, err)
		}
		pr.Mismatch += followUps
		// The acknowledgements leave background work behind (the checkpoint of their
		// commits), which b_big's triggers did not have beside them: wait it out.
		// Without this wait the first triggers' Append transactions took up to 4× b_big's.
		least = 8 * time.Second
	}
	logf("server quiet after %v", r.settleIdle(ctx, least, 30*time.Second).Round(time.Millisecond))
	var trig, commits []int64
	var cpu time.Duration
	for round := range rounds {
		m0 := r.appendTx(ctx)
		cpu0 := r.srv.CPU()
		sent, answered, opened, err := r.trigger(ctx, loadkeys.Target(set, round), 0, n)
		if err != nil {
			return fmt.Errorf("%s round %d: %w", name, round, err)
		}
		cpuRound := r.srv.CPU() - cpu0
		commit, ok := r.appendTx(ctx).since(m0)
		logf("  round %d: trigger %v, opened %d%s", round, answered.Sub(sent).Round(time.Microsecond), opened, txNote(commit, ok))
		if r.cfg.mode == "service" && opened != n {
			pr.Mismatch++
		}
		if round == 0 {
			continue // warm-up, as in b_big
		}
		cpu += cpuRound
		pr.Opened += opened
		trig = append(trig, answered.Sub(sent).Nanoseconds())
		if ok {
			commits = append(commits, commit.Nanoseconds())
		}
		settle(ctx, 300*time.Millisecond)
	}
	pr.Seconds = time.Since(t0).Seconds()
	pr.TriggerMS = wsresult.Summarize(trig)
	pr.StoreAppendMS = wsresult.Summarize(commits)
	pr.ServerCPUMS = float64(cpu.Microseconds()) / 1e3
	logf("phase %s: trigger p50 %.2fms p99 %.2fms, Append transaction p50 %.2fms, %d notices opened", name,
		pr.TriggerMS.P50, pr.TriggerMS.P99, pr.StoreAppendMS.P50, pr.Opened)
	return ctx.Err()
}

// settleIdle waits at least least, then until the server used under 5% of a core in
// each of two consecutive half seconds, or most has passed; it returns the time waited.
func (r *runner) settleIdle(ctx context.Context, least, most time.Duration) time.Duration {
	t0 := time.Now()
	settle(ctx, least)
	const window = 500 * time.Millisecond
	quiet := 0
	for quiet < 2 && time.Since(t0) < most && ctx.Err() == nil {
		c0 := r.srv.CPU()
		settle(ctx, window)
		if r.srv.CPU()-c0 < window/20 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return time.Since(t0)
}

// waitNoSubscribers polls the server's subscription count (the service's /metrics,
// a peer's /debug/stats) until it is 0 or wait has passed, and returns the last count.
func (r *runner) waitNoSubscribers(ctx context.Context, wait time.Duration) (int, error) {
	deadline := time.Now().Add(wait)
	for {
		n, err := r.subscriptions(ctx)
		if err != nil || n == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return n, err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// subscriptions is the number of live subscriptions the server counts.
func (r *runner) subscriptions(ctx context.Context) (int, error) {
	if r.cfg.mode == "service" {
		fams, err := r.metrics(ctx)
		if err != nil {
			return 0, err
		}
		f := fams["awareness_subscribers"]
		if f == nil {
			return 0, fmt.Errorf("/metrics has no awareness_subscribers")
		}
		total := 0.0
		for _, m := range f.GetMetric() {
			total += m.GetGauge().GetValue()
		}
		return int(total), nil
	}
	st := r.stats(ctx)
	v, ok := st["subscriptions"]
	if !ok {
		return 0, fmt.Errorf("/debug/stats has no subscriptions")
	}
	return int(v), nil
}

// metrics reads the service's /metrics.
func (r *runner) metrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.srv.Base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: HTTP %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// txTotals are the count and sum of the service's Append transactions so far
// (awareness_store_transaction_duration_seconds); zero for a peer or on an error.
type txTotals struct {
	count uint64
	sum   float64
	ok    bool
}

func (r *runner) appendTx(ctx context.Context) txTotals {
	if r.cfg.mode != "service" {
		return txTotals{}
	}
	fams, err := r.metrics(ctx)
	if err != nil {
		return txTotals{}
	}
	var t txTotals
	for _, m := range fams["awareness_store_transaction_duration_seconds"].GetMetric() {
		tx, ok := "", false
		for _, l := range m.GetLabel() {
			switch {
			case l.GetName() == "transaction":
				tx = l.GetValue()
			case l.GetName() == "result" && l.GetValue() == "ok":
				ok = true
			}
		}
		if tx == "Append" && ok {
			t.count, t.sum, t.ok = m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum(), true
		}
	}
	return t
}

// since is the duration of the one Append transaction between t0 and t; false unless
// exactly one ran.
func (t txTotals) since(t0 txTotals) (time.Duration, bool) {
	if !t.ok || !t0.ok || t.count != t0.count+1 {
		return 0, false
	}
	return time.Duration((t.sum - t0.sum) * 1e9), true
}

// txNote is the Append transaction's duration for a log line ("" when unknown).
func txNote(d time.Duration, ok bool) string {
	if !ok {
		return ""
	}
	return ", Append transaction " + d.Round(time.Microsecond).String()
}

// ackAll acknowledges every notice of watchers 0..n-1 on set's targets of rounds
// 0..rounds-1 (ackNotices, 32 at a time) and returns how many follow-up notices the
// acknowledgements opened (none expected: nothing was appended to those targets since
// their notices opened).
func (r *runner) ackAll(ctx context.Context, set byte, rounds, n int) (int, error) {
	t0 := time.Now()
	targets := make([]string, rounds)
	for i := range targets {
		targets[i] = loadkeys.Target(set, i)
	}
	const ackMutation = `mutation($w: String!, $t: [String!]) { ackNotices(watcher: $w, targets: $t) { target } }`
	var followUps atomic.Int64
	var firstErr atomic.Value
	ch := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range ch {
				var d struct {
					AckNotices []struct {
						Target string `json:"target"`
					} `json:"ackNotices"`
				}
				if err := r.gql(ctx, ackMutation, map[string]any{"w": loadkeys.Watcher(i), "t": targets}, &d); err != nil {
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				followUps.Add(int64(len(d.AckNotices)))
			}
		})
	}
	for i := range n {
		if firstErr.Load() != nil || ctx.Err() != nil {
			break
		}
		ch <- i
	}
	close(ch)
	wg.Wait()
	logf("acknowledged %d watchers' notices on %d targets in %v", n, rounds, time.Since(t0).Round(time.Millisecond))
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return int(followUps.Load()), ctx.Err()
}
