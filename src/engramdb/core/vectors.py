"""An in-memory cosine-similarity index over the vectors of one scope.

SQLite holds every embedding; this index is the fast copy that search runs
against. It is pure numpy and knows nothing of SQLite: callers hand it row
keys (int64 rowids) and L2-normalised float32 vectors.

Two search paths, chosen per call by the number of live rows:

* **exact** (fewer than ``exact_threshold`` rows): one matrix-vector product
  and a partial sort. Below ~20k rows this costs well under a millisecond,
  so an approximation would buy nothing.
* **projected prefilter** (``exact_threshold`` rows or more): every vector is
  also kept projected onto the top principal components of the scope
  (centred on the scope's mean). A product with that thin matrix ranks all
  rows approximately; the best ``max(k * oversample, min_pool)`` of them are
  then re-scored exactly against the full vectors, so returned scores are
  always exact cosines and only recall can suffer.

Why principal components rather than sign bits (binary quantisation):
embeddings from e5-style models are anisotropic (unrelated sentences have
cosine 0.7-0.8) and most of their useful variance sits in a few dozen
directions. On the real LoCoMo vectors a 128-d projection re-scoring 64 of
3,970 rows finds 99 % of the true top 10, centred sign bits 87 %. On the
100k synthetic-from-real set it reaches 0.994 with a 1,600-row pool, which
sign bits need ~3,200 rows to match, and a float32 product a third as wide
as the vectors is no slower than XOR + popcount in numpy. The query is
not quantised at all (asymmetric ranking). Figures: ``docs/vector-index.md``.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_EXACT_THRESHOLD",
    "DEFAULT_MIN_POOL",
    "DEFAULT_OVERSAMPLE",
    "CompactVectorIndex",
    "Fetch",
    "VectorIndex",
    "encode",
    "fit_basis",
    "project",
]

Keys = npt.NDArray[np.int64]
Scores = npt.NDArray[np.float32]
_Matrix = npt.NDArray[np.float32]
_Rows = npt.NDArray[np.intp]
_Mask = npt.NDArray[np.bool_]

DEFAULT_EXACT_THRESHOLD: Final = 20_000
"""Live rows at which search switches from the exact scan to the prefilter."""

DEFAULT_OVERSAMPLE: Final = 50
"""Re-score pool per requested result (``k * oversample``)."""

DEFAULT_MIN_POOL: Final = 1_600
"""Smallest re-score pool, whatever ``k`` is."""

# Growing by 1.5x rather than 2x keeps appends amortised O(1) while leaving
# at most a third of the allocation unused (the float32 matrix dominates
# memory: 1.5 kB per 384-d vector).
_GROWTH: Final = 1.5
_MIN_CAPACITY: Final = 64
# Dead rows still cost a product in every search; past a quarter of the
# rows it is cheaper to copy the live ones once.
_COMPACT_DEAD_FRACTION: Final = 0.25
# The projection is refitted when the live count doubles or halves since the
# last fit: new topics must enter the basis, and refitting on a geometric
# schedule keeps its O(n) cost amortised O(1) per added vector.
_REFIT_FACTOR: Final = 2
# A covariance of a 384-d space is well estimated from 20k rows; fitting on
# all of a large scope would only cost time.
_FIT_SAMPLE: Final = 20_000
# Up to this many allowed keys, per-key dict look-ups (~70 ns each) beat
# np.isin over every row (~1-2 ms at 100k rows).
_SMALL_ALLOWED: Final = 4_096


# Bytes of one key-to-row entry beyond the dict's table: two int objects.
_ENTRY_BYTES: Final = 64


def _default_prefilter_dim(dim: int) -> int:
    # A third of the width: 128 for 384-d e5 vectors, which is what the
    # recall measurements were made with. Narrow spaces gain nothing.
    return dim if dim <= 96 else max(64, dim // 3)


class VectorIndex:
    """Cosine-similarity search over the vectors of one scope.

    Keys are int64 row ids; vectors are float32 of a fixed ``dim`` and are
    L2-normalised on the way in. Every method is safe to call from several
    threads: one re-entrant lock guards mutations and searches (a search at
    100k rows takes about 2.5 ms of CPU, so readers rarely wait long).

    Args:
        dim: length of every vector.
        exact_threshold: live rows at which search switches from the exact
            scan to the projected prefilter with exact re-scoring.
        prefilter_dim: width of the projection; default a third of ``dim``
            (128 for 384-d vectors), never more than ``dim``.
        oversample: re-score pool per requested result.
        min_pool: smallest re-score pool.

    Raises:
        ValueError: a parameter is out of range.
    """

    def __init__(
        self,
        dim: int,
        *,
        exact_threshold: int = DEFAULT_EXACT_THRESHOLD,
        prefilter_dim: int | None = None,
        oversample: int = DEFAULT_OVERSAMPLE,
        min_pool: int = DEFAULT_MIN_POOL,
    ) -> None:
        if dim < 1:
            raise ValueError(f"dim must be a positive integer; got {dim}")
        if exact_threshold < 0:
            raise ValueError(f"exact_threshold must be >= 0; got {exact_threshold}")
        if oversample < 1 or min_pool < 1:
            raise ValueError(
                f"oversample and min_pool must be >= 1; got {oversample} and {min_pool}"
            )
        width = _default_prefilter_dim(dim) if prefilter_dim is None else prefilter_dim
        if not 1 <= width <= dim:
            raise ValueError(f"prefilter_dim must be between 1 and dim ({dim}); got {width}")
        self._dim = dim
        self._exact_threshold = exact_threshold
        self._prefilter_dim = width
        self._oversample = oversample
        self._min_pool = min_pool
        self._lock = threading.RLock()

        self._size = 0  # rows in use, dead ones included
        self._dead = 0
        self._keys: Keys = np.empty(0, dtype=np.int64)
        self._vecs: _Matrix = np.empty((0, dim), dtype=np.float32)
        self._alive: _Mask = np.empty(0, dtype=np.bool_)
        self._row_of: dict[int, int] = {}

        # The projection exists only at or above exact_threshold live rows.
        self._basis: _Matrix | None = None  # (dim, width)
        self._offset: _Matrix | None = None  # (width,): the mean, projected
        self._proj: _Matrix | None = None  # (capacity, width)
        self._fitted_at = 0  # live rows when the basis was fitted

    # ----------------------------------------------------------- properties

    @property
    def dim(self) -> int:
        """Length of every vector in this index."""
        return self._dim

    @property
    def prefilter_dim(self) -> int:
        """Width of the projection the prefilter ranks with."""
        return self._prefilter_dim

    @property
    def uses_prefilter(self) -> bool:
        """Whether the projection is in use (live rows at or above ``exact_threshold``).

        A search then ranks with it whenever more rows qualify than its
        re-score pool holds; otherwise it scores the qualifying rows exactly.
        """
        with self._lock:
            return self._prefilter_active()

    @property
    def nbytes(self) -> int:
        """Bytes held by the index's arrays (allocated capacity, not just live rows).

        The key-to-row dict is not counted; it adds roughly 100 bytes a key.
        """
        with self._lock:
            total = self._keys.nbytes + self._vecs.nbytes + self._alive.nbytes
            if self._proj is not None and self._basis is not None:
                total += self._proj.nbytes + self._basis.nbytes
            return int(total)

    @property
    def held_bytes(self) -> int:
        """Bytes the index holds, estimated in O(1) without its lock (for cache bounds).

        :attr:`nbytes` (the arrays, by capacity) plus the key-to-row dict: its
        table (``sys.getsizeof``) and two int objects an entry.
        """
        total = self._keys.nbytes + self._vecs.nbytes + self._alive.nbytes
        proj, basis = self._proj, self._basis
        if proj is not None and basis is not None:
            total += proj.nbytes + basis.nbytes
        return int(total) + sys.getsizeof(self._row_of) + len(self._row_of) * _ENTRY_BYTES

    def __len__(self) -> int:
        """Return the number of live (added and not removed) keys."""
        with self._lock:
            return self._size - self._dead

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is live in the index."""
        if not isinstance(key, int | np.integer):
            return False
        with self._lock:
            return int(key) in self._row_of

    def vectors(self, keys: npt.ArrayLike) -> tuple[Keys, _Matrix]:
        """The stored (unit-length) vectors of the live ``keys`` among those given.

        Returns ``(keys, vectors)`` in the order given, without the keys the
        index does not hold; the vectors are a copy.
        """
        wanted = self._as_keys(keys, "keys")
        with self._lock:
            rows = [(k, self._row_of[k]) for k in wanted.tolist() if k in self._row_of]
            if not rows:
                return np.empty(0, np.int64), np.empty((0, self._dim), np.float32)
            found = np.array([k for k, _ in rows], dtype=np.int64)
            return found, self._vecs[np.array([r for _, r in rows], dtype=np.intp)]

    # ------------------------------------------------------------ mutations

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows in all, so adds up to that many copy nothing.

        Exactly that many (a cold load knows its count): a scope of 20
        memories holds 20 rows, not the 64 that growth starts from.
        """
        with self._lock:
            if rows > self._keys.shape[0]:
                self._resize(rows)

    def add(self, keys: npt.ArrayLike, vectors: npt.ArrayLike, *, refit: bool = True) -> None:
        """Add vectors under ``keys``; a key already present gets the new vector.

        Args:
            keys: shape ``(n,)``, integer row ids. Within one call a repeated
                key keeps its last vector.
            vectors: shape ``(n, dim)``; normalised here, so any non-zero
                finite vectors are accepted.
            refit: whether the prefilter may be fitted or refitted now (its
                schedule: docs/vector-index.md). A load in chunks passes
                False, then calls :meth:`refit` once: new rows are projected
                either way, so searches in between stay correct.

        Raises:
            ValueError: wrong shapes, a dimension other than ``dim``, or a
                zero / non-finite vector. Nothing is changed then.
        """
        key_arr = self._as_keys(keys, "keys")
        vecs = np.asarray(vectors, dtype=np.float32)
        if vecs.ndim != 2 or vecs.shape[1] != self._dim:
            raise ValueError(
                f"vectors must have shape (n, {self._dim}) for this index; got "
                f"{vecs.shape} (was the index built for another embedding model?)"
            )
        if vecs.shape[0] != key_arr.shape[0]:
            raise ValueError(
                f"got {key_arr.shape[0]} keys but {vecs.shape[0]} vectors; pass one key per vector"
            )
        if key_arr.size == 0:
            return
        vecs = self._normalised(vecs)
        key_arr, vecs = self._last_wins(key_arr, vecs)

        with self._lock:
            found = [self._row_of.get(key, -1) for key in key_arr.tolist()]
            rows = np.asarray(found, dtype=np.intp)
            existing = rows >= 0
            if existing.any():
                # Replace in place: the row keeps its position, so no dead
                # row is left behind by an update.
                self._vecs[rows[existing]] = vecs[existing]
                if self._proj is not None:
                    self._proj[rows[existing]] = self._project(vecs[existing])
            fresh = ~existing
            count = int(fresh.sum())
            if count:
                self._reserve(self._size + count)
                start, stop = self._size, self._size + count
                new_keys = key_arr[fresh]
                self._keys[start:stop] = new_keys
                self._vecs[start:stop] = vecs[fresh]
                self._alive[start:stop] = True
                if self._proj is not None:
                    self._proj[start:stop] = self._project(vecs[fresh])
                self._row_of.update(zip(new_keys.tolist(), range(start, stop), strict=True))
                self._size = stop
            if refit:
                self._refresh_prefilter()

    def refit(self) -> None:
        """Fit or refit the prefilter if its schedule says so (after adds with ``refit=False``)."""
        with self._lock:
            self._refresh_prefilter()

    def remove(self, keys: npt.ArrayLike) -> int:
        """Remove ``keys``; unknown keys are ignored.

        Rows are only marked dead; the arrays are compacted once dead rows
        exceed a quarter of them.

        Returns:
            How many keys were live and are now removed.
        """
        key_arr = self._as_keys(keys, "keys")
        with self._lock:
            removed = 0
            for key in key_arr.tolist():
                row = self._row_of.pop(key, None)
                if row is not None:
                    self._alive[row] = False
                    removed += 1
            self._dead += removed
            if self._dead and self._dead > _COMPACT_DEAD_FRACTION * self._size:
                self._compact()
            if removed:
                self._refresh_prefilter()
            return removed

    # --------------------------------------------------------------- search

    def search(
        self,
        query: npt.ArrayLike,
        k: int,
        allowed: npt.ArrayLike | None = None,
    ) -> tuple[Keys, Scores]:
        """Return the ``k`` keys most similar to ``query``, best first.

        Args:
            query: shape ``(dim,)``; normalised here.
            k: how many results at most; fewer come back when fewer rows
                qualify.
            allowed: if given, only these keys may be returned (keys not in
                the index are ignored). Small sets are scored exactly, row by
                row; large ones mask the normal search.

        Returns:
            ``(keys, scores)``: int64 keys and float32 cosine similarities in
            ``[-1, 1]``, sorted by descending score. Scores are always exact,
            whichever path found the candidates.

        Raises:
            ValueError: ``k`` is negative, or ``query`` has the wrong shape,
                is zero or is not finite.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0; got {k}")
        q = _unit_query(query, self._dim)
        allowed_keys = None if allowed is None else self._as_keys(allowed, "allowed")

        with self._lock:
            live = self._size - self._dead
            if k == 0 or live == 0:
                return _empty()
            n = self._size
            pool = self._pool(k)
            # Which rows may be returned: all live ones, a mask over every row,
            # or (for a small subset) the explicit rows.
            eligible: _Mask | None = None
            rows: _Rows | None = None
            count = live
            if allowed_keys is not None:
                if allowed_keys.size <= _SMALL_ALLOWED:
                    found = [self._row_of.get(key, -1) for key in allowed_keys.tolist()]
                    rows = np.unique(np.asarray(found, dtype=np.intp))
                    rows = rows[rows >= 0]
                    count = rows.size
                else:
                    eligible = self._alive[:n] & np.isin(self._keys[:n], allowed_keys)
                    count = int(eligible.sum())
                    if count <= pool or count * 4 <= n:
                        # Work on the subset's rows only. Masking the others
                        # with -inf instead leaves argpartition a sea of ties:
                        # measured 20x slower at 5 % of 100k rows.
                        rows = np.flatnonzero(eligible)
            elif self._dead:
                eligible = self._alive[:n]

            prefilter = self._prefilter_active() and count > pool
            if rows is not None:
                if prefilter:
                    assert self._proj is not None and self._basis is not None
                    approx = _dot_rows(self._proj[rows], _dot_rows(self._basis.T, q))
                    rows = rows[_top(approx, pool)]
                return self._score_rows(rows, q, k)
            if prefilter:
                assert self._proj is not None and self._basis is not None
                # The projected score is q·(x - mean) within the basis; the
                # dropped q·mean term is the same for every row, so ranking
                # by it approximates ranking by cosine.
                approx = _dot_rows(self._proj[:n], _dot_rows(self._basis.T, q))
                if eligible is not None:
                    approx[~eligible] = -np.inf
                return self._score_rows(_top(approx, pool), q, k)
            scores = _dot_rows(self._vecs[:n], q)
            if eligible is not None:
                scores[~eligible] = -np.inf
            top = _top(scores, min(k, count))
            return self._keys[top], _clip(scores[top])

    def cosines(self, query: npt.ArrayLike, keys: npt.ArrayLike) -> tuple[Keys, Scores]:
        """The exact cosine of ``query`` with each of ``keys`` in the index, best first.

        :meth:`search` of ``k = len(keys)`` within ``keys``: every one of them
        that is in the index, none left out.
        """
        wanted = self._as_keys(keys, "keys")
        return self.search(query, wanted.size, allowed=wanted)

    # -------------------------------------------------------------- helpers

    def _pool(self, k: int) -> int:
        return max(k * self._oversample, self._min_pool)

    def _prefilter_active(self) -> bool:
        return self._proj is not None and self._size - self._dead >= self._exact_threshold

    def _score_rows(self, rows: _Rows, q: npt.NDArray[np.float32], k: int) -> tuple[Keys, Scores]:
        if rows.size == 0:
            return _empty()
        scores = _dot_rows(self._vecs[rows], q)
        top = _top(scores, min(k, rows.size))
        return self._keys[rows[top]], _clip(scores[top])

    def _project(self, vecs: _Matrix) -> _Matrix:
        assert self._basis is not None and self._offset is not None
        projected: _Matrix = vecs @ self._basis
        projected -= self._offset
        return projected

    def _reserve(self, rows: int) -> None:
        capacity = self._keys.shape[0]
        if rows <= capacity:
            return
        self._resize(max(rows, int(capacity * _GROWTH), _MIN_CAPACITY))

    def _resize(self, capacity: int) -> None:
        n = self._size
        keys = np.empty(capacity, dtype=np.int64)
        keys[:n] = self._keys[:n]
        vecs = np.empty((capacity, self._dim), dtype=np.float32)
        vecs[:n] = self._vecs[:n]
        alive = np.zeros(capacity, dtype=np.bool_)
        alive[:n] = self._alive[:n]
        self._keys, self._vecs, self._alive = keys, vecs, alive
        if self._proj is not None:
            proj = np.empty((capacity, self._proj.shape[1]), dtype=np.float32)
            proj[:n] = self._proj[:n]
            self._proj = proj

    def _compact(self) -> None:
        live = np.flatnonzero(self._alive[: self._size])
        count = live.size
        capacity = max(int(count * _GROWTH), _MIN_CAPACITY)
        keys = np.empty(capacity, dtype=np.int64)
        keys[:count] = self._keys[live]
        vecs = np.empty((capacity, self._dim), dtype=np.float32)
        vecs[:count] = self._vecs[live]
        alive = np.zeros(capacity, dtype=np.bool_)
        alive[:count] = True
        if self._proj is not None:
            proj = np.empty((capacity, self._proj.shape[1]), dtype=np.float32)
            proj[:count] = self._proj[live]
            self._proj = proj
        self._keys, self._vecs, self._alive = keys, vecs, alive
        self._row_of = dict(zip(keys[:count].tolist(), range(count), strict=True))
        self._size = count
        self._dead = 0

    def _refresh_prefilter(self) -> None:
        live = self._size - self._dead
        if live == 0:
            self._basis = self._offset = self._proj = None
            self._fitted_at = 0
        elif self._proj is None:
            if live >= self._exact_threshold:
                self._fit()
        elif live * 2 < self._exact_threshold:
            # Hysteresis: dropping only well below the threshold keeps a scope
            # that hovers around it from refitting on every add/remove.
            self._basis = self._offset = self._proj = None
            self._fitted_at = 0
        elif live >= self._fitted_at * _REFIT_FACTOR or live * _REFIT_FACTOR <= self._fitted_at:
            self._fit()

    def _fit(self) -> None:
        rows = np.flatnonzero(self._alive[: self._size])
        if rows.size > _FIT_SAMPLE:
            # An even stride over rows rather than a random draw: deterministic,
            # and rows are in insertion order, so it spans the scope's history.
            rows = rows[np.linspace(0, rows.size - 1, _FIT_SAMPLE).astype(np.intp)]
        sample = self._vecs[rows].astype(np.float64)
        mean = sample.mean(axis=0)
        sample -= mean
        covariance = sample.T @ sample
        # eigh returns ascending eigenvalues; the last columns span the most
        # variance.
        _, eigvecs = np.linalg.eigh(covariance)
        width = self._prefilter_dim
        basis = np.ascontiguousarray(eigvecs[:, ::-1][:, :width], dtype=np.float32)
        self._basis = basis
        self._offset = (mean @ basis.astype(np.float64)).astype(np.float32)
        proj = np.empty((self._keys.shape[0], width), dtype=np.float32)
        proj[: self._size] = self._project(self._vecs[: self._size])
        self._proj = proj
        self._fitted_at = self._size - self._dead

    @staticmethod
    def _as_keys(keys: npt.ArrayLike, name: str) -> Keys:
        arr = np.asarray(keys)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if arr.ndim != 1:
            raise ValueError(f"{name} must be a 1-D array of integer keys; got shape {arr.shape}")
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"{name} must hold integer keys; got dtype {arr.dtype}")
        return arr.astype(np.int64, copy=False)

    @staticmethod
    def _normalised(vecs: _Matrix) -> _Matrix:
        norms = np.linalg.norm(vecs, axis=1)
        bad = ~np.isfinite(norms) | (norms == 0)
        if bad.any():
            raise ValueError(
                f"vector {int(np.flatnonzero(bad)[0])} is zero or not finite; "
                "embeddings must be non-zero finite numbers"
            )
        # A new array: the caller's buffer is never aliased by the index.
        result: _Matrix = (vecs / norms[:, np.newaxis]).astype(np.float32, copy=False)
        return result

    @staticmethod
    def _last_wins(keys: Keys, vecs: _Matrix) -> tuple[Keys, _Matrix]:
        unique, first_in_reversed = np.unique(keys[::-1], return_index=True)
        if unique.size == keys.size:
            return keys, vecs
        last = keys.size - 1 - first_in_reversed
        return keys[last], vecs[last]


