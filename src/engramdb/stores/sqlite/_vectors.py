"""The compact form of the vectors, kept in the file: int8 codes, a basis, projections.

Schema version 6 (docs/vector-index.md, "Large scopes: the compact index").
A scope of at least :data:`COMPACT_AT` memories is searched through a
:class:`~engramdb.core.vectors.CompactVectorIndex`: per memory its
projection on a basis fitted over the file and its int8 codes, both read
from ``memory_codes``, so a cold load reads about a quarter of the float32
bytes, fits nothing and projects nothing, and the process holds 917 bytes a
memory instead of 2,059. The float32 vectors stay in ``memory_vectors``:
the exact re-score reads those of a search's few best candidates.

Who keeps them: every write transaction (``_Store._write``), as for the
keyword postings. TEMP triggers on ``memory_vectors`` note each row an
INSERT or UPDATE writes; before the COMMIT, :func:`flush` encodes those
vectors (and projects them when the file has a basis). A purge or reset
takes the codes with the memories (``ON DELETE CASCADE``).

The basis: fitted (:func:`~engramdb.core.vectors.fit_basis`, an even stride
of at most 20,000 vectors of the file) by the write that takes the file to
:data:`COMPACT_AT` memories, and again when the count has doubled since,
up to :data:`LAST_REFIT`; each fit re-projects every memory and moves the
epoch, so every process drops its caches and loads the new projections. One
basis per file, not per scope: a cold load then needs no fit (about a second
at 100k), and the directions that matter for an embedding model are mostly
the model's, whoever wrote the text (recall: docs/vector-index.md).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from engramdb.core.vectors import DEFAULT_EXACT_THRESHOLD, encode, fit_basis, project

__all__ = [
    "COMPACT_AT",
    "LAST_REFIT",
    "TRIGGERS",
    "Basis",
    "BasisCache",
    "backfill",
    "decode",
    "fetch",
    "flush",
    "load_basis",
]

COMPACT_AT: Final = DEFAULT_EXACT_THRESHOLD
"""Memories in a scope (and in the file, for the first fit) from which the compact index serves."""

LAST_REFIT: Final = 80_000
"""No refit once the basis was fitted on this many memories (refits at 40k and 80k)."""

_FIT_SAMPLE: Final = 20_000
_CHUNK: Final = 4_096

TRIGGERS = (
    "CREATE TEMP TABLE IF NOT EXISTS vector_dirty (rowid INTEGER PRIMARY KEY)",
    "CREATE TEMP TRIGGER IF NOT EXISTS vector_dirty_insert AFTER INSERT ON main.memory_vectors "
    "BEGIN INSERT OR IGNORE INTO vector_dirty(rowid) VALUES (new.memory_rowid); END",
    "CREATE TEMP TRIGGER IF NOT EXISTS vector_dirty_update AFTER UPDATE ON main.memory_vectors "
    "BEGIN INSERT OR IGNORE INTO vector_dirty(rowid) VALUES (new.memory_rowid); END",
)
"""Per connection: note every vector row a statement writes (for :func:`flush` at commit)."""

F32 = np.dtype("<f4")


@dataclass(frozen=True)
class Basis:
    """The file's projection basis: ``(dim, width)`` directions and the projected mean."""

    basis: npt.NDArray[np.float32]
    offset: npt.NDArray[np.float32]
    fitted_at: int

    @property
    def dim(self) -> int:
        """Length of the vectors it projects."""
        return int(self.basis.shape[0])


