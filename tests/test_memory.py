"""The sync Memory API on the embedded default: every method and every error."""

from __future__ import annotations

import asyncio
import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engramdb import (
    AsyncMemory,
    ConfigError,
    DuplicateMemoryError,
    EmbedderMismatchError,
    EngramError,
    ImportFormatError,
    Memory,
    MemoryNotFoundError,
    MessagesError,
    MetadataError,
    ScopeError,
    TextTooLongError,
    TimestampError,
    UnknownProviderError,
    ValidationError,
    VersionNotFoundError,
)
from engramdb.embedders import LocalEmbedder
from engramdb.stores import STORE_URL_ENV, SUPPORTED_STORES
from storage import holds_any, holds_text, raw_count, variants


def texts(result: dict[str, Any]) -> list[str]:
    return [r["memory"] for r in result["results"]]


# -- add -------------------------------------------------------------------------------


def test_add_string_stores_one_memory_with_fields(mem: Memory) -> None:
    out = mem.add("I am allergic to peanuts", user_id="alice", metadata={"source": "chat"})
    assert [r["event"] for r in out["results"]] == ["ADD"]
    item = mem.get(out["results"][0]["id"])
    assert item is not None
    assert item["memory"] == "I am allergic to peanuts"
    assert item["user_id"] == "alice"
    assert item["role"] == "user"
    assert item["metadata"] == {"source": "chat"}
    assert len(item["hash"]) == 32
    assert item["created_at"] == item["updated_at"]
    assert item["linked_memory_ids"] == []
    assert "agent_id" not in item and "run_id" not in item


def test_add_messages_keeps_role_and_name_skips_system(mem: Memory) -> None:
    out = mem.add(
        [
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "My dog is called Rex", "name": "bob"},
            {"role": "assistant", "content": "Rex is a great name!"},
        ],
        user_id="bob",
        agent_id="helper",
        run_id="s1",
    )
    assert texts(out) == ["My dog is called Rex", "Rex is a great name!"]
    items = {i["memory"]: i for i in mem.get_all(user_id="bob")["results"]}
    assert items["My dog is called Rex"]["actor_id"] == "bob"
    assert items["My dog is called Rex"]["role"] == "user"
    assert items["Rex is a great name!"]["role"] == "assistant"
    assert items["Rex is a great name!"]["agent_id"] == "helper"
    assert items["Rex is a great name!"]["run_id"] == "s1"


def test_exact_repeat_is_not_stored_twice(mem: Memory) -> None:
    first = mem.add("I live in Lisbon", user_id="alice")["results"][0]
    again = mem.add("  i LIVE in   lisbon ", user_id="alice")["results"][0]
    assert again["event"] == "NONE"
    assert again["id"] == first["id"]
    assert len(mem.get_all(user_id="alice")["results"]) == 1
    # another owner may hold the same text
    other = mem.add("I live in Lisbon", user_id="carol")["results"][0]
    assert other["event"] == "ADD" and other["id"] != first["id"]


def test_repeat_within_one_batch(mem: Memory) -> None:
    out = mem.add(
        [{"role": "user", "content": "hello"}, {"role": "user", "content": "Hello"}], user_id="u"
    )
    assert [r["event"] for r in out["results"]] == ["ADD", "NONE"]


def test_repeat_in_new_session_attaches_session(mem: Memory) -> None:
    first = mem.add("I play the violin", user_id="alice", run_id="r1")["results"][0]
    again = mem.add("I play the violin", user_id="alice", run_id="r2")["results"][0]
    assert again == {
        "id": first["id"],
        "memory": "I play the violin",
        "event": "NONE",
        "actor_id": None,
        "role": "user",
    }
    item = mem.get(first["id"])
    assert item is not None and item["run_ids"] == ["r1", "r2"]
    # the attached session finds it by filter and by search scope
    assert texts(mem.get_all(user_id="alice", run_id="r2")) == ["I play the violin"]
    assert texts(mem.search("violin", user_id="alice", run_id="r2")) == ["I play the violin"]
    events = [e["event"] for e in mem.history(first["id"])]
    assert events == ["ADD", "ATTACH"]
    # the same session again changes nothing and writes no history
    mem.add("I play the violin", user_id="alice", run_id="r2")
    assert len(mem.history(first["id"])) == 2


