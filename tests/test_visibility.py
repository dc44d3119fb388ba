"""One visibility rule, enforced in the flows: what a scoped caller can never reach.

A view bound to ``{user_id: alice, agent_id: coach}`` (what a server key of
that scope runs through) must not learn of, change or attach to alice's other
memories through any path: by id, listing, search, the extraction context
shown to the LLM, dedup, links, consolidation targets, ``expand_links`` and
``timeline``. The LLM here is hostile: it names every id it was shown, small
ids it was not, and the victim's real ids.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from engramdb import (
    AccessDeniedError,
    AsyncMemory,
    DuplicateMemoryError,
    Memory,
    MemoryNotFoundError,
    ScopeError,
)
from engramdb.embedders import LocalEmbedder
from engramdb.llms import make_llm
from engramdb.stores import make_store
from engramdb.stores.base import Scope, visible_scope
from engramdb.stores.postgres.schema import BOOTSTRAP as PG_BOOTSTRAP
from engramdb.stores.postgres.schema import MIGRATIONS as PG_MIGRATIONS
from engramdb.stores.sqlite._base import _split_sql
from engramdb.stores.sqlite.schema import MIGRATIONS as SQLITE_MIGRATIONS
from openai_wire import RecordedRequest, WireServer

SECRET = "My therapist is Dr. Lee"


def wire_llm(server: WireServer) -> Any:
    return make_llm(
        "openai_compatible",
        {"base_url": server.base_url, "model": "test-model", "max_retries": 0},
    )


@pytest.fixture(params=["additive", "consolidate"])
def lmem(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    embedder: LocalEmbedder,
    openai_server: WireServer,
) -> Iterator[Memory]:
    cfg = {"extraction": {"mode": request.param}}
    with Memory(tmp_path / "v.db", cfg, embedder=embedder, llm=wire_llm(openai_server)) as m:
        yield m


def prompts(server: WireServer) -> str:
    return "\n".join(json.dumps(r.messages) for r in server.chat_requests)


def hostile(victims: list[str]) -> Any:
    """A reply naming every id 0..30 and the victims' real ids, in both reply shapes."""

    def handler(req: RecordedRequest) -> str:
        schema = json.dumps((req.json or {}).get("response_format", {}))
        ids = [str(i) for i in range(31)] + victims
        if '"facts"' in schema:
            return json.dumps({"facts": ["Alice sees a therapist", "Alice likes long walks"]})
        if '"event"' in schema:
            ops: list[dict[str, Any]] = []
            for i in ids:
                ops.append({"id": i, "event": "UPDATE", "text": "rewritten by coach"})
                ops.append({"id": i, "event": "DELETE"})
                ops.append({"id": i, "event": "NONE"})
            ops.append({"event": "ADD", "text": SECRET})
            return json.dumps({"memory": ops})
        return json.dumps(
            {
                "memory": [
                    {"text": SECRET, "attributed_to": "user", "linked_memory_ids": ids},
                    {
                        "text": "Alice likes long walks",
                        "attributed_to": "user",
                        "linked_memory_ids": ids,
                    },
                ]
            }
        )

    return handler


def test_a_coach_view_reaches_nothing_of_alices_other_memories(
    lmem: Memory, openai_server: WireServer
) -> None:
    secret = lmem.add(SECRET, user_id="alice", infer=False)["results"][0]["id"]
    doctor = lmem.add("Alice takes sertraline", user_id="alice", agent_id="doctor", infer=False)
    doctor_id = doctor["results"][0]["id"]
    before = {mid: lmem.history(mid) for mid in (secret, doctor_id)}
    coach = lmem.scoped(user_id="alice", agent_id="coach")
    openai_server.handler = hostile([secret, doctor_id])

    out = coach.add("I told you about my therapist, Dr. Lee", run_id="s1")

    sent = prompts(openai_server)
    assert openai_server.chat_requests, "the LLM was never called"
    # (a) nothing of the victim's memories (text or id) was shown to the LLM
    for needle in (SECRET, secret, doctor_id, "sertraline"):
        assert needle not in sent
    # (b) nothing was changed, (c) the repeat is a fresh ADD with a new id, (d) no attach
    results = out["results"]
    assert all(r["id"] not in (secret, doctor_id) for r in results)
    assert all("previous_memory" not in r for r in results)
    assert {r["event"] for r in results} <= {"ADD"}
    for mid in (secret, doctor_id):
        assert lmem.history(mid) == before[mid]
        row = lmem.get(mid)
        assert row is not None and "agent_ids" not in row and "run_ids" not in row
    assert lmem.get(secret)["memory"] == SECRET  # type: ignore[index]
    # the coach's own memories link only to what it could see
    listing = coach.get_all()["results"]
    assert {r["id"] for r in listing}.isdisjoint({secret, doctor_id})
    for r in listing:
        assert set(r["linked_memory_ids"]).isdisjoint({secret, doctor_id})
    hits = coach.search("therapist Dr. Lee", expand_links=True)["results"]
    assert {h["id"] for h in hits}.isdisjoint({secret, doctor_id})
    for mine in listing:
        assert {t["id"] for t in coach.timeline(mine["id"])}.isdisjoint({secret, doctor_id})


