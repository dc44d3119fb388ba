"""Train the attribute classifier engramdb ships (``src/engramdb/data/attributes.json``).

:mod:`engramdb.attributes` reads which personal attribute a memory or a question
is about (home, job, vehicle, diet, ...) from its embedding. This script fits
that reading: a multinomial logistic regression over the default embedder's
vectors (multilingual-e5-small), trained on the hand-written sentences of
``scripts/attribute_examples.py`` only, which were written without looking at
the evaluation sets (the personal-facts and knowledge-update data of
``engram bench retrieval`` / ``engram bench knowledge-update``): those stay
held out.

- **As the store embeds them**: a statement is embedded as a stored memory is
  (:func:`engramdb.search.document_text`: "the user" taken out; once on its own
  and once after a speaker's name, as a chat turn is stored), a question as a
  query is (:func:`engramdb.search.query_embedding_text`).
- **Every class weighs the same** (``class_weight="balanced"``): "none" has more
  sentences than any attribute.
- **Reproducible**: lbfgs on the same rows in the same order, coefficients
  rounded to 5 decimals; ``--check`` refits and exits 1 when the shipped file
  differs.

Usage (needs scikit-learn: ``pip install -e 'benchmarks/[fit]'``)::

    python scripts/train_attributes.py            # writes src/engramdb/data/attributes.json
    python scripts/train_attributes.py --check    # refits, compares, exits 1 if stale
    python scripts/train_attributes.py --folds 5  # cross-validated accuracy per class
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.linear_model import LogisticRegression

from engramdb.attributes import FITTED_FOR, MODEL_RESOURCE, VERSION
from engramdb.embedders.local import LocalEmbedder
from engramdb.search import FusionConfig, document_text, query_embedding_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attribute_examples  # a sibling script, not a package

C = 80.0
"""Inverse regularisation strength of the logistic regression."""

MODEL_FILE = Path(__file__).resolve().parents[1] / "src/engramdb" / MODEL_RESOURCE
"""Where the weights are written (the package's copy)."""

SPEAKERS = ("Maya", "Tom", "Aiko", "Kwabena", "Lucia", "Ravi", "Sven", "Noor")
"""Names a statement is also embedded after, as a stored chat turn is ("Maya: ...")."""


QUESTION_FILLS = 3
"""How many fills of each question template are embedded (the names in it vary)."""

_THE_USER = re.compile(r"\bthe user(?='s\b|\b)", re.IGNORECASE)


def _named(text: str, name: str) -> str:
    """A question about "the user" asked about a person by name instead."""
    return _THE_USER.sub(name, text)


def rows(seed: int = 0) -> tuple[list[str], list[str], list[str], list[str], list[int]]:
    """The training rows: (classes, kinds, texts as embedded, embedding side, sentence).

    A question is embedded in several forms, so that the person it names does
    not decide its attribute: its template filled ``QUESTION_FILLS`` times
    (other names, other places) and, when it says "the user", once with a name
    instead. ``sentence`` numbers the written sentence each row comes from
    (the folds keep a sentence's rows together).
    """
    rng = random.Random(seed)
    cfg = FusionConfig()
    classes: list[str] = []
    kinds: list[str] = []
    texts: list[str] = []
    sides: list[str] = []
    groups: list[int] = []
    fills = [attribute_examples.examples(seed + n) for n in range(QUESTION_FILLS)]
    people = attribute_examples.people()
    for group, same in enumerate(zip(*fills, strict=True)):
        cls, kind, text = same[0]
        if kind == "question":
            forms = list(dict.fromkeys(t for _, _, t in same))
            if _THE_USER.search(text):
                forms.append(_named(text, people[rng.randrange(len(people))]))
            variants = [(query_embedding_text(t, cfg), "query") for t in forms]
        else:
            speaker = SPEAKERS[rng.randrange(len(SPEAKERS))]
            variants = [
                (document_text(text, None, cfg), "document"),
                (document_text(text, speaker, cfg), "document"),
            ]
        for embedded, side in variants:
            classes.append(cls)
            kinds.append(kind)
            texts.append(embedded)
            sides.append(side)
            groups.append(group)
    return classes, kinds, texts, sides, groups


def embed(texts: list[str], sides: list[str]) -> np.ndarray:
    """Unit vectors of ``texts``, each embedded on its side (document or query)."""
    embedder = LocalEmbedder(engine="onnx", threads=2)
    out = np.zeros((len(texts), 384), dtype=np.float32)
    docs = [i for i, s in enumerate(sides) if s == "document"]
    if docs:
        out[docs] = np.asarray(embedder.embed_documents([texts[i] for i in docs]))
    for i, side in enumerate(sides):
        if side == "query":
            out[i] = np.asarray(embedder.embed_query(texts[i]))
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out


def fit(x: np.ndarray, y: list[str], c: float = C) -> LogisticRegression:
    """The fitted classifier (deterministic: lbfgs, fixed order)."""
    model = LogisticRegression(C=c, max_iter=5000, class_weight="balanced")
    model.fit(x, y)
    return model


def to_file(model: LogisticRegression, counts: dict[str, int]) -> dict[str, Any]:
    """The shipped JSON object of a fitted classifier."""
    order = list(attribute_examples.CLASSES)
    index = {c: i for i, c in enumerate(model.classes_)}
    return {
        "version": VERSION,
        "embedders": list(FITTED_FOR),
        "classes": order,
        "coef": [[round(float(v), 5) for v in model.coef_[index[c]]] for c in order],
        "intercept": [round(float(model.intercept_[index[c]]), 5) for c in order],
        "trained_on": {
            "examples": "scripts/attribute_examples.py",
            "rows": counts,
            "C": C,
            "class_weight": "balanced",
        },
    }


def folds(x: np.ndarray, y: list[str], kinds: list[str], groups: list[int], k: int) -> None:
    """Print k-fold accuracy per class and kind (rows of one sentence stay in one fold)."""
    n = len(y)
    fold_of = [g % k for g in groups]
    hits: dict[tuple[str, str], list[int]] = {}
    for f in range(k):
        train = [i for i in range(n) if fold_of[i] != f]
        test = [i for i in range(n) if fold_of[i] == f]
        model = fit(x[train], [y[i] for i in train])
        pred = model.predict(x[test])
        for i, p in zip(test, pred, strict=True):
            hits.setdefault((y[i], kinds[i]), []).append(int(p == y[i]))
    for (cls, kind), h in sorted(hits.items()):
        print(f"{cls:10s} {kind:9s} {np.mean(h):.3f} (n={len(h)})")
    every = [v for h in hits.values() for v in h]
    print(f"overall {np.mean(every):.3f} (n={len(every)})")


def main(argv: list[str] | None = None) -> int:
    """Fit, write or check the shipped classifier."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=MODEL_FILE)
    parser.add_argument("--check", action="store_true", help="exit 1 if --out is stale")
    parser.add_argument("--folds", type=int, default=0, help="k-fold accuracy, writes nothing")
    args = parser.parse_args(argv)
    classes, kinds, texts, sides, groups = rows()
    x = embed(texts, sides)
    if args.folds:
        folds(x, classes, kinds, groups, args.folds)
        return 0
    counts = {
        "statements": sum(1 for k in kinds if k == "statement"),
        "questions": sum(1 for k in kinds if k == "question"),
    }
    data = to_file(fit(x, classes), counts)
    text = json.dumps(data, separators=(",", ":")) + "\n"
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is stale: rerun scripts/train_attributes.py", file=sys.stderr)
            return 1
        print(f"{args.out} is current")
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out} ({len(text):,} bytes, {len(classes)} rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