def _width(dim: int) -> int:
    # VectorIndex's prefilter width: 128 for 384-d vectors.
    return dim if dim <= 96 else max(64, dim // 3)


def _marks(n: int) -> str:
    return ",".join("?" * n)


def load_basis(con: sqlite3.Connection) -> Basis | None:
    """The file's basis, or None before the first fit."""
    row = con.execute(
        "SELECT dim, width, fitted_at, basis, centre FROM vector_basis WHERE id = 1"
    ).fetchone()
    if row is None:
        return None
    dim, width, fitted_at = int(row[0]), int(row[1]), int(row[2])
    basis = np.frombuffer(row[3], dtype=F32).reshape(dim, width).astype(np.float32)
    offset = np.frombuffer(row[4], dtype=F32).astype(np.float32)
    return Basis(basis, offset, fitted_at)


def _pack(codes: npt.NDArray[np.int8], scales: npt.NDArray[np.float32]) -> list[bytes]:
    """Each row's scale (float32) then its codes: one BLOB per memory."""
    return [
        scale.tobytes() + row.tobytes()
        for scale, row in zip(scales.astype(F32), codes, strict=True)
    ]


def decode(
    blobs: Sequence[bytes], projections: Sequence[bytes], dim: int, width: int
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Codes, scales and float32 projections of rows read from ``memory_codes``."""
    packed = np.frombuffer(b"".join(blobs), dtype=np.dtype([("s", F32), ("c", "i1", (dim,))]))
    proj = np.frombuffer(b"".join(projections), dtype="<f2").reshape(len(projections), width)
    return packed["c"], packed["s"].astype(np.float32), proj.astype(np.float32)


def _encode_rows(
    con: sqlite3.Connection, rows: list[tuple[int, bytes]], basis: Basis | None
) -> None:
    """Write the codes (and projections, with a basis of their width) of ``(rowid, blob)``."""
    if not rows:
        return
    vecs = np.frombuffer(b"".join(b for _, b in rows), dtype=F32).reshape(len(rows), -1)
    codes, scales = encode(vecs)
    projected: list[bytes | None] = [None] * len(rows)
    if basis is not None and basis.dim == vecs.shape[1]:
        proj = project(vecs, basis.basis, basis.offset).astype("<f2")
        projected = [p.tobytes() for p in proj]
    con.executemany(
        "INSERT OR REPLACE INTO memory_codes(memory_rowid, codes, projection) VALUES (?, ?, ?)",
        [(r, c, p) for (r, _), c, p in zip(rows, _pack(codes, scales), projected, strict=True)],
    )


class BasisCache:
    """The last basis a store read, by the ``meta`` values that name it (epoch, fit)."""

    def __init__(self) -> None:
        self.key: tuple[str | None, str | None] | None = None
        self.basis: Basis | None = None

    def get(self, con: sqlite3.Connection) -> Basis | None:
        """The file's basis as of this transaction; read again only when a fit moved it."""
        meta = dict(
            con.execute("SELECT key, value FROM meta WHERE key IN ('epoch', 'vector_basis')")
        )
        key = (meta.get("epoch"), meta.get("vector_basis"))
        if key != self.key:
            self.basis = None if key[1] is None else load_basis(con)
            self.key = key
        return self.basis


def flush(con: sqlite3.Connection, cache: BasisCache | None = None) -> None:
    """Inside a write: encode the vectors the transaction wrote; fit the basis when due."""
    dirty = [r for (r,) in con.execute("SELECT rowid FROM temp.vector_dirty")]
    if not dirty:
        return
    basis = (cache or BasisCache()).get(con)
    for start in range(0, len(dirty), 500):
        chunk = dirty[start : start + 500]
        rows = con.execute(
            "SELECT memory_rowid, embedding FROM memory_vectors "
            f"WHERE memory_rowid IN ({_marks(len(chunk))})",
            chunk,
        ).fetchall()
        _encode_rows(con, [(int(r), bytes(b)) for r, b in rows], basis)
    con.execute("DELETE FROM temp.vector_dirty")
    _maybe_fit(con, basis)


def _maybe_fit(con: sqlite3.Connection, basis: Basis | None) -> None:
    # memories holds a row per vector (deleted ones too) and small indexes to count by.
    (count,) = con.execute("SELECT count(*) FROM memories").fetchone()
    dim_row = con.execute("SELECT value FROM meta WHERE key = 'embedder_dim'").fetchone()
    if dim_row is None:
        return
    dim = int(dim_row[0])
    if basis is not None and basis.dim == dim:
        if basis.fitted_at >= LAST_REFIT or count < 2 * basis.fitted_at:
            return
    elif count < COMPACT_AT:
        return
    fit(con, dim)


def fit(con: sqlite3.Connection, dim: int) -> Basis | None:
    """Fit the file's basis over its vectors, re-project every memory, move the epoch."""
    rowids = np.array(
        [r for (r,) in con.execute("SELECT memory_rowid FROM memory_vectors ORDER BY 1")],
        dtype=np.int64,
    )
    if rowids.size == 0:
        return None
    if rowids.size > _FIT_SAMPLE:
        rowids = rowids[np.linspace(0, rowids.size - 1, _FIT_SAMPLE).astype(np.intp)]
    parts = []
    for start in range(0, rowids.size, 500):
        chunk = rowids[start : start + 500].tolist()
        parts += [
            b
            for (b,) in con.execute(
                "SELECT embedding FROM memory_vectors "
                f"WHERE memory_rowid IN ({_marks(len(chunk))})",
                chunk,
            )
        ]
    sample = np.frombuffer(b"".join(parts), dtype=F32).reshape(len(parts), -1)
    if sample.shape[1] != dim:
        return None
    basis, offset = fit_basis(sample, _width(dim))
    del sample, parts
    (count,) = con.execute("SELECT count(*) FROM memories").fetchone()
    fitted = Basis(basis, offset, int(count))
    con.execute(
        "INSERT OR REPLACE INTO vector_basis(id, dim, width, fitted_at, basis, centre) "
        "VALUES (1, ?, ?, ?, ?, ?)",
        (dim, basis.shape[1], fitted.fitted_at, basis.tobytes(), offset.tobytes()),
    )
    con.execute(
        "INSERT OR REPLACE INTO meta(key, value) VALUES ('vector_basis', ?)",
        (str(fitted.fitted_at),),
    )
    cursor = con.execute("SELECT memory_rowid, embedding FROM memory_vectors")
    while rows := cursor.fetchmany(_CHUNK):
        _encode_rows(con, [(int(r), bytes(b)) for r, b in rows], fitted)
    # Every cache holds projections on the old basis (or none): drop them all.
    con.execute("UPDATE meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'epoch'")
    return fitted


def backfill(con: sqlite3.Connection) -> int:
    """Encode every stored vector, fitting the basis first if the file is large enough.

    The migration's backfill; returns how many vectors were encoded.
    """
    (count,) = con.execute("SELECT count(*) FROM memory_vectors").fetchone()
    dim_row = con.execute("SELECT value FROM meta WHERE key = 'embedder_dim'").fetchone()
    if dim_row is not None and count >= COMPACT_AT and fit(con, int(dim_row[0])) is not None:
        return int(count)  # the fit encoded every vector on its basis
    cursor = con.execute("SELECT memory_rowid, embedding FROM memory_vectors")
    while rows := cursor.fetchmany(_CHUNK):
        _encode_rows(con, [(int(r), bytes(b)) for r, b in rows], None)
    return int(count)


def fetch(
    con: sqlite3.Connection, keys: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """The float32 vectors of ``keys`` that are stored: ``(found keys, vectors)``."""
    found: list[Any] = []
    wanted = keys.tolist()
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        found += con.execute(
            "SELECT memory_rowid, embedding FROM memory_vectors "
            f"WHERE memory_rowid IN ({_marks(len(chunk))})",
            chunk,
        ).fetchall()
    if not found:
        return np.empty(0, np.int64), np.empty((0, 0), np.float32)
    got = np.array([r for r, _ in found], dtype=np.int64)
    vecs = np.frombuffer(b"".join(b for _, b in found), dtype=F32).reshape(len(found), -1)
    return got, vecs.astype(np.float32)