def test_a_second_add_by_the_coach_is_deduped_against_its_own_memory_only(
    lmem: Memory, openai_server: WireServer
) -> None:
    secret = lmem.add(SECRET, user_id="alice", infer=False)["results"][0]["id"]
    coach = lmem.scoped(user_id="alice", agent_id="coach")
    first = coach.add(SECRET, run_id="s1", infer=False)["results"][0]
    assert first["event"] == "ADD" and first["id"] != secret
    again = coach.add(SECRET, run_id="s2", infer=False)["results"][0]
    assert (again["event"], again["id"]) == ("NONE", first["id"])
    assert coach.get(first["id"])["run_ids"] == ["s1", "s2"]  # type: ignore[index]
    # alice's unbound view sees both, and her own repeat attaches to her own copy
    mine = lmem.add(SECRET, user_id="alice", run_id="s3", infer=False)["results"][0]
    assert (mine["event"], mine["id"]) == ("NONE", secret)


def test_by_id_calls_of_a_view_treat_a_hidden_memory_as_missing(mem: Memory) -> None:
    secret = mem.add(SECRET, user_id="alice", infer=False)["results"][0]["id"]
    other = mem.add("Bob's PIN is 4711", user_id="bob", infer=False)["results"][0]["id"]
    coach = mem.scoped(user_id="alice", agent_id="coach")
    for mid in (secret, other):
        assert coach.get(mid) is None
        for name, args in (
            ("update", (mid, "changed")),
            ("delete", (mid,)),
            ("restore", (mid,)),
            ("timeline", (mid,)),
            ("purge", (mid,)),
        ):
            with pytest.raises(MemoryNotFoundError):
                getattr(coach, name)(*args)
        assert coach.history(mid) == []  # as for an id that does not exist
    assert mem.get(secret)["memory"] == SECRET  # type: ignore[index]
    assert [h["event"] for h in mem.history(secret)] == ["ADD"]
    assert coach.get_all()["results"] == []
    assert coach.search("therapist")["results"] == []
    assert [r for r in coach.export() if "id" in r] == []
    # the view's own ids are filled in; naming another value is refused
    with pytest.raises(ScopeError, match="bound to user_id"):
        coach.get_all(user_id="bob")
    with pytest.raises(ScopeError, match="bound to agent_id"):
        coach.add("x", agent_id="doctor", infer=False)
    with pytest.raises(ScopeError, match="whole store"):
        coach.reset()
    # a view of a view only narrows, and closing a view leaves the store open
    run_view = coach.scoped(run_id="r1")
    assert run_view.within is not None and run_view.within.run_id == "r1"
    run_view.close()
    assert mem.get(secret) is not None


def test_a_run_bound_view_sees_its_run_only(mem: Memory) -> None:
    r2 = mem.add("Alice's passport is in the drawer", user_id="alice", run_id="r2", infer=False)
    hidden = r2["results"][0]["id"]
    view = mem.scoped(user_id="alice", run_id="r1")
    out = view.add("Alice's passport is in the drawer", infer=False)["results"][0]
    assert out["event"] == "ADD" and out["id"] != hidden
    assert "run_ids" not in mem.get(hidden)  # type: ignore[operator]
    assert [r["id"] for r in view.get_all()["results"]] == [out["id"]]


_V1_SCOPES = [
    Scope("alice"),
    Scope("alice", "coach", "r1"),
    Scope(agent_id="a|u5:x"),
    Scope(run_id="r:1"),
    Scope("Zoë 🦊", "Σ"),
]


