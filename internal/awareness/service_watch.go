// Watching: watch and unwatch, acknowledgements, pending notices, the watches' list, a
// session's reset and deletion, and the startup sweep.

package awareness

import (
	"context"
	"slices"
)

// WatchResult is the outcome of Watch (WAT-3).
type WatchResult struct {
	Watched bool
	Reason  string
	Cursor  *Cursor
}

// Watch registers watcher on target at the target's current version (WAT-3). A watcher
// that cannot watch gets Watched=false and a reason, not an error; a malformed target
// is an error.
func (s *Service) Watch(ctx context.Context, watcher, target string, targetAgentID *string) (WatchResult, error) {
	return s.WatchWith(ctx, watcher, target, targetAgentID, WatchOptions{})
}

// WatchOptions is what a watch sets besides its pair.
type WatchOptions struct {
	// Kinds selects the notifying kinds that open a notice for the cursor (LIF-3): nil
	// keeps an existing cursor's selection, DefaultWatchKinds for a new one; a kind a
	// watch cannot select is INVALID_ARGUMENT.
	Kinds []string
	// MaxRedeliver, when set, is how often one opening of the pair's notice may come
	// back after a drain neither acknowledged nor released (RDL-1); by default
	// DefaultMaxRedeliver, and outside [0, MaxMaxRedeliver] INVALID_ARGUMENT.
	MaxRedeliver *int
}

// WatchWith is Watch with options. Whatever it refuses writes nothing; an existing
// cursor keeps its watermarks and takes the new options.
func (s *Service) WatchWith(ctx context.Context, watcher, target string, targetAgentID *string, opts WatchOptions) (WatchResult, error) {
	maxRedeliver := opts.MaxRedeliver
	if maxRedeliver != nil {
		if err := CheckMaxRedeliver(*maxRedeliver); err != nil {
			return WatchResult{}, err
		}
		if err := s.checkHolds(); err != nil {
			return WatchResult{}, err
		}
	}
	t, err := ResolveSession(target, targetAgentID)
	if err != nil {
		return WatchResult{}, err
	}
	kinds, err := CheckWatchKinds(opts.Kinds)
	if err != nil {
		return WatchResult{}, err
	}
	w, err := ResolveWatcher(watcher)
	if err != nil {
		return WatchResult{Watched: false, Reason: ErrorMessage(err)}, nil
	}
	if err := s.authorizeWatch(ctx, w, t); err != nil {
		return WatchResult{}, err
	}
	if w.Key == t.Key && w.AgentID == t.AgentID {
		return WatchResult{Watched: false, Reason: "a session cannot watch itself"}, nil
	}
	if err := writing(ctx); err != nil {
		return WatchResult{}, err
	}
	c, _, err := s.store.Watch(ctx, w.Key, t, kinds, s.Now())
	if err != nil {
		return WatchResult{}, err
	}
	if maxRedeliver != nil {
		if err := s.setMaxRedeliver(ctx, w.Key, t, *maxRedeliver); err != nil {
			return WatchResult{}, err
		}
	}
	return WatchResult{Watched: true, Cursor: &c}, nil
}

// Unwatch removes one cursor (WAT-5). A notice it had pending is published closed,
// after the commit.
func (s *Service) Unwatch(ctx context.Context, watcher, target string, targetAgentID *string) (bool, error) {
	w, err := ResolveWatcher(watcher)
	if err != nil {
		return false, err
	}
	t, err := ResolveSession(target, targetAgentID)
	if err != nil {
		return false, err
	}
	if err := s.authorize(ctx, w.AgentID); err != nil {
		return false, err
	}
	if err := writing(ctx); err != nil {
		return false, err
	}
	ok, closed, err := s.store.Unwatch(ctx, w.Key, t)
	if err != nil {
		return false, err
	}
	s.pub.publish(nil, closed)
	return ok, nil
}

// NoticeRef names one notice a watcher's turn consumed, for the exact form (NTC-3):
// its target as the notice names it, and its NotifiedVersion. TargetAgentID
// qualifies a bare target as everywhere else.
type NoticeRef struct {
	Target          string
	TargetAgentID   *string
	NotifiedVersion int64
	// WatcherGeneration is the watcher's generation the notice was drained in, when
	// the caller names it (LIF-2): an earlier one than the watcher's is refused with
	// STALE_GENERATION.
	WatcherGeneration *int64
}

