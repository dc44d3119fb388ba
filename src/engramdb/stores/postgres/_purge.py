"""The PostgreSQL purge flows: the erasure facts read, the plan checked and executed."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from engramdb.errors import ConflictError, MemoryNotFoundError
from engramdb.stores.base import Scope
from engramdb.stores.kernel.erasure import (
    DERIVED_ROWS,
    ErasureFacts,
    ErasurePlan,
    NeighbourFacts,
    owner_columns,
    plan_erasure,
)
from engramdb.stores.postgres._sql import _Q, Tx
from engramdb.stores.postgres._write_base import _WriteBase


class _PurgeFlows(_WriteBase):
    """Purge: read the provenance (stores/kernel/erasure.py plans), then erase."""

    def erasure_facts(self, memory_id: str | None, scope: Scope | None) -> Tx[ErasureFacts]:
        """The provenance rows around what a purge names (see ErasureFacts)."""
        scope_messages: list[int] = []
        scope_failures: list[int] = []
        if memory_id is not None:
            memories = yield _Q(
                f"SELECT rowid, id, owner FROM {self.t('memories')} WHERE id = %s", (memory_id,)
            )
            if not memories:
                raise MemoryNotFoundError(memory_id)
            # The owner's last memory: its leftover messages and failures go too.
            conds = owner_columns(str(memories[0][2]))
            where = " AND ".join(f"{c} IS NULL" if v is None else f"{c} = %s" for c, v in conds)
            values: list[Any] = [v for _, v in conds if v is not None]
            others = yield _Q(
                f"SELECT 1 FROM {self.t('memories')} WHERE {where} AND id <> %s LIMIT 1",
                [*values, memory_id],
            )
            if not others:
                found = yield _Q(f"SELECT rowid FROM {self.t('messages')} WHERE {where}", values)
                scope_messages = [int(r[0]) for r in found]
                found = yield _Q(
                    f"SELECT rowid FROM {self.t('extraction_failures')} WHERE {where}", values
                )
                scope_failures = [int(r[0]) for r in found]
        else:
            assert scope is not None
            clause, params = self.scope_clause(scope)
            memories = yield _Q(
                f"SELECT m.rowid, m.id, m.owner FROM {self.t('memories')} m WHERE {clause}",
                params,
            )
            exact = " AND ".join(f"{k} = %s" for k, _ in scope.items())
            values = [v for _, v in scope.items()]
            found = yield _Q(f"SELECT rowid FROM {self.t('messages')} WHERE {exact}", values)
            scope_messages = [int(r[0]) for r in found]
            found = yield _Q(
                f"SELECT rowid FROM {self.t('extraction_failures')} WHERE {exact}", values
            )
            scope_failures = [int(r[0]) for r in found]
        targets = sorted({int(r[0]) for r in memories})
        sources = [
            (int(a), int(b))
            for a, b in (
                yield _Q(
                    f"SELECT memory_rowid, message_rowid FROM {self.t('memory_sources')} "
                    "WHERE memory_rowid = ANY(%s)",
                    (targets,),
                )
            )
        ]
        direct = sorted({m for _, m in sources} | set(scope_messages))
        fm = self.t("failure_messages")
        kept = [
            (int(a), int(b))
            for a, b in (
                yield _Q(
                    f"SELECT failure_rowid, message_rowid FROM {fm} WHERE failure_rowid IN "
                    f"(SELECT failure_rowid FROM {fm} WHERE message_rowid = ANY(%s)) "
                    "OR failure_rowid = ANY(%s)",
                    (direct, scope_failures),
                )
            )
        ]
        kept_messages = sorted({m for _, m in kept})
        if kept_messages:
            sources += [
                (int(a), int(b))
                for a, b in (
                    yield _Q(
                        f"SELECT memory_rowid, message_rowid FROM {self.t('memory_sources')} "
                        "WHERE message_rowid = ANY(%s)",
                        (kept_messages,),
                    )
                )
            ]
        candidates = sorted(set(direct) | set(kept_messages))
        mc = self.t("memory_context")
        context = yield _Q(
            f"SELECT c.memory_rowid, c.message_rowid, g.content FROM {mc} c "
            f"JOIN {self.t('messages')} g ON g.rowid = c.message_rowid WHERE c.memory_rowid IN "
            f"(SELECT memory_rowid FROM {mc} WHERE message_rowid = ANY(%s)) "
            "ORDER BY c.memory_rowid, c.message_rowid",
            (candidates,),
        )
        neighbours: list[NeighbourFacts] = []
        borrowers = sorted({int(r[0]) for r in context})
        if borrowers:
            found = yield _Q(
                f"SELECT rowid, text, terms FROM {self.t('memories')} WHERE rowid = ANY(%s) "
                "ORDER BY rowid",
                (borrowers,),
            )
            neighbours = [
                NeighbourFacts(
                    int(r[0]),
                    r[1],
                    r[2] or "",
                    [(int(m), c) for n, m, c in context if int(n) == int(r[0])],
                )
                for r in found
            ]
        me = self.t("memory_entities")
        links = yield _Q(
            f"SELECT entity_rowid, memory_rowid FROM {me} WHERE entity_rowid IN "
            f"(SELECT entity_rowid FROM {me} WHERE memory_rowid = ANY(%s))",
            (targets,),
        )
        orphans = yield _Q(
            f"SELECT e.rowid FROM {self.t('entities')} e WHERE e.owner = ANY(%s) AND NOT EXISTS "
            f"(SELECT 1 FROM {me} x WHERE x.entity_rowid = e.rowid)",
            (sorted({str(r[2]) for r in memories}),),
        )
        return ErasureFacts(
            memories=[(int(r[0]), str(r[1]), str(r[2])) for r in memories],
            scope_messages=scope_messages,
            scope_failures=scope_failures,
            sources=sources,
            failure_messages=kept,
            neighbours=neighbours,
            entity_links=[(int(a), int(b)) for a, b in links],
            orphan_entities=[int(r[0]) for r in orphans],
        )

    def plan_purge(
        self, *, memory_id: str | None = None, scope: Scope | None = None
    ) -> Tx[ErasurePlan]:
        """What a purge of one memory or of a scope erases (stores/_erasure.py)."""
        facts = yield from self.erasure_facts(memory_id, scope)
        return plan_erasure(facts, memory_id=memory_id, scope=scope)

    def apply_purge(self, plan: ErasurePlan, terms: dict[int, str]) -> Tx[int]:
        """Execute a plan: owners locked (exclusive), facts read again, rows erased."""
        for owner in plan.owners:
            yield self.owner_lock(owner, exclusive=True)
        facts = yield from self.erasure_facts(plan.memory_id, plan.scope)
        if plan_erasure(facts, memory_id=plan.memory_id, scope=plan.scope) != plan:
            raise ConflictError("what the purge covers changed since it was planned")
        if not plan.touched:
            return 0

        def delete(table: str, column: str, values: Sequence[Any]) -> Iterator[_Q]:
            """Erase the rows of ``table`` whose ``column`` is one of ``values``."""
            if values:
                yield _Q(
                    f"DELETE FROM {self.t(table)} WHERE {column} = ANY(%s)",
                    (list(values),),
                    fetch="none",
                )

        yield from delete("history", "memory_id", plan.memory_ids)
        for table, column in (*DERIVED_ROWS, ("memories", "rowid")):
            yield from delete(table, column, plan.memory_rowids)
        for table in ("memory_sources", "memory_context", "failure_messages"):
            yield from delete(table, "message_rowid", plan.messages)
        yield from delete("failure_messages", "failure_rowid", plan.failures)
        yield from delete("extraction_failures", "rowid", plan.failures)
        yield from delete("messages", "rowid", plan.messages)
        if terms:
            planned = {r.rowid: r.terms for r in plan.reindex}
            ordered = sorted(terms)
            # Only where the terms are still the planned ones: a memory updated
            # meanwhile got terms of its new text alone, which hold no erased words.
            # The txid stamp makes every keyword cache re-read the row.
            yield _Q(
                f"UPDATE {self.t('memories')} m SET terms = u.terms, txid = pg_current_xact_id() "
                "FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS u(rowid, terms, old) "
                "WHERE m.rowid = u.rowid AND m.terms = u.old",
                (ordered, [terms[r] for r in ordered], [planned[r] for r in ordered]),
                fetch="none",
            )
        yield from delete("memory_entities", "entity_rowid", plan.entities)
        yield from delete("entities", "rowid", plan.entities)
        # Rows that vanish cannot be seen by a catch-up by txid: every process
        # drops its caches when the epoch moves.
        yield self.bump_epoch()
        return len(plan.memory_rowids)

    def vacuum_statements(self) -> list[str]:
        """VACUUMs that remove the dead row versions of the tables a purge erases text from.

        Only these tables hold text (the link tables hold row ids). Entities
        and keyword postings need their indexes cleaned too (on the entity's
        name, on the term); the other tables' indexes hold ids only, and index
        cleanup of the HNSW index would cost a scan of the whole index for
        every purge.
        """
        text_tables = ", ".join(
            self.t(n) for n in ("memories", "messages", "history", "extraction_failures")
        )
        cleaned = ", ".join(self.t(n) for n in ("entities", "keyword_postings"))
        return [f"VACUUM {text_tables}", f"VACUUM (INDEX_CLEANUP ON) {cleaned}"]
