"""What a memory or a question is about: personal attributes, read from the embedding.

An application's store holds facts about a person (where they live, their
job, their partner, their car, what they eat, ...) and is asked about them in
other words ("What make of motor does Daniel have?" for "The Mini Cooper
failed its MOT"). The small embedder ranks such a paraphrase poorly against
the facts' words, yet it places both near a short description of the
attribute ("someone's vehicle: car, make and model, driving, ..."). That
nearness is structure the data already has:

- **index time**: a memory's vector is compared with each attribute's
  prototype vector (:data:`ATTRIBUTES`, embedded once per process as
  passages); the attributes it leans to (softmax over the cosines, at
  :data:`TEMPERATURE`) become keyword terms of the memory (``@vehicle``),
  which no text can spell, so they only ever match an attribute term;
- **search time**: a question whose vector lies close to an attribute
  prototype (cosine at least ``attribute_gate``: "what make of car ...",
  "who is ... married to") asks about that attribute, and its attribute terms
  join its keyword terms. BM25 weighs them like any word: in a store of a
  person's facts an attribute is rare and counts; in a long conversation
  about one topic it is common and counts little.

The gate and temperature are cosines of one embedding space
(``multilingual-e5-small``, the default embedder); :data:`FITTED_FOR` names
it, and another embedder leaves attribute terms off unless configured.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from engramdb.nlp.terms import ATTRIBUTE_PREFIX

__all__ = [
    "ATTRIBUTES",
    "FITTED_FOR",
    "OTHER_TOPICS",
    "TEMPERATURE",
    "AttributeModel",
    "relations_of",
]

ATTRIBUTES: Final[Mapping[str, str]] = {
    "home": "where someone lives: their home, city, town, neighbourhood, flat, house, "
    "moving house, address",
    "job": "someone's work: job, occupation, career, profession, employer, company, "
    "colleagues, office, promotion, salary",
    "education": "someone's education: school, university, college, degree, studies, "
    "diploma, course, graduation, teacher",
    "partner": "someone's romantic partner: husband, wife, boyfriend, girlfriend, spouse, "
    "dating, engaged, married, wedding, anniversary",
    "children": "someone's children: son, daughter, kids, baby, school run, parenting",
    "family": "someone's family: mother, father, mum, dad, parents, sister, brother, "
    "siblings, grandparents, cousins",
    "pet": "someone's pet: dog, cat, rabbit, puppy, kitten, vet, walking the dog",
    "diet": "what someone eats: diet, vegetarian, vegan, meat, cooking, meals, favourite "
    "food, dishes, restaurants",
    "allergy": "allergies and intolerances: allergic reaction, intolerant, cannot eat, "
    "gluten, nuts, shellfish, lactose",
    "health": "someone's health: illness, medical condition, doctor, medication, therapy, "
    "pain, injury, hospital",
    "fitness": "sport and exercise: running, swimming, gym, cycling, football, training, "
    "race, keeping fit",
    "hobby": "hobbies and pastimes: crafts, painting, knitting, gardening, photography, "
    "games, collecting",
    "music": "music: songs, bands, singers, concerts, playing an instrument, guitar, piano, "
    "playlists",
    "travel": "travel: trips, holidays, flights, visiting a country, vacation plans, abroad",
    "vehicle": "someone's vehicle: car, make and model, driving, motorbike, bike, garage, "
    "MOT, repairs",
    "phone": "someone's phone and devices: smartphone, iPhone, Android, laptop, tablet, gadgets",
    "language": "languages someone speaks or learns: learning a language, fluent, lessons, "
    "Duolingo",
    "birthday": "someone's birthday, date of birth, age, how old they are, birthday party",
    "reading": "books and reading: novels, authors, book club, reading list",
    "screen": "films and TV: movies, series, shows, watching, streaming, cinema",
    "money": "money and finances: savings, budget, debt, mortgage, rent, investments",
    "friends": "someone's friends: best friend, mates, friendship, meeting friends",
    "routine": "daily routine and schedule: morning routine, sleep, commute, weekends",
}
"""Each attribute's name and the passage its prototype vector is embedded from."""

