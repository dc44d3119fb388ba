"""Keyword ranking inside the SQLite file: BM25 over postings the store's writes keep.

Schema version 5 (docs/ARCHITECTURE.md, "Keyword ranking inside SQLite").
What a search reads is the postings of its query terms, never a scope's
whole vocabulary, so a freshly opened store ranks its first query as fast
as its hundredth and no process keeps a copy of any scope's terms.

Layout, per **posting key** (``user:<id>`` for a memory with a user, else
its owner, ``agent:<id>`` or ``run:<id>``):

- ``keyword_postings``: for each term, segments of at most :data:`SEGMENT`
  postings packed in a BLOB (:data:`POSTING`: row id, term frequency,
  document length). The empty term holds one posting per live memory (its
  length as the frequency): what a search over part of a key counts its
  statistics from. A write appends to a term's last segment (one page
  rewritten, not the whole list); a removal rewrites the segments that held
  the row.
- ``keyword_stats``: live memories and their summed lengths per key, what a
  search over a whole user reads instead of the empty term's postings.
- ``keyword_docs``: what is posted for each live memory (its key and terms),
  so a change can take the old postings out whatever the write did to the
  memory and its ``memory_fts`` row.

Who keeps them: every write transaction (:meth:`_Store._write`). Per
connection, TEMP triggers on ``memories`` note each row an INSERT, UPDATE
or DELETE touches; before the COMMIT, :func:`sync` compares each noted
row's state (key, liveness, ``memory_fts`` terms) with ``keyword_docs`` and
moves the postings by the difference. Add, update, delete, restore, purge,
import and anything a later write path does to a memory are covered by
construction, in the transaction of the write: a failed write leaves no
postings either. Every path that changes ``memory_fts`` also updates the
memory's row (its ``seq``), which is what notes it.

The formula is :class:`~engramdb.core.bm25.BM25Index`'s, with the same
float32 arithmetic in the same term order, so scores agree bit for bit; the
statistics are over the same population (a search of one user: every live
memory of the user, expired ones too; any other search: the rows the search
may return, or the ``population`` it passes). Ties are broken by row id.
"""

from __future__ import annotations

import math
import sqlite3
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from engramdb.core.bm25 import K1, B, best_score

__all__ = [
    "POSTING",
    "SEGMENT",
    "TRIGGERS",
    "KeywordRanking",
    "rank",
    "rebuild",
    "sync",
]

POSTING = np.dtype([("row", "<i8"), ("tf", "<u4"), ("dl", "<u4")])
"""One posting in a segment BLOB: row id, the term's count in the memory, the memory's length."""

SEGMENT = 240
"""Postings per segment at most: 3,840 bytes, one SQLite page with the row's key."""

KEY_SQL = "CASE WHEN m.user_id IS NOT NULL THEN 'user:' || m.user_id ELSE m.owner END"
"""The posting key of a memory (alias ``m``): a user's memories are one key whatever their owner."""

TRIGGERS = (
    "CREATE TEMP TABLE IF NOT EXISTS keyword_dirty (rowid INTEGER PRIMARY KEY)",
    "CREATE TEMP TRIGGER IF NOT EXISTS keyword_dirty_insert AFTER INSERT ON main.memories "
    "BEGIN INSERT OR IGNORE INTO keyword_dirty(rowid) VALUES (new.rowid); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS keyword_dirty_update AFTER UPDATE ON main.memories "
    "BEGIN INSERT OR IGNORE INTO keyword_dirty(rowid) VALUES (old.rowid); "
    "INSERT OR IGNORE INTO keyword_dirty(rowid) VALUES (new.rowid); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS keyword_dirty_delete AFTER DELETE ON main.memories "
    "BEGIN INSERT OR IGNORE INTO keyword_dirty(rowid) VALUES (old.rowid); END",
)
"""Per connection: note every memory row a statement touches (for :func:`sync` at commit)."""

_CHUNK = 500

