"""Hybrid retrieval: every candidate source, filters, explain, threshold, entities, links,
fusion presets, the reranker, and the LoCoMo retrieval benchmark's plumbing.

The real local model embeds; where a test needs one signal to miss, it first
checks that precondition through ``explain`` (so a model change makes the
test say why it no longer proves its point, instead of passing vacuously).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from engramdb import Memory
from engramdb.embedders import LocalEmbedder
from engramdb.llms import ScriptedLLM
from engramdb.rerank import parse_rerank
from engramdb.search import (
    DENSE_ONLY,
    HYBRID_RRF,
    HYBRID_WEIGHTED,
    KEYWORD_ONLY,
    FusionConfig,
    ScoreCalibration,
    plan_query,
)
from engramdb.stores.base import Candidate, Scope
from engramdb_bench import locomo_retrieval as bench


def open_mem(path: Path, embedder: LocalEmbedder, **retrieval: Any) -> Memory:
    config = {"retrieval": retrieval} if retrieval else None
    return Memory(path, config=config, embedder=embedder)


def by_text(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["memory"]: r for r in result["results"]}


def one_each(m: Memory, query: str) -> dict[str, Candidate]:
    """The store's candidates when each ranked signal contributes only its top 1."""
    plan = plan_query(query, m.config.retrieval)
    vec = m.embedder.embed_query(query)
    found = m.store.candidates(Scope(user_id="u"), None, vec, plan.terms, plan.entities, 1)
    return {c.row.text: c for c in found}


# -- each source finds what the others miss ------------------------------------------------


def test_keyword_alone_finds_a_rare_code(mem: Memory) -> None:
    target = "The fridge invoice carries ref qzx7731."
    for text in [
        "What is my order number?",
        "My order number is on the receipt.",
        "I lost my order number again.",
        target,
    ]:
        mem.add(text, user_id="u", infer=False)
    query = "What is my order number? qzx7731"
    found = one_each(mem, query)
    assert found[target].bm25_rank == 1
    assert found[target].semantic_rank is None  # the vectors prefer another memory
    assert found[target].entities == []
    hit = by_text(mem.search(query, user_id="u", explain=True))[target]
    assert hit["score_details"]["rank"]["bm25"] == 1


def test_vector_alone_finds_a_paraphrase(mem: Memory) -> None:
    target = "My favourite animals are kittens."
    for text in [target, "She likes the colour blue", "Does he like football?"]:
        mem.add(text, user_id="u", infer=False)
    query = "Which pets does she adore? cats"
    found = one_each(mem, query)
    assert found[target].semantic_rank == 1
    assert found[target].bm25 == 0 and found[target].bm25_rank is None  # no shared word
    assert found[target].entities == []
    results = mem.search(query, user_id="u", explain=True)["results"]
    assert results[0]["memory"] == target
    # No word is shared; what the question and the memory do share is their attribute
    # (attributes.py): the question asks for @pet, the keyword term the memory has.
    assert results[0]["score_details"]["attributes"] == ["@pet"]


def test_entity_alone_finds_a_linked_memory(mem: Memory) -> None:
    target = "The boiler broke on 7 May 2023."
    for text in ["What happened on 2023-05-08? What happened?", "Tea is nice", target]:
        mem.add(text, user_id="u", infer=False)
    query = "What happened on 2023-05-07?"
    found = one_each(mem, query)
    assert found[target].semantic_rank is None and found[target].bm25_rank is None
    assert found[target].entities == [("2023-05-07", 1)]
    hit = by_text(mem.search(query, user_id="u", explain=True))[target]
    assert hit["score_details"]["entities"] == ["2023-05-07"]
    assert hit["score_details"]["rank"]["entity"] == 1


def test_common_entities_only_mark_candidates_found_otherwise(mem: Memory) -> None:
    for i in range(4):
        mem.add(f"Walked with Rex in park number {i}", user_id="u", infer=False)
    found = one_each(mem, "rex")  # "rex" links 4 memories, more than the pool of 1
    assert 1 <= len(found) <= 2  # the vector top 1 and the BM25 top 1, nothing more
    for cand in found.values():
        assert cand.semantic_rank == 1 or cand.bm25_rank == 1
        assert cand.entities == [("rex", 4)]  # ...each marked with the entity


def test_lower_case_query_still_matches_entities(mem: Memory) -> None:
    mem.add("Dinner with Aunt Rosalind at Chez Panisse", user_id="u", infer=False)
    hit = mem.search("when did i eat at chez panisse", user_id="u", explain=True)["results"][0]
    assert "chez panisse" in hit["score_details"]["entities"]


# -- filters hold on every source ----------------------------------------------------------


