"""The OpenAI Agents SDK integration, through the SDK's real Runner.

The model is the local OpenAI-wire server (``openai_server``): each test
scripts its chat completions replies — tool calls, then an answer — and the
real SDK (``OpenAIChatCompletionsModel`` on an ``AsyncOpenAI`` client) talks
to it over HTTP. What a tool returned is asserted on the next request the
server received, i.e. on what the SDK sent back to the model. engramdb is
real too: SQLite in tmp_path and the local embedding model.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    FunctionTool,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    SQLiteSession,
    UserError,
    set_tracing_disabled,
)
from agents.result import RunResult
from openai import AsyncOpenAI

from engramdb import AsyncMemory, Memory, ScopeError
from engramdb.embedders import LocalEmbedder
from engramdb.integrations.openai_agents import (
    TOOL_NAMES,
    aremember_run,
    memory_tools,
    remember_run,
    run_messages,
)
from engramdb.llms.scripted import ScriptedLLM
from openai_wire import Reply, WireServer

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def _no_tracing() -> None:
    # Every run also passes RunConfig(tracing_disabled=True); this makes sure
    # nothing in the SDK tries to export traces from this process.
    set_tracing_disabled(True)


# -- scripting the model ---------------------------------------------------------------


_call_ids = itertools.count()


def calls(*tool_calls: tuple[str, dict[str, Any] | str]) -> Reply:
    """A chat completion whose message calls tools (arguments: a dict, or raw text)."""
    batch = next(_call_ids)  # the SDK refuses a call id reused within a run
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{batch}_{n}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for n, (name, args) in enumerate(tool_calls)
        ],
    }
    return Reply(
        body={
            "id": "chatcmpl-tools",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "test-model",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        }
    )


def outputs(server: WireServer, request: int = -1) -> list[str]:
    """What the SDK sent back to the model for the latest batch of tool calls, in order."""
    messages = server.chat_requests[request].messages
    calls = messages[max(n for n, m in enumerate(messages) if m.get("tool_calls"))]
    by_id = {m["tool_call_id"]: m["content"] for m in messages if m.get("role") == "tool"}
    return [by_id[c["id"]] for c in calls["tool_calls"]]


def run(
    server: WireServer,
    tools: list[Any],
    prompt: str | list[Any] = "hi",
    *,
    context: Any = None,
    session: Any = None,
) -> RunResult:
    return asyncio.run(arun(server, tools, prompt, context=context, session=session))


async def arun(
    server: WireServer,
    tools: list[Any],
    prompt: str | list[Any] = "hi",
    *,
    context: Any = None,
    session: Any = None,
) -> RunResult:
    async with AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0) as client:
        agent = Agent(
            name="assistant",
            instructions="You remember things.",
            tools=tools,
            model=OpenAIChatCompletionsModel(model="test-model", openai_client=client),
        )
        return await Runner.run(
            agent,
            prompt,
            context=context,
            session=session,
            run_config=RunConfig(tracing_disabled=True),
        )


@pytest.fixture
def memory(tmp_path: Path, embedder: LocalEmbedder) -> Iterator[Memory]:
    with Memory(tmp_path / "engram.db", embedder=embedder) as m:
        yield m


def texts(memory: Memory, **scope: str) -> list[str]:
    return sorted(r["memory"] for r in memory.get_all(**scope)["results"])


# -- the tools -------------------------------------------------------------------------


def test_tools_have_fixed_names_and_no_scope_parameters(memory: Memory) -> None:
    tools = memory_tools(memory, user_id="alice")
    assert [t.name for t in tools] == list(TOOL_NAMES)
    for tool in tools:
        assert isinstance(tool, FunctionTool)
        schema = tool.params_json_schema
        assert schema["additionalProperties"] is False
        assert sorted(schema["required"]) == sorted(schema["properties"])
        assert not set(schema["properties"]) & {"user_id", "agent_id", "run_id", "filters"}
        assert tool.strict_json_schema
    read_only = memory_tools(memory, user_id="alice", include=["search_memories"])
    assert [t.name for t in read_only] == ["search_memories"]

    with pytest.raises(ScopeError):
        memory_tools(memory)  # no scope: refused when the tools are built
    with pytest.raises(ValueError, match="unknown memory tool"):
        memory_tools(memory, user_id="alice", include=["purge"])
    with pytest.raises(TypeError):
        memory_tools(object(), user_id="alice")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"reserved|metadata"):
        memory_tools(memory, user_id="alice", metadata={"user_id": "bob"})


def test_remember_then_search_through_the_runner(memory: Memory, openai_server: WireServer) -> None:
    tools = memory_tools(memory, user_id="alice", metadata={"source": "agent"})
    openai_server.replies(calls(("remember", {"text": "Alice is allergic to peanuts"})), "Noted.")
    result = run(openai_server, tools, "I'm allergic to peanuts, remember that")
    assert result.final_output == "Noted."
    first = openai_server.chat_requests[0].json
    assert [t["function"]["name"] for t in first["tools"]] == list(TOOL_NAMES)
    assert all(t["function"]["strict"] for t in first["tools"])

    stored = memory.get_all(user_id="alice")["results"]
    assert [(r["memory"], r["user_id"], r["metadata"]) for r in stored] == [
        ("Alice is allergic to peanuts", "alice", {"source": "agent"})
    ]
    assert "agent_id" not in stored[0] and "run_id" not in stored[0]
    sent = json.loads(outputs(openai_server)[0])
    assert sent["results"] == [
        {"id": stored[0]["id"], "memory": "Alice is allergic to peanuts", "event": "ADD"}
    ]

    # A new run, no history: only long-term memory knows about the peanuts.
    openai_server.reset()
    openai_server.replies(
        calls(("search_memories", {"query": "what food must alice avoid?", "limit": None})),
        "Avoid peanuts.",
    )
    result = run(openai_server, tools, "What should I not eat?")
    assert result.final_output == "Avoid peanuts."
    hits = json.loads(outputs(openai_server)[0])["results"]
    assert hits[0]["memory"] == "Alice is allergic to peanuts"
    assert hits[0]["id"] == stored[0]["id"]
    assert 0 < hits[0]["score"] <= 1
    assert openai_server.pending == 0


def test_repeated_remember_reports_none_and_stores_once(
    memory: Memory, openai_server: WireServer
) -> None:
    tools = memory_tools(memory, user_id="alice")
    openai_server.replies(
        calls(("remember", {"text": "Alice likes tea"})),
        calls(("remember", {"text": "alice likes tea  "})),
        "ok",
    )
    run(openai_server, tools)
    assert json.loads(outputs(openai_server)[0])["results"][0]["event"] == "NONE"
    assert texts(memory, user_id="alice") == ["Alice likes tea"]


def test_update_and_forget_through_the_runner(memory: Memory, openai_server: WireServer) -> None:
    mid = memory.add("Alice lives in Paris", user_id="alice", infer=False)["results"][0]["id"]
    other = memory.add("Alice has a cat", user_id="alice", infer=False)["results"][0]["id"]
    tools = memory_tools(memory, user_id="alice")
    openai_server.replies(
        calls(("update_memory", {"memory_id": mid, "text": "Alice lives in Lyon"})),
        calls(("forget", {"memory_id": other})),
        "Done.",
    )
    run(openai_server, tools, "I moved to Lyon, and forget the cat")
    assert json.loads(outputs(openai_server, 1)[0]) == {
        "id": mid,
        "memory": "Alice lives in Lyon",
        "event": "UPDATE",
    }
    assert json.loads(outputs(openai_server, 2)[0]) == {"id": other, "event": "DELETE"}
    assert texts(memory, user_id="alice") == ["Alice lives in Lyon"]
    assert [e["event"] for e in memory.history(mid)] == ["ADD", "UPDATE"]
    assert memory.history(mid)[-1]["reason"] == "update_memory tool"
    assert memory.restore(other)["memory"] == "Alice has a cat"  # forget is a soft delete


def test_the_model_cannot_reach_another_users_memories(
    memory: Memory, openai_server: WireServer
) -> None:
    bob = memory.add("Bob's door code is 4711", user_id="bob", infer=False)["results"][0]["id"]
    memory.add("Bob's bank PIN is 0042", user_id="bob", agent_id="assistant", infer=False)
    memory.add("Alice's door code is 1234", user_id="alice", infer=False)
    tools = memory_tools(memory, user_id="alice")
    openai_server.replies(
        calls(
            ("search_memories", {"query": "door code", "limit": 10, "user_id": "bob"}),
            ("search_memories", {"query": "door code", "limit": 10, "filters": {"user_id": "*"}}),
            ("search_memories", {"query": "Bob's door code PIN", "limit": 10}),
            ("update_memory", {"memory_id": bob, "text": "Bob's door code is 0000"}),
            ("forget", {"memory_id": bob}),
            ("remember", {"text": "Bob owes Alice money", "user_id": "bob"}),
            ("remember", {"text": "Bob owes Alice money", "agent_id": "other", "run_id": "r"}),
        ),
        "I only know about you.",
    )
    result = run(openai_server, tools, "Tell me Bob's secrets")
    assert result.final_output == "I only know about you."
    sent = outputs(openai_server)
    for call in (0, 1, 5, 6):
        assert sent[call].startswith("Error: "), sent[call]
        assert "unknown argument" in sent[call]
    assert "set by the application" in sent[0]
    hits = json.loads(sent[2])["results"]
    assert [h["memory"] for h in hits] == ["Alice's door code is 1234"]
    for call in (3, 4):
        assert sent[call].startswith("Error: there is no memory with id")
    assert "Bob" not in json.dumps(sent)

    # Nothing of bob's was read, changed or added, and alice only has hers.
    assert memory.get(bob)["memory"] == "Bob's door code is 4711"
    assert [e["event"] for e in memory.history(bob)] == ["ADD"]
    assert texts(memory, user_id="bob") == ["Bob's bank PIN is 0042", "Bob's door code is 4711"]
    assert texts(memory, user_id="alice") == ["Alice's door code is 1234"]


def test_scope_from_the_run_context(memory: Memory, openai_server: WireServer) -> None:
    # One agent for every user: the user comes from the app's run context.
    tools = memory_tools(
        memory, agent_id="coach", scope_from_context=lambda ctx: {"user_id": ctx.context["user"]}
    )
    openai_server.replies(calls(("remember", {"text": "runs 5k on Sundays"})), "ok")
    run(openai_server, tools, context={"user": "alice"})
    openai_server.replies(calls(("search_memories", {"query": "running", "limit": 5})), "ok")
    run(openai_server, tools, context={"user": "bob"})
    assert json.loads(outputs(openai_server)[0]) == {"results": []}
    assert texts(memory, user_id="alice", agent_id="coach") == ["runs 5k on Sundays"]
    assert texts(memory, user_id="bob") == []

    # A context naming another agent than the fixed one, or no scope at all, is the
    # application's bug: the run fails instead of the model being told.
    for bad in ({"user_id": "alice", "agent_id": "other"}, {}):
        broken = memory_tools(memory, agent_id="coach", scope_from_context=lambda ctx, b=bad: b)
        openai_server.replies(calls(("search_memories", {"query": "x", "limit": 1})))
        with pytest.raises(UserError):
            run(openai_server, broken)
    unscoped = memory_tools(memory, scope_from_context=lambda ctx: {})
    openai_server.replies(calls(("search_memories", {"query": "x", "limit": 1})))
    with pytest.raises(UserError):
        run(openai_server, unscoped)


def test_bad_arguments_come_back_to_the_model_as_errors(
    memory: Memory, openai_server: WireServer
) -> None:
    for instrument in ("cello", "piano", "flute", "oboe", "harp"):
        memory.add(f"Alice plays the {instrument}", user_id="alice", infer=False)
    tools = memory_tools(memory, user_id="alice", default_limit=2, max_limit=3)
    bad: list[tuple[str, dict[str, Any] | str]] = [
        ("search_memories", "{not json"),
        ("search_memories", "[1, 2]"),
        ("search_memories", {"query": 5, "limit": None}),
        ("search_memories", {"limit": 2}),
        ("search_memories", {"query": "cello", "limit": "ten"}),
        ("search_memories", {"query": "cello", "limit": 0}),
        ("search_memories", {"query": "cello", "limit": True}),
        ("remember", {"text": "   "}),
        ("remember", {}),
        ("remember", {"text": "x" * 20_001}),
        ("update_memory", {"memory_id": "no-such-id", "text": "y"}),
        ("forget", {"memory_id": ["a"]}),
    ]
    openai_server.replies(
        calls(*bad),
        calls(("search_memories", {"query": "cello", "limit": 1000}), ("search_memories", "")),
        "Sorry.",
    )
    result = run(openai_server, tools)
    assert result.final_output == "Sorry."
    sent = outputs(openai_server, 1)
    assert len(sent) == len(bad)
    for n, (name, _) in enumerate(bad):
        assert sent[n].startswith("Error: "), (name, sent[n])
    assert "not valid JSON" in sent[0]
    assert "query must be a string" in sent[2]
    assert "query is required" in sent[3]
    assert "limit" in sent[4] and "limit" in sent[5] and "limit" in sent[6]
    assert sent[9] == "Error: text is 20001 characters long; at most 20000 fit"
    assert "no memory with id 'no-such-id'" in sent[10]
    # A too-large limit is capped at max_limit; empty arguments miss the query.
    later = outputs(openai_server, 2)
    hits = json.loads(later[0])["results"]
    assert len(hits) == 3 and hits[0]["memory"] == "Alice plays the cello"
    assert later[1] == "Error: query is required"
    assert len(texts(memory, user_id="alice")) == 5


def test_unexpected_failures_are_logged_and_reported_without_details(
    memory: Memory,
    openai_server: WireServer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tools = memory_tools(memory, user_id="alice")

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OSError("disk on fire at /secret/path")

    monkeypatch.setattr(Memory, "search", broken)
    openai_server.replies(calls(("search_memories", {"query": "x", "limit": 1})), "ok")
    with caplog.at_level("ERROR", logger="engramdb"):
        result = run(openai_server, tools)
    assert result.final_output == "ok"
    assert outputs(openai_server)[0] == "Error: the memory tool failed; try again later"
    assert "secret" not in json.dumps(openai_server.chat_requests[-1].json)
    assert any("memory tool search_memories failed" in r.message for r in caplog.records)


def test_infer_true_extracts_with_the_configured_llm(
    tmp_path: Path, embedder: LocalEmbedder, openai_server: WireServer
) -> None:
    fact = {"text": "Alice is vegan", "attributed_to": "user", "linked_memory_ids": []}
    llm = ScriptedLLM([{"memory": [fact]}, "not json", "still not json"])
    with Memory(tmp_path / "e.db", embedder=embedder, llm=llm) as m:
        tools = memory_tools(m, user_id="alice", infer=True)
        openai_server.replies(
            calls(("remember", {"text": "she said she went vegan last month"})),
            calls(("remember", {"text": "something else"})),
            "ok",
        )
        run(openai_server, tools)
        got = json.loads(outputs(openai_server, 1)[0])["results"]
        assert [(r["memory"], r["event"]) for r in got] == [("Alice is vegan", "ADD")]
        assert outputs(openai_server, 2)[0].startswith("Error: the text was kept")
        assert len(m.failures(user_id="alice")) == 1
        assert texts(m, user_id="alice") == ["Alice is vegan"]


def test_async_memory_tools(
    tmp_path: Path, embedder: LocalEmbedder, openai_server: WireServer
) -> None:
    async def main() -> None:
        async with AsyncMemory(tmp_path / "a.db", embedder=embedder) as am:
            await am.add("Bob's secret is 99", user_id="bob", infer=False)
            tools = memory_tools(am, user_id="alice", run_id="chat-1")
            openai_server.replies(
                calls(("remember", {"text": "Alice's favourite colour is green"})),
                calls(("search_memories", {"query": "favourite colour secret", "limit": 5})),
                "Green.",
            )
            result = await arun(openai_server, tools, "what is my favourite colour?")
            assert result.final_output == "Green."
            hits = json.loads(outputs(openai_server)[0])["results"]
            assert [h["memory"] for h in hits] == ["Alice's favourite colour is green"]
            stored = (await am.get_all(user_id="alice"))["results"]
            assert [(r["memory"], r["run_id"]) for r in stored] == [
                ("Alice's favourite colour is green", "chat-1")
            ]
            openai_server.replies(calls(("forget", {"memory_id": hits[0]["id"]})), "Gone.")
            await arun(openai_server, tools)
            assert (await am.get_all(user_id="alice"))["results"] == []

    asyncio.run(main())


class SlowEmbedder:
    """The real model, made slow (a blocking sleep) so a blocked event loop shows."""

    def __init__(self, inner: LocalEmbedder, delay: float) -> None:
        self.inner, self.delay = inner, delay
        self.windows: list[tuple[float, float]] = []
        self.lock = threading.Lock()

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def dim(self) -> int:
        return self.inner.dim

    def _slow(self) -> None:
        start = time.monotonic()
        time.sleep(self.delay)
        with self.lock:
            self.windows.append((start, time.monotonic()))

    def embed_documents(self, texts: list[str]) -> Any:
        self._slow()
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> Any:
        self._slow()
        return self.inner.embed_query(text)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_tool_calls_do_not_block_the_event_loop(
    face: str, tmp_path: Path, embedder: LocalEmbedder, openai_server: WireServer
) -> None:
    slow = SlowEmbedder(embedder, 0.3)
    cls = Memory if face == "sync" else AsyncMemory
    m = cls(tmp_path / "s.db", embedder=slow)  # type: ignore[arg-type]
    tools = memory_tools(m, user_id="alice")
    openai_server.replies(calls(("search_memories", {"query": "anything", "limit": 1})), "ok")
    ticks: list[float] = []

    async def main() -> None:
        stop = asyncio.Event()

        async def ticker() -> None:
            while not stop.is_set():
                ticks.append(time.monotonic())
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        try:
            await arun(openai_server, tools)
        finally:
            stop.set()
            await task
            if isinstance(m, AsyncMemory):
                await m.close()
            else:
                m.close()

    asyncio.run(main())
    assert slow.windows, "the search did not embed its query"
    start, end = slow.windows[0]
    assert sum(start < t < end for t in ticks) >= 3, "the event loop was blocked"


# -- remembering a run -----------------------------------------------------------------


def test_remember_run_stores_the_new_turn_without_tool_traffic(
    memory: Memory, openai_server: WireServer
) -> None:
    tools = memory_tools(memory, user_id="alice")
    openai_server.replies(
        calls(("search_memories", {"query": "trip", "limit": 3})), "Enjoy Lisbon!"
    )
    history = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi! How can I help?"},
        {"role": "user", "content": [{"type": "input_text", "text": "I'm flying to Lisbon"}]},
    ]
    result = run(openai_server, tools, history)
    assert run_messages(result) == [
        {"role": "user", "content": "I'm flying to Lisbon"},
        {"role": "assistant", "content": "Enjoy Lisbon!"},
    ]
    added = remember_run(memory, result, user_id="alice", run_id="chat-7")
    assert [r["event"] for r in added["results"]] == ["ADD", "ADD"]
    rows = memory.get_all(user_id="alice", run_id="chat-7")["results"]
    assert sorted((r["role"], r["memory"]) for r in rows) == [
        ("assistant", "Enjoy Lisbon!"),
        ("user", "I'm flying to Lisbon"),
    ]
    with pytest.raises(TypeError):
        asyncio.run(aremember_run(memory, result, user_id="alice"))  # type: ignore[arg-type]


def test_remember_run_with_a_session_takes_only_the_last_turn(
    memory: Memory, openai_server: WireServer
) -> None:
    session = SQLiteSession("chat-1")  # in memory
    try:
        openai_server.replies("Nice to meet you, Alice.")
        run(openai_server, [], "My name is Alice", session=session)
        openai_server.replies("Oslo is lovely.")
        result = run(openai_server, [], "I live in Oslo", session=session)
        # The session replayed the first turn to the model; only the second is new.
        assert len(openai_server.chat_requests[-1].messages) == 4
        assert run_messages(result) == [
            {"role": "user", "content": "I live in Oslo"},
            {"role": "assistant", "content": "Oslo is lovely."},
        ]
        remember_run(memory, result, user_id="alice", infer=False)
        assert texts(memory, user_id="alice") == ["I live in Oslo", "Oslo is lovely."]
    finally:
        session.close()


def test_aremember_run_with_async_memory(
    tmp_path: Path, embedder: LocalEmbedder, openai_server: WireServer
) -> None:
    async def main() -> None:
        async with AsyncMemory(tmp_path / "r.db", embedder=embedder) as am:
            openai_server.replies("Got it.")
            result = await arun(openai_server, [], "I prefer window seats")
            added = await aremember_run(am, result, agent_id="travel")
            assert [r["memory"] for r in added["results"]] == ["I prefer window seats", "Got it."]
            with pytest.raises(TypeError):
                remember_run(am, result, agent_id="travel")  # type: ignore[arg-type]

    asyncio.run(main())


# -- the example -----------------------------------------------------------------------


def test_example_runs_offline() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["OPENBLAS_NUM_THREADS"] = "1"
    done = subprocess.run(
        [sys.executable, "-W", "error", str(ROOT / "examples/openai_agents_memory.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "agent > Got it, I'll remember that." in lines
    assert "agent > From memory: I'm allergic to peanuts." in lines
    assert lines[-1] == "agent > I don't know anything about that."  # bob's agent
