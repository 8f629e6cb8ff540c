package models

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

var _ awareness.RegistryStore = (*Store)(nil)

// registryChunk bounds the sessions of one statement of UpsertSessions: 20
// parameters a row stays under SQLite's 32766 and PostgreSQL's 65535.
const registryChunk = 500

// registryWriteColumns are the columns the final statement of UpsertSessions writes,
// in order; never the head columns state_version and pruned_through.
const registryWriteColumns = "agent_id, session_key, kind, registered, compaction_count, " +
	"session_id, parent_session_key, chat_type, provider, display_name, input_tokens, output_tokens, " +
	"total_tokens, context_tokens, memory_flush_at, memory_flush_compaction_count, extra_json, " +
	"created_at, updated_at, deleted_at"

// UpsertSessions applies registry writes in order in one write transaction (REG-1,
// REG-2) and returns the session after each write. Per chunk of sessions, in agent,
// key order, it runs three statements: create the missing rows, where RETURNING tells
// which rows are new, since a registry entry and a head share the row; read every row
// under the head lock, FOR UPDATE on PostgreSQL and the immediate transaction on
// SQLite; then, after merging each write with awareness.MergeSessionWrite, write the
// registry columns back with one multi-row INSERT … ON CONFLICT DO UPDATE.
func (s *Store) UpsertSessions(ctx context.Context, ws []awareness.SessionWrite, now time.Time) ([]awareness.Session, error) {
	if err := awareness.CheckSessionWrites(ws, now); err != nil {
		return nil, err
	}
	if len(ws) == 0 {
		return nil, nil
	}
	now = normTime(now)
	refs := make([]awareness.SessionRef, 0, len(ws))
	seen := make(map[awareness.SessionRef]bool, len(ws))
	for _, w := range ws {
		if !seen[w.Ref] {
			seen[w.Ref] = true
			refs = append(refs, w.Ref)
		}
	}
	slices.SortFunc(refs, func(a, b awareness.SessionRef) int {
		return cmp.Or(strings.Compare(a.AgentID, b.AgentID), strings.Compare(a.Key, b.Key))
	})
	var out []awareness.Session
	err := s.write(ctx, "UpsertSessions", func(t *tx) error {
		rows := make(map[awareness.SessionRef]*regRow, len(refs))
		for c := range slices.Chunk(refs, registryChunk) {
			if err := s.lockSessionRows(t, c, now, rows); err != nil {
				return err
			}
		}
		out = make([]awareness.Session, 0, len(ws))
		for _, w := range ws {
			sess, err := applyWrite(rows[w.Ref], w, now)
			if err != nil {
				return err
			}
			out = append(out, sess)
		}
		for c := range slices.Chunk(refs, registryChunk) {
			if err := writeSessionRows(t, c, rows); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// regRow is a session row being merged, and whether it starts anew: created by this
// call, or revived from deletion.
type regRow struct {
	SessionRow
	fresh bool
}

// lockSessionRows creates the missing rows of refs, then reads every row of refs
// under the head lock into rows.
func (s *Store) lockSessionRows(t *tx, refs []awareness.SessionRef, now time.Time, rows map[awareness.SessionRef]*regRow) error {
	var (
		values strings.Builder
		args   = make([]any, 0, 5*len(refs))
		where  strings.Builder
		wargs  = make([]any, 0, 2*len(refs))
	)
	byAgent := map[string][]string{}
	var agents []string
	for i, r := range refs {
		if i > 0 {
			values.WriteString(", ")
		}
		values.WriteString("(?, ?, ?, ?, ?)")
		args = append(args, r.AgentID, r.Key, string(awareness.ClassifyKey(r.Key)), nanos(now), nanos(now))
		if _, ok := byAgent[r.AgentID]; !ok {
			agents = append(agents, r.AgentID)
		}
		byAgent[r.AgentID] = append(byAgent[r.AgentID], r.Key)
	}
	created, err := scanAll(t, scanRef, "INSERT INTO sessions (agent_id, session_key, kind, created_at, updated_at) VALUES "+
		values.String()+" ON CONFLICT (agent_id, session_key) DO NOTHING RETURNING agent_id, session_key", args...)
	if err != nil {
		return err
	}
	for i, a := range agents {
		if i > 0 {
			where.WriteString(" OR ")
		}
		where.WriteString("(agent_id = ? AND session_key IN ?)")
		wargs = append(wargs, a, byAgent[a])
	}
	found, err := scanAll(t, scanSessionRow, "SELECT "+sessionColumns+" FROM sessions WHERE "+where.String()+
		" ORDER BY agent_id, session_key"+s.d.sql.forUpdate, wargs...)
	if err != nil {
		return err
	}
	if len(found) != len(refs) {
		return fmt.Errorf("registry: read %d session rows for %d sessions", len(found), len(refs))
	}
	for _, f := range found {
		rows[awareness.SessionRef{AgentID: f.AgentID, Key: f.SessionKey}] = &regRow{SessionRow: f}
	}
	for _, c := range created {
		if r := rows[c]; r != nil {
			r.fresh = true
		}
	}
	return nil
}

// applyWrite merges one write into its row with awareness.MergeSessionWrite and
// returns the session as it will be written.
func applyWrite(r *regRow, w awareness.SessionWrite, now time.Time) (awareness.Session, error) {
	cur, err := r.session()
	if err != nil {
		return awareness.Session{}, err
	}
	next, err := awareness.MergeSessionWrite(awareness.RegistryRow{Session: cur, New: r.fresh, Deleted: r.DeletedAt != nil}, w, now)
	if err != nil {
		return awareness.Session{}, err
	}
	if err := setRegistryColumns(&r.SessionRow, next.Session); err != nil {
		return awareness.Session{}, err
	}
	r.fresh = next.New
	return next.Session, nil
}

// setRegistryColumns sets the columns writeSessionRows writes from a merged session.
func setRegistryColumns(r *SessionRow, s awareness.Session) error {
	e := s.Entry
	r.Kind, r.Registered, r.CompactionCount = string(s.Kind), s.Registered, s.CompactionCount
	r.SessionID, r.ParentSessionKey, r.ChatType, r.Provider, r.DisplayName = e.SessionID, e.ParentSessionKey, e.ChatType, e.Provider, e.DisplayName
	r.InputTokens, r.OutputTokens, r.TotalTokens, r.ContextTokens = e.InputTokens, e.OutputTokens, e.TotalTokens, e.ContextTokens
	r.MemoryFlushAt, r.MemoryFlushCompactionCount, r.ExtraJSON = nil, e.MemoryFlushCompactionCount, nil
	if e.MemoryFlushAt != nil {
		n := nanos(*e.MemoryFlushAt)
		r.MemoryFlushAt = &n
	}
	if len(e.Extra) > 0 {
		b, err := json.Marshal(e.Extra)
		if err != nil {
			return fmt.Errorf("registry: encode extra: %w", err)
		}
		extra := string(b)
		r.ExtraJSON = &extra
	}
	r.CreatedAt, r.UpdatedAt, r.DeletedAt = nanos(s.CreatedAt), nanos(s.UpdatedAt), nil
	return nil
}

// writeSessionRows writes the registry columns of refs' rows back in one statement.
// Every row exists and is locked, so the INSERT always takes its ON CONFLICT branch;
// it is the portable multi-row UPDATE.
func writeSessionRows(t *tx, refs []awareness.SessionRef, rows map[awareness.SessionRef]*regRow) error {
	var values strings.Builder
	args := make([]any, 0, 20*len(refs))
	for i, ref := range refs {
		r := rows[ref]
		if i > 0 {
			values.WriteString(", ")
		}
		values.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
		args = append(args, r.AgentID, r.SessionKey, r.Kind, r.Registered, r.CompactionCount,
			r.SessionID, r.ParentSessionKey, r.ChatType, r.Provider, r.DisplayName,
			r.InputTokens, r.OutputTokens, r.TotalTokens, r.ContextTokens,
			r.MemoryFlushAt, r.MemoryFlushCompactionCount, r.ExtraJSON,
			r.CreatedAt, r.UpdatedAt, r.DeletedAt)
	}
	_, err := t.exec("INSERT INTO sessions ("+registryWriteColumns+") VALUES "+values.String()+`
ON CONFLICT (agent_id, session_key) DO UPDATE SET
    kind = excluded.kind, registered = excluded.registered, compaction_count = excluded.compaction_count,
    session_id = excluded.session_id, parent_session_key = excluded.parent_session_key,
    chat_type = excluded.chat_type, provider = excluded.provider, display_name = excluded.display_name,
    input_tokens = excluded.input_tokens, output_tokens = excluded.output_tokens,
    total_tokens = excluded.total_tokens, context_tokens = excluded.context_tokens,
    memory_flush_at = excluded.memory_flush_at, memory_flush_compaction_count = excluded.memory_flush_compaction_count,
    extra_json = excluded.extra_json, created_at = excluded.created_at, updated_at = excluded.updated_at,
    deleted_at = excluded.deleted_at`, args...)
	return err
}

// RecordMemoryFlush sets memory_flush_at = now and memory_flush_compaction_count =
// compaction_count of a registered, live session in one statement, so that the
// count recorded is the one at the flush even against concurrent compactions (REG-3).
func (s *Store) RecordMemoryFlush(ctx context.Context, ref awareness.SessionRef, now time.Time) (awareness.Session, bool, error) {
	if err := checkNow("RecordMemoryFlush", now); err != nil {
		return awareness.Session{}, false, err
	}
	now = normTime(now)
	var (
		sess awareness.Session
		ok   bool
	)
	err := s.write(ctx, "RecordMemoryFlush", func(t *tx) error {
		ok = false
		n, err := t.exec("UPDATE sessions SET memory_flush_at = ?, memory_flush_compaction_count = compaction_count "+
			"WHERE agent_id = ? AND session_key = ? AND registered = ? AND deleted_at IS NULL",
			nanos(now), ref.AgentID, ref.Key, true)
		if err != nil || n == 0 {
			return err
		}
		rows, err := scanAll(t, scanSession, "SELECT "+sessionColumns+" FROM sessions WHERE agent_id = ? AND session_key = ?",
			ref.AgentID, ref.Key)
		if err != nil {
			return err
		}
		if len(rows) != 1 {
			return fmt.Errorf("registry: session row of %s/%s vanished", ref.AgentID, ref.Key)
		}
		sess, ok = rows[0], true
		return nil
	})
	if err != nil {
		return awareness.Session{}, false, err
	}
	return sess, ok, nil
}
