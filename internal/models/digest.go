package models

import (
	"context"
	"database/sql"

	"github.com/awareness/awareness/internal/awareness"
)

// A notice's digest (DIG-1) is read from its target's log after L up to N, a range
// of the events' primary key: the groups by kind and actor type, then the latest
// human event's payload, reading the same range backwards to the first human row.
// Neither statement reads a row outside the range.
const (
	digestGroupsSQL = "SELECT kind, actor_type, COUNT(*) FROM events " +
		"WHERE agent_id = ? AND session_key = ? AND sequence > ? AND sequence <= ? GROUP BY kind, actor_type"
	digestHumanSQL = "SELECT payload_json FROM events " +
		"WHERE agent_id = ? AND session_key = ? AND sequence > ? AND sequence <= ? AND actor_type = 'human' " +
		"ORDER BY sequence DESC LIMIT 1"
)

// Digests returns the digest of each range, in their order, read in one read
// transaction (DIG-1).
func (s *Store) Digests(ctx context.Context, ranges []awareness.DigestRange) ([]awareness.NoticeDigest, error) {
	if err := awareness.CheckDigestRanges(ranges); err != nil {
		return nil, err
	}
	out := make([]awareness.NoticeDigest, len(ranges))
	if len(ranges) == 0 {
		return out, nil
	}
	err := s.read(ctx, "Digests", func(t *tx) error {
		for i, r := range ranges {
			d, err := readDigest(t, r)
			if err != nil {
				return err
			}
			out[i] = d
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func readDigest(t *tx, r awareness.DigestRange) (awareness.NoticeDigest, error) {
	args := []any{r.Target.AgentID, r.Target.Key, r.After, r.Through}
	rows, err := t.query(digestGroupsSQL, args...)
	if err != nil {
		return awareness.NoticeDigest{}, err
	}
	defer rows.Close()
	var (
		groups []awareness.DigestCount
		humans bool
	)
	for rows.Next() {
		var (
			g           awareness.DigestCount
			kind, actor string
		)
		if err := rows.Scan(&kind, &actor, &g.Count); err != nil {
			return awareness.NoticeDigest{}, err
		}
		g.Kind, g.ActorType = awareness.EventKind(kind), awareness.ActorType(actor)
		humans = humans || g.ActorType == awareness.ActorHuman
		groups = append(groups, g)
	}
	if err := rows.Err(); err != nil {
		return awareness.NoticeDigest{}, err
	}
	rows.Close()
	channel := ""
	if humans {
		var payload sql.NullString
		if _, err := t.scanRow([]any{&payload}, digestHumanSQL, args...); err != nil {
			return awareness.NoticeDigest{}, err
		}
		if payload.Valid && payload.String != "" {
			p, err := awareness.ParsePayload(payload.String)
			if err != nil {
				return awareness.NoticeDigest{}, err
			}
			channel = p.Channel
		}
	}
	return awareness.BuildDigest(r, groups, channel), nil
}
