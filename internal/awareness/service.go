package awareness

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limits of reconciliation and listing (REC-1).
const (
	MaxChangesLimit = 200
	MaxListLimit    = 500
	// MaxActiveMinutes is the largest sessionsList activeMinutes that counts (ten
	// years); larger values are clamped to it.
	MaxActiveMinutes = 10 * 365 * 24 * 60
)

// Config wires a Service.
type Config struct {
	Store  Store
	Hub    *Hub
	Logger *slog.Logger
	// Now is the service clock (SIG-5); nil means time.Now.
	Now func() time.Time
	// Catalogs are the catalogs sessions can be adopted from (UPS-1), by unique ID.
	Catalogs []Catalog
	// Observer is told what the service does (metrics, traces); nil: nobody. A Hub
	// made by NewService reports to it too.
	Observer Observer
	// Grants are the auth file's cross-agent permissions (CLT-1); the zero value
	// grants none.
	Grants Grants
	// Streams admits every subscription (SubscribeNotices, SubscribeEvents and their
	// push forms) of its caller, or refuses it (ERR-4); nil admits every one.
	Streams StreamAdmission
	// Holds is the redelivery and snooze policy (RDL-1, RDL-2); the zero value is
	// DefaultHoldPolicy.
	Holds HoldPolicy
}

// StreamAdmission bounds the subscriptions a caller holds open at once (a budget per
// principal). Admit is called once a subscription is authorized, before it starts,
// with the subscriber's context; release is called once, when the subscription ends
// for any reason. Its error is returned to the subscriber as it is.
type StreamAdmission interface {
	Admit(ctx context.Context) (release func(), err error)
}

// Service is the domain API: every resolver and command calls one of its methods.
type Service struct {
	store Store
	hub   *Hub
	log   *slog.Logger
	now   func() time.Time
	ups   upstreamState
	obs   Observer
	// grants are the cross-agent permissions of agent principals (CLT-1).
	grants Grants
	// commit batches concurrent appends into one transaction (group commit).
	commit *committer
	// pub hands what writes committed to the hub, off the writers' path.
	pub *publisher
	// tally counts the notices opened and acknowledged here (NoticeActivity).
	tally noticeTally
	// streams admits subscriptions; nil admits every one.
	streams StreamAdmission
	// holds are the store's notice holds (RDL-1, RDL-2); nil when it keeps none.
	holds HoldStore
	// hold is the redelivery and snooze policy.
	hold HoldPolicy
}

