// Recording: one event by RecordEvent or a batch by RecordBatch, checked, committed by
// the group committer, then published.

package awareness

import (
	"context"
	"time"
)

// RecordResult is the outcome of RecordEvent.
type RecordResult struct {
	Recorded      bool
	Event         Event
	StateVersion  int64
	NoticesOpened int
	// SkippedWatchers are the producer-passed watchers that cannot watch (WAT-4).
	SkippedWatchers []SkippedWatcher
}

// RecordEvent validates and appends one event (SIG-1..5), opens notices (NTC-2) and
// publishes them after the commit (NTC-7). It answers once the commit is durable: the
// publisher hands the event and its notices to the hub's subscribers after that,
// without the caller waiting for them. A rejected input writes nothing (ERR-2).
func (s *Service) RecordEvent(ctx context.Context, in RecordInput) (RecordResult, error) {
	res, err := s.recordEvent(ctx, in)
	if err != nil && err != ErrCheckOnly {
		s.obs.AppendFailed(ErrorCode(err))
	}
	return res, err
}

func (s *Service) recordEvent(ctx context.Context, in RecordInput) (RecordResult, error) {
	now := s.Now()
	op, err := s.checkRecord(ctx, in, now)
	if err != nil {
		return RecordResult{}, err
	}
	if err := s.beforeAppend(ctx); err != nil {
		return RecordResult{}, err
	}
	if err := s.commit.append(ctx, op); err != nil {
		return RecordResult{}, err
	}
	s.appended(now, op)
	return recordResult(op), nil
}

// checkRecord is every check of an append before the store (ERR-2): ValidateRecord
// on the input and the caller's authorization (CLT-1). It returns the op to commit.
func (s *Service) checkRecord(ctx context.Context, in RecordInput, now time.Time) (*AppendOp, error) {
	ne, err := ValidateRecord(in, now)
	if err != nil {
		return nil, err
	}
	if err := s.authorizeRecord(ctx, ne); err != nil {
		return nil, err
	}
	return NewAppendOp(ne, now), nil
}

// beforeAppend is the gate of an append once its checks passed: ErrCheckOnly under
// WithCheckOnly, UNAVAILABLE when the caller has gone already.
func (s *Service) beforeAppend(ctx context.Context) error {
	if err := writing(ctx); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return Unavailable(err)
	}
	return nil
}

// appended reports committed appends to the observer and publishes what they recorded
// and opened, in order, in one publication (NTC-7).
func (s *Service) appended(now time.Time, ops ...*AppendOp) {
	var (
		evs     []Event
		notices []Notice
	)
	for _, op := range ops {
		s.observeAppend(op)
		if op.Recorded {
			evs = append(evs, op.Event)
			// A lifecycle event's closed notices come before the notices it opened: a
			// reset closes the old incarnation's, then opens one (LIF-2). They were
			// removed, not acknowledged: the tally counts the opened ones only.
			notices = append(notices, op.Closed...)
			notices = append(notices, op.Opened...)
		}
	}
	if len(evs) > 0 {
		s.pub.publish(evs, notices)
		s.tally.add(now, openedOf(notices), false)
	}
}

// openedOf returns the notices of ns that are not closed items.
func openedOf(ns []Notice) []Notice {
	out := ns[:0:0]
	for _, n := range ns {
		if !n.Closed {
			out = append(out, n)
		}
	}
	return out
}

func recordResult(op *AppendOp) RecordResult {
	return RecordResult{Recorded: op.Recorded, Event: op.Event, StateVersion: op.Version, NoticesOpened: len(op.Opened),
		SkippedWatchers: op.New.Skipped}
}

// MaxRecordBatch bounds the inputs of one RecordBatch.
const MaxRecordBatch = 200

// BatchItem is what RecordBatch did with one input: Result when it was appended or
// deduplicated, Err, an *Error, when it was refused.
type BatchItem struct {
	Result *RecordResult
	Err    error
}

// RecordBatch appends up to MaxRecordBatch events in one group-commit write
// transaction, each input checked with RecordEvent's validation and authorization:
// an input refused gets its error in its item and does not stop the others; the
// valid ones are appended in input order, so a session's events keep it, each
// deduplicated on its own, also against an earlier input of the batch (SIG-4). More
// than MaxRecordBatch inputs refuse the whole call, and a failed transaction fails it,
// with nothing written (ERR-2). Events and notices are published after the commit.
func (s *Service) RecordBatch(ctx context.Context, ins []RecordInput) ([]BatchItem, error) {
	if len(ins) > MaxRecordBatch {
		err := Errorf(EINVALID, "at most %d inputs per recordEvents, got %d; nothing was recorded", MaxRecordBatch, len(ins))
		s.obs.AppendFailed(EINVALID)
		return nil, err
	}
	now := s.Now()
	items := make([]BatchItem, len(ins))
	ops := make([]*AppendOp, 0, len(ins))
	opItem := make([]int, 0, len(ins))
	for i, in := range ins {
		op, err := s.checkRecord(ctx, in, now)
		if err != nil {
			items[i].Err = err
			if !CheckOnly(ctx) { // counted once, in the run that writes
				s.obs.AppendFailed(ErrorCode(err))
			}
			continue
		}
		ops = append(ops, op)
		opItem = append(opItem, i)
	}
	if err := s.beforeAppend(ctx); err != nil {
		return nil, err
	}
	if len(ops) > 0 {
		if err := s.commit.append(ctx, ops...); err != nil {
			for range ops {
				s.obs.AppendFailed(ErrorCode(err))
			}
			return nil, err
		}
		s.appended(now, ops...)
	}
	for j, op := range ops {
		r := recordResult(op)
		items[opItem[j]].Result = &r
	}
	return items, nil
}

func (s *Service) observeAppend(op *AppendOp) {
	s.obs.Appended(op.New.Event.Kind, !op.Recorded)
	if len(op.Opened) > 0 {
		s.obs.NoticesOpened(len(op.Opened))
	}
}
