package models

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/awareness/awareness/internal/awareness"
)

// SessionRow is a row of the sessions table: the durable head of a session (SIG-3) and
// its registry entry (REG-1) in one row. Rows are never deleted: DeleteSession clears the
// registry columns and sets DeletedAt, and the head stays.
type SessionRow struct {
	AgentID                    string  `gorm:"column:agent_id;primaryKey"`
	SessionKey                 string  `gorm:"column:session_key;primaryKey"`
	Kind                       string  `gorm:"column:kind"`
	StateVersion               int64   `gorm:"column:state_version"`
	PrunedThrough              int64   `gorm:"column:pruned_through"`
	CompactionCount            int64   `gorm:"column:compaction_count"`
	Registered                 bool    `gorm:"column:registered"`
	SessionID                  *string `gorm:"column:session_id"`
	ParentSessionKey           *string `gorm:"column:parent_session_key"`
	ChatType                   *string `gorm:"column:chat_type"`
	Provider                   *string `gorm:"column:provider"`
	DisplayName                *string `gorm:"column:display_name"`
	InputTokens                *int64  `gorm:"column:input_tokens"`
	OutputTokens               *int64  `gorm:"column:output_tokens"`
	TotalTokens                *int64  `gorm:"column:total_tokens"`
	ContextTokens              *int64  `gorm:"column:context_tokens"`
	MemoryFlushAt              *int64  `gorm:"column:memory_flush_at"`
	MemoryFlushCompactionCount *int64  `gorm:"column:memory_flush_compaction_count"`
	ExtraJSON                  *string `gorm:"column:extra_json"`
	CreatedAt                  int64   `gorm:"column:created_at;autoCreateTime:false"`
	UpdatedAt                  int64   `gorm:"column:updated_at;autoUpdateTime:false"`
	DeletedAt                  *int64  `gorm:"column:deleted_at"`
}

// TableName implements gorm's tabler.
func (SessionRow) TableName() string { return "sessions" }

// EventRow is a row of the events table, one entry of a session's signal log (SIG-2).
type EventRow struct {
	AgentID     string  `gorm:"column:agent_id;primaryKey"`
	SessionKey  string  `gorm:"column:session_key;primaryKey"`
	Sequence    int64   `gorm:"column:sequence;primaryKey;autoIncrement:false"`
	Kind        string  `gorm:"column:kind"`
	ActorType   string  `gorm:"column:actor_type"`
	ActorID     *string `gorm:"column:actor_id"`
	Summary     string  `gorm:"column:summary"`
	OccurredAt  int64   `gorm:"column:occurred_at"`
	RunID       *string `gorm:"column:run_id"`
	PayloadJSON *string `gorm:"column:payload_json"`
	DedupeKey   *string `gorm:"column:dedupe_key"`
	RecordedAt  int64   `gorm:"column:recorded_at"`
}

// TableName implements gorm's tabler.
func (EventRow) TableName() string { return "events" }

// CursorRow is a row of the cursors table: one watcher's position on one target (WAT-1).
// OpenedAt is NULL when no notice is pending.
type CursorRow struct {
	WatcherKey    string `gorm:"column:watcher_key;primaryKey"`
	TargetAgentID string `gorm:"column:target_agent_id;primaryKey"`
	TargetKey     string `gorm:"column:target_key;primaryKey"`
	L             int64  `gorm:"column:l"`
	N             int64  `gorm:"column:n"`
	M             int64  `gorm:"column:m"`
	OpenedAt      *int64 `gorm:"column:opened_at"`
	UpdatedAt     int64  `gorm:"column:updated_at;autoUpdateTime:false"`
	// TargetGen and WatcherGen are the generations of the pair (LIF-2), Retired marks
	// a deleted target's cursor (LIF-1), Kinds the watch's selection (LIF-3; "" the
	// default).
	TargetGen  int64  `gorm:"column:target_gen"`
	WatcherGen int64  `gorm:"column:watcher_gen"`
	Retired    int64  `gorm:"column:retired"`
	Kinds      string `gorm:"column:kinds"`
}

// TableName implements gorm's tabler.
func (CursorRow) TableName() string { return "cursors" }

// MetaRow is the single row of the meta table.
type MetaRow struct {
	ID          int64  `gorm:"column:id;primaryKey"`
	LastPruneAt *int64 `gorm:"column:last_prune_at"`
}

// TableName implements gorm's tabler.
func (MetaRow) TableName() string { return "meta" }

