"""The two sides of work: what a question asks for and what a statement says (nlp/facets.py)."""

from __future__ import annotations

import time

import pytest

from engramdb.nlp.facets import asked_work_facet, said_work_facets


@pytest.mark.parametrize(
    ("question", "facet"),
    [
        ("Where is Talia employed?", "employer"),
        ("Which company does Signe work for?", "employer"),
        ("Who is Henrik's employer now?", "employer"),
        ("Where did Aiko work before Vesta Robotics?", "employer"),
        ("where does the user work these days", "employer"),
        ("What does Chiara do for a living?", "occupation"),
        ("What did Colette use to work as?", "occupation"),
        ("What did Callum do before becoming a primary school teacher?", "occupation"),
        ("What's the user's profession?", "occupation"),
        # Neither side, or both: the lever keeps every work statement.
        ("What is Sam's job?", None),
        ("Where does Sam live?", None),
        ("Which company does Sam work for, and what does he do for a living?", None),
    ],
)
def test_the_side_of_work_a_question_asks(question: str, facet: str | None) -> None:
    assert asked_work_facet(question) == facet


@pytest.mark.parametrize(
    ("text", "facets"),
    [
        ("Henrik left Quillfeather Press for Kestrel Aviation.", {"employer"}),
        ("I'm starting at Foxglove Foods on Monday.", {"employer"}),
        ("The canteen at Larkspur Analytics has improved.", {"employer"}),
        ("Niall is employed by Tidewater Logistics.", {"employer"}),
        ("Signe works as a veterinarian.", {"occupation"}),
        ("Callum became a primary school teacher in August 2023.", {"occupation"}),
        ("Lena changed jobs from air traffic controller to sous chef.", {"occupation"}),
        ("I'm a nurse now, finally qualified.", {"occupation"}),
        ("Ana works as a nurse at St Mary's.", {"employer", "occupation"}),
        # A month or a weekday after "in"/"on"/"from" is not an employer.
        ("Started the new role in March, from Monday to Friday.", set()),
        ("Night shifts on the ward are brutal this month.", set()),
        ("That's a lot of meetings.", set()),
        # A person after "with" or "to" is not an employer.
        ("Had a long meeting with Sam about the rota.", set()),
        ("Handed the project over to Priya before my leave.", set()),
    ],
)
def test_the_sides_of_work_a_statement_says(text: str, facets: set[str]) -> None:
    assert set(said_work_facets(text)) == facets


@pytest.mark.parametrize(
    "text",
    [
        "where " * 40_000,
        "Where? " * 30_000 + "work",
        "from Aa " * 30_000,
        "Hi Bob, " * 30_000,
        "at the " + "small " * 40_000 + "company",
    ],
)
def test_long_input_is_read_in_linear_time(text: str) -> None:
    # A query or a memory can be a whole document. The first version's "where ...
    # work" pattern backtracked over every "where": 1.2 s for 30,000 characters,
    # about a minute for these; read in two linear searches, well under a second.
    started = time.perf_counter()
    asked_work_facet(text)
    said_work_facets(text)
    assert time.perf_counter() - started < 5.0


def test_a_strict_reading_names_an_employer_only_after_at_joined_left() -> None:
    # Fusion reads every candidate, about anything: a capitalised name alone is no employer.
    text = "Caroline attended an LGBTQ+ counseling workshop"
    assert said_work_facets(text) == {"employer"}
    assert said_work_facets(text, strict=True) == frozenset()
    assert said_work_facets("Lena started at Copperleaf Studios.", strict=True) == {"employer"}
    assert said_work_facets("Signe works as a veterinarian.", strict=True) == {"occupation"}


@pytest.mark.parametrize(
    ("text", "facets"),
    [
        (
            "I work as a data engineer at a small bicycle company in Lyon.",
            {"employer", "occupation"},
        ),
        ("Started at the hospital on Monday.", {"employer"}),
        ("I quit the firm last week.", {"employer"}),
        ("Joined the city council in May.", {"employer"}),
        # Places one visits are not read as an employer without a name.
        ("We met at a cafe.", set()),
        ("I left the office early.", set()),
    ],
)
def test_an_employer_said_with_a_common_noun(text: str, facets: set[str]) -> None:
    assert said_work_facets(text, strict=True) == facets
    assert said_work_facets(text) >= facets
