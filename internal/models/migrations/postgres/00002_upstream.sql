-- PostgreSQL twin of migrations/sqlite/00002_upstream.sql: upstream links, the
-- gateway's own recent prompts as salted hashes (never their text), and the salt.
-- Times are BIGINT unix nanoseconds UTC; keys use the "C" collation.

-- +goose Up

CREATE TABLE upstream_links (
    agent_id           TEXT COLLATE "C" NOT NULL,
    session_key        TEXT COLLATE "C" NOT NULL,
    link_id            TEXT   NOT NULL,
    catalog_id         TEXT COLLATE "C" NOT NULL,
    thread_id          TEXT   NOT NULL,
    source             TEXT   NOT NULL,
    marker             BIGINT NOT NULL,
    consecutive_misses BIGINT NOT NULL DEFAULT 0,
    last_checked_at    BIGINT,
    blocked_reason     TEXT,
    created_at         BIGINT NOT NULL,
    updated_at         BIGINT NOT NULL,
    PRIMARY KEY (agent_id, session_key),
    UNIQUE (link_id),
    CHECK (marker >= 0),
    CHECK (consecutive_misses >= 0)
);

CREATE INDEX upstream_links_catalog ON upstream_links (catalog_id, agent_id, session_key);

CREATE TABLE upstream_own_prompts (
    agent_id    TEXT COLLATE "C" NOT NULL,
    session_key TEXT COLLATE "C" NOT NULL,
    position    BIGINT NOT NULL,
    hash        TEXT   NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (agent_id, session_key, position)
);

CREATE TABLE upstream_secret (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    salt TEXT    NOT NULL
);

-- +goose Down
DROP TABLE upstream_secret;
DROP TABLE upstream_own_prompts;
DROP TABLE upstream_links;