def _unit_query(query: npt.ArrayLike, dim: int) -> npt.NDArray[np.float32]:
    """``query`` as a float32 vector of length ``dim``, normalised; refuses another shape."""
    q = np.asarray(query, dtype=np.float32)
    if q.shape != (dim,):
        raise ValueError(
            f"query must have shape ({dim},) for this index; got {q.shape} "
            "(was the index built for another embedding model?)"
        )
    out: npt.NDArray[np.float32] = VectorIndex._normalised(q[np.newaxis, :])[0]
    return out


def _dot_rows(matrix: _Matrix, vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """Return ``matrix @ vector`` computed on the calling thread."""
    # Not `@`: numpy hands that to the BLAS, whose worker threads spin-wait
    # for a core when the machine is busy. Measured on 2 cores at load 6, a
    # product that takes 1.8 ms on one thread took 12 ms p50 through a
    # 2-thread OpenBLAS, and a 1,600-row re-score 8 ms instead of 0.1 ms.
    # einsum runs the same memory-bound loop on this thread, as fast as a
    # one-thread BLAS, so latency does not depend on what else is running.
    product: npt.NDArray[np.float32] = np.einsum("ij,j->i", matrix, vector)
    return product


def _top(scores: npt.NDArray[np.float32], k: int) -> _Rows:
    """Return the indices of the ``k`` highest scores, highest first."""
    if k >= scores.size:
        order: _Rows = np.argsort(-scores, kind="stable")
        return order
    part = np.argpartition(scores, scores.size - k)[scores.size - k :]
    ranked: _Rows = part[np.argsort(-scores[part], kind="stable")]
    return ranked


_SAMPLE_STEP: Final = 16
"""One score in this many is sampled to bound the ``count`` best (:func:`_best_unordered`)."""


def _best_unordered(scores: npt.NDArray[np.float32], count: int) -> _Rows:
    """The indices of the ``count`` highest scores, in no order (``count < scores.size``).

    The same set as ``np.argpartition``'s last ``count`` (which of equal scores
    at the bound is taken is as arbitrary there), found faster when ``count``
    is a small share: a sample of the scores gives a bound that a little more
    than ``count`` scores reach, and only those are partitioned. When fewer
    reach it (a sample unlike the rest), all the scores are.
    """
    n = scores.size
    sample = scores[::_SAMPLE_STEP]
    # The sample's m-th best: about 1.25 x count of all the scores reach it.
    m = count // _SAMPLE_STEP + count // (4 * _SAMPLE_STEP) + 8
    if count * 4 <= n and m < sample.size:
        cut = np.partition(sample, sample.size - m)[sample.size - m]
        above = np.flatnonzero(scores >= cut)
        if above.size >= count:
            part = np.argpartition(scores[above], above.size - count)[above.size - count :]
            chosen: _Rows = above[part]
            return chosen
    best: _Rows = np.argpartition(scores, n - count)[n - count :]
    return best


def _clip(scores: npt.NDArray[np.float32]) -> Scores:
    # Rounding in float32 products can land a hair outside [-1, 1].
    clipped: Scores = np.clip(scores, -1.0, 1.0).astype(np.float32, copy=False)
    return clipped


def _empty() -> tuple[Keys, Scores]:
    return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)


