"""The extraction pipeline against a real local model (llama.cpp, Qwen2.5-Coder 1.5B Q4_K_M).

Every other test meets scripted replies; these meet what a small model really
writes, so they assert properties, not text: memories are valid and
self-contained, ids map back to real memories, the prompt's own example is
never stored, nothing is lost when a reply is unusable, and a reply cut at
its token cap or a model that loops ends as a recorded failure, never a
hang. Decoding is greedy (temperature 0), so a run is repeatable with the
pinned server and model.

The server is started once per session (``real_llm`` in conftest.py); its
setup is ``.ci/llm-setup``. Each add costs a few seconds of CPU, so the
file is kept to the cases only a real model can show.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from engramdb import Memory
from engramdb.embedders import LocalEmbedder
from engramdb.errors import ExtractionError
from engramdb.extract.prompting import load_prompt, load_static_messages
from engramdb.llms import LLM, Completion, make_llm
from engramdb.stores.base import Scope
from llama import LlamaServer

pytestmark = pytest.mark.real_llm

ALICE = (
    "I'm Alice, I work as a data engineer in Lyon and I'm allergic to peanuts. "
    "Last week I adopted a beagle called Toby."
)
PERSONAL = re.compile(r"\b(?:I|I'm|me|my|mine|we|our|you|your)\b", re.I)


class Recording:
    """A real LLM, with every completion it returned kept for the assertions."""

    def __init__(self, inner: LLM) -> None:
        self.inner = inner
        self.completions: list[Completion] = []
        self.caps: list[int | None] = []
        self.roles: list[list[str]] = []

    @property
    def model(self) -> str:
        return self.inner.model

    @property
    def provider(self) -> str:
        return str(getattr(self.inner, "provider", "llamacpp"))

    def complete(self, messages: list[dict[str, Any]], **options: Any) -> Completion:
        self.caps.append(options.get("max_tokens"))
        self.roles.append([str(m["role"]) for m in messages])
        completion = self.inner.complete(messages, **options)
        self.completions.append(completion)
        return completion

    async def acomplete(self, messages: list[dict[str, Any]], **options: Any) -> Completion:
        raise NotImplementedError

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()


def _memory(
    path: Path,
    server: LlamaServer,
    embedder: LocalEmbedder,
    *,
    llm_options: dict[str, Any] | None = None,
    **extraction: Any,
) -> tuple[Memory, Recording]:
    llm_cfg = server.llm_config(**(llm_options or {}))
    llm = Recording(make_llm(llm_cfg["provider"], llm_cfg["config"]))
    config: dict[str, Any] = {"llm": llm_cfg, "extraction": extraction}
    return Memory(path, config, embedder=embedder, llm=llm), llm


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "engram.db"


def _example_words(kind: str) -> set[str]:
    """Distinctive words of a prompt's worked example: a memory holding one was copied."""
    text = " ".join(m["content"] for m in load_static_messages(kind))
    names = set(re.findall(r"\b[A-Z][a-z]{3,}\b", text))
    return names - {"Reply", "Rules", "Never", "Begin", "Write", "Keep", "Leave", "Otherwise"}


def _stored_messages(mem: Memory, user_id: str) -> list[str]:
    return [m.content for m in mem.store.recent_messages(Scope(user_id=user_id), 50)]


def _check_memories(mem: Memory, user_id: str, kind: str) -> list[dict[str, Any]]:
    rows = mem.get_all(user_id=user_id)["results"]
    copied = _example_words(kind)
    for row in rows:
        text = row["memory"]
        assert text.strip() and len(text) < 400, text
        assert not PERSONAL.search(text), f"not self-contained: {text!r}"
        assert not any(word in text for word in copied), f"copied the example: {text!r}"
        assert text.strip() != ALICE
    return rows


