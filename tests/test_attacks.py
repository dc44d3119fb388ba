"""Tenant isolation with the LLM in the loop (issue 9), over a real REST server.

The LLM is the OpenAI-wire test server answered by
:class:`~engramdb_bench._attacks.AdversarialLLM`: its replies name every
memory id the prompt showed, plus ids it did not show, in links and in
consolidation operations. A key bound to ``{user_id: alice, agent_id: coach}``
sees memories whose user is alice *and* whose agent is coach (primary or
attached) — not alice's agent-less memories. These tests pin what that means
for each path the LLM opens:

(a) additive extraction shows the LLM only visible memories and messages;
(b) consolidation cannot UPDATE/DELETE/NONE a memory the caller cannot see,
    nor return its old text;
(c) a verbatim repeat of a hidden memory answers exactly like a fresh add
    (event ADD, a new id), while a repeat inside the visible scope is still
    deduplicated;
(d) such a repeat attaches nothing to the hidden memory, while a new session
    of the same visible scope still attaches to it;
and links proposed by the LLM, ``expand_links`` and ``timeline`` never lead
out of the visible scope. The last test runs the whole attack suite
(``engramdb_bench._attacks.run_attack_suite``: both extraction modes, REST and
MCP, several attackers) and asserts that it finds no leak.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from engramdb import AsyncMemory, Memory
from engramdb.embedders import LocalEmbedder
from engramdb.server import create_app
from engramdb.server.keys import KeyStore
from engramdb_bench._attacks import (
    AdversarialLLM,
    context_blocks,
    run_attack_suite,
    serve_app,
)
from engramdb_bench._wire import RecordedRequest, WireServer

# -- the lab: one REST server per extraction mode, with the adversarial LLM ---------------------


@dataclass
class Lab:
    url: str
    keys: KeyStore
    admin: str
    wire: WireServer
    llm: AdversarialLLM
    inspector: Memory
    clients: dict[str, httpx.Client] = field(default_factory=dict)

    def client(self, key: str) -> httpx.Client:
        if key not in self.clients:
            self.clients[key] = httpx.Client(
                base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=60
            )
        return self.clients[key]

    def key(self, user_id: str, agent_id: str | None = None) -> str:
        return self.keys.create(user_id=user_id, agent_id=agent_id).key

    def plant(self, text: str, **scope: str) -> str:
        """A memory written verbatim by the admin key (no LLM); returns its id."""
        response = self.client(self.admin).post(
            "/memories", json={"messages": text, "infer": False, **scope}
        )
        assert response.status_code == 200, response.text
        (row,) = response.json()["results"]
        assert row["event"] == "ADD"
        return str(row["id"])

    def own(self, key: str, text: str) -> str:
        """A memory the key writes verbatim in its own scope; returns its id."""
        response = self.client(key).post("/memories", json={"messages": text, "infer": False})
        assert response.status_code == 200, response.text
        return str(response.json()["results"][0]["id"])

    def add(self, key: str, message: str, **body: Any) -> tuple[httpx.Response, list[str]]:
        """An add through the LLM; returns the response and the prompts it sent (no system)."""
        before = len(self.wire.chat_requests)
        response = self.client(key).post("/memories", json={"messages": message, **body})
        prompts = [_user_text(r) for r in self.wire.chat_requests[before:]]
        assert prompts, f"the add never reached the LLM: {response.text}"
        return response, prompts

    def state(self, memory_id: str) -> dict[str, Any]:
        """The stored truth about a memory, as the admin's library sees it."""
        row = self.inspector.store.get(memory_id, include_deleted=True)
        assert row is not None, f"memory {memory_id} is gone"
        return {
            "text": row.text,
            "version": row.version,
            "deleted_at": row.deleted_at,
            "agent_id": row.agent_id,
            "agent_ids": list(row.agent_ids),
            "run_ids": list(row.run_ids),
            "linked_ids": sorted(row.linked_ids),
            "history": [
                (e["event"], e["version"], e["new_memory"])
                for e in self.inspector.history(memory_id)
            ],
        }