// NewService returns a service over cfg.Store. It starts no goroutine.
func NewService(cfg Config) *Service {
	s := &Service{store: cfg.Store, hub: cfg.Hub, log: cfg.Logger, now: cfg.Now, obs: ObserverOr(cfg.Observer), grants: cfg.Grants, streams: cfg.Streams}
	if s.hub == nil {
		s.hub = NewHubObserved(s.obs)
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.ups.init(cfg.Catalogs)
	s.holds, _ = cfg.Store.(HoldStore)
	s.hold = cfg.Holds
	if s.hold == (HoldPolicy{}) {
		s.hold = DefaultHoldPolicy
	}
	s.commit = newCommitter(s.store, MaxGroupCommit, s.obs)
	s.pub = newPublisher(s.hub)
	return s
}

// Flush waits until the events and notices of every write that answered before the
// call were handed to the hub's subscribers. Writes answer once committed and publish
// afterwards, off the caller's path (see publisher).
func (s *Service) Flush() { s.pub.flush() }

// PublishCommitted hands notices a committed write outside the service opened or
// closed (the pruner's cursor expiry) to the hub through the service's publisher, so
// that they reach subscribers in order with the service's own writes.
func (s *Service) PublishCommitted(notices ...Notice) { s.pub.publish(nil, notices) }

// Hub returns the service's notice hub.
func (s *Service) Hub() *Hub { return s.hub }

// Store returns the service's store.
func (s *Service) Store() Store { return s.store }

// Now returns the service clock's time in UTC.
func (s *Service) Now() time.Time { return s.now().UTC() }

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
// event and its notices are handed to the hub's subscribers after that, without the
// caller waiting for them (see publisher). A rejected input writes nothing (ERR-2).
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

// checkRecord is every check of an append before the store (ERR-2): the input
// (ValidateRecord) and the caller's authorization (CLT-1). It returns the op to
// commit.
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
			// A lifecycle event's closed notices come before the notices it opened
			// (LIF-2: a reset closes the old incarnation's, then opens one). They
			// were removed, not acknowledged: the tally counts the opened ones only.
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
// deduplicated, Err (an *Error) when it was refused.
type BatchItem struct {
	Result *RecordResult
	Err    error
}

// RecordBatch appends up to MaxRecordBatch events in one write transaction (group
// commit), each input checked as RecordEvent checks it (the same validation and
// authorization): an input refused gets its error in its item and does not stop the
// others; the valid ones are appended in input order (a session's events keep it), each
// deduplicated on its own (SIG-4, also against an earlier input of the batch). More
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

// observeAppend reports a committed append to the observer.
func (s *Service) observeAppend(op *AppendOp) {
	s.obs.Appended(op.New.Event.Kind, !op.Recorded)
	if len(op.Opened) > 0 {
		s.obs.NoticesOpened(len(op.Opened))
	}
}

// StatusChanges is the delta of a sessionStatus call (REC-1, REC-2).
type StatusChanges struct {
	Events           []Event
	HistoryGap       bool
	Truncated        bool
	Earliest         int64
	NextChangesSince int64
}

// Status is the answer of sessionStatus.
type Status struct {
	Ref          SessionRef
	StateVersion int64
	// Generation is the session's generation (LIF-2).
	Generation int64
	Changes    *StatusChanges
	Session    *Session
}

// SessionStatus answers reconciliation (REC-1..4). changesSince nil returns the version
// only. It never moves a cursor (REC-4).
func (s *Service) SessionStatus(ctx context.Context, key string, agentID *string, changesSince *int64, limit *int) (Status, error) {
	ref, err := ResolveSession(key, agentID)
	if err != nil {
		return Status{}, err
	}
	if err := s.authorize(ctx, ref.AgentID); err != nil {
		return Status{}, err
	}
	lim := MaxChangesLimit
	if limit != nil {
		// A limit above MaxChangesLimit is clamped, not refused (REC-1): the page says
		// truncated and nextChangesSince continues it.
		if *limit < 1 {
			return Status{}, Errorf(EINVALID, "limit must be at least 1, got %d", *limit)
		}
		lim = min(*limit, MaxChangesLimit)
	}
	var after int64
	if changesSince != nil {
		if *changesSince < 0 {
			return Status{}, Errorf(EINVALID, "changesSince must be 0 or more, got %d", *changesSince)
		}
		after = *changesSince
	} else {
		lim = 0
	}
	ch, sess, err := s.store.ReadStatus(ctx, ref, after, lim)
	if err != nil {
		return Status{}, err
	}
	st := Status{Ref: ref, StateVersion: ch.Head.Version, Generation: max(ch.Head.Generation, 1)}
	if sess != nil && sess.Registered {
		st.Session = sess
	}
	if changesSince == nil {
		return st, nil
	}
	if after > ch.Head.Version {
		return Status{}, &Error{Code: ECURSORAHEAD, Message: "changesSince " + strconv.FormatInt(after, 10) + " is ahead of the session's stateVersion " + strconv.FormatInt(ch.Head.Version, 10) + "; the cursor belongs to another session or a deleted incarnation: refresh the whole session state"}
	}
	next := after
	if n := len(ch.Events); n > 0 {
		next = ch.Events[n-1].Sequence
	} else if !ch.More {
		next = ch.Head.Version
	}
	st.Changes = &StatusChanges{
		Events:           ch.Events,
		HistoryGap:       after < ch.Head.PrunedThrough,
		Truncated:        ch.More,
		Earliest:         ch.Earliest,
		NextChangesSince: next,
	}
	if st.Changes.Events == nil {
		st.Changes.Events = []Event{}
	}
	return st, nil
}

// SessionFilter selects sessions for SessionsList.
type SessionFilter struct {
	AgentID       *string
	Kinds         []SessionKind
	ActiveMinutes *int
	KeyPrefix     *string
}

// SessionPage is one page of SessionsList.
type SessionPage struct {
	Sessions    []Session
	HasNextPage bool
	EndCursor   string
}

// SessionsList lists sessions with keyset pagination (REC-5). after is an opaque
// cursor from a previous page's EndCursor.
func (s *Service) SessionsList(ctx context.Context, f SessionFilter, first int, after *string) (SessionPage, error) {
	if first < 1 || first > MaxListLimit {
		return SessionPage{}, Errorf(EINVALID, "first must be between 1 and %d, got %d", MaxListLimit, first)
	}
	q := SessionQuery{Limit: first + 1, Kinds: f.Kinds}
	if f.AgentID != nil {
		a := strings.ToLower(strings.TrimSpace(*f.AgentID))
		if !ValidAgentID(a) {
			return SessionPage{}, Errorf(EINVALID, "filter.agentId %q is not a valid agent id", truncateForMessage(*f.AgentID))
		}
		q.AgentID = a
	}
	scoped, err := s.scopeAgent(ctx, q.AgentID)
	if err != nil {
		return SessionPage{}, err
	}
	q.AgentID = scoped
	for _, k := range f.Kinds {
		if !k.Valid() {
			return SessionPage{}, Errorf(EINVALID, "filter.kinds: %q is not a session kind", truncateForMessage(string(k)))
		}
	}
	if f.ActiveMinutes != nil {
		if *f.ActiveMinutes < 1 {
			return SessionPage{}, Errorf(EINVALID, "filter.activeMinutes must be positive, got %d", *f.ActiveMinutes)
		}
		// Clamped: minutes beyond MaxActiveMinutes would overflow the duration and
		// select nothing; every stored session is more recent anyway.
		q.UpdatedSince = s.Now().Add(-time.Duration(min(*f.ActiveMinutes, MaxActiveMinutes)) * time.Minute)
	}
	if f.KeyPrefix != nil {
		p := strings.ToLower(strings.TrimSpace(*f.KeyPrefix))
		if len(p) > MaxKeyBytes {
			return SessionPage{}, Errorf(EINVALID, "filter.keyPrefix is longer than %d bytes", MaxKeyBytes)
		}
		if p != "" {
			if err := checkLine("filter.keyPrefix", p, MaxKeyBytes); err != nil {
				return SessionPage{}, err
			}
		}
		q.KeyPrefix = p
	}
	if after != nil && *after != "" {
		ref, err := decodeSessionCursor(*after)
		if err != nil {
			return SessionPage{}, err
		}
		q.After = &ref
	}
	rows, err := s.store.ListSessions(ctx, q)
	if err != nil {
		return SessionPage{}, err
	}
	page := SessionPage{Sessions: rows}
	if len(rows) > first {
		page.Sessions = rows[:first]
		page.HasNextPage = true
	}
	if n := len(page.Sessions); n > 0 {
		page.EndCursor = encodeSessionCursor(page.Sessions[n-1].Ref)
	}
	return page, nil
}

func encodeSessionCursor(r SessionRef) string {
	return base64.RawURLEncoding.EncodeToString([]byte(r.AgentID + "\x00" + r.Key))
}

func decodeSessionCursor(c string) (SessionRef, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if a, k, ok := strings.Cut(string(b), "\x00"); ok && ValidAgentID(a) && checkKeyBytes("after", k) == nil {
			return SessionRef{AgentID: a, Key: k}, nil
		}
	}
	return SessionRef{}, Errorf(EINVALID, "after is not a cursor returned by sessionsList")
}

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
	// keeps an existing cursor's selection (the default for a new one,
	// DefaultWatchKinds); a kind a watch cannot select is INVALID_ARGUMENT.
	Kinds []string
	// MaxRedeliver, when set, is how often one opening of the pair's notice may come
	// back after a drain neither acknowledged nor released (RDL-1; default
	// DefaultMaxRedeliver); outside [0, MaxMaxRedeliver] it is INVALID_ARGUMENT.
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

