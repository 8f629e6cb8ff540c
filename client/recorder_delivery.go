// The Recorder's delivery: the flusher that fsyncs the outbox, one sender per lane, the
// answers, compaction, Flush and Close.

package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// flusher writes and fsyncs the batches Record fills, one fsync per batch.
func (r *Recorder) flusher() {
	defer r.wg.Done()
	for {
		select {
		case <-r.flushNow:
		case <-r.stop:
			r.flushOnce() // what Records already handed over
			return
		}
		r.flushOnce()
	}
}

func (r *Recorder) flushOnce() {
	r.mu.Lock()
	b := r.cur
	r.cur = nil
	if b != nil {
		r.writing = len(b.entries)
	}
	r.mu.Unlock()
	if b == nil {
		return
	}
	r.wmu.Lock()
	_, err := r.f.Write(b.buf)
	if err == nil {
		err = r.f.Sync()
	}
	if err == nil {
		r.fileBytes += int64(len(b.buf))
	}
	r.wmu.Unlock()
	r.mu.Lock()
	r.writing = 0
	if err != nil {
		r.broken = err
		for _, s := range b.entries {
			r.liveBytes -= s.bytes
		}
		r.log.Error("outbox write failed; Record refuses from now on", "path", r.path, "err", err)
	} else {
		r.publishLocked(b.entries)
	}
	r.mu.Unlock()
	b.err = err
	close(b.done)
}

// publishLocked hands durable entries to their session's sender, in order.
func (r *Recorder) publishLocked(entries []*spooled) {
	for _, s := range entries {
		r.pending[s.id] = s
		l := r.lanes[laneOf(s.ev, len(r.lanes))]
		l.queue = append(l.queue, s)
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// laneOf maps an event's session to a sender, so that one session's events are
// delivered in order by one sender.
func laneOf(ev Event, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(strings.ToLower(strings.TrimSpace(ev.AgentID))))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(strings.ToLower(strings.TrimSpace(ev.SessionKey))))
	return int(h.Sum32() % uint32(n))
}

const (
	recordFields    = `recorded stateVersion event { sequence } skippedWatchers { watcher reason }`
	recordMutation  = `mutation($in: RecordEventInput!) { recordEvent(input: $in) { ` + recordFields + ` } }`
	recordsMutation = `mutation($in: [RecordEventInput!]!) { recordEvents(inputs: $in) { index result { ` + recordFields + ` } error { code message } } }`
)

// recordResult is the service's RecordEventResult.
type recordResult struct {
	Recorded     bool  `json:"recorded"`
	StateVersion int64 `json:"stateVersion"`
	Event        struct {
		Sequence int64 `json:"sequence"`
	} `json:"event"`
	SkippedWatchers []SkippedWatcher `json:"skippedWatchers"`
}

// itemResult is what the service did with one event of a request: its result, or
// its refusal in err.
type itemResult struct {
	result *recordResult
	err    error
}

// sender delivers the events of one lane, oldest first, in batches of up to
// lane.size, until the service has answered for each; it waits retryAfterMs when the
// service says RATE_LIMITED, backs off on an outage, and stops every sender when the
// service refuses the token.
func (r *Recorder) sender(l *lane) {
	defer r.wg.Done()
	ctx := r.ctx
	delay := retryMin
	strikes := 0
	for {
		r.mu.Lock()
		stopped := r.stopped != nil
		single := r.single
		var batch []*spooled
		var size int64
		for _, s := range l.queue {
			if len(batch) == l.size || (len(batch) > 0 && size+s.bytes > batchBytes) {
				break
			}
			batch = append(batch, s)
			size += s.bytes
		}
		if single && len(batch) > 1 {
			batch = batch[:1]
		}
		r.mu.Unlock()
		if len(batch) == 0 || stopped {
			select {
			case <-l.wake:
				continue
			case <-r.stop:
				return
			}
		}
		results, err := r.send(ctx, batch, single)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := delay
			switch code := ErrorCode(err); {
			case code == CodeUnauthenticated:
				r.stopDelivery(err)
				continue
			case code == CodeRateLimited:
				strikes++
				if strikes >= rateStrikes && len(batch) > 1 {
					l.size, strikes = max(1, len(batch)/2), 0
				}
				wait = max(RetryAfter(err), retryMin/10)
				wait += rand.N(wait/10 + 1) // the lanes share the token's budget: do not march in step
			case tooLarge(err) && len(batch) > 1:
				l.size = max(1, len(batch)/2)
				continue
			case !single && unknownField(err, "recordEvents"):
				r.log.Info("the service has no recordEvents; delivering one event per request")
				r.mu.Lock()
				r.single = true
				r.mu.Unlock()
				continue
			case Permanent(err) && len(batch) > 1:
				l.size = max(1, len(batch)/2) // find the event the request is refused for
				continue
			case Permanent(err):
				results = []itemResult{{err: err}} // the one event is refused
			default:
				delay = min(delay*2, retryMax)
			}
			if results == nil {
				r.log.Debug("delivery failed; retrying", "session", batch[0].ev.SessionKey, "events", len(batch), "err", err, "retry_in", wait)
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-r.stop:
					t.Stop()
					return
				}
				continue
			}
		}
		delay, strikes = retryMin, 0
		if l.size < r.opts.BatchSize && len(results) == len(batch) {
			l.size = min(r.opts.BatchSize, 2*l.size) // grow back after a split
		}
		r.answered(l, batch, results)
	}
}

