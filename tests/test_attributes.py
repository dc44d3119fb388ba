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
from engramdb.attributes import ATTRIBUTES, AttributeModel, relations_of
from engramdb.embedders.local import LocalEmbedder
from engramdb.nlp import index_terms, query_terms
from engramdb.nlp.terms import split_attribute_terms, with_attribute_terms
from engramdb.search import FusionConfig, query_embedding_text
from engramdb.stores.kernel.erasure import ErasurePlan, Reindex, reindexed_terms

ON = FusionConfig()
OFF = {"attribute_gate": 0.0, "other_subject_factor": 1.0, "owner_names": False}


@pytest.fixture(scope="module")
def model(embedder: LocalEmbedder) -> AttributeModel:
    return AttributeModel(embedder.embed_documents(AttributeModel.passages()))


def test_a_memory_leans_to_its_attribute_and_a_question_asks_for_it(
    model: AttributeModel, embedder: LocalEmbedder
) -> None:
    car = embedder.embed_documents(["The Mini Cooper failed its MOT, brakes again"])[0]
    assert "@vehicle" in model.leaning(car, ON.attribute_share)
    # as search embeds it: "the user" (or the store's own name) left out
    q = embedder.embed_query(query_embedding_text("What make of motor does the user have?", ON))
    assert "@vehicle" in model.asked(q, ON.attribute_gate, ON.attribute_share)
    # below the gate a question asks for no attribute
    assert model.asked(q, 0.99, ON.attribute_share) == []
    # a vector of another size (a foreign embedder) leans to nothing
    assert model.leaning(np.ones(7, dtype=np.float32), 0.3) == []


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
