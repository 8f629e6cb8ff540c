-- Notice holds (RDL-1, RDL-2): per (watcher, target), the watch's max_redeliver and
-- what happened to the pair's pending notice beyond the cursor: drained (drained_at,
-- turns since), redelivered (redeliveries, deliveries), snoozed (snoozed_until), the
-- last one dismissed. The state applies to the notice whose N is n (0: none); a new
-- notice of the pair has a larger N, so a hold never outlives its notice. due_at is
-- when the service's hold poll must look at the row again (a snooze ends, a drain's
-- time bound passes); holds_due indexes only the rows that have one.

-- +goose Up
CREATE TABLE notice_holds (
    watcher_key     TEXT    NOT NULL,
    target_agent_id TEXT    NOT NULL,
    target_key      TEXT    NOT NULL,
    max_redeliver   INTEGER NOT NULL DEFAULT 1,
    n               INTEGER NOT NULL DEFAULT 0,
    drained_at      INTEGER,
    turns           INTEGER NOT NULL DEFAULT 0,
    redeliveries    INTEGER NOT NULL DEFAULT 0,
    deliveries      INTEGER NOT NULL DEFAULT 0,
    snoozed_until   INTEGER,
    dismissed       INTEGER NOT NULL DEFAULT 0,
    due_at          INTEGER,
    PRIMARY KEY (watcher_key, target_agent_id, target_key),
    CHECK (max_redeliver >= 0 AND n >= 0 AND turns >= 0 AND redeliveries >= 0 AND deliveries >= 0)
) WITHOUT ROWID;
CREATE INDEX holds_due ON notice_holds (due_at) WHERE due_at IS NOT NULL;

-- +goose Down
DROP INDEX holds_due;
DROP TABLE notice_holds;