// AckNotices acknowledges the watcher's pending notices and publishes, after the
// commit, each notice it closed, with Closed set, and then the follow-ups it opened
// (NTC-3). It returns the follow-ups.
//
// With notices, the exact form a gateway uses, it acknowledges exactly those: a pair
// whose pending notice no longer has the notifiedVersion named is left alone, so a
// notice opened after the prompt was built is never acknowledged unseen. Without
// notices it acknowledges whatever is pending now on targets, each qualified by
// targetAgentID as keys are, or on every target when targets is nil: racy for a
// remote caller. notices together with targets or targetAgentID is INVALID_ARGUMENT.
func (s *Service) AckNotices(ctx context.Context, watcher string, targets []string, targetAgentID *string, notices []NoticeRef) ([]Notice, error) {
	w, err := ResolveWatcher(watcher)
	if err != nil {
		return nil, err
	}
	req := AckRequest{Watcher: w.Key}
	switch {
	case notices != nil && (targets != nil || targetAgentID != nil):
		return nil, Errorf(EINVALID, "notices names the acknowledged notices exactly; it cannot be combined with targets or targetAgentId")
	case notices != nil:
		if req.Exact, err = exactAcks(notices); err != nil {
			return nil, err
		}
	case targets != nil:
		if len(targets) > MaxAckNotices {
			return nil, Errorf(EINVALID, "at most %d targets per acknowledgement, got %d", MaxAckNotices, len(targets))
		}
		req.Targets = make([]SessionRef, 0, len(targets))
		for _, t := range targets {
			ref, err := ResolveSession(t, targetAgentID)
			if err != nil {
				return nil, err
			}
			req.Targets = append(req.Targets, ref)
		}
	case targetAgentID != nil:
		return nil, Errorf(EINVALID, "targetAgentId qualifies targets; give targets too")
	}
	res, err := s.ack(ctx, w, req)
	if err != nil {
		return nil, err
	}
	follow := visibleNotices(res.Opened, s.watchVisible(ctx))
	if follow == nil {
		follow = []Notice{}
	}
	return follow, nil
}

// AcknowledgeNotices is the exact form of AckNotices with an answer per named notice
// (NTC-3): what it did with each, in the order named, with the follow-up an
// acknowledgement opened or the pair's pending notice; see AckOutcome and AckNamed.
// Closed notices and follow-ups are published after the commit, as AckNotices does.
func (s *Service) AcknowledgeNotices(ctx context.Context, watcher string, notices []NoticeRef) ([]NoticeAck, error) {
	w, err := ResolveWatcher(watcher)
	if err != nil {
		return nil, err
	}
	exact, err := exactAcks(notices)
	if err != nil {
		return nil, err
	}
	res, err := s.ack(ctx, w, AckRequest{Watcher: w.Key, Exact: exact})
	if err != nil {
		return nil, err
	}
	acks := res.Acks
	if acks == nil {
		acks = []NoticeAck{}
	}
	// A notice on a target the caller may no longer watch stays hidden, as in
	// PendingNotices.
	if visible := s.watchVisible(ctx); visible != nil {
		for i := range acks {
			if !visible(acks[i].Target) {
				acks[i].FollowUp, acks[i].Pending = nil, nil
			}
		}
	}
	return acks, nil
}

// exactAcks checks and resolves the notices of an exact acknowledgement; never nil.
func exactAcks(notices []NoticeRef) ([]AckTarget, error) {
	if len(notices) > MaxAckNotices {
		return nil, Errorf(EINVALID, "at most %d notices per acknowledgement, got %d", MaxAckNotices, len(notices))
	}
	out := make([]AckTarget, 0, len(notices))
	for i, n := range notices {
		ref, err := ResolveSession(n.Target, n.TargetAgentID)
		if err != nil {
			return nil, Errorf(EINVALID, "notices[%d]: %s", i, ErrorMessage(err))
		}
		if n.NotifiedVersion < 1 {
			return nil, Errorf(EINVALID, "notices[%d]: notifiedVersion must be positive, got %d", i, n.NotifiedVersion)
		}
		var gen int64
		if n.WatcherGeneration != nil {
			if gen = *n.WatcherGeneration; gen < 1 {
				return nil, Errorf(EINVALID, "notices[%d]: watcherGeneration must be positive, got %d", i, gen)
			}
		}
		out = append(out, AckTarget{Target: ref, NotifiedVersion: n.NotifiedVersion, WatcherGeneration: gen})
	}
	return out, nil
}

// ack authorizes and runs one acknowledgement of watcher w, then publishes, after the
// commit, what it closed and then the follow-ups it opened, in one publication: a
// follow-up comes after the item that closes its predecessor.
func (s *Service) ack(ctx context.Context, w SessionRef, req AckRequest) (AckResult, error) {
	if err := s.authorize(ctx, w.AgentID); err != nil {
		return AckResult{}, err
	}
	if err := writing(ctx); err != nil {
		return AckResult{}, err
	}
	req.Now = s.Now()
	req.By = ackClientOf(ctx)
	res, err := s.store.Ack(ctx, req)
	if err != nil {
		return AckResult{}, err
	}
	if len(res.Opened) > 0 {
		s.obs.NoticesOpened(len(res.Opened))
	}
	s.pub.publish(nil, append(slices.Clip(res.Closed), res.Opened...))
	s.tally.add(req.Now, res.Closed, true)
	s.tally.add(req.Now, res.Opened, false)
	s.turn(ctx, req)
	return res, nil
}

