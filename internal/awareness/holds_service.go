package awareness

import (
	"context"
	"slices"
	"time"
)

// holdKey is a pair as holds and notices name it.
type holdKey struct {
	watcher string
	target  SessionRef
}

func keyOfNotice(n Notice) holdKey   { return holdKey{n.Watcher, n.Target} }
func keyOfHold(h NoticeHold) holdKey { return holdKey{h.Watcher, h.Target} }
func keyOfView(v HoldView) holdKey   { return keyOfHold(v.Hold) }

// applyHolds is MarkHeld of ns with the holds of watcher, or of every watcher for "".
func (s *Service) applyHolds(ctx context.Context, watcher string, ns []Notice) ([]Notice, error) {
	if s.holds == nil || len(ns) == 0 {
		return ns, nil
	}
	hs, err := s.holds.Holds(ctx, watcher)
	if err != nil || len(hs) == 0 {
		return ns, err
	}
	return MarkHeld(ns, hs, s.Now()), nil
}

// MarkHeld sets Redelivered and Delivery on the pending notices ns by their holds hs
// at now and leaves out the snoozed ones (RDL-1, RDL-2). The service applies it to
// every notice it reads; a store's cross-process listener to those it publishes.
func MarkHeld(ns []Notice, hs []NoticeHold, now time.Time) []Notice {
	by := make(map[holdKey]NoticeHold, len(hs))
	for _, h := range hs {
		by[keyOfHold(h)] = h
	}
	out := ns[:0:0]
	for _, n := range ns {
		if h, ok := by[keyOfNotice(n)]; ok && h.Of(n) {
			if h.Hidden(now) {
				continue
			}
			n.Redelivered, n.Delivery = h.Redeliveries > 0, h.Deliveries
		}
		out = append(out, n)
	}
	return out
}

// checkHolds refuses the RDL operations on a store that keeps no holds.
func (s *Service) checkHolds() error {
	if s.holds == nil {
		return Errorf(EUNIMPLEMENTED, "this store keeps no notice holds (redelivery, snooze)")
	}
	return nil
}

// DrainNotices hands out the watcher's pending notices for a turn (RDL-1): every
// pending notice that is neither snoozed nor held, oldest first, and records the drain.
// A drained notice that the watcher then neither acknowledges nor releases comes back
// once, marked redelivered, after the policy's number of the watcher's later turns,
// counted as acknowledgements that do not name it, or its time, whichever comes
// first; at most the watch's maxRedeliver times per opening. A notice whose
// redeliveries are used up is handed out by every drain until acknowledged, as in v1.
func (s *Service) DrainNotices(ctx context.Context, watcher string) ([]Notice, error) {
	w, err := ResolveWatcher(watcher)
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, w.AgentID); err != nil {
		return nil, err
	}
	if err := s.checkHolds(); err != nil {
		return nil, err
	}
	if err := writing(ctx); err != nil {
		return nil, err
	}
	pending, err := s.store.Pending(ctx, w.Key)
	if err != nil {
		return nil, err
	}
	pending = visibleNotices(pending, s.watchVisible(ctx))
	now := s.Now()
	var out []Notice
	err = s.holds.UpdateHolds(ctx, HoldQuery{Watcher: w.Key}, func(vs []HoldView) ([]NoticeHold, error) {
		out = out[:0]
		views := make(map[holdKey]HoldView, len(vs))
		for _, v := range vs {
			views[keyOfView(v)] = v
		}
		var write []NoticeHold
		for _, n := range pending {
			v, ok := views[keyOfNotice(n)]
			if !ok || v.Cursor == nil || v.Cursor.N != n.NotifiedVersion || !v.Cursor.Pending() {
				continue // acknowledged or replaced since the read: the next drain has it
			}
			h := v.Hold
			if h.Of(n) {
				if h.Hidden(now) || h.Held() {
					continue
				}
				n.Redelivered, n.Delivery = h.Redeliveries > 0, h.Deliveries
			}
			if h, changed := DrainHold(h, n, s.hold, now); changed {
				write = append(write, h)
			}
			out = append(out, n)
		}
		return write, nil
	})
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = []Notice{}
	}
	return out, nil
}

