"""Loading ``engram bench scale``'s PostgreSQL store fast: the rows ``Store.add`` writes, by COPY.

``Memory.add(infer=False)`` stores ~300-400 synthetic memories a second on the
2-core development machine (a call per tenant chunk, the flow and the store's
locking round trips, the HNSW index grown one vector at a time), so 1M
memories would take about an hour. This module writes the same rows with
``COPY``, in big batches from several processes, one transaction a batch:

- the memories and messages are made by the add flow itself: each worker
  runs ``Memory.add(infer=False)`` over the same calls the API loader makes
  (a tenant's messages cut every :data:`MAX_CALL`), through a ``Memory``
  whose ``Store.add`` calls are captured instead of written
  (:class:`_Capturing`). So the text, hash, keyword terms (with the words of
  the message before in the call), entities, vector and anything else the
  flow puts on a memory are the flow's own, whatever it becomes;
- :func:`copy_batch` then writes the rows ``Store.add`` writes for them
  (``stores/postgres/_adds.py``): the messages, the entities upserted per
  owner, the memories (owner, partition, scope, version 1, the flow's
  metadata and instants), entity links, sources, context and the ``ADD``
  history events; the keyword postings and statistics come from the store's
  own statement triggers on ``memories``, which fire for COPY as for INSERT.

What it skips against ``Memory.add``: the owner's advisory lock, the binding
guard and the look-ups of texts already stored (every synthetic text carries
a unique marker, so every memory is new; the bench checks the count stored
against the count loaded), one transaction per call, and the handling of
repeats, links and failed extractions (refused: the bench has none). None of
these changes a row; what the servers then read is what the API would have
written, which ``tests/test_bench_scale_load.py`` checks table by table
against a store filled through ``Memory.add``. The store is bound (vector
column typed, HNSW index created) by a real ``Memory.add`` of the first tenant.

A batch that would grow the store by at least as much as it holds can drop the
HNSW index first and build it again after (``CREATE INDEX`` with
``maintenance_work_mem``: far faster than 1M inserts into the graph, the same
index: same statement, same defaults as the store's); ``VACUUM (ANALYZE)``
afterwards leaves the tables as autovacuum would, with statistics for the
planner and visibility for index-only scans.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import UTC, datetime
from multiprocessing import get_context
from typing import TYPE_CHECKING, Any, Final, Protocol

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from engramdb.core.records import NewMemory, NewMessage, Scope

__all__ = [
    "MAX_CALL",
    "Call",
    "build_index",
    "copy_batch",
    "drop_index",
    "prepare",
    "run_copy_load",
    "vacuum",
]

MAX_CALL: Final = 500
"""Messages per ``Memory.add`` call of the API loader: terms borrow words within a call only."""
INDEX: Final = "memories_embedding_hnsw"
_TABLES: Final = (
    "memories", "messages", "memory_sources", "memory_context", "entities",
    "memory_entities", "history", "keyword_postings", "keyword_stats",
)  # fmt: skip

Jobs = Sequence[tuple[str, int, int]]
"""``(user_id, first memory number, stop)`` per tenant chunk of a batch."""


class _Synth(Protocol):
    def text(self, i: int) -> str: ...

    def vector(self, i: int) -> npt.NDArray[np.float32]: ...


@dataclass
class Call:
    """One ``Store.add`` call as the add flow made it (nothing written yet)."""

    memories: list[NewMemory]
    messages: list[NewMessage]
    scope: Scope
    visible: Scope
    actor: str


class _Capturing:
    """A ``Memory`` whose ``Store.add`` calls are kept instead of written.

    Everything else a verbatim add does runs: the flow makes the memories
    (text, hash, terms with the conversation's context, entities, vectors and
    whatever it adds to them) and the messages, and binds the store once.
    The look-up of texts already stored answers "none": every synthetic text
    carries a unique marker.
    """

    def __init__(self, config: dict[str, Any], embedder: Any) -> None:
        from engramdb.memory import Memory

        calls: list[Call] = []

        class Capture(Memory):
            def _perform(self, effect: Any) -> Any:
                from engramdb._engine import StoreCall
                from engramdb.core.records import visible_scope
                from engramdb.stores.kernel.dedup import stored

                if isinstance(effect, StoreCall) and effect.method == "existing_hashes":
                    return set()
                if isinstance(effect, StoreCall) and effect.method == "add":
                    memories, messages, scope, actor = effect.args
                    extra = effect.kwargs
                    if extra.get("source_rowids") or extra.get("resolve_failure") is not None:
                        raise ValueError("the COPY loader writes plain verbatim adds only")
                    if any(m.links for m in memories):
                        raise ValueError("the COPY loader does not write links")
                    if len({m.hash for m in memories}) != len(memories):
                        raise ValueError("the COPY loader needs distinct texts in a call")
                    visible = extra.get("visible") or visible_scope(scope)
                    calls.append(Call(list(memories), list(messages), scope, visible, actor))
                    return [stored(m) for m in memories]
                return super()._perform(effect)

        self.memory = Capture(config={"vector_store": config}, embedder=embedder)
        self.calls = calls

    def take(self) -> list[Call]:
        """The calls captured since the last take."""
        out = list(self.calls)
        self.calls.clear()
        return out


def prepare(capture: _Capturing, synth: _Synth, jobs: Jobs, call: int = MAX_CALL) -> list[Call]:
    """The ``Store.add`` calls the API loader's ``Memory.add`` calls would make for ``jobs``."""
    for user, start, stop in jobs:
        for lo in range(start, stop, call):
            messages = [
                {"role": "user", "content": synth.text(i)} for i in range(lo, min(stop, lo + call))
            ]
            capture.memory.add(messages, user_id=user, infer=False)
    return capture.take()


