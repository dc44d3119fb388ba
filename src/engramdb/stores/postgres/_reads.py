"""The read and search flows of the PostgreSQL store."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from engramdb.core.bm25 import K1, B, best_score
from engramdb.core.filters import Node
from engramdb.core.records import TermStats
from engramdb.errors import ConflictError
from engramdb.stores.base import (
    Candidate,
    EmbeddingSource,
    MemoryRow,
    NewMessage,
    Scope,
    ScopeCounts,
    TermSource,
)
from engramdb.stores.kernel.candidates import Pool, narrowed
from engramdb.stores.kernel.rebind import mismatch_error
from engramdb.stores.kernel.rows import scope_counts
from engramdb.stores.kernel.sql import POSTGRES, scope_counts_query, source_messages_query
from engramdb.stores.postgres._sql import (
    _NCOLS,
    _Q,
    REPLICA_READ,
    Tx,
    _Cache,
    _FlowBase,
    _iso,
    _now,
    _Snapshot,
    lsn,
)

T = TypeVar("T")


@dataclass(frozen=True)
class KeywordRanking:
    """What :meth:`_ReadFlows.keyword_ranking` read: the top hits and the statistics."""

    hits: list[int]
    """Row ids, best first (ties by row id, the in-process index's insertion order)."""
    live: int
    """Documents the statistics count."""
    avgdl: float
    """Their mean length in terms."""
    df: dict[str, int]
    """Documents holding each query term (terms no document holds are absent)."""
    stat_df: dict[str, int] = field(default_factory=dict)
    """The same for the terms counted but not ranked (``stat_terms``)."""

    @staticmethod
    def empty() -> KeywordRanking:
        return KeywordRanking([], 0, 0.0, {})

    def idf(self, term: str) -> float:
        """Lucene's non-negative idf of ``term``, as core/bm25.py computes it."""
        df = self.df.get(term, 0)
        return math.log(1 + (self.live - df + 0.5) / (df + 0.5))

    def best(self, terms: Sequence[str]) -> float:
        """:meth:`BM25Index.best_score` over these statistics."""
        return best_score(terms, self.live, self.avgdl, lambda t: self.df.get(t, 0))


_POSITION = (
    "CASE WHEN pg_is_in_recovery() THEN 'r' || coalesce(pg_last_wal_replay_lsn(), '0/0')::text "
    "ELSE 'p' || pg_current_wal_insert_lsn()::text END"
)
"""Where the server is: a standby's replay position ('r…'), a primary's insert position ('p…').

Read after the snapshot, so an upper bound of what the snapshot shows."""


class _ReadFlows(_FlowBase):
    """The read transactions and the search."""

    # -- reads --------------------------------------------------------------------------------

    def failure(
        self, failure_id: int
    ) -> Tx[tuple[Scope, list[tuple[int, NewMessage]], bool] | None]:
        """A recorded failure: scope, ``(message id, message)`` pairs, resolved or not."""
        row = yield _Q(
            f"SELECT user_id, agent_id, run_id, resolved_at FROM {self.t('extraction_failures')} "
            "WHERE rowid = %s",
            (failure_id,),
            fetch="one",
        )
        if row is None:
            return None
        msgs = yield _Q(
            f"SELECT m.rowid, m.role, m.content, m.name, m.observed_at FROM {self.t('messages')} m "
            f"JOIN {self.t('failure_messages')} f ON f.message_rowid = m.rowid "
            "WHERE f.failure_rowid = %s ORDER BY m.rowid",
            (failure_id,),
        )
        return (
            Scope(row[0], row[1], row[2]),
            [(int(r[0]), NewMessage(r[1], r[2], r[3], _iso(r[4]))) for r in msgs],
            row[3] is not None,
        )

    def failures(self, scope: Scope, *, include_resolved: bool = False) -> Tx[list[dict[str, Any]]]:
        """Recorded extraction failures of a scope, newest first."""
        clause = " AND ".join(f"{k} = %s" for k, _ in scope.items())
        resolved = "" if include_resolved else " AND resolved_at IS NULL"
        rows = yield _Q(
            f"SELECT rowid, error, created_at, resolved_at, (SELECT count(*) FROM "
            f"{self.t('failure_messages')} f WHERE f.failure_rowid = e.rowid), reply FROM "
            f"{self.t('extraction_failures')} e WHERE {clause}{resolved} ORDER BY rowid DESC",
            [v for _, v in scope.items()],
        )
        return [
            {
                "id": int(r[0]),
                "error": r[1],
                "created_at": _iso(r[2]),
                "resolved_at": _iso(r[3]),
                "messages": int(r[4]),
                "reply": r[5],
            }
            for r in rows
        ]

    def recent_messages(self, scope: Scope, limit: int) -> Tx[list[NewMessage]]:
        """The last ``limit`` raw messages of a scope, oldest first."""
        clause = " AND ".join(f"{k} = %s" for k, _ in scope.items())
        rows = yield _Q(
            f"SELECT role, content, name, observed_at, rowid FROM {self.t('messages')} "
            f"WHERE {clause} ORDER BY rowid DESC LIMIT %s",
            [*(v for _, v in scope.items()), limit],
        )
        return [NewMessage(r[0], r[1], r[2], _iso(r[3]), rowid=int(r[4])) for r in reversed(rows)]

    def source_messages(self, memory_id: str, visible: Scope | None = None) -> Tx[list[NewMessage]]:
        """The messages ``memory_id`` was made from that ``visible`` may read, oldest first."""
        sql, params = source_messages_query(POSTGRES, self.t, memory_id, visible)
        rows = yield _Q(sql, params)
        return [NewMessage(r[1], r[2], r[3], _iso(r[4]), rowid=int(r[0])) for r in rows]

    def scope_counts(self, visible: Scope | None = None) -> Tx[ScopeCounts]:
        """Memories ``visible`` sees (``None``: all), counted per state, id and day."""
        scope_sql, scope_params = (
            self.scope_clause(visible) if visible is not None else ("TRUE", [])
        )
        sql, params = scope_counts_query(
            POSTGRES,
            self.t,
            scope_sql,
            scope_params,
            _now(),
            day="to_char(m.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
        )
        rows = yield _Q(sql, params)
        return scope_counts(rows)

    def existing_hashes(self, visible: Scope, hashes: Sequence[str]) -> Tx[set[str]]:
        """Which of ``hashes`` a live memory of ``owner`` already has."""
        if not hashes:
            return set()
        clause, params = self.scope_clause(visible)
        rows = yield _Q(
            f"SELECT DISTINCT m.hash FROM {self.t('memories')} m WHERE m.deleted_at IS NULL "
            f"AND m.hash = ANY(%s) AND {clause}",
            (list(hashes), *params),
        )
        return {r[0] for r in rows}

    def list_memories(
        self,
        scope: Scope,
        where: Node | None,
        *,
        limit: int,
        offset: int = 0,
        include_expired: bool = False,
    ) -> Tx[list[MemoryRow]]:
        """Live memories of a scope, newest first (ties by insertion order)."""
        sql, params = self.where(scope, where, include_expired)
        rows = yield _Q(
            f"SELECT {self.cols} FROM {self.t('memories')} m WHERE {sql} "
            "ORDER BY m.created_at DESC, m.rowid DESC LIMIT %s OFFSET %s",
            [*params, limit, offset],
        )
        return self.rows(rows)

    def count(self) -> Tx[int]:
        """Number of memory rows (deleted ones included)."""
        row = yield _Q(f"SELECT count(*) FROM {self.t('memories')}", fetch="one")
        return int(row[0])

    def change_mark(self) -> Tx[str]:
        """The current snapshot (``pg_current_snapshot()``, as text).

        A row stamped (``txid``) by a transaction that had not ended in it was
        written after the mark: the test the keyword caches catch up by.
        """
        row = yield _Q("SELECT pg_current_snapshot()::text", fetch="one")
        return str(row[0])

    def embedding_sources(self, after: int, limit: int) -> Tx[list[EmbeddingSource]]:
        """Up to ``limit`` memories with ``rowid > after``, in rowid order, deleted ones too."""
        rows = yield _Q(
            f"SELECT rowid, text, actor_id FROM {self.t('memories')} WHERE rowid > %s "
            "ORDER BY rowid LIMIT %s",
            (after, limit),
        )
        return [EmbeddingSource(int(r[0]), r[1], r[2]) for r in rows]

    def attribute_terms_version(self) -> Tx[str | None]:
        """The classifier whose reading the stored attribute terms hold (``meta``)."""
        row = yield _Q(
            f"SELECT value FROM {self.t('meta')} WHERE key = 'attribute_terms'", fetch="one"
        )
        return None if row is None else str(row[0])

    def term_sources(self, after: int, limit: int) -> Tx[list[TermSource]]:
        """Up to ``limit`` memories with ``rowid > after``: their terms and vector (one read)."""
        rows = yield _Q(
            f"SELECT rowid, terms, embedding FROM {self.t('memories')} WHERE rowid > %s "
            "ORDER BY rowid LIMIT %s",
            (after, limit),
        )
        return [
            TermSource(
                int(r[0]), r[1], None if r[2] is None else np.asarray(r[2], dtype=np.float32)
            )
            for r in rows
        ]

    def visible_ids(self, scope: Scope, memory_ids: Sequence[str]) -> Tx[set[str]]:
        """Which of ``memory_ids`` are memories ``scope`` sees (deleted ones included)."""
        if not memory_ids:
            return set()
        clause, params = self.scope_clause(scope)
        rows = yield _Q(
            f"SELECT m.id FROM {self.t('memories')} m WHERE m.id = ANY(%s) AND {clause}",
            (list(dict.fromkeys(memory_ids)), *params),
        )
        return {r[0] for r in rows}

    def export_chunk(self, after: int, size: int) -> Tx[tuple[int, list[dict[str, Any]]]]:
        raw = yield _Q(
            f"SELECT {self.cols}, m.embedding, m.terms FROM {self.t('memories')} m "
            "WHERE m.rowid > %s ORDER BY m.rowid LIMIT %s",
            (after, size),
        )
        if not raw:
            return after, []
        rows = self.rows(raw)
        out = []
        for r, row in zip(raw, rows, strict=True):
            out.append(
                {
                    "row": row,
                    "embedding": np.asarray(r[_NCOLS], dtype=np.float32),
                    "terms": r[_NCOLS + 1],
                    "history": (yield from self.history(row.id)),
                }
            )
        return int(raw[-1][0]), out

    # -- search ------------------------------------------------------------------------------

    def search_settings(self, k: int) -> _Q:
        ef = max(self.ef_search, min(1000, 2 * k))
        scan = ", set_config('hnsw.iterative_scan', 'relaxed_order', true)"
        return _Q(
            f"SELECT set_config('hnsw.ef_search', %s, true){scan if self.iterative_scan else ''}",
            (str(ef),),
            fetch="none",
        )

    def nearest(
        self,
        sql: str,
        params: list[Any],
        query: np.ndarray[Any, Any],
        k: int,
        *,
        full: bool = False,
    ) -> Tx[list[Any]]:
        """The ``k`` rows matching ``sql`` nearest to ``query``, nearest first.

        Rows are ``(rowid, distance)``, or with ``full`` the :attr:`cols` columns
        followed by the distance.
        """
        if k <= 0:
            return []
        vec = np.asarray(query, dtype=np.float32)
        out = (
            f"SELECT {self.cols}, h.d FROM hits h JOIN {self.t('memories')} m ON m.rowid = h.rowid"
            if full
            else "SELECT h.rowid, h.d FROM hits h"
        )
        yield self.search_settings(k)
        # The HNSW index with iterative scans; relaxed order is put right by the
        # outer sort.
        rows = yield _Q(
            "WITH hits AS MATERIALIZED (SELECT m.rowid, m.embedding <=> %s AS d FROM "
            f"{self.t('memories')} m WHERE {sql} AND m.embedding IS NOT NULL ORDER BY d LIMIT %s) "
            f"{out} ORDER BY h.d, h.rowid",
            [vec, *params, k],
        )
        if len(rows) < k:
            # Fewer than asked: either the scope has fewer, or the index scan gave up
            # early (a very selective filter). The exact query settles it; OFFSET 0
            # keeps the planner from using the index for the ORDER BY.
            rows = yield _Q(
                "WITH hits AS MATERIALIZED (SELECT rowid, d FROM (SELECT m.rowid, m.embedding "
                f"<=> %s AS d FROM {self.t('memories')} m WHERE {sql} AND m.embedding IS NOT NULL "
                f"OFFSET 0) x ORDER BY d, rowid LIMIT %s) {out} ORDER BY h.d, h.rowid",
                [vec, *params, k],
            )
        return list(rows)

    def rows_by_rowid(
        self,
        keys: Sequence[int],
        sql: str,
        params: list[Any],
        query: np.ndarray[Any, Any],
        *,
        keywords: KeywordRanking | None = None,
        vectors: bool = False,
    ) -> Tx[dict[int, tuple[MemoryRow, float, float, np.ndarray[Any, Any] | None]]]:
        """Rows among ``keys`` that match ``sql``: cosine similarity to ``query``, BM25, vector.

        BM25 (0 without ``keywords``) is computed from the postings with the
        ranking's statistics, as its top ``n`` was. With ``vectors`` the stored
        vector travels in pgvector's binary form (``vector_send``: no text to
        parse); without, None.
        """
        if not keys:
            return {}
        bm25, bm_params = "0", []
        if keywords is not None and keywords.live:
            terms = list(keywords.df)
            idf = [keywords.idf(t) for t in terms]
            bm25 = (
                f"coalesce((SELECT sum(w.idf * p.tf * {K1 + 1} / (p.tf + {K1} * ({1 - B} + "
                f"{B}::float8 * p.dl / %s::float8))) FROM {self.t('keyword_postings')} p JOIN "
                "unnest(%s::text[], %s::float8[]) AS w(term, idf) ON w.term = p.term "
                "WHERE p.memory_rowid = m.rowid), 0)"
            )
            bm_params = [max(keywords.avgdl, 1e-9), terms, idf]
        raw = yield _Q(
            f"SELECT {self.cols}, 1 - (m.embedding <=> %s), {bm25}, "
            f"{'vector_send(m.embedding)' if vectors else 'NULL'} "
            f"FROM {self.t('memories')} m "
            f"WHERE m.rowid = ANY(%s) AND {sql}",
            [np.asarray(query, dtype=np.float32), *bm_params, list(keys), *params],
        )
        rows = self.rows(raw)
        return {
            int(r[0]): (
                row,
                float(r[_NCOLS]) if r[_NCOLS] is not None else 0.0,
                float(r[_NCOLS + 1]),
                _unsent(r[_NCOLS + 2]),
            )
            for r, row in zip(raw, rows, strict=True)
        }

    def vector_search(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
        *,
        include_expired: bool = False,
    ) -> Tx[list[tuple[MemoryRow, float]]]:
        """The ``k`` live memories of the scope most similar to ``query`` (cosine)."""
        yield from self.guard_binding(write=False)
        sql, params = self.where(scope, where, include_expired)
        raw = yield from self.nearest(sql, params, query, k, full=True)
        return [(row, 1.0 - float(r[_NCOLS])) for r, row in zip(raw, self.rows(raw), strict=True)]

    def allowed(
        self, scope: Scope, where: Node | None, sql: str, params: list[Any]
    ) -> Tx[np.ndarray[Any, np.dtype[np.int64]] | None]:
        """Rowids a narrowed keyword search may return; None when the cache's scope is the scope."""
        if not narrowed(scope, where):
            return None
        rows = yield _Q(f"SELECT m.rowid FROM {self.t('memories')} m WHERE {sql}", params)
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def candidates(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        terms: Sequence[str],
        entities: Sequence[str],
        n: int,
        *,
        include_expired: bool = False,
        stat_terms: Sequence[str] = (),
        vectors: bool = False,
    ) -> Tx[list[Candidate]]:
        """Candidates for a query: the vector top ``n``, the BM25 top ``n``, entity links.

        BM25 ranks in SQL over the postings (:meth:`keyword_ranking`), or, with
        ``keyword_index = "process"``, in a per-process cache of the scope's
        terms (:meth:`catch_up`; the ranking before schema version 5).
        """
        sql, params = self.where(scope, where, include_expired)
        ranked: KeywordRanking | None = None
        cache: _Cache | None = None
        allowed: np.ndarray[Any, np.dtype[np.int64]] | None = None
        if self.keyword_index == "process":
            kind, value = scope.items()[0]
            cache = yield from self.catch_up(kind, value)
            if cache is None:
                return []  # nothing bound since the last reset: no vectors anywhere
            allowed = yield from self.allowed(scope, where, sql, params)
            if allowed is not None and allowed.size == 0:
                return []
        else:
            yield from self.guard_binding(write=False)
        sem = yield from self.nearest(sql, params, query, n)
        if cache is not None:
            pool = Pool(
                n, allowed, [int(r[0]) for r in sem], cache.bm25, terms, stat_terms=stat_terms
            )
            # What the keyword search kept (a term's postings as arrays) counts now.
            kind, value = scope.items()[0]
            self.account((kind, value), cache)
        else:
            ranked = yield from self.keyword_ranking(
                scope, where, sql, params, terms, n, stat_terms
            )
            pool = Pool(
                n,
                None,  # the rows read below are those the SQL allows
                [int(r[0]) for r in sem],
                None,
                terms,
                keyword_hits=ranked.hits,
                keyword_best=ranked.best(terms),
                stat_terms=stat_terms,
                term_stats=TermStats(ranked.live, ranked.stat_df),
            )
        if entities:
            # Every link of a memory that can end up in the pool: memories of
            # entities with at most n memories (the pool takes them), and the
            # vector and keyword hits. An entity linked to thousands of memories
            # is counted once, not listed whole.
            owner = "" if scope.user_id is None else " AND e.owner = %s"
            me = self.t("memory_entities")
            ents = yield _Q(
                f"WITH q AS (SELECT e.rowid, e.normalized FROM {self.t('entities')} e "
                f"WHERE e.normalized = ANY(%s){owner}), "
                f"d AS (SELECT q.rowid, q.normalized, (SELECT count(*) FROM {me} x "
                f"JOIN {self.t('memories')} m ON m.rowid = x.memory_rowid "
                f"WHERE x.entity_rowid = q.rowid AND {sql}) AS degree FROM q), "
                f"small AS (SELECT l.memory_rowid FROM {me} l JOIN d ON d.rowid = l.entity_rowid "
                "WHERE d.degree <= %s) "
                f"SELECT l.memory_rowid, d.normalized, d.degree FROM d JOIN {me} l ON "
                "l.entity_rowid = d.rowid WHERE d.degree <= %s OR l.memory_rowid = "
                "ANY(%s) OR l.memory_rowid IN (SELECT memory_rowid FROM small) "
                'ORDER BY d.normalized COLLATE "C", d.rowid, l.memory_rowid',
                (
                    list(entities),
                    *([scope.owner] if scope.user_id is not None else []),
                    *params,
                    n,
                    n,
                    pool.found_otherwise,
                ),
            )
            pool.link((int(m), name, int(degree)) for m, name, degree in ents)
        keys = pool.keys()
        if keys is None:
            return []
        found = yield from self.rows_by_rowid(
            [int(x) for x in keys], sql, params, query, keywords=ranked, vectors=vectors
        )
        hits = ((key, row, cosine) for key, (row, cosine, _, _) in found.items())
        stored = {key: vec for key, (_, _, _, vec) in found.items() if vec is not None}
        if ranked is None:
            return pool.build(keys, hits, vectors=stored or None)
        scores = {key: bm for key, (_, _, bm, _) in found.items() if bm > 0}
        return pool.build(keys, hits, keyword_scores=scores, vectors=stored or None)

    def keyword_ranking(
        self,
        scope: Scope,
        where: Node | None,
        sql: str,
        params: list[Any],
        terms: Sequence[str],
        n: int,
        stat_terms: Sequence[str] = (),
    ) -> Tx[KeywordRanking]:
        """BM25's top ``n`` for ``terms`` and its statistics, in one query.

        The statistics (``df``) also count ``stat_terms``, which do not rank.

        The statistics are those the in-process index takes (core/bm25.py):
        for a search of one user id, every live memory of the user (expired
        ones too), from the ``keyword_stats`` stripes and the postings of the
        query terms in the user's index range; for any other search
        (another id kind, several ids, a filter), the rows the search may
        return, read from ``memories``.
        """
        words = list(dict.fromkeys(terms))
        counted = list(dict.fromkeys([*words, *stat_terms]))
        if not counted or n <= 0:
            return KeywordRanking.empty()
        postings, stats = self.t("keyword_postings"), self.t("keyword_stats")
        kind, value = scope.items()[0]
        if kind == "user_id" and not narrowed(scope, where):
            head = (
                f"st AS MATERIALIZED (SELECT coalesce(sum(docs), 0)::float8 AS n, "
                f"coalesce(sum(length), 0)::float8 AS len FROM {stats} WHERE user_id = %s), "
                f"post AS MATERIALIZED (SELECT p.memory_rowid, p.term, p.tf, p.dl FROM {postings} "
                "p WHERE p.user_id = %s AND p.term = ANY(%s))"
            )
            head_params: list[Any] = [value, value, counted]
        else:
            if narrowed(scope, where):
                pop, pop_params = sql, params
            else:  # an agent or run id alone: its live memories, attached ones too
                member = (
                    f"(m.{kind} = %s OR m.rowid IN (SELECT memory_rowid FROM "
                    f"{self.t('memory_scope')} WHERE kind = %s AND value = %s))"
                )
                pop, pop_params = f"m.deleted_at IS NULL AND {member}", [value, kind, value]
            head = (
                f"pop AS MATERIALIZED (SELECT m.rowid FROM {self.t('memories')} m WHERE {pop}), "
                "st AS MATERIALIZED (SELECT count(*)::float8 AS n, coalesce(sum(p.tf), 0)::float8 "
                f"AS len FROM pop JOIN {postings} p ON p.memory_rowid = pop.rowid "
                "AND p.term = ''), "
                "post AS MATERIALIZED (SELECT p.memory_rowid, p.term, p.tf, p.dl FROM pop JOIN "
                f"{postings} p ON p.memory_rowid = pop.rowid AND p.term = ANY(%s))"
            )
            head_params = [*pop_params, counted]
        row = yield _Q(
            f"WITH {head}, "
            "df AS (SELECT term, count(*)::float8 AS df FROM post GROUP BY term), "
            "w AS MATERIALIZED (SELECT df.term, df.df, ln(1 + (st.n - df.df + 0.5) / "
            "(df.df + 0.5)) AS idf, greatest(st.len / st.n, 1e-9) AS avgdl FROM df, st "
            "WHERE st.n > 0), "
            # {B}::float8: a bare 0.75 * p.dl is numeric arithmetic per posting (the
            # same value, as 0.75 * dl is exact in both; a quarter of its time at 100k).
            f"hits AS (SELECT p.memory_rowid, sum(w.idf * p.tf * {K1 + 1} / (p.tf + {K1} * "
            f"({1 - B} + {B}::float8 * p.dl / w.avgdl))) AS s FROM post p "
            "JOIN w ON w.term = p.term WHERE p.term = ANY(%s) "
            "GROUP BY p.memory_rowid ORDER BY s DESC, p.memory_rowid LIMIT %s) "
            "SELECT (SELECT n FROM st), (SELECT len FROM st), "
            "(SELECT array_agg(term) FROM w), (SELECT array_agg(df) FROM w), "
            "(SELECT array_agg(memory_rowid ORDER BY s DESC, memory_rowid) FROM hits)",
            [*head_params, words, n],
            fetch="one",
        )
        live = int(row[0] or 0)
        counts = {t: int(d) for t, d in zip(row[2] or [], row[3] or [], strict=True)}
        return KeywordRanking(
            hits=[int(x) for x in row[4] or []],
            live=live,
            avgdl=float(row[1]) / live if live else 0.0,
            df={t: d for t, d in counts.items() if t in words},
            stat_df={t: counts[t] for t in stat_terms if t in counts},
        )

    def check_binding(self, model: str | None, dim: str | None) -> bool:
        """Whether the store is bound; raises if it is bound to another embedder than ours."""
        if model is None:
            return False
        if self.binding is not None and (model, str(self.binding[1])) != (self.binding[0], dim):
            raise mismatch_error(f"PostgreSQL schema {self.schema!r}", (model, dim), self.binding)
        return True

    def catch_up(self, kind: str, value: str) -> Tx[_Cache | None]:
        """The keyword cache of one primary scope id, caught up with this snapshot.

        One query: its first row (rowid -1) carries the epoch, the snapshot,
        the binding and the server's WAL position; the others are the
        scope's rows stamped by transactions that had not ended at the
        cache's last snapshot. None when no embedder is bound (nothing to
        search).

        On a read replica (a hot standby) the snapshot proves less (see
        :meth:`_Snapshot.horizon`), and a replica that has not replayed what
        the cache already holds (read from the primary, or from a replica
        further ahead) leaves it as it is rather than move it backwards.
        """
        key = (kind, value)
        if kind == "user_id":
            member, params = "m.user_id = %s", [value]
        else:
            member = (
                f"(m.{kind} = %s OR m.rowid IN (SELECT memory_rowid FROM "
                f"{self.t('memory_scope')} WHERE kind = %s AND value = %s))"
            )
            params = [value, kind, value]
        meta = self.t("meta")
        head = (
            f"SELECT -1, NULL, (SELECT value FROM {meta} WHERE key = 'epoch'), "
            "pg_current_snapshot()::text, "
            f"(SELECT value FROM {meta} WHERE key = 'embedder_model'), "
            f"(SELECT value FROM {meta} WHERE key = 'embedder_dim'), {_POSITION} UNION ALL "
        )
        reading = REPLICA_READ.get()
        full = False
        for _ in range(3):
            with self.caches.lock:
                known = self.caches.get(key)
                since = known.snapshot if known is not None and not full else None
                behind = (
                    reading is not None
                    and known is not None
                    and since is not None
                    and reading.at < known.lsn
                )
            changed: list[Any] = []
            if behind:
                changed_sql = "FALSE"
            elif since is None:
                changed_sql = "TRUE"
            elif since.xip:
                changed_sql = "(m.txid >= %s::xid8 OR m.txid = ANY(%s::xid8[]))"
                changed = [str(since.xmax), [str(x) for x in sorted(since.xip)]]
            else:
                changed_sql, changed = "m.txid >= %s::xid8", [str(since.xmax)]
            rows = yield _Q(
                f"{head}SELECT m.rowid, m.deleted_at IS NULL, m.terms, NULL, NULL, NULL, NULL "
                f"FROM {self.t('memories')} m WHERE {changed_sql} AND {member} "
                # Row order is the index's tie order (BM25Index breaks equal scores by
                # insertion): rowid order, as SQLite's catch-up reads them.
                "ORDER BY 1",
                [*changed, *params],
            )
            top = next(r for r in rows if r[0] == -1)
            if not self.check_binding(top[4], top[5]):
                return None
            epoch, position = str(top[2]), str(top[6])
            at = lsn(position[1:])
            if position[0] == "r":
                snap = _Snapshot.horizon(top[3])
                if reading is not None:
                    reading.replayed = max(reading.replayed, at)
            else:
                snap = _Snapshot.parse(top[3])
            found = [r for r in rows if r[0] != -1]
            with self.caches.lock:
                self.caught_up_rows += len(found)
                # A newer epoch (purge, reset) drops every cache: what it erased
                # cannot be read as a change.
                if epoch != self.caches.see(epoch):
                    # This snapshot predates a purge another thread has seen: serve
                    # it from a private cache, filled whole, and keep the shared ones.
                    if since is None:
                        return self._apply(_Cache(), found, snap, at)
                    full = True
                    continue
                cache = self.caches.get(key)
                if cache is None:
                    if since is not None:
                        continue  # dropped meanwhile: read it whole
                    cache = self.caches.put(key, _Cache())
                if behind:
                    if cache is not known:
                        continue  # replaced meanwhile: look again
                    # (served as it is: it holds more than this replica has replayed)
                elif cache.snapshot is since:
                    self._apply(cache, found, snap if since is None else since.union(snap), at)
                elif cache.snapshot is None or not cache.snapshot.covers(snap):
                    continue  # moved meanwhile, not past our snapshot: read from there
                # (else: another thread caught up from a newer snapshot; it wins)
                self.caches.touch(key)
                # An O(1) estimate; what the last search cached (postings) counts now.
                self.caches.account(key, cache, cache.nbytes(), cache.size())
                self.caches.evict()
                return cache
        raise ConflictError("the keyword index kept being reset while it was read; search again")

    def account(self, key: tuple[str, str], cache: _Cache) -> None:
        """Count ``cache``'s bytes as they are now (if it is still ``key``'s), then evict."""
        nbytes, size = cache.nbytes(), cache.size()  # O(1), outside the table lock
        with self.caches.lock:
            self.caches.account(key, cache, nbytes, size)
            self.caches.evict()

    @staticmethod
    def _apply(cache: _Cache, rows: Sequence[Sequence[Any]], snap: _Snapshot, at: int) -> _Cache:
        live = [r for r in rows if r[1]]
        cache.apply(
            [int(r[0]) for r in rows if not r[1]],
            [int(r[0]) for r in live],
            [r[2].split() for r in live],
        )
        cache.snapshot = snap
        cache.lsn = max(cache.lsn, at)
        return cache


def _unsent(data: bytes | None) -> np.ndarray[Any, np.dtype[np.float32]] | None:
    """A vector from pgvector's binary send form: int16 dim, int16 unused, big-endian floats."""
    if data is None:
        return None
    return np.frombuffer(bytes(data), dtype=">f4", offset=4).astype(np.float32)