// send posts batch with recordEvents, or with recordEvent on a service without it.
// It returns the answer per event, in order, up to the first event an outage inside
// the batch kept the service from taking: those after it are sent again.
func (r *Recorder) send(ctx context.Context, batch []*spooled, single bool) ([]itemResult, error) {
	if single {
		var res struct {
			RecordEvent recordResult `json:"recordEvent"`
		}
		if err := r.c.Do(ctx, recordMutation, map[string]any{"in": batch[0].ev}, &res); err != nil {
			return nil, err
		}
		return []itemResult{{result: &res.RecordEvent}}, nil
	}
	inputs := make([]Event, len(batch))
	for i, s := range batch {
		inputs[i] = s.ev
	}
	var res struct {
		RecordEvents []struct {
			Index  int           `json:"index"`
			Result *recordResult `json:"result"`
			Error  *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		} `json:"recordEvents"`
	}
	if err := r.c.Do(ctx, recordsMutation, map[string]any{"in": inputs}, &res); err != nil {
		return nil, err
	}
	out := make([]itemResult, len(batch))
	seen := make([]bool, len(batch))
	for _, it := range res.RecordEvents {
		if it.Index < 0 || it.Index >= len(batch) {
			continue
		}
		seen[it.Index] = true
		if it.Error != nil {
			out[it.Index].err = &Error{Code: it.Error.Code, Message: it.Error.Message}
		} else {
			out[it.Index].result = it.Result
		}
	}
	for i := range out {
		if !seen[i] || (out[i].result == nil && out[i].err == nil) {
			return out[:i], nil // not answered: sent again
		}
		if out[i].err != nil && !Permanent(out[i].err) {
			return out[:i], nil // the service could not take it now: sent again
		}
	}
	return out, nil
}

// tooLarge reports a refusal of the request's size, COMPLEXITY_LIMIT_EXCEEDED or HTTP
// 413: a smaller batch may pass.
func tooLarge(err error) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && (e.Code == CodeComplexity || e.Status == 413)
}

// unknownField reports the validation error of a service whose schema lacks field.
func unknownField(err error, field string) bool {
	e, ok := errors.AsType[*Error](err)
	return ok && e.Code == "GRAPHQL_VALIDATION_FAILED" && strings.Contains(e.Message, `"`+field+`"`)
}

// stopDelivery stops every sender for good: the service refused the token.
func (r *Recorder) stopDelivery(err error) {
	r.mu.Lock()
	first := r.stopped == nil
	if first {
		r.stopped = fmt.Errorf("%w: %w", ErrDeliveryStopped, err)
	}
	stopped := r.stopped
	pending := len(r.pending)
	r.mu.Unlock()
	if first {
		r.log.Error("the service refused the token; delivery stopped, the events stay in the outbox", "path", r.path, "pending", pending, "err", err)
		r.report(stopped)
	}
}

// report hands err to Errors, dropping the oldest when the buffer is full.
func (r *Recorder) report(err error) {
	for {
		select {
		case r.errs <- err:
			return
		default:
		}
		select {
		case <-r.errs:
		default:
		}
	}
}

// Errors receives what goes wrong during delivery, which Record could not report: a
// spooled event the service refused for good, as a *DeliveryError, and the refusal of
// the token that stopped delivery, ErrDeliveryStopped. It holds the last errBuffer
// errors for a caller that reads late.
func (r *Recorder) Errors() <-chan error { return r.errs }

