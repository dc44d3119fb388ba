"""Attribute terms (attributes.py) and the owner and other-subject levers, end to end.

Real parts: the local embedding model and real SQLite / PostgreSQL stores.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engramdb import Memory
from engramdb.attributes import ATTRIBUTES, Asked, AttributeModel, relations_of
from engramdb.core.records import TermStats
from engramdb.embedders.local import LocalEmbedder
from engramdb.nlp import index_terms, query_terms
from engramdb.nlp.terms import split_attribute_terms, with_attribute_terms
from engramdb.owner import scope_owner
from engramdb.search import FusionConfig, query_embedding_text
from engramdb.stores.kernel.erasure import ErasurePlan, Reindex, reindexed_terms

ON = FusionConfig()
OFF = {"attribute_gate": 0.0, "other_subject_factor": 1.0, "owner_names": False}


@pytest.fixture(scope="module")
def model() -> AttributeModel:
    return AttributeModel.shipped()


def test_a_memory_leans_to_its_attribute_and_a_question_asks_for_it(
    model: AttributeModel, embedder: LocalEmbedder
) -> None:
    car = embedder.embed_documents(["The Mini Cooper failed its MOT, brakes again"])[0]
    assert "@vehicle" in model.leaning(car, ON.attribute_share)
    assert model.top(car) == "@vehicle"
    # as search embeds it: "the user" (or the store's own name) left out
    q = embedder.embed_query(query_embedding_text("What make of motor does the user have?", ON))
    assert model.asked(q, ON.attribute_gate) == ["@vehicle"]
    # no attribute reaches a probability of 1
    assert model.asked(q, 1.0) == []
    # small talk is about no attribute
    chat = embedder.embed_documents(["Haha, fair enough. Talk soon!"])[0]
    assert model.leaning(chat, ON.attribute_share) == []
    # a vector of another size (a foreign embedder) leans to nothing
    assert model.leaning(np.ones(7, dtype=np.float32), 0.3) == []
    assert model.top(np.ones(7, dtype=np.float32)) is None
    shares = model.shares(car)
    assert shares.shape == (len(ATTRIBUTES),) and 0.0 < float(shares.sum()) <= 1.0 + 1e-6


def test_the_shipped_weights_are_checked() -> None:
    with pytest.raises(ValueError, match="one weight row"):
        AttributeModel(["home", "none"], np.zeros((1, 384)), np.zeros(2))
    with pytest.raises(ValueError, match="unknown attribute"):
        AttributeModel(["spaceship", "none"], np.zeros((2, 384)), np.zeros(2))
    shipped = AttributeModel.shipped()
    assert shipped is AttributeModel.shipped()  # read once per process


def test_another_embedder_indexes_no_attribute_terms(tmp_path: Path) -> None:
    from engramdb_bench._hash_embedder import HashEmbedder

    # the weights read multilingual-e5-small's space: any other embedder leaves the lever off,
    # whatever the config says
    m = Memory(
        tmp_path / "h.db", config={"retrieval": {"attribute_gate": 0.5}}, embedder=HashEmbedder()
    )
    m.add("The Mini Cooper failed its MOT", user_id="u", infer=False)
    hit = m.search("What make of motor does the user have?", user_id="u", explain=True)
    assert "attributes" not in hit["results"][0]["score_details"]
    # nor does the attribute part of fusion read that space (a hash's vector is no attribute)
    assert "attribute" not in hit["results"][0]["score_details"]["parts"]
    m.close()


def test_attribute_terms_are_never_spelt_by_a_text() -> None:
    assert "@vehicle" not in index_terms("I wrote @vehicle and #car on it")
    assert query_terms("@vehicle") == ["vehicle"]
    assert split_attribute_terms("mini cooper fail @vehicle mot") == (
        "mini cooper fail mot",
        "@vehicle",
    )
    assert with_attribute_terms("a b", ["@pet"]) == "a b @pet"
    assert with_attribute_terms("a b", "") == "a b"


def test_attributes_map_to_relations() -> None:
    assert relations_of(["@partner", "@vehicle"]) == {"partner"}
    assert relations_of(["@family"]) >= {"parent", "sibling"}
    assert len(ATTRIBUTES) == len(set(ATTRIBUTES))


def test_a_purge_keeps_the_attribute_terms_of_the_memories_it_reindexes() -> None:
    text = "The Mini Cooper failed its MOT"
    borrowed = "We went to the garage on Friday"
    terms = with_attribute_terms(f"{index_terms(text)} {index_terms(borrowed)}", "@vehicle")
    row = Reindex(rowid=1, text=text, terms=terms, context=(borrowed,), kept=())
    plan = ErasurePlan(
        memory_id=None,
        scope=None,
        memory_rowids=(),
        memory_ids=(),
        owners=(),
        messages=(),
        failures=(),
        entities=(),
        reindex=(row,),
    )
    # the erased message's words go, the attribute term stays
    assert reindexed_terms(plan)[1] == with_attribute_terms(index_terms(text), "@vehicle")


FACTS = [
    "Kwame lives in Accra.",
    "Kwame works as a nurse at the city hospital.",
    "Kwame's sister's favourite food is sushi.",
    "Ben's birthday is on 3 May.",
    "My birthday is on 14 March",
    "The Mini Cooper failed its MOT again, brakes this time",
    "Kwame's partner is called Ama.",
    "Nothing beats my mum's jollof rice",
    "Swam 2 km before work, new record",
]


def _memory(
    request: pytest.FixtureRequest, db_path: Path, embedder: Any, retrieval: dict[str, Any]
) -> Memory:
    if request.param == "sqlite":
        config: dict[str, Any] = {"retrieval": retrieval}
        return Memory(db_path, config=config, embedder=embedder)
    pg = request.getfixturevalue("pg_config")
    return Memory(
        config={"vector_store": {"provider": "postgres", "config": pg}, "retrieval": retrieval},
        embedder=embedder,
    )


@pytest.fixture(params=["sqlite", "postgres"])
def stores(
    request: pytest.FixtureRequest, tmp_path: Path, embedder: LocalEmbedder
) -> Iterator[tuple[Memory, Memory]]:
    """The same facts, one add each, in a store with the levers (defaults) and one without."""
    on = _memory(request, tmp_path / "on.db", embedder, {})
    off_path = tmp_path / "off.db"
    off = _memory(request, off_path, embedder, OFF) if request.param == "sqlite" else None
    for fact in FACTS:
        on.add(fact, user_id="kwame_user", infer=False)
        if off is not None:
            off.add(fact, user_id="kwame_user", infer=False)
    yield on, off if off is not None else on
    on.close()
    if off is not None:
        off.close()


def _first(m: Memory, q: str) -> str:
    got = m.search(q, user_id="kwame_user", limit=3)["results"]
    return str(got[0]["memory"])


def test_the_store_owner_name_no_longer_answers_for_every_summary(
    stores: tuple[Memory, Memory],
) -> None:
    on, off = stores
    q = "What make of motor does Kwame have?"
    assert _first(on, q).startswith("The Mini Cooper")
    if off is not on:
        # without the levers a summary that names Kwame wins on the name
        assert _first(off, q).startswith("Kwame")


def test_another_named_person_is_still_found_by_name(stores: tuple[Memory, Memory]) -> None:
    on, _ = stores
    assert _first(on, "When is Ben's birthday?").startswith("Ben's birthday")
    assert _first(on, "Who is Kwame's partner?").startswith("Kwame's partner")


def test_updates_restores_and_purges_keep_attribute_terms(stores: tuple[Memory, Memory]) -> None:
    on, _ = stores
    q = "What make of motor does Kwame have?"
    car = next(
        h for h in on.get_all(user_id="kwame_user")["results"] if h["memory"].startswith("The Mini")
    )
    on.update(car["id"], metadata={"checked": True})
    assert _first(on, q).startswith("The Mini Cooper")
    on.update(car["id"], text="The Mini Cooper failed its MOT again, brakes and tyres")
    assert _first(on, q).startswith("The Mini Cooper")
    on.restore(car["id"], version=1)
    assert _first(on, q).startswith("The Mini Cooper")
    on.delete(car["id"])
    on.restore(car["id"])
    assert _first(on, q).startswith("The Mini Cooper")
    swim = next(
        h for h in on.get_all(user_id="kwame_user")["results"] if h["memory"].startswith("Swam")
    )
    on.purge(swim["id"])
    assert _first(on, q).startswith("The Mini Cooper")


def test_a_place_that_opens_one_fact_is_not_taken_for_the_owner(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    m = Memory(tmp_path / "p.db", embedder=embedder)
    for fact in [
        "Patagonia is next on my list for a big hike",
        "My partner is called Sam",
        "I work as a nurse",
        "Booked flights to Lisbon for June",
    ]:
        m.add(fact, user_id="u", infer=False)
    for q in ["What do I know about Patagonia?", "What is Patagonia like?"]:
        top = m.search(q, user_id="u", limit=1, explain=True)["results"][0]
        assert top["memory"].startswith("Patagonia")
        assert "owner" not in top["score_details"]
    m.close()


def test_a_one_word_look_up_asks_for_no_attribute(tmp_path: Path, embedder: LocalEmbedder) -> None:
    # "Fandango4471" lies near the birthday passage (digits), but a code is a look-up.
    m = Memory(tmp_path / "c.db", embedder=embedder)
    m.add("User's PIN hint changed", user_id="u", infer=False)
    m.add("I like tea", user_id="u", infer=False)
    for hit in m.search("Fandango4471", user_id="u", explain=True)["results"]:
        assert "attributes" not in hit["score_details"]
        assert hit["score_details"]["bm25"] == 0
    m.close()


def test_an_import_indexes_attribute_terms(tmp_path: Path, embedder: LocalEmbedder) -> None:
    import io

    src = Memory(tmp_path / "src.db", embedder=embedder)
    for fact in FACTS:
        src.add(fact, user_id="kwame_user", infer=False)
    dump = io.StringIO()
    src.export_jsonl(dump)
    src.close()
    dst = Memory(tmp_path / "dst.db", embedder=embedder)
    dst.import_jsonl(io.StringIO(dump.getvalue()))
    hit = dst.search("What make of motor does the user have?", user_id="kwame_user", explain=True)
    top = hit["results"][0]
    assert top["memory"].startswith("The Mini Cooper")
    assert top["score_details"]["attributes"] == ["@vehicle"] and top["score_details"]["bm25"] > 0
    dst.close()


TURNS = [
    # (session date, speaker, text)
    (
        "2024-01-10T10:00:00+00:00",
        "Sofia",
        "I work as an analyst at Larkspur Analytics.",
    ),
    ("2024-01-10T10:00:00+00:00", "Bram", "Haha, fair enough."),
    ("2024-01-10T10:00:00+00:00", "Bram", "I drive a battered Kia Niro these days."),
    ("2024-03-02T10:00:00+00:00", "Sofia", "Hey Bram! How was your week?"),
    (
        "2024-06-20T10:00:00+00:00",
        "Sofia",
        "Started my new job at Greystone Insurance today!",
    ),
    ("2024-06-20T10:00:00+00:00", "Bram", "Love that for you."),
    ("2024-09-01T10:00:00+00:00", "Bram", "Started a new job as a paramedic last week."),
]


def _store_sessions(m: Memory) -> None:
    """:data:`TURNS`, one add per session, stored verbatim under user "pair"."""
    for when in sorted({t[0] for t in TURNS}):
        m.add(
            [{"role": "user", "name": who, "content": text} for d, who, text in TURNS if d == when],
            user_id="pair",
            timestamp=when,
            infer=False,
        )


@pytest.fixture(params=["sqlite", "postgres"])
def chat(
    request: pytest.FixtureRequest, tmp_path: Path, embedder: LocalEmbedder
) -> Iterator[Memory]:
    """Two speakers' turns, one add per session, stored verbatim (no LLM, no links).

    The speaker lever is off: it alone already ranks Sofia's newest job first
    (:func:`test_the_default_answers_the_latest_job`), and these tests are of the
    currency lever, which moves the latest statement up when the ranking did not.
    """
    m = _memory(request, tmp_path / "chat.db", embedder, {"speaker_names": False})
    _store_sessions(m)
    yield m
    m.close()


def test_the_latest_statement_of_the_asked_attribute_holds_now(chat: Memory) -> None:
    now = chat.search("Where is Sofia employed?", user_id="pair", explain=True)["results"]
    assert "Greystone" in now[0]["memory"]
    assert now[0]["score_details"]["latest_of"] == ["@job"]
    # the same top answer whatever top_k is
    for k in (1, 5, 50):
        got = chat.search("Where is Sofia employed?", user_id="pair", top_k=k)["results"]
        assert got[0]["id"] == now[0]["id"]
    # at a date: what had been said by then
    then = chat.search("Where did Sofia work?", user_id="pair", as_of="2024-04-01")["results"]
    assert "Larkspur" in then[0]["memory"]
    # Bram's newer job is Bram's, not Sofia's
    assert "paramedic" not in now[0]["memory"]
    bram = chat.search("Where does Bram work?", user_id="pair")["results"]
    assert "paramedic" in bram[0]["memory"]
    # before: the latest statement from before the latest one's moment
    before = chat.search("Where did Sofia work before?", user_id="pair", explain=True)["results"]
    assert "Larkspur" in before[0]["memory"]
    # a question about many things is not one value
    many = chat.search("How many jobs has Sofia had?", user_id="pair", explain=True)["results"]
    assert all("latest_of" not in h["score_details"] for h in many)


def test_the_default_answers_the_latest_job(tmp_path: Path, embedder: LocalEmbedder) -> None:
    with Memory(tmp_path / "default.db", embedder=embedder) as m:
        _store_sessions(m)
        for question, answer in (
            ("Where is Sofia employed?", "Greystone"),
            ("Where does Bram work?", "paramedic"),
        ):
            for k in (1, 5, 50):
                got = m.search(question, user_id="pair", top_k=k)["results"]
                assert answer in got[0]["memory"], (question, k, got[0]["memory"])
        then = m.search("Where did Sofia work?", user_id="pair", as_of="2024-04-01")["results"]
        assert "Larkspur" in then[0]["memory"]


def test_attribute_currency_can_be_turned_off(tmp_path: Path, embedder: LocalEmbedder) -> None:
    m = Memory(
        tmp_path / "off.db", config={"retrieval": {"attribute_currency": False}}, embedder=embedder
    )
    for when, who, text in TURNS:
        m.add(
            [{"role": "user", "name": who, "content": text}],
            user_id="pair",
            timestamp=when,
            infer=False,
        )
    for hit in m.search("Where is Sofia employed?", user_id="pair", explain=True)["results"]:
        assert "latest_of" not in hit["score_details"]
    m.close()


def test_the_shipped_weights_match_their_training_sentences() -> None:
    import importlib.util
    import json
    from importlib import resources

    from engramdb.attributes import CURRENT, FITTED_FOR, MODEL_RESOURCE, VERSION

    path = Path(__file__).resolve().parents[1] / "scripts" / "attribute_examples.py"
    spec = importlib.util.spec_from_file_location("attribute_examples", path)
    assert spec is not None and spec.loader is not None
    examples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(examples)
    shipped = json.loads(resources.files("engramdb").joinpath(MODEL_RESOURCE).read_text())
    assert shipped["version"] == VERSION
    assert shipped["embedders"] == list(FITTED_FOR)
    # one class per attribute (in the training sentences' order) and "none" last
    assert shipped["classes"] == list(examples.CLASSES)
    assert set(shipped["classes"]) == {*ATTRIBUTES, "none"}
    assert {c for c, _, _ in examples.examples()} == set(shipped["classes"])
    assert {t.removeprefix("@") for t in CURRENT} <= set(ATTRIBUTES)


def test_agreement_reads_each_memory_alone_and_weighs_an_attribute_by_its_holders(
    embedder: LocalEmbedder,
) -> None:
    model = AttributeModel.shipped()
    question = np.asarray(embedder.embed_query("What car does the user drive?"), np.float32)
    asked = Asked(model, model.shares(question))
    assert "@vehicle" in asked.stat_terms()
    texts = [
        "Need new tyres for my Mini Cooper before winter",
        "Adopted a rabbit from the shelter, we call her Clover",
        "Spent all Saturday at the climbing wall",
    ]
    vecs = [np.asarray(v, np.float32) for v in embedder.embed_documents(texts)]
    stats = TermStats(live=20, df={"@vehicle": 1})
    alone = [asked.agreement([v], stats)[0] for v in vecs]
    together = asked.agreement([*vecs, None], stats)
    # no within-pool normalisation: a memory's part is the same whatever else is there
    assert together[:3] == pytest.approx(alone) and together[3] == 0.0
    assert alone[0] > 0.5 > max(alone[1:])
    # an attribute four memories of the scope hold weighs a quarter as much
    common = asked.agreement([vecs[0]], TermStats(live=20, df={"@vehicle": 4}))[0]
    assert common == pytest.approx(alone[0] / 4, rel=0.15)


def test_an_owner_named_by_one_fact_is_the_store_s_person_a_place_is_not(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    m = Memory(tmp_path / "o.db", embedder=embedder)
    for fact in [
        "Omar is employed by the city council.",
        "Had Metallica on repeat all week",
        "Counting down the days until our Japan trip in October",
        "Spotify is sending me to a conference in Lisbon",
    ]:
        m.add(fact, user_id="u", infer=False)
    hit = m.search("Which artists or bands is Omar keen on?", user_id="u", explain=True)
    top = hit["results"][0]
    assert top["memory"].startswith("Had Metallica")
    assert top["score_details"]["owner"] == ["omar"]
    m.close()


_DANA = [
    "I live in Lisbon with my partner Sam.",
    "I work as a nurse at the children's hospital.",
    "My dog is a greyhound called Pepper.",
]


@pytest.fixture(params=["sqlite", "postgres"])
def first_person(
    request: pytest.FixtureRequest, tmp_path: Path, embedder: LocalEmbedder
) -> Iterator[Memory]:
    """Dana's facts in the first person, under user_id "dana" and under "u7"."""
    m = _memory(request, tmp_path / "d.db", embedder, {})
    for user in ("dana", "u7"):
        m.add([{"role": "user", "content": t} for t in _DANA], user_id=user, infer=False)
    yield m
    m.close()


