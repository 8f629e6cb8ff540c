-- The startup sweep (NTC-5) looks for cursors with M > N == L, which no committed
-- write leaves behind, to open their notices. It used to rewrite every cursor with
-- M > L (N := M) and scan the table to find them. Now it reads this index, which holds
-- only those rows (none, normally: an opened or acknowledged notice adds no entry,
-- so no write-ahead log), in pages in the cursors' key order.

-- +goose Up
CREATE INDEX cursors_unopened ON cursors (watcher_key, target_agent_id, target_key) WHERE n = l AND m > n;

-- +goose Down
DROP INDEX cursors_unopened;
