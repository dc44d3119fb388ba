"""The writer processes of ``engram bench torture`` (``python -m engramdb.bench._torture_writer``).

Two modes, both started by :mod:`engramdb.bench.torture`:

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
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["STEMS", "StemVectors", "main"]

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
    """An embedder that answers with the real model's vector of a text's stem."""

    def __init__(self, path: Path) -> None:
        """Load the stem vectors (and the model's name and dimension) from ``path``."""
        with np.load(path, allow_pickle=False) as data:
            stems = [str(s) for s in data["stems"]]
            vectors = np.asarray(data["vectors"], dtype="f4")
            self.model = str(data["model"])
            self.dim = int(data["dim"])
        self.cache: dict[str, Any] = dict(zip(stems, vectors, strict=True))
        self._inner: Any = None

    def _one(self, text: str) -> Any:
        stem = text.split("#", 1)[0].strip()
        if stem not in self.cache:
            if self._inner is None:
                from engramdb.embedders import LocalEmbedder

                self._inner = LocalEmbedder()
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


def _where(store: str) -> dict[str, Any]:
    if store.startswith("{"):
        return {"config": {"vector_store": json.loads(store)}}
    return {"path": store}


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
    with Memory(**_where(store), embedder=embedder) as m:
        for i in range(MAX_CRASH_ADDS):
            if time.monotonic() > deadline:
                break
            user = f"user{rng.randrange(3)}"
            batch = []
            for j in range(rng.randrange(1, 4)):
                if written and rng.random() < 0.1:
                    text = rng.choice(written)  # a repeat: NONE, and a session attach
                else:
                    text = f"{rng.choice(STEMS)} #{seed}-{i}-{j}"
                    written.append(text)
                batch.append({"role": "user", "content": text})
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
    with Memory(**_where(store), embedder=embedder) as m, out_path.open("a") as out:
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
