"""Derived supersessions: which memory replaces which, read without an LLM.

A person's facts change ("Maya lives in Lisbon", months later "Maya moved to
Porto"). An extractor with an LLM links the new fact to the old one
(``updates``); facts stored verbatim, or by an extractor that was not shown
the old one, stay unlinked, and search cannot tell which holds now. This
module proposes the missing links from what the store already has, for
``engram maintain`` (:mod:`engramdb.maintain`) to report and, above a
measured confidence, write as ``derived_update`` links (reversible: each is a
``LINK`` history event, and ``engram maintain --undo RUN`` removes a run's).

A pair (older, newer) of live memories of one owner is a candidate when:

- **the same subject** (:func:`subject_key`): the person the statement
  opens with ("Dana ...", "Dana's ..."), else its speaker (``actor_id``), with
  the relation it opens with ("Dana's dad ..." is Dana's *parent*). Never
  across subjects: "Dana's dad's phone number" and "Dana's phone number" are
  different facts;
- **the newer was stated later** (``observed_at``, else ``created_at``;
  the same moment is no change);
- **close vectors**: cosine at least :data:`COSINE_FLOOR`.

Each candidate gets a confidence, a logistic model over six cheap features
(:class:`PairFeatures`): the vectors' cosine; the chance that both lean to
the same personal attribute (:class:`~engramdb.attributes.AttributeModel`
shares: home, job, vehicle, ...); whether the newer text has a change word
("moved", "switched", "sold", "no longer", "now", "new", ...); how alike the
two texts are (trigram Dice: a restatement of the same value is no change);
how many of the older memory's words the newer repeats, and how many of its
own words are new (a new value brings new words). The weights
(:data:`WEIGHTS`) were fitted on one half of engramdb's knowledge-update
conversations and the threshold (:data:`APPLY_THRESHOLD`) chosen there;
docs/benchmarks.md ("Derived supersessions") has the figures on the other
half and the false links on a store with no changes. Each older memory is
proposed to be replaced by one newer memory at most: the candidate with the
highest confidence.
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from engramdb.attributes import AttributeModel
from engramdb.core.records import MemoryRow
from engramdb.nlp import index_terms
from engramdb.nlp.entities import normalize_entity
from engramdb.nlp.subjects import opening_name, opening_relation

__all__ = [
    "APPLY_THRESHOLD",
    "CHANGE_WORDS",
    "COSINE_FLOOR",
    "FEATURES",
    "REPORT_FLOOR",
    "WEIGHTS",
    "Candidate",
    "PairFeatures",
    "Proposal",
    "candidates",
    "confidence",
    "derive",
    "features_table",
    "pair_features",
    "subject_key",
]

COSINE_FLOOR: Final = 0.80
"""Pairs whose vectors are less similar are never candidates (e5-small cosines)."""

APPLY_THRESHOLD: Final = 0.70
"""``engram maintain --apply`` writes the proposals at least this confident.

Chosen on the fitting half of the knowledge-update set: the lowest threshold
(in steps of 0.1) at which at least 95 % of the proposals link a fact to a
later fact of the same chain, a new value or the same value said again (a
restatement, harmless for "what holds now"); docs/benchmarks.md."""

REPORT_FLOOR: Final = 0.30
"""Proposals less confident than this are not reported at all."""

CHANGE_WORDS: Final = (
    "moved move relocated now new newly switched switch swapped swap sold sell changed "
    "change instead anymore longer quit left leave started start joined became become "
    "took replaced replace traded trade bought got adopted upgraded gave finished "
    "graduated transferred converted dropped stopped ended split broke since currently "
    "these days latest recently"
)
"""Words that say something changed; a phrase counts by each of its words."""

FEATURES: Final = ("cosine", "attribute", "change", "dice", "overlap", "novel")
"""The names of :class:`PairFeatures`' fields, in :data:`WEIGHTS` order."""

