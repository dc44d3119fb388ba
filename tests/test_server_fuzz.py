"""Fuzz the live REST API from its own OpenAPI schema (schemathesis): no 5xx, ever.

Every operation gets generated requests, valid and invalid, sent over real
HTTP to a uvicorn server, with an admin key (any scope reachable, so deep
paths run) and again with a key bound to one user (the tenancy checks run). Every
answer must be below 500, and every error must be the documented envelope.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import schemathesis
from schemathesis import Case, GenerationMode

from engramdb import AsyncMemory
from engramdb.embedders import LocalEmbedder
from engramdb.server import KeyStore, ServerLimits, create_app
from live_server import live

MAX_EXAMPLES = int(os.environ.get("ENGRAM_FUZZ_EXAMPLES", "25"))
"""Per operation and mode; the suite's default keeps this file near 20 s. Raise it to dig."""


@pytest.fixture(scope="module")
def api(
    tmp_path_factory: pytest.TempPathFactory, embedder: LocalEmbedder
) -> Iterator[dict[str, Any]]:
    folder = tmp_path_factory.mktemp("fuzz")
    memory = AsyncMemory(folder / "engram.db", embedder=embedder, llm=None)
    keys = KeyStore(folder / "keys.db")
    admin = keys.create(admin=True).key
    alice = keys.create(user_id="alice").key
    limits = ServerLimits(max_body_bytes=256 * 1024)
    with live(create_app(memory, keys=keys, limits=limits, close_memory=True)) as server:
        yield {"url": server.url, "keys": {"admin": admin, "alice": alice}}
    keys.close()


@pytest.fixture(scope="module")
def live_schema(api: dict[str, Any]) -> Any:
    # Generation modes default to both: valid requests, and requests that break the schema.
    return schemathesis.openapi.from_url(f"{api['url']}/openapi.json")


OPERATIONS = [
    ("POST", "/memories"),
    ("GET", "/memories"),
    ("DELETE", "/memories"),
    ("POST", "/search"),
    ("POST", "/purge"),
    ("GET", "/export"),
    ("GET", "/memories/{memory_id}"),
    ("PUT", "/memories/{memory_id}"),
    ("DELETE", "/memories/{memory_id}"),
    ("GET", "/memories/{memory_id}/history"),
    ("POST", "/memories/{memory_id}/restore"),
    ("GET", "/memories/{memory_id}/timeline"),
    ("GET", "/memories/{memory_id}/messages"),
    ("GET", "/failures"),
    ("POST", "/failures/{failure_id}/retry"),
    ("GET", "/healthz"),
    ("GET", "/readyz"),
    ("GET", "/metrics"),
]


def test_every_operation_is_fuzzed(live_schema: Any) -> None:
    found = {
        (op.method.upper(), op.path)
        for op in (result.ok() for result in live_schema.get_all_operations())
    }
    assert found == set(OPERATIONS)


NO_INPUT = {("GET", "/healthz"), ("GET", "/readyz"), ("GET", "/metrics")}
"""Operations without parameters: nothing to break, so no invalid requests to make."""


@pytest.mark.parametrize(
    ("method", "path", "mode"),
    [
        (method, path, mode)
        for method, path in OPERATIONS
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
        if not (mode is GenerationMode.NEGATIVE and (method, path) in NO_INPUT)
    ],
)
def test_no_server_errors(
    live_schema: Any, api: dict[str, Any], method: str, path: str, mode: GenerationMode
) -> None:
    operation = live_schema[path][method]

    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        suppress_health_check=list(hypothesis.HealthCheck),
        derandomize="ENGRAM_FUZZ_EXAMPLES" not in os.environ,
        database=None,
        phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
    )
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: Case) -> None:
        for key in api["keys"].values():
            response = case.call(base_url=api["url"], headers={"Authorization": f"Bearer {key}"})
            assert response.status_code < 500, (case.as_curl_command(), response.text)
            if response.text == "Invalid HTTP request received.":
                # uvicorn's HTTP parser refused the bytes (say, a control character in
                # the path) before any application code ran; nothing of ours to shape.
                assert response.status_code == 400
                continue
            if response.status_code >= 400:
                body = response.json()
                assert set(body) == {"error"}, body
                assert isinstance(body["error"]["code"], str)
                assert isinstance(body["error"]["message"], str)

    fuzz()