// ReleaseNotices hands drained notices back (RDL-1): each named notice that is held
// for redelivery is handed out by the next drain, and does not come back as a
// redelivery. It returns the notices released.
func (s *Service) ReleaseNotices(ctx context.Context, watcher string, notices []NoticeRef) ([]Notice, error) {
	w, err := ResolveWatcher(watcher)
	if err != nil {
		return nil, err
	}
	exact, err := exactAcks(notices)
	if err != nil {
		return nil, err
	}
	if err := s.authorize(ctx, w.AgentID); err != nil {
		return nil, err
	}
	if err := s.checkHolds(); err != nil {
		return nil, err
	}
	if err := writing(ctx); err != nil {
		return nil, err
	}
	var released []HoldView
	err = s.holds.UpdateHolds(ctx, HoldQuery{Watcher: w.Key}, func(vs []HoldView) ([]NoticeHold, error) {
		released = released[:0]
		var write []NoticeHold
		for _, v := range vs {
			if !v.Hold.Held() || !slices.ContainsFunc(exact, func(a AckTarget) bool {
				return a.Target == v.Hold.Target && a.NotifiedVersion == v.Hold.N
			}) {
				continue
			}
			h := v.Hold
			h.DrainedAt, h.Turns, h.DueAt = time.Time{}, 0, h.SnoozedUntil
			write = append(write, h)
			if v.pendingOpening() {
				released = append(released, v)
			}
		}
		return write, nil
	})
	if err != nil {
		return nil, err
	}
	return s.noticesOf(ctx, released, nil)
}

