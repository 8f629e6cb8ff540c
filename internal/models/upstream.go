package models

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// This file is the awareness.UpstreamStore of Store (UPS-1..5): upstream links, own
// prompt hashes and their salt, from migration 00002_upstream.

var _ awareness.UpstreamStore = (*Store)(nil)

// UpstreamLinkRow is a row of the upstream_links table.
type UpstreamLinkRow struct {
	AgentID           string  `gorm:"column:agent_id;primaryKey"`
	SessionKey        string  `gorm:"column:session_key;primaryKey"`
	LinkID            string  `gorm:"column:link_id"`
	CatalogID         string  `gorm:"column:catalog_id"`
	ThreadID          string  `gorm:"column:thread_id"`
	Source            string  `gorm:"column:source"`
	Marker            int64   `gorm:"column:marker"`
	ConsecutiveMisses int64   `gorm:"column:consecutive_misses"`
	LastCheckedAt     *int64  `gorm:"column:last_checked_at"`
	BlockedReason     *string `gorm:"column:blocked_reason"`
	CreatedAt         int64   `gorm:"column:created_at;autoCreateTime:false"`
	UpdatedAt         int64   `gorm:"column:updated_at;autoUpdateTime:false"`
}

// TableName implements gorm's tabler.
func (UpstreamLinkRow) TableName() string { return "upstream_links" }

// upstreamColumns lists the columns of UpstreamLinkRow; scanUpstreamLink reads them.
const upstreamColumns = "agent_id, session_key, link_id, catalog_id, thread_id, source, marker, " +
	"consecutive_misses, last_checked_at, blocked_reason, created_at, updated_at"

// scanUpstreamLink scans a row of upstreamColumns into a link.
func scanUpstreamLink(rows *sql.Rows) (awareness.UpstreamLink, error) {
	var r UpstreamLinkRow
	if err := rows.Scan(&r.AgentID, &r.SessionKey, &r.LinkID, &r.CatalogID, &r.ThreadID, &r.Source, &r.Marker,
		&r.ConsecutiveMisses, &r.LastCheckedAt, &r.BlockedReason, &r.CreatedAt, &r.UpdatedAt); err != nil {
		return awareness.UpstreamLink{}, err
	}
	return r.link(), nil
}

func scanString(rows *sql.Rows) (string, error) {
	var v string
	err := rows.Scan(&v)
	return v, err
}

// upstreamSaltBytes is the length of the own-prompt salt.
const upstreamSaltBytes = 32

func (r UpstreamLinkRow) link() awareness.UpstreamLink {
	return awareness.UpstreamLink{
		Session:           awareness.SessionRef{AgentID: r.AgentID, Key: r.SessionKey},
		ID:                r.LinkID,
		CatalogID:         r.CatalogID,
		ThreadID:          r.ThreadID,
		Source:            r.Source,
		Marker:            r.Marker,
		ConsecutiveMisses: int(r.ConsecutiveMisses),
		LastCheckedAt:     fromNullNanos(r.LastCheckedAt),
		BlockedReason:     derefString(r.BlockedReason),
		CreatedAt:         fromNanos(r.CreatedAt),
		UpdatedAt:         fromNanos(r.UpdatedAt),
	}
}

// deleteUpstream deletes a session's link and own-prompt hashes inside tx, for
// DeleteSession: deleting a session deletes its links (WAT-5).
func deleteUpstream(t *tx, ref awareness.SessionRef) error {
	if _, err := t.exec("DELETE FROM upstream_links WHERE agent_id = ? AND session_key = ?", ref.AgentID, ref.Key); err != nil {
		return err
	}
	_, err := t.exec("DELETE FROM upstream_own_prompts WHERE agent_id = ? AND session_key = ?", ref.AgentID, ref.Key)
	return err
}

