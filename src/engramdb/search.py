"""Retrieval: candidates from every signal, one fusion score.

The store gathers candidates (the union of the vector top-n, the BM25 top-n
and the memories linked to the query's entities) with every signal's raw
value; this module reads the query (:func:`plan_query`) and turns the
candidates into one score in [0, 1] (:func:`fuse`). Query analysis and
fusion live here, once, never in a backend. docs/retrieval.md explains the
choices and the benchmark behind the defaults.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    field_serializer,
    field_validator,
    model_validator,
)

from engramdb.attributes import relations_of
from engramdb.core.records import Candidate, Hit, MemoryRow
from engramdb.nlp import (
    detect_language,
    extract_entities,
    index_terms,
    normalize_entity,
    query_terms,
)
from engramdb.nlp.facets import EMPLOYER, asked_work_facet, said_work_facets
from engramdb.nlp.stopwords import STOP_WORDS
from engramdb.nlp.subjects import asked_relations, opening_name, opening_person, opening_relation
from engramdb.nlp.terms import ATTRIBUTE_PREFIX
from engramdb.nlp.vocative import without_vocatives
from engramdb.rerank import RerankConfig
from engramdb.rewrite import QueryRewriteConfig

WORK: Final = ATTRIBUTE_PREFIX + "job"
"""The attribute term of work (employer and occupation: :mod:`engramdb.nlp.facets`)."""

__all__ = [
    "DENSE_ONLY",
    "FEATURES",
    "HYBRID_RRF",
    "HYBRID_WEIGHTED",
    "KEYWORD_ONLY",
    "FusionConfig",
    "Hit",
    "QueryPlan",
    "ScoreCalibration",
    "apply_recency",
    "apply_rerank",
    "asks",
    "before_unlinked",
    "calibrate",
    "candidate_features",
    "document_text",
    "fuse",
    "informative_factors",
    "names_newer",
    "plan_query",
    "query_embedding_text",
    "query_names",
    "rank_superseded",
    "recency_factor",
    "stale_below",
    "subject_free_text",
    "subject_terms",
    "when",
]


DEFAULT_KNOTS: tuple[tuple[float, float], ...] = (
    (0.1192, 0.0022),
    (0.2237, 0.0043),
    (0.2725, 0.0082),
    (0.323, 0.0104),
    (0.3755, 0.0252),
    (0.4238, 0.0274),
    (0.4723, 0.0322),
    (0.5242, 0.0376),
    (0.5738, 0.05),
    (0.6216, 0.2529),
    (0.6735, 0.3272),
    (0.7248, 0.3751),
    (0.7721, 0.5584),
    (0.8259, 0.7121),
    (0.8727, 0.7504),
    (0.974, 0.8408),
)
"""The shipped calibration curve for a question that names none of the memories'
speakers: ``(relative, probability of an answer)``, fitted by ``scripts/fit_calibration.py``
(isotonic, 0.05 bins) on the development suite's dump (``engram bench retrieval --dump``,
2026-12-05: facts, LoCoMo turns, updates, extracted facts, each shape weighing the same;
these questions are mostly the facts shape's; held-out ECE 0.010-0.012, docs/retrieval.md).
A refit on a dump of this curve reproduces it: each hit's own ``relative`` is read, not
one read back from its score, which a flat end pins."""

DEFAULT_SPEAKER_KNOTS: tuple[tuple[float, float], ...] = (
    (0.146, 0.0001),
    (0.2236, 0.0004),
    (0.3135, 0.0025),
    (0.4007, 0.0031),
    (0.4748, 0.0046),
    (0.5247, 0.0109),
    (0.5742, 0.0173),
    (0.624, 0.0369),
    (0.6743, 0.0509),
    (0.7226, 0.0823),
    (0.772, 0.2027),
    (0.8255, 0.3414),
    (0.8742, 0.4525),
    (0.9202, 0.4582),
    (0.9673, 0.5851),
)
"""The shipped curve for a question that names a speaker of the memories (the actor
part in play), fitted beside :data:`DEFAULT_KNOTS` on the same dump, made with the
speaker lever (``FusionConfig.speaker_names``) on, its default."""


class ScoreCalibration(BaseModel):
    """The curve from a fused score to the ``score`` search returns: the probability of an answer.

    First the fused score is divided by the fused score a *perfect* match of
    this query would get in this scope (``relative``: the memory's text is the
    query's — cosine ``exact_cosine``, BM25 of a memory holding exactly the
    query's words, the best entity link found; capped at 1), which takes out
    what depends on the query and the scope's size (BM25's idf). Then
    ``relative`` goes through ``knots``: a piecewise-linear, strictly
    increasing curve of ``(relative, probability)`` points, flat beyond the
    first and the last, fitted by isotonic regression on the retrieval
    development suite (every shape weighing the same; ``scripts/fit_calibration.py``,
    docs/retrieval.md), so that ``score`` is the probability that the memory
    answers the query. With ``knots`` empty the curve is a logistic,
    ``1 / (1 + exp(-(relative - center) / width))`` (giving ``center`` or
    ``width`` without ``knots`` selects it). Both steps are strictly
    increasing within a search, so results keep the fused order;
    ``threshold`` applies to the calibrated score, and ``score_details``
    keeps ``fusion`` and ``relative``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    exact_cosine: float = Field(default=0.92, gt=-1, le=1)
    """The cosine between a query and a memory of the same text (the local model
    embeds queries and passages with different prefixes, so it is not 1)."""

    knots: tuple[tuple[float, float], ...] = DEFAULT_KNOTS
    """``(relative, probability)`` points, both strictly increasing (empty: the logistic),
    for a query that names none of the memories' speakers."""
    speaker_knots: tuple[tuple[float, float], ...] = DEFAULT_SPEAKER_KNOTS
    """The same for a query that names a speaker of the memories (the actor part in
    play: every memory that person said gains it, so a ``relative`` as high answers
    less often); empty: ``knots``."""
    center: float = Field(default=0.77, ge=0, le=1)
    """The logistic's ``relative`` that maps to 0.5 (used when ``knots`` is empty)."""
    width: float = Field(default=0.06, gt=0, le=1)
    """How fast the logistic rises around ``center`` (relative units per e-fold)."""

    @model_validator(mode="before")
    @classmethod
    def _logistic_when_asked(cls, data: Any) -> Any:
        # A config that sets the logistic's centre or width means that curve; one
        # that sets ``knots`` alone means them for every query.
        if not isinstance(data, dict):
            return data
        if "knots" not in data and ({"center", "width"} & set(data)):
            data = {**data, "knots": ()}
        if "knots" in data and "speaker_knots" not in data:
            data = {**data, "speaker_knots": ()}
        return data

    @field_validator("knots", "speaker_knots")
    @classmethod
    def _increasing(cls, knots: tuple[tuple[float, float], ...]) -> tuple[tuple[float, float], ...]:
        for (x0, y0), (x1, y1) in itertools.pairwise(knots):
            if not (x1 > x0 and y1 > y0):
                raise ValueError("calibration knots must be strictly increasing in both values")
        if any(not 0.0 <= y <= 1.0 for _, y in knots):
            raise ValueError("calibration knots' probabilities must lie in [0, 1]")
        return knots

    @field_serializer("knots", "speaker_knots")
    def _knots_as_lists(self, knots: tuple[tuple[float, float], ...]) -> list[list[float]]:
        # As JSON has them, so a dumped config equals itself read back from a file.
        return [[x, y] for x, y in knots]

    def curve(self, speaker: bool = False) -> tuple[tuple[float, float], ...]:
        """The knots a query reads (empty: the logistic).

        ``speaker_knots`` when it names a speaker and there are some, else ``knots``.
        """
        return (self.speaker_knots or self.knots) if speaker else self.knots

    def apply(self, relative: float, speaker: bool = False) -> float:
        """The calibrated score of a relative fused score (see the class).

        ``speaker``: the query names a speaker of the memories (:meth:`curve`).
        """
        knots = self.curve(speaker)
        if knots:
            if relative <= knots[0][0]:
                return knots[0][1]
            if relative >= knots[-1][0]:
                return knots[-1][1]
            i = bisect.bisect_right(knots, (relative, math.inf))
            (x0, y0), (x1, y1) = knots[i - 1], knots[i]
            return y0 + (y1 - y0) * (relative - x0) / (x1 - x0)
        z = (relative - self.center) / self.width
        if z < -700:
            return 0.0
        return 1.0 / (1.0 + math.exp(-z))


