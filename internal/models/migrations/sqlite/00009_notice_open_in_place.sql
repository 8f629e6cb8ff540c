-- The twin of migrations/postgres/00009_notice_open_in_place.sql, which drops the
-- PostgreSQL indexes that named the columns a notifying append writes. SQLite keeps
-- them (it rewrites an index entry only when that index's columns change): nothing to
-- do here.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
