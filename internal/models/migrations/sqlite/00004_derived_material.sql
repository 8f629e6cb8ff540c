-- M is derived from the target's head (NTC-2). A notifying append used to rewrite
-- every cursor on its target, most of them only to move M of a notice already pending.
-- M of a watcher w is the target's latest notifying sequence by an actor other than w,
-- so the head keeps what that needs: the latest notifying sequence (material_seq), its
-- actor (material_actor, '' for none) and time, and the latest notifying sequence by
-- any other actor (material_other_seq) and its time. A cursor's M is then
-- max(m, w = material_actor ? material_other_seq : material_seq), and its updated_at
-- the time of that event when it is the larger; the stored m and updated_at are the
-- cursor's own floor, written by whatever last wrote the row (Watch, Seed, an opening
-- notice, Ack, Sweep). An append now writes only the cursors whose notice opens.
--
-- cursors_pending goes: each notice opened inserted its entry there, about half of the
-- write-ahead log of an append that opens many (entries of a WITHOUT ROWID table's
-- index carry the whole primary key). Its readers are the startup sweep, the count of
-- pending notices in Stats and the list of every watcher's pending notices (read by
-- the PostgreSQL listener, not on SQLite), which scan the table instead; a watcher's
-- own pending notices are read through cursors_watcher.

-- +goose Up
ALTER TABLE sessions ADD COLUMN material_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN material_actor TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN material_at INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN material_other_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN material_other_at INTEGER NOT NULL DEFAULT 0;
DROP INDEX cursors_pending;

-- +goose Down
-- Write the derived M (and its time) back into the cursors that lag, then drop it.
UPDATE cursors SET
    m = CASE WHEN cursors.watcher_key = h.material_actor THEN h.material_other_seq ELSE h.material_seq END,
    updated_at = CASE WHEN cursors.watcher_key = h.material_actor THEN h.material_other_at ELSE h.material_at END
FROM sessions h
WHERE h.agent_id = cursors.target_agent_id AND h.session_key = cursors.target_key
  AND cursors.watcher_key <> cursors.target_key AND substr(cursors.watcher_key, 1, 6) = 'agent:'
  AND CASE WHEN cursors.watcher_key = h.material_actor THEN h.material_other_seq ELSE h.material_seq END > cursors.m;
ALTER TABLE sessions DROP COLUMN material_other_at;
ALTER TABLE sessions DROP COLUMN material_other_seq;
ALTER TABLE sessions DROP COLUMN material_at;
ALTER TABLE sessions DROP COLUMN material_actor;
ALTER TABLE sessions DROP COLUMN material_seq;
CREATE INDEX cursors_pending ON cursors (opened_at) WHERE n > l;
