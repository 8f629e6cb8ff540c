-- A notifying append opens its notices in place (P2, issue 31).
--
-- Opening a notice writes n, m, opened_at and updated_at of each synced cursor of the
-- target. cursors_pending (opened_at, predicate n > l) and cursors_unopened (predicate
-- n = l AND m > n) name those columns, so every opened row was a new tuple with an
-- entry in each of the table's indexes: at 10,000 watchers about 100 ms of the
-- server's CPU. Without them no index names a column the append writes, and PostgreSQL
-- updates each row on its page (a heap-only tuple, no index entry); the fill factor
-- leaves a page room for a new version of each of its rows.
--
-- What they served now reads the table: the list and count of every watcher's pending
-- notices (a watcher's own go through the primary key), and the startup sweep of the
-- cursors with M > N == L, which no committed write leaves behind (one sequential
-- scan per start when there are none). SQLite keeps both indexes: it rewrites an
-- index entry only when that index's columns change, and has no tuple versions.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS cursors_pending;
DROP INDEX CONCURRENTLY IF EXISTS cursors_unopened;
ALTER TABLE cursors SET (fillfactor = 50);

-- +goose Down
ALTER TABLE cursors SET (fillfactor = 80);
CREATE INDEX CONCURRENTLY IF NOT EXISTS cursors_unopened ON cursors (watcher_key, target_agent_id, target_key)
    WHERE n = l AND m > n;
CREATE INDEX CONCURRENTLY IF NOT EXISTS cursors_pending ON cursors (opened_at, watcher_key, target_agent_id, target_key)
    WHERE n > l;
