-- Adopted sessions and upstream monitoring (UPS-1..5): one link per adopted session,
-- the gateway's own recent prompts as salted hashes (never their text), and the salt.
-- Rows reference no other table: a link outlives nothing but itself (sessions rows are
-- never deleted; Store.DeleteSession deletes the session's link and prompt hashes).

-- +goose Up

-- UPS-1. marker is the byte offset up to which the upstream transcript is classified.
-- consecutive_misses is the UPS-4 streak, durable so that a restart does not reset it.
-- updated_at changes only when the link is adopted again (a check compares it).
CREATE TABLE upstream_links (
    agent_id           TEXT    NOT NULL,
    session_key        TEXT    NOT NULL,
    link_id            TEXT    NOT NULL,
    catalog_id         TEXT    NOT NULL,
    thread_id          TEXT    NOT NULL,
    source             TEXT    NOT NULL,
    marker             INTEGER NOT NULL,
    consecutive_misses INTEGER NOT NULL DEFAULT 0,
    last_checked_at    INTEGER,
    blocked_reason     TEXT,
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    PRIMARY KEY (agent_id, session_key),
    UNIQUE (link_id),
    CHECK (marker >= 0),
    CHECK (consecutive_misses >= 0)
) WITHOUT ROWID;

-- The monitor's order (UPS-2): per catalog, then session.
CREATE INDEX upstream_links_catalog ON upstream_links (catalog_id, agent_id, session_key);

-- UPS-3. The last prompts the gateway sent into a session: HMAC-SHA256 hex of the
-- normalized text. position is dense per session; the oldest beyond the window go.
CREATE TABLE upstream_own_prompts (
    agent_id    TEXT    NOT NULL,
    session_key TEXT    NOT NULL,
    position    INTEGER NOT NULL,
    hash        TEXT    NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (agent_id, session_key, position)
) WITHOUT ROWID;

-- UPS-3. The per-database random salt of the prompt hashes (hex), created on first use.
CREATE TABLE upstream_secret (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    salt TEXT    NOT NULL
);

-- +goose Down
DROP TABLE upstream_secret;
DROP TABLE upstream_own_prompts;
DROP TABLE upstream_links;