// noticesOf reads the pending notices of the views' pairs, as their holds now mark
// them, for an answer or a publication.
func (s *Service) noticesOf(ctx context.Context, vs []HoldView, _ []NoticeHold) ([]Notice, error) {
	out := []Notice{}
	if len(vs) == 0 {
		return out, nil
	}
	want := map[holdKey]int64{}
	var watchers []string
	for _, v := range vs {
		want[keyOfView(v)] = v.Hold.N
		if !slices.Contains(watchers, v.Hold.Watcher) {
			watchers = append(watchers, v.Hold.Watcher)
		}
	}
	for _, w := range watchers {
		ns, err := s.store.Pending(ctx, w)
		if err != nil {
			return nil, err
		}
		ns, err = s.applyHolds(ctx, w, ns)
		if err != nil {
			return nil, err
		}
		for _, n := range ns {
			if want[keyOfNotice(n)] == n.NotifiedVersion {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// turn counts an acknowledgement of the watcher as a turn for its drained notices
// that it does not name (RDL-1), and redelivers those that waited the policy's number
// of turns. It runs after the acknowledgement committed; when it fails, it logs and
// the notices come back by the time bound instead.
func (s *Service) turn(ctx context.Context, req AckRequest) {
	if s.holds == nil || req.Exact == nil && req.Targets == nil {
		return // the all form names every notice of the watcher
	}
	// An acknowledgement of a watcher that holds no drained notice, as from every
	// gateway that does not use drainNotices, costs one read of its holds, no write.
	hs, err := s.holds.Holds(ctx, req.Watcher)
	if err != nil {
		s.log.Warn("notice redelivery: reading the holds failed; the time bound applies", "watcher", req.Watcher, "err", err)
		return
	}
	if !slices.ContainsFunc(hs, NoticeHold.Held) {
		return
	}
	names := func(h NoticeHold) bool {
		if req.Exact != nil {
			return slices.ContainsFunc(req.Exact, func(a AckTarget) bool { return a.Target == h.Target && a.NotifiedVersion == h.N })
		}
		return slices.Contains(req.Targets, h.Target)
	}
	var back []HoldView
	err = s.holds.UpdateHolds(context.WithoutCancel(ctx), HoldQuery{Watcher: req.Watcher}, func(vs []HoldView) ([]NoticeHold, error) {
		back = back[:0]
		var write []NoticeHold
		for _, v := range vs {
			h := v.Hold
			if !h.Held() || names(h) {
				continue
			}
			if !v.pendingOpening() { // acknowledged or replaced: nothing to bring back
				h.DrainedAt, h.Turns, h.DueAt = time.Time{}, 0, time.Time{}
				write = append(write, h)
				continue
			}
			h.Turns++
			if h.Turns >= s.hold.RedeliverTurns {
				h = Redeliver(h)
				back = append(back, HoldView{Hold: h, Cursor: v.Cursor})
			}
			write = append(write, h)
		}
		return write, nil
	})
	if err == nil {
		err = s.publishHeld(ctx, back)
	}
	if err != nil {
		s.log.Warn("notice redelivery: counting a turn failed; the time bound applies", "watcher", req.Watcher, "err", err)
	}
}

// publishHeld publishes the pending notices of the views' pairs as their holds mark
// them now: a redelivered or woken notice has a new delivery, so every subscriber of
// its watcher gets it again.
func (s *Service) publishHeld(ctx context.Context, vs []HoldView) error {
	if len(vs) == 0 {
		return nil
	}
	ns, err := s.noticesOf(ctx, vs, nil)
	if err != nil {
		return err
	}
	s.pub.publish(nil, ns)
	return nil
}

// WakeHolds wakes the holds that are due at now (RDL-1, RDL-2): a snooze that ended
// delivers its notice again, a drained notice past the time bound comes back marked
// redelivered; a hold whose notice was acknowledged or replaced is cleared. It
// publishes what it woke, after the commit, and returns how many.
func (s *Service) WakeHolds(ctx context.Context) (int, error) {
	if s.holds == nil {
		return 0, nil
	}
	now := s.Now()
	var woke []HoldView
	err := s.holds.UpdateHolds(ctx, HoldQuery{DueBy: now}, func(vs []HoldView) ([]NoticeHold, error) {
		woke = woke[:0]
		var write []NoticeHold
		for _, v := range vs {
			h, wake := WakeHold(v, s.hold, now)
			write = append(write, h)
			if wake {
				woke = append(woke, HoldView{Hold: h, Cursor: v.Cursor})
			}
		}
		return write, nil
	})
	if err != nil {
		return 0, err
	}
	return len(woke), s.publishHeld(ctx, woke)
}

// WakeHold is what waking a due hold at now does: wake is true when its notice is to
// be delivered again, because a snooze ended or, for a redelivery, the drain's time
// bound passed. A hold whose notice is no longer pending is cleared.
func WakeHold(v HoldView, p HoldPolicy, now time.Time) (h NoticeHold, wake bool) {
	h = v.Hold
	if !v.pendingOpening() {
		return NoticeHold{Watcher: h.Watcher, Target: h.Target, MaxRedeliver: h.MaxRedeliver}, false
	}
	if !h.SnoozedUntil.IsZero() && !now.Before(h.SnoozedUntil) {
		h.SnoozedUntil = time.Time{}
		h.Deliveries++
		wake = true
	}
	if h.Held() && !now.Before(h.DrainedAt.Add(p.RedeliverAfter)) {
		h = Redeliver(h)
		wake = true
	}
	h.DueAt = h.SnoozedUntil
	if h.Held() {
		h.DueAt = earliest(h.SnoozedUntil, h.DrainedAt.Add(p.RedeliverAfter))
	}
	return h, wake && h.SnoozedUntil.IsZero()
}

// SnoozeNotice hides the watcher's pending notice on target, named by its
// notifiedVersion, until until, then delivers it again (RDL-2). A snooze also
// releases a drain of it. until must be in the future and at most the policy's
// MaxSnooze ahead, else INVALID_ARGUMENT; a notice that is not pending is NOT_FOUND.
func (s *Service) SnoozeNotice(ctx context.Context, watcher string, ref NoticeRef, until time.Time) (Notice, error) {
	w, err := ResolveWatcher(watcher)
	if err != nil {
		return Notice{}, err
	}
	exact, err := exactAcks([]NoticeRef{ref})
	if err != nil {
		return Notice{}, err
	}
	now := s.Now()
	switch {
	case !until.After(now):
		return Notice{}, Errorf(EINVALID, "until %s is not in the future", until.UTC().Format(time.RFC3339))
	case until.Sub(now) > s.hold.MaxSnooze:
		return Notice{}, Errorf(EINVALID, "until %s is more than %s ahead", until.UTC().Format(time.RFC3339), s.hold.MaxSnooze)
	}
	if err := s.authorize(ctx, w.AgentID); err != nil {
		return Notice{}, err
	}
	if err := s.checkHolds(); err != nil {
		return Notice{}, err
	}
	if err := writing(ctx); err != nil {
		return Notice{}, err
	}
	a := exact[0]
	var snoozed HoldView
	err = s.holds.UpdateHolds(ctx, HoldQuery{Watcher: w.Key}, func(vs []HoldView) ([]NoticeHold, error) {
		for _, v := range vs {
			if v.Hold.Target != a.Target || v.Cursor == nil || !v.Cursor.Pending() || v.Cursor.N != a.NotifiedVersion {
				continue
			}
			h := v.Hold
			if h.N != a.NotifiedVersion {
				h = NoticeHold{Watcher: h.Watcher, Target: h.Target, MaxRedeliver: h.MaxRedeliver, N: a.NotifiedVersion}
			}
			h.SnoozedUntil = until.UTC()
			h.DrainedAt, h.Turns, h.DueAt = time.Time{}, 0, h.SnoozedUntil
			snoozed = HoldView{Hold: h, Cursor: v.Cursor}
			return []NoticeHold{h}, nil
		}
		return nil, Errorf(ENOTFOUND, "%s has no pending notice on %s with notifiedVersion %d", w.Key, a.Target.Key, a.NotifiedVersion)
	})
	if err != nil {
		return Notice{}, err
	}
	ns, err := s.store.Pending(ctx, w.Key)
	if err != nil {
		return Notice{}, err
	}
	for _, n := range ns {
		if n.Target == a.Target && n.NotifiedVersion == a.NotifiedVersion {
			n.Redelivered, n.Delivery = snoozed.Hold.Redeliveries > 0, snoozed.Hold.Deliveries
			return n, nil
		}
	}
	return Notice{}, Errorf(ENOTFOUND, "%s has no pending notice on %s with notifiedVersion %d", w.Key, a.Target.Key, a.NotifiedVersion)
}

// DismissNotice acknowledges the watcher's pending notice on target, named by its
// notifiedVersion, without reconciling (RDL-2): the exact acknowledgement of NTC-3,
// so a follow-up opens for what came after N, answered with Dismissed set and
// recorded as the last dismissed notice on the pair's hold. A notice that is not
// pending is NOT_FOUND, and nothing is written.
func (s *Service) DismissNotice(ctx context.Context, watcher string, ref NoticeRef) (NoticeAck, error) {
	w, err := ResolveWatcher(watcher)
	if err != nil {
		return NoticeAck{}, err
	}
	exact, err := exactAcks([]NoticeRef{ref})
	if err != nil {
		return NoticeAck{}, err
	}
	if err := s.authorize(ctx, w.AgentID); err != nil {
		return NoticeAck{}, err
	}
	if err := s.checkHolds(); err != nil {
		return NoticeAck{}, err
	}
	if err := writing(ctx); err != nil {
		return NoticeAck{}, err
	}
	a := exact[0]
	cs, err := s.store.Cursors(ctx, CursorQuery{Watcher: w.Key, TargetAgent: a.Target.AgentID, TargetKey: a.Target.Key})
	if err != nil {
		return NoticeAck{}, err
	}
	if len(cs) != 1 || !cs[0].Pending() || cs[0].N != a.NotifiedVersion {
		return NoticeAck{}, Errorf(ENOTFOUND, "%s has no pending notice on %s with notifiedVersion %d", w.Key, a.Target.Key, a.NotifiedVersion)
	}
	res, err := s.ack(ctx, w, AckRequest{Watcher: w.Key, Exact: exact})
	if err != nil {
		return NoticeAck{}, err
	}
	if len(res.Acks) != 1 {
		return NoticeAck{}, Errorf(EINTERNAL, "dismiss: %d answers for one notice", len(res.Acks))
	}
	ack := res.Acks[0]
	if ack.Outcome == AckAcknowledged {
		ack.Dismissed = true
		err = s.holds.UpdateHolds(context.WithoutCancel(ctx), HoldQuery{Watcher: w.Key}, func(vs []HoldView) ([]NoticeHold, error) {
			h := NoticeHold{Watcher: w.Key, Target: a.Target, MaxRedeliver: DefaultMaxRedeliver}
			for _, v := range vs {
				if v.Hold.Target == a.Target {
					h = v.Hold
				}
			}
			h = NoticeHold{Watcher: h.Watcher, Target: h.Target, MaxRedeliver: h.MaxRedeliver, N: a.NotifiedVersion, Dismissed: a.NotifiedVersion}
			return []NoticeHold{h}, nil
		})
		if err != nil {
			s.log.Warn("dismissNotice: the notice was acknowledged; recording the dismissal failed", "watcher", w.Key, "err", err)
		}
	}
	return ack, nil
}

// setMaxRedeliver sets the maxRedeliver of the watch of w on t (RDL-1).
func (s *Service) setMaxRedeliver(ctx context.Context, w string, t SessionRef, max int) error {
	return s.holds.UpdateHolds(ctx, HoldQuery{Watcher: w}, func(vs []HoldView) ([]NoticeHold, error) {
		h := NoticeHold{Watcher: w, Target: t}
		for _, v := range vs {
			if v.Hold.Target == t {
				h = v.Hold
			}
		}
		h.MaxRedeliver = max
		return []NoticeHold{h}, nil
	})
}

// CheckMaxRedeliver refuses a maxRedeliver outside [0, MaxMaxRedeliver].
func CheckMaxRedeliver(n int) error {
	if n < 0 || n > MaxMaxRedeliver {
		return Errorf(EINVALID, "maxRedeliver must be between 0 and %d, got %d", MaxMaxRedeliver, n)
	}
	return nil
}

// RunHoldPoll runs WakeHolds every interval until ctx ends (RDL-1, RDL-2), so a
// snooze ends, or a drained notice's time bound passes, within an interval. A failed
// pass is logged and the next one retries.
func (s *Service) RunHoldPoll(ctx context.Context, every time.Duration) {
	if s.holds == nil {
		return
	}
	if every <= 0 {
		every = DefaultHoldPoll
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := s.WakeHolds(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("notice holds: waking the due holds failed", "err", err)
			}
		}
	}
}
