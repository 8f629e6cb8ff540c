-- A process start reads no more than it needs (NTC-5, WAT-5).
--
-- The startup sweep looks for cursors with M > N == L, which no committed write leaves
-- behind, to open their notices. It used to rewrite every cursor with M > L (N := M),
-- in one transaction that locked every pending row and scanned the table several
-- times. Now it reads cursors_unopened, which holds only those rows (none, normally),
-- in pages in the primary key's order. Built CONCURRENTLY so that the processes still
-- serving during a rolling upgrade keep writing cursors meanwhile.
--
-- Cursor expiry reads the whole table (there is no index on updated_at, see 00003).
-- meta.last_expiry_at is when any process last ran it, so that a pruner pass skips it
-- when it ran recently (RetentionPolicy.ExpireEvery): a start beside serving processes
-- scans nothing, and P processes each pruning every interval expire cursors about once
-- per interval, not once per process.

-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY IF NOT EXISTS cursors_unopened ON cursors (watcher_key, target_agent_id, target_key)
    WHERE n = l AND m > n;
ALTER TABLE meta ADD COLUMN IF NOT EXISTS last_expiry_at BIGINT;

-- +goose Down
ALTER TABLE meta DROP COLUMN IF EXISTS last_expiry_at;
DROP INDEX CONCURRENTLY IF EXISTS cursors_unopened;
