"""The store reads behind a dashboard of a large scope: entities, an entity's memories, counts.

``Store.entities`` and ``Store.entity_memories`` read the entity links the
store wrote (never the texts again), ``Store.count_memories`` counts what
``list_memories`` lists, and ``Store.scope_counts`` counts per day without
sorting a scope. Each test runs on SQLite and PostgreSQL (the ``store``
fixture of the contract suite); tenancy is the list's: only the scope's
memories, deleted ones never, expired ones only when asked. Then the same
through ``Memory`` (a bound view, a name as written) on both backends.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest

from engramdb import Memory
from engramdb.core.filters import parse_filters
from engramdb.errors import ScopeError, ValidationError
from engramdb.stores import Store
from engramdb.stores.base import EntityCount, Scope
from engramdb.stores.postgres import PostgresStore
from engramdb.stores.sqlite import SQLiteStore
from engramdb_bench._hash_embedder import HashEmbedder
from test_store_contract import U, new, store, vec  # noqa: F401

PAST = "2001-01-01T00:00:00.000000+00:00"


def ent(name: str, kind: str = "PLACE") -> tuple[str, str, str]:
    return (name, name.lower(), kind)


def put(store: Store, text: str, names: list[str], scope: Scope = U, **kw: Any) -> str:  # noqa: F811
    kinds = {"Ana": "PERSON", "Acme": "ORG"}
    entities = [ent(n, kinds.get(n, "PLACE")) for n in names]
    return store.add([new(text, entities=entities, **kw)], [], scope, "t")[0].id


def keyed(found: tuple[list[EntityCount], int]) -> tuple[list[tuple[str, int]], int]:
    return [(e.key, e.degree) for e in found[0]], found[1]


def test_entities_of_a_scope_most_mentioned_first(store: Store) -> None:  # noqa: F811
    put(store, "Ana lives in Lisbon", ["Ana", "Lisbon"])
    put(store, "Ana hikes in Sintra", ["Ana", "Sintra"])
    put(store, "Ana works at Acme in Lisbon", ["Ana", "Acme", "Lisbon"])
    put(store, "Bob is from Lisbon too", ["Lisbon", "Bob"], Scope("v"))

    assert keyed(store.entities(U, limit=10)) == (
        [("ana", 3), ("lisbon", 2), ("acme", 1), ("sintra", 1)],
        4,
    )
    page = store.entities(U, limit=2, offset=2)
    assert keyed(page) == ([("acme", 1), ("sintra", 1)], 4)
    assert (page[0][0].name, page[0][0].type) == ("Acme", "ORG")
    assert store.entities(U, limit=2, offset=10) == ([], 4)  # past the end: still the total
    assert keyed(store.entities(U, limit=10, entity_type="PLACE")) == (
        [("lisbon", 2), ("sintra", 1)],
        2,
    )
    assert keyed(store.entities(U, limit=10, contains="in")) == ([("sintra", 1)], 1)
    assert keyed(store.entities(U, limit=10, contains="lis", entity_type="ORG")) == ([], 0)
    assert keyed(store.entities(Scope("v"), limit=10)) == ([("bob", 1), ("lisbon", 1)], 2)
    assert store.entities(Scope("nobody"), limit=10) == ([], 0)


def test_only_live_memories_of_the_scope_count(store: Store) -> None:  # noqa: F811
    kept = put(store, "Ana in Lisbon", ["Ana", "Lisbon"], Scope("u", run_id="r1"))
    gone = put(store, "Ana in Porto", ["Ana", "Porto"])
    put(store, "Ana in Faro, long ago", ["Ana", "Faro"], expires_at=PAST)
    put(store, "Ana with the coach in Braga", ["Ana", "Braga"], Scope("u", "coach"))
    store.delete(gone, actor="t")

    assert keyed(store.entities(U, limit=10)) == ([("ana", 2), ("braga", 1), ("lisbon", 1)], 3)
    assert keyed(store.entities(U, limit=10, include_expired=True))[0][0] == ("ana", 3)
    # an agent is a wall; a run sees its own memories and those attached to it
    assert keyed(store.entities(Scope("u", "coach"), limit=10)) == (
        [("ana", 1), ("braga", 1)],
        2,
    )
    assert keyed(store.entities(Scope("u", run_id="r2"), limit=10)) == ([], 0)
    store.attach_session(kept, Scope("u", run_id="r2"), "t")
    assert keyed(store.entities(Scope("u", run_id="r2"), limit=10)) == (
        [("ana", 1), ("lisbon", 1)],
        2,
    )
    entity, rows = store.entity_memories(Scope("u", run_id="r2"), "lisbon", limit=5)
    assert entity is not None and entity.degree == 1 and [r.id for r in rows] == [kept]
    assert store.entity_memories(U, "porto", limit=5) == (None, [])  # deleted
    assert store.entity_memories(U, "faro", limit=5) == (None, [])  # expired
    faro, found = store.entity_memories(U, "faro", limit=5, include_expired=True)
    assert faro is not None and len(found) == 1


def test_an_update_moves_the_links(store: Store) -> None:  # noqa: F811
    mid = put(store, "Ana lives in Lisbon", ["Ana", "Lisbon"])
    store.update(
        mid, text="Ana lives in Porto", hash="porto", embedding=vec(seed=1), terms="ana porto",
        entities=[ent("Ana", "PERSON"), ent("Porto")], metadata={}, actor="t",
    )  # fmt: skip
    assert keyed(store.entities(U, limit=10)) == ([("ana", 1), ("porto", 1)], 2)


def test_entity_memories_newest_stored_first_and_paged(store: Store) -> None:  # noqa: F811
    ids = [put(store, f"Note {i} about Lisbon", ["Lisbon"]) for i in range(7)]
    put(store, "Someone else in Lisbon", ["Lisbon"], Scope("v"))
    entity, rows = store.entity_memories(U, "lisbon", limit=3)
    assert entity == EntityCount("lisbon", "Lisbon", "PLACE", 7)
    assert [r.id for r in rows] == ids[:-4:-1]
    assert [r.id for r in store.entity_memories(U, "lisbon", limit=3, offset=6)[1]] == ids[:1]
    assert store.entity_memories(U, "lisbon", limit=3, offset=9)[1] == []
    assert store.entity_memories(U, "berlin", limit=3) == (None, [])
    assert store.entity_memories(Scope("w"), "lisbon", limit=3) == (None, [])
    found, _ = store.entities(U, limit=1, sample=2)
    assert [r.id for r in found[0].sample] == ids[:-3:-1]
    assert found[0].sample[0].text == "Note 6 about Lisbon"  # hydrated rows


def test_an_agent_across_users_shows_each_name_once(store: Store) -> None:  # noqa: F811
    # The store keeps one entity per owner (user) and name; an agent that served
    # two users sees one "lisbon" with the memories of both, newest first.
    first = put(store, "Ana likes Lisbon", ["Lisbon"], Scope("u", "coach"))
    second = put(store, "Bob likes Lisbon", ["Lisbon"], Scope("v", "coach"))
    put(store, "Cleo likes Lisbon", ["Lisbon"], Scope("w", "other"))
    coach = Scope(agent_id="coach")
    assert keyed(store.entities(coach, limit=10)) == ([("lisbon", 2)], 1)
    entity, rows = store.entity_memories(coach, "lisbon", limit=10)
    assert entity is not None and entity.degree == 2
    assert [r.id for r in rows] == [second, first]
    found, _ = store.entities(coach, limit=10, sample=5)
    assert [r.id for r in found[0].sample] == [second, first]


def test_count_memories_is_the_length_of_the_list(store: Store) -> None:  # noqa: F811
    for i in range(6):
        store.add([new(f"fact {i}", metadata={"even": i % 2 == 0})], [], U, "t")
    store.add([new("old", expires_at=PAST)], [], U, "t")
    gone = store.add([new("gone")], [], U, "t")[0].id
    store.delete(gone, actor="t")
    store.add([new("theirs")], [], Scope("v"), "t")
    even = parse_filters({"even": True})
    assert store.count_memories(U, None) == len(store.list_memories(U, None, limit=100)) == 6
    assert store.count_memories(U, even) == 3
    assert store.count_memories(U, None, include_expired=True) == 7
    assert store.count_memories(U, None, limit=4) == 4
    assert store.count_memories(U, even, limit=10) == 3
    assert store.count_memories(Scope("nobody"), None) == 0


def _set_created(store: Store, memory_id: str, when: str) -> None:  # noqa: F811
    """Move a memory to another day, under the store's API (it never writes created_at)."""
    if isinstance(store, SQLiteStore):
        con = sqlite3.connect(store.path)
        with con:
            con.execute("UPDATE memories SET created_at = ? WHERE id = ?", (when, memory_id))
        con.close()
        return
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.settings.url) as pg:
        pg.execute(
            f'UPDATE "{store.schema}".memories SET created_at = %s WHERE id = %s',
            (when, memory_id),
        )


