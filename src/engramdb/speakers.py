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

So when the first candidates show that a name of the query is a speaker
(an ``actor_id``) of the scope, the search runs once more:

- without the name as a keyword or entity key;
- with the query's vector taken without the name (:func:`name_free_query`),
  for the memories whose text does not say the name (a speaker's own turns);
- a memory whose text names the speaker as its subject ("Sofia works at
  Greystone Insurance": a fact about her, as extraction writes them; not
  "Sofia, how are you?", which addresses her) keeps the cosine of the whole
  question, where the name is what tells Sofia's facts from Bram's
  (:func:`speaker_candidates`).

``FusionConfig.speaker_names`` (off by default: it costs a second query
embedding and candidate read) turns it on. Measured in docs/retrieval.md
("Questions about a speaker").
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

from engramdb.core.records import Candidate
from engramdb.nlp.entities import normalize_entity
from engramdb.nlp.terms import query_terms
from engramdb.nlp.vocative import without_vocatives

__all__ = ["name_free_query", "speaker_candidates", "speaker_terms", "spoken_names"]


def spoken_names(names: Iterable[str], candidates: Sequence[Candidate]) -> frozenset[str]:
    """The query's entity keys (``QueryPlan.names``) that are speakers among ``candidates``."""
    wanted = frozenset(names)
    if not wanted:
        return frozenset()
    actors = {c.row.actor_id for c in candidates if c.row.actor_id}
    return frozenset(wanted & {normalize_entity(a) for a in actors})


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
    words = sorted({w for n in names for w in n.split()}, key=lambda w: (-len(w), w))
    alternation = "|".join(re.escape(w) for w in words)
    return re.compile(rf"(?<!\w)(?:{alternation})(?:['\u2019]s)?(?!\w)", re.IGNORECASE)


def name_free_query(query: str, names: Iterable[str]) -> str:
    """``query`` without the words of ``names`` (and their possessive ``'s``).

    >>> name_free_query("What is Sofia's current phone?", ["sofia"])
    'What is current phone?'
    """
    names = list(names)
    if not names:
        return query
    bare = " ".join(_pattern(names).sub(" ", query).split())
    bare = re.sub(r"\s+([?.!,;:])", r"\1", bare)
    return bare if re.search(r"\w", bare) else query


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
        if not mentions.search(without_vocatives(cand.row.text)):
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
