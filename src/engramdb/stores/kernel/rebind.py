"""Rebinding a store to another embedder: the decisions every backend makes alike.

``Memory.reembed`` computes a vector for every stored memory with the new
embedder while the store stays on the old one, then asks the store to swap
all vectors and the binding in one transaction
(:meth:`~engramdb.stores.base.Store.rebind_embedder`). The backend reads,
under its write lock, each memory's key and whether it was written since the
caller's mark; this module decides what is stale (:func:`stale_keys`),
checks the vectors (:func:`checked_vectors`) and words the refusals
(:func:`mismatch_error`, :func:`moved_error`). No SQL, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from engramdb.errors import EmbedderMismatchError, ValidationError

__all__ = ["REEMBED_HINT", "checked_vectors", "mismatch_error", "moved_error", "stale_keys"]

REEMBED_HINT = (
    "run `engram reembed` (Memory.reembed()) to re-embed every memory with the configured embedder"
)
"""How to move a store to the configured embedder, for the errors that refuse another one."""


def mismatch_error(
    where: str, bound: tuple[object, object], mine: tuple[str, int]
) -> EmbedderMismatchError:
    """The refusal of an embedder other than the one ``where`` is bound to."""
    return EmbedderMismatchError(
        f"{where} holds vectors from {bound[0]!r} (dim {bound[1]}), but the configured "
        f"embedder is {mine[0]!r} (dim {mine[1]}); configure that embedder, or "
        f"{REEMBED_HINT} (another process may also have reset or re-embedded the store)"
    )


def moved_error(
    where: str, bound: tuple[object, object] | None, old: tuple[str, int]
) -> EmbedderMismatchError:
    """A rebinding found the store no longer bound to the model it re-embedded from."""
    now = "no embedder" if bound is None else f"{bound[0]!r} (dim {bound[1]})"
    return EmbedderMismatchError(
        f"{where} is bound to {now}, no longer to {old[0]!r} (dim {old[1]}): another process "
        "reset or re-embedded it meanwhile; nothing was changed"
    )


def checked_vectors(
    vectors: Mapping[int, np.ndarray[Any, Any]], keys: Iterable[int], dim: int
) -> list[tuple[int, np.ndarray[Any, np.dtype[np.float32]]]]:
    """``(key, vector)`` for ``keys`` in order, each a float32 vector of length ``dim``.

    Raises :class:`ValidationError` (before anything is written) for a vector
    of another length or with a NaN or an infinity.
    """
    out: list[tuple[int, np.ndarray[Any, np.dtype[np.float32]]]] = []
    for key in keys:
        vec = np.asarray(vectors[key], dtype=np.float32).reshape(-1)
        if vec.shape != (dim,):
            raise ValidationError(
                f"the new vector of memory key {key} has {vec.size} dimensions, expected {dim}"
            )
        if not np.isfinite(vec).all():
            raise ValidationError(f"the new vector of memory key {key} is not finite")
        out.append((key, vec))
    return out


def stale_keys(
    rows: Iterable[tuple[int, bool]], vectors: Mapping[int, object]
) -> tuple[list[int], list[int]]:
    """Split the store's memories into ``(stale, current)`` keys, each in scan order.

    ``rows`` is every memory's ``(key, written since the mark)``. A memory is
    stale when it was written since the mark (its vector may be of an older
    text, or of the old model) or when ``vectors`` has no vector for it.
    Vectors of memories purged meanwhile are simply not written.
    """
    stale: list[int] = []
    current: list[int] = []
    for key, changed in rows:
        (stale if changed or key not in vectors else current).append(key)
    return stale, current
