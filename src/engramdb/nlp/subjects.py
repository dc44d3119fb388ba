"""Who a short statement is about, when its opening says it is someone else.

Personal facts often open with their subject: "My manager is allergic to nuts",
"Kwame's sister's favourite food is sushi", "Our son Oscar lost his first
tooth", "The kids next door play football". Such a fact shares its attribute
words with the user's own ("allergic", "favourite food") and wins questions
about the user on them. The opening names a *relation* of the speaker or of the
person asked about; :func:`opening_relation` reads it, and
:func:`asked_relations` reads which relations a question asks about ("Hannah's
children", "the user's significant other"), so search can prefer the user's
own facts unless the question is about that relation.

Pure text rules, English only; a statement whose opening names no relation
("Swam 2 km before work", "Dana lives in Lisbon") has none.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Final

from engramdb.nlp._gazetteer import COMMON_STARTERS, FIRST_NAMES, PLACES, TITLES
from engramdb.nlp._lemma import is_english_word
from engramdb.nlp.entities import normalize_entity
from engramdb.nlp.stopwords import STOP_WORDS
from engramdb.nlp.terms import index_terms
from engramdb.nlp.vocative import without_vocatives

__all__ = [
    "RELATION_GROUPS",
    "asked_relations",
    "opening_name",
    "opening_person",
    "opening_relation",
]

RELATION_GROUPS: Final = {
    "partner": "partner wife husband boyfriend girlfriend fiance fiancee spouse",
    "child": "son daughter kid child baby stepson stepdaughter",
    "parent": "mum mom mother father dad parent stepmother stepfather",
    "sibling": "brother sister sibling twin",
    "grandparent": "grandmother grandfather grandma grandpa granny nan grandparent",
    "relative": "uncle aunt cousin niece nephew family relative",
    "friend": "friend mate bestie",
    "work": "colleague coworker boss manager team",
    "neighbour": "neighbour neighbor",
    "housemate": "roommate flatmate housemate landlord",
    "carer": "teacher coach doctor dentist therapist tutor",
    "pet": "dog cat pet puppy kitten rabbit hamster parrot",
}
"""Relations a statement's subject can be, each with its words (lemmatised when read)."""

_CUES: Final = {
    "partner": "married marry wedding dating engaged anniversary significant spouse romantic "
    "relationship",
    "child": "children kids parenting",
    "parent": "parents family",
    "sibling": "siblings family",
    "grandparent": "grandparents family",
    "relative": "relatives family",
    "friend": "friends",
    "work": "colleagues work job office",
    "neighbour": "neighbours",
    "housemate": "housemates",
    "carer": "teacher coach doctor",
    "pet": "pets animal",
}
"""Question words that ask about a relation besides the relation's own words."""

_OPENERS: Final = frozenset({"my", "our", "his", "her", "their", "the", "user's", "users'"})
_POSSESSIVE = re.compile(r"^[^\W\d_][\w-]*(?:['\u2019]s|s['\u2019])$")
_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]*)?")
_REACH: Final = 4
"""Words after the opener within which the relation noun must come ("my younger sister")."""


@functools.lru_cache(maxsize=1)
def _words() -> dict[str, str]:
    out: dict[str, str] = {}
    for group, words in RELATION_GROUPS.items():
        for term in index_terms(words).split():
            out.setdefault(term, group)
    return out


@functools.lru_cache(maxsize=1)
def _cues() -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for group, words in _CUES.items():
        for term in index_terms(words).split():
            out.setdefault(term, set()).add(group)
    for term, group in _words().items():
        out.setdefault(term, set()).add(group)
    return {t: frozenset(g) for t, g in out.items()}


