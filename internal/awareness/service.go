package awareness

import (
	"context"
	"log/slog"
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

// sessionToWrite resolves the session of a write (KEY-3), checks the caller may write
// it (CLT-1) and stops at the gate of a check-only request: what every write to one
// session does first.
func (s *Service) sessionToWrite(ctx context.Context, key string, agentID *string) (SessionRef, error) {
	ref, err := ResolveSession(key, agentID)
	if err != nil {
		return SessionRef{}, err
	}
	if err := s.authorize(ctx, ref.AgentID); err != nil {
		return SessionRef{}, err
	}
	return ref, writing(ctx)
}

// Now returns the service clock's time in UTC.
func (s *Service) Now() time.Time { return s.now().UTC() }
