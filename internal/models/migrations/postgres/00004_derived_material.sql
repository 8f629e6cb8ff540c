-- PostgreSQL twin of migrations/sqlite/00004_derived_material.sql: M is derived from
-- the target's head, so a notifying append writes only the cursors whose notice opens
-- (and the head row), not every cursor on the target.

-- +goose Up
ALTER TABLE sessions
    ADD COLUMN material_seq       BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN material_actor     TEXT COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN material_at        BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN material_other_seq BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN material_other_at  BIGINT NOT NULL DEFAULT 0;

-- +goose Down
UPDATE cursors SET
    m = CASE WHEN cursors.watcher_key = h.material_actor THEN h.material_other_seq ELSE h.material_seq END,
    updated_at = CASE WHEN cursors.watcher_key = h.material_actor THEN h.material_other_at ELSE h.material_at END
FROM sessions h
WHERE h.agent_id = cursors.target_agent_id AND h.session_key = cursors.target_key
  AND cursors.watcher_key <> cursors.target_key AND substr(cursors.watcher_key, 1, 6) = 'agent:'
  AND CASE WHEN cursors.watcher_key = h.material_actor THEN h.material_other_seq ELSE h.material_seq END > cursors.m;
ALTER TABLE sessions
    DROP COLUMN material_other_at,
    DROP COLUMN material_other_seq,
    DROP COLUMN material_at,
    DROP COLUMN material_actor,
    DROP COLUMN material_seq;