def test_timestamps_and_expiration(mem: Memory) -> None:
    out = mem.add(
        [{"role": "user", "content": "We moved house", "timestamp": "2023-05-08T13:56:00Z"}],
        user_id="u",
        expiration_date="2099-01-01",
    )
    item = mem.get(out["results"][0]["id"])
    assert item is not None
    assert item["observed_at"] == "2023-05-08T13:56:00.000000+00:00"
    # mem0's dates are inclusive: shown all through 2099-01-01 UTC, hidden from the 2nd
    assert item["expires_at"] == "2099-01-02T00:00:00.000000+00:00"
    assert item["expiration_date"] == "2099-01-01"
    moment = mem.add("Until noon", user_id="u", expiration_date="2099-01-01T12:00:00Z")
    until = mem.get(moment["results"][0]["id"])
    assert until is not None and until["expires_at"] == "2099-01-01T12:00:00.000000+00:00"
    assert until["expiration_date"] == "2099-01-01"
    call_ts = mem.add("Another fact", user_id="u", timestamp=1_700_000_000)["results"][0]
    got = mem.get(call_ts["id"])
    assert got is not None and got["observed_at"].startswith("2023-11-14T22:13:20")
    as_text = mem.add("A third fact", user_id="u", timestamp="1700000000")["results"][0]
    got = mem.get(as_text["id"])
    assert got is not None and got["observed_at"].startswith("2023-11-14T22:13:20")


def test_expired_memories_are_hidden_from_search_and_list(mem: Memory) -> None:
    mem.add("old coupon code XJ-77", user_id="u", expiration_date="2001-01-01")
    mem.add("current coupon code ZZ-12", user_id="u")
    assert texts(mem.get_all(user_id="u")) == ["current coupon code ZZ-12"]
    assert texts(mem.search("coupon code", user_id="u")) == ["current coupon code ZZ-12"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, ScopeError),
        ({"user_id": ""}, ScopeError),
        ({"user_id": "   "}, ScopeError),
        ({"user_id": 42}, ScopeError),
        ({"agent_id": ["a"]}, ScopeError),
        ({"user_id": "u", "metadata": "notadict"}, MetadataError),
        ({"user_id": "u", "metadata": {"user_id": "x"}}, MetadataError),
        ({"user_id": "u", "metadata": {"created_at": "x"}}, MetadataError),
        ({"user_id": "u", "metadata": {"k": {1, 2}}}, MetadataError),
        ({"user_id": "u", "metadata": {"k": float("nan")}}, MetadataError),
        ({"user_id": "u", "metadata": {"k": "a\x00b"}}, MetadataError),
        ({"user_id": "u", "metadata": {"k": [2**70]}}, MetadataError),
        ({"user_id": "u", "timestamp": "yesterday"}, TimestampError),
        ({"user_id": "u", "expiration_date": "2024-13-45"}, TimestampError),
        ({"user_id": "u", "timestamp": [1]}, TimestampError),
        ({"user_id": "u", "memory_type": "semantic"}, ValidationError),
        ({"user_id": "u", "memory_type": "procedural_memory", "agent_id": "a"}, ConfigError),
    ],
)
def test_add_rejects_bad_arguments(mem: Memory, kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error) as info:
        mem.add("a fact", **kwargs)
    assert isinstance(info.value, EngramError)
    assert mem.store.count() == 0


@pytest.mark.parametrize(
    "messages",
    [
        42,
        None,
        [],
        [42],
        [{"role": "user"}],
        [{"role": "user", "content": 5}],
        [{"role": "wizard", "content": "hi"}],
        [{"role": "user", "content": "   "}],
        [{"role": "user", "content": "hi", "name": ""}],
        [{"role": "user", "content": "hi", "timestamp": "not a date"}],
    ],
)
def test_add_rejects_bad_messages(mem: Memory, messages: Any) -> None:
    with pytest.raises(ValidationError):
        mem.add(messages, user_id="u")
    assert mem.store.count() == 0
    # nothing half-written either: no raw messages
    assert raw_count(mem.store, "messages") == 0


