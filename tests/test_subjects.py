"""Who a statement is about (nlp/subjects.py) and whose store it is (owner.py)."""

from __future__ import annotations

import pytest

from engramdb.core.records import Candidate, MemoryRow
from engramdb.nlp.subjects import asked_relations, opening_name, opening_relation
from engramdb.owner import owner_names


@pytest.mark.parametrize(
    ("text", "relation"),
    [
        ("My manager is allergic to nuts so no office cake", "work"),
        ("Kwame's sister's favourite food is sushi.", "sibling"),
        ("Our son Oscar lost his first tooth today", "child"),
        ("The user's partner is called Sam.", "partner"),
        ("User's partner is called Sam", "partner"),
        ("Rhys' Siamese cat is named Luna.", "pet"),
        ("My younger sister Maya called", "sibling"),
        ("Leila\u2019s brother drives a Volvo.", "sibling"),
        ("My birthday is on 29 October", None),
        ("Swam 2 km before work, new record", None),
        ("Dana lives in Lisbon", None),
        ("The Mini Cooper failed its MOT again", None),
        ("Hay fever season for everyone at work", None),
        ("I met my sister for lunch", None),
        ("Colleague 3 is dating someone from the office", "work"),
        ("Mum's car broke down again", "parent"),
    ],
)
def test_opening_relation(text: str, relation: str | None) -> None:
    assert opening_relation(text) == relation


@pytest.mark.parametrize(
    ("text", "name", "possessor"),
    [
        ("Kwame lives in Accra.", "kwame", "kwame"),
        ("Kwame's favourite dish is jollof rice", "kwame", "kwame"),
        ("Kwame's sister's favourite food is sushi.", None, "kwame"),
        ("Diego\u2019s sport is volleyball.", "diego", "diego"),
        ("Mary Anne works at the bakery", "mary anne", "mary anne"),
        # a first-person statement opening with its verb is nobody's name
        ("Watched a travel vlog about Japan", None, None),
        ("Got promoted to senior accountant", None, None),
        ("Upgraded to a Pixel 7", None, None),
        # greetings, places, the user
        ("Hey Sofia! How are you?", None, None),
        ("Sofia, how is life in Gdansk?", None, None),
        ("Japan is lovely in spring", None, None),
        ("User lives in Leeds", None, None),
        ("I love it", None, None),
        ("Mum's car broke down again", None, None),
    ],
)
def test_opening_name(text: str, name: str | None, possessor: str | None) -> None:
    assert opening_name(text) == name
    assert opening_name(text, True) == possessor


def test_asked_relations_reads_words_and_cues() -> None:
    assert asked_relations("Who is the user's significant other?") == {"partner"}
    assert asked_relations("What are the names of Hannah's children?") == {"child"}
    assert asked_relations("Who is Liam married to?") == {"partner"}
    assert asked_relations("Does Priya have any pets?") == {"pet"}
    assert asked_relations("What make of motor does Daniel have?") == set()
    assert asked_relations("Where does Dana live?", ["work"]) == {"work"}


@pytest.mark.parametrize(
    ("question", "asked"),
    [
        # A parent's word said as what the person is asks whether they have children:
        # "Mum's birthday is next Tuesday" is someone else's fact for it.
        ("Is Jonas a mum or dad?", {"child"}),
        ("Is the user a mum or a dad?", {"child"}),
        ("Is the user a parent?", {"child"}),
        ("Was Tariq a father by then?", {"child"}),
        # The person's own parents, or a relation they have, ask as before.
        ("What does Jonas's mum do?", {"parent"}),
        ("Does Jonas have a dad?", {"parent"}),
        ("Does the user have a sister?", {"sibling"}),
        ("Is Mia a friend of the user?", {"friend"}),
    ],
)
def test_a_parent_word_said_as_a_role_asks_about_children(question: str, asked: set[str]) -> None:
    assert asked_relations(question) == asked


def _cand(text: str, actor: str | None = None) -> Candidate:
    row = MemoryRow(
        id=text,
        text=text,
        hash="h",
        user_id="u",
        agent_id=None,
        run_id=None,
        actor_id=actor,
        role=None,
        attributed_to=None,
        memory_type=None,
        metadata={},
        created_at="2026-01-01T00:00:00+00:00",
        updated_at="2026-01-01T00:00:00+00:00",
        observed_at=None,
        expires_at=None,
        deleted_at=None,
        version=1,
    )
    return Candidate(row=row, semantic=0.8, bm25=0.0)


STORE = [
    "Kwame lives in Accra.",
    "Kwame's sister's favourite food is sushi.",
    "Kwame works as a nurse.",
    "Ben's birthday is on 3 May.",
    "My birthday is on 14 March",
    "The Mini Cooper failed its MOT again",
]


def test_owner_is_the_name_that_opens_most_facts() -> None:
    cands = [_cand(t) for t in STORE]
    q = "What car does Kwame drive?"
    assert owner_names({"kwame", "car"}, cands, q) == {"kwame"}
    # Ben opens one fact against Kwame's three: he is someone the user knows.
    assert owner_names({"ben", "birthday"}, cands, "When is Ben's birthday?") == frozenset()
    # the question must name the owner, as a person, and ask about more than the name
    assert owner_names({"car"}, cands, "What car do I drive?") == frozenset()
    assert owner_names({"kwame"}, cands, "Kwame") == frozenset()
    assert owner_names({"kwame"}, cands, "When did I fly to Kwame?") == frozenset()


def test_no_owner_where_no_name_dominates_or_the_name_is_a_speaker() -> None:
    two = [_cand(t) for t in ("Bram studies Japanese.", "Sofia works at Larkspur.")] * 2
    assert owner_names({"bram"}, two, "What does Bram study?") == frozenset()
    spoken = [_cand(t, actor="Kwame") for t in STORE]
    assert owner_names({"kwame"}, spoken, "What car does Kwame drive?") == frozenset()


def test_a_name_said_mid_sentence_is_not_the_owner() -> None:
    # One does not say "dinner with Kwame" of oneself.
    cands = [_cand(t) for t in [*STORE, "Had dinner with Kwame and his sister"]]
    assert owner_names({"kwame"}, cands, "What car does Kwame drive?") == frozenset()
