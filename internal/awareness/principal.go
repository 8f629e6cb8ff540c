package awareness

import (
	"context"
	"fmt"
	"strings"
)

// Principal is the authenticated caller of a request: an administrator, or an agent
// that may act on its own sessions only. Transports (package graph) put it in the
// context; the Service enforces it in one place, authorize.
type Principal struct {
	// Admin may do everything: every agent's sessions, unfiltered streams, the
	// dashboard.
	Admin bool
	// AgentID is the agent a non-admin principal acts for (role "agent:<id>").
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

// ParseRole parses "admin" or "agent:<id>" (KEY-4 agent ids).
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

// PrincipalFrom returns the principal of ctx; ok is false when there is none (the
// service runs without authentication, or the caller is the service itself).
func PrincipalFrom(ctx context.Context) (p Principal, ok bool) {
	p, ok = ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// authorize is the one authorisation check of the service. It is called by every
// Service method once the keys of the call are resolved, with the agent ids whose
// state the call reads or writes:
//
//   - no principal in ctx (no auth file, or an internal caller): allowed;
//   - an admin: allowed;
//   - an agent principal: allowed when every given agent id is its own; a call with
//     no agent id at all (an unfiltered stream or listing) is admin-only.
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

// scopeAgent returns the agent filter a listing must use: the given one (checked by
// authorize), or, for an agent principal without a filter, its own agent.
func (s *Service) scopeAgent(ctx context.Context, agentID string) (string, error) {
	if p, ok := PrincipalFrom(ctx); ok && !p.Admin && agentID == "" {
		return p.AgentID, nil
	}
	if agentID == "" {
		return "", nil
	}
	return agentID, s.authorize(ctx, agentID)
}

// recordAgents returns the agents whose state an append writes: the session's, and
// each producer-passed watcher's (their cursors, WAT-4).
func recordAgents(ne NewEvent) []string {
	out := []string{ne.Event.Session.AgentID}
	for _, w := range ne.Watchers {
		if p, ok := ParseSessionKey(w); ok {
			out = append(out, p.AgentID)
		}
	}
	return out
}
