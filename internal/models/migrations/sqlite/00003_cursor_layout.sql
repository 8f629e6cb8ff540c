-- Cursor layout for the notice path (issue 19): a notifying append rewrites every cursor
-- on its target in one statement, so the table is clustered by target, and the rows one
-- notice touches sit on adjacent pages instead of one page per watcher. Ack, unwatch
-- and the pending reads of a watcher use cursors_watcher (the primary key columns ride
-- along in an index of a WITHOUT ROWID table, so it is in (watcher, target agent,
-- target key) order). cursors_target is the primary key's prefix now and goes.
-- cursors_updated_at goes too: every notice moved each of its rows' entries in it
-- (about a third of the write-ahead log of a notice), and its one reader is cursor
-- expiry in the periodic prune, which scans the table instead.

-- +goose Up
CREATE TABLE cursors_by_target (
    watcher_key     TEXT    NOT NULL,
    target_agent_id TEXT    NOT NULL,
    target_key      TEXT    NOT NULL,
    l               INTEGER NOT NULL,
    n               INTEGER NOT NULL,
    m               INTEGER NOT NULL,
    opened_at       INTEGER,
    updated_at      INTEGER NOT NULL,
    PRIMARY KEY (target_agent_id, target_key, watcher_key),
    CHECK (0 <= l AND l <= n AND n <= m)
) WITHOUT ROWID;
INSERT INTO cursors_by_target (watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at)
    SELECT watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at FROM cursors;
DROP TABLE cursors;
ALTER TABLE cursors_by_target RENAME TO cursors;
CREATE INDEX cursors_watcher ON cursors (watcher_key);
-- Pending notices in delivery order (NTC-5, NTC-7).
CREATE INDEX cursors_pending ON cursors (opened_at) WHERE n > l;

-- +goose Down
CREATE TABLE cursors_by_watcher (
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
INSERT INTO cursors_by_watcher (watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at)
    SELECT watcher_key, target_agent_id, target_key, l, n, m, opened_at, updated_at FROM cursors;
DROP TABLE cursors;
ALTER TABLE cursors_by_watcher RENAME TO cursors;
CREATE INDEX cursors_target ON cursors (target_agent_id, target_key);
CREATE INDEX cursors_pending ON cursors (opened_at) WHERE n > l;
CREATE INDEX cursors_updated_at ON cursors (updated_at);