WEIGHTS: Final[tuple[float, ...]] = (-10.57, 2.21, 5.42, 1.52, 3.03, 2.27, 3.4)
"""The logistic model: a bias, then one weight per :data:`FEATURES` entry.

Fitted with ``python -m engramdb_bench.derived_links --fit`` (L2-regularised
logistic regression on the fitting half of the knowledge-update facts), with the
``attributes_v3`` classifier's probabilities as the ``attribute`` feature."""


@dataclass(frozen=True)
class PairFeatures:
    """What the confidence of one (older, newer) pair is computed from, each in [0, 1]."""

    cosine: float
    """The cosine of the two memories' vectors."""
    attribute: float
    """The chance both lean to the same personal attribute: the dot product of their
    attribute shares (softmax over :data:`engramdb.attributes.ATTRIBUTES`)."""
    change: float
    """1 when the newer text has a word of :data:`CHANGE_WORDS`, else 0."""
    dice: float
    """How alike the texts are (Dice of character trigrams): 1 for a restatement."""
    overlap: float
    """The share of the older memory's content words that the newer repeats."""
    novel: float
    """The share of the newer memory's content words that the older lacks: a new value
    brings new words, a restatement few."""

    def values(self) -> tuple[float, ...]:
        """The features in :data:`FEATURES` order."""
        return (self.cosine, self.attribute, self.change, self.dice, self.overlap, self.novel)


@dataclass(frozen=True)
class Proposal:
    """A proposed supersession: ``newer`` replaces ``older`` (both of one owner and subject)."""

    older: MemoryRow
    newer: MemoryRow
    subject: str
    """Who both are about, as :func:`subject_key` reads it ("dana", "dana / parent")."""
    attribute: str | None
    """The attribute both lean to most (``@home``), if any."""
    confidence: float
    features: PairFeatures


def confidence(features: PairFeatures, weights: Sequence[float] = WEIGHTS) -> float:
    """The logistic model's probability that the pair is a supersession."""
    z = weights[0] + sum(w * x for w, x in zip(weights[1:], features.values(), strict=True))
    return 1.0 / (1.0 + math.exp(-z))


def subject_key(row: MemoryRow) -> str:
    """Who a memory is about: the person it opens with, else its speaker, and the relation.

    "Dana lives in Lisbon" -> ``"dana"``; "Dana's dad's phone number is ..." ->
    ``"dana / parent"``; "My sister moved to Leeds", said by Maya -> ``"maya /
    sibling"``; "I moved to Porto" with no speaker -> ``""`` (the store's own
    person).
    """
    name = opening_name(row.text, possessor=True)
    if name is None:
        name = normalize_entity(row.actor_id) if row.actor_id else ""
    relation = opening_relation(row.text)
    return f"{name} / {relation}" if relation else name


@functools.lru_cache(maxsize=1)
def _change_terms() -> frozenset[str]:
    return frozenset(CHANGE_WORDS.split()) | frozenset(index_terms(CHANGE_WORDS).split())


_WORD = re.compile(r"[^\W_]+")


def _has_change_word(text: str) -> bool:
    words = {w.casefold() for w in _WORD.findall(text)}
    return bool(words & _change_terms()) or bool(set(index_terms(text).split()) & _change_terms())


def _trigrams(text: str) -> frozenset[str]:
    folded = unicodedata.normalize("NFKC", text).casefold()
    padded = " " + " ".join("".join(c if c.isalnum() else " " for c in folded).split()) + " "
    return frozenset(padded[i : i + 3] for i in range(max(1, len(padded) - 2)))


def _dice(a: frozenset[str], b: frozenset[str]) -> float:
    inter = len(a & b)
    return 2 * inter / (len(a) + len(b)) if inter else 0.0


def _content(text: str, subject: str) -> frozenset[str]:
    """The text's keyword terms, less the subject's and the change words."""
    drop = set(index_terms(subject.replace(" / ", " ")).split()) | _change_terms()
    return frozenset(t for t in index_terms(text).split() if t not in drop)


