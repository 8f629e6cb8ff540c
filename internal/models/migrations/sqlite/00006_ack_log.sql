-- The acknowledgement history: one row per acknowledged notice (NTC-3), written by
-- Store.Ack in the acknowledgement's own transaction, with who acknowledged it (the
-- token's name and role, NULL without authentication) and from which client (the
-- transport, and the client's name: a header or its User-Agent, at most 128 bytes).
-- Pruned with the log's retention (--retention, --max-rows); a deleted session's rows
-- go with it. id orders the history (a rowid: later rows have larger ids).
--
-- events_spawns: the child_spawned events, read for the lineage of the session tree
-- (Store.Spawns); a partial index, so no other append writes it.

-- +goose Up
CREATE TABLE ack_log (
    id               INTEGER PRIMARY KEY,
    watcher_key      TEXT    NOT NULL,
    watcher_agent_id TEXT    NOT NULL,
    target_agent_id  TEXT    NOT NULL,
    target_key       TEXT    NOT NULL,
    l                INTEGER NOT NULL,
    n                INTEGER NOT NULL,
    opened_at        INTEGER NOT NULL,
    acked_at         INTEGER NOT NULL,
    form             TEXT    NOT NULL,
    follow_up        INTEGER,
    principal        TEXT,
    role             TEXT,
    transport        TEXT    NOT NULL,
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