def test_filters_apply_to_every_source(mem: Memory) -> None:
    # Each "hidden" memory is the best match of one source; none may come back.
    hidden = [
        "Reference QZX7731 is on the fridge invoice.",  # keyword
        "My favourite animals are kittens.",  # vector
        "Lunch with Bartholomew Quist on 7 May 2023.",  # entity
    ]
    for text in hidden:
        mem.add(text, user_id="u", run_id="r1", metadata={"kind": "hidden"}, infer=False)
    mem.add("I like tea.", user_id="u", run_id="r2", metadata={"kind": "shown"}, infer=False)
    mem.add("Reference QZX7731 again.", user_id="other", metadata={"kind": "shown"}, infer=False)
    query = "QZX7731 cats Bartholomew Quist 2023-05-07"
    for kwargs in (
        {"filters": {"kind": "shown"}},
        {"filters": {"kind": {"ne": "hidden"}}},
        {"run_id": "r2"},
    ):
        out = mem.search(query, user_id="u", explain=True, **kwargs)  # type: ignore[arg-type]
        assert [r["memory"] for r in out["results"]] == ["I like tea."], kwargs
    everything = {r["memory"] for r in mem.search(query, user_id="u")["results"]}
    assert set(hidden) <= everything
    assert "Reference QZX7731 again." not in everything  # another user's, never


# -- explain and threshold -----------------------------------------------------------------


def test_explain_shows_every_part_and_rank(mem: Memory) -> None:
    mem.add(
        [{"role": "user", "content": "I adopted a greyhound named Biscuit.", "name": "Ana"}],
        user_id="u",
        infer=False,
    )
    mem.add("The weather was grey all week.", user_id="u", infer=False)
    results = mem.search("What dog did Ana adopt? Biscuit", user_id="u", explain=True)["results"]
    top = results[0]
    assert top["memory"] == "I adopted a greyhound named Biscuit."
    explain = top["score_details"]
    for key in ("semantic", "bm25", "entity", "actor", "fusion", "method", "rank", "parts"):
        assert key in explain
    # the score is the relative fused score read through the calibration curve (search.py)
    # Ana said it, and the query names her: the curve of questions that name a speaker
    assert explain["actor"] == 1.0 and explain["speaker_named"] is True
    cal = FusionConfig().calibration
    assert cal is not None and cal.apply(explain["relative"], True) == top["score"]
    # Unnamed, the same memory reads through the other curve, which is higher:
    # a question that names nobody has no memory lifted by its speaker alone.
    unnamed = mem.search("What dog was adopted? Biscuit", user_id="u", explain=True)["results"]
    details = unnamed[0]["score_details"]
    assert unnamed[0]["memory"] == top["memory"] and details["speaker_named"] is False
    named_curve = cal.apply(details["relative"], True)
    assert unnamed[0]["score"] == cal.apply(details["relative"]) > named_curve
    assert "biscuit" in explain["entities"]
    assert set(explain["rank"]) == {"semantic", "bm25", "entity"}
    assert explain["rank"]["semantic"] == 1 and explain["rank"]["bm25"] == 1
    for part in explain["parts"].values():
        assert 0.0 <= part <= 1.0
    assert all(0.0 <= r["score"] <= 1.0 for r in results)
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)
    plain = mem.search("What dog did Ana adopt?", user_id="u")["results"][0]
    assert "score_details" not in plain


@pytest.mark.parametrize("preset", [HYBRID_WEIGHTED, HYBRID_RRF])
def test_threshold_applies_to_the_final_score(
    db_path: Path, embedder: LocalEmbedder, preset: FusionConfig
) -> None:
    with open_mem(db_path, embedder, **preset.model_dump()) as m:
        for text in ["I play the cello", "Cello lessons on Tuesdays", "I hate broccoli"]:
            m.add(text, user_id="u", infer=False)
        scores = [r["score"] for r in m.search("cello", user_id="u")["results"]]
        assert len(scores) == 3 and scores[0] > scores[-1]
        cut = (scores[0] + scores[-1]) / 2
        kept = m.search("cello", user_id="u", threshold=cut, explain=True)["results"]
        assert [r["score"] for r in kept] == [s for s in scores if s >= cut]
        cal = preset.calibration
        for r in kept:
            details = r["score_details"]
            named = details["speaker_named"]
            shown = cal.apply(details["relative"], named) if cal else details["fusion"]
            assert shown == r["score"] >= cut


# -- the score's scale --------------------------------------------------------------------

_CORPUS = [
    "I adopted a grey cat called Miso last spring",
    "My sister lives in Porto and teaches chemistry",
    "We are driving to the mountains for a week in August",
    "I have been learning the cello for two years",
    "The bakery on our street makes the best sourdough",
    "My daughter starts school in September",
]


def test_calibration_keeps_the_fused_ranking(db_path: Path, embedder: LocalEmbedder) -> None:
    with open_mem(db_path, embedder) as m:
        for text in _CORPUS:
            m.add(text, user_id="u", infer=False)
        for query in ["cat", "where does my sister live", "music lessons", "holiday plans"]:
            hits = m.search(query, user_id="u", explain=True)["results"]
            fused = [h["score_details"]["fusion"] for h in hits]
            assert fused == sorted(fused, reverse=True)
            # relative: the fused score over that of a perfect match, one divisor a search,
            # capped at 1 (a memory the attribute part lifts past a perfect match's
            # fused score, which leaves that part out: search.py)
            relative = [h["score_details"]["relative"] for h in hits]
            ratios = {f / r for f, r in zip(fused, relative, strict=True) if r < 1.0}
            assert ratios and max(ratios) - min(ratios) < 1e-9
            assert all(f >= min(ratios) for f, r in zip(fused, relative, strict=True) if r == 1.0)
            assert [h["score"] for h in hits] == [
                FusionConfig().calibration.apply(h["score_details"]["relative"])  # type: ignore[union-attr]
                for h in hits
            ]
    with open_mem(db_path, embedder, calibration=None) as raw:
        for query in ["cat", "holiday plans"]:
            hits = raw.search(query, user_id="u", explain=True)["results"]
            assert [h["score"] for h in hits] == [h["score_details"]["fusion"] for h in hits]


