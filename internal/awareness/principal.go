package awareness

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Principal is the authenticated caller of a request: an administrator, or an agent
// that may act on its own sessions only. Transports put it in the context; the
// Service enforces it in one place, authorize.
type Principal struct {
	// Admin may do everything: every agent's sessions, unfiltered streams, the
	// dashboard.
	Admin bool
	// AgentID is the agent a non-admin principal acts for: role "agent:<id>".
	AgentID string
	// Name identifies the credential in logs; it is never a secret.
	Name string
}

// Role returns the principal's role as written in an auth file: "admin" or
// "agent:<id>".
func (p Principal) Role() string {
	if p.Admin {
		return "admin"
	}
	return "agent:" + p.AgentID
}

// ParseRole parses "admin" or "agent:<id>", with a KEY-4 agent id.
func ParseRole(role string) (Principal, error) {
	r := strings.TrimSpace(role)
	if r == "admin" {
		return Principal{Admin: true}, nil
	}
	if id, ok := strings.CutPrefix(r, "agent:"); ok && ValidAgentID(id) {
		return Principal{AgentID: id}, nil
	}
	return Principal{}, fmt.Errorf("role %q: want \"admin\" or \"agent:<agentId>\" with an agent id of [a-z0-9][a-z0-9_-]{0,63}", role)
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal of ctx; ok is false when there is none: the
// service runs without authentication, or the caller is the service itself.
func PrincipalFrom(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// authorize is the one authorisation check of the service. It is called by every
// Service method once the keys of the call are resolved, with the agent ids whose
// state the call reads or writes:
//
//   - no principal in ctx, without an auth file or for an internal caller: allowed;
//   - an admin: allowed;
//   - an agent principal: allowed when every given agent id is its own; a call with
//     no agent id at all is admin-only. Listings and unfiltered streams narrow
//     themselves to the principal's agent before they get here, with scopeAgent and
//     streamAgent.
//
// A refusal is FORBIDDEN and happens before anything is written (ERR-2).
func (s *Service) authorize(ctx context.Context, agentIDs ...string) error {
	p, ok := PrincipalFrom(ctx)
	if !ok || p.Admin {
		return nil
	}
	if len(agentIDs) == 0 {
		return Errorf(EFORBIDDEN, "this operation spans every agent and needs the admin role; the token's role is %s", p.Role())
	}
	for _, a := range agentIDs {
		if a != p.AgentID {
			return Errorf(EFORBIDDEN, "the token's role %s may not act on the sessions of agent %q", p.Role(), a)
		}
	}
	return nil
}

// scopeAgent returns the agent filter a listing must use: the given one, checked by
// authorize, or, for an agent principal without a filter, its own agent.
func (s *Service) scopeAgent(ctx context.Context, agentID string) (string, error) {
	if p, ok := PrincipalFrom(ctx); ok && !p.Admin && agentID == "" {
		return p.AgentID, nil
	}
	if agentID == "" {
		return "", nil
	}
	return agentID, s.authorize(ctx, agentID)
}

// Grants are the cross-agent permissions named in the auth file (CLT-1). The zero
// value grants nothing: an agent token acts on its own agent's sessions only, and
// every catalog is open to every agent.
type Grants struct {
	// Watch maps an agent id to the other agents whose sessions its sessions may
	// watch, for cursors, notices and change counts. Absent: its own agent only.
	Watch map[string][]string
	// Catalogs maps a catalog id to the agents that may adopt from it. A catalog not
	// named is open to every agent; admins may always adopt.
	Catalogs map[string][]string
}

// MayWatch reports whether sessions of agent watcher may watch sessions of agent
// target: always for the same agent, otherwise only by grant.
func (g Grants) MayWatch(watcher, target string) bool {
	return watcher == target || slices.Contains(g.Watch[watcher], target)
}

// MayAdopt reports whether agent may adopt from the catalog.
func (g Grants) MayAdopt(catalog, agent string) bool {
	allowed, restricted := g.Catalogs[catalog]
	return !restricted || slices.Contains(allowed, agent)
}

// authorizeWatch is authorize for a watcher's cursor on a target: the caller must act
// for the watcher's agent, and the watcher's agent must be the target's or hold a
// watch grant on it (CLT-1). It refuses before anything is read, so that the answer
// does not reveal whether the target exists.
func (s *Service) authorizeWatch(ctx context.Context, watcher SessionRef, target SessionRef) error {
	if err := s.authorize(ctx, watcher.AgentID); err != nil {
		return err
	}
	p, ok := PrincipalFrom(ctx)
	if !ok || p.Admin || s.grants.MayWatch(watcher.AgentID, target.AgentID) {
		return nil
	}
	return Errorf(EFORBIDDEN, "the token's role %s may not watch the sessions of agent %q: the auth file grants agent %q no watch on it", p.Role(), target.AgentID, watcher.AgentID)
}

// watchVisible returns, for an agent principal, whether a cursor's or notice's target
// is one the principal's agent may watch: its own, or granted. A cursor made before a
// grant was withdrawn, or before CLT-1 held, thus shows nothing of the other agent's
// session in pendingNotices, staleNotices, watches or ackNotices. nil means
// everything is visible, for an admin or without a principal.
func (s *Service) watchVisible(ctx context.Context) func(target SessionRef) bool {
	p, ok := PrincipalFrom(ctx)
	if !ok || p.Admin {
		return nil
	}
	return func(t SessionRef) bool { return s.grants.MayWatch(p.AgentID, t.AgentID) }
}

// visibleNotices keeps the notices whose target visible accepts; all when it is nil.
func visibleNotices(ns []Notice, visible func(SessionRef) bool) []Notice {
	if visible == nil {
		return ns
	}
	out := ns[:0:0]
	for _, n := range ns {
		if visible(n.Target) {
			out = append(out, n)
		}
	}
	return out
}

// authorizeAdopt refuses an agent principal adopting from a catalog restricted to
// other agents.
func (s *Service) authorizeAdopt(ctx context.Context, catalog string) error {
	p, ok := PrincipalFrom(ctx)
	if !ok || p.Admin || s.grants.MayAdopt(catalog, p.AgentID) {
		return nil
	}
	return Errorf(EFORBIDDEN, "the token's role %s may not adopt from catalog %q: the auth file restricts it to other agents", p.Role(), catalog)
}

// authorizeRecord is authorize for an append; every append path calls it. An append
// writes or speaks for the session's agent, each producer-passed watcher's, whose
// cursors it moves (WAT-4), and an agent-qualified actorId's, since the event is
// credited to that session and self-suppression trusts it. A person's or system's
// actorId names no agent; an agent principal's agent actor must be one of its own
// sessions (CLT-1): an actorType agent event whose actorId is not an agent-qualified
// key is refused, as one of another agent is.
func (s *Service) authorizeRecord(ctx context.Context, ne NewEvent) error {
	agents := []string{ne.Event.Session.AgentID}
	for _, w := range ne.Watchers {
		agents = append(agents, w.AgentID)
	}
	if ne.Actor.AgentID != "" {
		agents = append(agents, ne.Actor.AgentID)
	}
	if err := s.authorize(ctx, agents...); err != nil {
		return err
	}
	p, ok := PrincipalFrom(ctx)
	if ok && !p.Admin && ne.Event.ActorType == ActorAgent && ne.Event.ActorID != "" && ne.Actor.AgentID == "" {
		return Errorf(EFORBIDDEN, "the token's role %s records agent actors only as its own sessions: actorId %q is not a session key agent:%s:…",
			p.Role(), truncateForMessage(ne.Event.ActorID), p.AgentID)
	}
	return nil
}
