"""Write real mem0 stores for tests/test_import_mem0.py; runs in mem0's own virtual environment.

Not a test module: ``tests/test_import_mem0.py`` runs it with the python of
the mem0 venv (``.ci/mem0-venv`` makes one; ``$ENGRAM_MEM0_PYTHON`` names
another), so that the data the importer reads is written by mem0ai itself,
through its public API, exactly as a mem0 user's would be::

    python tests/mem0_writer.py SPEC.json OUT.json

``SPEC.json``::

    {"base_url": "http://127.0.0.1:PORT/v1",     # the tests' OpenAI-wire server
     "stores": [{"name": "qdrant", "provider": "qdrant",
                 "config": {...mem0 vector_store config...},
                 "history_db": "/tmp/.../history.db",
                 "dims": 384, "workload": "full"}, ...]}

For each store it runs a workload (``full``: several scopes, metadata, an
expiry, speakers and roles, a procedural memory, a repeated text, updates
and a delete; ``mini``: two adds) and writes to ``OUT.json`` what mem0
itself then reports: every live memory (``get``), every memory's history
(``history``), the ids it deleted and the ids it stored twice. The tests
compare engramdb's import with that, never with numbers written by hand.

Nothing here may reach the network: mem0's telemetry is off, its LLM and
embedder point at the wire server on 127.0.0.1, and the tests run this with
a proxy that does not exist for every other address.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

os.environ["MEM0_TELEMETRY"] = "False"

from mem0 import Memory  # after telemetry is off


def _config(store: dict[str, Any], base_url: str) -> dict[str, Any]:
    return {
        "vector_store": {"provider": store["provider"], "config": store["config"]},
        "embedder": {
            "provider": "openai",
            "config": {
                "model": "mem0-test-embed",
                "api_key": "sk-test",
                "openai_base_url": base_url,
                "embedding_dims": store["dims"],
            },
        },
        "llm": {
            "provider": "openai",
            "config": {"model": "mem0-test-llm", "api_key": "sk-test", "openai_base_url": base_url},
        },
        "history_db_path": store["history_db"],
    }


def _ids(result: dict[str, Any]) -> list[str]:
    return [r["id"] for r in result["results"]]


def _full(m: Memory) -> dict[str, Any]:
    """Every kind of record a mem0 user has; returns what the test needs to know."""
    food = _ids(m.add("I am vegetarian", user_id="alice", metadata={"topic": "food"}, infer=False))
    home = _ids(
        m.add(
            "I live in Lisbon",
            user_id="alice",
            metadata={"topic": "home", "rank": 2, "tags": ["city", "pt"]},
            infer=False,
        )
    )
    m.add("Alice runs 10k on Sundays", user_id="alice", agent_id="coach", infer=False)
    trip = _ids(
        m.add("Planning a trip to Kyoto in April", user_id="alice", run_id="r1", infer=False)
    )
    m.add("Refunds take five business days", agent_id="support-bot", infer=False)
    m.add("Session-only note about the printer", run_id="r9", infer=False)
    m.add(
        [
            {"role": "user", "content": "My sister is called Ana", "name": "alice"},
            {"role": "assistant", "content": "Noted: your sister is Ana"},
        ],
        user_id="alice",
        agent_id="coach",
        infer=False,
    )
    m.add(
        "Coupon code SPRING-24 is valid", user_id="bob", expiration_date="2099-12-31", infer=False
    )
    # An older mem0 stored US/Pacific times; a created_at given in metadata is kept as is.
    m.add(
        "Bob prefers window seats",
        user_id="bob",
        metadata={"created_at": "2024-03-01T09:30:00-08:00", "source": "import-test"},
        infer=False,
    )
    # mem0 stores an exact repeat again, under a new id.
    again = _ids(m.add("I am vegetarian", user_id="alice", infer=False))
    # A procedural memory: mem0's LLM (the wire server) writes its text.
    m.add(
        [{"role": "user", "content": "Greet first, then ask what they need."}],
        agent_id="support-bot",
        memory_type="procedural_memory",
    )
    m.update(home[0], text="I live in Porto")
    m.update(home[0], metadata={"rank": 3})
    m.delete(trip[0])
    return {"deleted": trip, "repeats": again, "first_of_repeat": food, "updated": home}


def _mini(m: Memory) -> dict[str, Any]:
    m.add("Carol likes green tea", user_id="carol", infer=False)
    m.add("Carol works nights", user_id="carol", infer=False)
    return {"deleted": [], "repeats": [], "first_of_repeat": [], "updated": []}


def _live(m: Memory) -> list[dict[str, Any]]:
    """Every live memory, through mem0's own reads."""
    return [m.get(str(p.id)) for p in _every_point(m)]


def _every_point(m: Memory) -> list[Any]:
    listed = m.vector_store.list(top_k=100_000)
    # Stores answer a list of points or [points].
    if isinstance(listed, tuple) or (listed and isinstance(listed[0], list)):
        listed = listed[0]
    return list(listed)


def main(spec_path: str, out_path: str) -> None:
    """Run each store's workload; write mem0's own view of the result to ``out_path``."""
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    out: dict[str, Any] = {}
    for store in spec["stores"]:
        m = Memory.from_config(_config(store, spec["base_url"]))
        facts = (_full if store["workload"] == "full" else _mini)(m)
        live = _live(m)
        ids = [item["id"] for item in live] + facts["deleted"]
        out[store["name"]] = {
            **facts,
            "memories": live,
            "history": {i: m.history(i) for i in ids},
        }
        client = getattr(m.vector_store, "client", None)
        if client is not None and hasattr(client, "close"):
            client.close()  # local Qdrant holds a lock on its folder until closed
        m.db.close()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2, default=str)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
