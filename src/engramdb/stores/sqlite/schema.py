"""The SQLite schema and its forward migrations.

``PRAGMA user_version`` holds the schema version. Migrations run in one
``BEGIN IMMEDIATE`` transaction on open, so two processes opening a new file
at once cannot both migrate it, and a crash mid-migration leaves the old
version intact. A file whose version is newer than :data:`LATEST` is refused.
"""

from __future__ import annotations

__all__ = ["KEYWORD_BACKFILL_VERSION", "LATEST", "MIGRATIONS", "VECTOR_BACKFILL_VERSION"]

_V1 = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

-- One row per memory. rowid is the internal key (vectors, index rows, links);
-- id is the public UUID. Soft-deleted rows keep their text until purged.
CREATE TABLE memories (
    rowid         INTEGER PRIMARY KEY,
    id            TEXT NOT NULL UNIQUE,
    text          TEXT NOT NULL,
    hash          TEXT NOT NULL,
    owner         TEXT NOT NULL,          -- dedup key: 'user:<id>', 'agent:<id>' or 'run:<id>'
    user_id       TEXT,
    agent_id      TEXT,
    run_id        TEXT,
    actor_id      TEXT,
    role          TEXT,
    attributed_to TEXT,
    memory_type   TEXT,
    metadata      TEXT NOT NULL DEFAULT '{}',
    created_at    TEXT NOT NULL,
    updated_at    TEXT NOT NULL,
    observed_at   TEXT,
    expires_at    TEXT,
    deleted_at    TEXT,
    version       INTEGER NOT NULL DEFAULT 1,
    seq           INTEGER NOT NULL        -- store-wide change counter at the last change
);
-- Exact repeats are impossible among live memories of one owner.
CREATE UNIQUE INDEX memories_owner_hash ON memories(owner, hash) WHERE deleted_at IS NULL;
CREATE INDEX memories_user ON memories(user_id, created_at);
CREATE INDEX memories_agent ON memories(agent_id, created_at);
CREATE INDEX memories_run ON memories(run_id, created_at);
-- Vector caches catch up by reading rows changed since the seq they saw.
CREATE INDEX memories_seq ON memories(seq);

-- Extra sessions (run_id / agent_id) a memory was seen in after it was stored.
CREATE TABLE memory_scope (
    memory_rowid INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
    kind         TEXT NOT NULL CHECK (kind IN ('run_id', 'agent_id')),
    value        TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (memory_rowid, kind, value)
) WITHOUT ROWID;
CREATE INDEX memory_scope_value ON memory_scope(kind, value);

-- float32 little-endian, L2-normalised; dimension and model are in meta.
CREATE TABLE memory_vectors (
    memory_rowid INTEGER PRIMARY KEY REFERENCES memories(rowid) ON DELETE CASCADE,
    embedding    BLOB NOT NULL
);

-- Keyword index row of each memory (rowid = memories.rowid).
CREATE VIRTUAL TABLE memory_fts USING fts5(terms, tokenize = 'unicode61 remove_diacritics 2');

CREATE TABLE memory_links (
    from_rowid INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
    to_rowid   INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
    kind       TEXT NOT NULL DEFAULT 'related',
    created_at TEXT NOT NULL,
    PRIMARY KEY (from_rowid, to_rowid, kind)
) WITHOUT ROWID;
CREATE INDEX memory_links_to ON memory_links(to_rowid);

CREATE TABLE entities (
    rowid      INTEGER PRIMARY KEY,
    owner      TEXT NOT NULL,
    name       TEXT NOT NULL,
    normalized TEXT NOT NULL,
    type       TEXT,
    embedding  BLOB,
    created_at TEXT NOT NULL,
    UNIQUE (owner, normalized)
);
CREATE INDEX entities_normalized ON entities(normalized);
CREATE TABLE memory_entities (
    memory_rowid INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
    entity_rowid INTEGER NOT NULL REFERENCES entities(rowid) ON DELETE CASCADE,
    PRIMARY KEY (memory_rowid, entity_rowid)
) WITHOUT ROWID;
CREATE INDEX memory_entities_entity ON memory_entities(entity_rowid);