def _user_text(request: RecordedRequest) -> str:
    return "\n".join(
        str(m.get("content")) for m in request.messages if m.get("role") != "system"
    ).lower()


def _start(mode: str, folder: Path, embedder: LocalEmbedder) -> Iterator[Lab]:
    llm = AdversarialLLM()
    with WireServer() as wire:
        wire.handler = llm
        config = {
            "llm": {
                "provider": "openai_compatible",
                "config": {"base_url": wire.base_url, "model": "test-model", "max_retries": 0},
            },
            "extraction": {"mode": mode},
        }
        memory = AsyncMemory(folder / "engram.db", config=config, embedder=embedder, actor="server")
        keys = KeyStore(folder / "keys.db")
        admin = keys.create(admin=True, name="admin").key
        inspector = Memory(folder / "engram.db", embedder=embedder, llm=None)
        with serve_app(create_app(memory, keys=keys, close_memory=True)) as url:
            lab = Lab(url, keys, admin, wire, llm, inspector)
            yield lab
            for client in lab.clients.values():
                client.close()
        inspector.close()
        keys.close()
        assert not wire.errors, wire.errors


@pytest.fixture(scope="module")
def additive(tmp_path_factory: pytest.TempPathFactory, embedder: LocalEmbedder) -> Iterator[Lab]:
    yield from _start("additive", tmp_path_factory.mktemp("attacks-additive"), embedder)


@pytest.fixture(scope="module")
def consolidate(tmp_path_factory: pytest.TempPathFactory, embedder: LocalEmbedder) -> Iterator[Lab]:
    yield from _start("consolidate", tmp_path_factory.mktemp("attacks-consolidate"), embedder)


def _user() -> str:
    """A fresh user per test: the tests share one server per mode."""
    return f"alice-{uuid.uuid4().hex[:8]}"


def _token() -> str:
    return "zq" + uuid.uuid4().hex[:10]


@dataclass
class Scene:
    user: str
    token: str
    secret: str
    """Alice's user-level memory (no agent): the coach must never reach it."""
    secret_id: str
    coach: str
    coach_note: str
    coach_note_id: str


def _scene(lab: Lab) -> Scene:
    user, token = _user(), _token()
    secret = f"My therapist is Dr Lee and my secret code is {token}"
    secret_id = lab.plant(secret, user_id=user)
    coach = lab.key(user, "coach")
    note = "Coach note: the secret code drill is five intervals"
    note_id = lab.own(coach, note)
    return Scene(user, token, secret, secret_id, coach, note, note_id)


def _assert_untouched(lab: Lab, scene: Scene) -> None:
    state = lab.state(scene.secret_id)
    assert state == {
        "text": scene.secret,
        "version": 1,
        "deleted_at": None,
        "agent_id": None,
        "agent_ids": [],
        "run_ids": [],
        "linked_ids": [],
        "history": [("ADD", 1, scene.secret)],
    }, f"alice's hidden memory was changed by the coach's add: {state}"


# -- (a) what the LLM is shown -------------------------------------------------------------------


def test_a_additive_context_holds_only_what_the_coach_may_see(additive: Lab) -> None:
    scene = _scene(additive)
    additive.llm.program(["The user asked about the secret code"])
    response, prompts = additive.add(scene.coach, "What was my secret code again?")
    assert response.status_code == 200, response.text
    for prompt in prompts:
        blocks = context_blocks(prompt)
        assert scene.token not in prompt, (
            "alice's user-level memory was shown to the LLM while serving the coach key:\n"
            + "\n".join(f"<{k}> {v}" for k, v in blocks.items())
        )
        # What the coach may see is still shown: its own memory and its own messages.
        assert scene.coach_note.lower() in blocks.get("known_memories", ""), blocks
        assert scene.coach_note.lower() in blocks.get("recent_conversation", ""), blocks
    assert scene.secret_id not in response.text
    _assert_untouched(additive, scene)


