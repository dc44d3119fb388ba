"""The LangGraph store (engramdb.integrations.langgraph) on real LangGraph and real engramdb."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    PutOp,
    SearchItem,
    SearchOp,
)
from langgraph.store.memory import InMemoryStore

from engramdb import AsyncMemory, ConfigError, FilterError, Memory, MetadataError
from engramdb.embedders import LocalEmbedder
from engramdb.integrations.langgraph import EngramStore, translate_filter

ROOT = Path(__file__).resolve().parents[1]
QUIET = {"retrieval": {"context_messages": 0}}  # each item's keywords are its own text


@pytest.fixture
def memory(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[Memory]:
    with Memory(tmp_path / "lg.db", config=QUIET, embedder=embedder) as m:
        yield m


@pytest.fixture
def store(memory: Memory) -> EngramStore:
    return EngramStore(memory)


def _keys(items: list[SearchItem]) -> list[tuple[tuple[str, ...], str]]:
    return [(i.namespace, i.key) for i in items]


# -- put / get / update / delete -----------------------------------------------------------


def test_put_and_get_round_trip_the_value(store: EngramStore, memory: Memory) -> None:
    value = {
        "text": "I like green tea",
        "memory": "a field named like engramdb's own",
        "id": 7,
        "role": "user",
        "nested": {"a": [1, 2, {"b": None}]},
        "tags": ["x", "y"],
        "none": None,
        "ok": True,
        "ratio": 0.5,
    }
    store.put(("memories", "alice"), "k1", value)
    item = store.get(("memories", "alice"), "k1")
    assert isinstance(item, Item) and not isinstance(item, SearchItem)
    assert item.value == value
    assert (item.namespace, item.key) == (("memories", "alice"), "k1")
    assert item.created_at.tzinfo is not None and item.created_at == item.updated_at
    assert store.get(("memories", "alice"), "nope") is None
    assert store.get(("memories",), "k1") is None  # namespaces are exact for get
    assert store.get(("memories", "alice", "deeper"), "k1") is None

    # One item is one engramdb memory of the store's scope, its text from the value.
    [row] = memory.get_all(user_id="langgraph")["results"]
    assert row["memory"] == "I like green tea\na field named like engramdb's own"
    assert row["metadata"]["langgraph.key"] == "k1"
    assert row["metadata"]["langgraph.namespace"] == "memories.alice"
    assert row["metadata"]["value.nested"] == {"a": [1, 2, {"b": None}]}
    assert "agent_id" not in row


def test_put_of_an_existing_key_is_an_update_with_history_and_restore(
    store: EngramStore, memory: Memory
) -> None:
    ns = ("prefs", "alice")
    store.put(ns, "drink", {"text": "I drink tea", "since": 2020})
    first = store.get(ns, "drink")
    mid = store.memory_id(ns, "drink")
    assert first is not None and mid is not None

    store.put(ns, "drink", {"text": "I drink coffee now", "since": 2024})
    second = store.get(ns, "drink")
    assert second is not None and second.value == {"text": "I drink coffee now", "since": 2024}
    assert store.memory_id(ns, "drink") == mid  # the same memory, not a new one
    assert second.created_at == first.created_at and second.updated_at > first.updated_at
    assert len(memory.get_all(user_id="langgraph")["results"]) == 1

    history = memory.history(mid)
    assert [e["event"] for e in history] == ["ADD", "UPDATE"]
    assert history[1]["old_memory"] == "I drink tea"
    assert history[1]["new_memory"] == "I drink coffee now"
    assert history[1]["old_metadata"]["value.since"] == 2020
    assert history[1]["new_metadata"]["value.since"] == 2024

    # A put that changes nothing writes nothing.
    store.put(ns, "drink", {"text": "I drink coffee now", "since": 2024})
    assert len(memory.history(mid)) == 2
    # A put that changes only a non-text field updates the metadata only.
    store.put(ns, "drink", {"text": "I drink coffee now", "since": 2025})
    assert [e["event"] for e in memory.history(mid)] == ["ADD", "UPDATE", "UPDATE"]

    memory.restore(mid, version=1)
    restored = store.get(ns, "drink")
    assert restored is not None and restored.value == {"text": "I drink tea", "since": 2020}


def test_delete_and_put_none_are_soft_deletes(store: EngramStore, memory: Memory) -> None:
    ns = ("notes",)
    store.put(ns, "a", {"text": "note a"})
    store.put(ns, "b", {"text": "note b"})
    mid = store.memory_id(ns, "a")
    assert mid is not None
    store.delete(ns, "a")
    store.batch([PutOp(ns, "b", None)])
    assert store.get(ns, "a") is None and store.get(ns, "b") is None
    assert store.search(ns) == [] and store.search(ns, query="note") == []
    assert store.list_namespaces() == []
    store.delete(ns, "never-there")  # deleting a missing key is a no-op

    assert memory.history(mid)[-1]["event"] == "DELETE"
    memory.restore(mid)
    item = store.get(ns, "a")
    assert item is not None and item.value == {"text": "note a"}

    # A key put again after a delete is a new memory.
    store.put(ns, "b", {"text": "note b, again"})
    got = store.get(ns, "b")
    assert got is not None and got.value == {"text": "note b, again"}


def test_batch_runs_ops_in_order(store: EngramStore) -> None:
    ns = ("batch",)
    results = store.batch(
        [
            GetOp(ns, "k"),
            PutOp(ns, "k", {"text": "one"}),
            GetOp(ns, "k"),
            PutOp(ns, "k", {"text": "two"}),
            SearchOp(ns),
            PutOp(ns, "k", None),
            GetOp(ns, "k"),
            ListNamespacesOp(),
        ]
    )
    assert results[0] is None and results[1] is None
    assert isinstance(results[2], Item) and results[2].value == {"text": "one"}
    listed = results[4]
    assert isinstance(listed, list) and [i.value for i in listed] == [{"text": "two"}]  # type: ignore[union-attr]
    assert results[6] is None and results[7] == []


# -- search -------------------------------------------------------------------------------------


FACTS = [
    (("memories", "alice"), "diet", {"text": "I am vegetarian and allergic to peanuts", "n": 1}),
    (("memories", "alice"), "pet", {"text": "We adopted a cat called Miso", "n": 2}),
    (("memories", "alice"), "job", {"text": "I work as a nurse at night", "n": 3}),
    (("memories", "bob"), "sport", {"text": "Bob plays tennis every Sunday", "n": 4}),
    (("memories", "bob", "work"), "job", {"text": "Bob is a software engineer", "n": 5}),
    (("docs",), "api", {"text": "The REST API returns JSON", "n": 6, "kind": "doc"}),
]


@pytest.fixture
def filled(store: EngramStore) -> EngramStore:
    for ns, key, value in FACTS:
        store.put(ns, key, value)
    return store


def test_search_with_a_query_ranks_by_engramdb_score(filled: EngramStore) -> None:
    hits = filled.search(("memories",), query="what pet does alice have? a cat?", limit=3)
    assert hits[0].key == "pet" and hits[0].namespace == ("memories", "alice")
    assert len(hits) == 3 and all(isinstance(h, SearchItem) for h in hits)
    scores = [h.score or 0.0 for h in hits]
    assert all(isinstance(h.score, float) and 0.0 <= h.score <= 1.0 for h in hits)
    assert scores == sorted(scores, reverse=True)
    # offset pages through the same ranking
    everything = filled.search(("memories",), query="what pet does alice have? a cat?", limit=10)
    page = filled.search(("memories",), query="what pet does alice have? a cat?", limit=2, offset=1)
    assert _keys(page) == _keys(everything)[1:3]
    assert filled.search(("memories",), query="tennis", limit=0) == []


def test_search_without_a_query_lists_newest_first(filled: EngramStore) -> None:
    hits = filled.search(("memories",))
    assert [h.value["n"] for h in hits] == [5, 4, 3, 2, 1]
    assert all(h.score is None for h in hits)
    assert [h.value["n"] for h in filled.search(("memories",), limit=2, offset=1)] == [4, 3]
    assert [h.value["n"] for h in filled.search((), limit=100)] == [6, 5, 4, 3, 2, 1]


def test_namespace_prefix_search(filled: EngramStore) -> None:
    def ns_of(prefix: tuple[str, ...], query: str | None = None) -> set[tuple[str, ...]]:
        return {h.namespace for h in filled.search(prefix, query=query, limit=50)}

    assert ns_of(("memories", "bob")) == {("memories", "bob"), ("memories", "bob", "work")}
    assert ns_of(("memories", "bob", "work")) == {("memories", "bob", "work")}
    assert ns_of(("memories", "alice")) == {("memories", "alice")}
    assert ns_of(("memories",), "engineer") == {
        ("memories", "alice"),
        ("memories", "bob"),
        ("memories", "bob", "work"),
    }
    assert ns_of(("docs",), "engineer") == {("docs",)}
    assert ns_of(("memories", "carol")) == set()
    assert ns_of(("bob",)) == set()  # a prefix is anchored at the first level
    assert len(ns_of(())) == 4


def test_search_with_filters(filled: EngramStore) -> None:
    def ns_n(flt: dict[str, Any], query: str | None = None) -> list[int]:
        return sorted(h.value["n"] for h in filled.search((), query=query, filter=flt, limit=50))

    assert ns_n({"n": 3}) == [3]
    assert ns_n({"n": {"$eq": 3}}) == [3]
    assert ns_n({"n": {"$ne": 3}}) == [1, 2, 4, 5, 6]
    assert ns_n({"n": {"$gt": 4}}) == [5, 6]
    assert ns_n({"n": {"$gte": 4}}) == [4, 5, 6]
    assert ns_n({"n": {"$lt": 2}}) == [1]
    assert ns_n({"n": {"$lte": 2}}) == [1, 2]
    assert ns_n({"n": {"$gt": 1, "$lt": 4}}) == [2, 3]
    assert ns_n({"kind": "doc"}) == [6]
    assert ns_n({"kind": None}) == [1, 2, 3, 4, 5]  # None: the field is absent
    assert ns_n({"kind": {"$ne": "doc"}}) == [1, 2, 3, 4, 5]  # absent counts as not equal
    assert ns_n({"text": {"$gte": "I", "$lt": "J"}}) == [1, 3]  # strings order too
    assert ns_n({"n": {"$gte": 2}, "kind": "doc"}) == [6]
    assert ns_n({"missing": 1}) == []
    # a filter narrows a query search, and a query ranks within it
    hits = filled.search(("memories",), query="cat", filter={"n": {"$gte": 3}}, limit=10)
    assert sorted(h.value["n"] for h in hits) == [3, 4, 5]
    assert all(h.score is not None for h in hits)


def test_filters_agree_with_langgraphs_in_memory_store(filled: EngramStore) -> None:
    reference = InMemoryStore()
    for ns, key, value in FACTS:
        reference.put(ns, key, value)
    filters: list[dict[str, Any]] = [
        {"n": 2},
        {"n": {"$ne": 2}},
        {"n": {"$gt": 2, "$lte": 5}},
        {"kind": "doc", "n": {"$lt": 10}},
        {"text": "Bob plays tennis every Sunday"},
    ]
    for prefix in [(), ("memories",), ("memories", "bob")]:
        for flt in filters:
            want = sorted(_keys(reference.search(prefix, filter=flt, limit=50)))
            got = sorted(_keys(filled.search(prefix, filter=flt, limit=50)))
            assert got == want, (prefix, flt)


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        ({"nested": {"a": 1}}, "nested object"),
        ({"tags": ["x", "y"]}, "list or object"),
        ({"n": {"$in": [1, 2]}}, "operator '$in' is not supported"),
        ({"$or": [{"n": 1}, {"n": 2}]}, "no logical operators"),
        ({"n": {"$gt": True}}, "orders numbers or strings"),
        ({"n": {"$lt": None}}, "orders numbers or strings"),
        ({"n": {}}, "empty dict"),
        ({"n": {"$eq": 1, "a": 2}}, "nested object"),
        ({"n": float("nan")}, "not a finite number"),
        ({"n": 2**70}, "64-bit"),
        ({"n": {"$eq": {1, 2}}}, "not a JSON scalar"),
    ],
)
def test_filters_engramdb_cannot_express_are_refused(
    filled: EngramStore, flt: dict[str, Any], message: str
) -> None:
    with pytest.raises(FilterError, match=message.replace("$", r"\$")):
        filled.search(("memories",), filter=flt)
    with pytest.raises(ValueError, match=message.replace("$", r"\$")):  # FilterError is one
        filled.search(("memories",), query="tea", filter=flt)


def test_translate_filter_targets_value_fields() -> None:
    assert translate_filter({"a": 1, "b": {"$gte": 2, "$ne": 5}}) == [
        {"metadata.value.a": {"eq": 1}},
        {"metadata.value.b": {"gte": 2, "ne": 5}},
    ]
    assert translate_filter(None) == [] and translate_filter({}) == []


# -- the text of an item -------------------------------------------------------------------


def test_text_comes_from_index_fields_defaults_or_json(
    memory: Memory, embedder: LocalEmbedder
) -> None:
    store = EngramStore(memory, index={"fields": ["title", "body.parts[*]"], "dims": embedder.dim})
    store.put(("t",), "fields", {"title": "Soup", "body": {"parts": ["boil", "salt"]}, "x": 1})
    store.put(("t",), "per-put", {"title": "ignored", "summary": "Bread"}, index=["summary"])
    plain = EngramStore(memory, agent_id="plain")
    plain.put(("t",), "default", {"content": "from content", "other": "not this"})
    plain.put(("t",), "json", {"b": 2, "a": "x"})
    plain.put(("t",), "empty", {"text": "   "})

    def text(s: EngramStore, key: str) -> str:
        mid = s.memory_id(("t",), key)
        assert mid is not None
        row = memory.get(mid)
        assert row is not None
        return str(row["memory"])

    assert text(store, "fields") == "Soup\nboil\nsalt"
    assert text(store, "per-put") == "Bread"
    assert text(plain, "default") == "from content"
    assert text(plain, "json") == '{"a": "x", "b": 2}'
    assert text(plain, "empty") == '{"text": "   "}'

    # A value too long for a memory text is still kept whole; its text is cut.
    long = "word " * 10_000
    plain.put(("t",), "long", {"text": long})
    item = plain.get(("t",), "long")
    assert item is not None and item.value == {"text": long}
    assert len(text(plain, "long")) <= memory.config.limits.max_text_chars


def test_index_false_items_are_left_out_of_query_search_only(store: EngramStore) -> None:
    store.put(("docs",), "secret", {"text": "the launch code is banana"}, index=False)
    store.put(("docs",), "public", {"text": "bananas are yellow fruit"})
    assert [h.key for h in store.search(("docs",), query="banana launch code")] == ["public"]
    assert {h.key for h in store.search(("docs",))} == {"secret", "public"}
    assert store.get(("docs",), "secret") is not None
    # put again with indexing: now it is found by a query too
    store.put(("docs",), "secret", {"text": "the launch code is banana"})
    assert "secret" in [h.key for h in store.search(("docs",), query="banana launch code")]


# -- the same text under two keys -----------------------------------------------------------


def test_two_keys_with_the_same_text_are_two_items(store: EngramStore, memory: Memory) -> None:
    ns = ("memories", "alice")
    store.put(ns, "a", {"text": "I like tea", "n": 1})
    store.put(ns, "b", {"text": "I like tea", "n": 2})  # engramdb's dedup would say NONE
    store.put(("other",), "c", {"text": "i LIKE   tea", "n": 3})  # same hash after normalising
    a, b, c = store.get(ns, "a"), store.get(ns, "b"), store.get(("other",), "c")
    assert a is not None and b is not None and c is not None
    assert (a.value["n"], b.value["n"], c.value["n"]) == (1, 2, 3)
    ids = {store.memory_id(ns, "a"), store.memory_id(ns, "b"), store.memory_id(("other",), "c")}
    assert len(ids) == 3
    assert len(memory.get_all(user_id="langgraph")["results"]) == 3
    hits = store.search((), query="tea", limit=10)
    assert sorted(h.value["n"] for h in hits) == [1, 2, 3]

    # Updating a third key onto the same text, then back and forth, keeps them apart.
    store.put(ns, "d", {"text": "I like coffee", "n": 4})
    store.put(ns, "d", {"text": "I like tea", "n": 4})  # update -> DuplicateMemoryError inside
    d = store.get(ns, "d")
    assert d is not None and d.value == {"text": "I like tea", "n": 4}
    store.put(ns, "a", {"text": "I like tea", "n": 10})  # metadata-only change
    a = store.get(ns, "a")
    assert a is not None and a.value["n"] == 10

    # Deleting one leaves the others.
    store.delete(ns, "a")
    assert store.get(ns, "a") is None
    assert store.get(ns, "b") is not None and store.get(ns, "d") is not None
    store.put(ns, "a", {"text": "I like tea", "n": 11})
    a = store.get(ns, "a")
    assert a is not None and a.value["n"] == 11
    assert sorted(h.value["n"] for h in store.search(ns, limit=10)) == [2, 4, 11]


def test_same_text_as_a_memory_written_outside_the_store(
    store: EngramStore, memory: Memory
) -> None:
    memory.add("I like tea", user_id="langgraph", infer=False)
    store.put(("m",), "k", {"text": "I like tea"})
    item = store.get(("m",), "k")
    assert item is not None and item.value == {"text": "I like tea"}
    # The plain memory is not an item of the store.
    assert _keys(store.search((), limit=10)) == [(("m",), "k")]


# -- scopes ------------------------------------------------------------------------------------


def test_stores_with_different_scopes_do_not_see_each_other(memory: Memory) -> None:
    stores = {
        "default": EngramStore(memory),
        "alice": EngramStore(memory, user_id="alice"),
        "alice-coach": EngramStore(memory, user_id="alice", agent_id="coach"),
        "bob": EngramStore(memory, user_id="bob"),
    }
    for name, s in stores.items():
        s.put(("memories",), "same-key", {"text": f"a secret of {name}", "owner": name})
        s.put(("memories", name), "own", {"text": "I like tea", "owner": name})
    for name, s in stores.items():
        owners = {h.value["owner"] for h in s.search((), limit=100)}
        assert owners == {name}
        assert {h.value["owner"] for h in s.search((), query="secret tea", limit=100)} == {name}
        got = s.get(("memories",), "same-key")
        assert got is not None and got.value["owner"] == name
        assert s.list_namespaces() == [("memories",), ("memories", name)]
    assert stores["alice-coach"].agent_id == "coach" and stores["alice"].agent_id is None
    # The same item in alice's store with an agent, then in hers without: engramdb's
    # dedup of the agent-less scope sees the agent's memory; both stay apart.
    stores["alice-coach"].put(("x",), "k", {"text": "shared words", "owner": "alice-coach"})
    stores["alice"].put(("x",), "k", {"text": "shared words", "owner": "alice"})
    for name in ("alice", "alice-coach"):
        got = stores[name].get(("x",), "k")
        assert got is not None and got.value["owner"] == name
        assert {h.value["owner"] for h in stores[name].search(("x",), query="shared")} == {name}
    # engramdb's own scopes hold them
    assert {r["metadata"]["value.owner"] for r in memory.get_all(user_id="bob")["results"]} == {
        "bob"
    }
    # A scoped view gives its scope to the store.
    view = memory.scoped(user_id="alice", agent_id="coach")
    viewed = EngramStore(view)
    assert (viewed.user_id, viewed.agent_id) == ("alice", "coach")
    assert {h.value["owner"] for h in viewed.search((), limit=100)} == {"alice-coach"}


def test_default_engramdb_config_works(tmp_path: Path, embedder: LocalEmbedder) -> None:
    with Memory(tmp_path / "plain.db", embedder=embedder) as m:
        s = EngramStore(m)
        s.put(("a",), "1", {"text": "The sky is blue"})
        s.put(("a",), "2", {"text": "The sky is blue"})
        s.put(("a",), "3", {"text": "Grass is green"})
        assert s.search(("a",), query="what colour is grass?")[0].key == "3"
        assert len(s.search(("a",))) == 3


# -- list_namespaces ---------------------------------------------------------------------------


NAMESPACES = [
    ("a", "b", "c"),
    ("a", "b", "d", "e"),
    ("a", "b", "d", "i"),
    ("a", "b", "f"),
    ("a", "c", "f"),
    ("x",),
    ("x", "y", "v1"),
]


def test_list_namespaces_matches_langgraphs_in_memory_store(store: EngramStore) -> None:
    reference = InMemoryStore()
    for i, ns in enumerate(NAMESPACES):
        for s in (store, reference):
            s.put(ns, f"k{i}", {"text": f"item {i}"})
            s.put(ns, f"j{i}", {"text": f"other item {i}"})
    cases: list[dict[str, Any]] = [
        {},
        {"prefix": ("a",)},
        {"prefix": ("a", "b")},
        {"prefix": ("a", "b"), "max_depth": 3},
        {"max_depth": 1},
        {"max_depth": 2, "limit": 2},
        {"max_depth": 2, "limit": 2, "offset": 1},
        {"suffix": ("f",)},
        {"suffix": ("*", "f")},
        {"prefix": ("a", "*", "f")},
        {"prefix": ("*", "b"), "suffix": ("e",)},
        {"prefix": ("x",), "suffix": ("v1",)},
        {"prefix": ("nope",)},
        {"limit": 3, "offset": 2},
        {"offset": 100},
    ]
    for case in cases:
        assert store.list_namespaces(**case) == reference.list_namespaces(**case), case
    op = ListNamespacesOp(
        match_conditions=(
            MatchCondition("prefix", ("a",)),
            MatchCondition("prefix", ("a", "c")),
        )
    )
    assert store.batch([op]) == reference.batch([op])


def test_list_namespaces_pages_through_many_items(store: EngramStore) -> None:
    ops = [PutOp(("bulk", str(i % 7)), f"k{i}", {"text": f"bulk item {i}"}) for i in range(520)]
    store.batch(ops)
    assert store.list_namespaces(prefix=("bulk",)) == [("bulk", str(i)) for i in range(7)]


# -- bad input -------------------------------------------------------------------------------


def test_bad_input_is_refused_clearly(store: EngramStore, memory: Memory) -> None:
    with pytest.raises(NotImplementedError, match="TTL"):
        store.put(("a",), "k", {"text": "x"}, ttl=5)
    with pytest.raises(NotImplementedError, match="TTL"):
        store.batch([PutOp(("a",), "k", {"text": "x"}, ttl=5.0)])
    with pytest.raises(InvalidNamespaceError):
        store.put(("langgraph",), "k", {"text": "x"})
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("langgraph", "x"), "k", {"text": "x"})])
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp((), "k", {"text": "x"})])
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(("a.b",), "k", {"text": "x"})])  # "." would fake ("a", "b")
    with pytest.raises(InvalidNamespaceError):
        store.batch([SearchOp(("a.b",))])
    with pytest.raises(MetadataError, match="JSON-serialisable"):
        store.put(("a",), "k", {"when": object()})
    with pytest.raises(MetadataError, match="non-string key"):
        store.put(("a",), "k", {1: "x"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="unknown LangGraph store operation"):
        store.batch(["not an op"])  # type: ignore[list-item]
    assert memory.get_all(user_id="langgraph")["results"] == []
    with pytest.raises(ConfigError, match="embed"):
        EngramStore(memory, index={"dims": 384, "embed": lambda texts: [[0.0] * 384]})
    with pytest.raises(ConfigError, match="dims"):
        EngramStore(memory, index={"dims": 3})
    with pytest.raises(ConfigError, match="fields"):
        EngramStore(memory, index={"fields": "text"})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="Memory or AsyncMemory"):
        EngramStore(InMemoryStore())  # type: ignore[arg-type]
    for bad in ("", "  "):
        with pytest.raises(ValueError, match="user_id"):
            EngramStore(memory, user_id=bad)


# -- async ------------------------------------------------------------------------------------


def test_async_methods_on_a_memory_run_in_worker_threads(memory: Memory) -> None:
    store = EngramStore(memory)
    threads: set[int] = set()
    real_search = memory.search

    def spy(*args: Any, **kwargs: Any) -> Any:
        threads.add(threading.get_ident())
        return real_search(*args, **kwargs)

    memory.search = spy  # type: ignore[method-assign]

    async def main() -> None:
        await store.aput(("a", "b"), "k1", {"text": "The train leaves at nine"})
        await store.aput(("a", "c"), "k2", {"text": "The train leaves at nine"})
        got = await store.aget(("a", "b"), "k1")
        assert got is not None and got.value == {"text": "The train leaves at nine"}
        hits = await store.asearch(("a",), query="when does the train leave?")
        assert sorted(h.key for h in hits) == ["k1", "k2"]
        assert await store.alist_namespaces(prefix=("a",)) == [("a", "b"), ("a", "c")]
        await store.adelete(("a", "b"), "k1")
        assert await store.aget(("a", "b"), "k1") is None
        assert await store.amemory_id(("a", "c"), "k2") is not None

    asyncio.run(main())
    assert threads and threading.get_ident() not in threads


def test_abatch_on_an_async_memory(tmp_path: Path, embedder: LocalEmbedder) -> None:
    async def main() -> None:
        async with AsyncMemory(tmp_path / "async.db", config=QUIET, embedder=embedder) as am:
            store = EngramStore(am, user_id="async-user")
            ns = ("memories", "x")
            results = await store.abatch(
                [
                    PutOp(ns, "a", {"text": "I like tea", "n": 1}),
                    PutOp(ns, "b", {"text": "I like tea", "n": 2}),
                    PutOp(ns, "c", {"text": "My bike is red", "n": 3}),
                    GetOp(ns, "a"),
                    SearchOp(("memories",), query="bicycle colour", limit=1),
                    SearchOp(("memories",), filter={"n": {"$lte": 2}}),
                    ListNamespacesOp(),
                ]
            )
            assert results[:3] == [None, None, None]
            assert isinstance(results[3], Item) and results[3].value["n"] == 1
            assert _keys(results[4]) == [(ns, "c")]  # type: ignore[arg-type]
            assert sorted(_keys(results[5])) == [(ns, "a"), (ns, "b")]  # type: ignore[arg-type]
            assert results[6] == [ns]
            await store.aput(ns, "a", {"text": "I like green tea", "n": 1})
            mid = await store.amemory_id(ns, "a")
            assert mid is not None
            assert [e["event"] for e in await am.history(mid)] == ["ADD", "UPDATE"]
            # Concurrent first puts of one key make one memory.
            await asyncio.gather(
                *(store.aput(ns, "race", {"text": f"version {i}"}) for i in range(5))
            )
            rows = (await am.get_all(user_id="async-user", filters={"value.text": "*"}))["results"]
            assert sum(r["metadata"]["langgraph.key"] == "race" for r in rows) == 1
            # A blocking call on the loop's own thread is refused, not a deadlock.
            with pytest.raises(RuntimeError, match="block the loop"):
                store.get(ns, "a")

    asyncio.run(main())


def test_a_sync_call_on_an_async_memory_needs_a_running_loop(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    am = AsyncMemory(tmp_path / "async.db", embedder=embedder)
    try:
        store = EngramStore(am)
        with pytest.raises(RuntimeError, match="worker thread"):
            store.put(("a",), "k", {"text": "x"})
    finally:
        asyncio.run(am.close())


# -- inside a graph ----------------------------------------------------------------------------


class _State(TypedDict, total=False):
    user: str
    say: str
    recalled: list[str]


def _remember_and_recall(state: _State, *, store: BaseStore) -> _State:
    ns = ("memories", state["user"])
    recalled = [h.value["text"] for h in store.search(ns, query=state["say"], limit=1)]
    store.put(ns, f"k{len(store.search(ns, limit=100))}", {"text": state["say"]})
    return {"recalled": recalled}


async def _aremember_and_recall(state: _State, *, store: BaseStore) -> _State:
    ns = ("memories", state["user"])
    recalled = [h.value["text"] for h in await store.asearch(ns, query=state["say"], limit=1)]
    count = len(await store.asearch(ns, limit=100))
    await store.aput(ns, f"k{count}", {"text": state["say"]})
    return {"recalled": recalled}


def _graph(node: Any, store: BaseStore) -> Any:
    g = StateGraph(_State)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    return g.compile(store=store)


def test_a_graph_reads_and_writes_through_the_injected_store(store: EngramStore) -> None:
    app = _graph(_remember_and_recall, store)
    assert app.invoke({"user": "ann", "say": "My favourite colour is teal"})["recalled"] == []
    app.invoke({"user": "ann", "say": "I live in Lisbon"})
    out = app.invoke({"user": "ann", "say": "Which city do I live in?"})
    assert out["recalled"] == ["I live in Lisbon"]
    assert app.invoke({"user": "ben", "say": "Which city do I live in?"})["recalled"] == []


def test_graphs_run_with_ainvoke_on_an_async_memory(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    async def main() -> None:
        async with AsyncMemory(tmp_path / "g.db", config=QUIET, embedder=embedder) as am:
            store = EngramStore(am)
            for node in (_aremember_and_recall, _remember_and_recall):  # async, then sync node
                user = node.__name__
                app = _graph(node, store)
                await app.ainvoke({"user": user, "say": "I live in Lisbon"})
                await app.ainvoke({"user": user, "say": "I have two sisters"})
                out = await app.ainvoke({"user": user, "say": "Which city do I live in?"})
                assert out["recalled"] == ["I live in Lisbon"]

    asyncio.run(main())


def test_the_example_script_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "langgraph_store.py"), str(tmp_path / "ex.db")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "alice: What should I cook for dinner tonight?\n" in out
    # alice's question recalls her diet first; bob recalls nothing of hers.
    after = out.split("alice: What should I cook for dinner tonight?\n", 1)[1]
    assert after.startswith("  recalled: I am vegetarian and allergic to peanuts\n")
    assert "bob: What should I cook for dinner tonight?\n  recalled: (nothing yet)\n" in out
    assert "alice/diet is now: I am vegan and allergic to peanuts" in out
    assert "history: ADD I am vegetarian and allergic to peanuts" in out
    assert "history: UPDATE I am vegan and allergic to peanuts" in out
    assert "namespaces: [('memories', 'alice'), ('memories', 'bob')]" in out
