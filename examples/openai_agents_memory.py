"""An OpenAI Agents SDK agent with long-term memory in engramdb.

    pip install 'engramdb[agents]'
    python examples/openai_agents_memory.py

The agent gets engramdb's memory tools for one user: it stores a fact in one
conversation and recalls it in a later one, while another user's agent sees
none of it. Memories live in a temporary SQLite file with the bundled local
embedding model.

Offline by default: the model is a scripted stand-in served on 127.0.0.1 in
the OpenAI chat completions wire format (it calls ``remember`` for a message
starting with "Remember", else ``search_memories``, then answers from the
tool's output). With ``OPENAI_API_KEY`` or ``OPENAI_BASE_URL`` set it runs
against that endpoint instead (``OPENAI_MODEL`` picks the model, default
``gpt-4.1-mini``). Tracing is disabled either way.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, set_tracing_disabled
from openai import AsyncOpenAI

from engramdb import Memory
from engramdb.integrations.openai_agents import memory_tools

INSTRUCTIONS = (
    "You are a helpful assistant with long-term memory. When the user tells you "
    "something worth keeping, store it with `remember`. Before answering a question "
    "about the user, look it up with `search_memories`."
)


async def main() -> None:
    """Two conversations with alice's agent, one with bob's."""
    set_tracing_disabled(True)  # nothing is sent to OpenAI's trace collector
    real = bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))
    server = None if real else ScriptedModel().start()
    client = AsyncOpenAI(
        base_url=server.base_url if server else os.environ.get("OPENAI_BASE_URL"),
        api_key=os.environ.get("OPENAI_API_KEY", "not-needed"),
    )
    model = OpenAIChatCompletionsModel(
        model=os.environ.get("OPENAI_MODEL", "gpt-4.1-mini") if real else "scripted",
        openai_client=client,
    )
    try:
        with tempfile.TemporaryDirectory() as tmp, Memory(Path(tmp) / "engram.db") as memory:

            def agent_for(user_id: str) -> Agent[Any]:
                # The application fixes the scope; the model cannot pick another.
                return Agent(
                    name="assistant",
                    instructions=INSTRUCTIONS,
                    tools=memory_tools(memory, user_id=user_id),
                    model=model,
                )

            alice, bob = agent_for("alice"), agent_for("bob")
            await chat(alice, "alice", "Remember that I'm allergic to peanuts.")
            stored = [m["memory"] for m in memory.get_all(user_id="alice")["results"]]
            print(f"            (alice's memories: {stored})")
            print("--- a new conversation: no history, only long-term memory ---")
            await chat(alice, "alice", "What should I avoid eating?")
            await chat(bob, "bob", "What should I avoid eating?")
    finally:
        await client.close()
        if server is not None:
            server.stop()


async def chat(agent: Agent[Any], user: str, text: str) -> None:
    """One run of ``agent`` on ``text``, printed."""
    print(f"{user:>5} > {text}")
    result = await Runner.run(agent, text, run_config=RunConfig(tracing_disabled=True))
    print(f"agent > {result.final_output}")


# -- the scripted stand-in for a model -------------------------------------------------


class ScriptedModel:
    """A tiny OpenAI-compatible chat completions server that plays the model."""

    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """Where an OpenAI client should send its requests."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def start(self) -> ScriptedModel:
        """Serve in a background thread."""
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        self.httpd.shutdown()
        self.httpd.server_close()


def decide(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted model's next assistant message for a conversation."""
    last = messages[-1]
    if last["role"] == "tool":
        output = str(last["content"])
        if output.startswith("Error"):
            return {"role": "assistant", "content": f"Sorry, my memory failed: {output}"}
        data = json.loads(output)
        called = next(m for m in reversed(messages) if m.get("tool_calls"))
        if called["tool_calls"][0]["function"]["name"] == "remember":
            return {"role": "assistant", "content": "Got it, I'll remember that."}
        found = [hit["memory"] for hit in data["results"]]
        text = "From memory: " + "; ".join(found) if found else "I don't know anything about that."
        return {"role": "assistant", "content": text}
    text = str(last["content"]).strip()
    arguments: dict[str, Any]
    if text.lower().startswith("remember"):
        name, arguments = "remember", {"text": text[8:].strip().removeprefix("that ")}
    else:
        name, arguments = "search_memories", {"query": text, "limit": 3}
    function = {"name": name, "arguments": json.dumps(arguments)}
    call = {"id": f"call_{time.monotonic_ns()}", "type": "function", "function": function}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        message = decide(request["messages"])
        body = json.dumps(
            {
                "id": "chatcmpl-scripted",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request.get("model", "scripted"),
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                    }
                ],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    asyncio.run(main())