// MaxAckNotices bounds the notices or targets one acknowledgement names.
const MaxAckNotices = 1000

// PendingNotices lists a watcher's pending notices without acknowledging them.
func (s *Service) PendingNotices(ctx context.Context, watcher string) ([]Notice, error) {
	w, err := ResolveWatcher(watcher)
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, w.AgentID); err != nil {
		return nil, err
	}
	ns, err := s.store.Pending(ctx, w.Key)
	if err == nil {
		ns, err = s.applyHolds(ctx, w.Key, ns)
	}
	if err != nil {
		return nil, err
	}
	return visibleNotices(ns, s.watchVisible(ctx)), nil
}

// Watches lists cursors held by a watcher and/or on a target. targetAgentID qualifies
// a bare target as keys are, by default main: the cursors on one agent's `global` are
// not another's.
func (s *Service) Watches(ctx context.Context, watcher, target, targetAgentID *string) ([]Cursor, error) {
	var q CursorQuery
	// The watcher's agent owns its cursors; without a watcher, the target's agent may
	// see who watches it; with neither, only an admin lists every cursor.
	var owners []string
	if watcher != nil {
		w, err := ResolveWatcher(*watcher)
		if err != nil {
			return nil, err
		}
		q.Watcher = w.Key
		owners = append(owners, w.AgentID)
	}
	if target == nil && targetAgentID != nil {
		return nil, Errorf(EINVALID, "targetAgentId qualifies target; give target too")
	}
	if target != nil {
		t, err := ResolveSession(*target, targetAgentID)
		if err != nil {
			return nil, err
		}
		// A bare target means the session of its resolved agent (KEY-3), never the
		// same key of every agent: another agent's cursors on its own `global` are
		// not this target's (CLT-1).
		q.TargetKey = t.Key
		q.TargetAgent = t.AgentID
		if watcher == nil {
			owners = append(owners, t.AgentID)
		}
	}
	if err := s.authorize(ctx, owners...); err != nil {
		return nil, err
	}
	cs, err := s.store.Cursors(ctx, q)
	if err != nil || watcher == nil {
		return cs, err
	}
	// The watcher's own cursors on targets it may no longer watch stay hidden.
	if visible := s.watchVisible(ctx); visible != nil {
		out := cs[:0:0]
		for _, c := range cs {
			if visible(c.Target) {
				out = append(out, c)
			}
		}
		cs = out
	}
	return cs, nil
}

// ResetSession records a reset of the session, a new incarnation (LIF-1). The reset
// event's append is the one path of a reset, also for RecordEvent with kind reset:
// the session's generation moves up by one (LIF-2), the cursors it holds as a watcher
// are dropped (WAT-5), and the pending notices on it close, a watcher that selects
// reset (LIF-3) getting one notice for the new incarnation. The targets' history is
// kept. It reports true once the reset is recorded.
func (s *Service) ResetSession(ctx context.Context, key string, agentID *string) (bool, error) {
	ref, err := s.sessionToWrite(ctx, key, agentID)
	if err != nil {
		return false, err
	}
	now := s.Now()
	op, err := LifecycleOp(ref, Reset, now)
	if err != nil {
		return false, err
	}
	if err := s.commit.append(ctx, op); err != nil {
		s.obs.AppendFailed(ErrorCode(err))
		return false, err
	}
	s.appended(now, op)
	return op.Recorded, nil
}

// DeleteSession records the deletion of a session (LIF-1): the deleted event notifies
// every watcher of the session once, their cursors are retired, and the session's log,
// the cursors it holds and its registry entry are deleted; its head stays so versions
// never regress (WAT-5, REC-2). A session that does not exist only loses the cursors
// in both directions, and the answer is false.
func (s *Service) DeleteSession(ctx context.Context, key string, agentID *string) (bool, error) {
	ref, err := s.sessionToWrite(ctx, key, agentID)
	if err != nil {
		return false, err
	}
	now := s.Now()
	op, closed, err := s.store.DeleteSession(ctx, ref, now)
	if err != nil {
		return false, err
	}
	if op == nil {
		s.pub.publish(nil, closed)
		return false, nil
	}
	s.appended(now, op)
	return true, nil
}

// Sweep is the startup sweep (NTC-5). Pending notices survive a restart unchanged,
// with the same N, text and opening time, and are not touched: every subscription
// reads its watcher's pending notices from the store first (NTC-7), a process that
// starts has no subscriber yet, and the subscribers of other processes are not
// concerned by this one's start. What remains is a cursor with M > N == L, which no
// committed write leaves behind: the sweep opens its notice by SweepCursor and
// publishes it after the commit, in Store.Sweep pages that each lock only their own
// rows. It returns how many notices it opened.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	now := s.Now()
	n, err := s.store.Sweep(ctx, now, func(opened []Notice) {
		s.obs.NoticesOpened(len(opened))
		s.pub.publish(nil, opened)
		s.tally.add(now, opened, false)
	})
	s.pub.flush()
	return n, err
}
