"""The PostgreSQL schema and its forward migrations.

Every table lives in one PostgreSQL schema per store (``collection_name``,
default ``engramdb``), so several stores can share a database. The schema
version is the ``schema_version`` row of ``<schema>.meta``. Migrations run on
open, in one transaction that holds :data:`MIGRATION_LOCK` (a transaction-level
advisory lock), so several processes opening a new database at once cannot
both migrate it, and a crash mid-migration leaves the old version intact. A
schema whose version is newer than :data:`LATEST` is refused.

``{s}`` in the scripts stands for the quoted schema name.
"""

from __future__ import annotations

__all__ = ["BOOTSTRAP", "LATEST", "MIGRATIONS", "MIGRATION_LOCK"]

MIGRATION_LOCK = 0x656E6772616D  # "engram": one key for every engramdb schema
"""``pg_advisory_xact_lock`` key held while creating the extension and migrating."""

BOOTSTRAP = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
"""

_V1 = """
-- One row per memory. rowid is the internal key; id is the public UUID.
-- Soft-deleted rows keep their text until purged.
CREATE TABLE {s}.memories (
    rowid         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id            text NOT NULL UNIQUE,
    text          text NOT NULL,
    hash          text NOT NULL,
    owner         text NOT NULL,          -- dedup key: 'user:<id>', 'agent:<id>' or 'run:<id>'
    user_id       text,
    agent_id      text,
    run_id        text,
    actor_id      text,
    role          text,
    attributed_to text,
    memory_type   text,
    metadata      jsonb NOT NULL DEFAULT '{{}}',
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL,
    observed_at   timestamptz,
    expires_at    timestamptz,
    deleted_at    timestamptz,
    version       integer NOT NULL DEFAULT 1,
    terms         text NOT NULL DEFAULT '',   -- lemmatised keyword terms, space-separated
    embedding     vector,                     -- becomes vector(dim) when the embedder is bound
    -- The transaction that last changed the row: keyword caches catch up by
    -- reading rows changed by transactions not finished when they last looked.
    txid          xid8 NOT NULL DEFAULT pg_current_xact_id()
);
-- Exact repeats are impossible among live memories of one owner.
CREATE UNIQUE INDEX memories_owner_hash ON {s}.memories (owner, hash) WHERE deleted_at IS NULL;
CREATE INDEX memories_user ON {s}.memories (user_id, created_at);
CREATE INDEX memories_agent ON {s}.memories (agent_id, created_at);
CREATE INDEX memories_run ON {s}.memories (run_id, created_at);
CREATE INDEX memories_user_txid ON {s}.memories (user_id, txid);
CREATE INDEX memories_agent_txid ON {s}.memories (agent_id, txid);
CREATE INDEX memories_run_txid ON {s}.memories (run_id, txid);

-- Extra sessions (run_id / agent_id) a memory was seen in after it was stored.
CREATE TABLE {s}.memory_scope (
    memory_rowid bigint NOT NULL REFERENCES {s}.memories (rowid) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('run_id', 'agent_id')),
    value        text NOT NULL,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (memory_rowid, kind, value)
);
CREATE INDEX memory_scope_value ON {s}.memory_scope (kind, value);

CREATE TABLE {s}.memory_links (
    from_rowid bigint NOT NULL REFERENCES {s}.memories (rowid) ON DELETE CASCADE,
    to_rowid   bigint NOT NULL REFERENCES {s}.memories (rowid) ON DELETE CASCADE,
    kind       text NOT NULL DEFAULT 'related',
    created_at timestamptz NOT NULL,
    PRIMARY KEY (from_rowid, to_rowid, kind)
);
CREATE INDEX memory_links_to ON {s}.memory_links (to_rowid);

CREATE TABLE {s}.entities (
    rowid      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner      text NOT NULL,
    name       text NOT NULL,
    normalized text NOT NULL,
    type       text,
    created_at timestamptz NOT NULL,
    UNIQUE (owner, normalized)
);
CREATE INDEX entities_normalized ON {s}.entities (normalized);
CREATE TABLE {s}.memory_entities (
    memory_rowid bigint NOT NULL REFERENCES {s}.memories (rowid) ON DELETE CASCADE,
    entity_rowid bigint NOT NULL REFERENCES {s}.entities (rowid) ON DELETE CASCADE,
    PRIMARY KEY (memory_rowid, entity_rowid)
);
CREATE INDEX memory_entities_entity ON {s}.memory_entities (entity_rowid);

-- Raw conversation messages, kept so a memory can show where it came from.
CREATE TABLE {s}.messages (
    rowid       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     text,
    agent_id    text,
    run_id      text,
    role        text NOT NULL,
    name        text,
    content     text NOT NULL,
    observed_at timestamptz,
    created_at  timestamptz NOT NULL
);
CREATE INDEX messages_user ON {s}.messages (user_id, rowid);
CREATE INDEX messages_agent ON {s}.messages (agent_id, rowid);
CREATE INDEX messages_run ON {s}.messages (run_id, rowid);

CREATE TABLE {s}.memory_sources (
    memory_rowid  bigint NOT NULL REFERENCES {s}.memories (rowid) ON DELETE CASCADE,
    message_rowid bigint NOT NULL REFERENCES {s}.messages (rowid) ON DELETE CASCADE,
    PRIMARY KEY (memory_rowid, message_rowid)
);
CREATE INDEX memory_sources_message ON {s}.memory_sources (message_rowid);

-- Extraction calls whose LLM reply was unusable: the messages are kept.
CREATE TABLE {s}.extraction_failures (
    rowid       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id     text,
    agent_id    text,
    run_id      text,
    error       text NOT NULL,
    reply       text,
    created_at  timestamptz NOT NULL,
    resolved_at timestamptz
);
CREATE TABLE {s}.failure_messages (
    failure_rowid bigint NOT NULL REFERENCES {s}.extraction_failures (rowid) ON DELETE CASCADE,
    message_rowid bigint NOT NULL REFERENCES {s}.messages (rowid) ON DELETE CASCADE,
    PRIMARY KEY (failure_rowid, message_rowid)
);
CREATE INDEX failure_messages_message ON {s}.failure_messages (message_rowid);

-- Append-only: rows are only ever inserted (purge is the one exception).
CREATE TABLE {s}.history (
    rowid        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    memory_id    text NOT NULL,
    event        text NOT NULL,
    version      integer NOT NULL,
    old_memory   text,
    new_memory   text,
    old_metadata jsonb,
    new_metadata jsonb,
    actor        text NOT NULL,
    reason       text,
    created_at   timestamptz NOT NULL
);
CREATE INDEX history_memory ON {s}.history (memory_id, rowid);

INSERT INTO {s}.meta (key, value) VALUES ('epoch', '0') ON CONFLICT DO NOTHING;
"""

MIGRATIONS: tuple[str, ...] = (_V1,)
"""``MIGRATIONS[i]`` takes a schema from version ``i`` to ``i + 1``."""

LATEST = len(MIGRATIONS)