// Err returns the error that stopped delivery, wrapping ErrDeliveryStopped, or nil.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// Resume restarts delivery after the service refused the token, once the refusal is
// fixed on the service's side, e.g. the token was added to its auth file. A token
// fixed on the gateway's side needs a new Client: Close this Recorder and open one on
// the same outbox with it.
func (r *Recorder) Resume() {
	r.mu.Lock()
	r.stopped = nil
	r.mu.Unlock()
	for _, l := range r.lanes {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// answered settles the first len(results) events of batch, the head of l.
func (r *Recorder) answered(l *lane, batch []*spooled, results []itemResult) {
	if len(results) == 0 {
		return
	}
	done := batch[:len(results)]
	var ds []Delivery
	for i, s := range done {
		d := Delivery{Event: s.ev, Err: results[i].err}
		if res := results[i].result; res != nil {
			d.Recorded, d.Sequence, d.StateVersion, d.SkippedWatchers = res.Recorded, res.Event.Sequence, res.StateVersion, res.SkippedWatchers
		}
		for _, sw := range d.SkippedWatchers {
			r.log.Warn("a producer-passed watcher was skipped", "session", s.ev.SessionKey, "watcher", sw.Watcher, "reason", sw.Reason)
		}
		if d.Err != nil {
			r.log.Error("the service refused a spooled event; dropping it", "session", s.ev.SessionKey, "kind", s.ev.Kind, "err", d.Err)
			r.report(&DeliveryError{Event: s.ev, Err: d.Err})
		}
		ds = append(ds, d)
	}
	r.delivered(l, done)
	if r.opts.OnDelivery != nil {
		for _, d := range ds {
			r.opts.OnDelivery(d)
		}
	}
}

// delivered removes done, the head of l, and appends their done lines without an
// fsync: a done line lost in a crash only makes the event be delivered again, which
// its dedupeKey makes harmless.
func (r *Recorder) delivered(l *lane, done []*spooled) {
	r.mu.Lock()
	l.queue = l.queue[len(done):]
	for _, s := range done {
		delete(r.pending, s.id)
		r.liveBytes -= s.bytes
	}
	if r.emptyLocked() {
		close(r.idle)
		r.idle = make(chan struct{})
	}
	r.mu.Unlock()
	var buf []byte
	for _, s := range done {
		line, _ := json.Marshal(outboxLine{Done: s.id})
		buf = append(append(buf, line...), '\n')
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	if _, err := r.f.Write(buf); err != nil {
		r.log.Warn("outbox: writing delivery marks failed (the events may be delivered again, harmlessly)", "err", err)
		return
	}
	r.fileBytes += int64(len(buf))
	r.mu.Lock()
	live := r.liveBytes
	r.mu.Unlock()
	if r.fileBytes > r.compactAt && r.fileBytes > 2*live {
		r.compactLocked()
	}
}

// compactLocked rewrites the outbox with only its undelivered events; wmu is held.
func (r *Recorder) compactLocked() {
	r.mu.Lock()
	entries := make([]*spooled, 0, len(r.pending))
	for _, s := range r.pending {
		entries = append(entries, s)
	}
	r.mu.Unlock()
	sort.Slice(entries, func(i, j int) bool { return entries[i].id < entries[j].id })
	if err := r.rewrite(entries); err != nil {
		r.log.Warn("outbox compaction failed; keeping the file as it is", "err", err)
	}
}

// Pending returns the number of events recorded and not yet delivered.
func (r *Recorder) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.pending) + r.writing
	if r.cur != nil {
		n += len(r.cur.entries)
	}
	return n
}

func (r *Recorder) emptyLocked() bool { return len(r.pending) == 0 && r.cur == nil && r.writing == 0 }

// Flush waits until every event recorded so far is delivered, delivery stopped, or
// ctx ends.
func (r *Recorder) Flush(ctx context.Context) error {
	for {
		r.mu.Lock()
		empty := r.emptyLocked()
		idle, stopped := r.idle, r.stopped
		r.mu.Unlock()
		if empty {
			return nil
		}
		if stopped != nil {
			return stopped
		}
		select {
		case <-idle:
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Close stops the senders and closes the outbox; undelivered events stay in the file
// for the next OpenRecorder. Records in flight finish their fsync first. Close is
// idempotent.
func (r *Recorder) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	close(r.stop)
	r.cancel()
	r.wg.Wait()
	r.wmu.Lock()
	defer r.wmu.Unlock()
	err := r.f.Sync()
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	_ = r.lock.Truncate(0) // no owner any more
	_ = r.lock.Close()
	return err
}
