"""Questions that name the store's own person: the name says who, not what.

An application that keeps one person's facts stores some in the first person
("The Mini Cooper failed its MOT, brakes again") and some as summaries that
name the person ("Daniel lives in Leeds", "Daniel's favourite dish is
jollof rice"). Asked "What make of motor does Daniel have?", the name is the
only word the question shares with the summaries: as a keyword it lifts
every one of them, and in the query's vector it matches theirs, so "Daniel
lives in Leeds" answers a question about his car. In that store every fact is
about Daniel: the name says who the question is about, which is a fact of the
scope, as the user's id is (:func:`engramdb.search.subject_terms`).

:func:`owner_names` reads it from the first candidates: a name of the query
that opens far more of them as their subject than any other name
(:func:`engramdb.nlp.subjects.opening_name`; at least :data:`OWNER_MIN`, and
more than twice the next), and that is nobody's ``actor_id`` (a speaker of a
conversation is the speaker lever's, :mod:`engramdb.speakers`). The search
then runs once more without the name: not a keyword or entity key, and not in
the query's vector (:func:`~engramdb.speakers.name_free_query`), so the
summaries and the first-person facts compete on what they say. A memory that
opens with another person ("Diego's sport is volleyball") is someone else's
fact, and ``other_subject_factor`` weighs it down
(:func:`engramdb.search.other_subject_factors`).

A store of several people's facts, where no name dominates (two speakers'
facts, each opening half of them), is left as it is.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from engramdb.core.records import Candidate
from engramdb.nlp.entities import normalize_entity
from engramdb.nlp.querytime import mentions_time
from engramdb.nlp.subjects import opening_name
from engramdb.nlp.terms import query_terms

__all__ = ["OWNER_MIN", "owner_names", "scope_owner"]

OWNER_MIN: Final = 1
"""The fewest candidates a name must open as their subject to be the store's own person."""


_PLACE_BEFORE = re.compile(
    r"\b(?:in|at|to|from|near|around|across|into|visit|visiting|visited|via|towards?)\s+$",
    re.IGNORECASE,
)


def _as_person(query: str, name: str) -> bool:
    """Whether ``query`` names ``name`` as a person, not a place, and asks about more.

    Not right after a place preposition ("to Quexton", "in Patagonia"), and
    the question keeps keyword terms without the name (a question that is
    only the name asks for everything said about it).
    """
    words = r"\s+".join(re.escape(w) for w in name.split())
    found = list(re.finditer(rf"(?<!\w){words}(?!\w)", query, re.IGNORECASE))
    if not found or any(_PLACE_BEFORE.search(query[: m.start()]) for m in found):
        return False
    rest = set(query_terms(query)) - set(query_terms(name))
    return bool(rest)


def owner_names(
    names: Iterable[str], candidates: Sequence[Candidate], query: str = ""
) -> frozenset[str]:
    """The query's entity keys (``QueryPlan.names``) that name the store's own person.

    At most one: the name that opens the most candidates, if it opens at least
    :data:`OWNER_MIN` and more than twice as many as any other name, is no
    candidate's ``actor_id``, no candidate names it past its opening, and
    ``query`` names it as a person with more to ask (:func:`_as_person`).
    """
    wanted = frozenset(names)
    if not wanted or not candidates:
        return frozenset()
    # Cheap first: only texts whose first word is a word of a name the query says can
    # open with it (most candidates of most queries are not read any further).
    firsts = {n.split()[0] for n in wanted}
    opening = [
        c for c in candidates if c.row.text[:1].isupper() and _first_word(c.row.text) in firsts
    ]
    if not opening:
        return frozenset()
    counts = Counter(n for n in (opening_name(c.row.text, True) for c in candidates) if n)
    if not counts:
        return frozenset()
    ranked = counts.most_common()
    n = max(count for _, count in ranked)
    # The query's name among those opening the most candidates (ties included).
    top = [key for key, count in ranked if count == n and key in wanted]
    if not top:
        return frozenset()
    name = top[0]
    second = max((count for key, count in ranked if key != name), default=0)
    # Far more than any other name; or, against one stray opener (a brand, a friend:
    # "Spotify is sending me to Lisbon"), at least as many.
    if n < OWNER_MIN or (n <= 2 * second and not (second <= 1 and n >= second)):
        return frozenset()
    if n < 2 and not any(_said_as_person(c.row.text, name) for c in candidates):
        # One fact opening with a word ("Patagonia is next on my list") is too little to
        # call it a person; one that opens with it as an owner ("Rhys' cat ...") or as the
        # subject of what people do ("Omar is employed by", "Sofia enjoys") is enough.
        return frozenset()
    actors = {normalize_entity(c.row.actor_id) for c in candidates if c.row.actor_id}
    if name in actors or _said_of(name, candidates) or not _as_person(query, name):
        return frozenset()
    return frozenset({name})