def test_schema_v1_stores_get_the_same_partition_keys_as_new_writes(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    rows = [
        (f"m{n}", f"{s.owner}#{n}", s.user_id, s.agent_id, s.run_id)
        for n, s in enumerate(_V1_SCOPES)
    ]
    if backend == "sqlite":
        path = tmp_path / "v1.db"
        con = sqlite3.connect(path)
        for statement in _split_sql(SQLITE_MIGRATIONS[0]):
            con.execute(statement)
        con.execute("PRAGMA user_version = 1")
        con.executemany(
            "INSERT INTO memories(id, text, hash, owner, user_id, agent_id, run_id, created_at, "
            "updated_at, seq) VALUES (?, 'same text', 'h', ?, ?, ?, ?, 't', 't', 1)",
            rows,
        )
        con.commit()
        con.close()
        store = make_store("sqlite", {"path": str(path)}, tmp_path)

        def partitions() -> dict[str, str]:
            with sqlite3.connect(path) as raw:
                return dict(raw.execute("SELECT id, partition FROM memories").fetchall())
    else:
        config = request.getfixturevalue("pg_config")
        schema = f'"{config["collection_name"]}"'
        with psycopg.connect(config["url"], autocommit=True) as pg:
            pg.execute(PG_BOOTSTRAP.format(s=schema))
            pg.execute(PG_MIGRATIONS[0].format(s=schema))
            pg.execute(f"INSERT INTO {schema}.meta VALUES ('schema_version', '1')")
            with pg.cursor() as cur:
                cur.executemany(
                    f"INSERT INTO {schema}.memories (id, text, hash, owner, user_id, agent_id, "
                    "run_id, created_at, updated_at) VALUES (%s, 'same text', 'h', %s, %s, %s, "
                    "%s, now(), now())",
                    rows,
                )
        store = make_store("postgres", config, tmp_path)

        def partitions() -> dict[str, str]:
            with psycopg.connect(config["url"]) as raw:
                got = raw.execute(f"SELECT id, partition FROM {schema}.memories").fetchall()
                return {r[0]: r[1] for r in got}

    try:
        assert partitions() == {
            f"m{n}": visible_scope(s).partition for n, s in enumerate(_V1_SCOPES)
        }
        # a new write of one of these scopes repeats the migrated row
        assert store.existing_hashes(visible_scope(_V1_SCOPES[4]), ["h"]) == {"h"}
        assert store.existing_hashes(Scope("alice", "doctor"), ["h"]) == set()
    finally:
        store.close()


def test_async_views_run_inside_their_scope_and_share_the_store(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    async def main() -> None:
        async with AsyncMemory(tmp_path / "a.db", embedder=embedder) as m:
            secret = (await m.add(SECRET, user_id="alice", infer=False))["results"][0]["id"]
            coach = m.scoped(user_id="alice", agent_id="coach")
            assert await coach.get(secret) is None
            out = (await coach.add(SECRET, infer=False))["results"][0]
            assert out["event"] == "ADD" and out["id"] != secret
            with pytest.raises(MemoryNotFoundError):
                await coach.delete(secret)
            await coach.close()
            assert (await m.get(secret)) is not None
            assert len((await m.get_all(user_id="alice"))["results"]) == 2

    asyncio.run(main())


def test_a_duplicate_on_update_never_names_a_hidden_memory(mem: Memory) -> None:
    # Before schema v2 a repeat from another agent attached that agent to the
    # user's memory; such a memory is visible to the agent, its neighbours are not.
    legacy = mem.add("Alice likes tea", user_id="alice", infer=False)["results"][0]["id"]
    hidden = mem.add("Alice likes coffee", user_id="alice", infer=False)["results"][0]["id"]
    mem.store.attach_session(legacy, Scope("alice", "coach"), "test")
    coach = mem.scoped(user_id="alice", agent_id="coach")
    assert coach.get(legacy) is not None and coach.get(hidden) is None
    # Attachments never lend power: the coach sees alice's memory, may not change it
    # (and the refusal names no other memory).
    with pytest.raises(AccessDeniedError) as caught:
        coach.update(legacy, "Alice likes coffee")
    assert hidden not in str(caught.value)
    assert mem.get(legacy)["memory"] == "Alice likes tea"  # type: ignore[index]
    # the unbound library is told which memory holds the text
    with pytest.raises(DuplicateMemoryError) as told:
        mem.update(legacy, "Alice likes coffee")
    assert told.value.existing_id == hidden


def test_keys_bind_a_run_and_old_key_files_migrate(tmp_path: Path) -> None:
    from engramdb.server.keys import KeyStore

    path = tmp_path / "keys.db"
    with sqlite3.connect(path) as old:  # a key file written before keys could bind a run
        old.execute(
            "CREATE TABLE api_keys (id TEXT PRIMARY KEY, secret_sha256 TEXT NOT NULL, name TEXT, "
            "user_id TEXT, agent_id TEXT, admin INTEGER NOT NULL DEFAULT 0, "
            "created_at TEXT NOT NULL, revoked_at TEXT)"
        )
        old.execute("PRAGMA user_version = 1")
    keys = KeyStore(path)
    created = keys.create(user_id="alice", run_id="r1")
    found = keys.verify(created.key)
    assert found is not None and found.scope == {"user_id": "alice", "run_id": "r1"}
    assert keys.create(run_id="r2").info.scope == {"run_id": "r2"}
    keys.close()


def test_scores_of_a_view_do_not_depend_on_memories_it_cannot_see(mem: Memory) -> None:
    # BM25's document frequencies and an entity's degree are statistics over a
    # set of memories: over the user's whole store they would let a bound
    # caller's scores tell whether hidden memories hold a word or a name.
    coach = mem.scoped(user_id="alice", agent_id="coach")
    coach.add("Alice's code word is QX7781923, she told Harriet Quimby", infer=False)
    coach.add("Alice walks every morning", infer=False)

    def scores() -> list[tuple[str, float, dict[str, Any]]]:
        hits = coach.search("QX7781923 Harriet Quimby", explain=True)["results"]
        return [(h["memory"], h["score"], h["score_details"]) for h in hits]

    before = scores()
    assert before and before[0][0].startswith("Alice's code word")
    for n in range(6):
        mem.add(f"Harriet Quimby holds passport QX7781923, copy {n}", user_id="alice", infer=False)
        mem.add(
            f"Harriet Quimby is alice's doctor {n}", user_id="alice", agent_id="doctor", infer=False
        )
    assert scores() == before
    # the unbound library still ranks over the whole user, where those memories count
    wide = mem.search("QX7781923 Harriet Quimby", user_id="alice", explain=True)["results"]
    assert len(wide) > len(before)