def test_messages_error_is_a_value_error(mem: Memory) -> None:
    with pytest.raises(ValueError, match="content"):
        mem.add([{"role": "user"}], user_id="u")
    with pytest.raises(MessagesError):
        mem.add([{"role": "user"}], user_id="u")


def test_text_limit(db_path: Path, embedder: LocalEmbedder) -> None:
    with Memory(db_path, {"limits": {"max_text_chars": 50}}, embedder=embedder) as m:
        with pytest.raises(TextTooLongError, match="limit is 50"):
            m.add("x" * 51, user_id="u")
        m.add("x" * 50, user_id="u")
        mid = m.get_all(user_id="u")["results"][0]["id"]
        with pytest.raises(TextTooLongError):
            m.update(mid, "y" * 51)


# -- search ----------------------------------------------------------------------------


def test_search_ranks_by_meaning_and_scores_in_range(mem: Memory) -> None:
    mem.add(
        [
            {"role": "user", "content": "I am vegetarian and never eat meat"},
            {"role": "user", "content": "My sister works as a nurse in Boston"},
            {"role": "user", "content": "I started learning to play the guitar"},
        ],
        user_id="alice",
    )
    res = mem.search("what food does alice avoid?", user_id="alice", top_k=3)["results"]
    assert res[0]["memory"] == "I am vegetarian and never eat meat"
    assert [r["score"] for r in res] == sorted((r["score"] for r in res), reverse=True)
    assert all(0.0 <= r["score"] <= 1.0 for r in res)
    assert len(mem.search("anything", user_id="alice", top_k=2)["results"]) == 2


def test_search_threshold_and_explain(mem: Memory) -> None:
    mem.add("I love hiking in the Alps", user_id="u")
    res = mem.search("mountain walks", user_id="u", explain=True)["results"]
    assert set(res[0]["score_details"]) >= {"semantic", "fusion", "rank"}
    assert mem.search("mountain walks", user_id="u", threshold=1.0)["results"] == []


def test_search_scope_from_filters_and_kwargs(mem: Memory) -> None:
    mem.add("tea with milk", user_id="u", agent_id="a1")
    mem.add("coffee black", user_id="u", agent_id="a2")
    assert texts(mem.search("drink", filters={"user_id": "u", "agent_id": "a2"})) == [
        "coffee black"
    ]
    assert texts(mem.search("drink", user_id="u", filters={"agent_id": "a1"})) == ["tea with milk"]
    with pytest.raises(ScopeError, match="twice"):
        mem.search("drink", user_id="u", filters={"user_id": "v"})


def test_search_metadata_filter(mem: Memory) -> None:
    mem.add("likes pizza", user_id="u", metadata={"topic": "food", "n": 1})
    mem.add("likes jazz", user_id="u", metadata={"topic": "music", "n": 2})
    assert texts(mem.search("likes", user_id="u", filters={"topic": "music"})) == ["likes jazz"]
    assert texts(mem.search("likes", user_id="u", filters={"n": {"gt": 1}})) == ["likes jazz"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"user_id": "u", "top_k": 0}, ValidationError),
        ({"user_id": "u", "top_k": -3}, ValidationError),
        ({"user_id": "u", "top_k": "5"}, ValidationError),
        ({"user_id": "u", "threshold": 1.5}, ValidationError),
        ({"user_id": "u", "threshold": -0.1}, ValidationError),
        ({}, ScopeError),
        ({"filters": {"topic": "x"}}, ScopeError),
        ({"user_id": "u", "filters": {"n": {"between": 1}}}, ValidationError),
    ],
)
def test_search_rejects_bad_arguments(mem: Memory, kwargs: dict[str, Any], error: type) -> None:
    with pytest.raises(error):
        mem.search("q", **kwargs)