# ------------------------------------------------------------- compact form

Fetch = Callable[[Keys], tuple[Keys, _Matrix]]
"""Reads the float32 vectors of some keys from where they live: ``(found keys, vectors)``."""

CODE_SCALE: Final = 127.0
"""int8 codes: each component times ``127 / max |component|`` of its vector, rounded."""


def encode(vectors: npt.ArrayLike) -> tuple[npt.NDArray[np.int8], Scores]:
    """int8 codes of each vector and the scale that turns them back (one float per vector).

    A vector's largest component maps to ±127: no fit and no clipping, and
    a component's error is at most half a step (``max |x| / 254``).
    """
    vecs = np.asarray(vectors, dtype=np.float32)
    peak = np.abs(vecs).max(axis=1)
    peak[peak == 0] = 1.0
    codes = np.rint(vecs * (CODE_SCALE / peak)[:, np.newaxis]).astype(np.int8)
    scales: Scores = (peak / CODE_SCALE).astype(np.float32)
    return codes, scales


def fit_basis(sample: npt.ArrayLike, width: int) -> tuple[_Matrix, _Matrix]:
    """The top ``width`` principal directions of ``sample`` and its projected mean.

    What :class:`VectorIndex` fits for its prefilter, as ``(basis (dim, width),
    offset (width,))``; :func:`project` applies it.
    """
    rows = np.asarray(sample, dtype=np.float64)
    mean = rows.mean(axis=0)
    centred = rows - mean
    _, eigvecs = np.linalg.eigh(centred.T @ centred)
    basis = np.ascontiguousarray(eigvecs[:, ::-1][:, :width], dtype=np.float32)
    offset = (mean @ basis.astype(np.float64)).astype(np.float32)
    return basis, offset


