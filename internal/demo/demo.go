// Package demo plays a realistic scene against a Service, for the dashboard and for
// trying the API without a gateway: a manager session delegates to three sub-agents,
// a person types into one of them over Telegram, a goal changes, a child run times
// out — and then the scene keeps going at a gentle pace until its context ends.
//
// It uses the Service API only (RecordEvent, Watch, AckNotices), exactly as a gateway
// would through GraphQL, so everything it does is visible on /query and on the
// dashboard, and it never touches the store directly.
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// DefaultPace is the time between two steps of the running scene when Run is given a
// pace of zero or less.
const DefaultPace = 3 * time.Second

// Sessions of the scene.
const (
	Manager  = "agent:main:main"
	Research = "agent:main:subagent:research-7f3a"
	Coder    = "agent:main:subagent:coder-19c2"
	Reviewer = "agent:main:subagent:review-42d8"
	// Cron is a bare key (KEY-3): it has a log but can never watch.
	Cron = "cron:nightly-digest"
	// Person is the sender id of the human who types into the coder.
	Person = "telegram:ana"
	// Peer is another agent that coordinates with the manager via sessions_send.
	Peer = "agent:ops:main"
)

// maxHelpers bounds the extra sub-agents the running scene spawns.
const maxHelpers = 3

// Run seeds the scene (idempotently: the seed events carry dedupe keys, so running
// it again on the same database adds nothing) and then records one more step every
// pace until ctx ends. pace <= 0 means DefaultPace.
//
// Run returns nil when ctx ends, and an error only when the seed fails for another
// reason. A failed step of the running scene is logged and skipped: the next one is
// tried a pace later. Run owns no goroutine; it returns promptly once ctx is done.
func Run(ctx context.Context, svc *awareness.Service, log *slog.Logger, pace time.Duration) error {
	if svc == nil {
		return errors.New("demo: nil service")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if pace <= 0 {
		pace = DefaultPace
	}
	s := &scene{svc: svc, log: log}
	if err := s.seed(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("demo: seed: %w", err)
	}
	log.Info("demo scene seeded", "manager", Manager, "children", []string{Research, Coder, Reviewer}, "pace", pace)

	t := time.NewTicker(pace)
	defer t.Stop()
	for step := 0; ; step++ {
		select {
		case <-ctx.Done():
			log.Info("demo scene stopped", "steps", step)
			return nil
		case <-t.C:
		}
		if err := s.step(ctx, step); err != nil {
			if ctx.Err() != nil {
				log.Info("demo scene stopped", "steps", step)
				return nil
			}
			log.Warn("demo step failed", "step", step, "err", err)
		}
	}
}

type scene struct {
	svc     *awareness.Service
	log     *slog.Logger
	run     int // run ids of the running scene
	helpers int // extra sub-agents spawned so far
}

// ev describes one event to record; zero fields are left out.
type ev struct {
	key       string
	agentID   string
	kind      awareness.EventKind
	actorType awareness.ActorType
	actorID   string
	runID     string
	outcome   awareness.RunOutcome
	channel   string
	turns     int
	dedupe    string
	watchers  []string
	ago       time.Duration // occurredAt = now - ago
}

func (s *scene) record(ctx context.Context, e ev) (awareness.RecordResult, error) {
	in := awareness.RecordInput{
		SessionKey: e.key,
		Kind:       e.kind,
		ActorType:  e.actorType,
		Watchers:   e.watchers,
	}
	if e.agentID != "" {
		in.AgentID = &e.agentID
	}
	if e.actorID != "" {
		in.ActorID = &e.actorID
	}
	if e.runID != "" {
		in.RunID = &e.runID
	}
	if e.outcome != "" {
		in.Outcome = &e.outcome
	}
	if e.channel != "" {
		in.Channel = &e.channel
	}
	if e.turns > 0 {
		in.Turns = &e.turns
	}
	if e.dedupe != "" {
		in.DedupeKey = &e.dedupe
	}
	if e.ago > 0 {
		at := s.svc.Now().Add(-e.ago)
		in.OccurredAt = &at
	}
	res, err := s.svc.RecordEvent(ctx, in)
	if err != nil {
		return res, fmt.Errorf("record %s on %s: %w", e.kind, e.key, err)
	}
	s.log.Debug("demo event", "session", e.key, "kind", e.kind, "sequence", res.Event.Sequence,
		"recorded", res.Recorded, "notices_opened", res.NoticesOpened)
	return res, nil
}

// seed records the opening of the scene, backdated over the last quarter hour.
func (s *scene) seed(ctx context.Context) error {
	spawn := func(child, run string, ago time.Duration) ev {
		return ev{key: child, kind: awareness.ChildSpawned, actorType: awareness.ActorAgent, actorID: Manager,
			runID: run, dedupe: "demo:child-spawned:" + run, watchers: []string{Manager}, ago: ago}
	}
	steps := []ev{
		{key: Manager, kind: awareness.GoalChanged, actorType: awareness.ActorHuman, actorID: Person,
			channel: "telegram", dedupe: "demo:seed:manager-goal", ago: 15 * time.Minute},
		spawn(Research, "run-research-1", 14*time.Minute),
		spawn(Coder, "run-coder-1", 13*time.Minute),
		spawn(Reviewer, "run-review-1", 12*time.Minute),
		{key: Cron, agentID: "main", kind: awareness.RunCompleted, actorType: awareness.ActorSystem,
			runID: "run-digest-1", dedupe: "demo:run-terminal:run-digest-1", ago: 11 * time.Minute},
	}
	for _, e := range steps {
		if _, err := s.record(ctx, e); err != nil {
			return err
		}
	}
	// The research sub-agent coordinates with the coder: an explicit watch (WAT-3), so
	// a nested watcher (wake: false, NTC-6) is in the scene too.
	if _, err := s.svc.Watch(ctx, Research, Coder, nil); err != nil {
		return fmt.Errorf("watch %s → %s: %w", Research, Coder, err)
	}
	steps = []ev{
		// A person types straight into the coder: the manager (wake) and the research
		// sub-agent (no wake) each get one notice.
		{key: Coder, kind: awareness.HumanDirectMessage, actorType: awareness.ActorHuman, actorID: Person,
			channel: "telegram", dedupe: "demo:seed:coder-human-1", ago: 9 * time.Minute},
		// Another agent changes the reviewer's goal.
		{key: Reviewer, kind: awareness.GoalChanged, actorType: awareness.ActorAgent, actorID: Peer,
			dedupe: "demo:seed:reviewer-goal", ago: 7 * time.Minute},
		// The reviewer's run times out (log only).
		{key: Reviewer, kind: awareness.RunFailed, actorType: awareness.ActorSystem, runID: "run-review-1",
			outcome: awareness.OutcomeTimeout, dedupe: "demo:run-terminal:run-review-1", ago: 5 * time.Minute},
		{key: Research, kind: awareness.RunCompleted, actorType: awareness.ActorSystem, runID: "run-research-1",
			dedupe: "demo:run-terminal:run-research-1", ago: 3 * time.Minute},
		// The person sends two more turns: the pending notices stay as they are (NTC-2).
		{key: Coder, kind: awareness.HumanDirectMessage, actorType: awareness.ActorHuman, actorID: Person,
			channel: "telegram", turns: 2, dedupe: "demo:seed:coder-human-2", ago: time.Minute},
	}
	for _, e := range steps {
		if _, err := s.record(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

// step records the next beat of the running scene. The beats cycle; each one is what
// a gateway would report at that moment.
func (s *scene) step(ctx context.Context, n int) error {
	s.run++
	runID := fmt.Sprintf("run-live-%d-%d", time.Now().Unix(), s.run)
	switch n % 12 {
	case 0: // the person keeps typing into the coder
		_, err := s.record(ctx, ev{key: Coder, kind: awareness.HumanDirectMessage, actorType: awareness.ActorHuman,
			actorID: Person, channel: "telegram"})
		return err
	case 1:
		_, err := s.record(ctx, ev{key: Research, kind: awareness.RunCompleted, actorType: awareness.ActorSystem, runID: runID})
		return err
	case 2: // the manager re-targets the coder: self-suppressed for the manager (NTC-2),
		// a notice for the research sub-agent that watches the coder
		_, err := s.record(ctx, ev{key: Coder, kind: awareness.GoalChanged, actorType: awareness.ActorAgent, actorID: Manager})
		return err
	case 3: // the manager's gateway drains its notices into the next turn (NTC-3)
		ns, err := s.drain(ctx, Manager)
		if err == nil {
			s.log.Debug("demo: manager acknowledged its notices", "follow_ups", len(ns))
		}
		return err
	case 4:
		if s.helpers >= maxHelpers {
			_, err := s.record(ctx, ev{key: Research, kind: awareness.Compacted, actorType: awareness.ActorSystem})
			return err
		}
		s.helpers++
		child := fmt.Sprintf("agent:main:subagent:helper-%d", s.helpers)
		_, err := s.record(ctx, ev{key: child, kind: awareness.ChildSpawned, actorType: awareness.ActorAgent,
			actorID: Manager, runID: runID, watchers: []string{Manager}})
		return err
	case 5: // someone writes to the reviewer on Slack
		_, err := s.record(ctx, ev{key: Reviewer, kind: awareness.HumanDirectMessage, actorType: awareness.ActorHuman,
			actorID: "slack:u024be7lh", channel: "slack"})
		return err
	case 6:
		_, err := s.record(ctx, ev{key: Reviewer, kind: awareness.RunFailed, actorType: awareness.ActorSystem,
			runID: runID, outcome: awareness.OutcomeError})
		return err
	case 7: // the research sub-agent drains its notice on its next turn
		_, err := s.drain(ctx, Research)
		return err
	case 8:
		_, err := s.record(ctx, ev{key: Cron, agentID: "main", kind: awareness.RunCompleted, actorType: awareness.ActorSystem, runID: runID})
		return err
	case 9:
		_, err := s.record(ctx, ev{key: Coder, kind: awareness.Compacted, actorType: awareness.ActorSystem})
		return err
	case 10:
		_, err := s.record(ctx, ev{key: Coder, kind: awareness.HumanDirectMessage, actorType: awareness.ActorHuman,
			actorID: Person, channel: "telegram", turns: 3})
		return err
	default:
		_, err := s.record(ctx, ev{key: Research, kind: awareness.RunFailed, actorType: awareness.ActorSystem,
			runID: runID, outcome: awareness.OutcomeCancelled})
		return err
	}
}

// drain is what a gateway does when a watcher's turn takes its notices into the
// prompt: it reads the pending notices and acknowledges exactly those (NTC-3), so a
// notice opened in between stays pending. It returns the follow-ups opened.
func (s *scene) drain(ctx context.Context, watcher string) ([]awareness.Notice, error) {
	pending, err := s.svc.PendingNotices(ctx, watcher)
	if err != nil || len(pending) == 0 {
		return nil, err
	}
	refs := make([]awareness.NoticeRef, len(pending))
	for i, n := range pending {
		refs[i] = awareness.NoticeRef{Target: n.Target.Key, TargetAgentID: &n.Target.AgentID, NotifiedVersion: n.NotifiedVersion}
	}
	return s.svc.AckNotices(ctx, watcher, nil, nil, refs)
}
