"""The MCP server through the official `mcp` SDK client: `engram mcp` over stdio, and HTTP.

The stdio tests launch the real command as a subprocess, the way Claude
Desktop or an IDE does; the HTTP test serves the streamable HTTP app with a
real uvicorn on a loopback port and authenticates with API keys.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from engramdb import AsyncMemory, Memory
from engramdb.embedders import LocalEmbedder
from engramdb.server import KeyStore, MemoryService
from engramdb.server.mcp import TOOL_NAMES, KeyGuard, build_mcp
from live_server import live


def _stdio(tmp_path: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "engramdb.cli", "--db", str(tmp_path / "engram.db"), "mcp", *args],
        env={
            "ENGRAM_HOME": str(tmp_path / "home"),
            "ENGRAM_KEYS_DB": str(tmp_path / "keys.db"),
            "ENGRAM_LLM": "",
            "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        },
    )


def _run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with anyio.fail_after(120):
            await main()

    anyio.run(bounded)


def _text(result: Any) -> str:
    return " ".join(getattr(part, "text", "") for part in result.content)


def test_stdio_tools_add_search_update_history_delete(tmp_path: Path) -> None:
    async def main() -> None:
        async with Client(_stdio(tmp_path, "--user-id", "alice")) as client:
            tools = (await client.list_tools()).tools
            assert {t.name for t in tools} == set(TOOL_NAMES)
            for tool in tools:
                assert tool.description
                assert tool.input_schema["type"] == "object"
            search_tool = next(t for t in tools if t.name == "search_memories")
            assert search_tool.input_schema["required"] == ["query"]

            added = await client.call_tool(
                "add_memory",
                {
                    "messages": [
                        {"role": "user", "content": "I'm allergic to peanuts"},
                        {"role": "user", "content": "My cat is called Miso"},
                    ],
                    "metadata": {"source": "mcp"},
                },
            )
            assert not added.is_error, _text(added)
            assert [r["event"] for r in added.structured_content["results"]] == ["ADD", "ADD"]

            found = await client.call_tool("search_memories", {"query": "food allergy", "top_k": 1})
            assert not found.is_error
            hit = found.structured_content["results"][0]
            assert "peanuts" in hit["memory"] and hit["user_id"] == "alice"
            mid = hit["id"]
            assert "peanuts" in _text(found)  # the same result as text, for simple clients

            listed = await client.call_tool("list_memories", {})
            assert len(listed.structured_content["results"]) == 2

            updated = await client.call_tool(
                "update_memory",
                {"memory_id": mid, "text": "I'm allergic to cashews", "reason": "fix"},
            )
            assert updated.structured_content["memory"] == "I'm allergic to cashews"

            history = await client.call_tool("memory_history", {"memory_id": mid})
            events = history.structured_content["history"]
            assert [e["event"] for e in events] == ["ADD", "UPDATE"]
            assert events[1]["old_memory"] == "I'm allergic to peanuts"
            assert events[1]["reason"] == "fix"

            # the expiry, as over REST: set (hidden from lists and search), then cleared
            dated = await client.call_tool(
                "update_memory", {"memory_id": mid, "expiration_date": "2001-01-31"}
            )
            assert dated.structured_content["expiration_date"] == "2001-01-31"
            assert (
                len((await client.call_tool("list_memories", {})).structured_content["results"])
                == 1
            )
            shown = await client.call_tool(
                "search_memories", {"query": "cashews", "show_expired": True}
            )
            assert mid in [r["id"] for r in shown.structured_content["results"]]
            both = await client.call_tool(
                "update_memory",
                {"memory_id": mid, "expiration_date": "2001-01-31", "clear_expiration": True},
            )
            assert both.is_error and "validation_error" in _text(both)
            await client.call_tool("update_memory", {"memory_id": mid, "clear_expiration": True})
            assert (
                len((await client.call_tool("list_memories", {})).structured_content["results"])
                == 2
            )

            # A change of mind, linked: search answers for now, and for then.
            cat = next(
                r["id"] for r in listed.structured_content["results"] if "Miso" in r["memory"]
            )
            moved = await client.call_tool(
                "add_memory",
                {
                    "messages": "Miso went to live with my sister",
                    "infer": False,
                    "links": {cat: "updates"},
                },
            )
            assert not moved.is_error, _text(moved)
            gone = moved.structured_content["results"][0]["id"]
            now = await client.call_tool(
                "search_memories", {"query": "my cat Miso", "include_superseded": False}
            )
            assert cat not in [r["id"] for r in now.structured_content["results"]]
            assert gone in [r["id"] for r in now.structured_content["results"]]
            then = await client.call_tool(
                "search_memories", {"query": "my cat Miso", "as_of": "2001-01-01"}
            )
            assert then.structured_content["results"] == []  # nothing was said by then
            anyway = await client.call_tool("search_memories", {"query": "my cat Miso"})
            marked = {r["id"]: r["superseded_by"] for r in anyway.structured_content["results"]}
            assert marked[cat] == [gone]

            deleted = await client.call_tool("delete_memory", {"memory_id": mid})
            assert deleted.structured_content["id"] == mid
            gone = await client.call_tool("get_memory", {"memory_id": mid})
            assert gone.is_error and _text(gone).count("not_found") == 1

            # Bad input: a tool error that says what is wrong, never a crash.
            bad = {
                "search_memories": [
                    ({}, "query"),
                    ({"query": 5}, "query"),
                    ({"query": "x", "top_k": 0}, "top_k"),
                    ({"query": "x", "top_k": 10_000}, "limit_exceeded"),
                    ({"query": "x", "user_id": "bob"}, "scope_forbidden"),
                    ({"query": "x", "filters": {"user_id": "bob"}}, "scope_forbidden"),
                    ({"query": "x", "filters": {"a": {"gt": True}}}, "invalid_filter"),
                    ({"query": "   "}, "validation_error"),
                ],
                "add_memory": [
                    ({"messages": []}, "invalid_messages"),
                    ({"messages": "x", "metadata": {"id": 1}}, "invalid_metadata"),
                    ({"messages": [{"role": "robot", "content": "x"}]}, "role"),
                ],
                "update_memory": [({"memory_id": mid}, "validation_error")],
                "get_memory": [({"memory_id": "no-such-id"}, "not_found")],
            }
            for tool_name, cases in bad.items():
                for arguments, expected in cases:
                    result = await client.call_tool(tool_name, arguments)
                    assert result.is_error, (tool_name, arguments)
                    assert expected in _text(result), (tool_name, arguments, _text(result))

    _run(main)
    with Memory(tmp_path / "engram.db") as m:
        remaining = m.get_all(user_id="alice")["results"]
        assert [r["memory"] for r in remaining] == [
            "Miso went to live with my sister",
            "My cat is called Miso",
        ]
        assert m.get_all(user_id="bob")["results"] == []


def test_stdio_restore_memory_undoes_updates_and_deletes(tmp_path: Path) -> None:
    async def main() -> None:
        async with Client(_stdio(tmp_path, "--user-id", "alice")) as client:
            added = await client.call_tool("add_memory", {"messages": "I live in Porto"})
            assert not added.is_error, _text(added)
            mid = added.structured_content["results"][0]["id"]
            for text in ("I live in Lisbon", "I live in Faro"):
                await client.call_tool("update_memory", {"memory_id": mid, "text": text})

            back = await client.call_tool("restore_memory", {"memory_id": mid})
            assert not back.is_error, _text(back)
            assert back.structured_content["memory"] == "I live in Lisbon"  # one version back
            first = await client.call_tool("restore_memory", {"memory_id": mid, "version": 1})
            assert first.structured_content["memory"] == "I live in Porto"
            history = await client.call_tool("memory_history", {"memory_id": mid})
            events = history.structured_content["history"]
            assert [e["event"] for e in events] == ["ADD", "UPDATE", "UPDATE", "RESTORE", "RESTORE"]

            await client.call_tool("delete_memory", {"memory_id": mid})
            undeleted = await client.call_tool("restore_memory", {"memory_id": mid})
            assert not undeleted.is_error, _text(undeleted)
            got = await client.call_tool("get_memory", {"memory_id": mid})
            assert got.structured_content["memory"] == "I live in Porto"

            for arguments, expected in (
                ({"memory_id": mid, "version": 99}, "version_not_found"),
                ({"memory_id": "no-such-id"}, "not_found"),
                ({"memory_id": mid, "version": 0}, "version"),
                ({}, "memory_id"),
            ):
                result = await client.call_tool("restore_memory", arguments)
                assert result.is_error, arguments
                assert expected in _text(result), (arguments, _text(result))

    _run(main)
    with Memory(tmp_path / "engram.db") as m:
        assert m.get_all(user_id="alice")["results"][0]["memory"] == "I live in Porto"


def test_stdio_with_an_api_key_uses_its_scope_and_honours_revocation(tmp_path: Path) -> None:
    keys = KeyStore(tmp_path / "keys.db")
    bob = keys.create(user_id="bob")
    with Memory(tmp_path / "engram.db") as m:
        alice_id = m.add("alice's secret diary", user_id="alice")["results"][0]["id"]

    async def main() -> None:
        async with Client(_stdio(tmp_path, "--api-key", bob.key)) as client:
            added = await client.call_tool("add_memory", {"messages": "bob likes jazz"})
            assert added.structured_content["results"][0]["event"] == "ADD"
            hits = await client.call_tool("search_memories", {"query": "diary secret"})
            assert all(h["user_id"] == "bob" for h in hits.structured_content["results"])
            peek = await client.call_tool("get_memory", {"memory_id": alice_id})
            assert peek.is_error and "not_found" in _text(peek)
            keys.revoke(bob.info.id)
            refused = await client.call_tool("list_memories", {})
            assert refused.is_error and "unauthorized" in _text(refused)

    _run(main)


def test_http_transport_needs_a_key_and_scopes_by_it(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    memory = AsyncMemory(tmp_path / "engram.db", embedder=embedder, llm=None)
    keys = KeyStore(tmp_path / "keys.db")
    alice, bob = keys.create(user_id="alice").key, keys.create(user_id="bob").key
    server = build_mcp(MemoryService(memory), keys=keys)
    app = KeyGuard(server.streamable_http_app(), keys)

    @asynccontextmanager
    async def client(url: str, key: str) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http)) as connected,
        ):
            yield connected

    with live(app) as running:
        url = f"{running.url}/mcp"
        refused = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"

        async def main() -> None:
            async with client(url, alice) as a:
                assert len((await a.list_tools()).tools) == len(TOOL_NAMES)
                added = await a.call_tool("add_memory", {"messages": "alice plays chess"})
                assert not added.is_error, _text(added)
                mid = added.structured_content["results"][0]["id"]
            async with client(url, bob) as b:
                peek = await b.call_tool("get_memory", {"memory_id": mid})
                assert peek.is_error and "not_found" in _text(peek)
                listed = await b.call_tool("list_memories", {})
                assert listed.structured_content["results"] == []
                forbidden = await b.call_tool("list_memories", {"user_id": "alice"})
                assert forbidden.is_error and "scope_forbidden" in _text(forbidden)

        _run(main)
    anyio.run(memory.close)


def test_an_unreachable_store_is_a_tool_error_saying_to_retry_later() -> None:
    from engramdb import StoreUnavailableError
    from engramdb.server.errors import describe_error_mem0
    from engramdb.server.mcp import _tool_error

    exc = StoreUnavailableError("PostgreSQL cannot be reached", retry_after=5)
    message = str(_tool_error(exc))
    assert message.startswith("store_unavailable: PostgreSQL cannot be reached")
    assert "unavailable, retry in 5 s" in message
    # mem0 compatibility mode: the same 503 (its handler adds Retry-After)
    assert describe_error_mem0(exc) == (
        503,
        {"detail": "PostgreSQL cannot be reached", "code": "store_unavailable"},
    )
