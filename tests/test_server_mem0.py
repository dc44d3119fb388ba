"""The REST API in mem0 compatibility mode, driven the way a client of mem0's server drives it.

mem0's open-source server (``server/main.py`` of mem0ai/mem0) is served by
``create_app(..., compat="mem0")`` / ``engram serve --compat mem0``. A real
uvicorn server on a loopback port, plain httpx requests shaped exactly as
mem0's server defines them (mem0ai's own ``MemoryClient`` speaks to mem0's
hosted platform — ``/v1/ping/`` on construction, ``/v3/memories/add/``,
``Authorization: Token`` — not to the open-source server, so it cannot be
pointed at one). Every route with mem0's bodies, its status codes and
response shapes; errors as ``{"detail": ...}`` with mem0's codes; ``200 null``
and ``200 []`` for unknown ids; the routes kept safe (``/configure``,
``/reset``); a tenant attack suite through every route, counting
cross-tenant reads and writes; generated requests (schemathesis) that must
never get a 5xx; and engramdb's own mode, checked unchanged at the end.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from engramdb import AsyncMemory, Memory
from engramdb.cli import app as cli_app
from engramdb.embedders import LocalEmbedder
from engramdb.server import KeyStore, ServerLimits, create_app
from live_server import Stack, engram_serve, live, server_stack
from openai_wire import Reply, WireServer

LIMITS = ServerLimits(max_body_bytes=64 * 1024, max_top_k=50, max_messages=10)

# The keys of mem0's results (mem0ai 2.x, ``Memory.get`` / ``get_all`` / ``history``).
MEM0_ITEM_KEYS = {"id", "memory", "hash", "created_at", "updated_at"}
MEM0_HISTORY_KEYS = {
    "id",
    "memory_id",
    "old_memory",
    "new_memory",
    "event",
    "created_at",
    "updated_at",
    "is_deleted",
    "actor_id",
    "role",
}


@pytest.fixture(scope="module", params=["async", "sync"])
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    embedder: LocalEmbedder,
) -> Iterator[Stack]:
    """One mem0-mode server per engine; clients send keys as mem0's docs do (X-API-Key)."""
    folder = tmp_path_factory.mktemp(f"mem0-{request.param}")
    with server_stack(
        request.param, folder, embedder, header="x-api-key", limits=LIMITS, compat="mem0"
    ) as stack:
        yield stack


def _new_user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


