"""A child process that writes to a store until it is killed or done.

Run as ``python tests/_writer.py DB MODE SEED COUNT`` (DB: a SQLite path or a JSON
``vector_store`` section). Vectors come from the
real local model, cached by a text's stem so that the process spends its time
in the write path (where the crash test wants its kills to land) rather than
in the model. The embedder and the crash rounds are those of ``engram bench
torture``'s writers (:mod:`engramdb_bench._torture_writer`).
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from engramdb import Memory
from engramdb_bench._torture_writer import STEMS, StemVectors, crash_step, store_kwargs


def main() -> None:
    db, mode, seed, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    results: list[dict[str, Any]] = []
    with Memory(**store_kwargs(db), embedder=StemVectors()) as m:
        for i in range(count):
            if mode == "crash":
                crash_step(m, rng, seed, i, lambda j, i=i: f"{rng.choice(STEMS)} #{seed}-{i}-{j}")
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