# -- (b) consolidation ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["UPDATE", "DELETE", "NONE"])
def test_b_consolidation_cannot_touch_or_reveal_a_hidden_memory(consolidate: Lab, op: str) -> None:
    scene = _scene(consolidate)
    consolidate.llm.program(
        ["The secret code drill changed"],
        op=op,  # type: ignore[arg-type]
        foreign_ids=[scene.secret_id],
        rewrite="Rewritten by the coach",
    )
    response, prompts = consolidate.add(scene.coach, "My secret code drill changed.")
    assert response.status_code == 200, response.text
    _assert_untouched(consolidate, scene)
    assert scene.secret_id not in response.text, response.text
    assert scene.token not in response.text.lower(), response.text
    results = response.json()["results"]
    assert all(scene.token not in str(r.get("previous_memory", "")).lower() for r in results)
    # The coach's own memory was shown and is the LLM's to change.
    own = [r for r in results if r["id"] == scene.coach_note_id]
    assert [r["event"] for r in own] == [op], results
    if op == "UPDATE":
        assert own[0]["previous_memory"] == scene.coach_note
        assert own[0]["memory"].startswith("Rewritten by the coach")
    for prompt in prompts:
        assert scene.token not in prompt, (
            f"the consolidation prompts showed alice's hidden memory: {context_blocks(prompt)}"
        )


# -- (c) the membership oracle -------------------------------------------------------------------


def _repeat(
    lab: Lab, scene: Scene, key: str, **body: Any
) -> tuple[list[dict[str, Any]], list[str]]:
    """``key`` says alice's secret word for word; the LLM extracts it as is."""
    lab.llm.program([scene.secret], op="NONE", foreign_ids=[scene.secret_id])
    response, prompts = lab.add(key, scene.secret, **body)
    assert response.status_code == 200, response.text
    results: list[dict[str, Any]] = response.json()["results"]
    return results, prompts


def _assert_not_shown(scene: Scene, prompts: list[str]) -> None:
    """The secret's text was not in the context of these prompts (its own message aside)."""
    for prompt in prompts:
        context = "\n".join(context_blocks(prompt).values())
        assert scene.token not in context, f"the LLM was shown alice's memory: {context}"


def test_c_a_repeat_of_a_hidden_memory_answers_like_a_fresh_add_additive(additive: Lab) -> None:
    scene = _scene(additive)
    results, prompts = _repeat(additive, scene, scene.coach)
    assert [(r["event"], r["memory"]) for r in results] == [("ADD", scene.secret)], (
        f"a repeat of alice's hidden memory did not answer like a fresh add: {results}"
    )
    fresh = results[0]["id"]
    assert fresh != scene.secret_id
    _assert_untouched(additive, scene)
    listed = additive.client(scene.coach).get("/memories").json()["results"]
    assert {m["id"] for m in listed} == {fresh, scene.coach_note_id}
    # Inside the coach's own visible scope, a repeat is still one memory.
    again, _ = _repeat(additive, scene, scene.coach)
    assert [(r["event"], r["id"]) for r in again] == [("NONE", fresh)], again
    _assert_not_shown(scene, prompts)


def test_c_a_repeat_of_a_hidden_memory_answers_like_a_fresh_add_consolidate(
    consolidate: Lab,
) -> None:
    scene = _scene(consolidate)
    results, prompts = _repeat(consolidate, scene, scene.coach)
    mine = [r for r in results if r["memory"] == scene.secret]
    assert [r["event"] for r in mine] == ["ADD"], (
        f"a repeat of alice's hidden memory did not answer like a fresh add: {results}"
    )
    assert mine[0]["id"] != scene.secret_id
    assert all(r["id"] in {mine[0]["id"], scene.coach_note_id} for r in results), results
    _assert_untouched(consolidate, scene)
    _assert_not_shown(scene, prompts)


# -- (d) attach ----------------------------------------------------------------------------------