// NoticeRef names one notice a watcher's turn consumed (NTC-3, the exact form): its
// target, as the notice names it, and its NotifiedVersion. TargetAgentID qualifies a
// bare target as everywhere else (default: the agent of a canonical key, else main).
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
// commit, each notice it closed (Closed set) and then the follow-ups it opened (NTC-3).
// It returns the follow-ups.
//
// With notices (the exact form, what a gateway uses) it acknowledges exactly those: a
// pair whose pending notice is no longer the one named (its notifiedVersion) is left
// alone, so a notice opened after the prompt was built is never acknowledged unseen.
// Without notices it acknowledges whatever is pending now on targets (each qualified
// by targetAgentID as keys are), or on every target when targets is nil: racy for a
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
// (NTC-3): what it did with each, in the order named (see AckOutcome and AckNamed),
// with the follow-up an acknowledgement opened or the pair's pending notice. Closed
// notices and follow-ups are published after the commit, as AckNotices publishes them.
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

// exactAcks checks and resolves the notices of an exact acknowledgement (never nil).
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

// MaxAckNotices bounds the notices (or targets) one acknowledgement names.
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
// a bare target as keys are (default main): the cursors on one agent's `global` are not
// another's.
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

// ResetSession records a reset of the session (LIF-1): a new incarnation. It is the
// reset event's append, the one path of a reset (RecordEvent with kind reset does the
// same): the session's generation moves up by one (LIF-2), the cursors it holds as a
// watcher are dropped (WAT-5), and the pending notices on it close, a watcher that
// selects reset (LIF-3) getting one notice for the new incarnation. The targets'
// history is kept. It reports true once the reset is recorded.
func (s *Service) ResetSession(ctx context.Context, key string, agentID *string) (bool, error) {
	ref, err := ResolveSession(key, agentID)
	if err != nil {
		return false, err
	}
	if err := s.authorize(ctx, ref.AgentID); err != nil {
		return false, err
	}
	if err := writing(ctx); err != nil {
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
	ref, err := ResolveSession(key, agentID)
	if err != nil {
		return false, err
	}
	if err := s.authorize(ctx, ref.AgentID); err != nil {
		return false, err
	}
	if err := writing(ctx); err != nil {
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

// Sweep is the startup sweep (NTC-5). Pending notices survive a restart unchanged
// (same N, text and opening time) and are not touched: every (re)subscription reads its
// watcher's pending notices from the store first (NTC-7), a process that starts has no
// subscriber yet, and the subscribers of other processes are not concerned by this
// one's start. What remains is a cursor with M > N == L, which no committed write
// leaves behind: the sweep opens its notice (SweepCursor) and publishes it after the
// commit, in pages that each lock only their own rows (Store.Sweep). It returns how
// many notices it opened.
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

// sentPerPair is how many recent notice IDs per pair a subscription remembers to drop
// repeats (see SubscribeNotices).
const sentPerPair = 4

// SubscribeNotices streams a watcher's notices (nil: every watcher, narrowed for an
// agent principal to its own agent's watchers, as listings are): first every
// notice pending now, then each notice as it opens (NTC-5, NTC-7). With includeClosed
// the stream also carries, once per closed notice, the notice again with Closed set
// when it is acknowledged or its cursor removed; a follow-up opened by an ack comes
// after that item. Without it the stream carries open notices only. The same opened
// notice is never sent twice on one subscription. The channel closes when ctx ends or
// the subscriber falls behind (see SubscriberBuffer); err then tells why (nil after
// ctx ended). A subscription that falls behind is dropped at once, with what it still
// queued, and calls the function WithDropFunc put in ctx, if any.
//
// No goroutine serves the subscription while it is idle (see stream): the hub hands
// notices to the returned channel itself, drops repeats as it does, and ctx's end
// unsubscribes it (context.AfterFunc).
func (s *Service) SubscribeNotices(ctx context.Context, watcher *string, includeClosed bool) (<-chan Notice, func() error, error) {
	sub, err := s.subscribeNotices(ctx, watcher, includeClosed, FeedOptions{}, nil)
	if err != nil {
		return nil, nil, err
	}
	context.AfterFunc(ctx, sub.Unsubscribe)
	return sub.stream.out, sub.Err, nil
}

// SubscribeNoticesTo is SubscribeNotices as a push stream: the notices go to sink
// (see Sink), the pending ones first, and the subscription lasts until the returned
// unsubscribe is called or the hub ends it (sink.End), not as long as ctx: ctx serves
// the subscribe (authorization, the read of the pending notices) and is not kept.
// Nothing waits on the subscription: a transport that writes from its own queue
// serves an idle subscriber without a goroutine.
func (s *Service) SubscribeNoticesTo(ctx context.Context, watcher *string, includeClosed bool, sink Sink[Notice]) (unsubscribe func(), err error) {
	return s.SubscribeNoticeFeed(ctx, watcher, includeClosed, FeedOptions{}, sink)
}

// SubscribeNoticeFeed is SubscribeNoticesTo as a feed (feed.go): with o.Marks, the
// sink's Mark gets one FeedSynced after the pending notices and a FeedBookmark while
// the feed is idle (FEED-3). o.After is refused: notices have no single sequence, and
// every subscription sends every pending notice first (NTC-5).
func (s *Service) SubscribeNoticeFeed(ctx context.Context, watcher *string, includeClosed bool, o FeedOptions, sink Sink[Notice]) (unsubscribe func(), err error) {
	sub, err := s.subscribeNotices(ctx, watcher, includeClosed, o, &sink)
	if err != nil {
		return nil, err
	}
	return sub.Unsubscribe, nil
}

func (s *Service) subscribeNotices(ctx context.Context, watcher *string, includeClosed bool, o FeedOptions, sink *Sink[Notice]) (*Sub[Notice], error) {
	if o.After != nil {
		return nil, Errorf(EINVALID, "a notice feed does not resume from a sequence: every subscription sends every pending notice first")
	}
	if o.Marks && (sink == nil || sink.Mark == nil) {
		return nil, Internal(errors.New("a feed with marks needs a sink with Mark"))
	}
	var w string
	if watcher != nil {
		ref, err := ResolveWatcher(*watcher)
		if err != nil {
			return nil, err
		}
		w = ref.Key
		if err := s.authorize(ctx, ref.AgentID); err != nil {
			return nil, err
		}
	}
	// Subscribe before reading durable state so nothing opened in between is missed;
	// the stream holds live notices back until the pending ones are in front of them.
	accept := new(repeatFilter).accept
	visible := s.watchVisible(ctx)
	own := ""
	if watcher == nil {
		own = s.streamAgent(ctx)
	}
	if own != "" {
		// Narrowed to the watchers of its own agent, as listings are (CLT-1).
		unseen := accept
		accept = func(n *Notice) bool { return watcherAgent(n.Watcher) == own && visible(n.Target) && unseen(n) }
	} else if visible != nil {
		unseen := accept
		accept = func(n *Notice) bool { return visible(n.Target) && unseen(n) }
	}
	release, err := s.admit(ctx)
	if err != nil {
		return nil, err
	}
	var fd *feed[Notice]
	if o.Marks {
		fd = &feed[Notice]{marks: true, now: s.Now}
	}
	sub := s.hub.streamNotices(w, transportOf(ctx), includeClosed, accept, dropFunc(ctx), sink, fd)
	sub.onEnd(release)
	// A cross-process bus has the subscription's interest before the read; when it
	// cannot say (it is down), its reconnect rescans (InterestSync).
	_ = s.hub.syncInterest(ctx)
	pending, err := s.readPending(ctx, w)
	if err != nil {
		sub.Unsubscribe()
		return nil, err
	}
	if own != "" {
		pending = ownWatchers(pending, own)
	}
	sub.start(visibleNotices(pending, visible))
	return sub, nil
}

// streamAgent is the agent an agent principal's unfiltered stream is narrowed to: its
// own; "" for an admin or no principal (every watcher, every session).
func (s *Service) streamAgent(ctx context.Context) string {
	if p, ok := PrincipalFrom(ctx); ok && !p.Admin {
		return p.AgentID
	}
	return ""
}

// watcherAgent is the agent of a watcher key (always agent:<agentId>:…, WAT-1).
func watcherAgent(watcher string) string {
	rest, _ := strings.CutPrefix(watcher, "agent:")
	agent, _, _ := strings.Cut(rest, ":")
	return agent
}

// ownWatchers keeps the notices whose watcher belongs to agent.
func ownWatchers(ns []Notice, agent string) []Notice {
	out := ns[:0:0]
	for _, n := range ns {
		if watcherAgent(n.Watcher) == agent {
			out = append(out, n)
		}
	}
	return out
}

// readPending reads the pending notices of watcher on a goroutine of its own. The
// caller is typically the goroutine that then waits on the subscription for as long as
// it lasts (gqlgen's, one per subscription); a store read is deep (database/sql, the
// driver, cgo) and would grow that goroutine's stack for its whole life to several
// times what waiting needs: with 10k idle subscribers, about 4 KiB each. The
// short-lived goroutine's stack goes when it returns.
func (s *Service) readPending(ctx context.Context, watcher string) ([]Notice, error) {
	var (
		pending []Notice
		err     error
		failed  any
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { failed = recover() }() // re-raised on the caller's goroutine
		pending, err = s.store.Pending(ctx, watcher)
		if err == nil {
			pending, err = s.applyHolds(ctx, watcher, pending)
		}
	}()
	<-done
	if failed != nil {
		panic(failed)
	}
	return pending, err
}

// repeatFilter drops repeats of a notice on one subscription: pair → the last
// notices sent, newest last. More than the last one: with several processes a stale
// copy of a notice (read before an ack, published after the follow-up) can arrive after
// its successor. It is called under the subscription's lock only. Within one pair a
// notice's ID (Notice.ID) is its changesSince, its opening millisecond and its closed
// mark, which is what it keeps: nothing is built per notice. A subscription mostly
// hears of a few pairs (its watcher's targets), kept in a short list; past
// fewPairs they move to a map.
type repeatFilter struct {
	few  []pairSent
	many map[noticePair]*sentNotices
}

// fewPairs bounds the pairs a repeatFilter searches in a list.
const fewPairs = 8

type noticePair struct{ watcher, agentID, key string }

// noticeStamp is what tells two notices of one pair apart (see Notice.ID).
type noticeStamp struct {
	changesSince, openedMs int64
	delivery               int
	closed                 bool
}

// sentNotices are the last stamps sent for one pair, oldest first.
type sentNotices struct {
	n      int
	stamps [sentPerPair]noticeStamp
}

type pairSent struct {
	pair noticePair
	sent sentNotices
}

func (f *repeatFilter) accept(n *Notice) bool {
	sent := f.lookup(noticePair{n.Watcher, n.Target.AgentID, n.Target.Key})
	stamp := noticeStamp{n.ChangesSince, n.OpenedAt.UnixMilli(), n.Delivery, n.Closed}
	if slices.Contains(sent.stamps[:sent.n], stamp) {
		return false
	}
	if sent.n == sentPerPair {
		copy(sent.stamps[:], sent.stamps[1:])
		sent.n--
	}
	sent.stamps[sent.n] = stamp
	sent.n++
	return true
}

// lookup returns the pair's entry, adding an empty one.
func (f *repeatFilter) lookup(pair noticePair) *sentNotices {
	if f.many != nil {
		sent := f.many[pair]
		if sent == nil {
			sent = new(sentNotices)
			f.many[pair] = sent
		}
		return sent
	}
	for i := range f.few {
		if f.few[i].pair == pair {
			return &f.few[i].sent
		}
	}
	if len(f.few) < fewPairs {
		f.few = append(f.few, pairSent{pair: pair})
		return &f.few[len(f.few)-1].sent
	}
	f.many = make(map[noticePair]*sentNotices, 2*fewPairs)
	for i := range f.few {
		f.many[f.few[i].pair] = &f.few[i].sent
	}
	f.few = nil // the map holds its entries
	return f.lookup(pair)
}

// SubscribeEvents streams the live log of one session, or of every session when key is
// nil (for an agent principal, every session of its own agent). It starts at the next append. Like SubscribeNotices, it holds no goroutine while
// idle, ends when ctx ends or the subscriber falls behind, and then calls the function
// WithDropFunc put in ctx.
func (s *Service) SubscribeEvents(ctx context.Context, key, agentID *string) (<-chan Event, func() error, error) {
	return s.SubscribeEventsAfter(ctx, key, agentID, nil)
}

// SubscribeEventsAfter is SubscribeEvents resuming after a sequence of the session
// (FEED-1, see feed.go); after nil is SubscribeEvents.
func (s *Service) SubscribeEventsAfter(ctx context.Context, key, agentID *string, after *int64) (<-chan Event, func() error, error) {
	sub, err := s.subscribeEvents(ctx, key, agentID, FeedOptions{After: after}, nil)
	if err != nil {
		return nil, nil, err
	}
	context.AfterFunc(ctx, sub.Unsubscribe)
	return sub.stream.out, sub.Err, nil
}

// SubscribeEventsTo is SubscribeEvents as a push stream, as SubscribeNoticesTo is
// SubscribeNotices'.
func (s *Service) SubscribeEventsTo(ctx context.Context, key, agentID *string, sink Sink[Event]) (unsubscribe func(), err error) {
	return s.SubscribeEventFeed(ctx, key, agentID, FeedOptions{}, sink)
}

// SubscribeEventFeed is SubscribeEventsTo as a feed (feed.go): o.After replays the
// session's log after that sequence first (FEED-1: HISTORY_GAP below the retained
// history, CURSOR_AHEAD above the head; it needs a session), and o.Marks sends the
// sink's Mark one FeedSynced after the replay and a FeedBookmark while the feed is
// idle (FEED-3). A feed of one session with marks and without o.After starts at the
// session's head, read when it subscribes, which its FeedSynced names.
func (s *Service) SubscribeEventFeed(ctx context.Context, key, agentID *string, o FeedOptions, sink Sink[Event]) (unsubscribe func(), err error) {
	sub, err := s.subscribeEvents(ctx, key, agentID, o, &sink)
	if err != nil {
		return nil, err
	}
	return sub.Unsubscribe, nil
}

func (s *Service) subscribeEvents(ctx context.Context, key, agentID *string, o FeedOptions, sink *Sink[Event]) (*Sub[Event], error) {
	var ref *SessionRef
	if key != nil {
		r, err := ResolveSession(*key, agentID)
		if err != nil {
			return nil, err
		}
		ref = &r
	} else if agentID != nil {
		return nil, Errorf(EINVALID, "agentId needs a sessionKey")
	}
	var accept func(*Event) bool
	if ref != nil {
		if err := s.authorize(ctx, ref.AgentID); err != nil {
			return nil, err
		}
	} else if own := s.streamAgent(ctx); own != "" {
		// Narrowed to the sessions of its own agent, as listings are (CLT-1).
		accept = func(e *Event) bool { return e.Session.AgentID == own }
	}
	if o.After != nil {
		if ref == nil {
			return nil, Errorf(EINVALID, "afterSequence needs a sessionKey: a feed of every session does not resume from one sequence")
		}
		if *o.After < 0 {
			return nil, Errorf(EINVALID, "afterSequence must be 0 or more, got %d", *o.After)
		}
	}
	if o.Marks && (sink == nil || sink.Mark == nil) {
		return nil, Internal(errors.New("a feed with marks needs a sink with Mark"))
	}
	var fd *feed[Event]
	if o.After != nil || o.Marks {
		fd = &feed[Event]{marks: o.Marks, now: s.Now}
		if ref != nil {
			fd.seq = eventSequence
		}
	}
	release, err := s.admit(ctx)
	if err != nil {
		return nil, err
	}
	sub := s.hub.streamEvents(ref, transportOf(ctx), accept, dropFunc(ctx), sink, fd)
	sub.onEnd(release)
	var backlog []Event
	if fd != nil && fd.seq != nil {
		// Subscribed first: the read below has everything committed before the live
		// events the stream holds back, which start then takes from the next sequence.
		var last int64
		backlog, last, err = s.readBacklog(ctx, *ref, o.After)
		if err != nil {
			sub.Unsubscribe()
			return nil, err
		}
		sub.mu.Lock()
		fd.last = last
		sub.mu.Unlock()
	}
	sub.start(backlog)
	return sub, nil
}

// FeedReplayPage is how many events a feed's replay reads per store call.
const FeedReplayPage = 500

// readBacklog reads what an event feed of ref starts with (FEED-1): after nil, the
// head (last; no event); else every event after *after (checked by checkAfter), in
// pages that must join, and the last sequence read. Like readPending, it reads on a
// goroutine of its own.
func (s *Service) readBacklog(ctx context.Context, ref SessionRef, after *int64) (backlog []Event, last int64, err error) {
	var failed any
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { failed = recover() }() // re-raised on the caller's goroutine
		if after == nil {
			var ch Changes
			if ch, err = s.store.ReadChanges(ctx, ref, 0, 0); err == nil {
				last = ch.Head.Version
			}
			return
		}
		last = *after
		for {
			var ch Changes
			if ch, err = s.store.ReadChanges(ctx, ref, last, FeedReplayPage); err != nil {
				return
			}
			// Every page is checked: retention may prune between two of them.
			if err = checkAfter(last, ch); err != nil {
				if len(backlog) > 0 && ErrorCode(err) == EHISTORYGAP {
					err = checkAfter(*after, ch) // in the caller's terms
				}
				return
			}
			for i := range ch.Events {
				if ch.Events[i].Sequence != last+1 {
					// Above the pruned watermark the log is dense (SIG-3, SIG-6).
					err = Internal(fmt.Errorf("the log of %s skips from %d to %d above its pruned watermark %d",
						ref.AgentID+"/"+ref.Key, last, ch.Events[i].Sequence, ch.Head.PrunedThrough))
					return
				}
				last++
			}
			backlog = append(backlog, ch.Events...)
			if !ch.More {
				return
			}
		}
	}()
	<-done
	if failed != nil {
		panic(failed)
	}
	return backlog, last, err
}

// admit takes a stream slot of the caller of ctx (Config.Streams).
func (s *Service) admit(ctx context.Context) (release func(), err error) {
	if s.streams == nil {
		return nil, nil
	}
	return s.streams.Admit(ctx)
}

type dropFuncKey struct{}

// WithDropFunc returns a context whose subscriptions (SubscribeNotices,
// SubscribeEvents) call fn when the hub drops them for falling behind. fn runs on the
// publisher's goroutine, after the subscription's channel is closed: it must not block.
// The transport uses it to end a connection whose write is stuck behind a client that
// does not read, instead of waiting for the write timeout.
func WithDropFunc(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, dropFuncKey{}, fn)
}

func dropFunc(ctx context.Context) func() {
	fn, _ := ctx.Value(dropFuncKey{}).(func())
	return fn
}