def test_search_empty_query_rejected(mem: Memory) -> None:
    with pytest.raises(ValidationError, match="query"):
        mem.search("  ", user_id="u")


# -- scope isolation ---------------------------------------------------------------------


def test_other_users_memories_are_never_returned_or_touched(mem: Memory) -> None:
    a = mem.add("alice secret: the vault code is 1234", user_id="alice")["results"][0]["id"]
    mem.add("bob likes chess", user_id="bob")
    assert "alice" not in json.dumps(mem.search("vault code", user_id="bob"))
    assert texts(mem.get_all(user_id="bob")) == ["bob likes chess"]
    mem.delete_all(user_id="bob")
    assert mem.get(a) is not None
    mem.purge(user_id="bob")
    assert mem.get(a) is not None
    assert texts(mem.get_all(user_id="alice")) == ["alice secret: the vault code is 1234"]


def test_delete_all_touches_only_the_given_scope(mem: Memory) -> None:
    mem.add("run one fact", user_id="u", run_id="r1")
    mem.add("run two fact", user_id="u", run_id="r2")
    out = mem.delete_all(user_id="u", run_id="r1")
    assert out["deleted"] == 1
    assert texts(mem.get_all(user_id="u")) == ["run two fact"]
    with pytest.raises(ScopeError):
        mem.delete_all()


# -- get / get_all ------------------------------------------------------------------------


def test_get_unknown_and_bad_ids(mem: Memory) -> None:
    assert mem.get("no-such-id") is None
    with pytest.raises(ScopeError):
        mem.get("")
    with pytest.raises(ScopeError):
        mem.get(123)  # type: ignore[arg-type]


def test_get_all_newest_first_with_paging(mem: Memory) -> None:
    for i in range(7):
        mem.add(f"fact number {i}", user_id="u")
    page1 = texts(mem.get_all(user_id="u", top_k=3))
    page2 = texts(mem.get_all(user_id="u", top_k=3, offset=3))
    page3 = texts(mem.get_all(user_id="u", top_k=3, offset=6))
    assert page1 + page2 + page3 == [f"fact number {i}" for i in range(6, -1, -1)]
    with pytest.raises(ValidationError):
        mem.get_all(user_id="u", offset=-1)
    with pytest.raises(ScopeError):
        mem.get_all()


# -- update / delete / restore / history ---------------------------------------------------


def test_update_rewrites_text_vector_and_history(mem: Memory) -> None:
    mid = mem.add("I like tea", user_id="u", agent_id="a", metadata={"k": 1})["results"][0]["id"]
    out = mem.update(mid, "I like coffee now")
    assert out["memory"] == "I like coffee now"
    item = mem.get(mid)
    assert item is not None
    assert item["memory"] == "I like coffee now"
    assert item["metadata"] == {"k": 1}
    assert item["user_id"] == "u" and item["agent_id"] == "a"
    assert item["hash"] != out.get("old_hash")
    assert texts(mem.search("coffee", user_id="u", top_k=1)) == ["I like coffee now"]
    mem.update(mid, data="I like espresso")
    mem.update(mid, metadata={"k": 2})
    hist = mem.history(mid)
    assert [h["event"] for h in hist] == ["ADD", "UPDATE", "UPDATE", "UPDATE"]
    assert hist[1]["old_memory"] == "I like tea" and hist[1]["new_memory"] == "I like coffee now"
    assert hist[3]["old_metadata"] == {"k": 1} and hist[3]["new_metadata"] == {"k": 2}
    assert [h["version"] for h in hist] == [1, 2, 3, 4]
    assert all(h["actor"] == "api" for h in hist)
    assert [h["created_at"] for h in hist] == sorted(h["created_at"] for h in hist)