@pytest.mark.parametrize("prompt", ["compact", "standard"])
def test_additive_extracts_valid_facts_and_links_to_real_ids(
    prompt: str, db: Path, real_llm: LlamaServer, embedder: LocalEmbedder
) -> None:
    mem, llm = _memory(db, real_llm, embedder, prompt=prompt)
    with mem:
        first = mem.add(
            [{"role": "user", "content": ALICE, "name": "Alice"}],
            user_id="alice",
            timestamp="2024-06-12T10:00:00Z",
        )
        assert first["results"], "the model kept nothing of four facts"
        kind = "additive_compact" if prompt == "compact" else "additive"
        rows = _check_memories(mem, "alice", kind)
        assert all("Alice" in r["memory"] for r in rows), [r["memory"] for r in rows]
        known = {r["id"] for r in rows}
        second = mem.add(
            [
                {
                    "role": "user",
                    "content": "I quit my job in Lyon yesterday. Toby and I move to Paris "
                    "next month, I'll be an ML engineer at a startup there.",
                    "name": "Alice",
                }
            ],
            user_id="alice",
            timestamp="2024-06-20T10:00:00Z",
        )
        assert second["results"]
        for result in second["results"]:
            row = mem.get(result["id"])
            assert row is not None
            # links name real memories the model was shown, never small ids or inventions
            assert set(row["linked_memory_ids"]) <= known, row
            for linked in row["linked_memory_ids"]:
                assert mem.get(linked) is not None
        _check_memories(mem, "alice", kind)
        # the messages are kept beside the memories
        assert any("data engineer" in m for m in _stored_messages(mem, "alice"))
        # the compact prompt sends its worked example as a chat turn pair
        expected = ["system", "user", "assistant", "user"] if prompt == "compact" else None
        assert all(r == (expected or ["system", "user"]) for r in llm.roles), llm.roles
        assert all(c.mode == "json_schema" for c in llm.completions)
        assert all(c.usage.completion_tokens > 0 for c in llm.completions)


@pytest.mark.parametrize("prompt", ["compact", "standard"])
def test_a_change_of_mind_is_linked_as_an_update_and_supersedes(
    prompt: str, db: Path, real_llm: LlamaServer, embedder: LocalEmbedder
) -> None:
    mem, _llm = _memory(db, real_llm, embedder, prompt=prompt)
    with mem:
        mem.add(
            [{"role": "user", "content": "I've been vegetarian for ten years.", "name": "Ines"}],
            user_id="ines",
            timestamp="2023-01-10T10:00:00Z",
        )
        [old] = [r["id"] for r in mem.get_all(user_id="ines")["results"]]
        second = mem.add(
            [
                {
                    "role": "user",
                    "content": "Big news: I eat fish again since March!",
                    "name": "Ines",
                }
            ],
            user_id="ines",
            timestamp="2024-05-02T10:00:00Z",
        )
        new = [r["id"] for r in second["results"] if r["event"] == "ADD"]
        assert new, second
        kinds = {}
        for mid in new:
            row = mem.get(mid)
            assert row is not None
            assert set(row["linked_memory_ids"]) <= {old}, row  # only what it was shown
            kinds.update(row.get("link_kinds", {}))
        # The model says the new fact replaces the old one; nothing is rewritten.
        assert kinds.get(old) in ("updates", "contradicts"), kinds
        got = mem.get(old)
        assert got is not None and set(got["superseded_by"]) <= set(new) and got["superseded_by"]
        assert [h["event"] for h in mem.history(old)] == ["ADD"]
        top = mem.search("What does Ines eat?", user_id="ines")["results"]
        assert top[0]["id"] in new and top[0]["superseded_by"] == []
        assert old not in [
            r["id"]
            for r in mem.search("What does Ines eat?", user_id="ines", include_superseded=False)[
                "results"
            ]
        ]


def test_auto_prompt_for_a_local_server_is_compact(
    db: Path, real_llm: LlamaServer, embedder: LocalEmbedder
) -> None:
    mem, _ = _memory(db, real_llm, embedder)
    with mem:
        assert mem._ops.additive_variant == "compact"
    assert load_prompt("additive_compact") != load_prompt("additive")


@pytest.mark.parametrize("mode", ["json_object", "text"])
def test_weaker_structured_modes_still_give_valid_memories(
    mode: str, db: Path, real_llm: LlamaServer, embedder: LocalEmbedder
) -> None:
    mem, llm = _memory(db, real_llm, embedder, llm_options={"structured_output": mode})
    with mem:
        result = mem.add(
            [
                {
                    "role": "user",
                    "content": "My sister Maya just started medical school in Oslo.",
                    "name": "Ben",
                }
            ],
            user_id="ben",
            timestamp="2024-02-01T09:00:00Z",
        )
        assert result["results"]
        _check_memories(mem, "ben", "additive_compact")
        assert {c.mode for c in llm.completions} == {mode}


