-- A process start reads no more than it needs (NTC-5, WAT-5).
--
-- The startup sweep looks for cursors with M > N == L, which no committed write leaves
-- behind, to open their notices. It used to rewrite every cursor with M > L (N := M)
-- and scan the table to find them. Now it reads cursors_unopened, which holds only
-- those rows (none, normally: an opened or acknowledged notice adds no entry, so no
-- write-ahead log), in pages in the cursors' key order.
--
-- Cursor expiry reads the whole table (there is no index on updated_at, see 00003).
-- meta.last_expiry_at is when it last ran, so that a pruner pass skips it when it ran
-- recently (RetentionPolicy.ExpireEvery: a restart soon after the last prune).

-- +goose Up
CREATE INDEX cursors_unopened ON cursors (watcher_key, target_agent_id, target_key) WHERE n = l AND m > n;
ALTER TABLE meta ADD COLUMN last_expiry_at INTEGER;

-- +goose Down
ALTER TABLE meta DROP COLUMN last_expiry_at;
DROP INDEX cursors_unopened;
