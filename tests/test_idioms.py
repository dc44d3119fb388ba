"""Which attribute a question asks from its idiom (nlp/idioms.py), and what search does with it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engramdb import Memory
from engramdb.attributes import ATTRIBUTES, AttributeModel
from engramdb.embedders.local import LocalEmbedder
from engramdb.nlp.idioms import IDIOMS, idiom_attributes


@pytest.mark.parametrize(
    ("question", "attribute"),
    [
        # Phrasings written for this test, not the development sets' questions.
        ("How does Priya get about town?", "vehicle"),
        ("what is the user driving nowadays", "vehicle"),
        ("What does Omar have as his set of wheels?", "vehicle"),
        ("How does Jo unwind after a long week?", "hobby"),
        ("What does the user do for fun?", "hobby"),
        ("What's Lars up to in his spare time?", "hobby"),
        ("How does Mina stay in shape?", "fitness"),
        ("Does Tom still work out every morning?", "fitness"),
        ("How does the user earn a living?", "job"),
        ("What line of work is Ana in?", "job"),
        ("How does Ali make his money?", "job"),
        ("Who has Dev been on the payroll of since May?", "job"),
        ("What does Jun get up to outside of work?", "hobby"),
        ("What can Ravi not eat these days?", "diet"),
        ("Does Bea eat meat?", "diet"),
        ("Is Kofi seeing anyone?", "partner"),
        ("Who is the user's other half?", "partner"),
        ("Any furry friends at Leo's place?", "pet"),
        ("What's Ada's usual order at the cafe?", "drink"),
        ("Which town does Femi call home?", "home"),
        ("Where is the user based?", "home"),
        ("What is Hana enrolled in?", "education"),
    ],
)
def test_an_idiom_names_the_attribute_it_asks(question: str, attribute: str) -> None:
    assert attribute in idiom_attributes(question)


@pytest.mark.parametrize(
    "question",
    [
        # The topic's own words are the classifier's to read; an event is not an attribute.
        "What car does Sam drive?",
        "Which city did Maria visit in May?",
        "What did Jon eat at the wedding?",
        "Who did Caroline meet at the support group?",
        "What is Sam's job?",
        "Where did the user travel last summer?",
        "What romantic comedy did they watch?",
        # Look-alikes of an idiom: "forget about", "get around to" (find the time),
        # "work out the problem" (figure out), "which day works for" (suits),
        # "call home" (a phone call), "motor skills".
        "Did Caroline forget about the meeting?",
        "Did she ever get around to painting the fence?",
        "Did they work out the problem with the landlord?",
        "Which day works for Melanie?",
        "Did she call home last night?",
        "What motor skills did the kid learn?",
        # "make money" as a plan, "outside the office" as a place.
        "Will the bake sale make money?",
        "Who did Ana meet outside the office?",
    ],
)
def test_a_question_without_an_idiom_leaves_the_reading_to_the_vector(question: str) -> None:
    assert idiom_attributes(question) == frozenset()


def test_every_idiom_names_one_of_the_classifier_s_attributes() -> None:
    assert set(IDIOMS) <= set(ATTRIBUTES)
    shares = AttributeModel.shipped().idiom_shares(["vehicle", "hobby"])
    assert shares is not None
    terms = AttributeModel.shipped().terms_at(shares, 0.9)
    assert terms == sorted(terms, key=AttributeModel.shipped().terms.index)
    assert set(terms) == {"@vehicle", "@hobby"} and float(shares.sum()) == 2.0
    assert AttributeModel.shipped().idiom_shares(["no-such-attribute"]) is None


@pytest.mark.parametrize(
    "text",
    ["get " * 60_000, "what does " * 30_000 + "eat", "where is " * 30_000, "keep " * 60_000],
)
def test_long_input_is_read_in_linear_time(text: str) -> None:
    started = time.perf_counter()
    idiom_attributes(text)
    assert time.perf_counter() - started < 5.0


FACTS = [
    ("2024-01-10T10:00:00+00:00", "Amara drives a silver Ford Focus."),
    ("2024-02-01T10:00:00+00:00", "Amara relocated to Montreal."),
    ("2024-03-15T10:00:00+00:00", "Amara started rock collecting."),
    ("2024-05-20T10:00:00+00:00", "Amara sold the Focus and bought an electric scooter."),
    ("2024-06-02T10:00:00+00:00", "Amara's hobby is woodworking."),
]


@pytest.mark.parametrize(
    ("backend", "idioms"), [("sqlite", True), ("sqlite", False), ("postgres", True)]
)
def test_an_idiom_lets_search_answer_with_what_holds_now(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    embedder: LocalEmbedder,
    backend: str,
    idioms: bool,
) -> None:
    retrieval = {"attribute_idioms": idioms}
    if backend == "sqlite":
        m = Memory(tmp_path / "idioms.db", config={"retrieval": retrieval}, embedder=embedder)
    else:
        pg = request.getfixturevalue("pg_config")
        m = Memory(
            config={"vector_store": {"provider": "postgres", "config": pg}, "retrieval": retrieval},
            embedder=embedder,
        )
    for when, text in FACTS:
        m.add(text, user_id="amara", timestamp=when, infer=False)
    top = m.search("What does Amara get around in these days?", user_id="amara", explain=True)
    first = top["results"][0]
    if idioms:
        assert "scooter" in first["memory"]
        assert first["score_details"]["latest_of"] == ["@vehicle"]
    else:
        # The vector alone reads no vehicle in the question: the scooter is not first.
        assert "scooter" not in first["memory"]
    m.close()