def test_d_a_repeat_attaches_nothing_to_a_hidden_memory(additive: Lab) -> None:
    scene = _scene(additive)
    _, prompts = _repeat(additive, scene, scene.coach)
    _repeat(additive, scene, scene.coach, run_id="coach-session-2")
    _assert_untouched(additive, scene)
    coach = additive.client(scene.coach)
    listed = coach.get("/memories").json()["results"]
    assert scene.secret_id not in {m["id"] for m in listed}
    assert coach.get(f"/memories/{scene.secret_id}").status_code == 404
    # Alice herself, in a new session of her own visible scope, still attaches it.
    alice = additive.key(scene.user)
    results, _ = _repeat(additive, scene, alice, run_id="alice-session-2")
    assert [(r["event"], r["id"]) for r in results] == [("NONE", scene.secret_id)], results
    assert additive.state(scene.secret_id)["run_ids"] == ["alice-session-2"]
    _assert_not_shown(scene, prompts)


# -- links, expand_links, timeline ---------------------------------------------------------------


def test_links_the_llm_proposes_stay_inside_the_visible_scope(additive: Lab) -> None:
    scene = _scene(additive)
    additive.llm.program(["The drill now has six intervals"], foreign_ids=[scene.secret_id])
    response, _ = additive.add(scene.coach, "The secret code drill now has six intervals.")
    (row,) = response.json()["results"]
    assert row["event"] == "ADD"
    got = additive.client(scene.coach).get(f"/memories/{row['id']}").json()
    # Linked to what it was shown and may see; nothing else, whatever ids the LLM named.
    assert got["linked_memory_ids"] == [scene.coach_note_id], got
    _assert_untouched(additive, scene)


def test_expand_links_never_leads_out_of_the_visible_scope(additive: Lab) -> None:
    scene = _scene(additive)
    additive.llm.program(["The drill now has six intervals"], foreign_ids=[scene.secret_id])
    additive.add(scene.coach, "The secret code drill now has six intervals.")
    _repeat(additive, scene, scene.coach)
    found = (
        additive.client(scene.coach)
        .post("/search", json={"query": "secret code", "expand_links": True, "top_k": 50})
        .json()["results"]
    )
    assert found, "the coach's search found none of its own memories"
    for row in found:
        assert row["id"] != scene.secret_id, f"expand_links reached alice's memory: {row}"
        assert scene.secret_id not in row["linked_memory_ids"], row
    assert any(r["id"] == scene.coach_note_id for r in found), found


def _view(lab: Lab, **bound: str) -> Any:
    scoped = getattr(lab.inspector, "scoped", None)
    if scoped is None:
        pytest.fail("Memory has no scoped view: a timeline cannot be asked within a key's scope")
    return scoped(**bound)


def test_timeline_never_leads_out_of_the_visible_scope(additive: Lab) -> None:
    scene = _scene(additive)
    additive.llm.program(["The drill now has six intervals"], foreign_ids=[scene.secret_id])
    response, _ = additive.add(scene.coach, "The secret code drill now has six intervals.")
    new_id = response.json()["results"][0]["id"]
    # The timeline of the coach's memory, from the library and from the coach's view.
    timeline = additive.inspector.timeline(new_id)
    assert {m["id"] for m in timeline} == {new_id, scene.coach_note_id}, timeline
    timeline = _view(additive, user_id=scene.user, agent_id="coach").timeline(new_id)
    assert {m["id"] for m in timeline} == {new_id, scene.coach_note_id}, timeline


def _linked_to_tutor(lab: Lab) -> tuple[str, str, str, str]:
    """Alice links a secret of her own (user level) to her tutor's memory, through the LLM."""
    user, token = _user(), _token()
    tutor = lab.key(user, "tutor")
    plan_id = lab.own(tutor, "Tutor plan: practise scales daily")
    secret = f"My lawyer holds the secret code {token}"
    lab.llm.program([secret], link_marker="Tutor plan")
    response, _ = lab.add(lab.key(user), f"Remember: my lawyer holds the secret code {token}")
    (row,) = response.json()["results"]
    # Alice may see her tutor's memory: the link is hers to make, and stays.
    assert lab.state(row["id"])["linked_ids"] == [plan_id]
    return user, tutor, plan_id, row["id"]