def test_update_errors(mem: Memory) -> None:
    a = mem.add("alpha", user_id="u")["results"][0]["id"]
    mem.add("beta", user_id="u")
    with pytest.raises(MemoryNotFoundError):
        mem.update("missing", "x")
    with pytest.raises(ValidationError):
        mem.update(a)
    with pytest.raises(MetadataError):
        mem.update(a, metadata={"hash": "x"})
    with pytest.raises(DuplicateMemoryError, match="already"):
        mem.update(a, "BETA")
    assert mem.get(a)["memory"] == "alpha"  # type: ignore[index]
    assert [h["event"] for h in mem.history(a)] == ["ADD"]


def test_delete_and_restore(mem: Memory) -> None:
    mid = mem.add("I have a cat named Miso", user_id="u")["results"][0]["id"]
    mem.delete(mid)
    assert mem.get(mid) is None
    assert mem.get_all(user_id="u")["results"] == []
    assert mem.search("cat", user_id="u")["results"] == []
    with pytest.raises(MemoryNotFoundError):
        mem.delete(mid)
    with pytest.raises(MemoryNotFoundError):
        mem.update(mid, "x")
    restored = mem.restore(mid)
    assert restored["memory"] == "I have a cat named Miso"
    assert texts(mem.search("cat", user_id="u")) == ["I have a cat named Miso"]
    assert [h["event"] for h in mem.history(mid)] == ["ADD", "DELETE", "RESTORE"]


def test_restore_update_to_previous_and_named_version(mem: Memory) -> None:
    mid = mem.add("v1 text", user_id="u", metadata={"v": 1})["results"][0]["id"]
    mem.update(mid, "v2 text", metadata={"v": 2})
    mem.update(mid, "v3 text", metadata={"v": 3})
    assert mem.restore(mid)["memory"] == "v2 text"
    item = mem.restore(mid, version=1)
    assert item["memory"] == "v1 text" and item["metadata"] == {"v": 1}
    assert texts(mem.search("v1 text", user_id="u", top_k=1)) == ["v1 text"]
    with pytest.raises(VersionNotFoundError):
        mem.restore(mid, version=99)
    with pytest.raises(VersionNotFoundError):
        mem.restore(mid, version=0)
    with pytest.raises(MemoryNotFoundError):
        mem.restore("missing")
    fresh = mem.add("only version", user_id="u")["results"][0]["id"]
    with pytest.raises(VersionNotFoundError, match="nothing to restore"):
        mem.restore(fresh)


def test_restore_blocked_by_live_duplicate(mem: Memory) -> None:
    mid = mem.add("same words", user_id="u")["results"][0]["id"]
    mem.delete(mid)
    mem.add("same words", user_id="u")
    with pytest.raises(DuplicateMemoryError):
        mem.restore(mid)
    assert mem.get(mid) is None


def test_history_of_an_unknown_id_is_empty_as_in_mem0(mem: Memory) -> None:
    assert mem.history("missing") == []