Rows = npt.NDArray[np.int64]
Scores = npt.NDArray[np.float32]


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterable[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _postings_of(terms: str, rowid: int) -> list[tuple[str, int, int, int]]:
    """``(term, row, tf, dl)`` for each distinct term of a memory, and the empty term."""
    words = terms.split()
    counts: dict[str, int] = {}
    for word in words:
        counts[word] = counts.get(word, 0) + 1
    dl = len(words)
    return [("", rowid, dl, dl), *((t, rowid, tf, dl) for t, tf in counts.items())]


def flush(con: sqlite3.Connection) -> None:
    """Inside a write: bring the postings of every row the transaction touched up to date."""
    dirty = [r for (r,) in con.execute("SELECT rowid FROM temp.keyword_dirty")]
    if dirty:
        # In chunks: an import or a purge of a large scope never holds every
        # posting it moves as Python objects at once.
        for chunk in _chunks(dirty, 20_000):
            sync(con, chunk)
        con.execute("DELETE FROM temp.keyword_dirty")


def sync(con: sqlite3.Connection, rowids: Sequence[int]) -> None:
    """Make the postings of ``rowids`` those of each memory's state now.

    A row that is live now is posted under its key with its ``memory_fts``
    terms; one that is deleted, soft-deleted or purged is not. Rows whose
    key and terms did not change cost a read.
    """
    now: dict[int, tuple[str, str]] = {}
    was: dict[int, tuple[str, str]] = {}
    ordered = sorted(set(rowids))
    for chunk in _chunks(ordered):
        for rowid, key, terms in con.execute(
            f"SELECT m.rowid, {KEY_SQL}, coalesce(f.terms, '') FROM memories m "
            "LEFT JOIN memory_fts f ON f.rowid = m.rowid "
            f"WHERE m.rowid IN ({_marks(len(chunk))}) AND m.deleted_at IS NULL",
            chunk,
        ):
            now[int(rowid)] = (str(key), str(terms))
        for rowid, key, terms in con.execute(
            "SELECT memory_rowid, key, terms FROM keyword_docs "
            f"WHERE memory_rowid IN ({_marks(len(chunk))})",
            chunk,
        ):
            was[int(rowid)] = (str(key), str(terms))
    changed = [r for r in ordered if now.get(r) != was.get(r)]
    if not changed:
        return
    gone: dict[tuple[str, str], list[int]] = defaultdict(list)
    came: dict[tuple[str, str], list[tuple[int, int, int]]] = defaultdict(list)
    stats: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rowid in changed:
        if rowid in was:
            key, terms = was[rowid]
            for term, _, _, _ in _postings_of(terms, rowid):
                gone[key, term].append(rowid)
            stats[key][0] -= 1
            stats[key][1] -= len(terms.split())
        if rowid in now:
            key, terms = now[rowid]
            for term, row, tf, dl in _postings_of(terms, rowid):
                came[key, term].append((row, tf, dl))
            stats[key][0] += 1
            stats[key][1] += len(terms.split())
    _remove(con, gone)
    _append(con, came)
    for chunk in _chunks(changed):
        con.execute(f"DELETE FROM keyword_docs WHERE memory_rowid IN ({_marks(len(chunk))})", chunk)
    con.executemany(
        "INSERT INTO keyword_docs(memory_rowid, key, terms) VALUES (?, ?, ?)",
        [(r, *now[r]) for r in changed if r in now],
    )
    _move_stats(con, stats)


def _move_stats(con: sqlite3.Connection, stats: Mapping[str, list[int]]) -> None:
    moved = [(key, d, n) for key, (d, n) in sorted(stats.items()) if d or n]
    con.executemany(
        "INSERT INTO keyword_stats(key, docs, length) VALUES (?, ?, ?) ON CONFLICT(key) "
        "DO UPDATE SET docs = docs + excluded.docs, length = length + excluded.length",
        moved,
    )
    con.executemany(
        "DELETE FROM keyword_stats WHERE key = ? AND docs <= 0", [(k,) for k, _, _ in moved]
    )


def _remove(con: sqlite3.Connection, gone: Mapping[tuple[str, str], list[int]]) -> None:
    """Take rows out of the segments of each ``(key, term)``; empty segments go."""
    for (key, term), rows in sorted(gone.items()):
        drop = np.array(rows, dtype=np.int64)
        for seg_rowid, blob in con.execute(
            "SELECT rowid, postings FROM keyword_postings WHERE key = ? AND term = ?",
            (key, term),
        ).fetchall():
            postings = np.frombuffer(blob, dtype=POSTING)
            keep = ~np.isin(postings["row"], drop)
            if keep.all():
                continue
            if keep.any():
                con.execute(
                    "UPDATE keyword_postings SET postings = ? WHERE rowid = ?",
                    (postings[keep].tobytes(), seg_rowid),
                )
            else:
                con.execute("DELETE FROM keyword_postings WHERE rowid = ?", (seg_rowid,))


def _append(
    con: sqlite3.Connection, came: Mapping[tuple[str, str], list[tuple[int, int, int]]]
) -> None:
    """Append postings to each ``(key, term)``: its last segment first, then new ones.

    The last segments of a key's terms are read in one statement per 500
    terms, and every rewrite and new segment is written by one statement each.
    """
    by_key: dict[str, list[str]] = defaultdict(list)
    for key, term in came:
        by_key[key].append(term)
    last: dict[tuple[str, str], tuple[int, int, bytes]] = {}
    for key, terms in by_key.items():
        for chunk in _chunks(sorted(terms)):
            for term, seg_rowid, seg, blob in con.execute(
                "SELECT p.term, p.rowid, p.seg, p.postings FROM keyword_postings p "
                f"WHERE p.key = ? AND p.term IN ({_marks(len(chunk))}) AND p.seg = "
                "(SELECT max(q.seg) FROM keyword_postings q WHERE q.key = p.key "
                "AND q.term = p.term)",
                [key, *chunk],
            ):
                last[key, str(term)] = (int(seg_rowid), int(seg), bytes(blob))
    rewrites: list[tuple[bytes, int]] = []
    inserts: list[tuple[str, str, int, bytes]] = []
    for (key, term), entries in sorted(came.items()):
        packed = np.array(entries, dtype=POSTING)
        seg, start = -1, 0
        held = last.get((key, term))
        if held is not None:
            seg_rowid, seg, blob = held
            room = SEGMENT - len(blob) // POSTING.itemsize
            if room > 0:
                start = min(room, packed.size)
                rewrites.append((blob + packed[:start].tobytes(), seg_rowid))
        inserts += [
            (key, term, seg + 1 + i, packed[first : first + SEGMENT].tobytes())
            for i, first in enumerate(range(start, packed.size, SEGMENT))
        ]
    # Rewritten whole (SQL's || would make the BLOB text).
    con.executemany("UPDATE keyword_postings SET postings = ? WHERE rowid = ?", rewrites)
    con.executemany(
        "INSERT INTO keyword_postings(key, term, seg, postings) VALUES (?, ?, ?, ?)", inserts
    )


def rebuild(con: sqlite3.Connection) -> int:
    """Post every live memory from scratch (the migration's backfill); returns how many."""
    con.execute("DELETE FROM keyword_postings")
    con.execute("DELETE FROM keyword_docs")
    con.execute("DELETE FROM keyword_stats")
    rowids = [r for (r,) in con.execute("SELECT rowid FROM memories WHERE deleted_at IS NULL")]
    for chunk in _chunks(rowids, 20_000):
        sync(con, chunk)
    return len(rowids)


@dataclass
class KeywordRanking:
    """What :func:`rank` found: the top hits, every matching row's score, the statistics."""

    hits: list[int]
    """Row ids, best first (ties by row id)."""
    live: int
    """Documents the statistics count."""
    avgdl: float
    """Their mean length in terms."""
    df: dict[str, int] = field(default_factory=dict)
    """Documents of the population holding each query term (absent: none)."""
    stat_df: dict[str, int] = field(default_factory=dict)
    """The same for the terms counted but not ranked (``stat_terms``)."""
    rows: Rows = field(default_factory=lambda: np.empty(0, np.int64))
    """Every row holding a query term (ascending), that the search may return."""
    scores: Scores = field(default_factory=lambda: np.empty(0, np.float32))
    """Their BM25 scores, in step with :attr:`rows`."""

    def best(self, terms: Sequence[str]) -> float:
        """:meth:`BM25Index.best_score` over these statistics."""
        return best_score(terms, self.live, self.avgdl, lambda t: self.df.get(t, 0))

    def scores_of(self, keys: Rows) -> dict[int, float]:
        """The score of each of ``keys`` that holds a query term."""
        if self.rows.size == 0 or keys.size == 0:
            return {}
        at = np.searchsorted(self.rows, keys)
        at = np.minimum(at, self.rows.size - 1)
        hit = self.rows[at] == keys
        return dict(zip(keys[hit].tolist(), self.scores[at[hit]].tolist(), strict=True))


def _read(
    con: sqlite3.Connection, keys: Sequence[str], terms: Sequence[str]
) -> dict[str, npt.NDArray[Any]]:
    """Each term's postings over ``keys`` (one array of :data:`POSTING` per term found)."""
    parts: dict[str, list[bytes]] = defaultdict(list)
    for chunk in _chunks(list(keys), 200):
        for term, blob in con.execute(
            f"SELECT term, postings FROM keyword_postings WHERE key IN ({_marks(len(chunk))}) "
            f"AND term IN ({_marks(len(terms))})",
            [*chunk, *terms],
        ):
            parts[term].append(blob)
    return {t: np.frombuffer(b"".join(blobs), dtype=POSTING) for t, blobs in parts.items()}


def _counts(con: sqlite3.Connection, keys: Sequence[str], terms: Sequence[str]) -> dict[str, int]:
    """How many postings each of ``terms`` has over ``keys`` (terms with none are absent)."""
    totals: dict[str, int] = defaultdict(int)
    for chunk in _chunks(list(keys), 200):
        for term, size in con.execute(
            f"SELECT term, sum(length(postings)) FROM keyword_postings WHERE key IN "
            f"({_marks(len(chunk))}) AND term IN ({_marks(len(terms))}) GROUP BY term",
            [*chunk, *terms],
        ):
            totals[term] += int(size or 0)
    return {t: n // POSTING.itemsize for t, n in totals.items() if n}


def rank(
    con: sqlite3.Connection,
    keys: Sequence[str],
    terms: Sequence[str],
    n: int,
    *,
    population: Rows | None = None,
    allowed: Rows | None = None,
    stat_terms: Sequence[str] = (),
) -> KeywordRanking:
    """BM25's top ``n`` for ``terms`` over the memories posted under ``keys``.

    The statistics count every live memory of ``keys`` (``keyword_stats``)
    or, given ``population``, those of its rows posted under ``keys`` (the
    empty term's postings); ``allowed`` narrows what is returned only. As
    :meth:`BM25Index.search` with the same arguments, ties aside. The
    ranking's ``df`` also counts ``stat_terms``, which do not rank.
    """
    words = list(dict.fromkeys(terms))
    extra = [t for t in dict.fromkeys(stat_terms) if t not in words]
    if not keys or n <= 0:
        return KeywordRanking([], 0, 0.0)
    if population is None:
        live, total = 0, 0
        for chunk in _chunks(list(keys), 200):
            docs, length = con.execute(
                "SELECT coalesce(sum(docs), 0), coalesce(sum(length), 0) FROM keyword_stats "
                f"WHERE key IN ({_marks(len(chunk))})",
                list(chunk),
            ).fetchone()
            live, total = live + int(docs), total + int(length)
        found = _read(con, keys, words) if words else {}
        # The terms counted but not ranked: their postings' total length is their
        # count, which SQLite reads from the record headers, not the blobs.
        stat_counts = _counts(con, keys, extra) if extra else {}
    else:
        found = _read(con, keys, ["", *words, *extra])
        every = found.pop("", np.empty(0, dtype=POSTING))
        members = every[np.isin(every["row"], population)]
        live, total = int(members.size), int(members["dl"].sum(dtype=np.int64))
        found = {t: p[np.isin(p["row"], population)] for t, p in found.items()}
    if live == 0:
        return KeywordRanking([], 0, 0.0)
    avgdl = total / live
    stat_df = (
        stat_counts
        if population is None
        else {t: int(found[t].size) for t in extra if t in found and found[t].size}
    )
    if not words:
        return KeywordRanking([], live, avgdl, stat_df=stat_df)
    # The arithmetic of BM25Index.search, in float32 and in the query's term order.
    per_term: list[tuple[Rows, Scores]] = []
    df: dict[str, int] = {}
    for term in words:
        postings = found.get(term)
        if postings is None or postings.size == 0:
            continue
        count = int(postings.size)
        df[term] = count
        idf = math.log(1 + (live - count + 0.5) / (count + 0.5))
        tf = postings["tf"].astype(np.float32)
        dl = postings["dl"].astype(np.float32)
        norm = K1 * (1 - B + B * dl / max(avgdl, 1e-9))
        contribution = (idf * tf * (K1 + 1) / (tf + norm)).astype(np.float32, copy=False)
        per_term.append((postings["row"].astype(np.int64), contribution))
    # Every stat term's count: those also ranked from df, the rest read above.
    stat_df.update({t: df[t] for t in stat_terms if t in df})
    if not per_term:
        return KeywordRanking([], live, avgdl, df, stat_df)
    every = np.concatenate([r for r, _ in per_term])
    low, high = int(every.min()), int(every.max())
    if high - low < max(4 * every.size, 1 << 16):
        # Row ids close together (one user's memories): a dense array over their
        # span, as BM25Index scores its rows; no sort.
        dense = np.zeros(high - low + 1, dtype=np.float32)
        hit = np.zeros(high - low + 1, dtype=np.bool_)
        for term_rows, contribution in per_term:
            dense[term_rows - low] += contribution
            hit[term_rows - low] = True
        at = np.flatnonzero(hit)
        rows, scores = at + low, dense[at]
    else:
        rows, inverse = np.unique(every, return_inverse=True)
        scores = np.zeros(rows.size, dtype=np.float32)
        start = 0
        for term_rows, contribution in per_term:
            scores[inverse[start : start + term_rows.size]] += contribution
            start += term_rows.size
    if allowed is not None:
        inside = np.isin(rows, allowed)
        rows, scores = rows[inside], scores[inside]
    top_rows, top_scores = rows, scores
    if rows.size > n:
        top = np.argpartition(-scores, n - 1)[:n]
        # Rows tied with the n-th score beyond it: keep the lowest row ids among them.
        cut = scores[top].min()
        tied = np.flatnonzero(scores == cut)
        above = top[scores[top] > cut]
        top = np.concatenate([above, tied[: n - above.size]])
        top_rows, top_scores = rows[top], scores[top]
    order = np.lexsort((top_rows, -top_scores))
    return KeywordRanking(
        hits=top_rows[order].tolist(),
        live=live,
        avgdl=avgdl,
        df=df,
        stat_df=stat_df,
        rows=rows,
        scores=scores,
    )