// Column lists, in the order of the row structs, for hand-written SQL, each with the
// scanner of its rows: a statement that selects (or returns) sessionColumns is read
// with scanSession, and so on. A column added to a list is added to its scanner.
const (
	sessionColumns = "agent_id, session_key, kind, state_version, pruned_through, compaction_count, registered, " +
		"session_id, parent_session_key, chat_type, provider, display_name, input_tokens, output_tokens, " +
		"total_tokens, context_tokens, memory_flush_at, memory_flush_compaction_count, extra_json, " +
		"created_at, updated_at, deleted_at"
	eventColumns = "agent_id, session_key, sequence, kind, actor_type, actor_id, summary, occurred_at, run_id, " +
		"payload_json, dedupe_key, recorded_at"
	cursorColumns = "watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at, " +
		"target_gen, watcher_gen, retired, kinds"
	// pageColumns are eventColumns without the session's key, for a page of one
	// session's log, read with a pageScanner.
	pageColumns = "sequence, kind, actor_type, actor_id, summary, occurred_at, run_id, payload_json, dedupe_key, recorded_at"
)

// scanRef scans a row of agent_id, session_key (a session's primary key).
func scanRef(rows *sql.Rows) (awareness.SessionRef, error) {
	var r awareness.SessionRef
	err := rows.Scan(&r.AgentID, &r.Key)
	return r, err
}

// columns returns the scan destinations of sessionColumns in r.
func (r *SessionRow) columns() []any {
	return []any{&r.AgentID, &r.SessionKey, &r.Kind, &r.StateVersion, &r.PrunedThrough, &r.CompactionCount,
		&r.Registered, &r.SessionID, &r.ParentSessionKey, &r.ChatType, &r.Provider, &r.DisplayName,
		&r.InputTokens, &r.OutputTokens, &r.TotalTokens, &r.ContextTokens, &r.MemoryFlushAt,
		&r.MemoryFlushCompactionCount, &r.ExtraJSON, &r.CreatedAt, &r.UpdatedAt, &r.DeletedAt}
}

// scanSessionRow scans a row of sessionColumns.
func scanSessionRow(rows *sql.Rows) (SessionRow, error) {
	var r SessionRow
	err := rows.Scan(r.columns()...)
	return r, err
}

// scanSession scans a row of sessionColumns into a session.
func scanSession(rows *sql.Rows) (awareness.Session, error) {
	r, err := scanSessionRow(rows)
	if err != nil {
		return awareness.Session{}, err
	}
	return r.session()
}

// scanEvent scans a row of eventColumns into an event.
func scanEvent(rows *sql.Rows) (awareness.Event, error) {
	var r EventRow
	if err := rows.Scan(&r.AgentID, &r.SessionKey, &r.Sequence, &r.Kind, &r.ActorType, &r.ActorID, &r.Summary,
		&r.OccurredAt, &r.RunID, &r.PayloadJSON, &r.DedupeKey, &r.RecordedAt); err != nil {
		return awareness.Event{}, err
	}
	return r.event()
}

// pageScanner scans rows of pageColumns, a page of the log of one session, into events
// of that session. It reuses one set of destinations for every row, its nullable
// columns are read without reflection (sql.NullString), and every event shares the
// ref's strings, so a row allocates what the driver hands over and no more: the page is
// the hot read of the service (REC-1). The row becomes an event as every event row
// does (EventRow.event).
type pageScanner struct {
	r                                  EventRow
	actorID, runID, payload, dedupeKey sql.NullString
	dest                               []any
}

func newPageScanner(ref awareness.SessionRef) *pageScanner {
	p := &pageScanner{r: EventRow{AgentID: ref.AgentID, SessionKey: ref.Key}}
	p.dest = []any{&p.r.Sequence, &p.r.Kind, &p.r.ActorType, &p.actorID, &p.r.Summary, &p.r.OccurredAt,
		&p.runID, &p.payload, &p.dedupeKey, &p.r.RecordedAt}
	return p
}

// scan scans the current row of rows into an event.
func (p *pageScanner) scan(rows *sql.Rows) (awareness.Event, error) {
	if err := rows.Scan(p.dest...); err != nil {
		return awareness.Event{}, err
	}
	p.r.ActorID, p.r.RunID, p.r.PayloadJSON, p.r.DedupeKey =
		stringOrNil(&p.actorID), stringOrNil(&p.runID), stringOrNil(&p.payload), stringOrNil(&p.dedupeKey)
	return p.r.event()
}

// stringOrNil points at s's string, or is nil when s is NULL.
func stringOrNil(s *sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

// scanCursor scans a row of cursorColumns into a cursor.
// columns returns the scan destinations of cursorColumns in r.
func (r *CursorRow) columns() []any {
	return []any{&r.WatcherKey, &r.TargetAgentID, &r.TargetKey, &r.L, &r.N, &r.M, &r.OpenedAt, &r.UpdatedAt,
		&r.TargetGen, &r.WatcherGen, &r.Retired, &r.Kinds}
}

func scanCursor(rows *sql.Rows) (awareness.Cursor, error) {
	var r CursorRow
	if err := rows.Scan(r.columns()...); err != nil {
		return awareness.Cursor{}, err
	}
	return r.cursor(), nil
}

// Times are stored as INTEGER unix nanoseconds UTC, so a round trip is exact (a notice's
// OpenedAt is part of its identity, Notice.ID). Values handed back to callers are
// normalised the same way (UTC, no monotonic reading), so what a write returns equals
// what a later read returns.

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// normTime returns t as it reads back from the database; the zero time stays zero.
func normTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return fromNanos(t.UnixNano())
}