-- Raw conversation messages, kept so a memory can show where it came from.
CREATE TABLE messages (
    rowid       INTEGER PRIMARY KEY,
    user_id     TEXT,
    agent_id    TEXT,
    run_id      TEXT,
    role        TEXT NOT NULL,
    name        TEXT,
    content     TEXT NOT NULL,
    observed_at TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX messages_user ON messages(user_id, rowid);
CREATE INDEX messages_agent ON messages(agent_id, rowid);
CREATE INDEX messages_run ON messages(run_id, rowid);

CREATE TABLE memory_sources (
    memory_rowid  INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
    message_rowid INTEGER NOT NULL REFERENCES messages(rowid) ON DELETE CASCADE,
    PRIMARY KEY (memory_rowid, message_rowid)
) WITHOUT ROWID;
CREATE INDEX memory_sources_message ON memory_sources(message_rowid);

-- Extraction calls whose LLM reply was unusable: the messages are kept, so
-- extraction can be run on them again (Memory.retry_extraction).
CREATE TABLE extraction_failures (
    rowid       INTEGER PRIMARY KEY,
    user_id     TEXT,
    agent_id    TEXT,
    run_id      TEXT,
    error       TEXT NOT NULL,
    reply       TEXT,
    created_at  TEXT NOT NULL,
    resolved_at TEXT
);
CREATE TABLE failure_messages (
    failure_rowid INTEGER NOT NULL REFERENCES extraction_failures(rowid) ON DELETE CASCADE,
    message_rowid INTEGER NOT NULL REFERENCES messages(rowid) ON DELETE CASCADE,
    PRIMARY KEY (failure_rowid, message_rowid)
) WITHOUT ROWID;

-- Append-only: rows are only ever inserted (purge is the one exception).
CREATE TABLE history (
    rowid        INTEGER PRIMARY KEY,
    memory_id    TEXT NOT NULL,
    event        TEXT NOT NULL,
    version      INTEGER NOT NULL,
    old_memory   TEXT,
    new_memory   TEXT,
    old_metadata TEXT,
    new_metadata TEXT,
    actor        TEXT NOT NULL,
    reason       TEXT,
    created_at   TEXT NOT NULL
);
CREATE INDEX history_memory ON history(memory_id, rowid);

INSERT INTO meta(key, value) VALUES ('seq', '0'), ('epoch', '0');
"""

# Version 2: visibility and provenance (docs/ARCHITECTURE.md, "Visibility").
# - partition: the visible scope a memory was written from (Scope.partition,
#   length-prefixed ids so no two scopes share a key). Exact repeats are
#   dropped per partition, not per user: a caller never dedups against (and so
#   never learns of) a memory it cannot see. Backfilled from user/agent ids,
#   which is what the flows now write for an unbound caller.
# - memory_context: the messages whose words a memory's keyword terms borrow
#   (verbatim turns index the previous message's words), so erasing a message
#   can re-index every memory that took words from it.
_V2 = """
ALTER TABLE memories ADD COLUMN partition TEXT NOT NULL DEFAULT '';
UPDATE memories SET partition =
    coalesce('u' || length(user_id) || ':' || user_id, '')
    || coalesce('a' || length(agent_id) || ':' || agent_id, '')
    || CASE WHEN user_id IS NULL AND agent_id IS NULL
            THEN 'r' || length(run_id) || ':' || run_id ELSE '' END;
DROP INDEX memories_owner_hash;
CREATE UNIQUE INDEX memories_partition_hash ON memories(partition, hash) WHERE deleted_at IS NULL;
CREATE INDEX memories_hash ON memories(hash, user_id);

CREATE TABLE memory_context (
    memory_rowid  INTEGER NOT NULL REFERENCES memories(rowid) ON DELETE CASCADE,
    message_rowid INTEGER NOT NULL REFERENCES messages(rowid) ON DELETE CASCADE,
    PRIMARY KEY (memory_rowid, message_rowid)
) WITHOUT ROWID;
CREATE INDEX memory_context_message ON memory_context(message_rowid);
"""

# Version 3: expiry in history, so a change of expiration_date is reversible
# like a change of text. Before it the expiry could not change after the add,
# so every existing event gets the memory's own.
_V3 = """
ALTER TABLE history ADD COLUMN old_expires_at TEXT;
ALTER TABLE history ADD COLUMN new_expires_at TEXT;
UPDATE history SET
    new_expires_at = (SELECT m.expires_at FROM memories m WHERE m.id = history.memory_id),
    old_expires_at = CASE WHEN event IN ('UPDATE', 'DELETE') OR
                               (event = 'RESTORE' AND old_memory IS NOT NULL)
        THEN (SELECT m.expires_at FROM memories m WHERE m.id = history.memory_id) END;
"""

# Version 4: an index the scope counts read alone (Store.scope_counts: live,
# expired and deleted memories per user, agent and run, grouped in the index's
# order, with no sort and no read of the rows) and the entities page drives
# from (the live memories of a user).
_V4 = """
CREATE INDEX memories_tally ON memories(user_id, agent_id, run_id, created_at, deleted_at,
    expires_at);
"""

# Version 5: keyword ranking in the file (stores/sqlite/_keywords.py,
# docs/ARCHITECTURE.md "Keyword ranking inside SQLite"). Postings in segments
# per (key, term), per-key statistics, and what is posted for each live
# memory. The store's writes keep them (TEMP triggers note the rows a write
# touches; the postings move before its COMMIT); the migration backfills
# them in Python after these statements (KEYWORD_BACKFILL_VERSION).
_V5 = """
CREATE TABLE keyword_postings (
    rowid    INTEGER PRIMARY KEY,
    key      TEXT NOT NULL,          -- 'user:<id>' for a user's memories, else the owner
    term     TEXT NOT NULL,          -- '' : one posting per live memory, its length as tf
    seg      INTEGER NOT NULL,
    postings BLOB NOT NULL,          -- (row int64, tf uint32, dl uint32) little-endian
    UNIQUE (key, term, seg)
);
CREATE TABLE keyword_stats (
    key    TEXT PRIMARY KEY,
    docs   INTEGER NOT NULL,
    length INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE keyword_docs (
    memory_rowid INTEGER PRIMARY KEY,  -- no foreign key: a purge reads it after the row went
    key          TEXT NOT NULL,
    terms        TEXT NOT NULL
);
"""

KEYWORD_BACKFILL_VERSION = 5
"""The version whose migration ends by posting every live memory (``_keywords.rebuild``)."""

# Version 6: the compact form of the vectors (stores/sqlite/_vectors.py,
# docs/vector-index.md): per memory its int8 codes (a float32 scale, then one
# byte a dimension) and its projection on the file's basis (float16; NULL
# before the first fit), and the basis itself. The store's writes keep them
# (TEMP triggers on memory_vectors, encoded before the COMMIT); the migration
# encodes every stored vector in Python after these statements.
_V6 = """
CREATE TABLE memory_codes (
    memory_rowid INTEGER PRIMARY KEY REFERENCES memories(rowid) ON DELETE CASCADE,
    codes        BLOB NOT NULL,
    projection   BLOB
);
CREATE TABLE vector_basis (
    id        INTEGER PRIMARY KEY CHECK (id = 1),
    dim       INTEGER NOT NULL,
    width     INTEGER NOT NULL,
    fitted_at INTEGER NOT NULL,       -- memories in the file when it was fitted
    basis     BLOB NOT NULL,          -- float32 (dim, width)
    centre    BLOB NOT NULL           -- float32 (width,): the projected mean
);
"""

VECTOR_BACKFILL_VERSION = 6
"""The version whose migration ends by encoding every stored vector (``_vectors.backfill``)."""

MIGRATIONS: tuple[str, ...] = (_V1, _V2, _V3, _V4, _V5, _V6)
"""``MIGRATIONS[i]`` takes a file from version ``i`` to ``i + 1``."""

LATEST = len(MIGRATIONS)
