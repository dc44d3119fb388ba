"""Candidate assembly: which memories a search scores, decided once for every backend.

A search's candidates are the union of the vector top ``n``, the BM25 top
``n`` and the memories linked to the query's entities, each with every
signal's raw value (fusion, in ``search.py``, turns them into one score).
The backend finds the vector hits (SQLite in its in-process index,
PostgreSQL in the database), the entity links (SQL) and the rows; a
:class:`Pool` gathers them and builds the records.

The statistics the pool uses — BM25's, entity degrees — come from what the
search may return (``allowed``), never from memories the caller cannot see.
A backend may count BM25 over a wider ``population`` that the caller still
sees (SQLite's post-filtering experiment: the scope without its filter).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import numpy as np

from engramdb.core.bm25 import BM25Index, Keys
from engramdb.core.filters import Node
from engramdb.core.records import Candidate, MemoryRow, Scope, TermStats

__all__ = ["Pool", "adds_candidates", "narrowed"]


def narrowed(scope: Scope, where: Node | None) -> bool:
    """Whether a search returns less than its cache holds, so it needs an ``allowed`` set.

    A cache holds the memories of the scope's primary id; a second scope id
    or a filter narrows that, and the backend lists the row ids it may return.
    """
    return len(scope.items()) > 1 or where is not None


def adds_candidates(degree: int, n: int) -> bool:
    """Whether an entity linked to ``degree`` memories adds them as candidates.

    An entity linked to more than ``n`` memories says little about any one
    of them: its memories are not added, though it still counts for
    candidates found otherwise.
    """
    return degree <= n


class Pool:
    """The candidates of one search, as the backend gathers them.

    Made from the vector hits (best first); it ranks the keywords itself
    unless the backend gives ``keyword_hits`` (best first, as BM25 ranks them
    over ``population``). BM25's statistics count over ``population``, by
    default the ``allowed`` set. A backend that ranks keywords itself
    (PostgreSQL, in SQL) passes no index (``bm25=None``): then it gives
    ``keyword_hits`` and ``keyword_best`` (:meth:`BM25Index.best_score` over
    its population), and :meth:`build` the BM25 score of each row.
    ``stat_terms`` are terms whose statistics the search wants without ranking
    by them: the index counts them, or the backend gives ``term_stats``.
    Then :attr:`found_otherwise` tells the backend which memories entity
    links may mark even through an entity too common to add candidates,
    :meth:`link` takes the links, :meth:`keys` lists what to read, and
    :meth:`build` makes the records from the rows read.
    """

    def __init__(
        self,
        n: int,
        allowed: Keys | None,
        vector_hits: Sequence[int],
        bm25: BM25Index | None,
        terms: Sequence[str],
        *,
        population: Keys | Literal["allowed"] | None = "allowed",
        keyword_hits: Sequence[int] | None = None,
        keyword_best: float | None = None,
        stat_terms: Sequence[str] = (),
        term_stats: TermStats | None = None,
    ) -> None:
        self.n = n
        self.allowed = allowed
        self.population: Keys | None = allowed if isinstance(population, str) else population
        """What BM25's statistics count over (default: ``allowed``)."""
        self.bm25 = bm25
        self.terms = terms
        self.semantic = [int(k) for k in vector_hits]
        if bm25 is None and (keyword_hits is None or keyword_best is None):
            raise ValueError("without an index, give keyword_hits and keyword_best")
        self.keyword_best = keyword_best
        if keyword_hits is None:
            assert bm25 is not None
            keyword, _ = bm25.search(terms, n, allowed=allowed, population=self.population)
            keyword_hits = keyword.tolist()
        self.keyword = [int(k) for k in keyword_hits]
        self.pool = set(self.semantic) | set(self.keyword)
        self.found_otherwise = sorted(self.pool)
        """The vector and keyword hits, in row id order."""
        self.linked: dict[int, list[tuple[str, int]]] = {}
        if stat_terms and term_stats is None:
            if bm25 is None:
                raise ValueError("without an index, give the term_stats of stat_terms")
            live, df = bm25.statistics(stat_terms, self.population)
            term_stats = TermStats(live, df)
        self.term_stats = term_stats if stat_terms else None
        """The statistics of ``stat_terms`` every record carries (None: none asked)."""

    def link(self, links: Iterable[tuple[int, str, int]]) -> None:
        """Take ``(memory row id, entity, degree)`` links of the query's entities.

        The backend gives every link of an entity that :func:`adds_candidates`,
        and at least the links of the others to :attr:`found_otherwise`.
        """
        for memory, name, degree in links:
            self.linked.setdefault(int(memory), []).append((name, int(degree)))
        self.pool |= {
            m for m, ents in self.linked.items() if adds_candidates(min(d for _, d in ents), self.n)
        }

    def keys(self) -> Keys | None:
        """The row ids to read (those the search may return); None when there are none."""
        if not self.pool:
            return None
        keys: Keys = np.fromiter(self.pool, dtype=np.int64, count=len(self.pool))
        if self.allowed is not None:
            keys = keys[np.isin(keys, self.allowed)]
        return keys

    def build(
        self,
        keys: Keys,
        hits: Iterable[tuple[int, MemoryRow, float]],
        keyword_scores: Mapping[int, float] | None = None,
        vectors: Mapping[int, Any] | None = None,
    ) -> list[Candidate]:
        """The records of ``hits`` (``(row id, row, cosine)``, in the backend's order).

        ``hits`` are the rows among ``keys`` that are still live and in scope
        (the backend's SQL decides); BM25 scores every one over ``keys`` with
        the statistics of :attr:`population`, or ``keyword_scores`` gives
        them (row id -> score; the backend that ranks keywords itself).
        ``vectors`` (row id -> stored vector) become each record's ``vector``.
        """
        if keyword_scores is not None:
            bm25 = dict(keyword_scores)
        elif self.bm25 is not None:
            bm_keys, bm = self.bm25.search(
                self.terms, keys.size, allowed=keys, population=self.population
            )
            bm25 = dict(zip(bm_keys.tolist(), bm.tolist(), strict=True))
        else:
            raise ValueError("without an index, build needs keyword_scores")
        if self.keyword_best is not None:
            best = self.keyword_best
        else:
            assert self.bm25 is not None
            best = self.bm25.best_score(self.terms, population=self.population)
        sem_rank = {key: i + 1 for i, key in enumerate(self.semantic)}
        kw_rank = {key: i + 1 for i, key in enumerate(self.keyword)}
        return [
            Candidate(
                row=row,
                semantic=cosine,
                bm25=bm25.get(key, 0.0),
                semantic_rank=sem_rank.get(key),
                bm25_rank=kw_rank.get(key),
                entities=self.linked.get(key, []),
                bm25_best=best,
                term_stats=self.term_stats,
                vector=None if vectors is None else vectors.get(key),
            )
            for key, row, cosine in hits
        ]
