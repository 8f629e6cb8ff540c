package awareness

import (
	"context"
	"strings"
	"time"
)

// Viewer is who a caller is, as the service authorizes it (CLT-1): what a dashboard
// shows so that a person knows what the token may read.
type Viewer struct {
	// Authenticated is false when the service runs without authentication: every
	// caller is then an administrator.
	Authenticated bool
	Principal     Principal
}

// Viewer returns the caller of ctx.
func (s *Service) Viewer(ctx context.Context) Viewer {
	p, ok := PrincipalFrom(ctx)
	if !ok {
		return Viewer{Principal: Principal{Admin: true}}
	}
	return Viewer{Authenticated: true, Principal: p}
}

// MaxTreeNodes bounds the sessions of one SessionTree.
const MaxTreeNodes = 500

// TreeNode is one session of the manager → sub-agent tree.
type TreeNode struct {
	Session Session
	// Parent is the session that spawned it: the registry's parent (REG-1), else the
	// agent-qualified actor of its earliest retained child_spawned event (WAT-2); nil
	// for a root. The parent may be outside the tree (another agent, or not listed).
	Parent *SessionRef
}

// SessionTree is the manager → sub-agent forest of one agent's sessions (or every
// agent's), ordered by (agent, key); Truncated says more sessions matched than
// MaxTreeNodes.
type SessionTree struct {
	Nodes     []TreeNode
	Truncated bool
}

// SessionTree returns the sessions of agentID (nil: every agent; an agent principal's
// own) updated in the last activeMinutes (nil: any time), each with its parent.
func (s *Service) SessionTree(ctx context.Context, agentID *string, activeMinutes *int) (SessionTree, error) {
	q := SessionQuery{Limit: MaxTreeNodes + 1}
	if agentID != nil {
		a := strings.ToLower(strings.TrimSpace(*agentID))
		if !ValidAgentID(a) {
			return SessionTree{}, Errorf(EINVALID, "agentId %q is not a valid agent id", truncateForMessage(*agentID))
		}
		q.AgentID = a
	}
	if activeMinutes != nil {
		if *activeMinutes < 1 {
			return SessionTree{}, Errorf(EINVALID, "activeMinutes must be positive, got %d", *activeMinutes)
		}
		q.UpdatedSince = s.Now().Add(-time.Duration(min(*activeMinutes, MaxActiveMinutes)) * time.Minute)
	}
	scoped, err := s.scopeAgent(ctx, q.AgentID)
	if err != nil {
		return SessionTree{}, err
	}
	q.AgentID = scoped
	rows, err := s.store.ListSessions(ctx, q)
	if err != nil {
		return SessionTree{}, err
	}
	spawns, err := s.store.Spawns(ctx, q.AgentID)
	if err != nil {
		return SessionTree{}, err
	}
	parents := make(map[SessionRef]string, len(spawns))
	for _, sp := range spawns {
		parents[sp.Child] = sp.Parent
	}
	tree := SessionTree{Nodes: make([]TreeNode, 0, min(len(rows), MaxTreeNodes))}
	if len(rows) > MaxTreeNodes {
		rows, tree.Truncated = rows[:MaxTreeNodes], true
	}
	for _, r := range rows {
		n := TreeNode{Session: r}
		parent := parents[r.Ref]
		if p := r.Entry.ParentSessionKey; r.Registered && p != nil && *p != "" {
			parent = *p
		}
		if ref, err := ResolveSession(parent, nil); parent != "" && err == nil && ref != r.Ref {
			n.Parent = &ref
		}
		tree.Nodes = append(tree.Nodes, n)
	}
	return tree, nil
}
