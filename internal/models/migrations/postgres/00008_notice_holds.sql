-- PostgreSQL twin of migrations/sqlite/00008_notice_holds.sql: notice holds (RDL-1,
-- RDL-2).

-- +goose Up
CREATE TABLE notice_holds (
    watcher_key     TEXT COLLATE "C" NOT NULL,
    target_agent_id TEXT COLLATE "C" NOT NULL,
    target_key      TEXT COLLATE "C" NOT NULL,
    max_redeliver   INTEGER NOT NULL DEFAULT 1,
    n               BIGINT  NOT NULL DEFAULT 0,
    drained_at      BIGINT,
    turns           INTEGER NOT NULL DEFAULT 0,
    redeliveries    INTEGER NOT NULL DEFAULT 0,
    deliveries      INTEGER NOT NULL DEFAULT 0,
    snoozed_until   BIGINT,
    dismissed       BIGINT  NOT NULL DEFAULT 0,
    due_at          BIGINT,
    PRIMARY KEY (watcher_key, target_agent_id, target_key),
    CHECK (max_redeliver >= 0 AND n >= 0 AND turns >= 0 AND redeliveries >= 0 AND deliveries >= 0)
);
CREATE INDEX holds_due ON notice_holds (due_at) WHERE due_at IS NOT NULL;

-- +goose Down
DROP INDEX holds_due;
DROP TABLE notice_holds;
