package resolvers

import (
	"github.com/awareness/awareness/graph/gqlmodel"
	"github.com/awareness/awareness/internal/awareness"
)

// defaultAckHistoryFirst is the page size of ackHistory when a client passes first:
// null.
const defaultAckHistoryFirst = 50

func viewer(v awareness.Viewer) gqlmodel.Viewer {
	p := v.Principal
	out := gqlmodel.Viewer{Authenticated: v.Authenticated, Admin: p.Admin, Role: p.Role()}
	if !p.Admin {
		out.AgentID = &p.AgentID
	}
	if v.Authenticated {
		out.Name = optString(p.Name)
	}
	return out
}

func ackHistoryPage(p awareness.AckHistoryPage) gqlmodel.AckHistoryPage {
	out := gqlmodel.AckHistoryPage{
		Records:  make([]gqlmodel.AckRecord, 0, len(p.Records)),
		PageInfo: &gqlmodel.PageInfo{HasNextPage: p.HasNextPage, EndCursor: optString(p.EndCursor)},
	}
	for _, r := range p.Records {
		rec := gqlmodel.AckRecord{
			Watcher: r.Watcher, Target: r.Target.Key, TargetAgentID: r.Target.AgentID,
			ChangesSince: int(r.ChangesSince), NotifiedVersion: int(r.NotifiedVersion),
			OpenedAt: r.OpenedAt, AcknowledgedAt: r.AckedAt, Form: r.Form,
			Principal: optString(r.By.Principal), Role: optString(r.By.Role),
			Transport: r.By.Transport, Client: optString(r.By.Client),
		}
		if r.FollowUp > 0 {
			v := int(r.FollowUp)
			rec.FollowUpVersion = &v
		}
		out.Records = append(out.Records, rec)
	}
	return out
}

func sessionTree(t awareness.SessionTree) gqlmodel.SessionTree {
	out := gqlmodel.SessionTree{Nodes: make([]gqlmodel.SessionTreeNode, 0, len(t.Nodes)), Truncated: t.Truncated}
	for _, n := range t.Nodes {
		s := session(n.Session)
		node := gqlmodel.SessionTreeNode{
			SessionKey: s.SessionKey, AgentID: s.AgentID, Kind: s.Kind, DisplayName: s.DisplayName,
			StateVersion: s.StateVersion, UpdatedAt: s.UpdatedAt,
		}
		if n.Parent != nil {
			node.ParentSessionKey, node.ParentAgentID = &n.Parent.Key, &n.Parent.AgentID
		}
		out.Nodes = append(out.Nodes, node)
	}
	return out
}