func nullNanos(t time.Time) *int64 {
	if t.IsZero() {
		return nil
	}
	n := t.UnixNano()
	return &n
}

func fromNullNanos(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return fromNanos(*n)
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func derefString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (r EventRow) event() (awareness.Event, error) {
	ev := awareness.Event{
		Session:    awareness.SessionRef{AgentID: r.AgentID, Key: r.SessionKey},
		Sequence:   r.Sequence,
		Kind:       awareness.EventKind(r.Kind),
		ActorType:  awareness.ActorType(r.ActorType),
		ActorID:    derefString(r.ActorID),
		Summary:    r.Summary,
		OccurredAt: fromNanos(r.OccurredAt),
		RunID:      derefString(r.RunID),
		DedupeKey:  derefString(r.DedupeKey),
		RecordedAt: fromNanos(r.RecordedAt),
	}
	if r.PayloadJSON != nil {
		p, err := awareness.ParsePayload(*r.PayloadJSON)
		if err != nil {
			return awareness.Event{}, fmt.Errorf("event %s/%s#%d: decode payload: %w", r.AgentID, r.SessionKey, r.Sequence, err)
		}
		ev.Payload = p
	}
	return ev, nil
}

func eventRowOf(ev awareness.Event) (EventRow, error) {
	r := EventRow{
		AgentID:    ev.Session.AgentID,
		SessionKey: ev.Session.Key,
		Sequence:   ev.Sequence,
		Kind:       string(ev.Kind),
		ActorType:  string(ev.ActorType),
		ActorID:    nullString(ev.ActorID),
		Summary:    ev.Summary,
		OccurredAt: nanos(ev.OccurredAt),
		RunID:      nullString(ev.RunID),
		DedupeKey:  nullString(ev.DedupeKey),
		RecordedAt: nanos(ev.RecordedAt),
	}
	if !ev.Payload.IsZero() {
		b, err := json.Marshal(ev.Payload)
		if err != nil {
			return EventRow{}, fmt.Errorf("encode payload: %w", err)
		}
		s := string(b)
		r.PayloadJSON = &s
	}
	return r, nil
}

func (r CursorRow) cursor() awareness.Cursor {
	return awareness.Cursor{
		Watcher:   r.WatcherKey,
		Target:    awareness.SessionRef{AgentID: r.TargetAgentID, Key: r.TargetKey},
		L:         r.L,
		N:         r.N,
		M:         r.M,
		OpenedAt:  fromNullNanos(r.OpenedAt),
		UpdatedAt: fromNanos(r.UpdatedAt),

		TargetGeneration:  r.TargetGen,
		WatcherGeneration: r.WatcherGen,
		Retired:           r.Retired != 0,
		Kinds:             awareness.KindSelection(r.Kinds),
	}
}

func (r SessionRow) session() (awareness.Session, error) {
	s := awareness.Session{
		Ref:             awareness.SessionRef{AgentID: r.AgentID, Key: r.SessionKey},
		Kind:            awareness.SessionKind(r.Kind),
		StateVersion:    r.StateVersion,
		PrunedThrough:   r.PrunedThrough,
		CompactionCount: r.CompactionCount,
		Registered:      r.Registered,
		Entry: awareness.SessionEntry{
			SessionID:                  r.SessionID,
			ParentSessionKey:           r.ParentSessionKey,
			ChatType:                   r.ChatType,
			Provider:                   r.Provider,
			DisplayName:                r.DisplayName,
			InputTokens:                r.InputTokens,
			OutputTokens:               r.OutputTokens,
			TotalTokens:                r.TotalTokens,
			ContextTokens:              r.ContextTokens,
			MemoryFlushCompactionCount: r.MemoryFlushCompactionCount,
		},
		CreatedAt: fromNanos(r.CreatedAt),
		UpdatedAt: fromNanos(r.UpdatedAt),
	}
	if r.MemoryFlushAt != nil {
		t := fromNanos(*r.MemoryFlushAt)
		s.Entry.MemoryFlushAt = &t
	}
	if r.ExtraJSON != nil {
		if err := json.Unmarshal([]byte(*r.ExtraJSON), &s.Entry.Extra); err != nil {
			return awareness.Session{}, fmt.Errorf("session %s/%s: decode extra: %w", r.AgentID, r.SessionKey, err)
		}
	}
	return s, nil
}
