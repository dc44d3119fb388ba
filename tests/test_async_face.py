"""AsyncMemory's export and import: the same records as the sync face, without blocking."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from engramdb import AsyncMemory, Memory
from engramdb.embedders import LocalEmbedder


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_async_export_and_import_match_the_sync_face(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    stores: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        for name in ("a", "b"):
            if backend == "sqlite":
                stores[name] = {"provider": "sqlite", "config": {"path": str(tmp_path / name)}}
            else:
                schema = stack.enter_context(request.getfixturevalue("pg_server").schema())
                stores[name] = {"provider": "postgres", "config": schema}
        _round_trip(stores, embedder)


def _round_trip(stores: dict[str, dict[str, Any]], embedder: LocalEmbedder) -> None:
    def config(name: str) -> dict[str, Any]:
        return {"vector_store": stores[name]}

    with Memory(config=config("a"), embedder=embedder) as sync:
        sync.add("async export one", user_id="u", run_id="r1")
        mid = sync.add("async export two", user_id="v")["results"][0]["id"]
        sync.update(mid, "async export two, edited")
        expected = list(sync.export())

    async def main() -> tuple[list[dict[str, Any]], int, list[dict[str, Any]]]:
        async with AsyncMemory(config=config("a"), embedder=embedder) as m:
            # The loop keeps running while the store is read: a task that only
            # yields gets turns between the batches (none if export blocked it).
            ticks = 0
            done = asyncio.Event()

            async def ticker() -> None:
                nonlocal ticks
                while not done.is_set():
                    ticks += 1
                    await asyncio.sleep(0)

            task = asyncio.create_task(ticker())
            await asyncio.sleep(0)
            start = ticks
            got = [r async for r in m.export(batch=1)]
            done.set()
            await task
            assert ticks - start >= len(got)
            buf = io.StringIO()
            assert await m.export_jsonl(buf) == 2
        async with AsyncMemory(config=config("b"), embedder=embedder) as copy:
            count = await copy.import_jsonl(io.StringIO(buf.getvalue()))
            again = [r async for r in copy.export()]
        return got, count, again

    got, count, again = asyncio.run(main())
    assert got == expected and count == 2
    assert [json.dumps(r, sort_keys=True) for r in again] == [
        json.dumps(r, sort_keys=True) for r in expected
    ]