FEATURES: tuple[str, ...] = (
    "semantic",
    "bm25",
    "cover",
    "entity",
    "actor",
    "keyword_query",
    "message",
    "length",
)
"""Cheap per-candidate features, shown in ``score_details["features"]``
(:func:`candidate_features`): what a learned fusion would read
(``scripts/train_fusion.py`` fits one on the development suite's dumps)."""


def _cover(cand: Candidate) -> float:
    """The share of the query's keyword weight a candidate matches (its BM25 over the best)."""
    return min(1.0, cand.bm25 / cand.bm25_best) if cand.bm25_best > 0 else 0.0


def candidate_features(
    sem_part: float,
    bm_part: float,
    cover: float,
    entity: float,
    actor: float,
    keyword_query: bool,
    row: MemoryRow,
) -> dict[str, float]:
    """The features of one candidate (:data:`FEATURES`); none depends on the other candidates."""
    return {
        "semantic": sem_part,
        "bm25": bm_part,
        "cover": cover,
        "entity": entity,
        "actor": actor,
        "keyword_query": 1.0 if keyword_query else 0.0,
        "message": 1.0 if row.role is not None and row.attributed_to is None else 0.0,
        "length": math.log1p(len(_own_terms(row.text))),
    }


class FusionConfig(BaseModel):
    """How the signals are fused (``{"retrieval": {...}}``). Immutable.

    Four signals, each normalised to [0, 1] for one candidate:

    - ``semantic``: cosine mapped linearly from ``cosine_floor`` (0) to 1 (1);
    - ``bm25``: ``bm25 / (bm25 + bm25_half)`` (a saturating curve, so one
      very rare word cannot outweigh everything else);
    - ``entity``: ``1 / log2(1 + degree)`` summed over the query's entities the
      memory is linked to, capped at 1 (an entity linked to very many
      memories, such as the user's own name, adds little);
    - ``actor``: 1 when the memory's ``actor_id`` (who said it) is a name the
      query mentions ("what did Caroline paint?" prefers Caroline's words).

    ``weighted``: the weighted mean of the parts over the signals this query
    can use (no keyword terms: no bm25 weight; nobody named: no actor weight).
    ``rrf``: reciprocal-rank fusion, ``sum w / (rrf_k + rank)`` over the
    semantic, bm25 and entity lists, plus ``actor_weight / (rrf_k + 1)`` for a
    named actor, divided by its largest possible value. Either way the score
    is in [0, 1] and ``threshold`` applies to it.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Defaults chosen on the LoCoMo dev data (docs/retrieval.md): flat within about
    # 0.01 around them, and clearly better than RRF for this embedder.
    method: Literal["rrf", "weighted"] = "weighted"
    semantic_weight: float = Field(default=1.0, ge=0)
    bm25_weight: float = Field(default=1.25, ge=0)
    entity_weight: float = Field(default=0.1, ge=0)
    actor_weight: float = Field(default=0.2, ge=0)
    speaker_names: bool = True
    """A query naming a speaker of the scope (the ``name`` of one of its newest stored
    messages) is searched with the name as who, not what: not a keyword or entity
    key, and "someone" in its place in the query's vector; only when a candidate
    is a fact that opens with the speaker's name is the whole question embedded
    and read too (:mod:`engramdb.speakers`). A store of conversation turns pays no more than
    for any question (search p50 on 2,000 LoCoMo turns within 0.3 ms of off); a
    store of facts about named people pays a second embedding and candidate read.
    Held-out LoCoMo P@1 +0.030, any@10 +0.022, all@10 +0.027 over off
    (docs/retrieval.md); ``speaker_knots`` are fitted with it on."""
    rrf_k: float = Field(default=60.0, gt=0)
    cosine_floor: float = Field(default=0.7, ge=-1, lt=1)
    """multilingual-e5-small puts unrelated sentences at 0.70-0.82: that is "nothing"."""
    bm25_half: float = Field(default=6.0, gt=0)
    bm25_cover_power: float = Field(default=0.0, ge=0, le=4)
    """Keyword coverage (0: off): the BM25 part of a candidate is multiplied by
    ``cover ** bm25_cover_power``, where ``cover`` is its BM25 over what a memory
    holding every query word would score (the share of the query's keyword weight it
    matches), and the keyword weight counts in the normalisation only as much as the
    best candidate covers. A match on one word of many (the person's name) then lifts
    little, and memories matching no keyword lose less. Weighted fusion only."""
    pool: int = Field(default=50, ge=1)
    """Candidates taken from each ranked signal (at least ``top_k``)."""
    rerank: RerankConfig | None = None
    """An optional second stage on the best fused hits (off by default)."""
    query_rewrite: QueryRewriteConfig | None = None
    """Query rewriting (``None``: off, the default; acts only when the Memory has an
    LLM): one LLM call splits the question into up to ``max_queries`` short standalone
    sub-queries, each searched besides the question, the fused lists merged (each
    memory's best score) before the second-stage levers (:mod:`engramdb.rewrite`).
    An LLM failure or unusable reply searches the question alone. Off because it
    costs an LLM call per search (docs/retrieval.md, "Query rewriting")."""
    calibration: ScoreCalibration | None = ScoreCalibration()
    """How the returned ``score`` is read from the fused one; ``None``: the fused score
    itself. Fitted for the default weights; the presets other than the default turn it off."""
    context_messages: int = Field(default=1, ge=0, le=10)
    """Index time, ``add(infer=False)``: the words of this many preceding messages of
    the conversation are added to each stored message's keyword terms (its text
    and vector are its own). 0 turns it off."""
    embed_actor: bool = True
    """Index time: a memory with an ``actor_id`` is embedded as ``"actor: text"``,
    so a question about a person finds what that person said."""
    subject_free: bool = True
    """Who a memory or question is about is a scope fact, kept out of the vectors
    (:func:`subject_free_text`): "User's partner is called Sam" is embedded as
    "partner is called Sam", and "What does the user eat?" as "What does eat?".
    Otherwise the small embedder matches the word *user* and ranks every "User ..."
    summary above the first-person memory that answers. Index time for memories
    (``engram reembed`` brings older ones in line), search time for queries."""
    recency_weight: float = Field(default=0.0, ge=0, le=1)
    """Decay as a ranking signal (0: off, the default): a hit's score is multiplied by
    ``1 - recency_weight * (1 - 2 ** (-age_days / recency_half_life_days))``, where the
    age runs from the memory's ``observed_at`` to the search's ``as_of`` (or now). A
    memory is never dropped by it, and its stored data never changes."""
    recency_half_life_days: float = Field(default=180.0, gt=0)
    """The age at which the decay takes half of ``recency_weight`` off."""
    present_recency_weight: float = Field(default=0.0, ge=0, le=1)
    """The decay's weight for a question about the present only
    (:func:`engramdb.nlp.querytime.asks_present`: "Where does Dana live?", "which
    sport is Sofia into now?"), when higher than ``recency_weight``: of two
    statements that match alike, the newer holds (with ``as_of``, ages run to that
    date: what holds then). Not for questions with a date, "when" or "before"."""
    present_alike_cosine: float = Field(default=0.0, ge=0, le=1)
    """Newer statements first for questions about the present (0: off). For a
    question :func:`engramdb.nlp.querytime.asks_present` flags, among the first
    ``present_alike_hits`` hits, a hit stated later than one above it whose text
    embeds within this cosine of it ("I drive a Kia Niro" / "I drive a Ford Focus
    now") takes its place: of two statements about the same thing, the newer holds.
    Costs one embedding of those hits' texts per such question."""
    attribute_currency: bool = True
    """What holds now, read from statements: for a question about the present or
    at a date (``as_of``) that asks a personal attribute (``attribute_gate``), the
    latest statement by the person it names (a speaker of the scope; else the
    store's own person) carrying that attribute's term comes first
    (:func:`latest_of_attribute`). Costs one more candidate read for such
    questions. On verbatim turns with no links it is the only signal of which
    of several statements still holds (docs/retrieval.md)."""
    attribute_idioms: bool = True
    """Read the attribute a question asks from its idiom when it uses one
    (:mod:`engramdb.nlp.idioms`: "get around in" asks about a vehicle, "keep fit"
    about sport, "for a living" about work): the idiom's attributes replace what
    the classifier reads from the question's vector (``attribute_gate``,
    ``attribute_weight``). The small embedder reads words, not idioms."""
    present_alike_hits: int = Field(default=8, ge=2, le=50)
    """How many of the first hits the present-tense lever compares."""
    neighbour_hits: int = Field(default=2, ge=0, le=50)
    """Session-neighbour expansion (0: off; default 2): each of this many best fused
    hits lends a share of its score to the memories stored next to it in its own
    conversation session (same ``user_id``, ``agent_id`` and ``run_id``, insertion
    order), which join the results or rise to that score (a neighbour keeps the better
    of its own score and the lent one). A question's answer is often in the turn
    beside the one that matches it. One store read (``Store.neighbours``) per search.
    On by default because it generalises on LoCoMo dev by leave-one-conversation-out
    (docs/retrieval.md, "Retrieval levers")."""
    conversation_window_hours: float = Field(default=6.0, ge=0, le=24 * 366)
    """What counts as one conversation for the conversation devices (session neighbours
    and the keyword terms a message borrows from the messages before it): messages of
    one ``add`` call, or of one ``run_id`` said within this many hours of each other.
    Facts stored one ``add`` at a time without a run are never one conversation."""
    neighbour_span: int = Field(default=1, ge=1, le=10)
    """How many memories each side of a hit are its neighbours."""
    neighbour_share: float = Field(default=0.8, gt=0, le=1)
    """The share of a hit's fused score lent to a neighbour next to it (offset 1)."""
    neighbour_decay: float = Field(default=0.5, gt=0, le=1)
    """The share is multiplied by this for each further step (offset 2, 3, ...)."""
    neighbour_actor: Literal["any", "same"] = "same"
    """``"same"`` (the default): only memories by the hit's own ``actor_id`` are its
    neighbours (the speaker's previous and next messages, looked for within twice
    ``neighbour_span`` memories each side), offsets counted among them; ``"any"``:
    every memory (measured worse: the other speaker's turn beside a hit is usually
    found already)."""
    session_decay: float = Field(default=1.0, gt=0, le=1)
    """Diversity (1: off, the default): the results are re-ranked greedily, each
    candidate's fused score multiplied by ``session_decay ** n``, where ``n`` counts the
    results already taken from its conversation session (same ``user_id``,
    ``agent_id``, ``run_id``), so one session cannot fill the first results. A soft
    per-session cap: the score a result keeps is the multiplied one."""
    entity_hop_hits: int = Field(default=0, ge=0, le=50)
    """Entity second hop (0: off, the default): the entities linked to each of this many
    best fused hits are looked up as a second query, and the memories linked to them
    join the results or rise to the hit's score times ``entity_hop_share`` (a memory
    keeps the better of its own score and the lent one). Only entities linked to at
    most ``entity_hop_max_degree`` memories count. One store read
    (``Store.entity_hop``) per search. Off because it does not generalise on LoCoMo dev
    by leave-one-conversation-out (docs/retrieval.md, "Retrieval levers")."""
    entity_hop_share: float = Field(default=0.5, gt=0, le=1)
    """The share of a hit's fused score lent to a memory sharing one of its entities."""
    entity_hop_max_degree: int = Field(default=10, ge=2, le=1000)
    """Entities linked to more memories than this are not followed (a name every turn
    carries says nothing about which turns belong together)."""
    time_weight: float = Field(default=0.3, ge=0, le=1)
    """Time in the query (0: off; default 0.3): when the query names a period (an
    explicit date, "in May 2023", "in 2022", or a relative time such as "last summer",
    resolved against the search's ``as_of`` or today; :mod:`engramdb.nlp.querytime`)
    and some candidate was observed in it (``observed_at``, else ``created_at``,
    within ``time_slack_days``), the candidates observed outside every named period
    have their score multiplied by ``1 - time_weight``. A query naming no period, or a
    period no candidate falls in, is ranked as without it. On by default because it
    generalises on LoCoMo dev by leave-one-conversation-out (docs/retrieval.md,
    "Retrieval levers")."""
    time_slack_days: float = Field(default=1.0, ge=0, le=366)
    """Days added before and after each named period when matching ``observed_at``."""
    when_weight: float = Field(default=0.0, ge=0, le=1)
    """"When" questions (0: off, the default): when the query asks for a time ("When
    did ...", "What year ...", "how long ago"; :func:`engramdb.nlp.querytime.asks_when`)
    and some candidate's text says when something happened (a date, a weekday,
    "yesterday", "last week", ...), the candidates whose text says no time have their
    score multiplied by ``1 - when_weight``. Off because it does not generalise on
    LoCoMo dev by leave-one-conversation-out (docs/retrieval.md)."""
    attribute_gate: float = Field(default=0.5, ge=0, le=1)
    """Attribute terms (0: off): a question the attribute classifier
    (:mod:`engramdb.attributes`) gives at least this probability of asking about a
    personal attribute ("What make of motor does Daniel have?": vehicle) also
    searches the attribute's keyword term (``@vehicle``), which memories carry when
    their own vector gets ``attribute_share`` for it. The classifier reads the
    default embedder's vectors: with another embedder the lever is off."""
    other_subject_factor: float = Field(default=0.5, ge=0, le=1)
    """Someone else's fact (1: off): a memory that opens with a relation as its subject
    ("My manager is allergic to nuts", "Kwame's sister's favourite food is sushi";
    :func:`engramdb.nlp.subjects.opening_relation`) has its fused score multiplied by
    this, unless the question asks about that relation ("Hannah's children", "the
    user's significant other", or the attribute it asks about). When a personal
    question names the person it asks about (the store's own person, ``owner_names``,
    or a speaker of the scope, ``speaker_names``), so does a memory that opens with
    another person, as its subject or as the holder of the relation asked ("Diego's
    partner is Casey" when the question asks Sunita's)."""
    owner_names: bool = True
    """A query naming the store's own person (the name opening most of the candidates
    as their subject, nobody's ``actor_id``: :mod:`engramdb.owner`) is searched again
    without the name as a keyword, entity key or in its vector; costs a second query
    embedding and candidate read for such queries. A name the search's ``user_id``
    spells ("Dana" in ``user_id="dana"``: ``owner.scope_owner``) is the owner from
    the start: one name-free embedding, no second read."""
    attribute_weight: float = Field(default=0.5, ge=0)
    """The weight of the attribute part (0: off): how much the attributes a
    memory's vector is about agree with those the question's vector asks
    (:meth:`engramdb.attributes.Asked.agreement`), each attribute counting less the
    more memories of the scope hold it. Read with the classifier that ``attribute_gate``
    uses: off with another embedder, or with ``attribute_gate`` 0."""
    attribute_share: float = Field(default=0.2, gt=0, le=1)
    """The probability (:mod:`engramdb.attributes`) an attribute needs to be one of a
    memory's attribute terms (index time)."""
    work_side_factor: float = Field(default=0.5, ge=0, le=1)
    """The other side of work (1: off): for a question that asks one side of
    someone's work (:func:`engramdb.nlp.facets.asked_work_facet`: "Which company
    does Signe work for?" the employer, "What does Chiara do for a living?" the
    occupation), a memory that says only the other side ("Signe works as a
    vet", "Omar is employed by the city council") has its fused score multiplied
    by this: it is about the work, not the answer."""
    chatter_factor: float = Field(default=0.5, ge=0, le=1)
    """Small talk's share of its fused score (default 0.5; 1: off). A candidate whose own keyword
    terms, past the speakers' names, are all everyday conversation words ("Not bad
    at all! Tired, but good.", "Lol, classic.", "Hey Sofia! How's your week been?";
    :data:`CHATTER_WORDS`) has its score multiplied by this: such a turn states
    nothing, yet its vector sits near every question. docs/retrieval.md has the
    measurements."""
    question_factor: float = Field(default=0.5, ge=0, le=1)
    """A question's share of its score (default 0.5; 1: off). A hit whose text ends in a
    question mark ("That's cool! Have you read all of his books?") asks rather than
    states: in a conversation it sits near every question about its topic, yet the
    answer is in the turn that replies. Its score is multiplied by this after the
    neighbour and entity lenders, so it still lends to the reply beside it, and after
    the calibration curve: the probability is scaled, not ``relative``
    (:func:`engramdb.expand.asked_last`). A turn the query repeats word for
    word keeps its score. Memories extracted as facts never end so;
    docs/retrieval.md has the measurements."""
    superseded_factor: float = Field(default=0.02, ge=0, le=1)
    """A superseded memory's share of its score when the question asks what holds
    now (default 0.02; 1: off). For such a question
    (:func:`engramdb.nlp.querytime.asks_present`: "Where does Maya live these
    days?"), a memory that a live, newer one ``updates`` or ``contradicts`` no
    longer answers, yet it kept the score its words earned, equal to its
    superseder's. Its score is multiplied by this after the supersession order,
    and it sorts by that score (:func:`stale_below`). A question about the
    previous value, about a named time or about what has piled up
    (:func:`engramdb.nlp.querytime.asks_collection`: "Which cities has Maya
    lived in?") is not such a question, and nothing moves for it; with
    ``as_of``, superseded means superseded by then. In the
    development suite none of the 2,916 superseded hits of present-tense
    questions answered one; three would be the 95 % bound, a factor of 0.016 at
    their mean score (0.066): 0.02 rounds it up (docs/retrieval.md)."""
    informative_terms: int = Field(default=0, ge=0, le=64)
    """Informativeness prior (0: off, the default): a candidate whose own text has fewer
    than this many distinct keyword terms (:func:`engramdb.nlp.index_terms`: stop words
    out), not counting the words of the speakers' names (every candidate's
    ``actor_id``), has its fused score multiplied by ``n / informative_terms``, so a
    content-free turn ("Not bad at all! Tired, but good.", lifted by its speaker's
    name in the vector, the keyword terms of the message before it and the actor
    signal) does not outrank the turn that states a fact. docs/retrieval.md has the
    measurements."""


HYBRID_WEIGHTED = FusionConfig()
# The presets other than the default rank by their signals alone: no neighbour expansion
# and no time lever (measured for the default weights only).
_SIGNALS_ALONE: dict[str, Any] = {
    "calibration": None,
    "neighbour_hits": 0,
    "time_weight": 0.0,
    "when_weight": 0.0,
    "chatter_factor": 1.0,
    "question_factor": 1.0,
    "superseded_factor": 1.0,
    "attribute_gate": 0.0,
    "attribute_weight": 0.0,
    "attribute_currency": False,
    "attribute_idioms": False,
    "other_subject_factor": 1.0,
    "work_side_factor": 1.0,
    "owner_names": False,
}
HYBRID_RRF = FusionConfig(method="rrf", entity_weight=0.5, actor_weight=0.5, **_SIGNALS_ALONE)
DENSE_ONLY = FusionConfig(bm25_weight=0.0, entity_weight=0.0, actor_weight=0.0, **_SIGNALS_ALONE)
KEYWORD_ONLY = FusionConfig(
    semantic_weight=0.0, entity_weight=0.0, actor_weight=0.0, **_SIGNALS_ALONE
)


@dataclass(frozen=True)
class QueryPlan:
    """What a query asks the store for, and what fusion compares memories with."""

    terms: list[str]
    """Keyword terms for BM25 (:func:`engramdb.nlp.query_terms`)."""
    entities: list[str]
    """Entity keys to look up: every 1-3-word window of the query, normalised."""
    names: frozenset[str] = frozenset()
    """The same keys as a set, for matching a memory's ``actor_id``."""
    relations: frozenset[str] = frozenset()
    """The relations the query asks about (:func:`engramdb.nlp.subjects.asked_relations`)."""
    owners: frozenset[str] = frozenset()
    """The store's own person, when the query names them (:func:`engramdb.owner.owner_names`)."""
    speakers: frozenset[str] = frozenset()
    """The scope's speakers the query names (:func:`engramdb.speakers.recent_speakers`)."""
    personal: bool = False
    """The query asks about the store's own person: a personal attribute of theirs
    (:mod:`engramdb.attributes`) or by their name (``owners``)."""
    attributes: Any = None
    """The question's attribute shares (:meth:`engramdb.attributes.AttributeModel.shares`)
    and the classifier, as an :class:`engramdb.attributes.Asked`; None when off."""
    work_facet: str | None = None
    """The side of work the query asks (:func:`engramdb.nlp.facets.asked_work_facet`:
    ``"employer"`` or ``"occupation"``), read when ``work_side_factor`` is on."""


_WORD = re.compile(r"[^\W_]+(?:['\u2019\-][^\W_]+)*")
_MAX_KEYS = 96


@lru_cache(maxsize=1024)
def _entity_keys(query: str) -> tuple[str, ...]:
    """Normalised 1-3-word windows of the query, and the keys of its dated entities.

    Queries are often typed in lower case, where the capitalisation rules of
    :func:`extract_entities` find nothing; every window is tried against the
    entity table instead (unknown keys simply match nothing). A window that
    starts or ends with a stop word is skipped ("did caroline", "go to").
    """
    words = _WORD.findall(query)
    stops = STOP_WORDS["en"] | STOP_WORDS.get(detect_language(query), frozenset())
    keys: dict[str, None] = {}
    for e in extract_entities(query):
        keys[e.normalized] = None
    for size in (1, 2, 3):
        for start in range(len(words) - size + 1):
            window = words[start : start + size]
            if window[0].casefold() in stops or window[-1].casefold() in stops:
                continue
            key = normalize_entity(" ".join(window))
            if key:
                keys[key] = None
            if len(keys) >= _MAX_KEYS:
                return tuple(keys)
    return tuple(keys)


_PRESENT = re.compile(
    r"\b(?:right now|just now|now|currently|nowadays|these days|at the moment|at present|"
    r"presently|anymore|any more)\b",
    re.IGNORECASE,
)
"""Words that ask *when* (at present), not *what*: "Which sport is Sofia into now?".
Kept as keywords they match every memory that says "now" ("Sofia now lives in
Gdansk"); the present is what search answers for anyway (superseded memories
rank below what replaced them), so they are left out of the keyword terms."""


_SUBJECT_WORDS = frozenset({"user", "users"})
"""Words by which a question names whoever the store is about ("what does the user eat?")."""


def subject_terms(user_id: str | None) -> frozenset[str]:
    """The query terms that only say *who* a question is about, in a search of ``user_id``.

    Who the question is about is a scope fact, not a keyword: in a user's own
    store, "the user" and the user's id name every memory equally, so as BM25
    terms or entity keys they lift whichever memories happen to spell them
    ("User's partner is called Sam" for any "the user" question) and push down
    the first-person memory that answers ("I'm vegan"). ``"user"``/``"users"``
    and the words of ``user_id`` (``alice`` of ``alice`` or ``alice_smith``;
    purely numeric parts stay) are left out of the query's keyword terms and
    entity keys; the speaker-name (actor) signal keeps them.
    """
    out = set(_SUBJECT_WORDS)
    if user_id:
        words = re.split(r"[\W_]+", user_id)
        out.update(t for t in query_terms(" ".join(words)) if not t.isdigit() and len(t) > 1)
    return frozenset(out)


def query_names(query: str, config: FusionConfig) -> list[str]:
    """The entity keys a query may name (:attr:`QueryPlan.names`), when a signal reads them."""
    return list(_entity_keys(query)) if config.entity_weight > 0 or config.actor_weight > 0 else []


def plan_query(
    query: str, config: FusionConfig, subject: frozenset[str] = frozenset()
) -> QueryPlan:
    """Read a query once: its keyword terms and the entity keys it may name.

    ``subject`` (:func:`subject_terms`): terms that only name who the store is
    about; they are neither keyword terms nor entity keys (they still name a
    speaker for the actor signal).
    """
    terms = query_terms(_PRESENT.sub(" ", query)) if config.bm25_weight > 0 else []
    keys = query_names(query, config)
    if subject:
        terms = [t for t in terms if t not in subject]
        entities = [k for k in keys if not (set(k.split()) <= subject)]
    else:
        entities = keys
    return QueryPlan(
        terms=terms,
        entities=entities if config.entity_weight > 0 else [],
        names=frozenset(keys),
        relations=asked_relations(query) if config.other_subject_factor < 1 else frozenset(),
        work_facet=asked_work_facet(query) if config.work_side_factor < 1 else None,
    )


_LEADING_USER = re.compile(r"^\s*(?:the\s+)?user(?:'s|\u2019s)?\s+(?=\S)", re.IGNORECASE)
_THE_USER = re.compile(r"\bthe\s+user(?:'s|\u2019s)?\s*", re.IGNORECASE)


def subject_free_text(text: str) -> str:
    """``text`` without the words that only say it is about the store's user.

    A leading "User"/"The user"/"User's" goes, and "the user('s)" anywhere:
    "User's partner is called Sam" -> "partner is called Sam". What remains
    is what is said. A text that would be left empty is returned unchanged.
    Names are kept: "Dana is dating Sam" and "Colleague 1 is dating someone"
    differ by who, and only the name tells them apart.
    """
    out = _THE_USER.sub("", _LEADING_USER.sub("", text)).strip()
    return out if out else text


def document_text(text: str, actor_id: str | None, config: FusionConfig) -> str:
    """What is embedded for a memory: its text, after its speaker when known.

    With ``subject_free`` the text is :func:`subject_free_text`'s.
    """
    body = subject_free_text(text) if config.subject_free else text
    return f"{actor_id}: {body}" if config.embed_actor and actor_id else body


def query_embedding_text(query: str, config: FusionConfig) -> str:
    """What is embedded for a query.

    Without "the user" (:func:`subject_free_text`) when ``subject_free`` is on.
    """
    return subject_free_text(query) if config.subject_free else query


def _entity_strength(entities: list[tuple[str, int]]) -> float:
    return min(1.0, sum(1.0 / math.log2(1 + max(degree, 1)) for _, degree in entities))


def _ranks(values: dict[int, float]) -> dict[int, int]:
    """1-based ranks by descending value (ties by position); zeros get no rank."""
    order = sorted((i for i, v in values.items() if v > 0), key=lambda i: (-values[i], i))
    return {i: r + 1 for r, i in enumerate(order)}


def _actor_matches(candidates: list[Candidate], names: frozenset[str]) -> list[bool]:
    """Whether each candidate's speaker is named in the query (one lookup per speaker)."""
    if not names:
        return [False] * len(candidates)
    keys: dict[str, bool] = {}
    out = []
    for cand in candidates:
        actor = cand.row.actor_id
        if actor is None:
            out.append(False)
            continue
        if actor not in keys:
            keys[actor] = normalize_entity(actor) in names
        out.append(keys[actor])
    return out


@lru_cache(maxsize=1 << 13)
def _own_terms(text: str) -> frozenset[str]:
    """The distinct keyword terms of a text (cached: the same memories come back often)."""
    return frozenset(index_terms(text).split())


CHATTER_WORDS = (
    "hi hello hey bye goodbye morning evening night thanks thank cheers sorry welcome "
    "ok okay yes yeah yep yup nope sure right cool nice great good fine bad awesome "
    "amazing wonderful fantastic brilliant terrible awful lovely wow lol haha hah omg oh "
    "ah hmm well really totally exactly definitely absolutely indeed true fair enough "
    "glad happy sad tired busy pretty quite bit lot much anyway though kinda sort kind "
    "stuff thing way day week weekend today tonight tomorrow yesterday time moment later "
    "soon ago month year life everything anything something nothing everyone guess think "
    "know mean feel hope wish love like see hear tell talk say catch chat miss meet go get "
    "come make keep take let sound fun funny crazy wild classic same back again long ages "
    "news hear luck care bless congrats congratulations agree point idea deal plan "
    "interesting cute sweet wait course honestly seriously literally complaint strong alright"
)
"""Everyday conversation words, lemmatised as the index does: a text made of these
(and names) alone is small talk (``FusionConfig.chatter_factor``)."""


@lru_cache(maxsize=1)
def _chatter_terms() -> frozenset[str]:
    return frozenset(index_terms(CHATTER_WORDS).split())


def chatter_factors(candidates: Sequence[Candidate], factor: float) -> list[float]:
    """``factor`` for each candidate that is small talk, else 1 (see ``chatter_factor``)."""
    if factor >= 1.0:
        return [1.0] * len(candidates)
    names = _speaker_words(candidates)
    return [_chatter_factor(c, factor, names) for c in candidates]


def _chatter_factor(cand: Candidate, factor: float, names: frozenset[str]) -> float:
    """``factor`` when ``cand`` is small talk past the speakers' names ``names``, else 1."""
    return factor if _own_terms(cand.row.text) - names <= _chatter_terms() else 1.0


def _speaker_words(candidates: Sequence[Candidate]) -> frozenset[str]:
    """The keyword terms of the candidates' speakers' names (``actor_id``)."""
    names: set[str] = set()
    for actor in {c.row.actor_id for c in candidates if c.row.actor_id}:
        names |= _own_terms(actor)
    return frozenset(names)


def other_subject_factors(
    candidates: Sequence[Candidate],
    factor: float,
    asked: frozenset[str],
    people: frozenset[str] = frozenset(),
    names: frozenset[str] = frozenset(),
) -> list[float]:
    """``factor`` for each candidate that is someone else's fact, else 1.

    Someone else's: it opens with a relation the query does not ask about
    (``asked``), or, when the query names the person it asks about (``people``:
    the store's own person, ``QueryPlan.owners``, or a speaker of the scope,
    ``QueryPlan.speakers``), with another person the query does not name
    (``names``), as its subject or as the holder of the relation asked ("Diego's
    partner is Casey" when the question asks Sunita's).
    """
    return [_other_subject_factor(c, factor, asked, people, names) for c in candidates]


def _other_subject_factor(
    cand: Candidate,
    factor: float,
    asked: frozenset[str],
    people: frozenset[str],
    names: frozenset[str],
) -> float:
    """:func:`other_subject_factors` of one candidate."""
    rel = opening_relation(cand.row.text)
    if rel is not None and rel not in asked:
        return factor
    if not people:
        return 1.0
    name = opening_name(cand.row.text, possessor=rel is not None)
    return factor if name is not None and name not in people and name not in names else 1.0


_JOB: Final = ATTRIBUTE_PREFIX + "job"


def _work_side_factor(cand: Candidate, factor: float, asked: str) -> float:
    """``factor`` when ``cand`` says a side of work and not the ``asked`` one, else 1.

    Read strictly (an employer only after "at", "joined", ...): a candidate
    may be about anything, and a capitalised name alone is not an employer.
    """
    said = said_work_facets(cand.row.text, strict=True)
    return factor if said and asked not in said else 1.0


def informative_factors(candidates: Sequence[Candidate], terms: int) -> list[float]:
    """Each candidate's informativeness factor, ``min(1, n / terms)`` (1 when ``terms`` is 0).

    ``n`` counts the distinct keyword terms of the candidate's own text that are
    not a word of any candidate's speaker name (a greeting that names the person
    asked about says nothing about them). See ``FusionConfig.informative_terms``.
    """
    if terms <= 0:
        return [1.0] * len(candidates)
    names = _speaker_words(candidates)
    return [_informative_factor(c, terms, names) for c in candidates]


def _informative_factor(cand: Candidate, terms: int, names: frozenset[str]) -> float:
    """:func:`informative_factors` of one candidate, past the speakers' names ``names``."""
    return min(1.0, len(_own_terms(cand.row.text) - names) / terms)


def fuse(
    candidates: list[Candidate],
    config: FusionConfig,
    plan: QueryPlan | None = None,
    limit: int | None = None,
) -> list[Hit]:
    """Score and sort candidates; every hit's ``explain`` holds each part.

    ``plan`` supplies the names for the actor signal; without it the actor
    signal is off. ``limit`` keeps only the best ``limit`` hits: every
    candidate is scored, but only those are built (the same hits, in the same
    order, as ``fuse(...)[:limit]``).
    """
    names = plan.names if plan is not None else frozenset()
    rrf = config.method == "rrf"
    # The semantic and keyword ranks are RRF's alone (the weighted mean only asks
    # whether any keyword matched): two sorts fewer a search.
    # Cosines can be <= 0; shift so every candidate has a semantic rank.
    sem_ranks = _ranks({i: c.semantic + 2.0 for i, c in enumerate(candidates)}) if rrf else {}
    bm_ranks = (
        _ranks({i: c.bm25 for i, c in enumerate(candidates)})
        if rrf
        else {i: 1 for i, c in enumerate(candidates) if c.bm25 > 0}
    )
    ent = {i: _entity_strength(c.entities) for i, c in enumerate(candidates)}
    ent_ranks = _ranks(ent)
    actor = dict(enumerate(_actor_matches(candidates, names)))
    w_s, w_b, w_e, w_a = (
        config.semantic_weight,
        config.bm25_weight,
        config.entity_weight,
        config.actor_weight,
    )
    # Only the signals this query can use count in the normalisation, so a query
    # with no keyword match or nobody named can still score 1.
    cover_power = config.bm25_cover_power if config.method == "weighted" else 0.0
    top_cover = (
        max(
            (_cover(c) for c in candidates if c.bm25_best > 0),
            default=0.0,
        )
        if cover_power > 0
        else 1.0
    )
    active = w_s
    # With bm25_cover_power, a keyword signal whose best match covers little of
    # the query (a name alone) weighs as little in the normalisation as it adds.
    active += w_b * top_cover**cover_power if bm_ranks else 0.0
    active += w_e if ent_ranks else 0.0
    named = any(actor.values())
    active += w_a if named else 0.0
    # The attribute part: how much each memory is about what the question asks
    # (attributes.py); the weighted mean's alone.
    stats = candidates[0].term_stats if candidates else None
    agree = (
        plan.attributes.agreement([c.vector for c in candidates], stats)
        if plan is not None
        and plan.attributes is not None
        and config.attribute_weight > 0
        and config.method == "weighted"
        else None
    )
    w_t = config.attribute_weight if agree is not None else 0.0
    active += w_t
    active = active or 1.0
    # A perfect match is one of the words (the attribute part adds to it, up to 1).
    best = _best_fused(candidates, config, bool(bm_ranks), ent, named, active)
    # The factors below only lower a score, and each reads the candidate's text:
    # they are read for the candidates that can still reach the first ``limit``.
    use_informative = config.informative_terms > 0
    use_chatter = config.chatter_factor < 1
    use_other = config.other_subject_factor < 1 and plan is not None and plan.personal
    # Only for a question about someone's work (the attribute read from it): "career"
    # and "company" also ask other things ("a career-high", "production companies").
    side = (
        plan.work_facet
        if plan is not None and config.work_side_factor < 1 and _JOB in plan.terms
        else None
    )
    speakers = _speaker_words(candidates) if use_informative or use_chatter else frozenset()
    factors: dict[int, tuple[float | None, float | None, float | None, float | None]] = {}

    def factored(score: float, i: int) -> float:
        cand = candidates[i]
        inf = (
            _informative_factor(cand, config.informative_terms, speakers)
            if use_informative
            else None
        )
        chat = _chatter_factor(cand, config.chatter_factor, speakers) if use_chatter else None
        other = (
            _other_subject_factor(
                cand,
                config.other_subject_factor,
                plan.relations,
                plan.owners | plan.speakers,
                plan.names,
            )
            if use_other and plan is not None
            else None
        )
        work = _work_side_factor(cand, config.work_side_factor, side) if side else None
        factors[i] = (inf, chat, other, work)
        for f in (inf, chat, other, work):
            if f is not None:
                score *= f
        return min(1.0, max(0.0, score))

    # What the query asked, the same for every hit: the attribute terms it searched and
    # the store's own person it named (attributes.py, owner.py).
    asked: dict[str, Any] = {}
    if plan is not None:
        attrs = [t for t in plan.terms if t.startswith(ATTRIBUTE_PREFIX)]
        if attrs:
            asked["attributes"] = attrs
        if plan.owners:
            asked["owner"] = sorted(plan.owners)
    base: list[tuple[float, float, float, float, int]] = []
    for i, cand in enumerate(candidates):
        sem_part = min(
            1.0, max(0.0, (cand.semantic - config.cosine_floor) / (1.0 - config.cosine_floor))
        )
        bm_part = cand.bm25 / (cand.bm25 + config.bm25_half)
        actor_part = 1.0 if actor[i] else 0.0
        if cover_power > 0:
            bm_part *= _cover(cand) ** cover_power
        if config.method == "rrf":
            raw = sum(
                w / (config.rrf_k + ranks[i])
                for w, ranks in ((w_s, sem_ranks), (w_b, bm_ranks), (w_e, ent_ranks))
                if i in ranks
            )
            raw += w_a * actor_part / (config.rrf_k + 1)
            score = raw * (config.rrf_k + 1) / active
        else:
            score = (
                w_s * sem_part
                + w_b * bm_part
                + w_e * ent[i]
                + w_a * actor_part
                + (w_t * agree[i] if agree is not None else 0.0)
            ) / active
        base.append((score, sem_part, bm_part, actor_part, i))
    scored = _factored_best(base, factored, limit)
    scored.sort(key=lambda t: (-t[0], -candidates[t[4]].semantic, candidates[t[4]].row.id))
    if limit is not None:
        scored = scored[: max(0, limit)]
    hits = []
    for score, sem_part, bm_part, actor_part, i in scored:
        cand = candidates[i]
        hits.append(
            Hit(
                cand.row,
                score,
                {
                    "semantic": cand.semantic,
                    "bm25": cand.bm25,
                    "entity": ent[i],
                    "entities": [name for name, _ in cand.entities],
                    "actor": actor_part,
                    "parts": {
                        "semantic": round(sem_part, 6),
                        "bm25": round(bm_part, 6),
                        "entity": round(ent[i], 6),
                        "actor": actor_part,
                        **({"attribute": round(agree[i], 6)} if agree is not None else {}),
                    },
                    "fusion": score,
                    # Built for the kept hits only: a search scores ~100 candidates.
                    "features": candidate_features(
                        sem_part,
                        bm_part,
                        _cover(cand),
                        ent[i],
                        actor_part,
                        bool(bm_ranks),
                        cand.row,
                    ),
                    **({"relative": min(1.0, score / best)} if best else {}),
                    "speaker_named": named,
                    **({"informative": factors[i][0]} if use_informative else {}),
                    **({"chatter": factors[i][1]} if use_chatter else {}),
                    **({"other_subject": factors[i][2]} if use_other else {}),
                    **({"work_side": factors[i][3]} if side else {}),
                    **asked,
                    "method": config.method,
                    "rank": {
                        "semantic": cand.semantic_rank,
                        "bm25": cand.bm25_rank,
                        "entity": ent_ranks.get(i),
                    },
                },
            )
        )
    return hits


def _factored_best(
    base: list[tuple[float, float, float, float, int]],
    factored: Callable[[float, int], float],
    limit: int | None,
) -> list[tuple[float, float, float, float, int]]:
    """Each candidate's final score (``factored``: its base score times factors in [0, 1]).

    With a ``limit``, only the candidates that can still reach the first
    ``limit`` are factored: in order of their base score, which bounds the
    final one, until a base score is below the ``limit``-th best final score
    found. Those left out score strictly lower than every one of the first
    ``limit``, so the first ``limit`` (ties included) are those of scoring
    them all.
    """
    if limit is None or limit >= len(base):
        return [(factored(t[0], t[4]), *t[1:]) for t in base]
    if limit <= 0:
        return []
    out: list[tuple[float, float, float, float, int]] = []
    kept: list[float] = []  # a min-heap of the best ``limit`` final scores
    for t in sorted(base, key=lambda t: -t[0]):
        if len(kept) == limit and min(1.0, max(0.0, t[0])) < kept[0]:
            break
        score = factored(t[0], t[4])
        out.append((score, *t[1:]))
        if len(kept) < limit:
            heapq.heappush(kept, score)
        elif score > kept[0]:
            heapq.heapreplace(kept, score)
    return out


def _best_fused(
    candidates: list[Candidate],
    config: FusionConfig,
    keyword: bool,
    entity: dict[int, float],
    named: bool,
    active: float,
) -> float | None:
    """The weighted fused score of a perfect match of the query (None: no calibration).

    Its text is the query's (cosine ``calibration.exact_cosine``), it holds
    exactly the query's words (BM25 ``bm25_best``), it has the best entity
    link any candidate has, and it is by the person the query names. The
    attribute part is not in it: a memory about what the question asks scores
    above a perfect match of the words alone (``relative`` is capped at 1).
    """
    cal = config.calibration
    if cal is None or config.method != "weighted" or not candidates:
        return None
    sem = min(1.0, max(0.0, (cal.exact_cosine - config.cosine_floor) / (1 - config.cosine_floor)))
    total = config.semantic_weight * sem
    if keyword:
        bm = candidates[0].bm25_best
        total += config.bm25_weight * (bm / (bm + config.bm25_half) if bm > 0 else 0.0)
    if entity and max(entity.values()) > 0:
        total += config.entity_weight * max(entity.values())
    if named:
        total += config.actor_weight
    best = total / active
    return best if best > 0 else None


def calibrate(hits: list[Hit], config: FusionConfig) -> list[Hit]:
    """``hits`` with their calibrated scores (same order); unchanged without a calibration."""
    cal = config.calibration
    if cal is None:
        return hits
    return [
        Hit(
            h.row,
            cal.apply(h.explain.get("relative", h.score), bool(h.explain.get("speaker_named"))),
            h.explain,
        )
        for h in hits
    ]


def apply_rerank(hits: list[Hit], grades: list[float], weight: float) -> list[Hit]:
    """Blend reranker grades into fused hits: ``(1 - weight) * fusion + weight * grade``.

    Scores stay in [0, 1]; ``explain`` keeps the fusion score and adds the grade.
    """
    out = []
    for hit, grade in zip(hits, grades, strict=True):
        score = min(1.0, max(0.0, (1.0 - weight) * hit.score + weight * grade))
        out.append(Hit(hit.row, score, {**hit.explain, "rerank": grade, "score": score}))
    out.sort(key=lambda h: (-h.score, -h.explain["semantic"], h.row.id))
    return out


def when(row: MemoryRow) -> str:
    """When a memory's fact was stated: ``observed_at``, else ``created_at`` (ISO UTC)."""
    return row.observed_at or row.created_at


def names_newer(what: frozenset[str], superseders: dict[str, list[MemoryRow]]) -> bool:
    """Whether a memory that replaced another one says ``what`` (half its terms at least).

    For "What did Bram study before a coding bootcamp?": the coding bootcamp
    is a newer version of something, so the question asks for what it
    replaced (:func:`rank_superseded` with ``previous``), not about an event
    before it. ``what``: :func:`engramdb.nlp.querytime.before_what`.
    """
    return any(_says(what, row.text) for rows in superseders.values() for row in rows)


def _says(what: frozenset[str], text: str) -> bool:
    """Whether ``text`` holds at least half of the terms ``what`` (none: False)."""
    return bool(what) and 2 * len(what & _own_terms(text)) >= len(what)


def before_unlinked(hits: list[Hit], what: frozenset[str]) -> list[Hit]:
    """For "... before X?" with no link to follow: the subject's earlier fact first.

    The first hit that says X (half its terms at least) is the anchor; the
    best-ranked hit *below* it about the same person (``actor_id``), stated
    earlier and not saying X takes its place and score (the hits in between
    move down one). Only when the anchor is a fact that names its own
    ``actor_id`` ("Sofia joined a boxing club", as facts are written): on chat
    turns ("Switched to boxing last week!") the speaker's earlier turns are
    mostly about other things, and moving one up was measured to hurt
    (docs/retrieval.md). Hits in a supersession chain are left alone: their
    links decide (:func:`rank_superseded`). Without an anchor, or with no such
    earlier fact, nothing moves.
    """
    if not what or len(hits) < 2:
        return hits
    at = next(
        (i for i, h in enumerate(hits) if _says(what, h.row.text) and not _in_chain(h.row)),
        None,
    )
    if at is None:
        return hits
    anchor = hits[at]
    if not _names_own_actor(anchor.row):
        return hits  # a chat turn: the speaker's earlier turns are mostly about other things
    for j in range(at + 1, len(hits)):
        hit = hits[j]
        if (
            hit.row.actor_id == anchor.row.actor_id
            and when(hit.row) < when(anchor.row)
            and not _in_chain(hit.row)
            and not _says(what, hit.row.text)
        ):
            moved = Hit(hit.row, anchor.score, {**hit.explain, "before": anchor.row.id})
            return [*hits[:at], moved, *hits[at:j], *hits[j + 1 :]]
    return hits


def _names_own_actor(row: MemoryRow) -> bool:
    """Whether a memory is a statement *about* its speaker by name (a fact, not a turn)."""
    if not row.actor_id:
        return False
    return bool(_own_terms(without_vocatives(row.text)) & _own_terms(row.actor_id))


def rank_superseded(
    hits: list[Hit],
    superseders: dict[str, list[MemoryRow]],
    *,
    include_superseded: bool = True,
    pull: Callable[[MemoryRow], bool] = lambda _row: True,
    previous: bool = False,
) -> list[Hit]:
    """Put every superseded hit right below what superseded it (docs/retrieval.md).

    When the first hit is in a supersession chain, its links decide and nothing
    moves.

    ``previous`` (the question asks what held before: "what did she drive
    before?", :func:`engramdb.nlp.querytime.asks_previous`): the other way
    round, each superseded hit right *above* what superseded it, so the
    version that was replaced last comes first.

    ``superseders`` maps a hit's id to the live, visible, newer memories that
    ``update`` or ``contradict`` it. A superseder that is not among the hits
    is pulled in when ``pull(row)`` allows it (it answers what the old
    memory matched); a superseder scores at least what the memory it
    supersedes scored (its ``explain`` notes ``lifted_from``), and the
    superseded memory sorts after it on a tie, as does an older memory
    after a newer one. ``include_superseded=False`` drops the superseded
    hits instead. Scores stay in [0, 1]; nothing else moves.
    """
    if not superseders:
        return hits
    by_id = {h.row.id: h for h in hits}
    # Where each hit stands in the order it came in: ties keep it (a calibrated
    # score is a step function, so unrelated hits often tie), and a chain's
    # members stand where its best-placed member stood.
    place = {h.row.id: i for i, h in enumerate(hits)}
    order = list(hits)
    for hit in hits:
        for row in superseders.get(hit.row.id, ()):
            if row.id not in by_id and pull(row):
                pulled = Hit(row, 0.0, {"pulled_for": hit.row.id})
                by_id[row.id] = pulled
                place[row.id] = place[hit.row.id]
                order.append(pulled)
    # Chains (a <- b <- c) settle in at most their length of passes.
    for _ in range(len(order)):
        moved = False
        for hit in order:
            for row in superseders.get(hit.row.id, ()):
                newer = by_id.get(row.id)
                if newer is not None and newer.score < hit.score:
                    newer.score = hit.score
                    newer.explain = {**newer.explain, "lifted_from": hit.row.id}
                    moved = True
                if newer is not None and newer.score == hit.score:
                    place[row.id] = min(place[row.id], place[hit.row.id])
        if not moved:
            break
    if previous:
        # The replaced versions rise to the score of what replaced them (chains too).
        for _ in range(len(order)):
            moved = False
            for hit in order:
                for row in superseders.get(hit.row.id, ()):
                    newer = by_id.get(row.id)
                    if newer is not None and hit.score < newer.score:
                        hit.score = newer.score
                        hit.explain = {**hit.explain, "lifted_from": row.id}
                        moved = True
                    if newer is not None and newer.score == hit.score:
                        place[hit.row.id] = min(place[hit.row.id], place[row.id])
            if not moved:
                break
    superseded = {h.row.id for h in order if superseders.get(h.row.id)}
    if not include_superseded:
        order = [h for h in order if h.row.id not in superseded]
    # Stable sorts, last key first: score, then the place it came in at, then
    # superseded after (before, for a question about the previous value), then
    # newest first.
    order.sort(key=lambda h: h.row.id)
    order.sort(key=lambda h: when(h.row), reverse=True)
    order.sort(key=lambda h: (-h.score, place[h.row.id], (h.row.id in superseded) != previous))
    return order


def stale_below(
    hits: Sequence[Hit], superseders: Mapping[str, Sequence[MemoryRow]], factor: float
) -> list[Hit]:
    """For a question about now: every superseded hit scaled by ``factor``, re-sorted.

    ``superseders``: as :func:`rank_superseded` reads them (a hit with one is
    superseded). Called after it, so a superseder has already risen to the
    score its predecessor's words earned; the predecessor no longer answers,
    and its probability says so (``explain["superseded"]`` holds the factor).
    The sort is stable: hits of equal score keep their order.
    """
    if factor >= 1:
        return list(hits)
    out = [
        Hit(h.row, h.score * factor, {**h.explain, "superseded": factor})
        if superseders.get(h.row.id)
        else h
        for h in hits
    ]
    out.sort(key=lambda h: -h.score)
    return out


def asks(text: str) -> bool:
    """Whether a text ends in a question mark (a question states no value).

    Closing quotes and brackets after it are looked through; the full-width mark
    of Chinese and Japanese counts too.
    """
    return text.rstrip().rstrip("\"')\u201d\u300d\uff09").endswith(("?", "\uff1f"))


STATING_TERMS: Final = 2
"""Content words (past everyday conversation words and the speakers' names) a
statement needs to say which value an attribute holds (:func:`latest_of_attribute`)."""


def _stating(candidates: Sequence[Candidate]) -> list[bool]:
    """Whether each candidate says enough to state a value (:data:`STATING_TERMS`).

    A reply that only leans towards the attribute, as its vector reads it
    ("That's huge, I'm so happy for you." after news of a partner; "Yes, still
    loving it!"), holds one content word or none.
    """
    chatter = _chatter_terms()
    names = _speaker_words(candidates)
    # A fact that opens with its subject ("Bram is vegan.") names whom it is about: the
    # name counts as a word of it there, where a greeting's ("Tariq! Finally ...") does not.
    return [
        len(_own_terms(c.row.text) - chatter - names) + _opens_with_name(c.row.text)
        >= STATING_TERMS
        for c in candidates
    ]


def _opens_with_name(text: str) -> bool:
    """Whether a text opens with a name as its subject, past any greeting."""
    return opening_person(text) is not None


def _about_named(row: MemoryRow, names: frozenset[str]) -> bool:
    """Whether a memory is by, or opens with, a person in ``names`` (entity keys)."""
    if row.actor_id and normalize_entity(row.actor_id) in names:
        return True
    # "Sofia, sorry I went quiet" addresses Sofia: it is not about her.
    return opening_person(row.text) in names


def _on_side(holders: list[Candidate], facet: str) -> list[Candidate]:
    """The work holders that may answer a question about ``facet`` of someone's work.

    An employer is always named: the holders that name one, when some do. An
    occupation is a common noun, often only implied ("ward rounds at 7am"): every
    holder but those that say only an employer.
    """
    said = [said_work_facets(c.row.text) for c in holders]
    if facet == EMPLOYER:
        return [c for c, s in zip(holders, said, strict=True) if EMPLOYER in s] or holders
    return [c for c, s in zip(holders, said, strict=True) if s != {EMPLOYER}]


def latest_of_attribute(
    hits: list[Hit],
    holders: Sequence[Candidate],
    asked: Sequence[str],
    *,
    previous: bool = False,
    names: frozenset[str] = frozenset(),
    owners: frozenset[str] = frozenset(),
    before: frozenset[str] = frozenset(),
    topic: frozenset[str] = frozenset(),
    work_facet: str | None = None,
) -> list[Hit]:
    """``hits`` with the latest statement of the asked attribute first (what holds now).

    ``holders``: the memories about the question's subject that carry one of the
    attribute terms the question asks (``asked``), read from the store for this
    (:meth:`engramdb.flows.read.ReadFlows._attribute_currency`). Someone else's
    fact among them (:func:`other_subject_factors`), a text that ends in a
    question and one with fewer than :data:`STATING_TERMS` content words do not
    count; when some holders are by or open with a person the
    question names (``names``, entity keys) and that is not the store's own
    person (``owners``), only they count. The one
    stated last (:func:`when`; on a tie, the one nearer the query) takes the
    first place and its score, the others keep their order below it. Nothing
    moves when no holder is left or the latest is first already.

    When the first hit is in a supersession chain, its links decide and nothing
    moves.

    ``previous`` (the question asks what held before:
    :func:`engramdb.nlp.querytime.asks_previous`): the latest holder stated
    before the latest one's moment takes the first place instead (none: nothing
    moves). A value said again in the same session is the same value.

    ``before`` (the terms of the value a "... before X?" question names:
    :func:`engramdb.nlp.querytime.before_what`): the moment is the first
    holder's that says X, and the answer the latest holder stated before it
    that does not; with no holder saying X, as ``previous``.

    ``topic`` (the question's own words: :func:`engramdb.nlp.querytime.topic_words`):
    when the first hit says two of them and the latest holder none ("What does
    Kai's cat do all day?": "My cat sleeps all day ..." against "At night
    Mruczek hunts moths"), the question is about something said, not about
    which value holds, and nothing moves.

    ``work_facet`` (:func:`engramdb.nlp.facets.asked_work_facet`): a question about
    work that asks for the employer or the occupation: a work holder that says only
    the other side (:func:`~engramdb.nlp.facets.said_work_facets`) does not count,
    so a newer change of occupation does not answer "Which company ...?".
    """
    if not hits or not holders or _in_chain(hits[0].row):
        return hits  # links already say which version holds (rank_superseded)
    own = other_subject_factors(holders, 0.0, relations_of(asked), owners, names)
    # A question asked states nothing ("Cool! What music do you play?"), nor does a
    # reply of one content word ("That's huge, I'm so happy for you.").
    says = _stating(holders)
    mine = [
        c
        for c, f, stated in zip(holders, own, says, strict=True)
        if f == 1.0 and stated and not asks(c.row.text)
    ]
    if names and not owners:
        # The person the question names, when some holder is theirs: by who said it
        # or by the name it opens with ("Sofia works at ..."). A speaker of the scope
        # named with none of the holders theirs: nothing to say about them.
        named = [c for c in mine if _about_named(c.row, names)]
        speaker = any(h.row.actor_id and normalize_entity(h.row.actor_id) in names for h in hits)
        if not named and speaker:
            return hits
        mine = named or mine
    if work_facet is not None and WORK in asked:
        mine = _on_side(mine, work_facet)
    if not mine:
        return hits
    latest = max(mine, key=lambda c: (when(c.row), c.semantic, c.row.id))
    anchors = [c for c in mine if _says(before, c.row.text)]
    if anchors:
        moment = min(when(c.row) for c in anchors)
        earlier = [c for c in mine if when(c.row) < moment and not _says(before, c.row.text)]
        if not earlier:
            return hits
        latest = max(earlier, key=lambda c: (when(c.row), c.semantic, c.row.id))
    elif previous or before:
        earlier = [c for c in mine if when(c.row) < when(latest.row)]
        if not earlier:
            return hits
        latest = max(earlier, key=lambda c: (when(c.row), c.semantic, c.row.id))
    if hits[0].row.id == latest.row.id:
        return hits
    if len(topic & _own_terms(hits[0].row.text)) >= 2 and not topic & _own_terms(latest.row.text):
        return hits  # a question about what the first hit says, not about which value holds
    found = next((h for h in hits if h.row.id == latest.row.id), None)
    explain: dict[str, Any] = (
        dict(found.explain) if found is not None else {"semantic": latest.semantic}
    )
    explain["latest_of"] = list(asked)
    first = Hit(latest.row, hits[0].score, explain)
    return [first, *(h for h in hits if h.row.id != latest.row.id)]


def newer_first(hits: list[Hit], vectors: Any, cosine: float) -> list[Hit]:
    """``hits`` where a later statement alike to a hit above it takes that hit's place.

    ``vectors``: unit vectors of the hits' texts, in order. Going down the list,
    each hit is compared with the hits above it; when it was stated later than
    one of them (:func:`when`) and their vectors' cosine reaches ``cosine``, it
    moves just above the highest such hit and takes its score (the displaced
    hits keep theirs and move down one place). Scores stay non-increasing.
    Memories in a supersession chain neither move nor are passed: their links
    already say which version holds.
    """
    order = list(range(len(hits)))
    scores = [h.score for h in hits]
    chained = [_in_chain(h.row) for h in hits]
    for j in range(1, len(hits)):
        if chained[j]:
            continue
        pos = order.index(j)
        target = None
        for p_above in range(pos):
            i = order[p_above]
            if chained[i]:
                continue
            if when(hits[j].row) > when(hits[i].row) and float(vectors[i] @ vectors[j]) >= cosine:
                target = p_above
                break
        if target is None:
            continue
        order.pop(pos)
        order.insert(target, j)
    out = []
    for rank, i in enumerate(order):
        hit = hits[i]
        explain = {**hit.explain, "newer_first": True} if rank < i else hit.explain
        out.append(Hit(hit.row, scores[rank], explain))
    return out


_CHAIN_KINDS = frozenset(
    {
        "updates",
        "contradicts",
        "updated_by",
        "contradicted_by",
        "derived_update",
        "derived_updated_by",
    }
)


def _in_chain(row: MemoryRow) -> bool:
    """Whether a memory updates, contradicts or is superseded by another."""
    return any(kind in _CHAIN_KINDS for kind in row.link_kinds.values())


def recency_factor(
    row: MemoryRow, config: FusionConfig, now: str, weight: float | None = None
) -> float:
    """The decay multiplier of one memory: ``1 - w * (1 - 2 ** (-age / half_life))``.

    ``w`` is ``recency_weight`` and ``half_life`` is ``recency_half_life_days``;
    the age, in days, is from :func:`when` to ``now`` (the search's ``as_of``, or
    the present), never negative. 1 when the weight is 0 (the default).
    ``weight`` overrides ``recency_weight``.
    """
    weight = config.recency_weight if weight is None else weight
    if weight <= 0:
        return 1.0
    age = _days_between(when(row), now)
    return 1.0 - weight * (1.0 - math.pow(2.0, -age / config.recency_half_life_days))


def _days_between(start: str, end: str) -> float:
    try:
        delta = datetime.fromisoformat(end) - datetime.fromisoformat(start)
    except ValueError:
        return 0.0
    return max(0.0, delta.total_seconds() / 86400.0)


def apply_recency(
    hits: list[Hit], config: FusionConfig, now: str, *, present: bool = False
) -> list[Hit]:
    """``hits`` with scores multiplied by :func:`recency_factor`, re-sorted; as is when off.

    ``present``: the question asks what holds now, so the weight is the larger of
    ``recency_weight`` and ``present_recency_weight``.
    """
    weight = config.recency_weight
    if present:
        weight = max(weight, config.present_recency_weight)
    if weight <= 0:
        return hits
    out = []
    for hit in hits:
        factor = recency_factor(hit.row, config, now, weight)
        out.append(Hit(hit.row, hit.score * factor, {**hit.explain, "recency": factor}))
    out.sort(key=lambda h: (-h.score, -h.explain["semantic"], h.row.id))
    return out
