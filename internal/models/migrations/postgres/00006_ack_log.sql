-- PostgreSQL twin of migrations/sqlite/00006_ack_log.sql: the acknowledgement history
-- and the index of the child_spawned events. id is an identity column: rows written
-- later have larger ids (concurrent acknowledgements may commit in another order).

-- +goose Up
CREATE TABLE ack_log (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    watcher_key      TEXT COLLATE "C" NOT NULL,
    watcher_agent_id TEXT COLLATE "C" NOT NULL,
    target_agent_id  TEXT COLLATE "C" NOT NULL,
    target_key       TEXT COLLATE "C" NOT NULL,
    l                BIGINT NOT NULL,
    n                BIGINT NOT NULL,
    opened_at        BIGINT NOT NULL,
    acked_at         BIGINT NOT NULL,
    form             TEXT   NOT NULL,
    follow_up        BIGINT,
    principal        TEXT,
    role             TEXT,
    transport        TEXT   NOT NULL,
    client           TEXT,
    CHECK (0 <= l AND l < n),
    CHECK (form IN ('exact', 'targets', 'all'))
);
CREATE INDEX ack_log_watcher ON ack_log (watcher_key, id);
CREATE INDEX ack_log_watcher_agent ON ack_log (watcher_agent_id, id);
CREATE INDEX ack_log_target ON ack_log (target_agent_id, target_key, id);

CREATE INDEX events_spawns ON events (agent_id, session_key, sequence) WHERE kind = 'child_spawned';

-- +goose Down
DROP INDEX events_spawns;
DROP TABLE ack_log;