@functools.lru_cache(maxsize=8192)
def opening_relation(text: str) -> str | None:
    """The relation a statement opens with as its subject, or ``None``.

    The opening is a possessive ("my", "our", "the", "the user's", "Kwame's",
    "Rhys'") followed within a few words by a relation noun: "My manager is
    allergic to nuts" -> ``"work"``; "Kwame's sister's favourite food is sushi"
    -> ``"sibling"``; "The user's partner is called Sam" -> ``"partner"``; a
    relation that opens it itself: "Colleague 3 is dating ..." -> ``"work"``.
    """
    words = _WORD.findall(text[:200])
    if len(words) < 2:
        return None
    table = _words()
    for term in index_terms(words[0]).split():
        # The relation itself opens it: "Colleague 3 is dating ...", "Mum's car ...".
        if term in table:
            return table[term]
    first = words[0].casefold().replace("\u2019", "'")
    if first == "the" and len(words) > 2 and words[1].casefold().startswith("user"):
        words = words[1:]
    elif first not in _OPENERS and not _POSSESSIVE.match(words[0]):
        return None
    for word in words[1 : 1 + _REACH]:
        for term in index_terms(word).split():
            if term in table:
                return table[term]
    return None


_ROLE_OF: Final = {"parent": "child"}
"""What a relation word asks when it is what the person is ("Is Jonas a mum or dad?",
"Is the user a parent?"): whether they have children, not about their own parents."""

_ARTICLES: Final = frozenset({"a", "an"})
_COPULAS: Final = frozenset({"is", "are", "was", "were", "be", "been", "become", "became"})


def asked_relations(query: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The relation groups a question asks about: its relation words and cues, plus ``extra``.

    A parent's word said as what the person is ("Is Jonas a mum or dad?", "Is the
    user a parent?": after a form of "be" and "a"/"an") asks whether they have
    children (:data:`_ROLE_OF`), not about their own parents; "Jonas's mum" and
    "Does the user have a sister?" ask as before.
    """
    cues = _cues()
    table = _words()
    out: set[str] = set(extra)
    copula = role = False
    previous = ""
    for word in _WORD.findall(query):
        lowered = word.casefold()
        terms = index_terms(word).split()
        group = next((table[t] for t in terms if t in table), None)
        as_role = (
            copula and group in _ROLE_OF and (previous in _ARTICLES or (previous == "or" and role))
        )
        if as_role:
            out.add(_ROLE_OF[str(group)])
        else:
            for term in terms:
                out |= cues.get(term, frozenset())
        copula = copula or lowered in _COPULAS
        role = as_role or (role and lowered == "or")
        previous = lowered
    return frozenset(out)


_NAME_OPENING = re.compile(
    r"^\s*(?P<name>[A-Z][^\W\d_]+(?:[-\s][A-Z][^\W\d_]+)?)"
    r"(?:(?P<poss>['\u2019]s?)(?=\s)|\s+(?=[a-z]))"
)


@functools.lru_cache(maxsize=8192)
def opening_person(text: str) -> str | None:
    """The person a text opens with, as :func:`opening_name` with ``possessor``, or ``None``.

    Past any name it opens by addressing someone: "Sofia, how is work?" is
    said *to* Sofia (:func:`~engramdb.nlp.vocative.without_vocatives`), not
    about her.
    """
    return opening_name(without_vocatives(text), possessor=True)


@functools.lru_cache(maxsize=8192)
def opening_name(text: str, possessor: bool = False) -> str | None:
    """The person a statement opens with as its subject, as an entity key, or ``None``.

    "Kwame lives in Accra" and "Kwame's favourite dish is jollof rice" ->
    ``"kwame"``; a relation after the possessive ("Kwame's sister ...") is
    someone else (:func:`opening_relation`), and so ``None`` (unless
    ``possessor``: then the name that opens it, ``"kwame"``); so are "User",
    "I", a sentence-opening word ("Today", "Hey") and a place ("Japan is ...").
    """
    m = _NAME_OPENING.match(text)
    if m is None:
        return None
    name = m["name"]
    first = name.split()[0].casefold()
    if (
        first in STOP_WORDS["en"]
        or first in COMMON_STARTERS
        or first in TITLES
        or first in ("user", "users", "i")
        or name.casefold() in PLACES
    ):
        return None
    if any(t in _words() for t in index_terms(first).split()):
        return None  # "Mum's car", "Colleague 3 ...": a relation, not a name
    if m["poss"]:
        if not possessor and opening_relation(text) is not None:
            return None
    elif first not in FIRST_NAMES and is_english_word(first):
        # "Watched a travel vlog ...": a first-person statement opening with its verb.
        return None
    key = normalize_entity(name)
    return key or None