def test_scope_counts_per_day_over_several_days(store: Store) -> None:  # noqa: F811
    days = ["2026-01-30", "2026-01-31", "2026-01-31", "2026-02-01", "2026-03-15"]
    for i, day in enumerate(days):
        mid = store.add([new(f"fact {i}")], [], U if i else Scope("u", "coach"), "t")[0].id
        at = "T23:59:59.999999+00:00" if i == 1 else "T00:00:00+00:00"
        _set_created(store, mid, day + at)
    store.add([new("theirs")], [], Scope("v"), "t")
    expected = {"2026-01-30": 1, "2026-01-31": 2, "2026-02-01": 1, "2026-03-15": 1}
    assert store.scope_counts(U).per_day == expected  # one user: the day walk of SQLite
    assert store.scope_counts(Scope("u", "coach")).per_day == {"2026-01-30": 1}
    everything = store.scope_counts()
    assert sum(everything.per_day.values()) == 6 and everything.users == {"u": 5, "v": 1}


# -- through Memory: a view, a name as written --------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def mem(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "sqlite":
        memory = Memory(tmp_path / "e.db", embedder=HashEmbedder(), llm=None)
    else:
        config = request.getfixturevalue("pg_config")
        memory = Memory(
            config={"vector_store": {"provider": "postgres", "config": config}},
            embedder=HashEmbedder(),
            llm=None,
        )
    yield memory
    memory.close()


