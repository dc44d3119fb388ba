"""A second OS process that runs Memory calls sent to it, for the coherence tests.

Run as ``python tests/_coherence_child.py DB MODEL DIM``; DB is a SQLite path
or a JSON ``vector_store`` section. Each stdin line is ``{"op", "args",
"kwargs"}``; each stdout line is ``{"ok": result}`` or ``{"error": name,
"message": text}``. The embedder is :class:`HashEmbedder`, so the child
starts in a fraction of a second and two processes agree on every vector.
"""

from __future__ import annotations

import json
import sys
import zlib
from typing import Any

import numpy as np

from engramdb import Memory


class HashEmbedder:
    """Bag-of-words vectors by word hashing: deterministic, instant, any model id."""

    def __init__(self, model: str = "test-hash", dim: int = 64) -> None:
        self.model = model
        self.dim = dim

    def _one(self, text: str) -> Any:
        vec = np.full(self.dim, 1e-3, dtype=np.float32)
        for word in text.lower().split():
            vec[zlib.crc32(word.strip(".,!?").encode()) % self.dim] += 1.0
        return vec / np.linalg.norm(vec)

    def embed_documents(self, texts: list[str]) -> Any:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._one(t) for t in texts])

    def embed_query(self, text: str) -> Any:
        return self._one(text)


def open_memory(db: str, model: str, dim: int) -> Memory:
    """A Memory on a SQLite path or a JSON ``vector_store`` section."""
    embedder = HashEmbedder(model, dim)
    if db.startswith("{"):
        return Memory(config={"vector_store": json.loads(db)}, embedder=embedder)
    return Memory(db, embedder=embedder)


def main() -> None:
    db, model, dim = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open_memory(db, model, dim) as m:
        print(json.dumps({"ok": "ready"}), flush=True)
        for line in sys.stdin:
            call = json.loads(line)
            try:
                result = getattr(m, call["op"])(*call.get("args", []), **call.get("kwargs", {}))
                print(json.dumps({"ok": result}), flush=True)
            except Exception as exc:  # reported to the parent, which decides
                print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)


if __name__ == "__main__":
    main()
