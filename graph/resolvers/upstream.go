package resolvers

import (
	"context"

	"github.com/awareness/awareness/graph/gqlmodel"
	"github.com/awareness/awareness/internal/awareness"
)

// adoptSession resolves Mutation.adoptSession (UPS-1).
func (r *Resolver) adoptSession(ctx context.Context, in gqlmodel.AdoptInput) (gqlmodel.UpstreamLink, error) {
	l, err := r.Service.AdoptSession(ctx, in.SessionKey, in.AgentID, in.CatalogID, in.ThreadID)
	if err != nil {
		return gqlmodel.UpstreamLink{}, err
	}
	return upstreamLink(l), nil
}

// upstreamLinks resolves Query.upstreamLinks (UPS-1..5).
func (r *Resolver) upstreamLinks(ctx context.Context, agentID *string) ([]gqlmodel.UpstreamLink, error) {
	ls, err := r.Service.UpstreamLinks(ctx, agentID)
	if err != nil {
		return nil, err
	}
	out := make([]gqlmodel.UpstreamLink, 0, len(ls))
	for _, l := range ls {
		out = append(out, upstreamLink(l))
	}
	return out, nil
}

// upstreamLink maps a link. The source (a file path) is not part of the API.
func upstreamLink(l awareness.UpstreamLink) gqlmodel.UpstreamLink {
	out := gqlmodel.UpstreamLink{
		SessionKey:        l.Session.Key,
		AgentID:           l.Session.AgentID,
		CatalogID:         l.CatalogID,
		ThreadID:          l.ThreadID,
		Marker:            int(l.Marker),
		ConsecutiveMisses: l.ConsecutiveMisses,
		BlockedReason:     optString(l.BlockedReason),
	}
	if !l.LastCheckedAt.IsZero() {
		t := l.LastCheckedAt
		out.LastCheckedAt = &t
	}
	return out
}
