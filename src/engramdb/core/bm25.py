"""An in-memory BM25 index over the lemmatised terms of one scope.

Why not the databases' own ranking: the same formula, with statistics from
the scope being searched, must give the same ranking on every backend
(SQLite's FTS5 ``bm25()`` and PostgreSQL's ``ts_rank`` differ, and
``ts_rank`` is not BM25), and per-scope statistics are what a per-user
search wants: a word that is rare for this user is informative for this
user. SQLite ranks with this index, a cache rebuilt from the stored terms
like the vector index. PostgreSQL (schema version 5) computes the same
formula in SQL over postings its triggers maintain, with the same
constants (:data:`K1`, :data:`B`) and :func:`best_score`: a per-process
copy of every scope's terms cost a load of the whole scope on its first
search and memory growing with the tenants served (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import itertools
import math
import sys
import threading
from array import array
from collections import defaultdict
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["K1", "B", "BM25Index", "best_score"]

K1 = 1.2
"""BM25's term-frequency saturation, here and in PostgreSQL's ranking."""
B = 0.75
"""BM25's document-length normalisation, here and in PostgreSQL's ranking."""

Keys = npt.NDArray[np.int64]
Scores = npt.NDArray[np.float32]

_BULK = 256
"""Documents per ``add`` from which postings are built by one sort, not one by one."""

# What :attr:`BM25Index.nbytes` counts per item beyond numpy's own ``nbytes``,
# measured with tracemalloc on CPython 3.11 (64-bit): a key -> row entry holds
# two int objects; a term its string (short words: ~55 bytes), the tuple of
# its postings and two typed arrays; a posting 8 bytes in each of its arrays;
# a term's cached numpy postings two array headers and a tuple.
_ENTRY_BYTES = 64
_TERM_BYTES = 260
_POSTING_BYTES = 16
_CACHED_TERM_BYTES = 300
_CACHED_POSTING_BYTES = 12
_OBJECT_BYTES = 1_500


class BM25Index:
    """Okapi BM25 (with Lucene's non-negative idf) over int64 keys.

    Args:
        k1: term-frequency saturation.
        b: document-length normalisation.
    """

    def __init__(self, k1: float = K1, b: float = B) -> None:
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"need k1 >= 0 and 0 <= b <= 1; got k1={k1}, b={b}")
        self.k1 = k1
        self.b = b
        # Created once and never replaced: a thread waiting on it must be
        # waiting on the lock that the thread inside holds.
        self._lock = threading.RLock()
        self._clear()

    def _clear(self) -> None:
        """Drop every document (the lock is the caller's business)."""
        # Typed arrays, not lists, for what grows with the documents (8 bytes an
        # entry instead of an int object and its pointer), and no per-document
        # record of its terms: the postings hold them, and a removed row is only
        # marked dead. Per document that kept a tuple of its terms and the
        # strings in it alive: most of the index's memory (docs/benchmarks.md).
        self._row_of: dict[int, int] = {}  # key -> row, live rows only
        self._keys = array("q")  # row -> key
        self._alive = bytearray()  # row -> 1 live, 0 removed
        self._lengths = array("q")  # row -> terms in the document
        # term -> (rows, term frequencies), appended in step; may hold dead rows
        self._postings: dict[str, tuple[array[int], array[int]]] = {}
        self._posted = 0  # entries in every posting (for nbytes)
        self._total_len = 0
        self._live = 0
        self._dead = 0
        self._removals = 0  # rows removed so far: tells a cached posting it may hold dead rows
        # term -> its live postings as arrays, and ``_removals`` when they were read
        self._arrays: dict[str, tuple[npt.NDArray[np.int64], Scores, int]] = {}
        self._arrayed = 0  # entries in every array of ``_arrays`` (for nbytes)
        self._lengths_arr: Scores | None = None
        self._keys_arr: Keys | None = None
        self._alive_arr: npt.NDArray[np.bool_] | None = None

    def __len__(self) -> int:
        """Number of live documents."""
        with self._lock:
            return self._live

    @property
    def nbytes(self) -> int:
        """Bytes the index holds, estimated in O(1) without its lock.

        numpy arrays count their ``nbytes``; dicts their table
        (``sys.getsizeof``) plus a measured size per entry, term and posting.
        Within 25 % of tracemalloc's count on LoCoMo-like text.
        """
        rows = len(self._keys)
        total = _OBJECT_BYTES + rows * 17  # keys and lengths (8 bytes each), alive (1)
        total += sys.getsizeof(self._row_of) + len(self._row_of) * _ENTRY_BYTES
        total += sys.getsizeof(self._postings) + len(self._postings) * _TERM_BYTES
        total += self._posted * _POSTING_BYTES
        total += sys.getsizeof(self._arrays) + len(self._arrays) * _CACHED_TERM_BYTES
        total += self._arrayed * _CACHED_POSTING_BYTES
        for arr in (self._lengths_arr, self._keys_arr, self._alive_arr):
            if arr is not None:
                total += arr.nbytes
        return total

    def _drop_arrays(self, term: str) -> None:
        """Forget the cached numpy postings of ``term`` (its postings changed)."""
        cached = self._arrays.pop(term, None)
        if cached is not None:
            self._arrayed -= cached[0].size

    def add(self, keys: Sequence[int] | Keys, docs: Sequence[Sequence[str]]) -> None:
        """Index each key's terms; a key indexed before is replaced (within a call, the last)."""
        if len(keys) != len(docs):
            raise ValueError(f"{len(keys)} keys but {len(docs)} documents")
        key_list = [int(k) for k in keys]
        doc_list = list(docs)
        if len(set(key_list)) != len(key_list):
            last = {key: i for i, key in enumerate(key_list)}
            kept = sorted(last.values())
            key_list = [key_list[i] for i in kept]
            doc_list = [doc_list[i] for i in kept]
        with self._lock:
            self.remove(key_list)
            start = len(self._keys)
            for offset, (key, terms) in enumerate(zip(key_list, doc_list, strict=True)):
                self._row_of[key] = start + offset
                self._lengths.append(len(terms))
                self._total_len += len(terms)
            self._keys.extend(key_list)
            self._alive.extend(b"\x01" * len(key_list))
            self._live += len(key_list)
            if len(key_list) >= _BULK:
                self._post_bulk(start, doc_list)
            else:
                for offset, terms in enumerate(doc_list):
                    counts: dict[str, int] = {}
                    for term in terms:
                        counts[term] = counts.get(term, 0) + 1
                    for term, tf in counts.items():
                        rows, tfs = self._postings.setdefault(term, (array("q"), array("q")))
                        rows.append(start + offset)
                        tfs.append(tf)
                        self._posted += 1
                        self._drop_arrays(term)
            self._lengths_arr = None

    def _post_bulk(self, start: int, docs: Sequence[Sequence[str]]) -> None:
        """Append the postings of ``docs`` (rows ``start``, ``start + 1``, ...) at once.

        A cold cache loads a whole scope through here: term ids for every
        occurrence, then one sort of (term, row) pairs gives each term's rows
        and frequencies, appended per term instead of per occurrence
        (100k documents: 4.8 s of Python before, docs/benchmarks.md).
        """
        # Each new term gets the next id; the lookup runs in C over every occurrence.
        ids: defaultdict[str, int] = defaultdict(itertools.count().__next__)
        occurrences = np.fromiter(
            map(ids.__getitem__, itertools.chain.from_iterable(docs)), dtype=np.int64
        )
        if occurrences.size == 0:
            return
        lengths = np.fromiter((len(terms) for terms in docs), dtype=np.int64, count=len(docs))
        rows = np.repeat(np.arange(start, start + len(docs), dtype=np.int64), lengths)
        span = start + len(docs)
        pairs, tf = np.unique(occurrences * span + rows, return_counts=True)
        term_ids = pairs // span
        post_rows = pairs - term_ids * span
        tf64 = tf.astype(np.int64)
        cuts = np.flatnonzero(np.diff(term_ids)) + 1
        firsts = np.concatenate(([0], cuts)).tolist()
        lasts = [*cuts.tolist(), int(pairs.size)]
        terms = list(ids)
        for first, last, term_id in zip(firsts, lasts, term_ids[firsts].tolist(), strict=True):
            term = terms[term_id]
            stored = self._postings.setdefault(term, (array("q"), array("q")))
            stored[0].frombytes(post_rows[first:last].tobytes())
            stored[1].frombytes(tf64[first:last].tobytes())
            self._drop_arrays(term)
        self._posted += int(pairs.size)

    def remove(self, keys: Sequence[int] | Keys) -> int:
        """Forget these keys (unknown keys are ignored); returns how many were removed."""
        removed = 0
        with self._lock:
            for key in keys:
                row = self._row_of.pop(int(key), None)
                if row is None:
                    continue
                self._alive[row] = 0
                if self._alive_arr is not None and row < self._alive_arr.size:
                    self._alive_arr[row] = False
                self._total_len -= self._lengths[row]
                self._live -= 1
                self._dead += 1
                removed += 1
            self._removals += removed
            if self._dead > 1000 and self._dead > self._live // 4:
                self._compact()
        return removed

    def _compact(self) -> None:
        live_rows = list(self._row_of.values())
        keys = [self._keys[r] for r in live_rows]
        # Each live document again, from the postings (they hold its counts).
        docs_of: dict[int, list[str]] = {r: [] for r in live_rows}
        for term, (rows, tfs) in self._postings.items():
            for row, tf in zip(rows, tfs, strict=True):
                doc = docs_of.get(row)
                if doc is not None:
                    doc.extend([term] * tf)
        docs = [docs_of[r] for r in live_rows]
        # Rebuilt in place under the lock the caller holds; re-running __init__
        # here used to swap the lock, letting other threads in mid-rebuild.
        self._clear()
        self.add(keys, docs)

    def _postings_of(self, term: str) -> tuple[npt.NDArray[np.int64], Scores]:
        """The live rows holding ``term`` and its frequency in each (empty when none)."""
        cached = self._arrays.get(term)
        if cached is not None and cached[2] == self._removals:
            return cached[0], cached[1]
        if cached is not None:
            rows, tfs = cached[0], cached[1]
        else:
            stored = self._postings.get(term)
            if stored is None:
                return np.empty(0, np.int64), np.empty(0, np.float32)
            rows = np.array(stored[0], dtype=np.int64)
            tfs = np.array(stored[1], dtype=np.float32)
        live = self._alive_array()[rows]
        if not live.all():
            self._posted -= rows.size - int(live.sum())
            rows, tfs = rows[live], tfs[live]
            if rows.size:
                self._postings[term] = (
                    array("q", rows.tobytes()),
                    array("q", tfs.astype(np.int64).tobytes()),
                )
            else:
                del self._postings[term]
        self._drop_arrays(term)
        self._arrays[term] = (rows, tfs, self._removals)
        self._arrayed += rows.size
        return rows, tfs

    def _alive_array(self) -> npt.NDArray[np.bool_]:
        if self._alive_arr is None or self._alive_arr.size != len(self._alive):
            self._alive_arr = np.frombuffer(self._alive, dtype=np.bool_).copy()
        return self._alive_arr

    def search(
        self,
        terms: Sequence[str],
        k: int,
        allowed: Keys | None = None,
        population: Keys | None = None,
    ) -> tuple[Keys, Scores]:
        """The ``k`` best keys for the query terms, best first, with their BM25 scores.

        Only documents containing at least one query term are returned;
        ``allowed`` restricts the result to those keys. ``population`` is the
        set whose statistics (document count, frequencies, mean length) the
        scores use — all documents when ``None``. A search narrowed to what a
        caller may see passes that set: statistics over the whole index would
        let the scores tell whether hidden documents hold a word.
        """
        with self._lock:
            if self._live == 0 or k <= 0:
                return np.empty(0, np.int64), np.empty(0, np.float32)
            n = len(self._keys)
            if self._lengths_arr is None:
                self._lengths_arr = np.array(self._lengths, dtype=np.float32)
            members: npt.NDArray[np.bool_] | None = None
            if population is None:
                live, avgdl = self._live, self._total_len / self._live
            else:
                members = np.isin(self._keys_array(), population) & self._alive_array()
                live = int(members.sum())
                if live == 0:
                    return np.empty(0, np.int64), np.empty(0, np.float32)
                avgdl = float(self._lengths_arr[members].sum()) / live
            norm = self.k1 * (1 - self.b + self.b * self._lengths_arr / max(avgdl, 1e-9))
            scores = np.zeros(n, dtype=np.float32)
            hit = np.zeros(n, dtype=bool)
            for term in dict.fromkeys(terms):
                if term not in self._postings:
                    continue
                rows, tf = self._postings_of(term)
                if members is not None:
                    inside = members[rows]
                    rows, tf = rows[inside], tf[inside]
                df = rows.size
                if df == 0:
                    continue
                idf = math.log(1 + (live - df + 0.5) / (df + 0.5))
                scores[rows] += idf * tf * (self.k1 + 1) / (tf + norm[rows])
                hit[rows] = True
            candidates = np.flatnonzero(hit)
            if allowed is not None and candidates.size:
                candidates = candidates[np.isin(self._keys_array()[candidates], allowed)]
            if candidates.size == 0:
                return np.empty(0, np.int64), np.empty(0, np.float32)
            cand_scores = scores[candidates]
            if candidates.size > k:
                top = np.argpartition(-cand_scores, k - 1)[:k]
                candidates, cand_scores = candidates[top], cand_scores[top]
            order = np.lexsort((candidates, -cand_scores))
            return self._keys_array()[candidates[order]], cand_scores[order].astype(np.float32)

    def statistics(
        self, terms: Sequence[str], population: Keys | None = None
    ) -> tuple[int, dict[str, int]]:
        """The documents the statistics count and how many hold each of ``terms``.

        Over ``population`` as :meth:`search` counts them; terms no document
        holds are absent.
        """
        with self._lock:
            members: npt.NDArray[np.bool_] | None = None
            if population is None:
                live = self._live
            else:
                members = np.isin(self._keys_array(), population) & self._alive_array()
                live = int(members.sum())
            df: dict[str, int] = {}
            for term in dict.fromkeys(terms):
                if term not in self._postings:
                    continue
                rows, _ = self._postings_of(term)
                count = int(rows.size if members is None else members[rows].sum())
                if count:
                    df[term] = count
            return live, df

    def best_score(self, terms: Sequence[str], population: Keys | None = None) -> float:
        """What a document made of exactly ``terms`` would score for the query ``terms``.

        The scale of a perfect keyword match in this index (its idf and mean
        length, over ``population`` as in :meth:`search`): search divides by
        it to tell how close a hit comes, whatever the size of the scope.
        """
        with self._lock:
            if self._live == 0 or not terms:
                return 0.0
            members: npt.NDArray[np.bool_] | None = None
            if population is None:
                live, avgdl = self._live, self._total_len / self._live
            else:
                if self._lengths_arr is None:
                    self._lengths_arr = np.array(self._lengths, dtype=np.float32)
                members = np.isin(self._keys_array(), population) & self._alive_array()
                live = int(members.sum())
                if live == 0:
                    return 0.0
                avgdl = float(self._lengths_arr[members].sum()) / live

            def df_of(term: str) -> int:  # as search() counts it
                if term not in self._postings:
                    return 0
                rows, _ = self._postings_of(term)
                return int(rows.size if members is None else members[rows].sum())

            return best_score(terms, live, avgdl, df_of, self.k1, self.b)

    def _keys_array(self) -> Keys:
        if self._keys_arr is None or self._keys_arr.size != len(self._keys):
            self._keys_arr = np.array(self._keys, dtype=np.int64)
        return self._keys_arr


def best_score(
    terms: Sequence[str],
    live: int,
    avgdl: float,
    df_of: Callable[[str], int],
    k1: float = K1,
    b: float = B,
) -> float:
    """:meth:`BM25Index.best_score` from the statistics alone.

    ``live`` documents of mean length ``avgdl``, ``df_of(term)`` of them
    holding ``term``. Shared with PostgreSQL's ranking, which reads the statistics in SQL.
    """
    counts: dict[str, int] = {}
    for term in terms:
        counts[term] = counts.get(term, 0) + 1
    if live <= 0 or not counts:
        return 0.0
    norm = k1 * (1 - b + b * len(terms) / max(avgdl, 1e-9))
    total = 0.0
    for term, tf in counts.items():
        df = df_of(term)
        if df <= 0:
            continue  # no document holds it: no hit can score for it either
        idf = math.log(1 + (live - df + 0.5) / (df + 0.5))
        total += idf * tf * (k1 + 1) / (tf + norm)
    return total