def test_the_user_id_s_name_asks_what_the_user_asks(first_person: Memory) -> None:
    # No fact names Dana, so nothing read can say she is the store's person; the
    # user_id does. Her name then says who, as "the user" does: the same vector,
    # the same scores (the right answer: 0.13, against 0.03 with the name in the vector).
    m = first_person
    for named, plain in (
        ("Where does Dana live?", "Where does the user live?"),
        ("What is Dana's job?", "What is the user's job?"),
    ):
        got = m.search(named, user_id="dana", explain=True)["results"]
        want = m.search(plain, user_id="dana")["results"]
        assert [(r["id"], r["score"]) for r in got] == [(r["id"], r["score"]) for r in want]
        assert got[0]["score_details"]["owner"] == ["dana"]
    top = m.search("Where does Dana live?", user_id="dana")["results"][0]
    assert top["memory"].startswith("I live in Lisbon")
    # Under another user id the name is only a name: nothing makes it the owner.
    other = m.search("Where does Dana live?", user_id="u7", explain=True)["results"][0]
    assert "owner" not in other["score_details"]
    assert other["score"] < top["score"] / 2, (other["score"], top["score"])


def test_scope_owner_takes_a_person_the_user_id_names() -> None:
    dana = frozenset({"dana"})
    assert scope_owner("Where does Dana live?", ["dana"], dana) == {"dana"}
    assert scope_owner("Where does Dana Reyes live?", ["dana reyes"], dana) == frozenset()
    both = frozenset({"dana", "reyes"})
    assert scope_owner("Where does Dana Reyes live?", ["dana reyes"], both) == {"dana reyes"}
    # A place, a bare name, or a name the user id does not hold is not the owner.
    paris = frozenset({"paris"})
    assert scope_owner("What is on in Paris this week?", ["paris"], paris) == frozenset()
    assert scope_owner("Dana", ["dana"], dana) == frozenset()
    assert scope_owner("Where does Sam live?", ["sam"], dana) == frozenset()
    # A name of the user id that the question does not write as a name, or a time.
    assert scope_owner("Dana's job?", ["dana"], dana) == {"dana"}
    assert scope_owner("where does dana live", ["dana"], dana) == frozenset()
    assert scope_owner("Will I need a visa?", ["will"], frozenset({"will"})) == frozenset()
    assert scope_owner("Did I mark the calendar?", ["mark"], frozenset({"mark"})) == frozenset()
    assert scope_owner("Did Mark call?", ["mark"], frozenset({"mark"})) == {"mark"}
    june = frozenset({"june"})
    assert scope_owner("What are my plans for June?", ["june"], june) == frozenset()
