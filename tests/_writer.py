"""A child process that writes to a store until it is killed or done.

Run as ``python tests/_writer.py DB MODE SEED COUNT`` (DB: a SQLite path or a JSON
``vector_store`` section). Vectors come from the
real local model, cached by a text's stem so that the process spends its time
in the write path (where the crash test wants its kills to land) rather than
in the model.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

import numpy as np

from engramdb import Memory
from engramdb.embedders import LocalEmbedder

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


class StemCachedEmbedder:
    """The local model, with vectors cached per stem (text before the first '#')."""

    def __init__(self) -> None:
        self.inner = LocalEmbedder()
        self.cache: dict[str, Any] = {}
        self.model = self.inner.model
        self.dim = self.inner.dim

    def _one(self, text: str) -> Any:
        stem = text.split("#", 1)[0].strip()
        if stem not in self.cache:
            self.cache[stem] = self.inner.embed_documents([stem])[0]
        return self.cache[stem]

    def embed_documents(self, texts: list[str]) -> Any:
        return np.stack([self._one(t) for t in texts]) if texts else np.zeros((0, self.dim), "f4")

    def embed_query(self, text: str) -> Any:
        return self._one(text)


def main() -> None:
    db, mode, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    results: list[dict[str, Any]] = []
    # DB is a SQLite path, or a JSON vector_store section (the PostgreSQL runs).
    where: dict[str, Any] = (
        {"config": {"vector_store": json.loads(db)}} if db.startswith("{") else {"path": db}
    )
    with Memory(**where, embedder=StemCachedEmbedder()) as m:
        for i in range(count):
            if mode == "crash":
                user = f"user{rng.randrange(3)}"
                batch = [
                    {"role": "user", "content": f"{rng.choice(STEMS)} #{seed}-{i}-{j}"}
                    for j in range(rng.randrange(1, 4))
                ]
                out = m.add(batch, user_id=user, run_id=f"run{rng.randrange(4)}")
                ids = [r["id"] for r in out["results"]]
                action = rng.random()
                if ids and action < 0.2:
                    m.update(ids[0], f"{rng.choice(STEMS)} #{seed}-{i}-updated")
                elif ids and action < 0.3:
                    m.delete(ids[-1])
                elif action < 0.35:
                    gone = m.get_all(user_id=user, top_k=1)["results"]
                    if gone:
                        m.purge(gone[0]["id"])
                if i == 0:
                    # Tell the parent writes are flowing, so its kill lands mid-write
                    # however long the start took on a loaded machine.
                    print("ready", flush=True)
            else:
                # concurrency: a shared pool of texts, so processes repeat each other
                text = f"{rng.choice(STEMS)} #shared-{rng.randrange(count)}"
                out = m.add(text, user_id="shared", run_id=f"proc{seed}")
                results.extend(out["results"])
    if mode != "crash":
        print(json.dumps(results))


if __name__ == "__main__":
    main()