def scope_owner(query: str, names: Iterable[str], person: frozenset[str]) -> frozenset[str]:
    """The query's names that are the scope's own person by its ``user_id``.

    ``names``: the query's entity keys (:func:`engramdb.search.query_names`);
    ``person``: the words of the search's ``user_id``
    (:func:`engramdb.search.subject_terms` without "user"). A search of
    ``user_id="dana"`` asking "Where does Dana live?" asks about the scope's
    own person, as "Where does the user live?" does: known before anything
    is read, so the first query vector is already the name-free one.
    :func:`owner_names` reads the same from the candidates when some of them
    name the person; in a store of first-person facts ("I live in Lisbon")
    none does, and the name stayed in the query's vector.

    A name is taken when every word of it is a word of the ``user_id``, the
    query writes it as a name (capitalised, and not as its first word unless
    a possessive follows: "Will I need a visa?" or "Did I mark it?" in
    ``user_id="will"`` or ``"mark"`` are not about the user by name), it is
    no time ("my plans for June" in ``user_id="june"``), and the query names
    it as a person (not "in Paris", and with more to ask).
    """
    return frozenset(
        n
        for n in names
        if n
        and set(n.split()) <= person
        and not mentions_time(n)
        and _written_as_name(query, n)
        and _as_person(query, n)
    )


def _written_as_name(query: str, name: str) -> bool:
    """Whether ``query`` writes ``name`` as a proper name.

    Each word capitalised; as the query's first word only with a possessive
    after it ("Dana's job?"): a first word is capitalised whatever it is.
    """
    words = r"\s+".join(re.escape(w[:1].upper() + w[1:]) for w in name.split())
    for m in re.finditer(rf"(?<!\w){words}(?!\w)", query):
        first = not query[: m.start()].strip(" \t\"'(\u201c")
        if not first or re.match(r"['\u2019]", query[m.end() :]):
            return True
    return False


_FIRST = re.compile(r"[^\W\d_]+")


def _first_word(text: str) -> str:
    """The first word of ``text``, case-folded, without a possessive."""
    m = _FIRST.match(text.lstrip())
    return m.group().casefold() if m else ""


def _possessive(text: str, name: str) -> bool:
    """Whether ``text`` opens with ``name`` as a possessor ("Rhys' cat", "Kwame's job")."""
    words = r"\s+".join(re.escape(w) for w in name.split())
    return re.match(rf"\s*{words}(?:['\u2019]s?)\s", text, re.IGNORECASE) is not None


_PERSON_VERBS: Final = (
    r"(?:lives|works|enjoys|likes|loves|has|had|uses|owns|drives|rides|plays|speaks|"
    r"studied|studies|follows|holds|prefers|hates|cannot|can't|does|did|goes|went|"
    r"eats|drinks|reads|watches|listens|volunteers|grew|was\s+born|is\s+allergic|"
    r"(?:is|was)\s+\w+(?:ing|ed))"
)


def _said_as_person(text: str, name: str) -> bool:
    """Whether ``text`` opens with ``name`` as a possessor or as someone doing what people do.

    "Rhys' cat ...", "Omar is employed by the council", "Sofia enjoys
    gardening", but not "Patagonia is next on my list".
    """
    if _possessive(text, name):
        return True
    words = r"\s+".join(re.escape(w) for w in name.split())
    return re.match(rf"\s*{words}\s+{_PERSON_VERBS}\b", text, re.IGNORECASE) is not None


def _said_of(name: str, candidates: Sequence[Candidate]) -> bool:
    """Whether some candidate names ``name`` past its opening ("dinner with Ben").

    One does not speak of oneself that way: such a name is someone the store's
    person talks about, however many facts open with it.
    """
    words = r"\s+".join(re.escape(w) for w in name.split())
    pattern = re.compile(rf"(?<!\w){words}(?!\w)", re.IGNORECASE)
    for c in candidates:
        m = pattern.search(c.row.text)
        if m is not None and (m.start() > 0 or pattern.search(c.row.text, m.end())):
            return True
    return False