def test_a_link_made_by_alice_does_not_lead_her_tutor_to_her_memory(additive: Lab) -> None:
    user, tutor, plan_id, secret_id = _linked_to_tutor(additive)
    client = additive.client(tutor)
    found = client.post("/search", json={"query": "tutor plan", "expand_links": True}).json()[
        "results"
    ]
    assert secret_id not in {r["id"] for r in found}, found
    timeline = _view(additive, user_id=user, agent_id="tutor").timeline(plan_id)
    assert [m["id"] for m in timeline] == [plan_id], timeline


def test_linked_memory_ids_name_only_memories_the_caller_may_see(additive: Lab) -> None:
    # A memory id is its owner's secret (docs/server.md): the tutor's own memory must not
    # list, among its links, the id of alice's memory that the tutor cannot see.
    user, tutor, plan_id, secret_id = _linked_to_tutor(additive)
    client = additive.client(tutor)
    got = client.get(f"/memories/{plan_id}").json()
    listed = client.get("/memories").json()["results"]
    assert got["linked_memory_ids"] == [], got
    assert [m["linked_memory_ids"] for m in listed] == [[]], listed
    alice = additive.client(additive.key(user))
    assert alice.get(f"/memories/{secret_id}").json()["linked_memory_ids"] == [plan_id]


# -- a key bound to one run ----------------------------------------------------------------------


def test_a_run_bound_key_sees_only_its_run(additive: Lab) -> None:
    user, token_r2, token_user = _user(), _token(), _token()
    in_r2 = f"In session two I said my secret code is {token_r2}"
    r2_id = additive.plant(in_r2, user_id=user, run_id="r2")
    additive.plant(f"My therapist is Dr Lee and my secret code is {token_user}", user_id=user)
    r1 = additive.keys.create(user_id=user, run_id="r1").key
    own = "In this session I asked how secret codes are kept"
    additive.own(r1, own)
    additive.llm.program(["The user asked about the secret code"])
    response, prompts = additive.add(r1, "Which secret code did I give?")
    assert response.status_code == 200, response.text
    for prompt in prompts:
        assert token_r2 not in prompt and token_user not in prompt, context_blocks(prompt)
        assert own.lower() in context_blocks(prompt).get("known_memories", "")
    additive.llm.program([in_r2])
    response, prompts = additive.add(r1, in_r2)
    results = response.json()["results"]
    assert [(r["event"], r["memory"]) for r in results] == [("ADD", in_r2)], results
    assert results[0]["id"] != r2_id
    state = additive.state(r2_id)
    assert (state["run_ids"], [e[0] for e in state["history"]]) == ([], ["ADD"]), state


# -- the whole suite -----------------------------------------------------------------------------


def test_attack_suite_with_the_llm_finds_no_leak(tmp_path: Path, embedder: LocalEmbedder) -> None:
    ticks: list[tuple[int, int]] = []
    report = run_attack_suite(
        tmp_path,
        probes=2,
        embedder=embedder,
        progress=lambda done, total: ticks.append((done, total)),
    )
    assert ticks and ticks[-1][0] == ticks[-1][1] == len(ticks), ticks[-3:]
    assert report["errors"] == [], "\n".join(report["errors"][:20])
    for kind in ("read", "write", "attach", "oracle"):
        assert report["attempts_by_kind"][kind] > 0, report["attempts_by_kind"]
    assert report["attempts"] > 1000, report["attempts"]
    assert report["leaks"] == 0, (
        f"{report['leaks']} leaks in {report['attempts']} attempts {report['by_kind']}:\n"
        + "\n".join(report["details"][:60])
    )