def _draw(cur: Any, table: str, n: int) -> list[int]:
    """``n`` values of ``table``'s identity sequence, ascending."""
    if n == 0:
        return []
    got = cur.execute(
        "SELECT nextval(pg_get_serial_sequence(%s, 'rowid')) FROM generate_series(1, %s)",
        (table, n),
    ).fetchall()
    return sorted(int(r[0]) for r in got)


def _vector_text(vec: npt.NDArray[np.float32]) -> str:
    # As the store sends vectors in arrays: repr of float32 round-trips exactly.
    return "[" + ",".join(map(repr, np.asarray(vec, dtype=np.float32).tolist())) + "]"


def _json(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _dt(stamp: str | None) -> datetime | None:
    return None if stamp is None else datetime.fromisoformat(stamp)


def copy_batch(con: Any, schema: str, calls: Sequence[Call]) -> int:
    """Write ``calls`` in one transaction on ``con`` (a psycopg connection); the memories written.

    The rows ``Store.add`` (``stores/postgres/_adds.py``) writes for adds of
    new memories: messages, then entities, memories (row ids in input
    order), entity links, sources, context and ``ADD`` events, with one
    instant for the whole batch where the store takes one per call.
    """
    from engramdb.stores.kernel.history import add_event

    memories = [(c, m) for c in calls for m in c.memories]
    n = len(memories)
    if n == 0:
        return 0

    def t(name: str) -> str:
        return f'"{schema}".{name}'

    stamp = datetime.now(UTC).isoformat(timespec="microseconds")
    now = datetime.fromisoformat(stamp)
    with con.transaction(), con.cursor() as cur:
        mem_ids = _draw(cur, t("memories"), n)
        msg_ids = _draw(cur, t("messages"), sum(len(c.messages) for c in calls))
        hist_ids = _draw(cur, t("history"), n)
        message_rowids: dict[int, list[int]] = {}
        with cur.copy(
            f"COPY {t('messages')} (rowid, user_id, agent_id, run_id, role, name, content, "
            "observed_at, created_at) FROM STDIN"
        ) as copy:
            k = 0
            for c in calls:
                message_rowids[id(c)] = msg_ids[k : k + len(c.messages)]
                for msg in c.messages:
                    copy.write_row(
                        (msg_ids[k], c.scope.user_id, c.scope.agent_id, c.scope.run_id, msg.role,
                         msg.name, msg.content, _dt(msg.observed_at), now)
                    )  # fmt: skip
                    k += 1
        # Entities before the memories, as the store upserts them: per owner the
        # first mention's name and type, in key order.
        first: dict[tuple[str, str], tuple[str, str]] = {}
        for c, m in memories:
            for name, normalized, kind in m.entities:
                first.setdefault((c.scope.owner, normalized), (name, kind))
        if first:
            keys = sorted(first)
            cur.execute(
                f"INSERT INTO {t('entities')} (owner, name, normalized, type, created_at) "
                "SELECT u.owner, u.name, u.normalized, u.type, %s FROM unnest(%s::text[], "
                "%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS "
                "u(owner, normalized, name, type, n) ORDER BY u.n "
                "ON CONFLICT (owner, normalized) DO NOTHING",
                (now, [k[0] for k in keys], [k[1] for k in keys],
                 [first[k][0] for k in keys], [first[k][1] for k in keys]),
            )  # fmt: skip
        with cur.copy(
            f"COPY {t('memories')} (rowid, id, text, hash, owner, partition, user_id, agent_id, "
            "run_id, actor_id, role, attributed_to, memory_type, metadata, created_at, "
            "updated_at, observed_at, expires_at, version, terms, embedding) FROM STDIN"
        ) as copy:
            for rowid, (c, m) in zip(mem_ids, memories, strict=True):
                copy.write_row(
                    (rowid, m.id, m.text, m.hash, c.scope.owner, c.visible.partition,
                     c.scope.user_id, c.scope.agent_id, c.scope.run_id, m.actor_id, m.role,
                     m.attributed_to, m.memory_type, _json(m.metadata), now, now,
                     _dt(m.observed_at), _dt(m.expires_at), 1, m.terms,
                     _vector_text(m.embedding))
                )  # fmt: skip
        pairs = sorted(
            {
                (r, c.scope.owner, e[1])
                for r, (c, m) in zip(mem_ids, memories, strict=True)
                for e in m.entities
            }
        )
        if pairs:
            cur.execute(
                f"INSERT INTO {t('memory_entities')} (memory_rowid, entity_rowid) "
                "SELECT u.m, e.rowid FROM unnest(%s::bigint[], %s::text[], %s::text[]) "
                f"AS u(m, o, n) JOIN {t('entities')} e ON e.owner = u.o AND e.normalized = u.n "
                "ORDER BY 1, 2 ON CONFLICT DO NOTHING",
                ([p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs]),
            )
        sources: set[tuple[int, int]] = set()
        context: set[tuple[int, int]] = set()
        for rowid, (c, m) in zip(mem_ids, memories, strict=True):
            said = message_rowids[id(c)]
            sources.update((rowid, said[i]) for i in m.source_messages if i < len(said))
            context.update((rowid, said[i]) for i in m.context_messages if i < len(said))
            context.update((rowid, r) for r in m.context_rowids)
        for table, rows in (("memory_sources", sources), ("memory_context", context)):
            with cur.copy(f"COPY {t(table)} (memory_rowid, message_rowid) FROM STDIN") as copy:
                for row in sorted(rows):
                    copy.write_row(row)
        with cur.copy(
            f"COPY {t('history')} (rowid, memory_id, event, version, old_memory, new_memory, "
            "old_metadata, new_metadata, actor, reason, created_at, old_expires_at, "
            "new_expires_at) FROM STDIN"
        ) as copy:
            for rowid, (c, m) in zip(hist_ids, memories, strict=True):
                e = add_event(m, c.actor, stamp)
                copy.write_row(
                    (rowid, e.memory_id, e.event, e.version, e.old_memory, e.new_memory,
                     _json(e.old_metadata), _json(e.new_metadata), e.actor, e.reason,
                     _dt(e.created_at), _dt(e.old_expires_at), _dt(e.new_expires_at))
                )  # fmt: skip
    return n


def drop_index(url: str, schema: str) -> bool:
    """Drop the store's HNSW index (before a big load); whether it was there."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        found = con.execute(
            "SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = %s", (schema, INDEX)
        ).fetchone()
        con.execute(f'DROP INDEX IF EXISTS "{schema}".{INDEX}')
    return found is not None


def build_index(url: str, schema: str, maintenance_mem: str = "3GB", workers: int = 1) -> None:
    """Build the store's HNSW index again: the statement the store binds with, in memory."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        con.execute("SELECT set_config('maintenance_work_mem', %s, false)", (maintenance_mem,))
        con.execute(
            "SELECT set_config('max_parallel_maintenance_workers', %s, false)", (str(workers),)
        )
        con.execute(
            f'CREATE INDEX IF NOT EXISTS {INDEX} ON "{schema}".memories '
            "USING hnsw (embedding vector_cosine_ops)"
        )


def vacuum(url: str, schema: str) -> None:
    """``VACUUM (ANALYZE)`` the tables a load wrote (what autovacuum leaves after a while)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as con:
        for table in _TABLES:
            con.execute(f'VACUUM (ANALYZE) "{schema}".{table}')


# ------------------------------------------------------------ worker processes

_WORKER: dict[str, Any] = {}


def _init(url: str, schema: str, pool_path: str) -> None:
    from pathlib import Path

    import psycopg

    from engramdb_bench.scale import _embedder_from

    embedder = _embedder_from(Path(pool_path))
    config = {"provider": "postgres", "config": {"url": url, "collection_name": schema}}
    _WORKER["synth"] = embedder._synth
    _WORKER["capture"] = _Capturing(config, embedder)
    _WORKER["con"] = psycopg.connect(url)
    _WORKER["schema"] = schema


def _one(jobs: Jobs, call: int) -> int:
    calls = prepare(_WORKER["capture"], _WORKER["synth"], jobs, call)
    return copy_batch(_WORKER["con"], _WORKER["schema"], calls)


def run_copy_load(
    url: str,
    schema: str,
    pool_path: str,
    batches: Iterable[Jobs],
    workers: int,
    tick: Callable[[int], None],
    call: int = MAX_CALL,
) -> int:
    """Every batch prepared and copied by ``workers`` processes; the memories written.

    ``call`` is the API loader's messages per add call (where terms stop
    borrowing words from the message before).
    """
    added = 0
    with ProcessPoolExecutor(
        max(1, workers), get_context("spawn"), initializer=_init, initargs=(url, schema, pool_path)
    ) as pool:
        futures = {pool.submit(_one, list(jobs), call): sum(hi - lo for _, lo, hi in jobs)
                   for jobs in batches}  # fmt: skip
        for future in as_completed(futures):
            got = future.result()
            added += got
            tick(got)
    return added
