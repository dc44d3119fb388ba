"""The Store contract: every behaviour of the store port, unchanged on every backend.

The ``store`` fixture runs each test on SQLite (a temporary file) and on
PostgreSQL (a fresh schema of the session's server, tests/pg.py). A new
backend is done when this suite passes on it. Vectors here are small and
hand-made (dimension 8), so the tests say exactly what must rank first.
"""

from __future__ import annotations

import contextlib
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engramdb.core.bm25 import BM25Index
from engramdb.core.filters import evaluate, parse_filters
from engramdb.errors import (
    ConflictError,
    DuplicateMemoryError,
    EmbedderMismatchError,
    ImportFormatError,
    MemoryNotFoundError,
    StoreError,
    VersionNotFoundError,
)
from engramdb.stores import Store, make_store
from engramdb.stores.base import MemoryRow, NewMemory, NewMessage, Scope
from engramdb.stores.postgres import PostgresStore
from engramdb.stores.sqlite import SQLiteStore
from storage import raw_count

DIM = 8
MODEL = "test/model-8"


def vec(*hot: float, seed: int | None = None) -> np.ndarray[Any, np.dtype[np.float32]]:
    """A unit vector: the given leading components (or a seeded random one)."""
    if seed is not None:
        v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    else:
        v = np.zeros(DIM, np.float32)
        v[: len(hot)] = hot
    return (v / np.linalg.norm(v)).astype(np.float32)


def new(
    text: str,
    v: np.ndarray[Any, Any] | None = None,
    *,
    terms: str | None = None,
    **kw: Any,
) -> NewMemory:
    return NewMemory(
        id=kw.pop("id", str(uuid.uuid4())),
        text=text,
        hash=kw.pop("hash", text.lower()),
        embedding=vec(seed=abs(hash(text)) % 10_000) if v is None else v,
        terms=text.lower() if terms is None else terms,
        **kw,
    )


def open_store(backend: str, request: pytest.FixtureRequest, path: Path) -> Store:
    if backend == "sqlite":
        return make_store("sqlite", {"path": str(path)}, path)
    return make_store("postgres", request.getfixturevalue("pg_config"), path)


@pytest.fixture
def store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = open_store(backend, request, tmp_path / "contract.db")
    s.bind_embedder(MODEL, DIM)
    yield s
    s.close()


