-- Cursor layout for the notice path (issue 19). A notifying append rewrites every cursor
-- on its target in one statement. cursors_updated_at goes: every notice moved each of
-- its rows' entries in it, and its one reader is cursor expiry in the periodic prune,
-- which scans the table instead. Without it, an append that only moves M (the notice is
-- already pending) changes no indexed column, so PostgreSQL can update the row in place
-- on its page (a heap-only tuple: no index entries written); the fill factor leaves the
-- room on each page that this needs.

-- +goose Up
DROP INDEX cursors_updated_at;
ALTER TABLE cursors SET (fillfactor = 80);

-- +goose Down
ALTER TABLE cursors RESET (fillfactor);
CREATE INDEX cursors_updated_at ON cursors (updated_at);
