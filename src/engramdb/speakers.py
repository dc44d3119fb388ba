"""Questions about a speaker of the conversation: the name says who, not what.

"Where is Sofia employed?" asked of a conversation between Sofia and Bram
names one of its speakers. In the stored turns Sofia speaks in the first
person ("The canteen at Larkspur Analytics has improved") and her name
appears mostly where Bram addresses her ("Sofia, how is life in Gdansk?",
and the turns after it that borrow its words). As a keyword or an entity the
name lifts those turns; in the query's vector it matches the ``"Sofia: "``
prefix of every turn she said (``embed_actor``), so the shortest of them
(greetings, small talk) come closest. Who said a memory is already a signal
of its own (``actor``): the name is a fact about the scope here, as the
user's own id is (:func:`engramdb.search.subject_terms`).

So when a name of the query is a speaker of the scope (the ``name`` of one of
its last :data:`SPEAKER_MESSAGES` stored messages: :func:`recent_speakers`),
the search reads it once, known before its vector is made:

- without the name as a keyword or entity key;
- with the query's vector taken with "someone" in the name's place
  (:func:`name_free_query`, :data:`SPEAKER_STAND_IN`: "Where does someone
  work?"; deleting the name left "Where does work?", which the attribute
  classifier reads as a routine);
- only when a candidate opens with the speaker's name as its subject ("Sofia
  works at Greystone Insurance": a fact about her, as extraction writes them;
  not "Sofia, how are you?", which addresses her: :func:`opens_with_speaker`),
  the whole question is embedded and read as well, and a memory whose text
  names the speaker keeps the whole question's cosine, where the name is what
  tells Sofia's facts from Bram's (:func:`speaker_candidates`).

A store of conversation turns, where a speaker's turns say "I" and rarely open
with her own name, so pays one query embedding and one candidate read, as a
question naming nobody does; a store of facts about named people pays two.

``FusionConfig.speaker_names`` (on by default) turns it off. Measured in
docs/retrieval.md ("Questions about a speaker").
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Final

from engramdb.core.records import Candidate, NewMessage
from engramdb.nlp.entities import normalize_entity
from engramdb.nlp.subjects import opening_person
from engramdb.nlp.terms import query_terms
from engramdb.nlp.vocative import without_vocatives

__all__ = [
    "SPEAKER_MESSAGES",
    "SPEAKER_STAND_IN",
    "name_free_query",
    "opens_with_speaker",
    "recent_speakers",
    "speaker_candidates",
    "speaker_terms",
]

SPEAKER_MESSAGES: Final = 64
"""Stored messages of the scope read for its speakers' names (the newest ones)."""


def recent_speakers(names: Iterable[str], messages: Sequence[NewMessage]) -> frozenset[str]:
    """The query's entity keys (``QueryPlan.names``) that are the ``name`` of one of ``messages``.

    ``messages``: the scope's newest stored messages (``Store.recent_messages``).
    Read before the query's vector is made, so that a question about a speaker
    embeds only its name-free text; a conversation's speakers take turns, so
    its last messages carry their names.
    """
    wanted = frozenset(names)
    if not wanted:
        return frozenset()
    said = {normalize_entity(m.name) for m in messages if m.name}
    return frozenset(wanted & said)


def opens_with_speaker(candidates: Sequence[Candidate], names: Iterable[str]) -> bool:
    """Whether one of ``candidates`` opens with one of ``names`` as its subject.

    "Sofia works at Greystone Insurance" does, and needs the whole question's
    cosine to be told from Bram's facts; "Sofia, how's work?" (Bram addressing
    her) and her own turns ("Just got my badge") do not.
    """
    wanted = frozenset(names)
    return any(opening_person(c.row.text) in wanted for c in candidates)


def speaker_terms(names: Iterable[str]) -> frozenset[str]:
    """What :func:`engramdb.search.plan_query` leaves out for these names.

    Their words as keyword terms (lemmatised like a query's) and as the raw
    words an entity key is made of.
    """
    out: set[str] = set()
    for name in names:
        out.update(name.split())
        out.update(query_terms(name))
    return frozenset(out)


def _pattern(names: Iterable[str]) -> re.Pattern[str]:
    """A run of the words of ``names`` ("Bram Visser"), with a possessive ``'s`` as ``poss``."""
    words = sorted({w for n in names for w in n.split()}, key=lambda w: (-len(w), w))
    word = "|".join(re.escape(w) for w in words)
    return re.compile(
        rf"(?<!\w)(?:{word})(?:\s+(?:{word}))*(?P<poss>['\u2019]s)?(?!\w)", re.IGNORECASE
    )


SPEAKER_STAND_IN: Final = "someone"
"""What a speaker's name becomes in the question that is embedded."""


def name_free_query(query: str, names: Iterable[str], stand_in: str = "") -> str:
    """``query`` without the words of ``names``, or with ``stand_in`` in their place.

    A possessive keeps its ``'s`` on the stand-in. Deleting the name leaves a
    question the attribute classifier may misread ("Where does work?" reads
    as a routine); a stand-in keeps its grammar.

    >>> name_free_query("What is Sofia's current phone?", ["sofia"])
    'What is current phone?'
    >>> name_free_query("Where does Bram Visser work?", ["bram visser"], "someone")
    'Where does someone work?'
    >>> name_free_query("What is Sofia's phone?", ["sofia"], "someone")
    "What is someone's phone?"
    """
    names = list(names)
    if not names:
        return query

    def swap(m: re.Match[str]) -> str:
        return f" {stand_in}{m['poss'] or ''} " if stand_in else " "

    bare = " ".join(_pattern(names).sub(swap, query).split())
    bare = re.sub(r"\s+([?.!,;:])", r"\1", bare)
    return bare if re.search(r"\w", bare) and bare != stand_in else query


def speaker_candidates(
    whole: Sequence[Candidate], bare: Sequence[Candidate], names: Iterable[str]
) -> list[Candidate]:
    """The candidates of a question about a speaker, from its two searches.

    ``bare``: found with the name-free vector and without the name as a
    keyword or entity; ``whole``: the first search, with the whole question.
    A memory whose text names the speaker takes its cosine from ``whole``
    (and joins the pool if only ``whole`` found it, without the keyword and
    entity matches that the name gave it there); every other memory is as
    ``bare`` found it. A name that only addresses the speaker ("Sofia, how
    is life in Gdansk?", said by Bram) does not count as naming her
    (:func:`~engramdb.nlp.vocative.without_vocatives`).
    """
    names = frozenset(names)
    mentions = _pattern(names)
    pool = {c.row.id: c for c in bare}
    scale = bare[0].bm25_best if bare else 0.0
    for cand in whole:
        # Removing vocatives only removes words: a text that does not say the name
        # at all (most of them) needs no closer look.
        text = cand.row.text
        if not mentions.search(text) or not mentions.search(without_vocatives(text)):
            continue
        mine = pool.get(cand.row.id)
        if mine is not None:
            pool[cand.row.id] = dataclasses.replace(mine, semantic=cand.semantic)
        else:
            pool[cand.row.id] = dataclasses.replace(
                cand,
                bm25=0.0,
                bm25_rank=None,
                bm25_best=scale,
                entities=[e for e in cand.entities if e[0] not in names],
            )
    return list(pool.values())