def test_source_messages_and_scope_counts_through_views(
    mem: Memory, embedder: LocalEmbedder
) -> None:
    said = [
        {"role": "user", "content": "I keep bees", "name": "Ann"},
        {"role": "assistant", "content": "How many hives?"},
    ]
    bees = mem.add(said, user_id="ann", agent_id="coach", run_id="r1", infer=False)["results"]
    mid = bees[0]["id"]
    mem.add("I keep bees", user_id="ann", run_id="r2", infer=False)  # a repeat, run r2
    mem.add("Bob's PIN is 4711", user_id="bob", infer=False)
    shown = mem.source_messages(mid)
    assert [(m["role"], m["content"], m["name"]) for m in shown] == [
        ("user", "I keep bees", "Ann"),
        ("user", "I keep bees", None),
    ]
    assert all(isinstance(m["id"], int) and "observed_at" in m for m in shown)
    coach = mem.scoped(user_id="ann", agent_id="coach")
    assert [m["name"] for m in coach.source_messages(mid)] == ["Ann"]
    assert [m["name"] for m in mem.scoped(user_id="ann", run_id="r2").source_messages(mid)] == [
        None
    ]
    with pytest.raises(MemoryNotFoundError):
        mem.scoped(user_id="bob").source_messages(mid)
    with pytest.raises(MemoryNotFoundError):
        mem.source_messages("00000000-0000-0000-0000-000000000000")

    # each verbatim message is a memory: "I keep bees" (r1, r2) and "How many hives?" (r1)
    counts = mem.scope_counts()
    assert (counts["live"], counts["expired"], counts["deleted"]) == (3, 0, 0)
    assert counts["users"] == {"ann": 2, "bob": 1} and counts["agents"] == {"coach": 2}
    assert counts["runs"] == {"r1": 2, "r2": 1} and sum(counts["per_day"].values()) == 3
    mem.delete(mid)
    [day] = counts["per_day"]
    assert coach.scope_counts() == {
        "live": 1,
        "expired": 0,
        "deleted": 1,
        "users": {"ann": 1},
        "agents": {"coach": 1},
        "runs": {"r1": 1},
        "per_day": {day: 2},
    }
    assert len(mem.source_messages(mid)) == 2  # deleted, not purged: still there

    async def async_face() -> None:
        async with AsyncMemory(config=mem.config, embedder=embedder) as amem:
            view = amem.scoped(user_id="ann", agent_id="coach")
            assert [m["name"] for m in await view.source_messages(mid)] == ["Ann"]
            assert (await view.scope_counts())["deleted"] == 1
            assert (await amem.scope_counts())["users"] == {"ann": 1, "bob": 1}

    asyncio.run(async_face())


def test_on_event_subscribers_see_every_change(db_path: Path, embedder: LocalEmbedder) -> None:
    seen: list[dict[str, Any]] = []

    def broken(_: dict[str, Any]) -> None:
        raise RuntimeError("subscriber bug")

    with Memory(db_path, embedder=embedder, on_event=[seen.append, broken]) as m:
        mid = m.add("event test", user_id="u")["results"][0]["id"]
        m.update(mid, "event test 2")
        m.delete(mid)
        m.restore(mid)
        assert [e["event"] for e in seen] == ["ADD", "UPDATE", "DELETE", "RESTORE"]
        # history() adds mem0's keys (id as text, updated_at, is_deleted, actor_id,
        # role) to what subscribers see
        listed = m.history(mid)
        assert [{**e, "id": str(e["id"])} for e in seen] == [
            {k: h[k] for k in seen[0]} for h in listed
        ]
        assert [h["is_deleted"] for h in listed] == [False, False, True, False]


# -- purge ---------------------------------------------------------------------------------


def test_purge_one_memory_leaves_no_trace_on_disk(mem: Memory) -> None:
    secret = "my passport number is QX7781923"
    mid = mem.add(secret, user_id="u")["results"][0]["id"]
    mem.update(mid, secret + " (renewed)")
    mem.add("an unrelated fact", user_id="u")
    assert holds_text(mem.store, "QX7781923")
    assert mem.purge(mid)["purged"] == 1
    assert mem.get(mid) is None
    assert mem.history(mid) == []
    with pytest.raises(MemoryNotFoundError):
        mem.restore(mid)
    # Every case variant: the next memory borrowed the number as a (lower-case) term.
    assert holds_any(mem.store, variants("QX7781923")) == []
    assert texts(mem.get_all(user_id="u")) == ["an unrelated fact"]


def test_purge_scope_removes_messages_and_history(mem: Memory) -> None:
    mem.add(
        [
            {"role": "system", "content": "sys prompt ZEBRA-42"},
            {"role": "user", "content": "user fact ZEBRA-43"},
        ],
        user_id="gone",
    )
    mem.add("keep me", user_id="stay")
    assert mem.purge(user_id="gone")["purged"] == 1
    assert holds_any(mem.store, variants("ZEBRA-42") + variants("ZEBRA-43")) == []
    assert texts(mem.get_all(user_id="stay")) == ["keep me"]
    with pytest.raises(ScopeError):
        mem.purge()
    with pytest.raises(ValidationError):
        mem.purge("some-id", user_id="u")
    with pytest.raises(MemoryNotFoundError):
        mem.purge("missing")


