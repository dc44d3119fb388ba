"""The writer processes of ``engram bench torture`` (``python -m engramdb_bench._torture_writer``).

Two modes, both started by :mod:`engramdb_bench.torture`:

``crash STORE VECTORS SEED``
    Writes until killed: batches of verbatim adds (some repeating an earlier
    text of this process from another run), updates, deletes and purges, on
    three users and four runs. Prints ``armed`` once imported, waits for a line
    on stdin, then prints ``ready`` after its first add so that the parent's
    ``kill -9`` lands in the write loop, however slow the start was.

``concurrent STORE VECTORS SEED ADDS SHARED OUT``
    ``ADDS`` adds to user ``shared`` (run ``procSEED``), from a pool of
    ``SHARED`` texts every process draws from, plus texts of its own, some
    repeated. Prints ``armed``, waits for a line on stdin (so all writers start
    together), and appends one JSON line per add to ``OUT``: the results, or
    the error.

``STORE`` is a SQLite path, or a JSON ``vector_store`` section (PostgreSQL).
``VECTORS`` is a ``.npz`` file of the real local model's vectors for each
text stem (the text before ``#``), computed once by the parent, so a writer
neither loads the model nor spends its time in it: its time goes to the
write path, where the kills are meant to land. A stem not in the file is
embedded with the real model, loaded on first need.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["STEMS", "StemVectors", "crash_step", "main", "store_kwargs"]

STEMS = [
    "I moved to a new apartment near the river",
    "My favourite food is spicy ramen",
    "I adopted a grey cat called Pepper",
    "I am training for a half marathon in spring",
    "My brother is getting married in June",
    "I work as a nurse on night shifts",
    "I started painting with watercolours",
    "I am allergic to shellfish",
]
"""Text stems; every written text is a stem plus ``#`` and a unique tag."""

MAX_CRASH_ADDS = 20_000
"""A crash writer that is never killed stops after this many adds (or a minute)."""


class StemVectors:
    """An embedder that answers with the real model's vector of a text's stem.

    The stem is the text before the first ``#``. With ``path`` the vectors
    (and the model's name and dimension) come from that ``.npz`` file and the
    model is loaded only for a stem not in it; without, the model is loaded
    now and each stem embedded on first use.
    """

    def __init__(self, path: Path | None = None) -> None:
        """Load the stem vectors from ``path``, or start empty with the local model."""
        self.cache: dict[str, Any] = {}
        self._inner: Any = None
        if path is None:
            self._inner = _local_model()
            self.model = str(self._inner.model)
            self.dim = int(self._inner.dim)
            return
        with np.load(path, allow_pickle=False) as data:
            stems = [str(s) for s in data["stems"]]
            vectors = np.asarray(data["vectors"], dtype="f4")
            self.model = str(data["model"])
            self.dim = int(data["dim"])
        self.cache.update(zip(stems, vectors, strict=True))

    def _one(self, text: str) -> Any:
        stem = text.split("#", 1)[0].strip()
        if stem not in self.cache:
            if self._inner is None:
                self._inner = _local_model()
            self.cache[stem] = self._inner.embed_documents([stem])[0]
        return self.cache[stem]

    def embed_documents(self, texts: list[str]) -> Any:
        """One vector per text: its stem's."""
        if not texts:
            return np.zeros((0, self.dim), "f4")
        return np.stack([self._one(t) for t in texts])

    def embed_query(self, text: str) -> Any:
        """The stem's vector."""
        return self._one(text)


def _local_model() -> Any:
    from engramdb.embedders import LocalEmbedder

    return LocalEmbedder()


def store_kwargs(store: str) -> dict[str, Any]:
    """``Memory`` keyword arguments for ``STORE``: a SQLite path or a JSON ``vector_store``."""
    if store.startswith("{"):
        return {"config": {"vector_store": json.loads(store)}}
    return {"path": store}