def _messages(*texts: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": t} for t in texts]


def _detail(response: httpx.Response, status: int) -> Any:
    """The ``detail`` of a mem0-shaped error: ``{"detail": ...}`` and nothing else for 4xx."""
    assert response.status_code == status, response.text
    body = response.json()
    assert isinstance(body, dict) and "detail" in body, body
    if status < 500:
        assert set(body) == {"detail"}, body
    assert body["detail"], body
    return body["detail"]


def _validation(response: httpx.Response, where: str) -> None:
    """FastAPI's own 422: ``{"detail": [{"loc", "msg", "type", ...}]}``, as mem0's server."""
    detail = _detail(response, 422)
    assert isinstance(detail, list) and detail, detail
    assert any(where in [str(p) for p in e["loc"]] for e in detail), detail


# -- open routes --------------------------------------------------------------------------------


def test_open_routes_schema_and_unknown_routes(stack: Stack) -> None:
    with stack.client() as c:
        health = c.get("/healthz").json()
        assert health["status"] == "ok" and health["compat"] == "mem0"
        assert c.get("/api/health").json() == {"status": "ok", "database": "connected"}
        spec = c.get("/openapi.json").json()
        assert "mem0 compatibility mode" in spec["info"]["title"]
        paths = spec["paths"]
        for path, method in [
            ("/memories", "post"),
            ("/memories", "get"),
            ("/memories", "delete"),
            ("/memories/{memory_id}", "get"),
            ("/memories/{memory_id}", "put"),
            ("/memories/{memory_id}", "delete"),
            ("/memories/{memory_id}/history", "get"),
            ("/search", "post"),
            ("/reset", "post"),
            ("/configure", "post"),
            ("/configure", "get"),
            ("/configure/providers", "get"),
            ("/api/health", "get"),
            # engramdb's own additions, served in both modes:
            ("/memories/{memory_id}/restore", "post"),
            ("/purge", "post"),
            ("/export", "get"),
        ]:
            assert method in paths[path], (path, method)
        body = spec["components"]["schemas"]["Mem0AddRequest"]["properties"]
        assert {"messages", "user_id", "agent_id", "run_id", "metadata", "infer"} <= set(body)
        docs = c.get("/docs")
        assert docs.status_code == 200 and "<script" not in docs.text
        assert c.get("/", follow_redirects=False).headers["location"] == "/docs"
        assert "engram_http_requests_total" in c.get("/metrics").text
        assert _detail(c.get("/no/such/route"), 404) == "Not Found"
        assert _detail(c.patch("/memories"), 405) == "Method Not Allowed"
        # mem0's LLM-proxy route is not served.
        assert _detail(c.post("/generate-instructions", json={"use_case": "x"}), 404)


# -- every route, with mem0's bodies ------------------------------------------------------------


def test_every_mem0_route_round_trip(stack: Stack) -> None:
    user = _new_user()
    with stack.client(stack.user_key(user)) as c:
        added = c.post(
            "/memories",
            json={
                "messages": [
                    {"role": "user", "content": "I am vegetarian and allergic to peanuts"},
                    {"role": "assistant", "content": "Noted, no peanuts."},
                    {"role": "user", "content": "We adopted a cat called Miso"},
                ],
                "user_id": user,
                "run_id": "chat-1",
                "metadata": {"topic": "life", "mood": "good"},
                "infer": False,
            },
        )
        assert added.status_code == 200, added.text
        events = added.json()["results"]
        assert [e["event"] for e in events] == ["ADD", "ADD", "ADD"]
        assert all({"id", "memory", "event"} <= set(e) for e in events)
        veg, _, cat = (e["id"] for e in events)

        # mem0's client always names the user; the key's own id is accepted.
        listed = c.get("/memories", params={"user_id": user})
        assert listed.status_code == 200
        results = listed.json()["results"]
        assert len(results) == 3
        for m in results:
            assert set(m) >= MEM0_ITEM_KEYS and m["user_id"] == user
        assert len(c.get("/memories", params={"user_id": user, "top_k": 2}).json()["results"]) == 2
        assert c.get("/memories", params={"user_id": user, "top_k": 0}).json() == {"results": []}
        assert len(c.get("/memories", params={"run_id": "chat-1"}).json()["results"]) == 3
        # Empty ids count as left out (mem0 drops them); the key's scope applies.
        blank = {"user_id": user, "agent_id": "", "run_id": ""}
        assert len(c.get("/memories", params=blank).json()["results"]) == 3

        got = c.get(f"/memories/{veg}")
        assert got.status_code == 200
        memory = got.json()
        assert set(memory) >= MEM0_ITEM_KEYS
        assert memory["memory"] == "I am vegetarian and allergic to peanuts"
        assert memory["metadata"] == {"topic": "life", "mood": "good"}

        # Search: top-level ids (mem0's deprecated form) and ids inside filters.
        found = c.post("/search", json={"query": "is she vegetarian?", "user_id": user})
        assert found.status_code == 200, found.text
        hits = found.json()["results"]
        assert veg in [h["id"] for h in hits]
        assert all(isinstance(h["score"], float) for h in hits)
        in_filters = c.post(
            "/search",
            json={"query": "pets", "filters": {"user_id": user}, "top_k": 1, "explain": True},
        ).json()["results"]
        assert len(in_filters) == 1 and "score_details" in in_filters[0]
        narrowed = c.post(
            "/search",
            json={"query": "pets", "filters": {"AND": [{"user_id": user}, {"topic": "work"}]}},
        )
        assert narrowed.json()["results"] == []
        assert c.post(
            "/search", json={"query": "pets", "user_id": user, "threshold": 1.0}
        ).json() == {"results": []}
        assert (
            c.post(
                "/search", json={"query": "pets", "user_id": user, "show_expired": True}
            ).status_code
            == 200
        )

        # Update: mem0's {"text", "metadata"}; metadata is merged, scope keys ignored.
        updated = c.put(f"/memories/{veg}", json={"text": "I am vegan"})
        assert updated.status_code == 200
        assert updated.json() == {"message": "Memory updated successfully!"}
        assert c.get(f"/memories/{veg}").json()["memory"] == "I am vegan"
        merged = c.put(
            f"/memories/{veg}", json={"metadata": {"mood": "great", "user_id": "someone-else"}}
        )
        assert merged.json() == {"message": "Memory updated successfully!"}
        after = c.get(f"/memories/{veg}").json()
        assert after["metadata"] == {"topic": "life", "mood": "great"}
        assert after["user_id"] == user and after["memory"] == "I am vegan"
        both = c.put(f"/memories/{veg}", json={"text": "I am vegan again", "metadata": {"x": 1}})
        assert both.status_code == 200
        assert c.get(f"/memories/{veg}").json()["metadata"] == {
            "topic": "life",
            "mood": "great",
            "x": 1,
        }

        dated = c.put(f"/memories/{veg}", json={"expiration_date": "2099-12-31"})
        assert dated.json() == {"message": "Memory updated successfully!"}
        assert c.get(f"/memories/{veg}").json()["expiration_date"] == "2099-12-31"
        cleared = c.put(f"/memories/{veg}", json={"expiration_date": None})
        assert cleared.status_code == 200
        assert c.get(f"/memories/{veg}").json()["expiration_date"] is None

        history = c.get(f"/memories/{veg}/history")
        assert history.status_code == 200
        changes = history.json()
        assert [e["event"] for e in changes] == ["ADD", *["UPDATE"] * 5]
        for e in changes:
            assert set(e) >= MEM0_HISTORY_KEYS, e
            assert isinstance(e["id"], str) and e["memory_id"] == veg
        assert changes[0]["new_memory"] == "I am vegetarian and allergic to peanuts"
        assert changes[1]["old_memory"] == "I am vegetarian and allergic to peanuts"
        assert changes[0]["updated_at"] is None and changes[0]["is_deleted"] is False

        deleted = c.delete(f"/memories/{veg}")
        assert deleted.status_code == 200
        assert deleted.json() == {"message": "Memory deleted successfully"}
        assert c.get(f"/memories/{veg}").json() is None
        assert c.get(f"/memories/{veg}/history").json()[-1]["is_deleted"] is True

        # engramdb's additions answer in this mode too, with mem0-shaped errors.
        restored = c.post(f"/memories/{veg}/restore")
        assert restored.status_code == 200 and restored.json()["memory"] == "I am vegan again"
        _detail(c.post(f"/memories/{veg}/restore", json={"version": 99}), 404)
        export = c.get("/export")
        assert export.status_code == 200
        assert len(export.text.splitlines()) == 4  # header and three memories

        removed = c.delete("/memories", params={"user_id": user, "run_id": "chat-1"})
        assert removed.status_code == 200
        assert removed.json() == {"message": "All relevant memories deleted"}
        assert c.get("/memories", params={"user_id": user}).json() == {"results": []}
        assert c.get(f"/memories/{cat}").json() is None

        purged = c.post("/purge", json={"memory_id": cat})
        assert purged.status_code == 200 and purged.json()["purged"] == 1
        assert c.get(f"/memories/{cat}/history").json() == []


def test_bound_key_may_leave_its_ids_out(stack: Stack) -> None:
    """mem0 asks every call to name a scope; a bound key's own ids are implied."""
    user = _new_user()
    with stack.client(stack.user_key(user), header="bearer") as c:
        added = c.post("/memories", json={"messages": _messages("tea at five"), "infer": False})
        assert added.status_code == 200
        mid = added.json()["results"][0]["id"]
        assert [m["id"] for m in c.get("/memories").json()["results"]] == [mid]
        assert c.post("/search", json={"query": "tea"}).json()["results"][0]["id"] == mid


def test_add_with_the_llm_and_its_failures(
    tmp_path: Path, embedder: LocalEmbedder, openai_server: WireServer
) -> None:
    """infer left out means extraction, as in mem0; an unusable reply is mem0's 502."""
    openai_server.handler = lambda request: Reply(
        content={
            "memory": [
                {"text": "Alice likes green tea", "attributed_to": "user", "linked_memory_ids": []}
            ]
        }
    )
    config = {
        "llm": {
            "provider": "openai_compatible",
            "config": {"base_url": openai_server.base_url, "model": "m", "max_retries": 0},
        }
    }
    memory = AsyncMemory(tmp_path / "e.db", config=config, embedder=embedder)
    with (
        live(create_app(memory, close_memory=True, compat="mem0")) as server,
        httpx.Client(base_url=server.url, timeout=60) as c,
    ):
        body = {"messages": _messages("I switched to green tea"), "user_id": "alice"}
        added = c.post("/memories", json=body)
        assert added.status_code == 200, added.text
        assert added.json()["results"][0]["memory"] == "Alice likes green tea"
        openai_server.handler = lambda request: Reply(content="no json here")
        failed = c.post("/memories", json={**body, "messages": _messages("hello there")})
        assert failed.status_code == 502, failed.text
        error = failed.json()
        assert error["code"] == "extraction_failed" and isinstance(error["failure_id"], int)
        assert isinstance(error["detail"], str) and error["detail"]


# -- errors: mem0's shapes and codes --------------------------------------------------------------


def test_errors_are_mem0_shaped(stack: Stack) -> None:
    user = _new_user()
    admin = stack.keys.create(admin=True).key
    with stack.client(admin) as a:
        # mem0's 400s for a call that names no scope.
        no_ids = a.post("/memories", json={"messages": _messages("hi")})
        assert _detail(no_ids, 400) == (
            "At least one identifier (user_id, agent_id, run_id) is required."
        )
        blank = {"messages": _messages("hi"), "user_id": "", "agent_id": ""}
        _detail(a.post("/memories", json=blank), 400)
        assert _detail(a.delete("/memories"), 400) == "At least one identifier is required."
        _detail(a.delete("/memories", params={"user_id": ""}), 400)
        _detail(a.get("/memories"), 400)
        _detail(a.post("/search", json={"query": "x"}), 400)
        # An admin may act on any named scope.
        made = a.post("/memories", json={"messages": _messages("a fact"), "user_id": user})
        assert made.status_code == 200
        mid = made.json()["results"][0]["id"]
        assert a.get("/memories", params={"user_id": user}).json()["results"][0]["id"] == mid

    with stack.client(stack.user_key(user)) as c:
        # Unknown ids: GET answers null and history [] (mem0), update and delete 404.
        unknown = str(uuid.uuid4())
        missing = c.get(f"/memories/{unknown}")
        assert missing.status_code == 200 and missing.text == "null"
        assert c.get(f"/memories/{unknown}/history").json() == []
        assert unknown in _detail(c.put(f"/memories/{unknown}", json={"text": "x"}), 404)
        assert unknown in _detail(c.put(f"/memories/{unknown}", json={"metadata": {"a": 1}}), 404)
        assert unknown in _detail(c.delete(f"/memories/{unknown}"), 404)

        # Request-shape errors: FastAPI's 422 {"detail": [...]}, as mem0's server.
        _validation(c.post("/memories", json={}), "messages")
        _validation(c.post("/memories", json={"messages": "a text"}), "messages")
        _validation(c.post("/memories", json={"messages": [{"role": "user"}]}), "content")
        _validation(
            c.post("/memories", json={"messages": [{"content": 5, "role": "user"}]}), "content"
        )
        _validation(c.post("/search", json={"user_id": user}), "query")
        _validation(c.get("/memories", params={"top_k": 1001}), "top_k")
        _validation(c.get("/memories", params={"top_k": "many"}), "top_k")
        bad_json = c.post(
            "/memories", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert _detail(bad_json, 422)[0]["type"] == "json_invalid"

        # Input the library refuses: 400, as mem0 answers its ValueErrors.
        for method, path, body in [
            ("POST", "/memories", {"messages": _messages("x"), "metadata": {"id": 1}}),
            ("POST", "/memories", {"messages": _messages("   ")}),
            ("POST", "/memories", {"messages": []}),
            ("POST", "/memories", {"messages": [{"role": "wizard", "content": "x"}]}),
            ("POST", "/memories", {"messages": _messages("x"), "expiration_date": "soon"}),
            ("POST", "/memories", {"messages": _messages("x"), "memory_type": "core"}),
            ("POST", "/memories", {"messages": _messages("x"), "memory_type": "procedural_memory"}),
            ("POST", "/memories", {"messages": _messages("z" * 20_001)}),
            ("POST", "/search", {"query": "x", "threshold": 2}),
            ("POST", "/search", {"query": ""}),
            ("POST", "/search", {"query": "x", "top_k": 51}),
            ("POST", "/search", {"query": "x", "filters": {"a": {"gt": True}}}),
            ("POST", "/search", {"query": "x", "user_id": user, "filters": {"user_id": "y"}}),
            ("PUT", f"/memories/{mid}", {}),
            ("PUT", f"/memories/{mid}", {"expiration_date": "soon"}),
            ("PUT", f"/memories/{mid}", {"metadata": {"hash": "x"}}),
        ]:
            _detail(c.request(method, path, json=body), 400)
        _detail(c.get("/memories", params={"top_k": 51}), 400)  # over this server's limit
        _detail(c.get("/memories/" + "x" * 300), 400)
        _detail(c.post("/memories", json={"messages": _messages("x"), "run_id": " "}), 400)

        # Unknown fields are ignored, as mem0's models ignore them.
        lenient = c.post(
            "/memories",
            json={"messages": [{"role": "user", "content": "hello", "x": 1}], "colour": "red"},
        )
        assert lenient.status_code == 200, lenient.text

        # Body limits: mem0's shape, checked before reading and while reading.
        big = {"messages": _messages("x" * (LIMITS.max_body_bytes + 10))}
        _detail(c.post("/memories", json=big), 413)

        def chunks() -> Iterator[bytes]:
            yield b'{"messages": [{"role": "user", "content": "'
            for _ in range(20):
                yield b"y" * 8192
            yield b'"}]}'

        chunked = c.post(
            "/memories", content=chunks(), headers={"Content-Type": "application/json"}
        )
        _detail(chunked, 413)
        too_many = {"messages": _messages(*[f"m{i}" for i in range(LIMITS.max_messages + 1)])}
        assert str(LIMITS.max_messages) in _detail(c.post("/memories", json=too_many), 400)

        # Nothing was stored by any of the refused calls.
        kept = [m["memory"] for m in c.get("/memories").json()["results"]]
        assert sorted(kept) == ["a fact", "hello"]


def test_auth_failures_are_mem0_shaped(stack: Stack) -> None:
    key = stack.user_key(_new_user())
    with stack.client(key) as c:
        assert c.get("/memories").status_code == 200
    for headers in [
        {},
        {"X-API-Key": key + "x"},
        {"X-API-Key": "m0sk_" + "A" * 43},  # a mem0 key is no engramdb key
        {"Authorization": f"Bearer {key[:-1]}x"},
        {"Authorization": "Bearer not-a-key"},
    ]:
        for method, path in [("GET", "/memories"), ("POST", "/reset"), ("POST", "/configure")]:
            response = httpx.request(method, f"{stack.url}{path}", headers=headers, json={})
            assert isinstance(_detail(response, 401), str)
            assert response.headers["www-authenticate"] == "Bearer"
    revoked = stack.keys.create(user_id=_new_user())
    stack.keys.revoke(revoked.key)
    _detail(httpx.get(f"{stack.url}/memories", headers={"X-API-Key": revoked.key}), 401)


def test_configure_is_refused_even_for_an_admin(stack: Stack) -> None:
    """A client may not swap the server's LLM, embedder or store (mem0 lets an admin)."""
    admin = stack.keys.create(admin=True).key
    user_key = stack.user_key(_new_user())
    config = {
        "llm": {"provider": "openai", "config": {"api_key": "x", "model": "m"}},
        "vector_store": {"provider": "pgvector", "config": {"host": "elsewhere"}},
    }
    for key in (admin, user_key):
        with stack.client(key) as c:
            assert "restart" in _detail(c.post("/configure", json=config), 403)
            _detail(c.get("/configure"), 403)
            _detail(c.get("/configure/providers"), 403)
    with stack.client(admin) as c:
        # The server still runs on its own configuration.
        assert c.post("/memories", json={"messages": _messages("still here"), "user_id": "cfg"})


def test_reset_needs_an_admin_key(tmp_path: Path, embedder: LocalEmbedder) -> None:
    memory = AsyncMemory(tmp_path / "e.db", embedder=embedder, llm=None)
    keys = KeyStore(tmp_path / "keys.db")
    with (
        live(create_app(memory, keys=keys, close_memory=True, compat="mem0")) as server,
        httpx.Client(base_url=server.url) as open_client,
    ):
        # Without keys every caller is an admin on loopback, but none may wipe the store.
        add = {"messages": _messages("keep me"), "user_id": "u", "infer": False}
        assert open_client.post("/memories", json=add).status_code == 200
        assert "admin API key" in _detail(open_client.post("/reset"), 403)
        admin = keys.create(admin=True).key
        user = keys.create(user_id="u").key
        with httpx.Client(base_url=server.url, headers={"X-API-Key": user}) as c:
            _detail(c.post("/reset"), 403)
            assert len(c.get("/memories").json()["results"]) == 1
        with httpx.Client(base_url=server.url, headers={"X-API-Key": admin}) as a:
            done = a.post("/reset")
            assert done.status_code == 200 and done.json() == {"message": "All memories reset"}
            assert a.get("/memories", params={"user_id": "u"}).json() == {"results": []}
            # The keys are server configuration: a reset leaves them, and the store works on.
            assert a.post("/memories", json=add).status_code == 200
        with httpx.Client(base_url=server.url, headers={"X-API-Key": user}) as c:
            assert [m["memory"] for m in c.get("/memories").json()["results"]] == ["keep me"]
    keys.close()


# -- the tenant attack suite ----------------------------------------------------------------------


def test_tenant_attack_suite_through_every_mem0_route(stack: Stack) -> None:
    alice, bob = _new_user(), _new_user()
    alice_key, bob_key = stack.user_key(alice), stack.user_key(bob)
    coach_key = stack.user_key(alice, agent_id="coach")
    run_key = stack.user_key(alice, run_id="chat-a")
    secret = f"bob-secret-{uuid.uuid4().hex[:6]}"
    with stack.client(bob_key) as b:
        bob_ids = [
            r["id"]
            for r in b.post(
                "/memories",
                json={
                    "messages": _messages(
                        f"My password hint is {secret}", f"I keep {secret} under the mat"
                    ),
                    "user_id": bob,
                    "agent_id": "coach",
                    "run_id": "shared-run",
                    "infer": False,
                },
            ).json()["results"]
        ]
        before_bob = b.get("/export").text
    assert len(bob_ids) == 2
    with stack.client(alice_key) as a:
        alice_ids = [
            r["id"]
            for r in a.post(
                "/memories",
                json={
                    "messages": _messages("I like sailing", "Where is the password hint?"),
                    "user_id": alice,
                    "run_id": "shared-run",
                    "infer": False,
                },
            ).json()["results"]
        ]
        coach_note = a.post(
            "/memories",
            json={"messages": _messages("Run 5 km on Mondays"), "agent_id": "coach"},
        ).json()["results"][0]["id"]
        a.post("/memories", json={"messages": _messages("chat a note"), "run_id": "chat-a"})

    attempts: list[httpx.Response] = []
    unknown = str(uuid.uuid4())

    def attempt(client: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response:
        response = client.request(method, path, **kw)
        attempts.append(response)
        return response

    with stack.client(alice_key) as a:
        # By id: another tenant's id answers exactly like an unknown one, route by route.
        for mid in (*bob_ids, unknown):
            got = attempt(a, "GET", f"/memories/{mid}")
            assert got.status_code == 200 and got.json() is None
            history = attempt(a, "GET", f"/memories/{mid}/history")
            assert history.status_code == 200 and history.json() == []
            for method, path, kw in [
                ("PUT", f"/memories/{mid}", {"json": {"text": "pwned"}}),
                ("PUT", f"/memories/{mid}", {"json": {"metadata": {"pwned": True}}}),
                ("DELETE", f"/memories/{mid}", {}),
                ("POST", f"/memories/{mid}/restore", {}),
                ("POST", "/purge", {"json": {"memory_id": mid}}),
            ]:
                detail = _detail(attempt(a, method, path, **kw), 404)
                assert mid in detail
        for method, path, kw in [
            ("PUT", "/memories/{}", {"json": {"text": "pwned"}}),
            ("DELETE", "/memories/{}", {}),
        ]:
            bob_says = attempt(a, method, path.format(bob_ids[0]), **kw).json()["detail"]
            unknown_says = attempt(a, method, path.format(unknown), **kw).json()["detail"]
            assert bob_says == unknown_says.replace(unknown, bob_ids[0])

        # Naming bob's scope — in the body, the query or the filters — is refused.
        refused: list[tuple[str, str, dict[str, Any]]] = [
            ("GET", "/memories", {"params": {"user_id": bob}}),
            ("GET", "/memories", {"params": {"user_id": bob, "agent_id": "coach"}}),
            ("DELETE", "/memories", {"params": {"user_id": bob}}),
            ("DELETE", "/memories", {"params": {"user_id": bob, "run_id": "shared-run"}}),
            ("POST", "/search", {"json": {"query": "password", "user_id": bob}}),
            ("POST", "/search", {"json": {"query": "password", "filters": {"user_id": bob}}}),
            (
                "POST",
                "/search",
                {"json": {"query": "password", "filters": {"AND": [{"user_id": bob}]}}},
            ),
            (
                "POST",
                "/memories",
                {"json": {"messages": _messages("planted"), "user_id": bob}},
            ),
            ("POST", "/purge", {"json": {"user_id": bob}}),
            ("GET", "/export", {"params": {"user_id": bob}}),
            ("POST", "/reset", {}),
        ]
        for method, path, kw in refused:
            _detail(attempt(a, method, path, **kw), 403)

        # What a filter can express is ANDed with the key's scope: no widening.
        for filters in [
            {"OR": [{"user_id": alice}, {"agent_id": "coach"}]},
            {"NOT": [{"user_id": alice}]},
            {"user_id": {"in": [alice, bob]}},
            {"user_id": {"ne": alice}},
            {"user_id": "*"},
            {"run_id": "shared-run"},
        ]:
            found = attempt(a, "POST", "/search", json={"query": "password", "filters": filters})
            assert found.status_code in (200, 400, 403), found.text
            if found.status_code == 200:
                assert all(r["user_id"] == alice for r in found.json()["results"])
        # Empty ids in the query are left out, so the key's own scope applies.
        listed = attempt(a, "GET", "/memories", params={"user_id": "", "agent_id": ""})
        assert {m["user_id"] for m in listed.json()["results"]} == {alice}
        shared = attempt(a, "GET", "/memories", params={"run_id": "shared-run"})
        assert sorted(m["id"] for m in shared.json()["results"]) == sorted(alice_ids)

        # A scope key in an update's metadata does not move the memory.
        moved = attempt(a, "PUT", f"/memories/{alice_ids[0]}", json={"metadata": {"user_id": bob}})
        assert moved.status_code == 200
        assert attempt(a, "GET", f"/memories/{alice_ids[0]}").json()["user_id"] == alice

        # Narrowing within the key's own scope works; deleting it leaves bob's run alone.
        done = attempt(a, "DELETE", "/memories", params={"user_id": alice, "run_id": "shared-run"})
        assert done.json() == {"message": "All relevant memories deleted"}
        assert secret not in attempt(a, "GET", "/export").text

    with stack.client(coach_key) as coach:
        # Bound to alice *and* the coach agent: alice's other memories are out of reach.
        own = attempt(coach, "GET", "/memories").json()["results"]
        assert [m["id"] for m in own] == [coach_note]
        assert attempt(coach, "GET", f"/memories/{alice_ids[0]}").json() is None
        _detail(attempt(coach, "GET", "/memories", params={"agent_id": "other"}), 403)
        _detail(attempt(coach, "POST", "/search", json={"query": "x", "agent_id": "other"}), 403)
        planted = {"messages": _messages("x"), "user_id": alice, "agent_id": "other"}
        _detail(attempt(coach, "POST", "/memories", json=planted), 403)

    with stack.client(run_key) as run:
        # Bound to one run: the rest of alice's memories do not exist for it.
        texts = [m["memory"] for m in attempt(run, "GET", "/memories").json()["results"]]
        assert texts == ["chat a note"]
        assert attempt(run, "GET", f"/memories/{coach_note}").json() is None
        _detail(attempt(run, "GET", "/memories", params={"run_id": "shared-run"}), 403)
        _detail(attempt(run, "DELETE", "/memories", params={"run_id": "shared-run"}), 403)
        _detail(attempt(run, "PUT", f"/memories/{coach_note}", json={"text": "pwned"}), 404)

    cross_reads = [r for r in attempts if secret in r.text]
    assert cross_reads == []
    with stack.client(bob_key) as b:
        assert b.get("/export").text == before_bob  # not one write reached bob's memories
        for mid in bob_ids:
            assert [e["event"] for e in b.get(f"/memories/{mid}/history").json()] == ["ADD"]
            assert secret in b.get(f"/memories/{mid}").json()["memory"]


# -- fuzzing: bad input is a 4xx in mem0's shape, never a 5xx --------------------------------------

FUZZED = [
    ("POST", "/memories"),
    ("GET", "/memories"),
    ("DELETE", "/memories"),
    ("GET", "/memories/{memory_id}"),
    ("PUT", "/memories/{memory_id}"),
    ("DELETE", "/memories/{memory_id}"),
    ("GET", "/memories/{memory_id}/history"),
    ("POST", "/search"),
    ("POST", "/configure"),
]


def test_fuzzed_requests_get_no_server_errors(stack: Stack) -> None:
    """Generated valid and invalid requests (schemathesis), with an admin and a bound key."""
    import hypothesis
    import schemathesis
    from schemathesis import Case, GenerationMode

    keys = [stack.keys.create(admin=True).key, stack.user_key(_new_user())]
    schema = schemathesis.openapi.from_url(f"{stack.url}/openapi.json")
    for method, path in FUZZED:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @hypothesis.settings(
                max_examples=8,
                deadline=None,
                suppress_health_check=list(hypothesis.HealthCheck),
                derandomize=True,
                database=None,
                phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
            )
            @hypothesis.given(case=schema[path][method].as_strategy(generation_mode=mode))
            def fuzz(case: Case) -> None:
                for key in keys:
                    response = case.call(base_url=stack.url, headers={"X-API-Key": key})
                    assert response.status_code < 500, (case.as_curl_command(), response.text)
                    if response.text == "Invalid HTTP request received.":
                        continue  # uvicorn refused the bytes before any code of ours ran
                    if response.status_code >= 400:
                        assert set(response.json()) == {"detail"}, response.text

            fuzz()


# -- engramdb's own mode is unchanged -------------------------------------------------------------


def test_engramdb_mode_keeps_its_own_api(tmp_path: Path, embedder: LocalEmbedder) -> None:
    memory = AsyncMemory(tmp_path / "e.db", embedder=embedder, llm=None)
    keys = KeyStore(tmp_path / "keys.db")
    key = keys.create(user_id="u").key
    with (
        live(create_app(memory, keys=keys, close_memory=True)) as server,
        httpx.Client(base_url=server.url, headers={"X-API-Key": key}) as c,
    ):
        assert "compat" not in c.get("/healthz").json()
        paths = c.get("/openapi.json").json()["paths"]
        assert not {"/reset", "/configure", "/api/health"} & set(paths)
        for response in (c.post("/reset"), c.get("/api/health"), c.get("/memories/nope")):
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "not_found"
        assert c.get("/memories/nope/history").json()["error"]["code"] == "not_found"
        refused = c.post("/memories", json={"messages": "x", "user_id": "other"})
        assert refused.status_code == 403
        assert refused.json()["error"]["code"] == "scope_forbidden"
    keys.close()


def test_create_app_refuses_an_unknown_mode(tmp_path: Path, embedder: LocalEmbedder) -> None:
    memory = Memory(tmp_path / "e.db", embedder=embedder, llm=None)
    with pytest.raises(ValueError, match="mem0"):
        create_app(memory, compat="zep")  # type: ignore[arg-type]
    memory.close()


# -- the command ----------------------------------------------------------------------------------


def test_serve_refuses_an_unknown_compat_mode(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli_app, ["--db", str(tmp_path / "e.db"), "serve", "--compat", "zep"]
    )
    assert result.exit_code == 2
    assert "mem0" in result.output
    assert not (tmp_path / "e.db").exists()


def test_engram_serve_compat_mem0(tmp_path: Path) -> None:
    key = KeyStore(tmp_path / "keys.db").create(user_id="alice").key
    with engram_serve(tmp_path, "--compat", "mem0", "--engine", "sync") as (url, result):
        assert httpx.get(f"{url}/healthz").json()["compat"] == "mem0"
        headers = {"X-API-Key": key}
        body = {"messages": _messages("hi"), "user_id": "alice"}
        assert httpx.post(f"{url}/memories", json=body, headers=headers).is_success
        listed = httpx.get(f"{url}/memories", params={"user_id": "alice"}, headers=headers)
        assert listed.json()["results"][0]["memory"] == "hi"
        assert httpx.get(f"{url}/memories/nope", headers=headers).json() is None
        assert httpx.get(f"{url}/memories", headers={}).json()["detail"]
    assert result["info"]["url"] == url and result["info"]["compat"] == "mem0"
