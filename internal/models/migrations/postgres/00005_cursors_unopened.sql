-- The startup sweep (NTC-5) looks for cursors with M > N == L, which no committed
-- write leaves behind, to open their notices. It used to rewrite every cursor with
-- M > L (N := M), in one transaction that locked every pending row and scanned the
-- table several times. Now it reads this index, which holds only those rows (none,
-- normally), in pages by the primary key's order. Built CONCURRENTLY so that the
-- processes still serving during a rolling upgrade keep writing cursors meanwhile.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS cursors_unopened ON cursors (watcher_key, target_agent_id, target_key)
    WHERE n = l AND m > n;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS cursors_unopened;