def crash_step(m: Any, rng: random.Random, seed: int, i: int, text: Callable[[int], str]) -> None:
    """One round of the crash writer: an add of 1-3 messages, then maybe a change.

    ``text(j)`` is the batch's ``j``-th message. After the add, one of: an
    update of its first memory, a delete of its last, a purge of one of the
    user's memories, or nothing.
    """
    user = f"user{rng.randrange(3)}"
    batch = [{"role": "user", "content": text(j)} for j in range(rng.randrange(1, 4))]
    out = m.add(batch, user_id=user, run_id=f"run{rng.randrange(4)}")
    ids = [r["id"] for r in out["results"]]
    action = rng.random()
    if ids and action < 0.2:
        m.update(ids[0], f"{rng.choice(STEMS)} #{seed}-{i}-updated")
    elif ids and action < 0.3:
        m.delete(ids[-1])
    elif action < 0.35:
        some = m.get_all(user_id=user, top_k=1)["results"]
        if some:
            m.purge(some[0]["id"])


def _wait_for_go() -> None:
    print("armed", flush=True)
    sys.stdin.readline()


def _crash(store: str, vectors: Path, seed: int) -> None:
    from engramdb import Memory

    rng = random.Random(seed)
    embedder = StemVectors(vectors)
    _wait_for_go()
    written: list[str] = []
    deadline = time.monotonic() + 60
    with Memory(**store_kwargs(store), embedder=embedder) as m:
        for i in range(MAX_CRASH_ADDS):
            if time.monotonic() > deadline:
                break

            def text(j: int, i: int = i) -> str:
                if written and rng.random() < 0.1:
                    return rng.choice(written)  # a repeat: NONE, and a session attach
                new = f"{rng.choice(STEMS)} #{seed}-{i}-{j}"
                written.append(new)
                return new

            crash_step(m, rng, seed, i, text)
            if i == 0:
                print("ready", flush=True)


def _concurrent(
    store: str, vectors: Path, seed: int, adds: int, shared: int, out_path: Path
) -> None:
    from engramdb import Memory

    rng = random.Random(1000 + seed)
    embedder = StemVectors(vectors)
    own: list[str] = []
    _wait_for_go()
    with Memory(**store_kwargs(store), embedder=embedder) as m, out_path.open("a") as out:
        for i in range(adds):
            texts: list[str] = []
            for _ in range(2 if rng.random() < 0.2 else 1):
                roll = rng.random()
                if roll < 0.5:  # shared with every other writer
                    k = rng.randrange(shared)
                    text = f"{STEMS[k % len(STEMS)]} #shared-{k}"
                elif roll < 0.7 and own:  # this writer's own repeat
                    text = rng.choice(own)
                else:
                    text = f"{rng.choice(STEMS)} #p{seed}-{i}-{len(texts)}"
                    own.append(text)
                texts.append(text)
            record: dict[str, Any] = {"i": i, "texts": texts}
            try:
                result = m.add(
                    [{"role": "user", "content": t} for t in texts],
                    user_id="shared",
                    run_id=f"proc{seed}",
                )
                record["results"] = result["results"]
            except Exception as exc:  # every failure is a figure, not a crash
                record["error"] = f"{type(exc).__name__}: {exc}"[:500]
            out.write(json.dumps(record) + "\n")
            out.flush()


def main(argv: list[str] | None = None) -> None:
    """Run one writer; see the module docstring for the arguments."""
    args = sys.argv[1:] if argv is None else argv
    mode = args[0] if args else ""
    if mode == "crash" and len(args) == 4:
        _crash(args[1], Path(args[2]), int(args[3]))
    elif mode == "concurrent" and len(args) == 7:
        _concurrent(args[1], Path(args[2]), int(args[3]), int(args[4]), int(args[5]), Path(args[6]))
    else:
        sys.exit(f"usage: {__doc__}")


if __name__ == "__main__":
    main()