func (s *Store) getUpstream(t *tx, ref awareness.SessionRef, lock bool) (awareness.UpstreamLink, bool, error) {
	q := "SELECT " + upstreamColumns + " FROM upstream_links WHERE agent_id = ? AND session_key = ?"
	if lock {
		q += s.d.sql.forUpdate
	}
	links, err := scanAll(t, scanUpstreamLink, q, ref.AgentID, ref.Key)
	if err != nil || len(links) == 0 {
		return awareness.UpstreamLink{}, false, err
	}
	return links[0], true, nil
}

// AdoptUpstream creates the session's link from l, keeps a same-source link's ID and
// marker while its miss streak restarts and UpdatedAt moves, or replaces a link of
// another source (UPS-1).
func (s *Store) AdoptUpstream(ctx context.Context, l awareness.UpstreamLink, now time.Time) (awareness.UpstreamLink, bool, error) {
	if err := checkNow("AdoptUpstream", now); err != nil {
		return awareness.UpstreamLink{}, false, err
	}
	if err := awareness.CheckUpstreamLink(l); err != nil {
		return awareness.UpstreamLink{}, false, err
	}
	now = normTime(now)
	var (
		out     awareness.UpstreamLink
		created bool
	)
	err := s.write(ctx, "AdoptUpstream", func(t *tx) error {
		// Two rounds at most: on PostgreSQL a concurrent first adoption can win the
		// insert, and this one then decides again against the winner's row.
		for range 2 {
			cur, found, err := s.getUpstream(t, l.Session, true)
			if err != nil {
				return err
			}
			var prev *awareness.UpstreamLink
			if found {
				prev = &cur
			}
			next, fresh := awareness.AdoptLink(prev, l, now)
			if !fresh {
				if _, err := t.exec("UPDATE upstream_links SET consecutive_misses = 0, updated_at = ? WHERE agent_id = ? AND session_key = ?",
					nanos(now), l.Session.AgentID, l.Session.Key); err != nil {
					return err
				}
				out, created = next, false
				return nil
			}
			if found {
				if _, err := t.exec(`
UPDATE upstream_links SET link_id = ?, catalog_id = ?, thread_id = ?, source = ?, marker = ?,
    consecutive_misses = 0, last_checked_at = NULL, blocked_reason = NULL, created_at = ?, updated_at = ?
WHERE agent_id = ? AND session_key = ?`,
					next.ID, next.CatalogID, next.ThreadID, next.Source, next.Marker, nanos(now), nanos(now),
					l.Session.AgentID, l.Session.Key); err != nil {
					return err
				}
			} else {
				n, err := t.exec("INSERT INTO upstream_links ("+upstreamColumns+") VALUES (?, ?, ?, ?, ?, ?, ?, 0, NULL, NULL, ?, ?) "+
					"ON CONFLICT (agent_id, session_key) DO NOTHING",
					l.Session.AgentID, l.Session.Key, next.ID, next.CatalogID, next.ThreadID, next.Source, next.Marker,
					nanos(now), nanos(now))
				if err != nil {
					return err
				}
				if n == 0 {
					continue
				}
			}
			out, created = next, true
			return nil
		}
		return errors.New("adopt upstream: the link kept changing under a concurrent adoption")
	})
	if err != nil {
		return awareness.UpstreamLink{}, false, err
	}
	return out, created, nil
}

// UpstreamLink returns the session's link.
func (s *Store) UpstreamLink(ctx context.Context, ref awareness.SessionRef) (awareness.UpstreamLink, bool, error) {
	if s.closed.Load() {
		return awareness.UpstreamLink{}, false, s.wrapErr(errClosed)
	}
	l, ok, err := s.getUpstream(s.reader(ctx), ref, false)
	return l, ok, s.wrapErr(err)
}