def test_memory_entities_through_a_view(mem: Memory) -> None:
    for text, user in (
        ("My sister Ana lives in Lisbon", "alice"),
        ("Ana and I hike in Sintra every May", "alice"),
        ("I visited the Eiffel Tower in Paris", "alice"),
        ("Carol keeps the vault code in Berlin", "bob"),
    ):
        mem.add(text, user_id=user, infer=False)
    listed = mem.entities(user_id="alice", newest=1)
    assert listed["total"] == 5 and listed["results"][0]["key"] == "ana"
    assert listed["results"][0]["memory_count"] == 2
    assert listed["results"][0]["newest"][0]["memory"] == "Ana and I hike in Sintra every May"
    assert "newest" not in mem.entities(user_id="alice")["results"][0]
    places = mem.entities(user_id="alice", entity_type="place", contains="LIS")
    assert [e["key"] for e in places["results"]] == ["lisbon"]
    tower = mem.entity_memories("The Eiffel Tower", user_id="alice")  # a name as written
    assert tower["entity"]["key"] == "eiffel tower" and len(tower["results"]) == 1
    assert mem.count(user_id="alice") == 3 and mem.count(user_id="alice", limit=2) == 2

    bob = mem.scoped(user_id="bob")
    assert [e["key"] for e in bob.entities()["results"]] == ["berlin", "carol"]
    assert bob.entity_memories("ana")["entity"] is None  # alice's entity: not in bob's scope
    assert bob.count() == 1
    with pytest.raises(ScopeError):
        bob.entities(user_id="alice")
    with pytest.raises(ValidationError):
        mem.entities(user_id="alice", entity_type="PLANET")
    with pytest.raises(ValidationError):
        mem.entity_memories(" ", user_id="alice")