@pytest.fixture
def bare(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """A store with no embedder bound yet."""
    s = open_store(backend, request, tmp_path / "bare.db")
    yield s
    s.close()


U = Scope(user_id="u")


def add1(store: Store, text: str, scope: Scope = U, **kw: Any) -> str:
    out = store.add([new(text, **kw)], [], scope, "test")
    return out[0].id


# -- binding -----------------------------------------------------------------------------


def test_embedder_binding(bare: Store) -> None:
    assert bare.bound_embedder() is None
    assert bare.vector_search(U, None, vec(1), 3) == []
    assert bare.candidates(U, None, vec(1), ["x"], [], 5) == []
    bare.bind_embedder(MODEL, DIM)
    bare.bind_embedder(MODEL, DIM)
    assert bare.bound_embedder() == (MODEL, DIM)
    with pytest.raises(EmbedderMismatchError):
        bare.bind_embedder("other/model", DIM)
    with pytest.raises(EmbedderMismatchError):
        bare.bind_embedder(MODEL, DIM + 1)


# -- add, dedup, attach ---------------------------------------------------------------------


def test_add_stores_every_field(store: Store) -> None:
    out = store.add(
        [
            new(
                "I like green tea",
                actor_id="ann",
                role="user",
                attributed_to="ann",
                memory_type="fact",
                metadata={"topic": "drinks", "n": 2, "tags": ["a", 1, True], "x": None},
                observed_at="2024-05-01T10:00:00.000000+00:00",
                expires_at="2099-01-01T00:00:00.000000+00:00",
            )
        ],
        [],
        Scope("u", "agent", "run"),
        "tester",
    )
    (outcome,) = out
    assert outcome.event == "ADD" and outcome.memory == "I like green tea"
    assert outcome.history is not None and outcome.history.version == 1
    row = store.get(outcome.id)
    assert row is not None
    assert (row.user_id, row.agent_id, row.run_id) == ("u", "agent", "run")
    assert (row.actor_id, row.role, row.attributed_to, row.memory_type) == (
        "ann",
        "user",
        "ann",
        "fact",
    )
    assert row.metadata == {"topic": "drinks", "n": 2, "tags": ["a", 1, True], "x": None}
    assert row.observed_at == "2024-05-01T10:00:00.000000+00:00"
    assert row.expires_at == "2099-01-01T00:00:00.000000+00:00"
    assert row.created_at == row.updated_at == outcome.history.created_at
    assert row.created_at.endswith("+00:00") and len(row.created_at) == 32
    assert row.deleted_at is None and row.version == 1
    assert row.run_ids == [] and row.agent_ids == [] and row.linked_ids == []
    assert store.count() == 1
    [event] = store.history(outcome.id)
    assert event.event == "ADD" and event.actor == "tester" and event.id == outcome.history.id
    assert event.new_metadata == row.metadata


def test_repeats_are_none_and_new_sessions_attach(store: Store) -> None:
    first = store.add([new("same fact")], [], Scope("u", run_id="r1"), "t")[0]
    again = store.add([new("same fact")], [], Scope("u", run_id="r1"), "t")[0]
    assert (again.event, again.id, again.history) == ("NONE", first.id, None)
    attached = store.add([new("same fact")], [], Scope("u", run_id="r2"), "t")[0]
    assert attached.event == "NONE" and attached.id == first.id
    assert attached.history is not None and attached.history.event == "ATTACH"
    assert attached.history.reason == "seen again in run_id=r2"
    row = store.get(first.id)
    assert row is not None and row.run_ids == ["r2"] and row.agent_ids == []
    # attached sessions are part of the scope
    assert [r.id for r in store.list_memories(Scope("u", run_id="r2"), None, limit=10)] == [
        first.id
    ]
    # an agent of u cannot see u's agent-less memory: its repeat is a new memory,
    # and the hidden one gets nothing attached
    agent = store.add([new("same fact")], [], Scope("u", "a2", "r3"), "t")[0]
    assert agent.event == "ADD" and agent.id != first.id
    assert store.list_memories(Scope(agent_id="a2"), None, limit=10)[0].id == agent.id
    # another owner holds its own copy
    other = store.add([new("same fact")], [], Scope("v"), "t")[0]
    assert other.event == "ADD" and other.id not in (first.id, agent.id)
    assert store.count() == 3
    assert [e.event for e in store.history(first.id)] == ["ADD", "ATTACH"]
    # u sees both of its copies; a repeat at u's level goes to its own partition's
    again_u = store.add([new("same fact")], [], Scope("u", run_id="r4"), "t")[0]
    assert again_u.id == first.id


def test_a_wider_caller_dedups_against_what_it_sees(store: Store) -> None:
    coach = store.add([new("likes tea")], [], Scope("u", "coach", "r1"), "t")[0]
    # u (any agent) sees coach's memory: a repeat attaches the run there
    wide = store.add([new("likes tea")], [], Scope("u", run_id="r2"), "t")[0]
    assert (wide.event, wide.id) == ("NONE", coach.id)
    assert wide.history is not None and wide.history.reason == "seen again in run_id=r2"
    assert store.existing_hashes(Scope("u"), ["likes tea"]) == {"likes tea"}
    # ...but a caller bound to another agent, or to one run, does not
    assert store.existing_hashes(Scope("u", "doctor"), ["likes tea"]) == set()
    assert store.existing_hashes(Scope("u", run_id="r9"), ["likes tea"]) == set()
    bound = store.add(
        [new("likes tea")], [], Scope("u", run_id="r9"), "t", visible=Scope("u", run_id="r9")
    )[0]
    assert bound.event == "ADD" and bound.id != coach.id
    row = store.get(coach.id)
    assert row is not None and row.run_ids == ["r2"]


def test_repeat_within_one_batch_and_order_of_outcomes(store: Store) -> None:
    batch = [new("zeta"), new("alpha"), new("Zeta", hash="zeta"), new("mid")]
    out = store.add(batch, [], U, "t")
    assert [o.event for o in out] == ["ADD", "ADD", "NONE", "ADD"]
    assert [o.memory for o in out] == ["zeta", "alpha", "zeta", "mid"]
    assert out[2].id == out[0].id


def test_dedup_matches_what_the_scope_lists(store: Store) -> None:
    a = store.add([new("x")], [], Scope(agent_id="a", run_id="r"), "t")[0]
    b = store.add([new("x")], [], Scope(agent_id="a", run_id="r2"), "t")[0]
    assert b.id == a.id and b.history is not None
    # a run-only scope lists every memory of the run, so it repeats a's
    c = store.add([new("x")], [], Scope(run_id="r"), "t")[0]
    assert c.event == "NONE" and c.id == a.id
    d = store.add([new("x")], [], Scope(run_id="r3"), "t")[0]
    assert d.event == "ADD" and d.id != a.id
    assert store.existing_hashes(Scope(agent_id="a"), ["x", "y"]) == {"x"}
    assert store.existing_hashes(Scope(run_id="r"), ["x"]) == {"x"}
    assert store.existing_hashes(Scope(user_id="a"), ["x"]) == set()
    assert store.existing_hashes(Scope(agent_id="a"), []) == set()


def test_skipped_embedding_of_a_missing_memory_is_a_conflict(store: Store) -> None:
    empty = new("not stored", np.empty(0, np.float32))
    with pytest.raises(ConflictError):
        store.add([empty], [NewMessage("user", "not stored")], U, "t")
    assert store.count() == 0
    assert raw_count(store, "messages") == 0
    # a skipped embedding of a live memory is a plain repeat
    mid = add1(store, "stored")
    out = store.add([new("stored", np.empty(0, np.float32))], [], U, "t")
    assert out[0].id == mid and out[0].event == "NONE"


def test_attach_session(store: Store) -> None:
    mid = add1(store, "fact", Scope("u", run_id="r1"))
    event = store.attach_session(mid, Scope("u", run_id="r9"), "llm")
    assert event is not None and event.event == "ATTACH" and event.actor == "llm"
    assert store.attach_session(mid, Scope("u", run_id="r9"), "llm") is None
    assert store.attach_session(mid, Scope("u", run_id="r1"), "llm") is None
    with pytest.raises(MemoryNotFoundError):
        store.attach_session("missing", U, "llm")


# -- messages, sources, failures -------------------------------------------------------------


def test_messages_and_recent_messages(store: Store) -> None:
    msgs = [
        NewMessage("user", "hello there", "ann", "2024-01-01T00:00:00.000000+00:00"),
        NewMessage("assistant", "hi ann"),
        NewMessage("user", "bye"),
    ]
    store.add([new("m1", source_messages=[0, 2, 7])], msgs, Scope("u", run_id="r"), "t")
    store.add([], [NewMessage("user", "other run")], Scope("u", run_id="r2"), "t")
    recent = store.recent_messages(Scope("u", run_id="r"), 2)
    assert [(m.role, m.content) for m in recent] == [("assistant", "hi ann"), ("user", "bye")]
    everything = store.recent_messages(U, 10)
    assert [m.content for m in everything] == ["hello there", "hi ann", "bye", "other run"]
    assert everything[0].name == "ann"
    assert everything[0].observed_at == "2024-01-01T00:00:00.000000+00:00"
    assert store.recent_messages(Scope("nobody"), 5) == []
    assert raw_count(store, "memory_sources") == 2


def test_failures_are_kept_and_resolved(store: Store) -> None:
    scope = Scope("u", run_id="r")
    fid = store.keep_failed(scope, [NewMessage("user", "I moved to Oslo")], "bad reply", "{oops")
    assert store.failure(999_999) is None
    got = store.failure(fid)
    assert got is not None
    fscope, messages, resolved = got
    assert fscope == scope and not resolved
    assert [m.content for _, m in messages] == ["I moved to Oslo"]
    [listed] = store.failures(Scope("u"))
    assert listed["id"] == fid and listed["error"] == "bad reply" and listed["messages"] == 1
    assert listed["reply"] == "{oops"
    assert listed["resolved_at"] is None
    store.add(
        [new("moved to Oslo", source_messages=[0])],
        [],
        scope,
        "t",
        source_rowids=[messages[0][0]],
        resolve_failure=fid,
    )
    assert store.failures(Scope("u")) == []
    [done] = store.failures(Scope("u"), include_resolved=True)
    assert done["resolved_at"] is not None
    assert store.failure(fid)[2] is True  # type: ignore[index]
    assert raw_count(store, "memory_sources") == 1


def test_a_failure_without_a_reply_lists_none(store: Store) -> None:
    store.keep_failed(U, [NewMessage("user", "hello")], "LLMTimeoutError: slow", None)
    [listed] = store.failures(U)
    assert listed["reply"] is None and listed["error"] == "LLMTimeoutError: slow"


def test_source_messages_are_the_memory_s_within_what_the_caller_sees(store: Store) -> None:
    coach = Scope("u", "coach", "r1")
    msgs = [
        NewMessage("user", "I like tea", "ann", "2024-01-01T00:00:00.000000+00:00"),
        NewMessage("assistant", "noted"),
        NewMessage("user", "and coffee"),
    ]
    tea, coffee = store.add(
        [new("likes tea", source_messages=[0]), new("likes coffee", source_messages=[2])],
        msgs,
        coach,
        "t",
    )
    got = store.source_messages(tea.id)
    assert [(m.role, m.content, m.name, m.observed_at) for m in got] == [
        ("user", "I like tea", "ann", "2024-01-01T00:00:00.000000+00:00")
    ]
    assert got[0].rowid is not None
    assert [m.content for m in store.source_messages(coffee.id, coach)] == ["and coffee"]
    # a wider caller's repeat attaches its run and its messages: said again, elsewhere
    again = store.add(
        [new("likes tea", source_messages=[0])],
        [NewMessage("user", "I like tea, really")],
        Scope("u", run_id="r2"),
        "t",
    )[0]
    assert (again.event, again.id) == ("NONE", tea.id)
    both = ["I like tea", "I like tea, really"]
    assert [m.content for m in store.source_messages(tea.id)] == both
    assert [m.content for m in store.source_messages(tea.id, Scope("u"))] == both
    # each caller reads the messages of its own scope only
    assert [m.content for m in store.source_messages(tea.id, Scope("u", "coach"))] == ["I like tea"]
    assert [m.content for m in store.source_messages(tea.id, Scope("u", run_id="r2"))] == [
        "I like tea, really"
    ]
    assert store.source_messages(tea.id, Scope("v")) == []
    assert store.source_messages("missing") == []
    # a deleted memory keeps them; a purged one has none left
    store.delete(tea.id, actor="t")
    assert len(store.source_messages(tea.id)) == 2
    store.purge(memory_id=tea.id)
    assert store.source_messages(tea.id) == []


def test_scope_counts_by_state_id_and_day(store: Store) -> None:
    a = store.add([new("a")], [], Scope("u", "coach", "r1"), "t")[0].id
    b = store.add([new("b")], [], Scope("u", run_id="r1"), "t")[0].id
    c = store.add([new("c")], [], Scope("u", run_id="r2"), "t")[0].id
    assert store.add([new("c")], [], Scope("u", run_id="r3"), "t")[0].id == c  # attaches r3
    store.attach_session(b, Scope("u", "helper", "r1"), "t")  # attaches the agent helper
    gone = store.add([new("d")], [], U, "t")[0].id
    store.delete(gone, actor="t")
    store.add([new("e", expires_at="2001-01-01T00:00:00.000000+00:00")], [], U, "t")
    store.add([new("x")], [], Scope("v", "coach"), "t")
    row = store.get(a)
    assert row is not None
    day = row.created_at[:10]

    everything = store.scope_counts()
    assert (everything.live, everything.expired, everything.deleted) == (4, 1, 1)
    assert everything.users == {"u": 3, "v": 1}
    assert everything.agents == {"coach": 2, "helper": 1}
    assert everything.runs == {"r1": 2, "r2": 1, "r3": 1}
    assert everything.per_day == {day: 6}

    u = store.scope_counts(U)
    assert (u.live, u.expired, u.deleted, u.per_day) == (3, 1, 1, {day: 5})
    assert u.users == {"u": 3} and u.agents == {"coach": 1, "helper": 1}
    assert u.runs == {"r1": 2, "r2": 1, "r3": 1}

    # an agent is a wall; a run sees its attached memories too
    with_coach = store.scope_counts(Scope("u", "coach"))
    assert (with_coach.live, with_coach.expired, with_coach.deleted) == (1, 0, 0)
    assert with_coach.agents == {"coach": 1} and with_coach.runs == {"r1": 1}
    helper = store.scope_counts(Scope("u", "helper"))
    assert helper.live == 1 and helper.agents == {"helper": 1} and helper.runs == {"r1": 1}
    r3 = store.scope_counts(Scope("u", run_id="r3"))
    assert r3.live == 1 and r3.runs == {"r2": 1, "r3": 1} and r3.users == {"u": 1}
    assert store.scope_counts(Scope(agent_id="coach")).users == {"u": 1, "v": 1}

    nobody = store.scope_counts(Scope("nobody"))
    assert (nobody.live, nobody.users, nobody.per_day) == (0, {}, {})


# -- links -----------------------------------------------------------------------------------


def test_links_are_symmetric_and_stay_within_the_owner(store: Store) -> None:
    old = add1(store, "I liked tea")
    foreign = add1(store, "someone else", Scope("v"))
    newer = add1(store, "I like coffee now", links=[old, foreign, "missing"])
    assert store.get(newer).linked_ids == [old]  # type: ignore[union-attr]
    assert store.get(old).linked_ids == [newer]  # type: ignore[union-attr]
    assert store.get(foreign).linked_ids == []  # type: ignore[union-attr]


# -- listing and filters --------------------------------------------------------------------


def test_list_is_newest_first_paged_and_live_only(store: Store) -> None:
    ids = [add1(store, f"fact {i}") for i in range(6)]
    store.add([new("expired", expires_at="2001-01-01T00:00:00.000000+00:00")], [], U, "t")
    store.delete(ids[0], actor="t")
    listed = [r.id for r in store.list_memories(U, None, limit=10)]
    assert listed == ids[:0:-1]
    assert [r.id for r in store.list_memories(U, None, limit=2, offset=1)] == ids[4:2:-1]
    assert store.list_memories(U, None, limit=5, offset=50) == []
    assert store.list_memories(Scope("nobody"), None, limit=5) == []
    assert store.get(ids[0]) is None
    assert store.get(ids[0], include_deleted=True) is not None


FILTER_ROWS: list[tuple[str, Scope, dict[str, Any]]] = [
    ("a", Scope("u", "ag1", "r1"), {"topic": "food", "n": 1, "tags": ["x", "Y"], "flag": True}),
    ("b", Scope("u", "ag2", "r1"), {"topic": "Food", "n": 2.5, "tags": [1, "x"], "flag": False}),
    ("c", Scope("u", None, "r2"), {"topic": "music", "n": "2", "città": "Roma"}),
    ("d", Scope("u", "ag1", None), {"n": True, "tags": [], "nested": {"a": 1}}),
    ("e", Scope("u", "ag3", "r3"), {"topic": None, "n": -3, "tags": ["food"]}),
    ("f", Scope("u", None, None), {}),
]

FILTERS: list[dict[str, Any]] = [
    {"topic": "food"},
    {"topic": {"icontains": "FOO"}},
    {"topic": {"contains": "oo"}},
    {"n": {"gt": 1}},
    {"n": {"gte": 1, "lt": 3}},
    {"n": {"in": [1, "2", True]}},
    {"n": {"nin": [1, None]}},
    {"tags": {"contains": "x"}},
    {"tags": {"icontains": "y"}},
    {"topic": None},
    {"topic": "*"},
    {"città": "Roma"},
    {"agent_id": "ag1"},
    {"run_id": {"in": ["r1", "r3"]}},
    {"run_id": {"ne": "r1"}},
    {"OR": [{"topic": "music"}, {"flag": True}]},
    {"NOT": {"tags": {"contains": 1}}},
    {"AND": [{"topic": {"ne": "food"}}, {"n": {"lte": 2}}]},
    {"created_at": {"gte": "2000-01-01"}},
    {"observed_at": None},
    {"memory_type": {"in": ["fact", "pref"]}},
    {"actor_id": {"gt": "a"}},
    {"role": {"icontains": "US"}},
]


@pytest.fixture
def filter_store(store: Store) -> Store:
    for text, scope, metadata in FILTER_ROWS:
        store.add(
            [new(text, metadata=metadata, memory_type="fact" if text < "c" else None,
                 actor_id=text.upper() if text != "f" else None, role="user")],
            [], scope, "t",
        )  # fmt: skip
    return store


def _reference(store: Store, node: Any) -> list[str]:
    rows = store.list_memories(U, None, limit=100)
    return sorted(r.text for r in rows if evaluate(node, _record(r)))


def _record(row: MemoryRow) -> dict[str, Any]:
    return {**row.__dict__, "run_ids": set(row.run_ids), "agent_ids": set(row.agent_ids)}


@pytest.mark.parametrize("filters", FILTERS, ids=[str(f) for f in FILTERS])
def test_filters_select_what_the_reference_selects(
    filter_store: Store, filters: dict[str, Any]
) -> None:
    node = parse_filters(filters)
    got = sorted(r.text for r in filter_store.list_memories(U, node, limit=100))
    assert got == _reference(filter_store, node)


_FILTER_KEYS = ["topic", "n", "tags", "flag", "città", "nested", "missing"]
_FILTER_VALUES = st.one_of(
    st.sampled_from(["food", "Food", "x", "Y", "music", "2", "Roma", "", "oo"]),
    st.sampled_from([1, 2.5, -3, 0, 1.0, True, False, None]),
)
_FILTER_OPS = st.sampled_from(["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin", "contains"])


@st.composite
def _filters(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(st.sampled_from(_FILTER_KEYS))
    op = draw(_FILTER_OPS)
    value = draw(_FILTER_VALUES)
    if op in ("in", "nin"):
        cond: Any = {op: [value, draw(_FILTER_VALUES)]}
    elif op in ("gt", "gte", "lt", "lte") and (value is None or isinstance(value, bool)):
        cond = {"eq": value}
    elif op == "contains" and value is None:
        cond = "*"
    else:
        cond = {op: value}
    base = {key: cond}
    if draw(st.booleans()):
        return {"NOT": base}
    return base


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(filters=_filters())
def test_random_filters_agree_with_the_reference(
    filter_store: Store, filters: dict[str, Any]
) -> None:
    node = parse_filters(filters)
    got = sorted(r.text for r in filter_store.list_memories(U, node, limit=100))
    assert got == _reference(filter_store, node), filters


# -- vector search and candidates -------------------------------------------------------------


def test_vector_search_ranks_by_cosine_within_scope(store: Store) -> None:
    a = add1(store, "north", v=vec(1, 0))
    b = add1(store, "north-east", v=vec(1, 1))
    c = add1(store, "east", v=vec(0, 1))
    add1(store, "other user", Scope("v"), v=vec(1, 0))
    d = add1(store, "deleted north", v=vec(1, 0.01))
    store.delete(d, actor="t")
    hits = store.vector_search(U, None, vec(1, 0), 10)
    assert [h[0].id for h in hits] == [a, b, c]
    assert [round(h[1], 5) for h in hits] == [1.0, round(1 / math.sqrt(2), 5), 0.0]
    assert [h[0].id for h in store.vector_search(U, None, vec(1, 0), 1)] == [a]
    node = parse_filters({"NOT": {"memory_type": "x"}})
    assert len(store.vector_search(U, node, vec(0, 1), 2)) == 2
    assert store.vector_search(Scope("nobody"), None, vec(1), 3) == []


def test_vector_search_with_selective_filter_finds_all_matches(store: Store) -> None:
    rng = np.random.default_rng(3)
    mems = [
        new(f"m{i}", vec(*rng.standard_normal(DIM)), metadata={"rare": i % 50 == 0})
        for i in range(300)
    ]
    store.add(mems, [], U, "t")
    node = parse_filters({"rare": True})
    hits = store.vector_search(U, node, vec(1), 20)
    assert sorted(h[0].text for h in hits) == sorted(f"m{i}" for i in range(0, 300, 50))


def test_candidates_union_of_signals(store: Store) -> None:
    sem = add1(store, "completely unrelated words", v=vec(1, 0), terms="unrelated word")
    kw = add1(store, "violin lessons", v=vec(0, 1), terms="violin lesson")
    ent = store.add(
        [new("met Bob", v=vec(0, 0, 1), terms="meet bob", entities=[("Bob", "bob", "PERSON")])],
        [],
        U,
        "t",
    )[0].id
    store.add(
        [new("Bob again", v=vec(0, 0, 0, 1), terms="bob", entities=[("Bob", "bob", "PERSON")])],
        [],
        Scope("v"),
        "t",
    )
    cands = {c.row.id: c for c in store.candidates(U, None, vec(1, 0), ["violin"], ["bob"], 1)}
    assert set(cands) == {sem, kw, ent}
    assert cands[sem].semantic_rank == 1 and cands[sem].bm25 == 0.0
    assert cands[kw].bm25_rank == 1 and cands[kw].bm25 > 0
    assert cands[ent].entities == [("bob", 1)]
    assert cands[sem].semantic == pytest.approx(1.0, abs=1e-5)
    assert cands[kw].semantic == pytest.approx(0.0, abs=1e-5)
    # a filter narrows every signal
    node = parse_filters({"NOT": {"hash": "violin lessons"}})
    narrowed = store.candidates(U, node, vec(1, 0), ["violin"], ["bob"], 5)
    assert kw not in {c.row.id for c in narrowed}


@pytest.mark.parametrize("keywords", ["database", "process"])
def test_candidates_carry_their_vectors_and_statistics_of_terms_that_do_not_rank(
    store: Store, keywords: str
) -> None:
    # The attribute part of fusion reads each candidate's stored vector and how
    # many memories of the scope hold an attribute term; asking for those
    # statistics must not change what BM25 ranks or scores.
    store.keyword_index = keywords  # type: ignore[attr-defined]
    a = add1(store, "violin lessons", v=vec(1, 0), terms="violin lesson @music")
    b = add1(store, "concert", v=vec(0, 1), terms="concert @music @hobby")
    add1(store, "cello", v=vec(0, 0, 1), terms="cello")
    add1(store, "someone else's", Scope("v"), v=vec(1, 0), terms="violin @music @pet")
    stat = ["@music", "@hobby", "@pet"]
    cands = store.candidates(U, None, vec(1, 0), ["violin"], [], 5, stat_terms=stat, vectors=True)
    by = {c.row.id: c for c in cands}
    assert len(by) == 3
    assert np.allclose(by[a].vector, vec(1, 0), atol=1e-6)
    assert np.allclose(by[b].vector, vec(0, 1), atol=1e-6)
    stats = {id(c.term_stats) for c in cands}
    assert len(stats) == 1  # one object, the same for every candidate
    first = cands[0].term_stats
    assert first is not None and first.live == 3
    assert dict(first.df) == {"@music": 2, "@hobby": 1}  # the other user's @pet not counted
    plain = store.candidates(U, None, vec(1, 0), ["violin"], [], 5)
    assert {c.row.id: c.bm25 for c in plain} == pytest.approx({k: c.bm25 for k, c in by.items()})
    assert all(c.term_stats is None for c in plain)
    assert all(c.vector is None for c in plain)  # vectors only when asked
    # a stat term that is also a query term counts once and still ranks
    both = store.candidates(U, None, vec(1, 0), ["@hobby"], [], 5, stat_terms=stat)
    assert {c.row.id for c in both if c.bm25 > 0} == {b}
    assert both[0].term_stats is not None and both[0].term_stats.df["@hobby"] == 1


def test_bm25_is_the_reference_formula_over_the_scope(store: Store) -> None:
    docs = {
        "a": "red apple pie",
        "b": "green apple",
        "c": "red red car",
        "d": "blue sky",
        "e": "apple apple apple tree",
    }
    ids = {k: add1(store, f"doc {k}", terms=t) for k, t in docs.items()}
    add1(store, "noise", Scope("v"), terms="apple red")  # other scope: not in statistics
    store.delete(ids["d"], actor="t")  # deleted: not in statistics
    ref = BM25Index()
    ref.add([1, 2, 3, 5], [docs[k].split() for k in "abce"])
    keys, scores = ref.search(["apple", "red"], 10)
    expected = {
        "abce"[[1, 2, 3, 5].index(int(key))]: float(s) for key, s in zip(keys, scores, strict=True)
    }
    cands = store.candidates(U, None, vec(1), ["apple", "red"], [], 10)
    got = {c.row.text[-1]: c.bm25 for c in cands if c.bm25 > 0}
    assert got.keys() == expected.keys()
    for key, score in expected.items():
        assert got[key] == pytest.approx(score, rel=1e-5)
    ranks = {c.row.text[-1]: c.bm25_rank for c in cands if c.bm25_rank}
    assert sorted(ranks, key=lambda k: ranks[k]) == [
        k for k in sorted(expected, key=lambda k: -expected[k])
    ]
    # an update re-indexes the terms
    store.update(ids["b"], text="doc b", hash="doc b2", embedding=vec(1), terms="zebra",
                 metadata={}, actor="t")  # fmt: skip
    cands = store.candidates(U, None, vec(1), ["zebra"], [], 10)
    assert [c.row.id for c in cands if c.bm25 > 0] == [ids["b"]]


# -- update, delete, restore --------------------------------------------------------------------


def test_update_text_and_metadata(store: Store) -> None:
    mid = add1(store, "tea", v=vec(1), metadata={"k": 1})
    row, event = store.update(
        mid, text="coffee", hash="coffee", embedding=vec(0, 1), terms="coffee",
        metadata={"k": 1}, actor="t", reason="changed",
    )  # fmt: skip
    assert row.text == "coffee" and row.version == 2 and row.hash == "coffee"
    assert (event.event, event.old_memory, event.new_memory, event.reason) == (
        "UPDATE",
        "tea",
        "coffee",
        "changed",
    )
    assert store.vector_search(U, None, vec(0, 1), 1)[0][0].id == mid
    row, event = store.update(
        mid, text="coffee", hash="coffee", embedding=None, terms="coffee", metadata={"k": 2},
        actor="t",
    )  # fmt: skip
    assert row.metadata == {"k": 2} and row.version == 3
    assert (event.old_metadata, event.new_metadata) == ({"k": 1}, {"k": 2})
    assert row.updated_at >= row.created_at
    with pytest.raises(MemoryNotFoundError):
        store.update("missing", text="x", hash="x", embedding=None, terms="", metadata={},
                     actor="t")  # fmt: skip


def test_update_to_a_live_duplicate_is_refused_and_changes_nothing(store: Store) -> None:
    a = add1(store, "alpha")
    b = add1(store, "beta")
    with pytest.raises(DuplicateMemoryError):
        store.update(a, text="BETA", hash="beta", embedding=vec(1), terms="beta", metadata={},
                     actor="t")  # fmt: skip
    assert store.get(a).text == "alpha"  # type: ignore[union-attr]
    assert len(store.history(a)) == 1
    store.delete(b, actor="t")
    row, _ = store.update(a, text="BETA", hash="beta", embedding=vec(1), terms="beta",
                          metadata={}, actor="t")  # fmt: skip
    assert row.text == "BETA"


def test_delete_scope_and_restore(store: Store) -> None:
    r1 = add1(store, "one", Scope("u", run_id="r1"))
    r2 = add1(store, "two", Scope("u", run_id="r2"))
    events = store.delete_scope(Scope("u", run_id="r1"), actor="t")
    assert [(e.memory_id, e.event, e.reason) for e in events] == [(r1, "DELETE", "delete_all")]
    assert store.delete_scope(Scope("u", run_id="r1"), actor="t") == []
    assert [r.id for r in store.list_memories(U, None, limit=10)] == [r2]
    with pytest.raises(MemoryNotFoundError):
        store.delete(r1, actor="t")
    plan = store.plan_restore(r1, None)
    assert plan.undelete and plan.to_version is None
    row, event = store.apply_restore(plan, hash="one", embedding=None, terms="one", actor="t")
    assert row.deleted_at is None and event.event == "RESTORE" and event.reason == "undeleted"
    assert [e.event for e in store.history(r1)] == ["ADD", "DELETE", "RESTORE"]


def test_restore_versions_and_conflicts(store: Store) -> None:
    mid = add1(store, "v1", metadata={"v": 1})
    store.update(mid, text="v2", hash="v2", embedding=vec(1), terms="v2", metadata={"v": 2},
                 actor="t")  # fmt: skip
    with pytest.raises(VersionNotFoundError):
        store.plan_restore(mid, 5)
    with pytest.raises(VersionNotFoundError):
        store.plan_restore(mid, 2)
    with pytest.raises(MemoryNotFoundError):
        store.plan_restore("missing", None)
    plan = store.plan_restore(mid, 1)
    assert (plan.text, plan.metadata, plan.to_version, plan.expected_version) == (
        "v1",
        {"v": 1},
        1,
        2,
    )
    # someone else changes it between plan and apply
    store.update(mid, text="v3", hash="v3", embedding=vec(1), terms="v3", metadata={},
                 actor="t")  # fmt: skip
    with pytest.raises(ConflictError):
        store.apply_restore(plan, hash="v1", embedding=vec(1), terms="v1", actor="t")
    plan = store.plan_restore(mid, 1)
    row, event = store.apply_restore(plan, hash="v1", embedding=vec(1), terms="v1", actor="t")
    assert (row.text, row.version, event.version) == ("v1", 4, 4)
    assert event.reason == "restored version 1"
    # a restore that would repeat a live memory is refused
    other = add1(store, "v3")
    assert other
    plan = store.plan_restore(mid, 3)
    with pytest.raises(DuplicateMemoryError):
        store.apply_restore(plan, hash="v3", embedding=vec(1), terms="v3", actor="t")
    assert store.get(mid).text == "v1"  # type: ignore[union-attr]


# -- purge, reset, export/import ------------------------------------------------------------------


def test_purge_memory_erases_rows_history_and_sources(store: Store) -> None:
    keep = add1(store, "keep", entities=[("Oslo", "oslo", "GPE")])
    gone = store.add(
        [new("secret", source_messages=[0], entities=[("Kim", "kim", "PERSON")])],
        [NewMessage("user", "secret")],
        U,
        "t",
    )[0].id
    store.update(gone, text="secret 2", hash="secret 2", embedding=vec(1), terms="secret",
                 metadata={}, actor="t")  # fmt: skip
    assert store.purge(memory_id=gone) == 1
    assert store.get(gone, include_deleted=True) is None
    assert store.history(gone) == []
    assert raw_count(store, "messages") == 0
    assert raw_count(store, "entities") == 1  # Kim went with the only memory naming him
    assert store.count() == 1 and store.get(keep) is not None
    with pytest.raises(MemoryNotFoundError):
        store.purge(memory_id=gone)
    assert store.candidates(U, None, vec(1), ["secret"], ["kim"], 5)[0].row.id == keep


def test_purge_scope(store: Store) -> None:
    add1(store, "mine", Scope("gone", run_id="r"))
    store.add([new("deleted mine")], [NewMessage("user", "raw words")], Scope("gone"), "t")
    store.keep_failed(Scope("gone"), [NewMessage("user", "failed words")], "e", None)
    stay = add1(store, "yours", Scope("stay"))
    assert store.purge(scope=Scope("gone")) == 2
    assert store.count() == 1 and store.get(stay) is not None
    assert raw_count(store, "messages") == 0
    assert raw_count(store, "extraction_failures") == 0
    assert raw_count(store, "history") == 1
    assert store.purge(scope=Scope("gone")) == 0


def test_export_import_round_trip(
    store: Store, backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    a = add1(store, "one", Scope("u", run_id="r1"), metadata={"x": [1, 2]})
    store.add([new("one")], [], Scope("u", run_id="r2"), "t")
    store.attach_session(a, Scope("u", "ag"), "t")
    b = add1(store, "two", links=[a], entities=[("Ann", "ann", "PERSON")])
    store.delete(b, actor="t")
    exported = list(store.export_rows())
    assert [r["row"].id for r in exported] == [a, b]

    def records(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for r in rows:
            row: MemoryRow = r["row"]
            out.append({
                "memory": row.text, **{k: v for k, v in row.__dict__.items() if k != "text"},
                "embedding": r["embedding"], "terms": r["terms"],
                "history": [{**e.__dict__} for e in r["history"]],
                "linked_memory_ids": row.linked_ids, "run_ids": row.run_ids,
                "agent_ids": row.agent_ids,
                "entities": [("Ann", "ann", "PERSON")] if row.id == b else [],
            })  # fmt: skip
        return out

    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            copy = make_store("sqlite", {"path": str(tmp_path / "copy.db")}, tmp_path)
        else:
            config = stack.enter_context(request.getfixturevalue("pg_server").schema())
            copy = make_store("postgres", config, tmp_path)
        stack.callback(copy.close)
        assert copy.import_rows(records(exported)) == 2
        again = list(copy.export_rows())
        for x, y in zip(exported, again, strict=True):
            assert x["row"] == y["row"]
            assert np.array_equal(x["embedding"], y["embedding"])
            assert x["terms"] == y["terms"]
            assert [(e.event, e.version, e.new_memory) for e in x["history"]] == [
                (e.event, e.version, e.new_memory) for e in y["history"]
            ]
        with pytest.raises(ImportFormatError, match="already exist"):
            copy.import_rows(records(exported))
        assert copy.count() == 2


def test_import_of_duplicate_live_text_imports_nothing(store: Store) -> None:
    add1(store, "seed")
    [rec] = list(store.export_rows())
    row = rec["row"]
    base = {
        "memory": "dup", "hash": "dup", "user_id": "u", "created_at": row.created_at,
        "updated_at": row.updated_at, "embedding": vec(1), "terms": "dup", "history": [],
    }  # fmt: skip
    with pytest.raises(ImportFormatError):
        store.import_rows([{**base, "id": "i1"}, {**base, "id": "i2"}])
    assert store.count() == 1


def test_reset_erases_everything_and_unbinds(store: Store) -> None:
    add1(store, "x")
    store.keep_failed(U, [NewMessage("user", "y")], "e", None)
    store.reset()
    assert store.count() == 0 and store.bound_embedder() is None
    assert store.recent_messages(U, 5) == [] and store.failures(U) == []
    store.bind_embedder("other/model", 4)
    store.add([NewMemory("n1", "after", "after", np.ones(4, np.float32) / 2, "after")], [], U, "t")
    assert store.vector_search(U, None, np.ones(4, np.float32) / 2, 1)[0][0].text == "after"


def test_closed_store_raises(store: Store) -> None:
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.count()


# -- the same records on every backend --------------------------------------------------------


def test_backends_return_the_same_records(tmp_path: Path, pg_config: dict[str, Any]) -> None:
    stores: list[Store] = [
        SQLiteStore(tmp_path / "same.db"),
        make_store("postgres", pg_config, tmp_path),
    ]
    assert isinstance(stores[1], PostgresStore)
    results = []
    for s in stores:
        s.bind_embedder(MODEL, DIM)
        a = s.add([new("Alpha fact", id="id-a", metadata={"k": [1, "x"], "ü": 1.5})],
                  [NewMessage("user", "Alpha fact")], Scope("u", "g", "r1"), "t")  # fmt: skip
        s.add([new("Alpha fact", id="id-a2")], [], Scope("u", "g2", "r2"), "t")
        beta = new("Beta", id="id-b", links=["id-a"],
                   observed_at="2023-01-02T03:04:05.000006+00:00")  # fmt: skip
        s.add([beta], [], Scope("u", run_id="r1"), "t")
        s.update("id-b", text="Beta 2", hash="beta 2", embedding=vec(1), terms="beta",
                 metadata={"m": None}, actor="t")  # fmt: skip
        rows = s.list_memories(Scope("u"), None, limit=10)
        hits = s.vector_search(Scope("u"), None, vec(seed=1), 5)
        cands = s.candidates(Scope("u"), None, vec(seed=1), ["beta", "alpha"], [], 5)
        strip = lambda r: {k: v for k, v in r.__dict__.items() if not k.endswith("_at")}  # noqa: E731
        results.append(
            (
                a[0].event,
                [strip(r) for r in rows],
                [(h[0].id, round(h[1], 5)) for h in hits],
                sorted((c.row.id, round(c.semantic, 5), round(c.bm25, 5), c.bm25_rank)
                       for c in cands),
                [(e.event, e.version, e.old_memory, e.new_memory, e.new_metadata, e.reason)
                 for e in s.history("id-a") + s.history("id-b")],
            )
        )  # fmt: skip
        s.close()
    assert results[0] == results[1]


def test_the_async_protocol_mirrors_the_sync_one() -> None:
    # A backend author implements Store (and, for native async I/O, AsyncStore):
    # both must name the same operations with the same parameters.
    import inspect

    from engramdb.stores.base import AsyncStore

    def methods(proto: type) -> dict[str, list[tuple[str, Any, Any]]]:
        return {
            name: [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]
            for name, fn in vars(proto).items()
            if callable(fn) and not name.startswith("_")
        }

    sync, asyn = methods(Store), methods(AsyncStore)
    assert sync == asyn
    for name in asyn:
        fn = getattr(AsyncStore, name)
        assert inspect.iscoroutinefunction(fn) == (name != "export_rows"), name