TOP = ScoreCalibration().knots[-1][1]
"""The highest score the shipped curve gives (what the best-matching questions earn)."""


def test_an_exact_repeat_scores_the_top_of_the_scale_in_a_scope_of_six_memories(
    db_path: Path, embedder: LocalEmbedder
) -> None:
    # the relative score takes the scope's size out: BM25's idf is small here
    with open_mem(db_path, embedder) as m:
        for text in _CORPUS:
            m.add(text, user_id="u", infer=False)
        for text in _CORPUS:
            top = m.search(text, user_id="u")["results"][0]
            assert top["memory"] == text and top["score"] >= 0.95 * TOP, (text, top["score"])


def test_an_exact_repeat_scores_high_and_unrelated_text_near_0(
    db_path: Path, embedder: LocalEmbedder
) -> None:
    # The score is the probability that a memory answers the query (fitted on the
    # development suite): an exact repeat earns the top of the curve, the best hit
    # of an unrelated query about the floor.
    # The bundled demo conversation: 36 real-length messages in one scope.
    demo = json.loads(
        (Path(__file__).parents[1] / "src/engramdb/data/demo_conversation.json").read_text()
    )
    said = [msg["content"] for session in demo["sessions"] for msg in session["messages"]]
    with open_mem(db_path, embedder) as m:
        for session in demo["sessions"]:
            m.add(session["messages"], user_id="u", infer=False)
        exact = []
        for text in said:
            top = m.search(text, user_id="u")["results"][0]
            assert top["memory"] == text, text
            exact.append(top["score"])
        exact.sort()
        assert exact[len(exact) // 10] >= 0.9 * TOP and exact[0] >= 0.5 * TOP, exact[:5]
        for query in ["quantum chromodynamics on a lattice", "the tax code of Paraguay"]:
            best = m.search(query, user_id="u")["results"][0]["score"]
            # the floor of the curve: a few in a hundred such hits answer a question
            assert best <= 0.04, (query, best)
        assert m.search("what is the capital of Peru", user_id="u", threshold=0.3)["results"] == []


# -- entity links follow the memory ---------------------------------------------------------


def _entities_of_hits(m: Memory, query: str) -> dict[str, list[str]]:
    results = m.search(query, user_id="u", explain=True)["results"]
    return {r["id"]: r["score_details"]["entities"] for r in results}


def test_entity_links_on_add_update_delete(mem: Memory) -> None:
    mid = mem.add("I flew to Lisbon with Marguerite", user_id="u", run_id="a", infer=False)[
        "results"
    ][0]["id"]
    mem.add("Coffee is nice", user_id="u", run_id="b", infer=False)
    assert _entities_of_hits(mem, "lisbon")[mid] == ["lisbon"]
    assert _entities_of_hits(mem, "marguerite lisbon")[mid] == ["lisbon", "marguerite"]

    mem.update(mid, text="I flew to Porto with Marguerite")
    assert all("lisbon" not in ents for ents in _entities_of_hits(mem, "lisbon").values())
    assert _entities_of_hits(mem, "porto")[mid] == ["porto"]
    assert "marguerite" in _entities_of_hits(mem, "marguerite")[mid]

    mem.delete(mid)
    assert mid not in _entities_of_hits(mem, "porto marguerite")
    mem.restore(mid)
    assert _entities_of_hits(mem, "porto")[mid] == ["porto"]


# -- links: expand_links and timeline ------------------------------------------------------


def _link_to(text: str, new_text: str) -> Any:
    """A scripted additive reply that links the new memory to the shown one holding ``text``."""

    def reply(messages: list[dict[str, Any]]) -> dict[str, Any]:
        prompt = "\n".join(str(m["content"]) for m in messages)
        small = next(
            line.split("]", 1)[0].lstrip("[")
            for line in prompt.splitlines()
            if line.startswith("[") and text in line
        )
        return {
            "memory": [{"text": new_text, "attributed_to": "user", "linked_memory_ids": [small]}]
        }

    return reply


def test_expand_links_and_timeline_order(db_path: Path, embedder: LocalEmbedder) -> None:
    llm = ScriptedLLM(
        [
            {"memory": [{"text": "Bob likes green tea", "attributed_to": "user"}]},
            _link_to("Bob likes green tea", "Bob switched from green tea to espresso"),
            _link_to("Bob switched from green tea", "Bob now drinks decaf espresso only"),
        ]
    )
    with Memory(db_path, embedder=embedder, llm=llm) as m:
        # Observation times are deliberately not in insertion order.
        first = m.add("I like green tea", user_id="bob", timestamp="2023-03-01T09:00:00Z")
        second = m.add("Now espresso!", user_id="bob", timestamp="2024-06-01T09:00:00Z")
        third = m.add("Decaf only now", user_id="bob", timestamp="2024-01-15T09:00:00Z")
        ids = [r["results"][0]["id"] for r in (first, second, third)]
        # Links read both ways: the middle memory links to the first and the last.
        assert set(m.get(ids[1])["linked_memory_ids"]) == {ids[0], ids[2]}  # type: ignore[index]

        timeline = m.timeline(ids[0])
        assert [t["id"] for t in timeline] == [ids[0], ids[2], ids[1]]
        assert [t["observed_at"][:10] for t in timeline] == [
            "2023-03-01",
            "2024-01-15",
            "2024-06-01",
        ]

        plain = m.search("green tea", user_id="bob", top_k=1)["results"]
        assert len(plain) == 1 and plain[0]["id"] == ids[0]
        expanded = m.search("green tea", user_id="bob", top_k=1, expand_links=True)["results"]
        assert expanded[0]["id"] == ids[0]
        assert expanded[1]["id"] == ids[1] and expanded[1]["linked_from"] == ids[0]
        assert len({r["id"] for r in expanded}) == len(expanded)  # no repeats


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_expand_links_leads_only_where_the_search_may_go(
    request: pytest.FixtureRequest, backend: str, db_path: Path, embedder: LocalEmbedder
) -> None:
    # A linked memory passes what a hit passes: filters, as_of, expiry and
    # include_superseded=False. Each of these let one through before.
    config: dict[str, Any] | None = None
    if backend == "postgres":
        config = {
            "vector_store": {"provider": "postgres", "config": request.getfixturevalue("pg_config")}
        }
    path = None if backend == "postgres" else db_path
    with Memory(path, config=config, embedder=embedder) as m:

        def one(text: str, when: str, topic: str, **kw: Any) -> str:
            out = m.add(
                text, user_id="u", infer=False, timestamp=when, metadata={"topic": topic}, **kw
            )
            return str(out["results"][0]["id"])

        home = one("Maya lives in Lisbon.", "2023-01-05", "home")
        moved = one("Maya moved to Porto.", "2024-03-01", "move", links={home: "updates"})
        lease = one(
            "Maya's lease on the Porto flat.",
            "2024-03-02",
            "move",
            links={moved: "related"},
            expiration_date="2024-12-31",
        )

        def found(**kw: Any) -> list[Any]:
            """The hit, then the set of what it led to (links come in no set order)."""
            rs = m.search("Where does Maya live?", user_id="u", top_k=1, expand_links=True, **kw)
            first, *rest = [(r["id"], r.get("linked_from")) for r in rs["results"]]
            return [first, *sorted(rest)]

        # Everything linked, as before, but the lease is past its expiry.
        assert found() == [(moved, None), (home, moved)]
        assert found(show_expired=True) == [(moved, None), *sorted([(home, moved), (lease, moved)])]
        # As of a day in 2023 only the old home had been said.
        assert found(as_of="2023-06-01") == [(home, None)]
        # As of the day after the lease, the lease held and the home was replaced.
        assert found(as_of="2024-03-03", include_superseded=False) == [
            (moved, None),
            (lease, moved),
        ]
        assert found(include_superseded=False) == [(moved, None)]
        assert found(filters={"topic": "move"}) == [(moved, None)]
        assert found(filters={"topic": "home"}) == [(home, None)]
        # A linked memory carries superseded_by like any result.
        rs = m.search("Where does Maya live?", user_id="u", top_k=1, expand_links=True)
        assert [r["superseded_by"] for r in rs["results"]] == [[], [moved]]


# -- presets --------------------------------------------------------------------------------


def test_fusion_presets(db_path: Path, embedder: LocalEmbedder) -> None:
    texts = [
        "Reference QZX7731 is on the fridge invoice.",
        "My favourite animals are kittens.",
        "The car needs new tyres.",
    ]
    query = "cats QZX7731"
    tops = {}
    for name, preset in {
        "dense": DENSE_ONLY,
        "keyword": KEYWORD_ONLY,
        "weighted": HYBRID_WEIGHTED,
        "rrf": HYBRID_RRF,
    }.items():
        path = db_path.with_name(f"{name}.db")
        with open_mem(path, embedder, **preset.model_dump()) as m:
            for text in texts:
                m.add(text, user_id="u", infer=False)
            results = m.search(query, user_id="u", explain=True)["results"]
            assert all(r["score_details"]["method"] == preset.method for r in results)
            assert all(0.0 <= r["score"] <= 1.0 for r in results)
            tops[name] = results
    keyword = tops["keyword"]
    assert keyword[0]["memory"].startswith("Reference QZX7731")
    assert all(r["score"] == 0.0 for r in keyword if r["score_details"]["bm25"] == 0)
    dense = tops["dense"]
    cosines = [r["score_details"]["semantic"] for r in dense]
    assert cosines == sorted(cosines, reverse=True)
    assert FusionConfig() == HYBRID_WEIGHTED  # the default is the weighted preset


def test_retrieval_config_is_validated(tmp_path: Path) -> None:
    from engramdb import ConfigError

    with pytest.raises(ConfigError, match="retrieval"):
        Memory(tmp_path / "x.db", config={"retrieval": {"method": "magic"}})
    with pytest.raises(ConfigError, match="retrieval"):
        Memory(tmp_path / "y.db", config={"retrieval": {"rerank": {"pool": 0}}})


def test_plan_query_reads_lower_case_names_and_dates() -> None:
    plan = plan_query("what did caroline do at the eiffel tower on 7 May 2023?", FusionConfig())
    assert {"caroline", "eiffel tower", "2023-05-07"} <= set(plan.entities)
    assert "did caroline" not in plan.entities  # windows edged by stop words are skipped
    assert plan.names == frozenset(plan.entities)
    assert plan_query("caroline", DENSE_ONLY).entities == []


# -- index-time context and speaker --------------------------------------------------------


def test_verbatim_messages_are_indexed_with_their_context(mem: Memory) -> None:
    mem.add(
        [{"role": "user", "content": "How long have you had your turtles?", "name": "Jo"}],
        user_id="u",
        run_id="s1",
        infer=False,
    )
    answer = mem.add(
        [{"role": "assistant", "content": "Three years now!", "name": "Nate"}],
        user_id="u",
        run_id="s1",
        infer=False,
    )["results"][0]["id"]
    other = mem.add(
        [{"role": "user", "content": "Three cheers for the weekend!", "name": "Jo"}],
        user_id="u",
        run_id="s2",  # another conversation: no context from s1
        infer=False,
    )["results"][0]["id"]
    hits = {r["id"]: r for r in mem.search("turtles", user_id="u", explain=True)["results"]}
    assert hits[answer]["score_details"]["bm25"] > 0  # found through its question's words
    assert hits[answer]["memory"] == "Three years now!"  # the text stays its own
    assert hits[other]["score_details"]["bm25"] == 0
    top = mem.search("How long has Nate had turtles?", user_id="u", explain=True)["results"]
    assert answer in [r["id"] for r in top[:2]]
    assert {r["id"]: r["score_details"]["actor"] for r in top}[answer] == 1.0  # Nate said it


def test_context_can_be_turned_off(db_path: Path, embedder: LocalEmbedder) -> None:
    with open_mem(db_path, embedder, context_messages=0) as m:
        m.add("How long have you had your turtles?", user_id="u", infer=False)
        m.add("Three years now!", user_id="u", infer=False)
        hits = m.search("turtles", user_id="u", explain=True)["results"]
        assert {r["memory"]: r["score_details"]["bm25"] for r in hits}["Three years now!"] == 0


# -- reranker -------------------------------------------------------------------------------


def test_llm_reranker_reorders_a_larger_pool(db_path: Path, embedder: LocalEmbedder) -> None:
    texts = ["I play the cello", "Cello lessons are on Tuesdays", "I bought cello strings"]

    def grade(messages: list[dict[str, Any]]) -> dict[str, Any]:
        prompt = str(messages[-1]["content"])
        shown = [line for line in prompt.splitlines() if line.startswith("[")]
        assert len(shown) == 3  # the pool, not top_k
        # Grade "strings" best, whatever its fused rank.
        return {
            "scores": [
                {"id": i, "score": 10 if "strings" in line else 1} for i, line in enumerate(shown)
            ]
        }

    llm = ScriptedLLM([grade, RuntimeError("not used")])
    config = {"retrieval": {"rerank": {"pool": 10, "weight": 1.0}}}
    with Memory(db_path, config=config, embedder=embedder, llm=llm) as m:
        for text in texts:
            m.add(text, user_id="u", infer=False)
        out = m.search("cello", user_id="u", top_k=2, explain=True)["results"]
        assert len(out) == 2
        assert out[0]["memory"] == "I bought cello strings"
        assert out[0]["score"] == pytest.approx(1.0)
        assert out[0]["score_details"]["rerank"] == pytest.approx(1.0)
        assert 0.0 <= out[0]["score_details"]["fusion"] <= 1.0
        assert [c.schema_name for c in llm.calls] == ["rerank"]


def test_reranker_failure_keeps_the_fused_order(db_path: Path, embedder: LocalEmbedder) -> None:
    from engramdb.errors import LLMError

    llm = ScriptedLLM(["not json at all", LLMError("down")])
    config = {"retrieval": {"rerank": {"pool": 5}}}
    with Memory(db_path, config=config, embedder=embedder, llm=llm) as m:
        for text in ["I play the cello", "I hate broccoli"]:
            m.add(text, user_id="u", infer=False)
        first = m.search("cello", user_id="u", explain=True)["results"]
        second = m.search("cello", user_id="u", explain=True)["results"]
    for out in (first, second):
        assert out[0]["memory"] == "I play the cello"
        assert "rerank" not in out[0]["score_details"]


def test_async_search_reranks_too(db_path: Path, embedder: LocalEmbedder) -> None:
    import asyncio

    from engramdb import AsyncMemory

    llm = ScriptedLLM([{"scores": [{"id": 0, "score": 0}, {"id": 1, "score": 10}]}])
    config = {"retrieval": {"rerank": {"pool": 5, "weight": 1.0}}}

    async def main() -> list[dict[str, Any]]:
        async with AsyncMemory(db_path, config=config, embedder=embedder, llm=llm) as am:
            for text in ["I play the cello", "I hate broccoli"]:
                await am.add(text, user_id="u", infer=False)
            out = await am.search("cello", user_id="u", explain=True)
            return list(out["results"])

    results = asyncio.run(main())
    assert results[0]["memory"] == "I hate broccoli"  # the grader's choice
    assert results[0]["score_details"]["rerank"] == 1.0


def test_parse_rerank_shapes() -> None:
    assert parse_rerank('{"scores": [{"id": 1, "score": 7}, {"id": 0, "score": 2}]}', 3) == [
        0.2,
        0.7,
        0.0,
    ]
    assert parse_rerank("[0.5, 1.0]", 2) == [0.5, 1.0]
    assert parse_rerank('```json\n{"scores": [{"id": 0, "score": 10}]}\n```', 1) == [1.0]
    from engramdb.errors import ReplyFormatError

    with pytest.raises(ReplyFormatError):
        parse_rerank('{"scores": [{"id": 9, "score": 3}]}', 2)


# -- the LoCoMo retrieval benchmark ----------------------------------------------------------


def _tiny_locomo() -> list[dict[str, Any]]:
    """Two sessions, four questions (one adversarial, skipped), observations."""
    return [
        {
            "sample_id": "tiny-1",
            "conversation": {
                "speaker_a": "Ana",
                "speaker_b": "Ben",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [
                    {"speaker": "Ana", "dia_id": "D1:1", "text": "Hi Ben! I adopted a puppy."},
                    {"speaker": "Ben", "dia_id": "D1:2", "text": "Great! What is its name?"},
                    {"speaker": "Ana", "dia_id": "D1:3", "text": "Her name is Pixel."},
                ],
                "session_2_date_time": "10:00 am on 20 June, 2023",
                "session_2": [
                    {
                        "speaker": "Ben",
                        "dia_id": "D2:1",
                        "text": "I ran a marathon in Oslo last week.",
                        "img_url": ["http://example.invalid/x.jpg"],
                        "blip_caption": "a photo of runners on a bridge",
                    },
                    {"speaker": "Ana", "dia_id": "D2:2", "text": "Wow, how long did it take?"},
                    {"speaker": "Ben", "dia_id": "D2:3", "text": "Four hours and ten minutes."},
                ],
            },
            "qa": [
                {
                    "question": "What is the name of Ana's puppy?",
                    "answer": "Pixel",
                    "evidence": ["D1:3"],
                    "category": 4,
                },
                {
                    "question": "Where did Ben run a marathon?",
                    "answer": "Oslo",
                    "evidence": ["D2:1"],
                    "category": 2,
                },
                {
                    "question": "What pets and races do they have?",
                    "answer": "a puppy; a marathon",
                    "evidence": ["D1:1", "D2:1"],
                    "category": 1,
                },
                {
                    "question": "What is Ben's cat called?",
                    "adversarial_answer": "Pixel",
                    "evidence": ["D1:3"],
                    "category": 5,
                },
            ],
            "observation": {
                "session_1_observation": {
                    "Ana": [["Ana adopted a puppy named Pixel.", ["D1:1", "D1:3"]]],
                    "Ben": [],
                },
                "session_2_observation": {
                    "Ben": [["Ben ran a marathon in Oslo in about four hours.", "D2:1; D2:3"]],
                },
            },
        }
    ]


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("locomo") / "tiny.json"
    path.write_text(json.dumps(_tiny_locomo()), encoding="utf-8")
    return path


def test_score_ranking_by_hand() -> None:
    ranked = [["D1:9"], ["D1:3"], [], ["D1:1", "D1:3"], ["D2:1"]]
    got = bench.score_ranking(ranked, ["D1:3", "D2:1"], ks=(1, 2, 5))
    assert got["any@1"] == 0.0 and got["any@2"] == 1.0
    assert got["all@2"] == 0.0 and got["all@5"] == 1.0
    import math

    ideal = 1 + 1 / math.log2(3)
    assert got["ndcg@10"] == pytest.approx((1 / math.log2(3) + 1 / math.log2(6)) / ideal)
    assert bench.score_ranking([], ["D1:1"])["ndcg@10"] == 0.0


def test_load_reads_the_format(tiny_file: Path) -> None:
    (conv,) = bench.load(tiny_file)
    assert conv.speakers == ("Ana", "Ben")
    assert [s.date for s in conv.sessions] == [
        "2023-05-08T13:56:00+00:00",
        "2023-06-20T10:00:00+00:00",
    ]
    assert (
        conv.sessions[1].turns[0].text.endswith("[shares a photo: a photo of runners on a bridge]")
    )
    assert [q.category for q in conv.questions] == [4, 2, 1]  # category 5 skipped
    assert conv.facts[2][0].dia_ids == ("D2:1", "D2:3")  # a string of two ids


def test_benchmark_turns(tiny_file: Path, tmp_path: Path, embedder: LocalEmbedder) -> None:
    out = tmp_path / "r.json"
    plot = tmp_path / "r.png" if importlib.util.find_spec("matplotlib") else None
    report = bench.run(tiny_file, out=out, plot=plot, embedder=embedder, details=True)
    assert json.loads(out.read_text()) == report
    if plot is not None:
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert report["memories"] == 6 and report["questions"] == 3
    assert set(report["methods"]) == {"hybrid", "dense", "bm25"}
    for figures in report["methods"].values():
        overall = figures["overall"]
        assert overall["n"] == 3
        for key in ("any@5", "any@10", "any@20", "all@5", "all@10", "all@20", "ndcg@10"):
            assert 0.0 <= overall[key] <= 1.0
        assert set(figures["by_category"]) == {"1", "2", "3", "4"}
        assert figures["by_category"]["3"]["n"] == 0
    # Six memories: every ranking reaches every turn by k=20, so all@20 is 1.
    assert report["methods"]["hybrid"]["overall"]["all@20"] == 1.0
    # The per-question details recompute to the reported figures.
    rows = [bench.score_ranking(d["hybrid"], d["evidence"]) for d in report["details"]]
    any5 = sum(r["any@5"] for r in rows) / len(rows)
    assert report["methods"]["hybrid"]["overall"]["any@5"] == pytest.approx(any5, abs=1e-4)
    assert report["latency"]["search"]["n"] == 3
    assert report["latency"]["search"]["p50_ms"] <= report["latency"]["search"]["p95_ms"]


def test_benchmark_facts(tiny_file: Path, tmp_path: Path, embedder: LocalEmbedder) -> None:
    report = bench.run(tiny_file, keys="facts-only", embedder=embedder, details=True)
    assert report["memories"] == 2  # the two observation facts, through the pipeline
    # A hit on a fact counts for the turns it came from: the puppy fact covers D1:3.
    puppy = next(d for d in report["details"] if "puppy" in d["question"])
    assert ["D1:1", "D1:3"] in puppy["hybrid"]
    assert report["methods"]["hybrid"]["by_category"]["4"]["any@5"] == 1.0
    both = bench.run(tiny_file, keys="facts", embedder=embedder)
    assert both["memories"] == 8


def test_benchmark_reuse_cache(tiny_file: Path, tmp_path: Path, embedder: LocalEmbedder) -> None:
    cache = tmp_path / "cache"
    first = bench.run(tiny_file, reuse=True, cache_dir=cache, embedder=embedder)
    second = bench.run(tiny_file, reuse=True, cache_dir=cache, embedder=embedder)
    assert not first["ingest"]["reused"] and second["ingest"]["reused"]
    assert first["methods"] == second["methods"]
    assert len(list(cache.glob("*.db"))) == 1
    fresh = bench.run(tiny_file, cache_dir=cache, embedder=embedder)
    assert not fresh["ingest"]["reused"]


def test_benchmark_cli(tiny_file: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from engramdb.cli import app

    out = tmp_path / "cli.json"
    result = CliRunner().invoke(
        app,
        [
            "bench",
            "locomo-retrieval",
            "--data",
            str(tiny_file),
            "--out",
            str(out),
            "--plot",
            str(tmp_path / "cli.png"),
            "--retrieval",
            '{"method": "rrf"}',
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["fusion"]["method"] == "rrf"
    assert json.loads(out.read_text()) == report
    bad = CliRunner().invoke(
        app, ["bench", "locomo-retrieval", "--data", str(tiny_file), "--keys", "nope"]
    )
    assert bad.exit_code == 2


def test_candidates_scope_for_store_level_rankings(mem: Memory) -> None:
    # The benchmark's dense and BM25 rankings are the store's own lists.
    mem.add("Reference QZX7731 on the invoice", user_id="u", run_id="a", infer=False)
    mem.add("I like tea", user_id="u", run_id="b", infer=False)
    vec = mem.embedder.embed_query("QZX7731")
    cands = mem.store.candidates(Scope(user_id="u"), None, vec, ["qzx7731"], [], 5)
    assert {c.bm25_rank for c in cands} == {1, None}
    assert sorted(c.semantic_rank for c in cands if c.semantic_rank) == [1, 2]


# -- fuse(limit=k) builds only the best k, the same as fuse()[:k] --------------------------


@pytest.mark.parametrize("method", ["weighted", "rrf"])
def test_fuse_with_a_limit_is_the_head_of_the_full_fusion(method: str) -> None:
    import random

    from engramdb.core.records import Candidate
    from engramdb.search import FusionConfig, fuse, plan_query
    from rows import memory_row

    rng = random.Random(7)
    config = FusionConfig(method=method)
    plan = plan_query("what did Caroline say about Mel?", config)
    for trial in range(30):
        candidates = [
            Candidate(
                row=memory_row(f"m{trial}-{i:03d}", actor=rng.choice([None, "Caroline", "Mel"])),
                # coarse values, so ties on score and on cosine are common
                semantic=rng.choice([0.70, 0.75, 0.80, 0.85]),
                bm25=rng.choice([0.0, 0.0, 1.5, 3.0]),
                semantic_rank=i + 1,
                bm25_rank=None,
                entities=rng.choice([[], [("caroline", 3)], [("mel", 40)]]),
                bm25_best=6.0,
            )
            for i in range(rng.randint(0, 60))
        ]
        full = fuse(candidates, config, plan)
        for k in (0, 1, 5, 10, len(candidates) + 3):
            head = fuse(candidates, config, plan, limit=k)
            assert [(h.row.id, h.score, h.explain) for h in head] == [
                (h.row.id, h.score, h.explain) for h in full[:k]
            ]


def test_fuse_with_a_limit_reads_the_text_factors_of_only_the_head_and_keeps_its_order() -> None:
    # The factors that read a candidate's text (small talk, informativeness, someone
    # else's fact) only lower a score, so fuse(limit=k) reads them for the candidates
    # that can still reach the first k: the first k must be those of scoring all.
    import random
    from dataclasses import replace

    from engramdb.core.records import Candidate
    from engramdb.search import FusionConfig, fuse, plan_query
    from rows import memory_row

    texts = [
        "Haha, nice! Thanks so much.",
        "Sounds great, see you soon!",
        "My sister loves sushi and ramen.",
        "Mel's brother works at the bakery.",
        "I adopted a rescue dog named Biscuit last spring.",
        "Caroline is vegan and allergic to peanuts.",
        "Yeah.",
        "We went camping at the lake with the kids in July.",
    ]
    rng = random.Random(11)
    config = FusionConfig(informative_terms=3)
    plan = replace(plan_query("What does Caroline eat?", config), personal=True)
    scored_all = 0
    for trial in range(40):
        candidates = []
        for i in range(rng.randint(0, 80)):
            row = memory_row(f"m{trial}-{i:03d}", actor=rng.choice([None, "Caroline", "Mel"]))
            row.text = rng.choice(texts)
            candidates.append(
                Candidate(
                    row=row,
                    semantic=rng.choice([0.70, 0.75, 0.80, 0.85, 0.9]),
                    bm25=rng.choice([0.0, 0.0, 1.5, 3.0]),
                    semantic_rank=i + 1,
                    bm25_rank=None,
                    entities=rng.choice([[], [("caroline", 3)]]),
                    bm25_best=6.0,
                )
            )
        full = fuse(candidates, config, plan)
        scored_all += sum("chatter" in h.explain for h in full)
        for k in (0, 1, 3, 10, 20, len(candidates) + 3):
            head = fuse(candidates, config, plan, limit=k)
            assert [(h.row.id, h.score, h.explain) for h in head] == [
                (h.row.id, h.score, h.explain) for h in full[:k]
            ]
            assert all({"chatter", "informative", "other_subject"} <= set(h.explain) for h in head)
    assert scored_all > 0


@pytest.mark.parametrize(
    ("question", "lowered"),
    [
        ("Which company does Signe work for?", "Signe works as a veterinarian."),
        ("What does Signe do for a living?", "Signe started at Ironbridge Consulting."),
    ],
)
def test_a_memory_saying_only_the_other_side_of_work_is_lowered(
    question: str, lowered: str
) -> None:
    from dataclasses import replace

    from engramdb.core.records import Candidate
    from engramdb.search import FusionConfig, fuse, plan_query
    from rows import memory_row

    texts = [
        "Signe works as a veterinarian.",
        "Signe started at Ironbridge Consulting.",
        "Signe works as a vet at Harbourside Hotels.",
        "Signe likes green tea.",
    ]
    candidates = []
    for i, text in enumerate(texts):
        row = memory_row(f"m{i}")
        row.text = text
        candidates.append(Candidate(row=row, semantic=0.85, bm25=0.0, semantic_rank=i + 1))
    for factor in (0.5, 1.0):
        config = FusionConfig(work_side_factor=factor)
        # The question asks about work: its attribute term says so (read from its vector).
        plan = replace(plan_query(question, config), terms=["@job"])
        got = {h.row.text: h for h in fuse(candidates, config, plan)}
        if factor == 1.0:
            assert all("work_side" not in h.explain for h in got.values())
            continue
        assert got[lowered].explain["work_side"] == 0.5
        assert got[lowered].score == pytest.approx(got["Signe likes green tea."].score * 0.5)
        # Both sides, or neither: nothing lowered.
        assert got["Signe works as a vet at Harbourside Hotels."].explain["work_side"] == 1.0
        assert got["Signe likes green tea."].explain["work_side"] == 1.0
    # Not a question about work (no @job): "career-high" asks no side of anyone's work.
    plan = plan_query("When did John have a career-high in assists?", FusionConfig())
    hits = fuse(candidates, FusionConfig(), plan)
    assert all("work_side" not in h.explain for h in hits)