// UpstreamLinks lists links ordered by catalog, agent, key; q.Watched keeps those
// whose session at least one cursor targets, each once (UPS-2).
func (s *Store) UpstreamLinks(ctx context.Context, q awareness.UpstreamQuery) ([]awareness.UpstreamLink, error) {
	if s.closed.Load() {
		return nil, s.wrapErr(errClosed)
	}
	sqlText := "SELECT " + upstreamColumns + " FROM upstream_links l WHERE 1 = 1"
	var args []any
	if q.AgentID != "" {
		sqlText += " AND l.agent_id = ?"
		args = append(args, q.AgentID)
	}
	if q.Watched {
		sqlText += " AND EXISTS (SELECT 1 FROM cursors c WHERE c.target_agent_id = l.agent_id AND c.target_key = l.session_key)"
	}
	sqlText += " ORDER BY l.catalog_id, l.agent_id, l.session_key"
	out, err := scanAll(s.reader(ctx), scanUpstreamLink, sqlText, args...)
	if err != nil {
		return nil, s.wrapErr(err)
	}
	return out, nil
}

// SettleUpstream applies checks in one write transaction, each as a compare-and-set on
// the ID, marker, miss count and UpdatedAt of the link as the check read it. A marker
// never moves backwards.
func (s *Store) SettleUpstream(ctx context.Context, checks []awareness.UpstreamCheck) ([]bool, error) {
	if err := awareness.CheckUpstreamChecks(checks); err != nil {
		return nil, err
	}
	applied := make([]bool, len(checks))
	if len(checks) == 0 {
		return applied, nil
	}
	err := s.write(ctx, "SettleUpstream", func(t *tx) error {
		for i, c := range checks {
			e := c.Expect
			n, err := t.exec(`
UPDATE upstream_links SET marker = ?, consecutive_misses = ?, last_checked_at = ?, blocked_reason = ?
WHERE agent_id = ? AND session_key = ? AND link_id = ? AND marker = ? AND consecutive_misses = ? AND updated_at = ?`,
				c.Marker, c.ConsecutiveMisses, nanos(c.CheckedAt), nullString(c.BlockedReason),
				e.Session.AgentID, e.Session.Key, e.ID, e.Marker, e.ConsecutiveMisses, nanos(e.UpdatedAt))
			if err != nil {
				return err
			}
			applied[i] = n == 1
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// UpstreamRecordedEnd finds the upstream activity event recorded for the range of link
// linkID starting at start, by awareness.UpstreamDedupeKey, and returns where the
// range ended; ok is false when there is none. The prefix is compared with substr and
// =, which mean the same on both dialects whatever the column's collation, within one
// session's events; a range or LIKE would not on PostgreSQL's default collation. Of
// several, though there should be at most one, the furthest end wins.
func (s *Store) UpstreamRecordedEnd(ctx context.Context, ref awareness.SessionRef, linkID string, start int64) (int64, bool, error) {
	if s.closed.Load() {
		return 0, false, s.wrapErr(errClosed)
	}
	prefix := awareness.UpstreamDedupePrefix(linkID, start)
	keys, err := scanAll(s.reader(ctx), scanString, `SELECT dedupe_key FROM events
WHERE agent_id = ? AND session_key = ? AND dedupe_key IS NOT NULL AND substr(dedupe_key, 1, ?) = ?`,
		ref.AgentID, ref.Key, len(prefix), prefix)
	if err != nil {
		return 0, false, s.wrapErr(err)
	}
	var (
		end   int64
		found bool
	)
	for _, k := range keys {
		if e, ok := awareness.ParseUpstreamDedupeEnd(k, prefix); ok && e > start && (!found || e > end) {
			end, found = e, true
		}
	}
	return end, found, nil
}

// RemoveUpstream deletes the link if its ID and UpdatedAt are still expect's.
func (s *Store) RemoveUpstream(ctx context.Context, expect awareness.UpstreamLink) (bool, error) {
	var n int64
	err := s.write(ctx, "RemoveUpstream", func(t *tx) (err error) {
		n, err = t.exec("DELETE FROM upstream_links WHERE agent_id = ? AND session_key = ? AND link_id = ? AND updated_at = ?",
			expect.Session.AgentID, expect.Session.Key, expect.ID, nanos(expect.UpdatedAt))
		return err
	})
	return n == 1, err
}

// ForgetUnwatchedMisses restarts the miss streak of links no cursor targets: a streak
// counts consecutive checks, and unwatched links are not checked.
func (s *Store) ForgetUnwatchedMisses(ctx context.Context) (int64, error) {
	var n int64
	err := s.write(ctx, "ForgetUnwatchedMisses", func(t *tx) (err error) {
		n, err = t.exec(`
UPDATE upstream_links SET consecutive_misses = 0
WHERE consecutive_misses > 0 AND NOT EXISTS (
    SELECT 1 FROM cursors c WHERE c.target_agent_id = upstream_links.agent_id AND c.target_key = upstream_links.session_key)`)
		return err
	})
	return n, err
}

// UpstreamSalt returns the database's own-prompt salt, creating it on first use.
func (s *Store) UpstreamSalt(ctx context.Context) ([]byte, error) {
	var h string
	err := s.read(ctx, "UpstreamSalt", func(t *tx) error {
		_, err := t.scanRow([]any{&h}, "SELECT salt FROM upstream_secret WHERE id = 1")
		return err
	})
	if err != nil {
		return nil, err
	}
	if h == "" {
		fresh := make([]byte, upstreamSaltBytes)
		if _, err := rand.Read(fresh); err != nil {
			return nil, awareness.Internal(err)
		}
		err = s.write(ctx, "UpstreamSalt", func(t *tx) error {
			if _, err := t.exec("INSERT INTO upstream_secret (id, salt) VALUES (1, ?) ON CONFLICT (id) DO NOTHING",
				hex.EncodeToString(fresh)); err != nil {
				return err
			}
			found, err := t.scanRow([]any{&h}, "SELECT salt FROM upstream_secret WHERE id = 1")
			if err == nil && !found {
				err = errors.New("upstream salt vanished after its insert")
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	salt, err := hex.DecodeString(h)
	if err != nil || len(salt) == 0 {
		return nil, awareness.Internal(errors.New("upstream salt is not valid hex"))
	}
	return salt, nil
}

// AddOwnPrompt appends a prompt hash to the session's window and keeps the last keep.
// The link row is locked first, which serialises concurrent calls for one session; ok
// is false, and nothing written, when the session has no link.
func (s *Store) AddOwnPrompt(ctx context.Context, ref awareness.SessionRef, hash string, now time.Time, keep int) (bool, error) {
	if err := awareness.CheckOwnPrompt(hash, now, keep); err != nil {
		return false, err
	}
	now = normTime(now)
	var ok bool
	err := s.write(ctx, "AddOwnPrompt", func(t *tx) error {
		ok = false
		if _, found, err := s.getUpstream(t, ref, true); err != nil || !found {
			return err
		}
		var last sql.NullInt64
		if _, err := t.scanRow([]any{&last},
			"SELECT MAX(position) FROM upstream_own_prompts WHERE agent_id = ? AND session_key = ?", ref.AgentID, ref.Key); err != nil {
			return err
		}
		pos := last.Int64 + 1
		if _, err := t.exec("INSERT INTO upstream_own_prompts (agent_id, session_key, position, hash, recorded_at) VALUES (?, ?, ?, ?, ?)",
			ref.AgentID, ref.Key, pos, hash, nanos(now)); err != nil {
			return err
		}
		if _, err := t.exec("DELETE FROM upstream_own_prompts WHERE agent_id = ? AND session_key = ? AND position <= ?",
			ref.AgentID, ref.Key, pos-int64(keep)); err != nil {
			return err
		}
		ok = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return ok, nil
}

// OwnPrompts returns the session's kept prompt hashes, oldest first.
func (s *Store) OwnPrompts(ctx context.Context, ref awareness.SessionRef) ([]string, error) {
	if s.closed.Load() {
		return nil, s.wrapErr(errClosed)
	}
	hashes, err := scanAll(s.reader(ctx), scanString,
		"SELECT hash FROM upstream_own_prompts WHERE agent_id = ? AND session_key = ? ORDER BY position", ref.AgentID, ref.Key)
	if err != nil {
		return nil, s.wrapErr(err)
	}
	return hashes, nil
}