OTHER_TOPICS: Final[Mapping[str, str]] = {
    "admin": "orders, receipts, invoices, reference numbers, forms, accounts, passwords, codes",
    "shopping": "shopping: buying things, prices, deliveries, a new purchase, returns",
    "chat": "small talk: greetings, how are you, thanks, see you later, that sounds great",
    "weather": "the weather: rain, sun, snow, temperature, forecast",
    "news": "news and current events: politics, the economy, elections, headlines",
    "tasks": "tasks and plans: to-do list, reminders, deadlines, meetings, appointments",
}
"""Topics that are no personal attribute: a text or question nearest one of them gets no
attribute term ("What is my order number?" is not about a birthday)."""

FITTED_FOR: Final = "engramdb/multilingual-e5-small-int8"
"""The embedder the gate and temperature were measured with."""

TEMPERATURE: Final = 0.01
"""Softmax temperature over an embedding's cosines to the prototypes."""

PREFIX: Final = ATTRIBUTE_PREFIX
"""Attribute terms are ``@`` + the name: the text tokenizer never yields an ``@``."""


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
    """The prototype vectors of :data:`ATTRIBUTES`, and what a vector leans to."""

    __slots__ = ("_names", "_protos")

    def __init__(self, prototypes: npt.NDArray[np.float32]) -> None:
        """``prototypes``: one L2-normalised row per attribute, in :data:`ATTRIBUTES` order."""
        want = len(ATTRIBUTES) + len(OTHER_TOPICS)
        if prototypes.shape[0] != want:
            raise ValueError(f"expected {want} prototypes, got {prototypes.shape[0]}")
        self._protos = np.ascontiguousarray(prototypes, dtype=np.float32)
        self._names = [PREFIX + name for name in ATTRIBUTES] + ["" for _ in OTHER_TOPICS]

    @staticmethod
    def passages() -> list[str]:
        """The texts to embed (as documents) for the prototypes, in order."""
        return [*ATTRIBUTES.values(), *OTHER_TOPICS.values()]

    def _cosines(self, vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        v = np.asarray(vector, dtype=np.float32)
        if v.shape != (self._protos.shape[1],):
            return np.zeros(len(self._names), dtype=np.float32)
        out: npt.NDArray[np.float32] = np.einsum("ij,j->i", self._protos, v)
        return out

    def leaning(
        self, vector: npt.NDArray[np.float32], min_share: float, *, others: bool = False
    ) -> list[str]:
        """The attribute terms a memory's vector leans to: softmax share at least ``min_share``.

        ``others``: :data:`OTHER_TOPICS` take part in the softmax (a question's
        reading, :meth:`asked`); a memory's leaves them out.
        """
        cos = self._cosines(vector)
        if not others:
            cos = cos[: len(ATTRIBUTES)]
        if not cos.any():
            return []
        e = np.exp((cos - cos.max()) / TEMPERATURE)
        share = e / e.sum()
        return [self._names[i] for i in np.nonzero(share >= min_share)[0] if self._names[i]]

    def shares(self, vector: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The softmax share of each of :data:`ATTRIBUTES` in a memory's vector (sums to 1).

        All zero for a vector of the wrong shape.
        """
        cos = self._cosines(vector)[: len(ATTRIBUTES)]
        if not cos.any():
            return np.zeros(len(ATTRIBUTES), dtype=np.float32)
        e = np.exp((cos - cos.max()) / TEMPERATURE)
        out: npt.NDArray[np.float32] = (e / e.sum()).astype(np.float32)
        return out

    def top(self, vector: npt.NDArray[np.float32]) -> str | None:
        """The attribute term a vector is nearest to (``@home``), or ``None`` for no vector."""
        cos = self._cosines(vector)[: len(ATTRIBUTES)]
        if not cos.any():
            return None
        return self._names[int(np.argmax(cos))]

    def asked(self, vector: npt.NDArray[np.float32], gate: float, min_share: float) -> list[str]:
        """The attribute terms a question asks about: none if no cosine reaches ``gate``."""
        cos = self._cosines(vector)
        if not cos.any() or float(cos[: len(ATTRIBUTES)].max()) < gate:
            return []
        return self.leaning(vector, min_share, others=True)
