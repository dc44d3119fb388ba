"""A LangGraph graph with long-term memory in engramdb.

    pip install 'engramdb[langgraph]'
    python examples/langgraph_store.py

One small StateGraph: its node gets the store that ``graph.compile(store=...)``
injects, remembers what the user says (``store.put`` under the namespace
``("memories", user_id)``) and recalls the memories most relevant to it
(``store.search`` with a query). Three conversation turns for alice, one for
bob, who recalls nothing of hers; then one of alice's facts changes and
engramdb's history shows the old value.

Offline: no LLM, no network. The memories live in a temporary SQLite file
(or the file named as the first argument) with the bundled local embedding
model.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import BaseStore

from engramdb import Memory
from engramdb.integrations.langgraph import EngramStore


class Turn(TypedDict, total=False):
    """The graph's state: who speaks, what they said, what came back from memory."""

    user_id: str
    key: str
    message: str
    recalled: list[str]


def chat(state: Turn, *, store: BaseStore) -> Turn:
    """Recall what is relevant to the message, then remember the message."""
    namespace = ("memories", state["user_id"])
    hits = store.search(namespace, query=state["message"], limit=2)
    store.put(namespace, state["key"], {"text": state["message"]})
    return {"recalled": [hit.value["text"] for hit in hits]}


def build(store: BaseStore) -> CompiledStateGraph:  # type: ignore[type-arg]
    """The graph: START -> chat -> END, compiled with the store."""
    graph = StateGraph(Turn)
    graph.add_node("chat", chat)
    graph.add_edge(START, "chat")
    graph.add_edge("chat", END)
    return graph.compile(store=store)


def main(path: Path) -> None:
    """Run four turns through the graph and print what each recalled."""
    # context_messages=0: each item's keywords are its own text only (docs/integrations.md).
    with Memory(path, config={"retrieval": {"context_messages": 0}}) as memory:
        store = EngramStore(memory, user_id="example-app")
        app = build(store)
        turns = [
            ("alice", "diet", "I am vegetarian and allergic to peanuts"),
            ("alice", "pet", "We adopted a cat called Miso"),
            ("alice", "question", "What should I cook for dinner tonight?"),
            ("bob", "question", "What should I cook for dinner tonight?"),
        ]
        for user_id, key, message in turns:
            out = app.invoke({"user_id": user_id, "key": key, "message": message})
            print(f"{user_id}: {message}")
            for line in out["recalled"] or ["(nothing yet)"]:
                print(f"  recalled: {line}")

        # A changed fact is an update of the same item: history keeps the old value.
        store.put(("memories", "alice"), "diet", {"text": "I am vegan and allergic to peanuts"})
        item = store.get(("memories", "alice"), "diet")
        assert item is not None
        print(f"alice/diet is now: {item.value['text']}")
        memory_id = store.memory_id(("memories", "alice"), "diet")
        assert memory_id is not None
        for event in memory.history(memory_id):
            print(f"  history: {event['event']} {event['new_memory']}")
        print("namespaces:", store.list_namespaces())


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp) / "engram.db")
