"""Purge on SQLite: erasure facts, the planned deletes, and scrubbing the file."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from engramdb.errors import (
    ConflictError,
    MemoryNotFoundError,
)
from engramdb.stores.base import (
    Scope,
)
from engramdb.stores.kernel.erasure import (
    DERIVED_ROWS,
    ErasureFacts,
    ErasurePlan,
    NeighbourFacts,
    check_terms,
    owner_columns,
    plan_erasure,
    purge_with,
)
from engramdb.stores.sqlite._base import (
    _scope_clause,
    _Store,
)


class _Erasure(_Store):
    """Purge: plan from facts read in one snapshot, apply in one write, scrub the file."""

    def purge(self, *, memory_id: str | None = None, scope: Scope | None = None) -> int:
        """Erase memories for good, with everything derived from them; returns how many.

        :meth:`plan_purge`, then the re-index terms, then :meth:`apply_purge`
        (planned again if a write came between). ``Memory.purge`` runs the same
        steps as a flow.
        """
        return purge_with(self, memory_id=memory_id, scope=scope)

    def plan_purge(
        self, *, memory_id: str | None = None, scope: Scope | None = None
    ) -> ErasurePlan:
        """What a purge of one memory or of a scope erases (stores/kernel/erasure.py)."""
        with self._read() as con:
            facts = self._erasure_facts(con, memory_id, scope)
        return plan_erasure(facts, memory_id=memory_id, scope=scope)

    def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> int:
        """Execute a purge plan in one transaction, then scrub the file.

        The facts are read again under the write lock; a plan they no longer
        give raises ConflictError. Afterwards the keyword index is rewritten
        and the WAL truncated, and ``secure_delete`` has zeroed the freed
        content, so the erased text is in no page, free page or log.
        """
        check_terms(plan, terms)
        with self._write() as con, self._translate():
            now = plan_erasure(
                self._erasure_facts(con, plan.memory_id, plan.scope),
                memory_id=plan.memory_id,
                scope=plan.scope,
            )
            if now != plan:
                raise ConflictError("what the purge covers changed since it was planned")
            if not plan.touched:
                return 0
            seq = self._bump(con)

            def each(sql: str, values: Sequence[Any]) -> None:
                if values:
                    con.execute(
                        sql.format(ids="(SELECT value FROM json_each(?))"),
                        (json.dumps(list(values)),),
                    )

            each("DELETE FROM history WHERE memory_id IN {ids}", plan.memory_ids)
            for table, column in (
                ("memory_vectors", "memory_rowid"),
                *DERIVED_ROWS,
                ("memory_fts", "rowid"),
                ("memories", "rowid"),
            ):
                each(f"DELETE FROM {table} WHERE {column} IN {{ids}}", plan.memory_rowids)
            for table in ("memory_sources", "memory_context", "failure_messages"):
                each(f"DELETE FROM {table} WHERE message_rowid IN {{ids}}", plan.messages)
            each("DELETE FROM failure_messages WHERE failure_rowid IN {ids}", plan.failures)
            each("DELETE FROM extraction_failures WHERE rowid IN {ids}", plan.failures)
            each("DELETE FROM messages WHERE rowid IN {ids}", plan.messages)
            # Stamped with the new seq as well as covered by the epoch bump below,
            # so a cache that somehow kept its epoch still re-reads them.
            con.executemany(
                "UPDATE memory_fts SET terms = ? WHERE rowid = ?",
                [(t, rowid) for rowid, t in sorted(terms.items())],
            )
            con.executemany(
                "UPDATE memories SET seq = ? WHERE rowid = ?", [(seq, r) for r in sorted(terms)]
            )
            each("DELETE FROM memory_entities WHERE entity_rowid IN {ids}", plan.entities)
            each("DELETE FROM entities WHERE rowid IN {ids}", plan.entities)
            # Rows that vanish cannot be seen by a catch-up by seq: every process
            # drops its caches when the epoch moves.
            con.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'epoch'")
        self._scrub()
        return len(plan.memory_rowids)

    def _erasure_facts(
        self, con: sqlite3.Connection, memory_id: str | None, scope: Scope | None
    ) -> ErasureFacts:
        """The provenance rows around what a purge names (see ErasureFacts)."""

        def rows(sql: str, *params: Any) -> list[tuple[Any, ...]]:
            return [tuple(r) for r in con.execute(sql, params).fetchall()]

        def ids(values: Any) -> str:
            return json.dumps(sorted(set(values)))

        inside = "(SELECT value FROM json_each(?))"
        scope_messages: list[int] = []
        scope_failures: list[int] = []
        if memory_id is not None:
            memories = rows("SELECT rowid, id, owner FROM memories WHERE id = ?", memory_id)
            if not memories:
                raise MemoryNotFoundError(memory_id)
            # The owner's last memory: its leftover messages and failures go too.
            conds = owner_columns(str(memories[0][2]))
            where = " AND ".join(f"{c} IS NULL" if v is None else f"{c} = ?" for c, v in conds)
            values = [v for _, v in conds if v is not None]
            others = rows(
                f"SELECT 1 FROM memories WHERE {where} AND id != ? LIMIT 1", *values, memory_id
            )
            if not others:
                scope_messages = [
                    r[0] for r in rows(f"SELECT rowid FROM messages WHERE {where}", *values)
                ]
                scope_failures = [
                    r[0]
                    for r in rows(f"SELECT rowid FROM extraction_failures WHERE {where}", *values)
                ]
        else:
            assert scope is not None
            clause, params = _scope_clause(scope)
            memories = rows(
                f"SELECT m.rowid, m.id, m.owner FROM memories m WHERE {clause}", *params
            )
            exact = " AND ".join(f"{k} = ?" for k, _ in scope.items())
            values = [v for _, v in scope.items()]
            scope_messages = [
                r[0] for r in rows(f"SELECT rowid FROM messages WHERE {exact}", *values)
            ]
            scope_failures = [
                r[0] for r in rows(f"SELECT rowid FROM extraction_failures WHERE {exact}", *values)
            ]
        targets = ids(r[0] for r in memories)
        sources = rows(
            "SELECT memory_rowid, message_rowid FROM memory_sources WHERE memory_rowid IN "
            f"{inside}",
            targets,
        )
        direct = ids([m for _, m in sources] + scope_messages)
        kept = rows(
            "SELECT failure_rowid, message_rowid FROM failure_messages WHERE failure_rowid IN "
            f"(SELECT failure_rowid FROM failure_messages WHERE message_rowid IN {inside}) "
            f"OR failure_rowid IN {inside}",
            direct,
            ids(scope_failures),
        )
        sources += rows(
            "SELECT memory_rowid, message_rowid FROM memory_sources WHERE message_rowid IN "
            f"{inside}",
            ids(m for _, m in kept),
        )
        candidates = ids([m for _, m in sources] + scope_messages + [m for _, m in kept])
        context = rows(
            "SELECT c.memory_rowid, c.message_rowid, g.content FROM memory_context c "
            "JOIN messages g ON g.rowid = c.message_rowid WHERE c.memory_rowid IN "
            f"(SELECT memory_rowid FROM memory_context WHERE message_rowid IN {inside}) "
            "ORDER BY c.memory_rowid, c.message_rowid",
            candidates,
        )
        neighbours = [
            NeighbourFacts(rowid, text, terms or "", [(m, c) for r, m, c in context if r == rowid])
            for rowid, text, terms in rows(
                "SELECT m.rowid, m.text, f.terms FROM memories m LEFT JOIN memory_fts f "
                f"ON f.rowid = m.rowid WHERE m.rowid IN {inside} ORDER BY m.rowid",
                ids(r for r, _, _ in context),
            )
        ]
        entity_links = rows(
            "SELECT entity_rowid, memory_rowid FROM memory_entities WHERE entity_rowid IN "
            f"(SELECT entity_rowid FROM memory_entities WHERE memory_rowid IN {inside})",
            targets,
        )
        orphans = rows(
            f"SELECT e.rowid FROM entities e WHERE e.owner IN {inside} AND NOT EXISTS "
            "(SELECT 1 FROM memory_entities x WHERE x.entity_rowid = e.rowid)",
            ids(r[2] for r in memories),
        )
        return ErasureFacts(
            memories=[(int(r[0]), str(r[1]), str(r[2])) for r in memories],
            scope_messages=scope_messages,
            scope_failures=scope_failures,
            sources=[(int(a), int(b)) for a, b in sources],
            failure_messages=[(int(a), int(b)) for a, b in kept],
            neighbours=neighbours,
            entity_links=[(int(a), int(b)) for a, b in entity_links],
            orphan_entities=[int(r[0]) for r in orphans],
        )