def test_reset_erases_everything(mem: Memory) -> None:
    mem.add("one", user_id="a")
    mem.add("two", user_id="b")
    mem.reset()
    assert mem.store.count() == 0
    mem.add("three", user_id="a")
    assert texts(mem.search("three", user_id="a")) == ["three"]


# -- configuration ---------------------------------------------------------------------------


def test_from_config_mem0_shape(tmp_path: Path) -> None:
    cfg = {
        "vector_store": {"provider": "sqlite", "config": {"path": str(tmp_path / "x.db")}},
        "embedder": {"provider": "local", "config": {}},
        "version": "v1.1",
    }
    with Memory.from_config(cfg) as m:
        m.add("configured", user_id="u")
        assert m.store.path == tmp_path / "x.db"


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        (
            {"vector_store": {"provider": "pinecone"}},
            "supported vector_store providers: pgvector, postgres, postgresql, sqlite",
        ),
        ({"embedder": {"provider": "magic"}}, "supported embedder providers"),
        ({"bogus": 1}, "bogus"),
        ({"limits": {"max_text_chars": 0}}, "max_text_chars"),
        ({"vector_store": {"provider": "sqlite", "config": {"pth": "x"}}}, "pth"),
        ({"retrieval": {"question_factor": 2}}, "question_factor"),
        ({"retrieval": {"superseded_factor": -1}}, "superseded_factor"),
    ],
)
def test_bad_config(tmp_path: Path, cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        Memory(tmp_path / "x.db", cfg)


def test_unknown_provider_error_lists_supported() -> None:
    with pytest.raises(UnknownProviderError) as info:
        Memory.from_config({"vector_store": {"provider": "pinecone"}})
    assert info.value.supported == sorted(SUPPORTED_STORES)


def test_engram_home_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, embedder: LocalEmbedder
) -> None:
    monkeypatch.setenv("ENGRAM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(STORE_URL_ENV, raising=False)
    with Memory(embedder=embedder) as m:
        assert m.store.path == tmp_path / "home" / "engram.db"


class _OtherEmbedder:
    """A second real embedder identity over the same model, to test the binding check."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner

    model = "someone-else/other-model"
    dim = 384

    def embed_documents(self, texts: list[str]) -> Any:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)


def test_store_refuses_a_different_embedder(db_path: Path, embedder: LocalEmbedder) -> None:
    with Memory(db_path, embedder=embedder) as m:
        m.add("bound to the local model", user_id="u")
    with Memory(db_path, embedder=_OtherEmbedder(embedder)) as m2:
        assert m2.get_all(user_id="u")["results"]  # reading needs no embedder
        with pytest.raises(EmbedderMismatchError, match="multilingual-e5-small"):
            m2.search("x", user_id="u")


def test_newer_schema_is_refused(db_path: Path, embedder: LocalEmbedder) -> None:
    Memory(db_path, embedder=embedder).close()
    con = sqlite3.connect(db_path)
    con.execute("PRAGMA user_version = 999")
    con.close()
    with pytest.raises(EngramError, match="newer"):
        Memory(db_path, embedder=embedder)


def test_closed_memory_raises(db_path: Path, embedder: LocalEmbedder) -> None:
    m = Memory(db_path, embedder=embedder)
    m.close()
    with pytest.raises(EngramError, match="closed"):
        m.get_all(user_id="u")


# -- export / import -------------------------------------------------------------------------


def test_jsonl_round_trip_reproduces_the_store(
    mem: Memory, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    a = mem.add("round trip one", user_id="u", run_id="r1", metadata={"x": [1, 2]})
    mem.add("round trip one", user_id="u", run_id="r2")
    b = mem.add("round trip two", user_id="v", agent_id="ag")["results"][0]["id"]
    mem.update(b, "round trip two, edited")
    c = mem.add("round trip three", user_id="u")["results"][0]["id"]
    mem.delete(c)
    buf = io.StringIO()
    assert mem.export_jsonl(buf) == 3
    with Memory(tmp_path / "copy.db", embedder=embedder) as copy:
        assert copy.import_jsonl(io.StringIO(buf.getvalue())) == 3
        for user in ("u", "v"):
            assert copy.get_all(user_id=user) == mem.get_all(user_id=user)
        for mid in (a["results"][0]["id"], b, c):
            assert copy.history(mid) == mem.history(mid)
        assert copy.get(c) is None
        assert copy.restore(c)["memory"] == "round trip three"
        assert texts(copy.search("edited", user_id="v", top_k=1)) == ["round trip two, edited"]
        again = io.StringIO()
        copy.export_jsonl(again)
        first = [json.loads(x) for x in buf.getvalue().splitlines()]
        second = [json.loads(x) for x in again.getvalue().splitlines()]
        assert first[:3] == second[:3]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("", "empty"),
        ("not json\n", "line 1"),
        ('{"engramdb_export": 1}\n{"id": "x"}\n', "line 2"),
        ('{"engramdb_export": 1}\n[1, 2]\n', "line 2"),
        ('{"something": "else"}\n', "header"),
    ],
)
def test_import_rejects_bad_files(mem: Memory, content: str, match: str) -> None:
    with pytest.raises(ImportFormatError, match=match):
        mem.import_jsonl(io.StringIO(content))
    assert mem.store.count() == 0


def test_import_into_store_with_same_ids_is_refused(mem: Memory) -> None:
    mem.add("exists already", user_id="u")
    buf = io.StringIO()
    mem.export_jsonl(buf)
    with pytest.raises(ImportFormatError, match="already exist"):
        mem.import_jsonl(io.StringIO(buf.getvalue()))
    assert mem.store.count() == 1


# -- the query-embedding cache ----------------------------------------------------------


class _CountingEmbedder:
    """The real model, counting its query embeddings."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.model, self.dim = inner.model, inner.dim
        self.queries: list[str] = []

    def embed_documents(self, texts: list[str]) -> Any:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        self.queries.append(text)
        return self.inner.embed_query(text)


def test_a_repeated_query_is_embedded_once(tmp_path: Path, embedder: LocalEmbedder) -> None:
    counting = _CountingEmbedder(embedder)
    config = {"query_cache": 2}
    with Memory(tmp_path / "q.db", config=config, embedder=counting) as m:  # type: ignore[arg-type]
        m.add("I like green tea", user_id="u", infer=False)
        first = m.search("tea", user_id="u")["results"]
        assert m.search("tea", user_id="u")["results"] == first
        assert counting.queries == ["tea"]
        m.search("coffee", user_id="u")
        m.search("cats", user_id="u")  # the cache holds 2: "tea" is out
        m.search("tea", user_id="u")
        assert counting.queries == ["tea", "coffee", "cats", "tea"]
        assert (m.query_cache.hits, len(m.query_cache)) == (1, 2)
    with Memory(tmp_path / "q.db", config={"query_cache": 0}, embedder=counting) as off:  # type: ignore[arg-type]
        off.search("tea", user_id="u")
        off.search("tea", user_id="u")
        assert counting.queries[-2:] == ["tea", "tea"]


def test_the_async_face_shares_the_cache_rule(tmp_path: Path, embedder: LocalEmbedder) -> None:
    counting = _CountingEmbedder(embedder)

    async def main() -> None:
        async with AsyncMemory(tmp_path / "a.db", embedder=counting) as m:  # type: ignore[arg-type]
            await m.add("I like green tea", user_id="u", infer=False)
            one = await m.search("tea", user_id="u")
            two = await m.search("tea", user_id="u")
            assert one == two and counting.queries == ["tea"]

    asyncio.run(main())


def test_cached_query_vectors_are_read_only() -> None:
    from engramdb.embedders.base import QueryCache

    cache = QueryCache(4)
    vec = cache.put("q", np.ones(3, dtype=np.float32))
    with pytest.raises(ValueError):
        vec[0] = 2.0
    got = cache.get("q")
    assert got is not None and float(got[0]) == 1.0
