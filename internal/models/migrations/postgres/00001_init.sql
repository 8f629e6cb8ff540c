-- Initial schema, PostgreSQL twin of migrations/sqlite/00001_init.sql: same tables,
-- columns and indexes. Every time is BIGINT unix nanoseconds UTC. Keys use the "C"
-- collation so that ordering and prefix ranges compare bytes (code points), as SQLite's
-- BINARY collation does. Later migrations add upstream links and own-prompt hashes.

-- +goose Up

CREATE TABLE sessions (
    agent_id                      TEXT COLLATE "C" NOT NULL,
    session_key                   TEXT COLLATE "C" NOT NULL,
    kind                          TEXT    NOT NULL,
    state_version                 BIGINT  NOT NULL DEFAULT 0,
    pruned_through                BIGINT  NOT NULL DEFAULT 0,
    compaction_count              BIGINT  NOT NULL DEFAULT 0,
    registered                    BOOLEAN NOT NULL DEFAULT FALSE,
    session_id                    TEXT,
    parent_session_key            TEXT,
    chat_type                     TEXT,
    provider                      TEXT,
    display_name                  TEXT,
    input_tokens                  BIGINT,
    output_tokens                 BIGINT,
    total_tokens                  BIGINT,
    context_tokens                BIGINT,
    memory_flush_at               BIGINT,
    memory_flush_compaction_count BIGINT,
    extra_json                    TEXT,
    created_at                    BIGINT  NOT NULL,
    updated_at                    BIGINT  NOT NULL,
    deleted_at                    BIGINT,
    PRIMARY KEY (agent_id, session_key),
    CHECK (state_version >= 0),
    CHECK (pruned_through >= 0 AND pruned_through <= state_version)
);

CREATE TABLE events (
    agent_id     TEXT COLLATE "C" NOT NULL,
    session_key  TEXT COLLATE "C" NOT NULL,
    sequence     BIGINT NOT NULL,
    kind         TEXT   NOT NULL,
    actor_type   TEXT   NOT NULL,
    actor_id     TEXT,
    summary      TEXT   NOT NULL,
    occurred_at  BIGINT NOT NULL,
    run_id       TEXT,
    payload_json TEXT,
    dedupe_key   TEXT,
    recorded_at  BIGINT NOT NULL,
    PRIMARY KEY (agent_id, session_key, sequence),
    FOREIGN KEY (agent_id, session_key) REFERENCES sessions (agent_id, session_key),
    CHECK (sequence > 0)
);

CREATE UNIQUE INDEX events_dedupe ON events (agent_id, session_key, dedupe_key)
    WHERE dedupe_key IS NOT NULL;
CREATE INDEX events_occurred_at ON events (occurred_at);
-- PostgreSQL indexes are not clustered: spell out the full row-cap order.
CREATE INDEX events_recorded_at ON events (recorded_at, agent_id, session_key, sequence);

CREATE TABLE cursors (
    watcher_key     TEXT COLLATE "C" NOT NULL,
    target_agent_id TEXT COLLATE "C" NOT NULL,
    target_key      TEXT COLLATE "C" NOT NULL,
    l               BIGINT NOT NULL,
    n               BIGINT NOT NULL,
    m               BIGINT NOT NULL,
    opened_at       BIGINT,
    updated_at      BIGINT NOT NULL,
    PRIMARY KEY (watcher_key, target_agent_id, target_key),
    CHECK (0 <= l AND l <= n AND n <= m)
);

CREATE INDEX cursors_target ON cursors (target_agent_id, target_key);
CREATE INDEX cursors_pending ON cursors (opened_at, watcher_key, target_agent_id, target_key) WHERE n > l;
CREATE INDEX cursors_updated_at ON cursors (updated_at);

CREATE TABLE meta (
    id            INTEGER PRIMARY KEY CHECK (id = 1),
    last_prune_at BIGINT
);
INSERT INTO meta (id) VALUES (1);

-- +goose Down
DROP TABLE meta;
DROP TABLE cursors;
DROP TABLE events;
DROP TABLE sessions;
