-- Lifecycle, generations and kind selection (LIF-1, LIF-2, LIF-3).
--
-- sessions.generation is the session's incarnation: 1, one more per reset event.
-- cursors.target_gen is the target's generation the cursor follows (a reset of the
-- target moves it), cursors.watcher_gen the watcher's generation that holds it (a
-- reset of the watcher deletes its cursors, so it never changes). cursors.retired
-- marks the cursors of a deleted target: they take no further event, and go once
-- their pending notice (the deletion's) is acknowledged. cursors.kinds is the
-- watch's selection of kinds, comma-separated in table order; '' is the default.
-- Every existing row is generation 1, not retired, with the default selection.
-- cursors_selecting finds a target's cursors with a selection of their own, which a
-- notifying append applies one by one (the others it moves with one statement); a
-- partial index, so the other cursors' writes never touch it.

-- +goose Up
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS generation BIGINT NOT NULL DEFAULT 1;
ALTER TABLE cursors ADD COLUMN IF NOT EXISTS target_gen BIGINT NOT NULL DEFAULT 1;
ALTER TABLE cursors ADD COLUMN IF NOT EXISTS watcher_gen BIGINT NOT NULL DEFAULT 1;
ALTER TABLE cursors ADD COLUMN IF NOT EXISTS retired INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cursors ADD COLUMN IF NOT EXISTS kinds TEXT NOT NULL DEFAULT '';
CREATE INDEX IF NOT EXISTS cursors_selecting ON cursors (target_agent_id, target_key) WHERE kinds <> '';

-- +goose Down
DROP INDEX IF EXISTS cursors_selecting;
ALTER TABLE cursors DROP COLUMN IF EXISTS kinds;
ALTER TABLE cursors DROP COLUMN IF EXISTS retired;
ALTER TABLE cursors DROP COLUMN IF EXISTS watcher_gen;
ALTER TABLE cursors DROP COLUMN IF EXISTS target_gen;
ALTER TABLE sessions DROP COLUMN IF EXISTS generation;
