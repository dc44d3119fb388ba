"""Erasure from provenance: a purge leaves nothing of the purged text, on either backend.

Each test plants a distinctive word, purges, and then looks for every case
variant, token and lemma of it — through the library (search by keyword,
entity links) and under it (the SQLite file, WAL and free pages; every live
and dead PostgreSQL tuple: tests/storage.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engramdb import AsyncMemory, ExtractionError, Memory
from engramdb.embedders import LocalEmbedder
from engramdb.errors import ConflictError
from engramdb.llms.scripted import ScriptedLLM
from engramdb.stores.base import NewMemory, NewMessage, Scope
from engramdb.stores.sqlite import SQLiteStore
from engramdb_bench._probes import run_purge_probes
from storage import holds_any, raw_count, variants

SECRET = "QX7781923"


def _config(mem: Memory, request: pytest.FixtureRequest) -> dict[str, Any]:
    if isinstance(mem.store, SQLiteStore):
        return {"vector_store": {"provider": "sqlite", "config": {"path": str(mem.store.path)}}}
    return {
        "vector_store": {"provider": "postgres", "config": request.getfixturevalue("pg_config")}
    }


def _second(
    mem: Memory, request: pytest.FixtureRequest, embedder: LocalEmbedder, **kw: Any
) -> Memory:
    """Another Memory (its own connections and caches) on the same file or schema."""
    if isinstance(mem.store, SQLiteStore):
        return Memory(mem.store.path, embedder=embedder, **kw)
    return Memory(config=_config(mem, request), embedder=embedder, **kw)


def keyword_hits(m: Memory, query: str, **scope: str) -> list[str]:
    """Memories the query finds by keyword (BM25 > 0) or by entity, whatever their rank."""
    found = m.search(query, explain=True, top_k=50, **scope)["results"]
    return [
        r["memory"]
        for r in found
        if r["score_details"]["bm25"] > 0 or r["score_details"]["entities"]
    ]


def _passport(m: Memory, user: str = "u") -> tuple[str, str]:
    # One conversation (one run), one message an add: each borrows the words of the
    # message before it (expand.same_conversation).
    chat = {"user_id": user, "run_id": "chat-1"}
    m.add("hello, I have something to tell you", **chat)
    mid = m.add(f"my passport number is {SECRET}", **chat)["results"][0]["id"]
    neighbour = m.add("that is the one I travel with abroad", **chat)["results"][0]["id"]
    return mid, neighbour


def test_purge_reindexes_the_next_memory(mem: Memory) -> None:
    mid, neighbour = _passport(mem)
    # The neighbour borrowed the secret as a context term: found by it before the purge.
    assert "that is the one I travel with abroad" in keyword_hits(mem, SECRET, user_id="u")
    assert mem.purge(mid)["purged"] == 1
    assert keyword_hits(mem, SECRET, user_id="u") == []
    assert keyword_hits(mem, SECRET.lower(), user_id="u") == []
    # Still found by its own words, and by the context words that stay.
    assert keyword_hits(mem, "travel abroad", user_id="u") == [
        "that is the one I travel with abroad"
    ]
    assert mem.get(neighbour) is not None
    assert holds_any(mem.store, variants(SECRET)) == []
    assert raw_count(mem.store, "memory_context") == 0  # the purged turn's and the neighbour's


def test_purge_of_a_scope_reindexes_memories_outside_it(mem: Memory) -> None:
    mem.add(
        [
            {"role": "system", "content": "internal note Plimsoll9921"},
            {"role": "user", "content": "my boat is the Plimsoll9921"},
        ],
        user_id="u",
        agent_id="a",
        run_id="r1",
    )
    # Same user and run, no agent: outside the scope {u, a}; its context is the run's
    # last message, which lies inside it.
    mem.add("she sails well in a storm", user_id="u", run_id="r1")
    mem.add("unrelated", user_id="other")
    assert sorted(keyword_hits(mem, "Plimsoll9921", user_id="u")) == [
        "my boat is the Plimsoll9921",
        "she sails well in a storm",
    ]
    assert mem.purge(user_id="u", agent_id="a")["purged"] == 1
    assert keyword_hits(mem, "Plimsoll9921", user_id="u") == []
    assert [r["memory"] for r in mem.get_all(user_id="u")["results"]] == [
        "she sails well in a storm"
    ]
    assert holds_any(mem.store, variants("Plimsoll9921")) == []


def test_purge_removes_entities_no_memory_uses(mem: Memory) -> None:
    mid = mem.add("I met Dr. Zorblatt in Quexton", user_id="u", infer=False)["results"][0]["id"]
    mem.add("Quexton is lovely in spring", user_id="u", infer=False)
    # An update leaves the entity of the old text unlinked; the purge clears it too.
    old = mem.add("I saw Vorbix yesterday", user_id="u", infer=False)["results"][0]["id"]
    mem.update(old, "I saw nobody yesterday")
    assert mem.purge(mid)["purged"] == 1
    assert mem.purge(old)["purged"] == 1
    assert holds_any(mem.store, variants("Zorblatt")) == []
    assert holds_any(mem.store, variants("Vorbix")) == []
    # Quexton is still named by a memory that stays: kept, and still found by it.
    assert holds_any(mem.store, ["quexton"]) != []
    assert keyword_hits(mem, "Quexton", user_id="u") == ["Quexton is lovely in spring"]


def test_purge_removes_failure_records_of_its_messages(
    mem: Memory, request: pytest.FixtureRequest, embedder: LocalEmbedder
) -> None:
    llm = ScriptedLLM(["not json Crumhorn7731", "still not json Crumhorn7731"])
    with _second(mem, request, embedder, llm=llm) as m:
        with pytest.raises(ExtractionError) as info:
            m.add("my crumhorn serial is Crumhorn7731", user_id="u")
        llm.add(
            {
                "memory": [
                    {
                        "text": "User's crumhorn serial is Crumhorn7731",
                        "attributed_to": "user",
                        "linked_memory_ids": [],
                    }
                ]
            }
        )
        mid = m.retry_extraction(info.value.failure_id)["results"][0]["id"]
        assert len(m.failures(user_id="u", include_resolved=True)) == 1
        # An unresolved failure of another scope, and one of the purged scope.
        llm.add("garbage Kettlewick", "garbage Kettlewick")
        with pytest.raises(ExtractionError):
            m.add("remember Kettlewick", user_id="gone")
        llm.add("junk", "junk")
        with pytest.raises(ExtractionError):
            m.add("keep this failure", user_id="stay")
        assert m.purge(mid)["purged"] == 1
        assert m.failures(user_id="u", include_resolved=True) == []
        assert m.purge(user_id="gone")["purged"] == 0
        assert m.failures(user_id="gone", include_resolved=True) == []
        assert len(m.failures(user_id="stay")) == 1
        assert holds_any(m.store, variants("Crumhorn7731") + variants("Kettlewick")) == []


def test_purge_erases_every_message_of_a_repeat(mem: Memory) -> None:
    mid = mem.add("my alarm code is Quokka5518", user_id="u")["results"][0]["id"]
    again = mem.add("my alarm code is Quokka5518", user_id="u")["results"][0]
    assert (again["id"], again["memory"], again["event"]) == (
        mid,
        "my alarm code is Quokka5518",
        "NONE",
    )
    assert mem.purge(mid)["purged"] == 1
    assert raw_count(mem.store, "messages") == 0
    assert holds_any(mem.store, variants("Quokka5518")) == []


def test_a_warm_process_forgets_purged_terms(
    mem: Memory, request: pytest.FixtureRequest, embedder: LocalEmbedder
) -> None:
    mid, _ = _passport(mem)
    with _second(mem, request, embedder) as other:
        # Warm: its keyword cache holds the neighbour with the borrowed term.
        assert keyword_hits(other, SECRET, user_id="u") != []
        assert mem.purge(mid)["purged"] == 1
        assert keyword_hits(other, SECRET, user_id="u") == []
        assert keyword_hits(other, "travel abroad", user_id="u") == [
            "that is the one I travel with abroad"
        ]
        # And the other way round: a purge by the second, the first warm.
        again = other.add(f"my new passport is {SECRET}", user_id="u")["results"][0]["id"]
        other.add("it is valid for ten years", user_id="u")
        assert keyword_hits(mem, SECRET, user_id="u") != []
        other.purge(again)
        assert keyword_hits(mem, SECRET, user_id="u") == []
    assert holds_any(mem.store, variants(SECRET)) == []


def test_a_write_between_plan_and_purge_is_planned_again(mem: Memory) -> None:
    store: Any = mem.store
    mid, _ = _passport(mem)
    plan = store.plan_purge(memory_id=mid)
    secret_message = next(
        m.rowid for m in store.recent_messages(Scope("u"), 5) if SECRET in m.content
    )
    dim = store.bound_embedder()[1]
    vec = np.ones(dim, dtype=np.float32) / np.sqrt(dim)
    late = NewMemory(
        id="late", text="late words", hash="late", embedding=vec,
        terms=f"late word {SECRET.lower()}", context_rowids=[secret_message],
    )  # fmt: skip
    store.add([late], [], Scope("u"), "t")
    with pytest.raises(ConflictError):
        store.apply_purge(plan, {r.rowid: "x" for r in plan.reindex})
    assert store.get(mid) is not None  # nothing written
    assert store.purge(memory_id=mid) == 1
    assert holds_any(store, variants(SECRET)) == []
    # An add that borrows from a message purged since it read it is refused.
    with pytest.raises(ConflictError):
        store.add(
            [
                NewMemory(
                    id="later",
                    text="later",
                    hash="later",
                    embedding=vec,
                    terms="later",
                    context_rowids=[secret_message],
                )
            ],
            [],
            Scope("u"),
            "t",
        )


def test_verbatim_add_records_its_context(mem: Memory) -> None:
    chat = {"user_id": "u", "run_id": "c1"}
    mem.add([{"role": "user", "content": "one"}, {"role": "user", "content": "two"}], **chat)
    mem.add("three", **chat)
    # "two" borrows from "one" (same add), "three" from "two" (stored before, same run).
    assert raw_count(mem.store, "memory_context") == 2
    # A fact added on its own, without a run, is no conversation: it borrows nothing.
    mem.add("four", user_id="u")
    assert raw_count(mem.store, "memory_context") == 2
    store: Any = mem.store
    assert all(m.rowid is not None for m in store.recent_messages(Scope("u"), 5))
    assert [NewMessage("user", "x", rowid=1)] == [NewMessage("user", "x")]


def test_async_purge_erases_too(
    mem: Memory, request: pytest.FixtureRequest, embedder: LocalEmbedder
) -> None:
    mid, _ = _passport(mem)

    async def run() -> None:
        if isinstance(mem.store, SQLiteStore):
            am = AsyncMemory(mem.store.path, embedder=embedder)
        else:
            am = AsyncMemory(config=_config(mem, request), embedder=embedder)
        async with am:
            assert (await am.purge(mid))["purged"] == 1
            found = await am.search(SECRET, user_id="u", explain=True)
            assert [r for r in found["results"] if r["score_details"]["bm25"] > 0] == []

    asyncio.run(run())
    assert holds_any(mem.store, variants(SECRET)) == []


def test_purge_probes_find_nothing(
    tmp_path: Path, embedder: LocalEmbedder, request: pytest.FixtureRequest
) -> None:
    pg_url = request.getfixturevalue("pg_server").url
    result = run_purge_probes(tmp_path, pg_url=pg_url, embedder=embedder)
    assert result["backend"] == "sqlite+postgres"
    assert result["planted"] >= 20
    assert all(p["seen_before"] for p in result["places"]), result["details"]
    assert result["found_after"] == 0, result["details"]
