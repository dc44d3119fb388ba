"""The search of the SQLite store, with its in-process per-scope caches and their catch-up."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from engramdb.core.filters import Node
from engramdb.core.records import TermStats
from engramdb.core.vectors import CompactVectorIndex, VectorIndex
from engramdb.stores.base import Candidate, MemoryRow, Scope
from engramdb.stores.kernel.candidates import Pool, adds_candidates, narrowed
from engramdb.stores.sqlite import _keywords, _vectors
from engramdb.stores.sqlite._base import _COLS, _META, F32, RowMemo, _Cache, _chunks, _Store
from engramdb.stores.sqlite._keywords import KeywordRanking

_Memo = tuple[RowMemo, int, str | None]
"""A search's view of its cache's row memo: the memo, the ``seq`` the search
started from, and the time expiry is judged at (None: expired rows count)."""


def _memo_for(
    cache: _Cache, scope: Scope, where: Node | None, include_expired: bool, params: list[Any]
) -> _Memo | None:
    """The row memo when a search may use it: over the cache's whole scope, no filter.

    ``params`` are those of :meth:`_Store._where`, whose first is the time
    expiry is judged at unless ``include_expired``.
    """
    if narrowed(scope, where):
        return None
    return cache.rows, cache.seq, None if include_expired else str(params[0])


# A metadata filter is checked on each index's top n·8, then n·32 (the
# post-filter rounds of _post_filtered); a filter that keeps too little of
# the scope for that (under ~3 %) takes the scan instead (_allowed).
_FIRST_WIDTH = 8
_WIDEN = 4
_ROUNDS = 2
_MARGIN = 1.5  # widen only when the next round should keep 1.5n
# Rowid sets of filters and second scope ids kept until the next write (_allowed_kept).
_KEPT_SETS = 16
# Rows a cache's catch-up reads and applies at a time (_catch_up).
_CATCH_UP_ROWS = 4096


class _Search(_Store):
    """Search (vector hits, candidates), and the catch-up of the per-scope caches."""

    # How a narrowed search finds the rowids it may return. "auto": the scan
    # of _allowed, its result kept until the next write (_allowed_kept).
    # "legacy": the scan on every search (the path before). "post": check a
    # metadata filter on each index's top hits (_post_filtered), scanning only
    # for selective filters, with BM25 counted over the scope, not the filter;
    # "exact": the scan with those statistics, post's reference. Measured in
    # docs/benchmarks.md ("Filtered search"): "post" loses to "auto" at 100k.
    # Only benchmarks and tests change it.
    _filtered_path: str = "auto"

    def _scope_cache(self, scope: Scope) -> _Cache | None:
        """The caught-up cache for the scope's primary id; None before any vector exists."""
        kind, value = scope.items()[0]
        return self._refresh(kind, value)

    def _allowed(
        self, con: sqlite3.Connection, scope: Scope, where: Node | None, sql: str, params: list[Any]
    ) -> np.ndarray[Any, np.dtype[np.int64]] | None:
        """Rowids a narrowed search may return; None when the cache's scope is the scope."""
        if not narrowed(scope, where):
            return None
        return np.fromiter(
            (r[0] for r in con.execute(f"SELECT m.rowid FROM memories m WHERE {sql}", params)),
            dtype=np.int64,
        )

    def _allowed_kept(
        self,
        con: sqlite3.Connection,
        cache: _Cache,
        scope: Scope,
        where: Node | None,
        sql: str,
        params: list[Any],
        include_expired: bool,
    ) -> np.ndarray[Any, np.dtype[np.int64]] | None:
        """:meth:`_allowed`, kept for as long as nothing is written.

        The set is that of the cache's state (its scope id, ``epoch`` and
        ``seq``), so any write, which bumps ``seq``, makes the next search scan
        again; until then a repeated filter costs a dictionary look-up. A row
        that expires meanwhile stays in the set and is dropped when the hits
        are read (the SQL there checks liveness at the time of the search).
        """
        if not narrowed(scope, where) or self._filtered_path == "legacy":
            return self._allowed(con, scope, where, sql, params)
        kind, value = scope.items()[0]
        # The first parameter of a live-only search is the time: not part of the key.
        rest = repr(params[0 if include_expired else 1 :])
        key = (kind, value, cache.epoch, cache.seq, sql, rest)
        kept: OrderedDict[Any, np.ndarray[Any, np.dtype[np.int64]]]
        kept = self.__dict__.setdefault("_allowed_sets", OrderedDict())
        lock: threading.Lock = self.__dict__.setdefault("_allowed_lock", threading.Lock())
        with lock:
            found = kept.get(key)
            if found is not None:
                kept.move_to_end(key)
                return found
        found = self._allowed(con, scope, where, sql, params)
        assert found is not None
        found.setflags(write=False)
        with lock:
            kept[key] = found
            while len(kept) > _KEPT_SETS:
                kept.popitem(last=False)
        return found

    def _matching(
        self, con: sqlite3.Connection, keys: Sequence[int], sql: str, params: list[Any]
    ) -> set[int]:
        """Which of ``keys`` the search's SQL (scope, filter, liveness) keeps."""
        found: set[int] = set()
        for chunk in _chunks(list(keys), 2_000):
            # NOT INDEXED: rowid look-ups, as in _rows_by_rowid.
            found.update(
                r[0]
                for r in con.execute(
                    f"SELECT m.rowid FROM memories m NOT INDEXED WHERE m.rowid IN "
                    f"({','.join('?' * len(chunk))}) AND {sql}",
                    [*chunk, *params],
                )
            )
        return found

    def _post_filtered(
        self,
        con: sqlite3.Connection,
        cache: _Cache,
        query: np.ndarray[Any, np.dtype[np.float32]],
        terms: Sequence[str] | None,
        n: int,
        scope_keys: np.ndarray[Any, np.dtype[np.int64]] | None,
        sql: str,
        params: list[Any],
    ) -> tuple[list[int], list[int]] | None:
        """The vector and BM25 top ``n`` that pass a metadata filter, found without its scan.

        Takes each index's top ``8n`` over the scope (``scope_keys``, None for
        the cache's own), checks the filter in SQL on those rowids only, and
        widens 4-fold while fewer than ``n`` survive and the index has more. The
        survivors, in index order, are then exactly the top ``n`` among the
        matching memories. None when the filter is too selective for that to
        pay (estimated matches under the widths tried): the caller scans.
        ``terms`` None: the vector side only.
        """
        width = n * _FIRST_WIDTH
        checked: set[int] = set()
        matched: set[int] = set()
        for round_ in range(_ROUNDS):
            sem, _ = cache.index.search(query, width, allowed=scope_keys)
            sem_l = sem.tolist()
            kw_l: list[int] = []
            if terms is not None:
                kw, _ = cache.bm25.search(terms, width, allowed=scope_keys, population=scope_keys)
                kw_l = kw.tolist()
            fresh = [k for k in dict.fromkeys([*sem_l, *kw_l]) if k not in checked]
            matched |= self._matching(con, fresh, sql, params)
            checked.update(fresh)
            sem_ok = [k for k in sem_l if k in matched]
            kw_ok = [k for k in kw_l if k in matched]
            sem_done = len(sem_ok) >= n or len(sem_l) < width
            kw_done = terms is None or len(kw_ok) >= n or len(kw_l) < width
            if sem_done and kw_done:
                return sem_ok[:n], kw_ok[:n]
            share = len(matched) / max(1, len(checked))
            # Widen only when the next width is likely to be enough.
            if round_ + 1 == _ROUNDS or share * width * _WIDEN < n * _MARGIN:
                return None
            width *= _WIDEN
        return None

    def vector_search(
        self,
        scope: Scope,
        where: Node | None,
        query: np.ndarray[Any, np.dtype[np.float32]],
        k: int,
        *,
        include_expired: bool = False,
    ) -> list[tuple[MemoryRow, float]]:
        """The ``k`` live memories of the scope most similar to ``query`` (cosine)."""
        cache = self._scope_cache(scope)
        if cache is None:
            return []
        sql, params = self._where(scope, where, include_expired)
        with self._read() as con:
            post = where is not None and self._filtered_path == "post"
            if post:
                # A metadata filter: search the scope, check the filter on the hits.
                allowed = self._scope_keys(con, cache, scope, include_expired)
            else:
                allowed = self._allowed_kept(con, cache, scope, where, sql, params, include_expired)
            if allowed is not None and allowed.size == 0:
                return []
            want = k * _FIRST_WIDTH if post else k
            while True:
                keys, scores = cache.index.search(query, want, allowed=allowed)
                if keys.size == 0:
                    return []
                found = self._rows_by_rowid(con, keys, sql, params)
                hits = [
                    (found[int(key)], float(score))
                    for key, score in zip(keys, scores, strict=True)
                    if int(key) in found
                ]
                # Rows expired or deleted since the cache last caught up are dropped by
                # the SQL above; ask for more until k survive or the scope runs out.
                if len(hits) >= k or keys.size < want:
                    return hits[:k]
                if post and (
                    want >= k * _FIRST_WIDTH * _WIDEN ** (_ROUNDS - 1)
                    or len(found) / keys.size * want * _WIDEN < k * _MARGIN
                ):
                    # Too selective to post-filter: scan for the filter's rowids.
                    post = False
                    allowed = self._allowed_kept(
                        con, cache, scope, where, sql, params, include_expired
                    )
                    if allowed is None or allowed.size == 0:
                        return []
                    want = k
                    continue
                want *= _WIDEN if post else 2

    def _scope_keys(
        self, con: sqlite3.Connection, cache: _Cache, scope: Scope, include_expired: bool
    ) -> np.ndarray[Any, np.dtype[np.int64]] | None:
        """Rowids of the scope without its filter; None when the cache's scope is the scope."""
        sql, params = self._where(scope, None, include_expired)
        return self._allowed_kept(con, cache, scope, None, sql, params, include_expired)

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
    ) -> list[Candidate]:
        """Candidates for a query: the vector top ``n``, the BM25 top ``n``, entity links.

        Only live memories in scope; the memories linked to the query's
        (normalised) entities are included; each carries the scope's statistics
        of ``stat_terms`` (:class:`~engramdb.core.records.TermStats`) and, with
        ``vectors``, its stored vector.

        Memories of an entity linked to more than ``n`` memories are not added
        as candidates (such an entity says little about any one of them); they
        still count for candidates found otherwise.
        """
        cache = self._scope_cache(scope)
        if cache is None:
            return []
        sql, params = self._where(scope, where, include_expired)
        in_file = self.keyword_index == "database"
        ranked: KeywordRanking | None = None
        with self._read() as con:
            mode = self._filtered_path
            got: tuple[list[int], list[int]] | None = None
            if in_file and mode == "post":
                # The ranking in the file is exact over any population: what "post"
                # would approximate for the keywords is what "exact" computes.
                mode = "exact"
            if where is not None and mode in ("post", "exact"):
                # BM25's statistics over the visible scope; the filter only narrows
                # what is returned (what post-filtering can compute).
                population = self._scope_keys(con, cache, scope, include_expired)
                if population is not None and population.size == 0:
                    return []
                if mode == "post":
                    got = self._post_filtered(con, cache, query, terms, n, population, sql, params)
                allowed = population
                if got is None:
                    allowed = self._allowed_kept(
                        con, cache, scope, where, sql, params, include_expired
                    )
            else:
                allowed = self._allowed_kept(con, cache, scope, where, sql, params, include_expired)
                population = allowed
            if allowed is not None and allowed.size == 0:
                return []
            if in_file:
                ranked = self._keyword_ranking(
                    con, scope, terms, n, allowed, population, stat_terms
                )
                sem_keys, _ = cache.index.search(query, n, allowed=allowed)
                pool = Pool(
                    n,
                    allowed,
                    sem_keys.tolist(),
                    None,
                    terms,
                    keyword_hits=ranked.hits,
                    keyword_best=ranked.best(terms),
                    stat_terms=stat_terms,
                    term_stats=TermStats(ranked.live, ranked.stat_df),
                )
            elif got is not None:
                pool = Pool(
                    n,
                    allowed,
                    got[0],
                    cache.bm25,
                    terms,
                    population=population,
                    keyword_hits=got[1],
                    stat_terms=stat_terms,
                )
            else:
                sem_keys, _ = cache.index.search(query, n, allowed=allowed)
                pool = Pool(
                    n,
                    allowed,
                    sem_keys.tolist(),
                    cache.bm25,
                    terms,
                    population=population,
                    stat_terms=stat_terms,
                )
            if entities:
                marks = ",".join("?" * len(entities))
                # A user's memories only link to that user's entities (the owner key).
                owner_sql, owner_params = (
                    (" AND e.owner = ?", [scope.owner]) if scope.user_id is not None else ("", [])
                )
                named = con.execute(
                    f"SELECT e.rowid, e.normalized FROM entities e "
                    f"WHERE e.normalized IN ({marks}){owner_sql}",
                    [*entities, *owner_params],
                ).fetchall()
                ents = self._degrees(con, cache, named, sql, params, include_expired)
                links: list[tuple[int, str, int]] = []
                for erow, name, degree in ents:
                    if adds_candidates(degree, n):
                        found_links = con.execute(
                            "SELECT memory_rowid FROM memory_entities WHERE entity_rowid = ?",
                            (erow,),
                        ).fetchall()
                    else:
                        # Too common to add candidates: only mark those found otherwise.
                        found_links = []
                        for chunk in _chunks(pool.found_otherwise, 500):
                            found_links += con.execute(
                                "SELECT memory_rowid FROM memory_entities WHERE entity_rowid = ? "
                                f"AND memory_rowid IN ({','.join('?' * len(chunk))})",
                                (erow, *chunk),
                            ).fetchall()
                    links += [(mrow, name, degree) for (mrow,) in found_links]
                pool.link(links)
            keys = pool.keys()
            if keys is None:
                return []
            # Entity links may point outside the scope: the SQL of _rows_by_rowid
            # (scope, filters, liveness) decides what survives. Vectors are in this
            # process: the cosine of every candidate comes from the index.
            cos_keys, cos = cache.index.cosines(query, keys)
            stored = None
            if vectors:
                vec_keys, vecs = cache.index.vectors(cos_keys)
                stored = dict(zip(vec_keys.tolist(), vecs, strict=True))
            found = self._rows_by_rowid(
                con, keys, sql, params, memo=_memo_for(cache, scope, where, include_expired, params)
            )
        # The rows and degrees this search kept in the cache's memos count now.
        self._account(scope.items()[0], cache)
        cosine = dict(zip(cos_keys.tolist(), cos.tolist(), strict=True))
        hits = ((key, row, cosine.get(key, 0.0)) for key, row in found.items())
        if ranked is not None:
            return pool.build(keys, hits, keyword_scores=ranked.scores_of(keys), vectors=stored)
        return pool.build(keys, hits, vectors=stored)

    def _keyword_ranking(
        self,
        con: sqlite3.Connection,
        scope: Scope,
        terms: Sequence[str],
        n: int,
        allowed: np.ndarray[Any, np.dtype[np.int64]] | None,
        population: np.ndarray[Any, np.dtype[np.int64]] | None,
        stat_terms: Sequence[str] = (),
    ) -> KeywordRanking:
        """BM25's top ``n`` over the postings in the file (``keyword_index = "database"``).

        The statistics are those the per-process index takes: ``population``
        when the search passes one, else every live memory of the primary
        id (expired ones too): a user's from ``keyword_stats``, an agent's or
        a run's (attached sessions too) listed here. ``allowed`` narrows
        what is returned.
        """
        kind, value = scope.items()[0]
        if kind == "user_id":
            keys = [f"user:{value}"]
        else:
            if population is None:
                member = (
                    f"(m.{kind} = ? OR m.rowid IN (SELECT memory_rowid FROM memory_scope "
                    "WHERE kind = ? AND value = ?))"
                )
                listed = con.execute(
                    f"SELECT m.rowid, {_keywords.KEY_SQL} FROM memories m "
                    f"WHERE m.deleted_at IS NULL AND {member}",
                    [value, kind, value],
                ).fetchall()
                population = np.array([r for r, _ in listed], dtype=np.int64)
                keys = sorted({str(k) for _, k in listed})
            else:
                keys = [
                    str(k)
                    for (k,) in con.execute(
                        f"SELECT DISTINCT {_keywords.KEY_SQL} FROM memories m "
                        "WHERE m.rowid IN (SELECT value FROM json_each(?))",
                        (json.dumps(population.tolist()),),
                    )
                ]
        return _keywords.rank(
            con,
            keys,
            terms,
            n,
            population=population,
            allowed=None if allowed is population else allowed,
            stat_terms=stat_terms,
        )

    def _degrees(
        self,
        con: sqlite3.Connection,
        cache: _Cache,
        found: list[tuple[int, str]],
        sql: str,
        params: list[Any],
        include_expired: bool,
    ) -> list[tuple[int, str, int]]:
        """``(entity rowid, name, degree)``: how many memories ``sql`` admits link to each.

        Counting is most of a search at 100k memories when the query names a
        common entity (7.6 of 18 ms), and the next queries name the same
        people: the counts are kept in the cache's :class:`DegreeMemo` for its
        ``meta.seq``, by the entity and the search's conditions (expiry aside:
        a memory that expires before the next write still counts, as in the
        kept rowid sets of :meth:`_allowed_kept`).
        """
        memo, seq = cache.degrees, cache.seq
        # The time expiry is judged at is the first parameter unless expired rows count.
        conditions = (sql, tuple(params if include_expired else params[1:]))
        degrees: dict[int, int] = {}
        todo = []
        for erow, _name in found:
            known = memo.get((conditions, erow))
            if known is None:
                todo.append(erow)
            else:
                degrees[erow] = known
        for chunk in _chunks(todo, 500):
            # NOT INDEXED: the links drive, each row read by rowid; without
            # statistics SQLite would scan the user's index once per entity
            # as soon as a filter joins the conditions (70 ms at 100k).
            counted = con.execute(
                "SELECT e.rowid, (SELECT count(*) FROM memory_entities x "
                "JOIN memories m NOT INDEXED ON m.rowid = x.memory_rowid "
                f"WHERE x.entity_rowid = e.rowid AND {sql}) FROM entities e "
                f"WHERE e.rowid IN ({','.join('?' * len(chunk))})",
                [*params, *chunk],
            ).fetchall()
            degrees.update(counted)
            memo.put(seq, [((conditions, erow), degree) for erow, degree in counted])
        return [(erow, name, degrees[erow]) for erow, name in found]

    def _rows_by_rowid(
        self,
        con: sqlite3.Connection,
        keys: np.ndarray[Any, np.dtype[np.int64]],
        sql: str,
        params: list[Any],
        *,
        memo: _Memo | None = None,
    ) -> dict[int, MemoryRow]:
        """The rows among ``keys`` that ``sql`` admits, by row id, in row id order.

        With a ``memo`` (a search over its cache's whole scope), the rows it
        keeps come from it, checked for deletion and expiry, and only the
        others are read, then kept.
        """
        found: dict[int, MemoryRow] = {}
        todo = sorted(int(x) for x in keys)
        if memo is not None:
            rows, _seq, now = memo
            missing = []
            for key in todo:
                row = rows.get(key)
                if row is None:
                    missing.append(key)
                elif row.deleted_at is None and (
                    now is None or row.expires_at is None or row.expires_at > now
                ):
                    found[key] = row
            todo = missing
        for chunk in _chunks(todo, 500):
            # NOT INDEXED: look the rows up by rowid; without statistics SQLite
            # would otherwise scan the scope's index for the other conditions.
            raw = con.execute(
                f"SELECT {_COLS} FROM memories m NOT INDEXED WHERE m.rowid IN "
                f"({','.join('?' * len(chunk))}) AND {sql}",
                [*chunk, *params],
            ).fetchall()
            read = [(int(r[0]), row) for r, row in zip(raw, self._hydrate(con, raw), strict=True)]
            found.update(read)
            if memo is not None:
                memo[0].keep(memo[1], read)
        if memo is not None and todo:
            found = dict(sorted(found.items()))
        return found

    def _refresh(self, kind: str, value: str) -> _Cache | None:
        """The cache for one primary scope id, caught up with every committed write.

        The common case costs one read of ``meta`` and no lock held across
        I/O: the cache is current. Otherwise the scope's own lock serialises
        its catch-up, so a cold or slow scope never holds up searches of
        other scopes (the store-wide lock only guards the dict).
        """
        con = self._conn()
        with self._translate():
            meta = dict(con.execute(_META).fetchall())
        bound = self._bound_in(meta)
        if bound is None:
            return None  # nothing bound since the last reset: no vectors anywhere
        epoch, seq = meta["epoch"], int(meta["seq"])
        key = (kind, value)
        table = self._table
        with table.lock:
            newest = table.see(epoch)
            cache = table.get(key)
            if (
                cache is None
                or cache.epoch != epoch
                or cache.index.dim != bound[1]
                or self._outgrown(cache, meta)
            ):
                cache = _Cache(bound[1], epoch)
                if epoch == newest:
                    table.put(key, cache)
            else:
                table.touch(key)
            current_already = cache.seq >= seq
        if current_already:
            # What the last searches kept (row memos, cached postings) counts now.
            self._account(key, cache)
            return cache
        with cache.lock:
            current = self._catch_up(cache, kind, value)
        if self._outgrown(current, meta):
            # This catch-up took the scope past the compact index's size: load it compact.
            fresh = _Cache(current.index.dim, current.epoch)
            with fresh.lock:
                current = self._catch_up(fresh, kind, value)
        with table.lock:
            if current is not cache and current.epoch == table.see(current.epoch):
                table.put(key, current)
        self._account(key, current)
        return current

    @staticmethod
    def _outgrown(cache: _Cache, meta: dict[str, str]) -> bool:
        """Whether a full-vector cache has grown to the compact index's size in a fitted file.

        Its next search loads it again, compact (``_vectors``): a scope that
        grew past :data:`_vectors.COMPACT_AT` in a long-lived process does not
        keep its float32 vectors in memory.
        """
        return (
            "vector_basis" in meta
            and isinstance(cache.index, VectorIndex)
            and len(cache.index) >= _vectors.COMPACT_AT
        )

    def _fetch_vectors(
        self, keys: np.ndarray[Any, np.dtype[np.int64]]
    ) -> tuple[np.ndarray[Any, np.dtype[np.int64]], np.ndarray[Any, np.dtype[np.float32]]]:
        """The stored float32 vectors of ``keys``: a compact index's exact re-score.

        On this thread's connection, so inside a search's read transaction it
        reads that snapshot. What one read transaction fetched is kept until
        the thread's next one: a search asks twice (its vector hits, then the
        cosines of every candidate), mostly for the same rows.
        """
        reads = getattr(self._local, "reads", 0)
        memo: dict[int, np.ndarray[Any, np.dtype[np.float32]]]
        kept = getattr(self._local, "fetched", None)
        memo = kept[1] if kept is not None and kept[0] == reads else {}
        wanted = keys.tolist()
        missing = np.array([k for k in wanted if k not in memo], dtype=np.int64)
        if missing.size:
            with self._translate():
                found, vecs = _vectors.fetch(self._conn(), missing)
            memo.update(zip(found.tolist(), vecs, strict=True))
        self._local.fetched = (reads, memo)
        got = [k for k in wanted if k in memo]
        if not got:
            return np.empty(0, np.int64), np.empty((0, 0), np.float32)
        return np.array(got, dtype=np.int64), np.stack([memo[k] for k in got])

    def _account(self, key: tuple[str, str], cache: _Cache) -> None:
        """Count ``cache``'s bytes as they are now, then evict what the bounds do not hold.

        Measured outside the table lock (an O(1) estimate, :meth:`_Cache.nbytes`).
        """
        nbytes, size = cache.nbytes(), cache.size()
        table = self._table
        with table.lock:
            table.account(key, cache, nbytes, size)
            if table.over():
                table.evict()

    def _catch_up(self, cache: _Cache, kind: str, value: str) -> _Cache:
        """Under ``cache.lock``: apply the rows changed since ``cache.seq``; returns the cache.

        ``meta`` and the rows are read in one snapshot, so the cache ends
        exactly at a committed state. If that snapshot is of another epoch (a
        purge or reset since the caller looked) or another binding, a new
        cache is filled from scratch instead and returned.
        """
        if kind == "user_id":
            # Catching up, the seq range drives (memories_seq): the unary + keeps
            # SQLite, which has no statistics, off the user's index, which would
            # read the whole user after any write to the file (30 ms at 100k).
            # A first fill reads the user through that index.
            member = "m.user_id = ?" if cache.seq == 0 else "+m.user_id = ?"
            params: list[Any] = [value]
        else:
            member = (
                f"(m.{kind} = ? OR m.rowid IN (SELECT memory_rowid FROM memory_scope "
                "WHERE kind = ? AND value = ?))"
            )
            params = [value, kind, value]
        with self._read() as con:
            meta = dict(con.execute(_META).fetchall())
            bound = self._bound_in(meta)
            # Unbound (reset, nothing written since): no vectors to read either.
            dim = cache.index.dim if bound is None else bound[1]
            if meta["epoch"] != cache.epoch or dim != cache.index.dim:
                cache = _Cache(dim, meta["epoch"])
            seq = int(meta["seq"])
            if cache.seq < seq:
                if cache.seq == 0:
                    # A cold load: size the vector arrays once instead of growing them.
                    (count,) = con.execute(
                        f"SELECT count(*) FROM memories m WHERE m.seq <= ? AND {member}",
                        [seq, *params],
                    ).fetchone()
                    basis = _vectors.load_basis(con) if count >= _vectors.COMPACT_AT else None
                    if basis is not None and basis.dim == dim and len(cache.index) == 0:
                        # A large scope in a fitted file: codes and projections only.
                        cache.index = CompactVectorIndex(
                            dim, basis.basis, basis.offset, self._fetch_vectors
                        )
                    cache.index.reserve(len(cache.index) + int(count))
                compact = isinstance(cache.index, CompactVectorIndex)
                vector_sql = (
                    "c.codes, c.projection FROM memories m JOIN memory_codes c "
                    "ON c.memory_rowid = m.rowid "
                    if compact
                    else "v.embedding, NULL FROM memories m JOIN memory_vectors v "
                    "ON v.memory_rowid = m.rowid "
                )
                # Keywords ranked in the file: the terms are not read into the cache.
                in_file = self.keyword_index == "database"
                terms_sql = "NULL" if in_file else "f.terms"
                fts_join = "" if in_file else "LEFT JOIN memory_fts f ON f.rowid = m.rowid "
                cursor = con.execute(
                    f"SELECT m.rowid, m.deleted_at IS NULL, {terms_sql}, {vector_sql}"
                    f"{fts_join}WHERE m.seq > ? AND m.seq <= ? AND {member}",
                    [cache.seq, seq, *params],
                )
                # Applied chunk by chunk: a cold load of a whole scope never holds
                # every row's vector and terms as Python objects at once. Those used
                # to stay resident after the load (the allocator could not hand back
                # memory interleaved with what the indexes keep): at 100k memories a
                # process's RSS after its first search was 1,001 MB, now about 600
                # (docs/benchmarks.md, "Cold start and memory"). A failure part way
                # leaves ``seq`` behind, so the next catch-up reads those rows again
                # (applying a row twice is harmless: add replaces, remove is idempotent).
                while rows := cursor.fetchmany(_CATCH_UP_ROWS):
                    live = [r for r in rows if r[1]]
                    dead = [r[0] for r in rows if not r[1]]
                    terms = None if in_file else [(r[2] or "").split() for r in live]
                    if compact:
                        index = cache.index
                        assert isinstance(index, CompactVectorIndex)
                        cache.apply_encoded(
                            dead,
                            [r[0] for r in live],
                            terms,
                            _vectors.decode(
                                [r[3] for r in live], [r[4] for r in live], dim, index.width
                            ),
                        )
                    else:
                        cache.apply(
                            dead,
                            [r[0] for r in live],
                            terms,
                            np.frombuffer(b"".join(r[3] for r in live), dtype=F32).reshape(
                                len(live), -1
                            )
                            if live
                            else None,
                            refit=False,
                        )
                    del rows, live
        cache.index.refit()
        cache.seq = max(cache.seq, seq)
        cache.rows.reset(cache.seq)
        cache.degrees.reset(cache.seq)
        return cache