def test_a_reply_cut_at_its_cap_fails_cleanly_and_can_be_retried(
    db: Path, real_llm: LlamaServer, embedder: LocalEmbedder
) -> None:
    # 16 tokens cannot hold one complete memory: both the call and its retry are cut.
    mem, llm = _memory(db, real_llm, embedder, max_reply_tokens=16)
    with mem:
        with pytest.raises(ExtractionError) as info:
            mem.add(
                [{"role": "user", "content": ALICE, "name": "Alice"}],
                user_id="alice",
                timestamp="2024-06-12T10:00:00Z",
            )
        assert llm.caps == [16, 16]
        assert all(c.usage.completion_tokens <= 16 for c in llm.completions)
        assert mem.get_all(user_id="alice")["results"] == []
        (failure,) = mem.failures(user_id="alice")
        assert failure["id"] == info.value.failure_id
        assert failure["messages"] == 1
        assert failure["reply"].startswith('{"memory"')  # the cut reply, kept as it came
        assert ALICE in _stored_messages(mem, "alice")
    # The same store with the default cap: the kept messages are extracted now.
    again, _ = _memory(db, real_llm, embedder)
    with again:
        result = again.retry_extraction(info.value.failure_id)
        assert result["results"]
        _check_memories(again, "alice", "additive_compact")
        assert again.failures(user_id="alice") == []


def test_a_looping_model_is_stopped_by_the_cap_and_recorded(
    db: Path, real_llm: LlamaServer, embedder: LocalEmbedder
) -> None:
    # The application's instructions make the model repeat itself without end.
    mem, llm = _memory(
        db,
        real_llm,
        embedder,
        custom_instructions=(
            "Write the text of every memory as the single word 'again' repeated four "
            "thousand times, with no other words."
        ),
    )
    message = "I'm Carla and I teach maths in Turin."
    with mem:
        try:
            result = mem.add(
                [{"role": "user", "content": message, "name": "Carla"}],
                user_id="carla",
                timestamp="2024-03-03T10:00:00Z",
            )
        except ExtractionError as exc:
            (failure,) = mem.failures(user_id="carla")
            assert failure["id"] == exc.failure_id
            stored = []
        else:
            stored = [mem.get(r["id"]) for r in result["results"]]
        # Each call was capped near the size of the message, not the 2,048 maximum.
        assert llm.caps and all(cap is not None and cap < 300 for cap in llm.caps)
        assert all(c.usage.completion_tokens <= 300 for c in llm.completions)
        assert message in _stored_messages(mem, "carla")
        # whatever was kept is not the loop
        for row in stored:
            assert row is not None
            assert row["memory"].lower().count("again") < 5, row["memory"]


def test_consolidate_mode_changes_only_through_reversible_history(
    db: Path, real_llm: LlamaServer, embedder: LocalEmbedder
) -> None:
    mem, _ = _memory(db, real_llm, embedder, mode="consolidate")
    with mem:
        seed = mem.add("Dana lives in Lyon.", user_id="dana", infer=False)["results"][0]["id"]
        result = mem.add(
            [{"role": "user", "content": "I moved from Lyon to Paris last month.", "name": "Dana"}],
            user_id="dana",
            timestamp="2024-05-10T10:00:00Z",
        )
        events = {r["event"] for r in result["results"]}
        assert events <= {"ADD", "UPDATE", "DELETE"}
        assert result["results"], "the move was not remembered at all"
        for r in result["results"]:
            if r["event"] in ("UPDATE", "DELETE"):
                assert r["id"] == seed  # the only memory it was shown
                assert mem.history(seed)[-1]["actor"] == "llm"
        # The move is remembered: a new memory, or the seed rewritten.
        rows = mem.get_all(user_id="dana")["results"]
        assert any("Paris" in r["memory"] for r in rows), [r["memory"] for r in rows]
        # Undo whatever the model did to the seed: it is back as it was.
        if any(r["event"] != "ADD" for r in result["results"]):
            mem.restore(seed, version=1)
        back = mem.get(seed)
        assert back is not None and back["memory"] == "Dana lives in Lyon."


def test_procedural_memory_of_an_agent_run(
    db: Path, real_llm: LlamaServer, embedder: LocalEmbedder
) -> None:
    mem, _ = _memory(db, real_llm, embedder)
    run = [
        {"role": "user", "content": "Rename every .jpeg file in ./photos to .jpg."},
        {"role": "assistant", "content": "Running: ls photos/*.jpeg"},
        {"role": "tool", "content": "photos/a.jpeg photos/b.jpeg"},
        {
            "role": "assistant",
            "content": 'Running: for f in photos/*.jpeg; do mv "$f" "${f%.jpeg}.jpg"; done',
        },
        {"role": "tool", "content": "(no output)"},
        {"role": "assistant", "content": "Done: photos/a.jpg and photos/b.jpg."},
    ]
    with mem:
        result = mem.add(run, agent_id="file-bot", memory_type="procedural_memory")
        (item,) = result["results"]
        row = mem.get(item["id"])
        assert row is not None
        assert row["memory_type"] == "procedural_memory"
        assert len(row["memory"]) > 40
        assert "jpg" in row["memory"]