def project(vectors: npt.ArrayLike, basis: _Matrix, offset: _Matrix) -> _Matrix:
    """Vectors on a fitted basis, centred: what the prefilter ranks with."""
    projected: _Matrix = np.asarray(vectors, dtype=np.float32) @ basis
    projected -= offset
    return projected


class CompactVectorIndex:
    """Cosine search over a large scope without its float32 vectors in memory.

    What it holds per row: the projection on a basis fitted elsewhere (the
    store fits one per file and keeps each memory's projection in the file,
    so a cold load reads no float32 vector and fits nothing) and int8 codes
    of the vector (:func:`encode`). A search ranks every row by the
    projection (as :class:`VectorIndex`'s prefilter), re-ranks the pool
    (``max(k * oversample, min_pool)`` rows) by the codes, and re-scores the
    best ``k + max(k // 4, 8)`` of those exactly from the float32 vectors that
    ``fetch`` reads, so returned scores are exact cosines. A key ``fetch``
    does not find (gone since the index last caught up) is not returned.

    Per row 4 bytes a projected dimension, one a vector dimension, 13 of key,
    scale and flag: 917 bytes at 384-d with a 128-d projection, against
    2,059 for :class:`VectorIndex` with its prefilter.

    Args:
        dim: length of every vector.
        basis: ``(dim, width)`` float32, from :func:`fit_basis`.
        offset: ``(width,)`` float32, the projected mean.
        fetch: reads exact vectors by key.
        oversample: re-score pool per requested result.
        min_pool: smallest re-score pool.
    """

    def __init__(
        self,
        dim: int,
        basis: _Matrix,
        offset: _Matrix,
        fetch: Fetch,
        *,
        oversample: int = DEFAULT_OVERSAMPLE,
        min_pool: int = DEFAULT_MIN_POOL,
    ) -> None:
        if basis.ndim != 2 or basis.shape[0] != dim or offset.shape != (basis.shape[1],):
            raise ValueError(
                f"basis must be ({dim}, width) and offset (width,); got {basis.shape} and "
                f"{offset.shape}"
            )
        self._dim = dim
        self._width = int(basis.shape[1])
        self._basis = np.ascontiguousarray(basis, dtype=np.float32)
        self._offset = np.asarray(offset, dtype=np.float32)
        self._fetch = fetch
        self._oversample = oversample
        self._min_pool = min_pool
        # Re-scored exactly beyond k: this percentage of k, at least this many.
        self._rescore = (25, 8)
        self._lock = threading.RLock()
        self._size = 0
        self._dead = 0
        self._keys: Keys = np.empty(0, dtype=np.int64)
        self._codes: npt.NDArray[np.int8] = np.empty((0, dim), dtype=np.int8)
        self._scales: Scores = np.empty(0, dtype=np.float32)
        self._proj: _Matrix = np.empty((0, self._width), dtype=np.float32)
        self._alive: _Mask = np.empty(0, dtype=np.bool_)
        self._row_of: dict[int, int] = {}

    @property
    def dim(self) -> int:
        """Length of every vector in this index."""
        return self._dim

    @property
    def uses_prefilter(self) -> bool:
        """Always: the projection ranks every search larger than its pool."""
        return True

    @property
    def width(self) -> int:
        """Width of the projection."""
        return self._width

    @property
    def nbytes(self) -> int:
        """Bytes held by the index's arrays (allocated capacity)."""
        with self._lock:
            return self._array_bytes()

    def _array_bytes(self) -> int:
        return int(
            self._keys.nbytes
            + self._codes.nbytes
            + self._scales.nbytes
            + self._proj.nbytes
            + self._alive.nbytes
            + self._basis.nbytes
        )

    @property
    def held_bytes(self) -> int:
        """:attr:`nbytes` and the key-to-row dict, in O(1) without the lock (cache bounds)."""
        return self._array_bytes() + sys.getsizeof(self._row_of) + len(self._row_of) * _ENTRY_BYTES

    def __len__(self) -> int:
        """Live keys."""
        with self._lock:
            return self._size - self._dead

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is live in the index."""
        if not isinstance(key, int | np.integer):
            return False
        with self._lock:
            return int(key) in self._row_of

    def vectors(self, keys: npt.ArrayLike) -> tuple[Keys, _Matrix]:
        """The exact vectors of ``keys``, as ``fetch`` reads them (keys it finds only)."""
        wanted = VectorIndex._as_keys(keys, "keys")
        if wanted.size == 0:
            return np.empty(0, np.int64), np.empty((0, self._dim), np.float32)
        found, vecs = self._fetch(wanted)
        return found, np.asarray(vecs, dtype=np.float32).reshape(found.size, self._dim)

    def reserve(self, rows: int) -> None:
        """Make room for ``rows`` rows in all."""
        with self._lock:
            if rows > self._keys.shape[0]:
                self._resize(rows)

    def refit(self) -> None:
        """Nothing to do: the basis is the store's (the same call as :class:`VectorIndex`)."""

    def add(self, keys: npt.ArrayLike, vectors: npt.ArrayLike, *, refit: bool = True) -> None:
        """Add float32 vectors (encoded and projected here); a present key is replaced."""
        vecs = VectorIndex._normalised(np.asarray(vectors, dtype=np.float32))
        codes, scales = encode(vecs)
        self.add_encoded(keys, codes, scales, project(vecs, self._basis, self._offset))

    def add_encoded(
        self,
        keys: npt.ArrayLike,
        codes: npt.NDArray[np.int8],
        scales: npt.ArrayLike,
        projected: npt.ArrayLike,
    ) -> None:
        """Add rows as the store keeps them: codes, their scales and the projections."""
        key_arr = VectorIndex._as_keys(keys, "keys")
        scale_arr = np.asarray(scales, dtype=np.float32)
        proj = np.asarray(projected, dtype=np.float32)
        n = key_arr.size
        if (
            codes.shape != (n, self._dim)
            or scale_arr.shape != (n,)
            or proj.shape
            != (
                n,
                self._width,
            )
        ):
            raise ValueError(
                f"need ({n}, {self._dim}) codes, ({n},) scales and ({n}, {self._width}) "
                f"projections; got {codes.shape}, {scale_arr.shape}, {proj.shape}"
            )
        if n == 0:
            return
        unique, first_in_reversed = np.unique(key_arr[::-1], return_index=True)
        if unique.size != n:
            last = n - 1 - first_in_reversed
            key_arr, codes, scale_arr, proj = (
                key_arr[last],
                codes[last],
                scale_arr[last],
                proj[last],
            )
        with self._lock:
            if self._row_of:
                found = [self._row_of.get(k, -1) for k in key_arr.tolist()]
                rows = np.asarray(found, dtype=np.intp)
            else:  # a cold load: every key is new
                rows = np.full(n, -1, dtype=np.intp)
            existing = rows >= 0
            if existing.any():
                at = rows[existing]
                self._codes[at], self._scales[at] = codes[existing], scale_arr[existing]
                self._proj[at] = proj[existing]
            fresh = ~existing
            count = int(fresh.sum())
            if count:
                if count < n:
                    key_arr, codes = key_arr[fresh], codes[fresh]
                    scale_arr, proj = scale_arr[fresh], proj[fresh]
                if self._size + count > self._keys.shape[0]:
                    self._resize(max(self._size + count, int(self._keys.shape[0] * _GROWTH)))
                start, stop = self._size, self._size + count
                self._keys[start:stop] = key_arr
                self._codes[start:stop] = codes
                self._scales[start:stop] = scale_arr
                self._proj[start:stop] = proj
                self._alive[start:stop] = True
                self._row_of.update(zip(key_arr.tolist(), range(start, stop), strict=True))
                self._size = stop

    def remove(self, keys: npt.ArrayLike) -> int:
        """Remove ``keys`` (unknown ones are ignored); returns how many were live."""
        key_arr = VectorIndex._as_keys(keys, "keys")
        with self._lock:
            removed = 0
            for key in key_arr.tolist():
                row = self._row_of.pop(key, None)
                if row is not None:
                    self._alive[row] = False
                    removed += 1
            self._dead += removed
            if self._dead and self._dead > _COMPACT_DEAD_FRACTION * self._size:
                self._compact()
            return removed

    def search(
        self, query: npt.ArrayLike, k: int, allowed: npt.ArrayLike | None = None
    ) -> tuple[Keys, Scores]:
        """The ``k`` keys most similar to ``query``, best first, with exact cosines.

        As :meth:`VectorIndex.search`; the exact vectors of the best
        ``k + max(k // 4, 8)`` candidates are read through ``fetch`` (outside
        the index's lock).
        """
        if k < 0:
            raise ValueError(f"k must be >= 0; got {k}")
        q = _unit_query(query, self._dim)
        allowed_keys = None if allowed is None else VectorIndex._as_keys(allowed, "allowed")
        with self._lock:
            n = self._size
            if k == 0 or n - self._dead == 0:
                return _empty()
            if allowed_keys is None:
                rows = np.flatnonzero(self._alive[:n]) if self._dead else None
            elif allowed_keys.size <= _SMALL_ALLOWED:
                found = [self._row_of.get(key, -1) for key in allowed_keys.tolist()]
                rows = np.unique(np.asarray(found, dtype=np.intp))
                rows = rows[rows >= 0]
            else:
                rows = np.flatnonzero(self._alive[:n] & np.isin(self._keys[:n], allowed_keys))
            count = n if rows is None else rows.size
            if count == 0:
                return _empty()
            pool = max(k * self._oversample, self._min_pool)
            if count > pool:
                target = _dot_rows(self._basis.T, q)
                approx = _dot_rows(self._proj[:n] if rows is None else self._proj[rows], target)
                # The pool as a set: the codes re-rank it, no need to sort it.
                best = _best_unordered(approx, pool)
                rows = best if rows is None else rows[best]
            elif rows is None:
                rows = np.arange(n)
            coded = self._scales[rows] * np.einsum(
                "ij,j->i", self._codes[rows], q, dtype=np.float32, casting="unsafe"
            )
            exact = min(rows.size, k + max(k * self._rescore[0] // 100, self._rescore[1]))
            keys = self._keys[rows[_top(coded, exact)]]
        found_keys, vecs = self._fetch(keys)
        if found_keys.size == 0:
            return _empty()
        scores = _dot_rows(np.ascontiguousarray(vecs, dtype=np.float32), q)
        top = _top(scores, min(k, found_keys.size))
        return found_keys[top], _clip(scores[top])

    def cosines(self, query: npt.ArrayLike, keys: npt.ArrayLike) -> tuple[Keys, Scores]:
        """The exact cosine of ``query`` with each of ``keys`` in the index, best first.

        What :meth:`search` of ``k = len(keys)`` within ``keys`` returns (each
        of them that is in the index and that ``fetch`` finds), without
        ranking them by their codes first: every one is re-scored anyway.
        """
        q = _unit_query(query, self._dim)
        wanted = VectorIndex._as_keys(keys, "keys")
        with self._lock:
            present = np.array(
                [key for key in dict.fromkeys(wanted.tolist()) if key in self._row_of],
                dtype=np.int64,
            )
        if present.size == 0:
            return _empty()
        found_keys, vecs = self._fetch(present)
        if found_keys.size == 0:
            return _empty()
        scores = _dot_rows(np.ascontiguousarray(vecs, dtype=np.float32), q)
        top = _top(scores, found_keys.size)
        return found_keys[top], _clip(scores[top])

    def _resize(self, capacity: int) -> None:
        n = self._size
        keys = np.empty(capacity, dtype=np.int64)
        keys[:n] = self._keys[:n]
        codes = np.empty((capacity, self._dim), dtype=np.int8)
        codes[:n] = self._codes[:n]
        scales = np.empty(capacity, dtype=np.float32)
        scales[:n] = self._scales[:n]
        proj = np.empty((capacity, self._width), dtype=np.float32)
        proj[:n] = self._proj[:n]
        alive = np.zeros(capacity, dtype=np.bool_)
        alive[:n] = self._alive[:n]
        self._keys, self._codes, self._scales, self._proj = keys, codes, scales, proj
        self._alive = alive

    def _compact(self) -> None:
        live = np.flatnonzero(self._alive[: self._size])
        keys, codes = self._keys[live], self._codes[live]
        scales, proj = self._scales[live], self._proj[live]
        self._size = self._dead = 0
        self._row_of = {}
        self._resize(max(int(live.size * _GROWTH), _MIN_CAPACITY))
        count = live.size
        self._keys[:count], self._codes[:count] = keys, codes
        self._scales[:count], self._proj[:count] = scales, proj
        self._alive[:count] = True
        self._row_of = dict(zip(keys.tolist(), range(count), strict=True))
        self._size = count