def pair_features(
    older: MemoryRow,
    newer: MemoryRow,
    cosine: float,
    shares: tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]],
    subject: str = "",
) -> PairFeatures:
    """The :class:`PairFeatures` of one pair, given their cosine and attribute shares."""
    old_words = _content(older.text, subject)
    new_words = _content(newer.text, subject)
    return PairFeatures(
        cosine=round(min(1.0, max(0.0, cosine)), 4),
        attribute=round(float(shares[0] @ shares[1]), 4),
        change=1.0 if _has_change_word(newer.text) else 0.0,
        dice=round(_dice(_trigrams(older.text), _trigrams(newer.text)), 4),
        overlap=round(len(old_words & new_words) / len(old_words), 4) if old_words else 0.0,
        novel=round(len(new_words - old_words) / len(new_words), 4) if new_words else 0.0,
    )


def _when(row: MemoryRow) -> str:
    return row.observed_at or row.created_at


@dataclass(frozen=True)
class Candidate:
    """One (older, newer) pair that passed the hard rules, with its features and confidence."""

    older: int
    """Index of the older memory in the rows given."""
    newer: int
    subject: str
    features: PairFeatures
    confidence: float


def candidates(
    rows: Sequence[MemoryRow],
    vectors: npt.NDArray[np.float32],
    attributes: AttributeModel,
    *,
    weights: Sequence[float] = WEIGHTS,
) -> list[Candidate]:
    """Every pair of ``rows`` (live memories of one owner) that may be a supersession.

    Same :func:`subject_key`, the newer stated strictly later, cosine at least
    :data:`COSINE_FLOOR`, not linked already; each with its features and
    confidence. ``vectors``: one unit vector per row, as the store embeds them.
    """
    subjects = [subject_key(r) for r in rows]
    by_subject: dict[str, list[int]] = defaultdict(list)
    for i, key in enumerate(subjects):
        by_subject[key].append(i)
    shares: dict[int, npt.NDArray[np.float32]] = {}
    out: list[Candidate] = []
    for key, members in by_subject.items():
        if len(members) < 2:
            continue
        sims = vectors[members] @ vectors[members].T
        for a, i in enumerate(members):
            for b, j in enumerate(members):
                if i == j or float(sims[a, b]) < COSINE_FLOOR - 1e-6:
                    continue
                older, newer = rows[i], rows[j]
                if not _when(older) < _when(newer) or newer.id in older.linked_ids:
                    continue
                for k in (i, j):
                    if k not in shares:
                        shares[k] = attributes.shares(vectors[k])
                feats = pair_features(older, newer, float(sims[a, b]), (shares[i], shares[j]), key)
                out.append(Candidate(i, j, key, feats, confidence(feats, weights)))
    return out


def derive(
    rows: Sequence[MemoryRow],
    vectors: npt.NDArray[np.float32],
    attributes: AttributeModel,
    *,
    floor: float = REPORT_FLOOR,
    weights: Sequence[float] = WEIGHTS,
) -> list[Proposal]:
    """Proposed supersessions among ``rows`` (live memories of **one** owner).

    Of the :func:`candidates`, each older memory keeps its most confident
    newer one (the earlier on a tie), if that confidence is at least
    ``floor``. Oldest first.
    """
    if len(rows) < 2:
        return []
    best: dict[int, Candidate] = {}
    for cand in candidates(rows, vectors, attributes, weights=weights):
        kept = best.get(cand.older)
        if kept is None or cand.confidence > kept.confidence:
            best[cand.older] = cand
    out = []
    for cand in best.values():
        if cand.confidence < floor:
            continue
        i, j = cand.older, cand.newer
        out.append(
            Proposal(
                rows[i],
                rows[j],
                cand.subject,
                attributes.top(vectors[i] + vectors[j]),
                round(cand.confidence, 4),
                cand.features,
            )
        )
    out.sort(key=lambda p: (_when(p.older), p.older.id))
    return out


def features_table(proposals: Sequence[Proposal]) -> list[dict[str, Any]]:
    """The proposals as rows of plain data (for reports and measurements)."""
    return [
        {
            "older": p.older.id,
            "newer": p.newer.id,
            "subject": p.subject,
            "attribute": p.attribute,
            "confidence": p.confidence,
            **dict(zip(FEATURES, p.features.values(), strict=True)),
        }
        for p in proposals
    ]
