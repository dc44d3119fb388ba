"""The PostgreSQL whole-store flows: import, a move to another embedder, reset."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import psycopg.errors as pg_errors

from engramdb.stores.base import EmbeddingSource, Rebinding, TermChange
from engramdb.stores.kernel.imports import ImportedMemory, clash_error, imported, repeat_error
from engramdb.stores.kernel.rebind import checked_vectors, moved_error, stale_keys
from engramdb.stores.postgres._sql import (
    _EMBEDDER_KEYS,
    _Q,
    Tx,
    _chunks,
    _dt,
    _json,
    _now,
    _Snapshot,
    _vector_text,
)
from engramdb.stores.postgres._write_base import _WriteBase

_REBIND_BATCH = 1000
"""Vectors per UPDATE statement of a rebinding (all in its one transaction)."""


class _BulkFlows(_WriteBase):
    """Writes over the whole store: exported rows back in, new vectors, reset."""

    def import_rows(self, rows: Sequence[dict[str, Any]]) -> Tx[int]:
        """Write exported rows back in one transaction; returns the count."""
        yield from self.guard_binding()
        # The rows' attribute terms are the exporting store's classifier's reading.
        yield _Q(f"DELETE FROM {self.t('meta')} WHERE key = 'attribute_terms'", fetch="none")
        ids = [r["id"] for r in rows]
        clash = yield _Q(f"SELECT id FROM {self.t('memories')} WHERE id = ANY(%s)", (ids,))
        if clash:
            raise clash_error([r[0] for r in clash])
        rowids: dict[str, int] = {}
        written: list[ImportedMemory] = []
        for r in rows:
            m = imported(r)
            stamp = _dt(m.updated_at)
            yield from self.upsert_entities(m.owner, m.entities, stamp or _now())
            try:
                row = yield _Q(
                    f"INSERT INTO {self.t('memories')} (id, text, hash, owner, partition, "
                    "user_id, agent_id, run_id, actor_id, role, attributed_to, memory_type, "
                    "metadata, created_at, updated_at, observed_at, expires_at, deleted_at, "
                    "version, terms, embedding) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, "
                    "%s, %s, %s::jsonb, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING rowid",
                    (
                        m.id,
                        m.text,
                        m.hash,
                        m.owner,
                        m.partition,
                        m.scope.user_id,
                        m.scope.agent_id,
                        m.scope.run_id,
                        m.actor_id,
                        m.role,
                        m.attributed_to,
                        m.memory_type,
                        _json(m.metadata),
                        _dt(m.created_at),
                        stamp,
                        _dt(m.observed_at),
                        _dt(m.expires_at),
                        _dt(m.deleted_at),
                        m.version,
                        m.terms,
                        np.asarray(m.embedding, dtype=np.float32),
                    ),
                    fetch="one",
                )
            except pg_errors.UniqueViolation as exc:
                raise repeat_error(m) from exc
            rowid = int(row[0])
            rowids[m.id] = rowid
            written.append(m)
            yield from self.link_entities(rowid, m.owner, m.entities, replace=False)
            for kind, values in m.sessions:
                if values:
                    yield _Q(
                        f"INSERT INTO {self.t('memory_scope')} (memory_rowid, kind, value, "
                        "created_at) SELECT %s, %s, unnest(%s::text[]), %s ON CONFLICT DO NOTHING",
                        (rowid, kind, values, stamp),
                        fetch="none",
                    )
            for event in m.history:
                yield from self.insert_history(event)
        for m in written:
            if m.links:
                yield _Q(
                    f"INSERT INTO {self.t('memory_links')} (from_rowid, to_rowid, kind, "
                    f"created_at) SELECT %s, x.rowid, u.k, %s FROM unnest(%s::text[], "
                    f"%s::text[]) AS u(i, k) JOIN {self.t('memories')} x ON x.id = u.i "
                    "ON CONFLICT DO NOTHING",
                    (
                        rowids[m.id],
                        _dt(m.updated_at),
                        m.links,
                        [m.link_kinds.get(i, "related") for i in m.links],
                    ),
                    fetch="none",
                )
        return len(rows)

    def record_attribute_terms_version(self, version: str | None) -> Tx[None]:
        """Record (None: forget) which classifier's reading the attribute terms hold."""
        if version is None:
            yield _Q(f"DELETE FROM {self.t('meta')} WHERE key = 'attribute_terms'", fetch="none")
            return
        # An upsert: processes opening one empty store at once may all record it.
        yield _Q(
            f"INSERT INTO {self.t('meta')} (key, value) VALUES ('attribute_terms', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (version,),
            fetch="none",
        )

    def retag(self, changes: Sequence[TermChange]) -> Tx[int]:
        """New terms where they are still the old ones, in one transaction; returns how many.

        The keyword tables follow by their triggers (a row's terms changed),
        and the ``txid`` stamp makes every process's keyword cache re-read it.
        """
        changed = 0
        for chunk in _chunks(list(changes), _REBIND_BATCH):
            count = yield _Q(
                f"UPDATE {self.t('memories')} m SET terms = u.new, txid = pg_current_xact_id() "
                "FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS u(rowid, old, new) "
                "WHERE m.rowid = u.rowid AND m.terms = u.old",
                (
                    [c.key for c in chunk],
                    [c.old for c in chunk],
                    [c.new for c in chunk],
                ),
                fetch="rowcount",
            )
            changed += int(count)
        return changed

    def rebind_embedder(
        self,
        old: tuple[str, int],
        new: tuple[str, int],
        vectors: Mapping[int, np.ndarray[Any, np.dtype[np.float32]]],
        since: str,
    ) -> Tx[Rebinding]:
        """Replace every vector by ``vectors`` and bind ``new``, in one transaction.

        It takes the binding lock exclusively first, as reset does: vector
        writes in flight finish, and new ones wait until the commit (and then
        find the binding changed: the driver's guard refuses the old model).
        The store must still be bound to ``old``; a memory stamped by a
        transaction that had not ended in the snapshot ``since`` (written since
        the caller read it) or that ``vectors`` lacks makes the flow write
        nothing and return it as stale, with the current snapshot as the next
        mark. Otherwise the HNSW index is dropped, the column retyped to
        ``vector(new dim)`` when the dimension changes (``USING NULL``: a table
        rewrite), every row's vector written in batches, the binding changed
        and the index built again, all before the one COMMIT; readers wait
        for it (the index and the column are locked). The keyword caches hold
        no vectors and stay valid. Dead row versions of the old vectors
        remain until (auto)VACUUM.
        """
        memories = self.t("memories")
        yield self.binding_lock(exclusive=True)
        bound = yield from self.read_binding()
        if bound != old:
            raise moved_error(f"PostgreSQL schema {self.schema!r}", bound, old)
        mark = yield _Q("SELECT pg_current_snapshot()::text", fetch="one")
        snap = _Snapshot.parse(since)
        rows = yield _Q(
            f"SELECT m.rowid, (m.txid >= %s::xid8 OR m.txid = ANY(%s::xid8[])) FROM {memories} m "
            "ORDER BY m.rowid",
            (str(snap.xmax), [str(x) for x in sorted(snap.xip)]),
        )
        stale, current = stale_keys(((int(r[0]), bool(r[1])) for r in rows), vectors)
        if stale:
            found = yield _Q(
                f"SELECT rowid, text, actor_id FROM {memories} WHERE rowid = ANY(%s) "
                "ORDER BY rowid",
                (stale,),
            )
            return Rebinding(
                done=False,
                stale=[EmbeddingSource(int(r[0]), r[1], r[2]) for r in found],
                mark=str(mark[0]),
            )
        fresh = checked_vectors(vectors, current, new[1])
        yield _Q(f"DROP INDEX IF EXISTS {self.t('memories_embedding_hnsw')}", fetch="none")
        typed = yield _Q(
            "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = %s::regclass AND attname = 'embedding'",
            (memories,),
            fetch="one",
        )
        if typed[0] != f"vector({int(new[1])})":
            yield _Q(
                f"ALTER TABLE {memories} ALTER COLUMN embedding TYPE vector({int(new[1])}) "
                "USING NULL",
                fetch="none",
            )
        for chunk in _chunks(fresh, _REBIND_BATCH):
            yield _Q(
                f"UPDATE {memories} m SET embedding = u.e::vector "
                "FROM unnest(%s::bigint[], %s::text[]) AS u(k, e) WHERE m.rowid = u.k",
                ([k for k, _ in chunk], [_vector_text(v) for _, v in chunk]),
                fetch="none",
            )
        meta = self.t("meta")
        yield _Q(
            f"UPDATE {meta} SET value = %s WHERE key = 'embedder_model'", (new[0],), fetch="none"
        )
        yield _Q(
            f"UPDATE {meta} SET value = %s WHERE key = 'embedder_dim'", (str(new[1]),), fetch="none"
        )
        yield _Q(
            f"CREATE INDEX memories_embedding_hnsw ON {memories} "
            "USING hnsw (embedding vector_cosine_ops)",
            fetch="none",
        )
        # This process is on the new model from now on (its Memory's embedder is).
        self.binding = (new[0], new[1])
        return Rebinding(done=True, written=len(fresh), mark=str(mark[0]))

    def reset(self) -> Tx[None]:
        """Erase everything the store holds (the embedder binding too)."""
        tables = ", ".join(
            self.t(name)
            for name in (
                "memory_links",
                "memory_entities",
                "memory_sources",
                "memory_context",
                "memory_scope",
                "failure_messages",
                "extraction_failures",
                "entities",
                "history",
                "messages",
                "memories",
                "keyword_postings",
                "keyword_stats",
            )
        )
        # First: wait out vector writes in flight, so none commits after the reset.
        yield self.binding_lock(exclusive=True)
        yield _Q(f"TRUNCATE {tables}", fetch="none")
        yield _Q(
            f"DELETE FROM {self.t('meta')} WHERE key = ANY(%s)",
            (list(_EMBEDDER_KEYS),),
            fetch="none",
        )
        yield self.bump_epoch()
