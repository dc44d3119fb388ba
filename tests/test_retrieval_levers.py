"""The second-stage retrieval levers of expand.py: time in the query, session neighbours,
the entity second hop and session diversity.

Real stores (a SQLite file, and PostgreSQL where the test takes a backend), the
real local embedder; no LLM but for query rewriting (a scripted one, and the real local
model where it is set up). docs/retrieval.md ("Retrieval levers") has the
held-out figures behind the defaults.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from engramdb.core.filters import parse_filters
from engramdb.core.records import MemoryRow
from engramdb.embedders import LocalEmbedder
from engramdb.errors import LLMError, ReplyFormatError
from engramdb.expand import (
    asked_last,
    diversify,
    is_message,
    lend_through_entities,
    lend_to_neighbours,
    same_actor,
    weigh_by_time,
    weigh_when,
)
from engramdb.flows.read import merge_deeper
from engramdb.llms import ScriptedLLM
from engramdb.memory import Memory
from engramdb.nlp.querytime import asks_when, mentions_time, query_periods
from engramdb.rewrite import build_rewrite_prompt, looks_multipart, merge_hits, parse_rewrite
from engramdb.search import (
    DENSE_ONLY,
    HYBRID_RRF,
    KEYWORD_ONLY,
    FusionConfig,
    Hit,
    calibrate,
    stale_below,
)
from engramdb.stores.base import Scope
from engramdb_bench.locomo_folds import parse_grid

OFF: dict[str, Any] = {"neighbour_hits": 0}


def _open(
    request: pytest.FixtureRequest,
    backend: str,
    db_path: Path,
    embedder: LocalEmbedder,
    retrieval: dict[str, Any] | None = None,
) -> Memory:
    config: dict[str, Any] = {"retrieval": retrieval} if retrieval is not None else {}
    if backend == "postgres":
        pg = request.getfixturevalue("pg_config")
        config["vector_store"] = {"provider": "postgres", "config": pg}
        return Memory(config=config, embedder=embedder)
    return Memory(db_path, config=config or None, embedder=embedder)


def _say(m: Memory, text: str, name: str, run_id: str = "s1", user_id: str = "u") -> str:
    out = m.add(
        [{"role": "user", "content": text, "name": name}],
        user_id=user_id,
        run_id=run_id,
        infer=False,
    )
    return str(out["results"][0]["id"])


# A conversation where the answer to "which instrument" is the speaker's next message,
# which shares no word with the question.
_TALK = [
    ("Ann", "I finally started taking music lessons, the instrument I always wanted."),
    ("Bob", "That is wonderful news, I am happy for you."),
    ("Ann", "It is the cello; my teacher says I have a good ear."),
    ("Bob", "My brother repairs old bicycles in his garage."),
    ("Ann", "The weather was rainy all week here."),
    ("Bob", "We watched a documentary about volcanoes yesterday."),
]
_QUERY = "Which instrument did Ann start music lessons for?"


def _add_chat(m: Memory, turns: list[tuple[str, str]]) -> None:
    """Store ``(speaker, text)`` turns as one conversation (one ``add``, session s1)."""
    m.add(
        [{"role": "user", "content": text, "name": who} for who, text in turns],
        user_id="u",
        run_id="s1",
        infer=False,
    )


def _fill(m: Memory) -> list[str]:
    ids = [_say(m, text, name) for name, text in _TALK]
    # Another session and another user: never neighbours of session s1.
    _say(m, "Ann plays the cello in another session.", "Ann", run_id="s2")
    _say(m, "Somebody else's cello story.", "Ann", user_id="other")
    return ids


# -- through Memory.search, on both stores -------------------------------------------------


# The other speaker's words about lessons and instruments: without the lever they
# outrank the answer (which shares no word with the question), with it they do not.
_DISTRACTORS = [
    "I started music lessons once, but the instrument bored me.",
    "My cousin wanted an instrument for her birthday, she loves music.",
    "Which lessons did you take at school?",
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_next_message_of_the_speaker_joins_the_results(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    # Without the speaker lever (speakers.py): the lending is what is measured.
    retrieval = {
        "neighbour_hits": 1,
        "neighbour_share": 0.8,
        "neighbour_actor": "same",
        "speaker_names": False,
    }
    with _open(request, backend, db_path, embedder, retrieval) as m:
        ids = _fill(m)
        for text in _DISTRACTORS:
            _say(m, text, "Bob")
        found = m.search(_QUERY, user_id="u", run_id="s1", top_k=3, explain=True)["results"]
        top, answer = ids[0], ids[2]
        assert found[0]["id"] == top
        # Through the ranking: second, ahead of the distractors.
        assert found[1]["id"] == answer, [r["memory"] for r in found]
        details = found[1]["score_details"]
        assert details["neighbour_of"] == top
        assert details["offset"] == 1
        assert details["fusion"] == pytest.approx(0.8 * found[0]["score_details"]["fusion"])
    # The same store with the lever off: the distractors push the answer out of the top 3.
    # (The attribute terms, which find the cello turn by themselves, are off too: this
    # measures the lending alone.)
    with _open(request, backend, db_path, embedder, {**OFF, "attribute_gate": 0.0}) as m:
        off = m.search(_QUERY, user_id="u", run_id="s1", top_k=3)["results"]
        assert off[0]["id"] == top
        assert answer not in [r["id"] for r in off], [r["memory"] for r in off]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_store_neighbours_stay_in_the_session_and_the_filter(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    with _open(request, backend, db_path, embedder) as m:
        ids = _fill(m)
        near = m.store.neighbours(Scope(user_id="u"), None, [ids[2], "no-such-id"], 2)
        assert set(near) == {ids[2]}
        assert [(o, r.id) for o, r in near[ids[2]]] == [
            (-1, ids[1]),
            (1, ids[3]),
            (-2, ids[0]),
            (2, ids[4]),
        ]
        # The first of a session has nothing before it; the other session and
        # user never appear.
        first = m.store.neighbours(Scope(user_id="u"), None, [ids[0]], 3)[ids[0]]
        assert [(o, r.id) for o, r in first] == [(1, ids[1]), (2, ids[2]), (3, ids[3])]
        # A filter and a deletion are respected: the neighbours are the nearest that match.
        only_ann = parse_filters({"actor_id": "Ann"})
        filtered = m.store.neighbours(Scope(user_id="u"), only_ann, [ids[2]], 1)[ids[2]]
        assert [(o, r.id) for o, r in filtered] == [(-1, ids[0]), (1, ids[4])]
        m.delete(ids[1])
        after = m.store.neighbours(Scope(user_id="u"), None, [ids[2]], 1)[ids[2]]
        assert [(o, r.id) for o, r in after] == [(-1, ids[0]), (1, ids[3])]
        assert m.store.neighbours(Scope(user_id="u"), None, [ids[2]], 0) == {}


def test_off_costs_no_store_read(
    request: pytest.FixtureRequest,
    db_path: Path,
    embedder: LocalEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _open(request, "sqlite", db_path, embedder, OFF) as m:
        _fill(m)

        def boom(*_a: object, **_k: object) -> Any:
            raise AssertionError("neighbours read while the lever is off")

        monkeypatch.setattr(type(m.store), "neighbours", boom)
        found = m.search(_QUERY, user_id="u", top_k=3, explain=True)["results"]
        assert found and not any("neighbour_of" in r["score_details"] for r in found)


def test_default_is_on_and_presets_are_off() -> None:
    cfg = FusionConfig()
    assert cfg.neighbour_hits == 2 and cfg.neighbour_actor == "same"
    assert cfg.session_decay == 1.0
    for preset in (HYBRID_RRF, DENSE_ONLY, KEYWORD_ONLY):
        assert preset.neighbour_hits == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"neighbour_hits": -1},
        {"neighbour_hits": 51},
        {"neighbour_span": 0},
        {"neighbour_share": 0},
        {"neighbour_share": 1.5},
        {"neighbour_decay": 0},
        {"neighbour_actor": "other"},
        {"session_decay": 0},
        {"session_decay": 1.1},
    ],
)
def test_bounds_are_validated(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        FusionConfig(**bad)


def test_the_folds_grid_toggles_the_levers() -> None:
    cands = parse_grid({"neighbour_hits": [0, 2], "session_decay": [1.0, 0.8]})
    names = [c.name for c in cands]
    assert names[0] == "defaults"
    assert "neighbour_hits=0" in names
    assert any(c.fusion.session_decay == 0.8 for c in cands)


# -- the pure parts ------------------------------------------------------------------------


def _row(i: str, actor: str | None = "A", run: str | None = "s1") -> MemoryRow:
    return MemoryRow(
        id=i,
        text=i,
        hash=i,
        user_id="u",
        agent_id=None,
        run_id=run,
        actor_id=actor,
        role="user",
        attributed_to=None,
        memory_type=None,
        metadata={},
        created_at="2024-01-01T00:00:00+00:00",
        updated_at="2024-01-01T00:00:00+00:00",
        observed_at=None,
        expires_at=None,
        deleted_at=None,
        version=1,
    )


def _hit(i: str, score: float, **kw: Any) -> Hit:
    return Hit(_row(i, **kw), score, {"semantic": score, "fusion": score, "relative": score})


def test_lending_lifts_keeps_the_better_and_adds() -> None:
    cfg = FusionConfig(neighbour_hits=1, neighbour_share=0.5, neighbour_span=2, neighbour_decay=0.5)
    hits = [_hit("a", 0.8), _hit("b", 0.2), _hit("c", 0.6)]
    near: dict[str, list[tuple[int, MemoryRow]]] = {
        "a": [(-1, _row("b")), (1, _row("c")), (2, _row("new"))],
        "b": [(1, _row("never"))],  # not among the first neighbour_hits
    }
    out = {h.row.id: h for h in lend_to_neighbours(hits, near, cfg)}
    assert out["b"].score == pytest.approx(0.4) and out["b"].explain["neighbour_of"] == "a"
    assert out["c"].score == 0.6 and "neighbour_of" not in out["c"].explain
    assert out["new"].score == pytest.approx(0.8 * 0.5 * 0.5)
    assert out["new"].explain["relative"] == pytest.approx(0.2)
    assert "never" not in out
    ordered = lend_to_neighbours(hits, near, cfg)
    assert [h.score for h in ordered] == sorted((h.score for h in ordered), reverse=True)


def test_a_neighbour_that_joins_reads_its_lender_s_calibration_curve() -> None:
    # A question that names a speaker reads the speaker curve (search.py); a turn that
    # joins only as a neighbour was never fused, so it takes the flag from its lender.
    cfg = FusionConfig(neighbour_hits=1, neighbour_share=0.5, neighbour_span=1)
    for named in (True, False):
        anchor = _hit("anchor", 0.8)
        anchor.explain["speaker_named"] = named
        out = {
            h.row.id: h for h in lend_to_neighbours([anchor], {"anchor": [(1, _row("new"))]}, cfg)
        }
        assert out["new"].explain["speaker_named"] is named
        (scored,) = [h for h in calibrate(list(out.values()), cfg) if h.row.id == "new"]
        cal = cfg.calibration
        assert cal is not None and scored.score == cal.apply(0.4, named)
    assert cal.apply(0.8, True) != cal.apply(0.8, False)


def test_neighbours_lent_the_same_score_keep_the_order_they_were_said_in() -> None:
    # The turns before and after a hit get the same lent score; their ids are random
    # (uuid4), so ordering the tie by id gave every store its own order.
    cfg = FusionConfig(neighbour_hits=1, neighbour_share=0.5, neighbour_span=1)
    for before, after in (("zz-before", "aa-after"), ("aa-before", "zz-after")):
        hits = [_hit("anchor", 0.8)]
        near: dict[str, list[tuple[int, MemoryRow]]] = {
            "anchor": [(1, _row(after)), (-1, _row(before))]
        }
        order = [h.row.id for h in lend_to_neighbours(hits, near, cfg)]
        assert order == ["anchor", before, after]


def test_only_messages_lend_and_borrow() -> None:
    """Extracted memories (they carry ``attributed_to``) neither lend to their
    neighbours nor borrow from a message beside them: they are self-contained."""
    cfg = FusionConfig(neighbour_hits=2, neighbour_share=0.5)
    fact = dataclasses.replace(_row("fact"), attributed_to="user")
    message = _row("msg")
    hits = [Hit(fact, 0.9, {"fusion": 0.9}), Hit(message, 0.8, {"fusion": 0.8})]
    near: dict[str, list[tuple[int, MemoryRow]]] = {
        "fact": [(1, _row("after-fact"))],
        "msg": [
            (1, dataclasses.replace(_row("fact-after-msg"), attributed_to="user")),
            (-1, _row("msg-before")),
        ],
    }
    out = {h.row.id: h for h in lend_to_neighbours(hits, near, cfg)}
    assert "after-fact" not in out  # a fact lends nothing
    assert "fact-after-msg" not in out  # nor borrows from a message
    assert out["msg-before"].explain["neighbour_of"] == "msg"
    assert not is_message(fact) and is_message(message)


def test_same_actor_renumbers_per_side() -> None:
    anchor = _row("x", actor="A")
    near = [
        (-1, _row("b1", actor="B")),
        (1, _row("b2", actor="B")),
        (-2, _row("a1", actor="A")),
        (2, _row("a2", actor="A")),
        (-3, _row("b3", actor="B")),
        (-4, _row("a3", actor="A")),
    ]
    assert [(o, r.id) for o, r in same_actor(anchor, near, 1)] == [(-1, "a1"), (1, "a2")]
    assert [(o, r.id) for o, r in same_actor(anchor, near, 2)] == [
        (-1, "a1"),
        (1, "a2"),
        (-2, "a3"),
    ]


def test_diversify_discounts_a_crowded_session() -> None:
    hits = [
        _hit("a1", 0.9, run="s1"),
        _hit("a2", 0.85, run="s1"),
        _hit("a3", 0.84, run="s1"),
        _hit("b1", 0.7, run="s2"),
    ]
    assert [h.row.id for h in diversify(hits, FusionConfig(), 3)] == ["a1", "a2", "a3"]
    out = diversify(hits, FusionConfig(session_decay=0.8), 3)
    assert [h.row.id for h in out] == ["a1", "b1", "a2"]
    assert out[2].score == pytest.approx(0.85 * 0.8)
    assert out[2].explain["session_factor"] == pytest.approx(0.8)
    assert [h.score for h in out] == sorted((h.score for h in out), reverse=True)


# -- the entity second hop -----------------------------------------------------------------

# "Mruczek" links the top hit to the answer, which shares no word with the question and
# sits in another session (so no neighbour reaches it); the other memories share words.
_CAT = [
    "My cat sleeps all day on the sofa, his name is Mruczek.",
    "Our neighbour's dog barks all day at the postman.",
    "I spend all day at the office on Mondays.",
    "The cat food brand changed again, so annoying.",
    "At night Mruczek hunts moths on the balcony.",
]
_CAT_QUERY = "What does Kai's cat do all day?"
HOP: dict[str, Any] = {"neighbour_hits": 0, "entity_hop_hits": 1, "entity_hop_share": 0.8}


def _cats(m: Memory) -> list[str]:
    return [_say(m, text, "Kai", run_id=f"s{i}") for i, text in enumerate(_CAT)]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_the_entity_hop_lifts_a_memory_sharing_the_top_hits_entity(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    with _open(request, backend, db_path, embedder, HOP) as m:
        ids = _cats(m)
        found = m.search(_CAT_QUERY, user_id="u", top_k=3, explain=True)["results"]
        assert found[0]["id"] == ids[0]
        assert found[1]["id"] == ids[4], [r["memory"] for r in found]
        details = found[1]["score_details"]
        assert details["entity_hop_of"] == ids[0]
        assert details["hop_entities"] == ["mruczek"]
        assert details["fusion"] == pytest.approx(0.8 * found[0]["score_details"]["fusion"])
    with _open(request, backend, db_path, embedder, {**HOP, "entity_hop_hits": 0}) as m:
        off = m.search(_CAT_QUERY, user_id="u", top_k=3)["results"]
        assert off[0]["id"] == ids[0]
        assert ids[4] not in [r["id"] for r in off], [r["memory"] for r in off]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_store_entity_hop_respects_scope_filter_degree_and_deletion(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    with _open(request, backend, db_path, embedder) as m:
        ids = _cats(m)
        # Another user's Mruczek is another user's entity: never linked.
        _say(m, "Mruczek is also my cat's name.", "Zoe", user_id="other")
        scope = Scope(user_id="u")
        hop = m.store.entity_hop(scope, None, [ids[0], ids[1], "no-such-id"], 10)
        assert set(hop) == {ids[0]}  # nothing shares an entity with the dog
        assert [(r.id, shared) for r, shared in hop[ids[0]]] == [(ids[4], [("mruczek", 2)])]
        # The degree counts what the search sees; past max_degree the entity is not followed.
        third = _say(m, "Mruczek got a new collar.", "Kai", run_id="s9")
        hop = m.store.entity_hop(scope, None, [ids[0]], 3)
        assert [(r.id, shared) for r, shared in hop[ids[0]]] == [
            (ids[4], [("mruczek", 3)]),
            (third, [("mruczek", 3)]),
        ]
        assert m.store.entity_hop(scope, None, [ids[0]], 2) == {}
        # A filter narrows both the degree and the memories; a deletion removes one.
        only_s4 = parse_filters({"run_id": "s4"})
        hop = m.store.entity_hop(scope, only_s4, [ids[0]], 10)
        assert [(r.id, shared) for r, shared in hop[ids[0]]] == [(ids[4], [("mruczek", 1)])]
        m.delete(third)
        hop = m.store.entity_hop(scope, None, [ids[0]], 10)
        assert [(r.id, shared) for r, shared in hop[ids[0]]] == [(ids[4], [("mruczek", 2)])]
        assert m.store.entity_hop(scope, None, [], 10) == {}


def test_entity_hop_off_costs_no_store_read(
    request: pytest.FixtureRequest,
    db_path: Path,
    embedder: LocalEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _open(request, "sqlite", db_path, embedder) as m:  # the defaults: hop off
        _cats(m)

        def boom(*_a: object, **_k: object) -> Any:
            raise AssertionError("entity_hop read while the lever is off")

        monkeypatch.setattr(type(m.store), "entity_hop", boom)
        found = m.search(_CAT_QUERY, user_id="u", top_k=3, explain=True)["results"]
        assert found and not any("entity_hop_of" in r["score_details"] for r in found)


def test_lending_through_entities_keeps_the_better_and_adds() -> None:
    cfg = FusionConfig(entity_hop_hits=1, entity_hop_share=0.5)
    hits = [_hit("a", 0.8), _hit("b", 0.2), _hit("c", 0.6)]
    links: dict[str, list[tuple[MemoryRow, list[tuple[str, int]]]]] = {
        "a": [(_row("b"), [("x", 3)]), (_row("c"), [("x", 3)]), (_row("new"), [("y", 2)])],
        "b": [(_row("never"), [("z", 2)])],  # not an anchor
    }
    out = {h.row.id: h for h in lend_through_entities(hits, hits[:1], links, cfg)}
    assert out["b"].score == pytest.approx(0.4) and out["b"].explain["entity_hop_of"] == "a"
    assert out["b"].explain["own"] == pytest.approx(0.2)
    assert out["c"].score == 0.6 and "entity_hop_of" not in out["c"].explain
    assert out["new"].score == pytest.approx(0.4)
    assert out["new"].explain["relative"] == pytest.approx(0.4)
    assert out["new"].explain["hop_entities"] == ["y"]
    assert "never" not in out


# -- time in the query ---------------------------------------------------------------------

_MEALS = [
    ("2022-01-10T18:00:00Z", "I cooked a big pot of soup for my friends tonight."),
    ("2022-02-25T18:00:00Z", "Tonight I tried making pierogi from my grandmother's recipe."),
    ("2022-04-02T18:00:00Z", "I cooked dinner for Ola, she loved the curry."),
    ("2022-06-15T18:00:00Z", "Cooking on the grill is my favourite summer thing."),
]


def _meals(m: Memory) -> list[str]:
    ids = []
    for i, (stamp, text) in enumerate(_MEALS):
        out = m.add(
            [{"role": "user", "content": text, "name": "Kai"}],
            user_id="u",
            run_id=f"s{i}",
            infer=False,
            timestamp=stamp,
        )
        ids.append(str(out["results"][0]["id"]))
    return ids


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_date_in_the_query_ranks_what_was_said_then_first(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    dated = "What did Kai cook on 25 February, 2022?"
    with _open(request, backend, db_path, embedder, {"time_weight": 0.0}) as m:
        ids = _meals(m)
        off = m.search(dated, user_id="u", top_k=4)["results"]
        assert off[0]["id"] != ids[1]
    # The time lever's defaults (on, 0.3), apart from the speaker lever: without
    # "Kai" the question's vector puts the soup 0.03 above the pierogi, a tie
    # that the time factor of 0.7 no longer breaks for "last month".
    alone = {"speaker_names": False}
    with _open(request, backend, db_path, embedder, alone) as m:
        found = m.search(dated, user_id="u", top_k=4, explain=True)["results"]
        assert found[0]["id"] == ids[1], [r["memory"] for r in found]
        assert "time_factor" not in found[0]["score_details"]
        assert all(r["score_details"]["time_factor"] == pytest.approx(0.7) for r in found[1:])
        # A relative time is resolved against as_of: "last month" on 2022-03-10 is
        # February 2022.
        month = m.search("What did Kai cook last month?", user_id="u", top_k=4, as_of="2022-03-10")
        assert month["results"][0]["id"] == ids[1]
        # Against today nothing was said "last month": the order is the one without it.
        plain = m.search("What did Kai cook?", user_id="u", top_k=4)["results"]
        today = m.search("What did Kai cook last month?", user_id="u", top_k=4, explain=True)
        assert not any("time_factor" in r["score_details"] for r in today["results"])
        assert len(plain) == len(today["results"])


def test_time_lever_off_reads_no_time(
    request: pytest.FixtureRequest,
    db_path: Path,
    embedder: LocalEmbedder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import engramdb.expand as expand

    def boom(*_a: object, **_k: object) -> Any:
        raise AssertionError("the query's time was read while the lever is off")

    monkeypatch.setattr(expand, "query_periods", boom)
    with _open(request, "sqlite", db_path, embedder, {"time_weight": 0.0}) as m:
        _meals(m)
        found = m.search("What did Kai cook on 25 February, 2022?", user_id="u", explain=True)
        assert found["results"]
        assert not any("time_factor" in r["score_details"] for r in found["results"])


@pytest.mark.parametrize(
    ("query", "periods"),
    [
        ("What did Nate make on 25 February, 2022?", [("2022-02-25", "2022-02-26")]),
        ("Which book did Tim finish on 8th December, 2023?", [("2023-12-08", "2023-12-09")]),
        ("Where was the picture shared on December 1,2023 taken?", [("2023-12-01", "2023-12-02")]),
        ("How many games had Nate won by July 10, 2022?", [("2022-07-10", "2022-07-11")]),
        ("What event is Nate organizing in June 2022?", [("2022-06-01", "2022-07-01")]),
        ("When did John get an ankle injury in 2023?", [("2023-01-01", "2024-01-01")]),
        ("What happened on 2023-05-07?", [("2023-05-07", "2023-05-08")]),
        ("What did she photograph last summer?", [("2024-06-01", "2024-09-01")]),
        ("What did I do yesterday?", [("2024-11-04", "2024-11-05")]),
        ("What did I read last week?", [("2024-10-28", "2024-11-04")]),
        ("What kind of deal did John get in December?", []),
        ("May I ask what Sofia likes?", []),
        ("Born on 31 February, 2022?", []),
    ],
)
def test_query_periods(query: str, periods: list[tuple[str, str]]) -> None:
    today = dt.date(2024, 11, 5)
    got = [(a.isoformat(), b.isoformat()) for a, b in query_periods(query, today)]
    assert got == periods


def test_weigh_by_time_discounts_only_when_something_is_inside() -> None:
    cfg = FusionConfig(time_weight=0.5, time_slack_days=1)
    inside = _hit("in", 0.4)
    inside.row.observed_at = "2022-02-26T10:00:00+00:00"  # a day after: within the slack
    outside = _hit("out", 0.6)
    outside.row.observed_at = "2022-03-10T10:00:00+00:00"
    period = [(dt.date(2022, 2, 25), dt.date(2022, 2, 26))]
    out = weigh_by_time([outside, inside], period, cfg)
    assert [h.row.id for h in out] == ["in", "out"]
    assert out[1].score == pytest.approx(0.3) and out[1].explain["time_factor"] == 0.5
    assert out[1].explain["relative"] == pytest.approx(0.3)
    none_inside = [(dt.date(2021, 1, 1), dt.date(2021, 1, 2))]
    assert [h.score for h in weigh_by_time([outside, inside], none_inside, cfg)] == [0.6, 0.4]
    tight = FusionConfig(time_weight=0.5, time_slack_days=0)
    assert [h.row.id for h in weigh_by_time([outside, inside], period, tight)] == ["out", "in"]


def test_new_lever_defaults_and_bounds() -> None:
    cfg = FusionConfig()
    assert cfg.entity_hop_hits == 0
    assert cfg.time_weight == 0.3 and cfg.time_slack_days == 1.0
    for preset in (HYBRID_RRF, DENSE_ONLY, KEYWORD_ONLY):
        assert preset.time_weight == 0.0 and preset.entity_hop_hits == 0
    for bad in (
        {"entity_hop_hits": -1},
        {"entity_hop_hits": 51},
        {"entity_hop_share": 0},
        {"entity_hop_share": 1.1},
        {"entity_hop_max_degree": 1},
        {"time_weight": -0.1},
        {"time_weight": 1.1},
        {"time_slack_days": -1},
        {"question_factor": -0.1},
        {"question_factor": 1.5},
        {"superseded_factor": -0.01},
        {"superseded_factor": 1.01},
    ):
        with pytest.raises(ValidationError):
            FusionConfig(**bad)
    assert cfg.question_factor == 0.5 and cfg.superseded_factor == 0.02
    names = [c.name for c in parse_grid({"entity_hop_hits": [0, 2], "time_weight": [0, 0.3]})]
    assert "entity_hop_hits=2, time_weight=0" in names


# -- "when" questions ----------------------------------------------------------------------

_PETS = [
    "I adopted a cat from the shelter, she is lovely.",
    "We brought the new kitten home last Friday.",
    "My cat hates the vacuum cleaner.",
    "Cats are great pets for busy people.",
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_when_question_prefers_what_says_a_time(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    with _open(request, backend, db_path, embedder) as m:  # the defaults: off
        ids = [_say(m, text, "Kai", run_id=f"s{i}") for i, text in enumerate(_PETS)]
        off = m.search("When did Kai adopt the cat?", user_id="u", top_k=4)["results"]
        assert off[0]["id"] == ids[0] and off[-1]["id"] == ids[1]
    with _open(request, backend, db_path, embedder, {"when_weight": 0.5}) as m:
        found = m.search("When did Kai adopt the cat?", user_id="u", top_k=4, explain=True)
        assert found["results"][0]["id"] == ids[1], [r["memory"] for r in found["results"]]
        assert all(r["score_details"]["when_factor"] == 0.5 for r in found["results"][1:])
        # A question that does not ask when is ranked as without the lever.
        why = m.search("Why did Kai adopt the cat?", user_id="u", top_k=4, explain=True)
        assert why["results"][0]["id"] == ids[0]
        assert not any("when_factor" in r["score_details"] for r in why["results"])


def test_asks_when_and_mentions_time() -> None:
    assert asks_when("When did Caroline go to the support group?")
    assert asks_when("In what year did she move?") and asks_when("How long ago was the trip?")
    assert not asks_when("Where did she go?") and not asks_when("What did she say?")
    assert mentions_time("I went to a support group yesterday")
    assert mentions_time("We met on 7 May, it rained") and mentions_time("Back in 2019, I ran")
    assert not mentions_time("That sounds great!") and not mentions_time("May I join?")
    hits = [_hit("timeless", 0.8), _hit("dated", 0.5)]
    hits[1].row.text = "We met last week."
    out = weigh_when(hits, FusionConfig(when_weight=0.5))
    assert [h.row.id for h in out] == ["dated", "timeless"]
    assert out[1].score == pytest.approx(0.4) and out[1].explain["when_factor"] == 0.5
    assert [h.row.id for h in weigh_when(hits[:1], FusionConfig(when_weight=0.5))] == ["timeless"]
    assert FusionConfig().when_weight == 0.0 and HYBRID_RRF.when_weight == 0.0
    with pytest.raises(ValidationError):
        FusionConfig(when_weight=1.5)


# -- informativeness prior -----------------------------------------------------------------

# Small talk by the person asked about ranks above the turn that states the fact: the
# name is in every vector of theirs, the greeting before it lends its keyword terms.
_CHAT = [
    ("Bram", "Hey Sofia! How's your week been?"),
    ("Sofia", "Not bad at all! Tired, but good."),
    ("Bram", "Sofia, sorry I went quiet, work has been mad."),
    ("Sofia", "Yep, going strong."),
    ("Sofia", "Just got my badge for Greystone Insurance, first day tomorrow."),
    ("Bram", "My brother repairs old bicycles in his garage."),
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_content_free_turns_no_longer_outrank_the_fact(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    query = "Where is Sofia employed?"
    # the informativeness prior measured on its own (the attribute terms, which
    # lift any turn about work, off too)
    alone = {"chatter_factor": 1.0, "speaker_names": False, "attribute_gate": 0.0}
    with _open(request, backend, db_path, embedder, alone) as m:  # off
        _add_chat(m, _CHAT)
        off = m.search(query, user_id="u", top_k=6, explain=True)["results"]
        assert off[0]["memory"] == _CHAT[1][1]
        assert not any("informative" in r["score_details"] for r in off)
        fact_rank = [r["memory"] for r in off].index(_CHAT[4][1])
        assert fact_rank >= 3
    with _open(request, backend, db_path, embedder, {**alone, "informative_terms": 6}) as m:
        on = m.search(query, user_id="u", top_k=6, explain=True)["results"]
        assert on[0]["memory"] == _CHAT[4][1], [r["memory"] for r in on]
        by_text = {r["memory"]: r["score_details"] for r in on}
        # "bad tire good": 3 of 6; the fact has 6 terms (badge, greystone, ...): 1.
        assert by_text[_CHAT[1][1]]["informative"] == pytest.approx(3 / 6)
        assert by_text[_CHAT[4][1]]["informative"] == 1.0
        # The name of a speaker is not content: "sofia" does not count.
        assert by_text[_CHAT[2][1]]["informative"] == pytest.approx(5 / 6)
    with _open(request, backend, db_path, embedder) as m:  # the defaults: small talk halved
        found = [r["memory"] for r in m.search(query, user_id="u", top_k=6)["results"]]
        assert found.index(_CHAT[4][1]) < fact_rank and found.index(_CHAT[4][1]) <= 1, found
        assert found.index(_CHAT[1][1]) > found.index(_CHAT[4][1])


def test_informative_factors_count_own_terms_without_speaker_names() -> None:
    from engramdb.core.records import Candidate
    from engramdb.search import fuse, informative_factors

    def cand(text: str, actor: str | None, semantic: float) -> Candidate:
        row = dataclasses.replace(_row(text, actor=actor), text=text)
        return Candidate(row=row, semantic=semantic, bm25=0.0)

    cands = [
        cand("Yep, going strong.", "Sofia", 0.9),  # go strong: 2 terms
        cand("Hi Sofia, the new flat in Porto has a balcony.", "Bram", 0.85),
        cand("Lol.", None, 0.95),  # no term at all
    ]
    factors = informative_factors(cands, 4)
    assert factors[0] == pytest.approx(2 / 4)
    assert factors[1] == 1.0  # new flat porto balcony (+ hi?), "sofia" left out
    assert factors[2] == 0.0
    assert informative_factors(cands, 0) == [1.0, 1.0, 1.0]
    plain = fuse(cands, FusionConfig(chatter_factor=1.0))
    assert plain[0].row.text == "Lol."
    weighed = fuse(cands, FusionConfig(chatter_factor=1.0, informative_terms=4))
    assert weighed[0].row.text.startswith("Hi Sofia")
    by_text = {h.row.text: h for h in plain}
    for hit in weighed:
        assert hit.score == pytest.approx(by_text[hit.row.text].score * hit.explain["informative"])
    assert FusionConfig().informative_terms == 0
    for preset in (HYBRID_RRF, DENSE_ONLY, KEYWORD_ONLY):
        assert preset.informative_terms == 0
    for bad in ({"informative_terms": -1}, {"informative_terms": 65}):
        with pytest.raises(ValidationError):
            FusionConfig(**bad)
    names = [c.name for c in parse_grid({"informative_terms": [0, 6]})]
    assert "informative_terms=6" in names


# -- query rewriting (rewrite.py): an LLM splits the question into sub-queries -----------------

# Two facts a question about "hobbies of Ann and her brother" needs; neither shares a word
# with it, while the distractors do.
_HOBBY_FACTS = [
    ("Ann", "Every Sunday I paint watercolour landscapes by the river."),
    ("Ann", "Tom spends every weekend rowing on the lake."),
]
_HOBBY_DISTRACTORS = [
    ("Bob", "Hobbies are important, my sister says so too."),
    ("Bob", "Do you and your brother share any hobbies?"),
    ("Bob", "My brother has no hobbies at all."),
    ("Bob", "What hobbies did you have as a child, Ann?"),
]
_HOBBY_QUERY = "What hobbies do Ann and her brother have?"
_HOBBY_SUBQUERIES = {"queries": ["Ann paints watercolour landscapes", "Tom rowing on the lake"]}
REWRITE: dict[str, Any] = {"neighbour_hits": 0, "query_rewrite": {"max_queries": 3}}


def _hobbies(m: Memory) -> list[str]:
    facts = [_say(m, text, name) for name, text in _HOBBY_FACTS]
    for name, text in _HOBBY_DISTRACTORS:
        _say(m, text, name)
    return facts


def _open_llm(
    request: pytest.FixtureRequest,
    backend: str,
    db_path: Path,
    embedder: LocalEmbedder,
    retrieval: dict[str, Any] | None,
    llm: Any,
) -> Memory:
    config: dict[str, Any] = {"retrieval": retrieval} if retrieval is not None else {}
    if backend == "postgres":
        config["vector_store"] = {
            "provider": "postgres",
            "config": request.getfixturevalue("pg_config"),
        }
        return Memory(config=config, embedder=embedder, llm=llm)
    return Memory(db_path, config=config, embedder=embedder, llm=llm)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_sub_queries_find_what_the_question_alone_misses(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    llm = ScriptedLLM([_HOBBY_SUBQUERIES])
    with _open_llm(request, backend, db_path, embedder, REWRITE, llm) as m:
        facts = _hobbies(m)
        found = m.search(_HOBBY_QUERY, user_id="u", top_k=3, explain=True)["results"]
        got = [r["id"] for r in found]
        assert set(facts) <= set(got), [r["memory"] for r in found]
        by_id = {r["id"]: r for r in found}
        assert {by_id[f]["score_details"]["subquery"] for f in facts} == {1, 2}
        scores = [r["score"] for r in found]
        assert scores == sorted(scores, reverse=True)
        assert [c.schema_name for c in llm.calls] == ["query_rewrite"]
        assert _HOBBY_QUERY in str(llm.calls[0].messages[-1]["content"])
    # The question alone: the distractors share its words and fill the first three.
    with _open_llm(request, backend, db_path, embedder, {"neighbour_hits": 0}, None) as m:
        off = [r["id"] for r in m.search(_HOBBY_QUERY, user_id="u", top_k=3)["results"]]
        assert not set(facts) <= set(off), off


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_failing_or_garbage_rewrite_searches_as_without_it(
    request: pytest.FixtureRequest,
    backend: str,
    db_path: Path,
    embedder: LocalEmbedder,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with _open_llm(request, backend, db_path, embedder, {"neighbour_hits": 0}, None) as m:
        _hobbies(m)
        want = m.search(_HOBBY_QUERY, user_id="u", top_k=4, explain=True)["results"]
    replies = [
        LLMError("down"),
        "no json here",
        '{"queries": "one string"}',
        '{"queries": [1, 2]}',
        '["a bare list"]',
        {"queries": []},
        {"queries": [_HOBBY_QUERY.upper()]},
    ]
    llm = ScriptedLLM(replies)
    with _open_llm(request, backend, db_path, embedder, REWRITE, llm) as m:
        for _ in replies:
            got = m.search(_HOBBY_QUERY, user_id="u", top_k=4, explain=True)["results"]
            assert [(r["id"], r["score"]) for r in got] == [(r["id"], r["score"]) for r in want]
            assert not any("subquery" in r["score_details"] for r in got)
        assert llm.remaining == 0
    assert caplog.text.count("query rewriting failed") == 5


def test_query_rewrite_off_by_default_and_without_an_llm(
    db_path: Path, embedder: LocalEmbedder
) -> None:
    assert FusionConfig().query_rewrite is None
    llm = ScriptedLLM([])
    with Memory(db_path, embedder=embedder, llm=llm) as m:
        _hobbies(m)
        assert m.search(_HOBBY_QUERY, user_id="u", top_k=3)["results"]
        assert llm.calls == []
    # Configured but no LLM: searched as without it.
    with Memory(db_path, config={"retrieval": REWRITE}, embedder=embedder) as m:
        assert m.search(_HOBBY_QUERY, user_id="u", top_k=3)["results"]


def test_only_multipart_asks_for_several_part_questions(
    db_path: Path, embedder: LocalEmbedder
) -> None:
    gated = {"neighbour_hits": 0, "query_rewrite": {"only_multipart": True}}
    llm = ScriptedLLM([_HOBBY_SUBQUERIES])
    with Memory(db_path, config={"retrieval": gated}, embedder=embedder, llm=llm) as m:
        _hobbies(m)
        m.search("Where does Tom row?", user_id="u")
        assert llm.calls == []
        m.search(_HOBBY_QUERY, user_id="u")
        assert len(llm.calls) == 1
    assert looks_multipart("Which books has Melanie read?")
    assert looks_multipart("What do Ann and Tom like?")
    assert not looks_multipart("When did Caroline go to the LGBTQ support group?")


def test_parse_rewrite_and_bounds() -> None:
    q = "Where did Ann and Tom go?"
    assert parse_rewrite('{"queries": ["Ann trip", " Tom  trip ", "ann trip", ""]}', q, 3) == [
        "Ann trip",
        "Tom trip",
    ]
    assert parse_rewrite('```json\n{"queries": ["a", "b", "c"]}\n```', q, 2) == ["a", "b"]
    assert parse_rewrite('{"queries": ["where did ann and tom go"]}', q, 3) == []
    assert parse_rewrite('{"queries": ["x' + "y" * 50 + '"]}', q, 3, max_chars=10) == ["xyyyyyyyyy"]
    for bad in ("", "nope", "[]", '{"q": []}', '{"queries": [null]}', '{"queries": {}}'):
        with pytest.raises(ReplyFormatError):
            parse_rewrite(bad, q, 3)
    prompt = build_rewrite_prompt("  Where   did\nAnn go? ", 2)
    assert prompt[0]["role"] == "system" and "at most 2" in prompt[0]["content"]
    assert prompt[1]["content"] == "Question: Where did Ann go?"
    for bad_cfg in ({"max_queries": 0}, {"max_queries": 9}, {"weight": 0}, {"weight": 1.5}):
        with pytest.raises(ValidationError):
            FusionConfig(query_rewrite=bad_cfg)


def test_merge_hits_keeps_each_memorys_best() -> None:
    first = [_hit("a", 0.9), _hit("b", 0.5)]
    sub = [_hit("c", 0.8), _hit("b", 0.7)]
    merged = merge_hits([first, sub])
    assert [(h.row.id, h.score) for h in merged] == [("a", 0.9), ("c", 0.8), ("b", 0.7)]
    assert merged[1].explain["subquery"] == 1 and "subquery" not in merged[0].explain
    halved = merge_hits([first, sub], weight=0.5)
    assert [(h.row.id, h.score) for h in halved] == [("a", 0.9), ("b", 0.5), ("c", 0.4)]


@pytest.mark.real_llm
def test_the_real_local_llm_rewrites_a_two_part_question(
    real_llm: Any, db_path: Path, embedder: LocalEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    config = {"llm": real_llm.llm_config(), "retrieval": REWRITE}
    with Memory(db_path, config=config, embedder=embedder) as m:
        facts = _hobbies(m)
        found = m.search(_HOBBY_QUERY, user_id="u", top_k=6, explain=True)["results"]
    assert "query rewriting failed" not in caplog.text
    assert any("subquery" in r["score_details"] for r in found)
    assert set(facts) & {r["id"] for r in found}


# -- a turn that asks (question_factor) ------------------------------------------------------

_KITTENS = [
    ("Melanie", "We got two kittens last month, they are adorable."),
    ("Caroline", "Aww, I love kittens! What are their names?"),
    ("Melanie", "Luna and Oliver, and they already rule the house."),
    ("Caroline", "My sister has a dog called Biscuit."),
    ("Melanie", "The weather was rainy all week here."),
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_turn_that_asks_goes_below_the_turn_that_states(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    # Caroline's question echoes the user's ("What are their names?"), so its words and
    # vector are nearest; it states nothing. Melanie's turn about the kittens does.
    query = "What are the names of Melanie's kittens?"
    asking, stating = _KITTENS[1][1], _KITTENS[0][1]
    with _open(request, backend, db_path, embedder, {"question_factor": 1.0}) as m:  # off
        _add_chat(m, _KITTENS)
        off = m.search(query, user_id="u", top_k=5, explain=True)["results"]
        assert off[0]["memory"] == asking, [r["memory"] for r in off]
        assert not any("question" in r["score_details"] for r in off)
    with _open(request, backend, db_path, embedder) as m:  # the default: 0.5
        on = m.search(query, user_id="u", top_k=5, explain=True)["results"]
        texts = [r["memory"] for r in on]
        assert texts[0] == stating and texts.index(asking) > 0, texts
        by_text = {r["memory"]: r for r in on}
        assert by_text[asking]["score_details"]["question"] == 0.5
        assert by_text[asking]["score"] == pytest.approx(0.5 * off[0]["score"])
        assert "question" not in by_text[stating]["score_details"]
        # What the question lent its neighbour (lending comes first) is the same.
        lent = [r for r in off if r["score_details"].get("neighbour_of")]
        assert lent
        for r in lent:
            assert by_text[r["memory"]]["score"] == pytest.approx(r["score"])


def test_asked_last_scales_questions_after_the_rest() -> None:
    cfg = FusionConfig()
    q = Hit(dataclasses.replace(_row("q"), text="Which city, again?"), 0.6, {"semantic": 0.9})
    a = Hit(dataclasses.replace(_row("a"), text="It was Lisbon."), 0.4, {"semantic": 0.8})
    out = asked_last([q, a], cfg)
    assert [h.row.id for h in out] == ["a", "q"]
    assert out[1].score == pytest.approx(0.3) and out[1].explain["question"] == 0.5
    assert "question" not in out[0].explain and out[0].score == 0.4
    # "?" inside a turn that ends stating is no question; off leaves everything alone.
    s = Hit(dataclasses.replace(_row("s"), text="Lisbon? Yes, Lisbon."), 0.5, {"semantic": 0.7})
    assert asked_last([s], cfg)[0].score == 0.5
    zh = Hit(dataclasses.replace(_row("zh"), text="你搬到哪个城市了\uff1f"), 0.5, {"semantic": 0.7})
    assert asked_last([zh], cfg)[0].explain["question"] == 0.5
    # The query repeats the question: it is what the query looks up.
    same = Hit(q.row, 0.6, {"semantic": 0.95})
    assert asked_last([same, a], cfg)[0] == same
    assert asked_last([q, a], FusionConfig(question_factor=1.0)) == [q, a]
    for preset in (HYBRID_RRF, DENSE_ONLY, KEYWORD_ONLY):
        assert preset.question_factor == 1.0


# -- a replaced memory, for a question about now (superseded_factor) -------------------------


def _maya(m: Memory) -> tuple[str, str]:
    """Maya's home, then her move linked as an update of it, and one unrelated fact."""
    first = m.add("Maya lives in Lisbon.", user_id="u", infer=False)["results"][0]["id"]
    moved = m.add("Maya moved to Porto.", user_id="u", infer=False, links={first: "updates"})[
        "results"
    ][0]["id"]
    m.add("Maya's brother teaches maths in Braga.", user_id="u", infer=False)
    return str(first), str(moved)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_replaced_memory_no_longer_answers_a_question_about_now(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    now, before = "Where does Maya live these days?", "Where did Maya live before?"
    with _open(request, backend, db_path, embedder, {"superseded_factor": 1.0}) as m:  # off
        first, moved = _maya(m)
        off = m.search(now, user_id="u", top_k=5, explain=True)["results"]
        # Supersession alone: the move first, risen to the score of what it replaced.
        assert [r["id"] for r in off[:2]] == [moved, first]
        assert off[0]["score"] == off[1]["score"] > 0
        assert not any("superseded" in r["score_details"] for r in off)
        off_before = m.search(before, user_id="u", top_k=5)["results"]
        off_history = m.search("Which cities has Maya lived in?", user_id="u", top_k=5)
        off_history = off_history["results"]
    with _open(request, backend, db_path, embedder) as m:  # the default: 0.02
        on = m.search(now, user_id="u", top_k=5, explain=True)["results"]
        by_id = {r["id"]: r for r in on}
        assert on[0]["id"] == moved and on[0]["score"] == pytest.approx(off[0]["score"])
        stale = by_id[first]
        assert stale["score"] == pytest.approx(0.02 * off[1]["score"])
        assert stale["score_details"]["superseded"] == 0.02
        assert stale["superseded_by"] == [moved]
        # Sorted by the score it now has (the unrelated fact kept its own).
        assert [r["score"] for r in on] == sorted((r["score"] for r in on), reverse=True)
        # A question about the previous value: nothing moves, the old home comes first.
        assert m.search(before, user_id="u", top_k=5)["results"] == off_before
        assert off_before[0]["id"] == first
        # A question of what has piled up asks for the old home too: nothing moves.
        history = "Which cities has Maya lived in?"
        assert m.search(history, user_id="u", top_k=5)["results"] == off_history
        # As of the moment the old home was stated, nothing had replaced it yet.
        then = m.get(first)
        assert then is not None
        back = m.search(now, user_id="u", top_k=5, explain=True, as_of=then["created_at"])
        assert back["results"][0]["id"] == first
        assert "superseded" not in back["results"][0]["score_details"]
        # Without superseded memories, the same answer and nothing stale.
        kept = m.search(now, user_id="u", top_k=5, include_superseded=False)["results"]
        assert [r["id"] for r in kept] == [r["id"] for r in on if r["id"] != first]


# Facts about Maya that a question of where she lives ranks below her homes.
_MAYA_MORE = [
    "Maya works as a nurse at the children's hospital.",
    "Maya's favourite food is grilled sardines.",
    "Maya plays the cello in an amateur orchestra.",
    "Maya is allergic to cats.",
    "Maya runs along the river every Sunday morning.",
    "Maya's sister Ines lives in Coimbra.",
    "Maya learned to surf last summer.",
    "Maya drives an old blue Fiat.",
    "Maya is reading a novel about Antarctica.",
    "Maya's birthday is on the 3rd of March.",
    "Maya studied biology at university.",
    "Maya volunteers at the food bank on Thursdays.",
    "Maya grows tomatoes on her balcony.",
    "Maya prefers tea to coffee.",
    "Maya's best friend is called Joana.",
    "Maya went to Morocco for her holidays.",
    "Maya is saving up for a new bike.",
    "Maya speaks French and a little German.",
    "Maya's dog is a greyhound called Pepper.",
    "Maya hates early meetings.",
    "Maya's flat has a view of the harbour.",
    "Maya wants to visit Japan next year.",
    "Maya bakes bread at the weekend.",
    "Maya is training for a half marathon.",
    "Maya's parents live near the coast.",
    "Maya collects vinyl records.",
    "Maya takes the tram to work.",
    "Maya had her appendix out as a child.",
    "Maya is learning to play chess online.",
    "Maya's neighbours are very noisy.",
]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_results_come_sorted_by_score_whatever_top_k(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    # The first 20 hits are settled on 20; a top_k above 20 merges a deeper pass
    # in by score. Appended after them instead, the deeper pass's hits came after
    # the replaced home, which a factor of 0 leaves in the first 20 at score 0.
    now = "Where does Maya live these days?"
    with _open(request, backend, db_path, embedder, {"superseded_factor": 0.0}) as m:
        first, moved = _maya(m)
        m.add([{"role": "user", "content": t} for t in _MAYA_MORE], user_id="u", infer=False)
        head = m.search(now, user_id="u", top_k=20)["results"]
        deep = m.search(now, user_id="u", top_k=40, explain=True)["results"]
        assert first in [r["id"] for r in head]
        scores = [r["score"] for r in deep]
        assert len(deep) == 33 and scores == sorted(scores, reverse=True)
        assert deep[0]["id"] == head[0]["id"] == moved
        # The first pass keeps its own order; the deeper pass only adds.
        kept = [r["id"] for r in deep if r["id"] in {h["id"] for h in head}]
        assert kept == [r["id"] for r in head]
        assert deep[-1]["id"] == first and deep[-1]["score"] == 0.0
        assert deep[-1]["score_details"]["superseded"] == 0.0


def test_merge_deeper_keeps_the_first_pass_order() -> None:
    a, b, c, d = (_row(x) for x in "abcd")
    # A tie keeps the first pass's order (a superseder above what it replaced).
    head = [Hit(a, 0.5, {}), Hit(b, 0.5, {}), Hit(c, 0.1, {})]
    deeper = [Hit(b, 0.5, {}), Hit(d, 0.3, {}), Hit(a, 0.5, {})]
    assert [h.row.id for h in merge_deeper(head, deeper)] == ["a", "b", "d", "c"]
    assert [h.row.id for h in merge_deeper(head, [Hit(d, 0.5, {})])] == ["a", "b", "d", "c"]
    assert merge_deeper(head, [Hit(d, 0.6, {})])[0].row.id == "d"
    assert merge_deeper(head, []) == head


def test_stale_below_scales_only_what_is_superseded() -> None:
    new, old, other = _row("new"), _row("old"), _row("other")
    hits = [Hit(new, 0.5, {}), Hit(old, 0.5, {}), Hit(other, 0.2, {})]
    out = stale_below(hits, {"old": [new]}, 0.02)
    assert [h.row.id for h in out] == ["new", "other", "old"]
    assert out[2].score == pytest.approx(0.01) and out[2].explain["superseded"] == 0.02
    assert "superseded" not in out[0].explain and out[1].score == 0.2
    # Off, or nothing superseded: the same hits in the same order.
    assert stale_below(hits, {"old": [new]}, 1.0) == hits
    assert stale_below(hits, {}, 0.02) == hits
    for preset in (HYBRID_RRF, DENSE_ONLY, KEYWORD_ONLY):
        assert preset.superseded_factor == 1.0
