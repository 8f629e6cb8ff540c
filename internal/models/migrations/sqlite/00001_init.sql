-- Initial schema: heads + registry, the signal log, watcher cursors, bookkeeping.
-- Every time is INTEGER unix nanoseconds UTC. Booleans are 0/1.
-- Later migrations add upstream links and own-prompt hashes (UPS-1..5).

-- +goose Up

-- One row per session: the durable head (SIG-3: state_version, pruned_through; never
-- lowered, survives pruning and deletion) and the registry entry (REG-1). The row is
-- never deleted; DeleteSession clears the registry columns and sets deleted_at.
CREATE TABLE sessions (
    agent_id                      TEXT    NOT NULL,
    session_key                   TEXT    NOT NULL,
    kind                          TEXT    NOT NULL,
    state_version                 INTEGER NOT NULL DEFAULT 0,
    pruned_through                INTEGER NOT NULL DEFAULT 0,
    compaction_count              INTEGER NOT NULL DEFAULT 0,
    registered                    INTEGER NOT NULL DEFAULT 0,
    session_id                    TEXT,
    parent_session_key            TEXT,
    chat_type                     TEXT,
    provider                      TEXT,
    display_name                  TEXT,
    input_tokens                  INTEGER,
    output_tokens                 INTEGER,
    total_tokens                  INTEGER,
    context_tokens                INTEGER,
    memory_flush_at               INTEGER,
    memory_flush_compaction_count INTEGER,
    extra_json                    TEXT,
    created_at                    INTEGER NOT NULL,
    updated_at                    INTEGER NOT NULL,
    deleted_at                    INTEGER,
    PRIMARY KEY (agent_id, session_key),
    CHECK (state_version >= 0),
    CHECK (pruned_through >= 0 AND pruned_through <= state_version),
    CHECK (registered IN (0, 1))
) WITHOUT ROWID;

-- The signal log (SIG-2). Clustered by (session, sequence) so that reconciliation
-- reads one contiguous range. Sequences are dense per session (SIG-3).
CREATE TABLE events (
    agent_id     TEXT    NOT NULL,
    session_key  TEXT    NOT NULL,
    sequence     INTEGER NOT NULL,
    kind         TEXT    NOT NULL,
    actor_type   TEXT    NOT NULL,
    actor_id     TEXT,
    summary      TEXT    NOT NULL,
    occurred_at  INTEGER NOT NULL,
    run_id       TEXT,
    payload_json TEXT,
    dedupe_key   TEXT,
    recorded_at  INTEGER NOT NULL,
    PRIMARY KEY (agent_id, session_key, sequence),
    FOREIGN KEY (agent_id, session_key) REFERENCES sessions (agent_id, session_key),
    CHECK (sequence > 0)
) WITHOUT ROWID;

-- SIG-4: one event per (session, dedupe key).
CREATE UNIQUE INDEX events_dedupe ON events (agent_id, session_key, dedupe_key)
    WHERE dedupe_key IS NOT NULL;
-- SIG-6 age retention (occurred_at) and Stats.OldestEvent.
CREATE INDEX events_occurred_at ON events (occurred_at);
-- SIG-6 row cap: oldest first by (recorded_at, agent_id, session_key, sequence); the
-- primary key columns ride along in the index of a WITHOUT ROWID table.
CREATE INDEX events_recorded_at ON events (recorded_at);

-- One cursor per (watcher, target) (WAT-1). Invariant 0 <= l <= n <= m.
-- opened_at is NULL when no notice is pending.
CREATE TABLE cursors (
    watcher_key     TEXT    NOT NULL,
    target_agent_id TEXT    NOT NULL,
    target_key      TEXT    NOT NULL,
    l               INTEGER NOT NULL,
    n               INTEGER NOT NULL,
    m               INTEGER NOT NULL,
    opened_at       INTEGER,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (watcher_key, target_agent_id, target_key),
    CHECK (0 <= l AND l <= n AND n <= m)
) WITHOUT ROWID;

-- NTC-2 fan-out of an append, and deletion of a target (WAT-5).
CREATE INDEX cursors_target ON cursors (target_agent_id, target_key);
-- Pending notices in delivery order (NTC-5, NTC-7).
CREATE INDEX cursors_pending ON cursors (opened_at) WHERE n > l;
-- Cursor expiry (WAT-5).
CREATE INDEX cursors_updated_at ON cursors (updated_at);

-- Single-row bookkeeping.
CREATE TABLE meta (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    last_prune_at INTEGER
);
INSERT INTO meta (id) VALUES (1);

-- +goose Down
DROP TABLE meta;
DROP TABLE cursors;
DROP TABLE events;
DROP TABLE sessions;
