package models

import (
	"context"
	"database/sql"
	"slices"
	"strings"

	"github.com/awareness/awareness/internal/awareness"
)

// The acknowledgement history (migration 00006, awareness.AckRecords).

const ackLogColumns = "watcher_key, watcher_agent_id, target_agent_id, target_key, l, n, opened_at, acked_at, form, follow_up, principal, role, transport, client"

// ackRowsPerInsert bounds the rows of one INSERT: 14 parameters each, well under the
// parameter limits of SQLite (32766) and PostgreSQL (65535).
const ackRowsPerInsert = 200

// insertAckRecords writes the history rows of one acknowledgement, in t.
func insertAckRecords(t *tx, recs []awareness.AckRecord) error {
	for chunk := range slices.Chunk(recs, ackRowsPerInsert) {
		var sb strings.Builder
		sb.WriteString("INSERT INTO ack_log (" + ackLogColumns + ") VALUES ")
		args := make([]any, 0, 14*len(chunk))
		for i, r := range chunk {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
			var follow *int64
			if r.FollowUp > 0 {
				follow = &r.FollowUp
			}
			agent, _ := awareness.ParseSessionKey(r.Watcher)
			args = append(args, r.Watcher, agent.AgentID, r.Target.AgentID, r.Target.Key, r.ChangesSince, r.NotifiedVersion,
				nanos(r.OpenedAt), nanos(r.AckedAt), string(r.Form), follow,
				nullString(r.By.Principal), nullString(r.By.Role), r.By.Transport, nullString(r.By.Client))
		}
		if _, err := t.exec(sb.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

// AckHistory returns the acknowledgement records q selects, newest first. Each filter
// has its index (ack_log_watcher, ack_log_watcher_agent, ack_log_target), read
// backwards from q.Before.
func (s *Store) AckHistory(ctx context.Context, q awareness.AckHistoryQuery) ([]awareness.AckRecord, error) {
	if s.closed.Load() {
		return nil, s.wrapErr(errClosed)
	}
	var (
		where []string
		args  []any
	)
	add := func(cond string, vs ...any) { where, args = append(where, cond), append(args, vs...) }
	if q.Watcher != "" {
		add("watcher_key = ?", q.Watcher)
	}
	if q.WatcherAgent != "" {
		add("watcher_agent_id = ?", q.WatcherAgent)
	}
	if q.Target != nil {
		add("target_agent_id = ? AND target_key = ?", q.Target.AgentID, q.Target.Key)
	}
	if q.TargetAgents != nil {
		if len(q.TargetAgents) == 0 {
			return []awareness.AckRecord{}, nil
		}
		add("target_agent_id IN ?", q.TargetAgents)
	}
	if q.Before > 0 {
		add("id < ?", q.Before)
	}
	text := "SELECT id, " + ackLogColumns + " FROM ack_log"
	if len(where) > 0 {
		text += " WHERE " + strings.Join(where, " AND ")
	}
	text += " ORDER BY id DESC"
	if q.Limit > 0 {
		text += " LIMIT ?"
		args = append(args, q.Limit)
	}
	out, err := scanAll(s.reader(ctx), scanAckRecord, text, args...)
	return out, s.wrapErr(err)
}

func scanAckRecord(rows *sql.Rows) (awareness.AckRecord, error) {
	var (
		r                       awareness.AckRecord
		watcherAgent, form      string
		opened, acked           int64
		follow                  sql.NullInt64
		principal, role, client sql.NullString
	)
	err := rows.Scan(&r.ID, &r.Watcher, &watcherAgent, &r.Target.AgentID, &r.Target.Key, &r.ChangesSince, &r.NotifiedVersion,
		&opened, &acked, &form, &follow, &principal, &role, &r.By.Transport, &client)
	if err != nil {
		return r, err
	}
	r.OpenedAt, r.AckedAt, r.Form, r.FollowUp = fromNanos(opened), fromNanos(acked), awareness.AckForm(form), follow.Int64
	r.By.Principal, r.By.Role, r.By.Client = principal.String, role.String, client.String
	return r, nil
}

// Spawns returns each session's parent as its earliest retained child_spawned event
// names it (an agent-qualified actor), read through the partial index events_spawns.
func (s *Store) Spawns(ctx context.Context, agentID string) ([]awareness.Spawn, error) {
	if s.closed.Load() {
		return nil, s.wrapErr(errClosed)
	}
	text := "SELECT agent_id, session_key, actor_id FROM events WHERE kind = 'child_spawned' AND actor_id LIKE 'agent:%'"
	var args []any
	if agentID != "" {
		text += " AND agent_id = ?"
		args = append(args, agentID)
	}
	text += " ORDER BY agent_id, session_key, sequence"
	all, err := scanAll(s.reader(ctx), func(rows *sql.Rows) (awareness.Spawn, error) {
		var sp awareness.Spawn
		err := rows.Scan(&sp.Child.AgentID, &sp.Child.Key, &sp.Parent)
		return sp, err
	}, text, args...)
	if err != nil {
		return nil, s.wrapErr(err)
	}
	// The first row of each session is its earliest.
	return slices.CompactFunc(all, func(a, b awareness.Spawn) bool { return a.Child == b.Child }), nil
}

// pruneAckLog deletes the records acknowledged before cutoff (when set) and the
// oldest beyond maxRows (when positive), in t.
func pruneAckLog(t *tx, cutoff *int64, maxRows int) (int64, error) {
	var deleted int64
	if cutoff != nil {
		n, err := t.exec("DELETE FROM ack_log WHERE acked_at < ?", *cutoff)
		if err != nil {
			return 0, err
		}
		deleted += n
	}
	if maxRows > 0 {
		// The subquery is NULL, and nothing goes, while maxRows or fewer rows remain.
		n, err := t.exec("DELETE FROM ack_log WHERE id <= (SELECT id FROM ack_log ORDER BY id DESC LIMIT 1 OFFSET ?)", maxRows)
		if err != nil {
			return 0, err
		}
		deleted += n
	}
	return deleted, nil
}
