"""The per-scope caches are bounded by bytes (``cache_bytes``) on both stores.

One process serving many tenants keeps the caches of the tenants it served
last (least recently used out first), not of every tenant since it started
(issue 31). These tests use real SQLite files and the real PostgreSQL server
of the test session (``pg_config``, tests/pg.py), a hash embedder (no model:
only the store counts), and check the figures the store's cache table keeps:
the bound holds after every call, evictions happen, the most recently used
cache stays even when it alone is over the bound, and a scope searched again
after its cache was evicted answers exactly as before (same ids, same scores).
"""

from __future__ import annotations

import gc
import json
import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engramdb import Memory
from engramdb.cli import app
from engramdb.core.bm25 import BM25Index
from engramdb.errors import ConfigError
from engramdb.stores import make_store
from engramdb.stores.kernel.caches import DEFAULT_CACHE_BYTES, ScopeCache, ScopeCaches
from engramdb_bench._hash_embedder import HashEmbedder

BACKENDS = ("sqlite", "postgres")
QUERIES = ("what does the user enjoy on weekends?", "which city did they visit with tea?")
WORDS = (
    "coffee", "tea", "hiking", "Python", "Rust", "Paris", "Tokyo", "cats", "dogs", "jazz",
    "cycling", "chess", "sushi", "running", "Lisbon", "piano", "gardening", "football",
    "mountains", "novels", "baking", "photography", "sailing", "museums", "yoga", "tennis",
)  # fmt: skip


def _note(tenant: int, i: int) -> str:
    n = len(WORDS)
    a, b, c = WORDS[(tenant + i) % n], WORDS[(tenant * 7 + i * 3) % n], WORDS[(i * 11) % n]
    return f"Note {i} of tenant {tenant}: I enjoy {a} on weekends, talk about {b}, visited {c}"


def _memory(
    backend: str, request: pytest.FixtureRequest | None, tmp_path: Path, **options: Any
) -> Memory:
    """A Memory on ``backend`` (the same SQLite file / PostgreSQL schema within a test)."""
    if backend == "sqlite" or request is None:
        # The per-process keyword cache here too (SQLite ranks in the file by default).
        config: dict[str, Any] = {"path": str(tmp_path / "tenants.db"), "keyword_index": "process"}
        provider = "sqlite"
    else:
        # The per-process keyword cache (PostgreSQL ranks in SQL by default).
        config = {**request.getfixturevalue("pg_config"), "keyword_index": "process"}
        provider = "postgres"
    vector_store = {"provider": provider, "config": {**config, **options}}
    return Memory(config={"vector_store": vector_store}, embedder=HashEmbedder(64))


def _table(mem: Memory) -> ScopeCaches[Any]:
    store: Any = mem.store
    table = getattr(store, "_table", None)
    return table if table is not None else store.flows.caches


def _check_totals(table: ScopeCaches[Any]) -> None:
    """The running totals are the sums of the figures of the caches held, and nothing else."""
    figures = table._figures
    assert set(figures) == set(table.entries)
    assert table.total_bytes == sum(f[0] for f in figures.values())
    assert table.total_size == sum(f[1] for f in figures.values())


def _found(mem: Memory, user: str, query: str = QUERIES[0]) -> list[tuple[str, float]]:
    hits = mem.search(query, user_id=user, top_k=10)["results"]
    return [(h["id"], h["score"]) for h in hits]


def _add(mem: Memory, tenant: int, first: int, count: int) -> None:
    messages = [{"role": "user", "content": _note(tenant, i)} for i in range(first, first + count)]
    mem.add(messages, user_id=f"t{tenant}", infer=False)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_bound_holds_and_evicted_scopes_answer_as_before(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    tenants = 10
    probe = _memory(backend, request, tmp_path)
    try:
        for tenant in range(tenants):
            _add(probe, tenant, 0, 6)
        _found(probe, "t0")
        one = next(iter(_table(probe)._figures.values()))[0]  # a scope's cache, in bytes
    finally:
        probe.close()
    bound = 3 * one  # room for about three tenants of ten
    mem = _memory(backend, request, tmp_path, cache_bytes=bound)
    try:
        table = _table(mem)
        assert table.max_bytes == bound
        before: dict[int, list[tuple[str, float]]] = {}
        for tenant in range(tenants):
            if tenant % 2:
                # Half the caches are built in two catch-ups: a write after the first search.
                _found(mem, f"t{tenant}")
                _add(mem, tenant, 6, 4)
            before[tenant] = _found(mem, f"t{tenant}")
            assert before[tenant], "every tenant has hits"
            assert table.total_bytes <= bound
            assert table.entries and next(reversed(table.entries)) == ("user_id", f"t{tenant}")
            _check_totals(table)
        assert table.evictions >= tenants - 4
        assert 2 <= len(table.entries) <= 4
        held = set(table.entries)
        assert ("user_id", "t0") not in held and ("user_id", f"t{tenants - 1}") in held
        # Searched again (evicted caches rebuilt from the store): the same answers.
        for tenant in range(tenants):
            assert _found(mem, f"t{tenant}") == before[tenant]
            assert table.total_bytes <= bound
        _check_totals(table)
        # And the same as a process that never evicts.
        unbounded = _memory(backend, request, tmp_path, cache_bytes=1 << 40)
        try:
            for tenant in range(tenants):
                assert _found(unbounded, f"t{tenant}") == before[tenant]
            assert _table(unbounded).evictions == 0
            assert len(_table(unbounded).entries) == tenants
        finally:
            unbounded.close()
    finally:
        mem.close()


def test_a_scope_over_the_bound_alone_is_still_served_from_memory(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    mem = _memory(backend, request, tmp_path, cache_bytes=1_000)
    try:
        for tenant in range(3):
            _add(mem, tenant, 0, 30)
        table = _table(mem)
        first = _found(mem, "t0")
        assert first
        assert list(table.entries) == [("user_id", "t0")]
        assert table.total_bytes > 1_000  # over the bound, alone, and kept
        cache = table.entries[("user_id", "t0")]
        assert _found(mem, "t0") == first
        assert table.entries[("user_id", "t0")] is cache  # served from the same cache
        _found(mem, "t1")
        assert list(table.entries) == [("user_id", "t1")]
        assert table.evictions == 1
        _check_totals(table)
        # cache_bytes 0: still one cache, the one in use.
        zero = _memory(backend, request, tmp_path, cache_bytes=0)
        try:
            assert _found(zero, "t0") == first
            _found(zero, "t2")
            assert list(_table(zero).entries) == [("user_id", "t2")]
        finally:
            zero.close()
    finally:
        mem.close()


def test_a_purge_drops_every_cache_and_the_totals_with_them(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    mem = _memory(backend, request, tmp_path)
    try:
        for tenant in range(4):
            _add(mem, tenant, 0, 5)
            _found(mem, f"t{tenant}")
        table = _table(mem)
        assert len(table.entries) == 4 and table.total_bytes > 0
        _check_totals(table)
        mem.purge(user_id="t3")  # erased rows cannot be caught up with: a new epoch
        kept = _found(mem, "t1")
        assert list(table.entries) == [("user_id", "t1")]
        _check_totals(table)
        assert table.total_bytes == table._figures[("user_id", "t1")][0]
        assert table.evictions == 0  # dropped for the epoch, not for the bound
        assert _found(mem, "t1") == kept
    finally:
        mem.close()


def test_threads_searching_many_tenants_keep_the_bound_and_the_answers(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    import threading

    tenants = 12
    mem = _memory(backend, request, tmp_path, cache_bytes=150_000)
    try:
        for tenant in range(tenants):
            _add(mem, tenant, 0, 6)
        expected = {t: _found(mem, f"t{t}") for t in range(tenants)}
        table = _table(mem)
        wrong: list[tuple[int, object]] = []

        def client(seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(25):
                tenant = rng.randrange(tenants)
                try:
                    got = _found(mem, f"t{tenant}")
                except Exception as exc:  # reported below
                    wrong.append((tenant, exc))
                    continue
                if got != expected[tenant]:
                    wrong.append((tenant, got))

        threads = [threading.Thread(target=client, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert wrong == []
        assert table.evictions > 0
        with table.lock:
            _check_totals(table)
            assert table.total_bytes <= 150_000 or len(table.entries) == 1
    finally:
        mem.close()


class _Sized(ScopeCache):
    __slots__ = ("bytes_",)

    def __init__(self, nbytes: int) -> None:
        super().__init__()
        self.bytes_ = nbytes

    def nbytes(self) -> int:
        return self.bytes_


def test_the_table_evicts_least_recently_used_first_and_keeps_its_totals() -> None:
    import threading

    table: ScopeCaches[_Sized] = ScopeCaches(10**9, epoch="1", lock=threading.Lock(), max_bytes=250)
    a, b, c = _Sized(100), _Sized(100), _Sized(100)
    table.put(("user_id", "a"), a)
    table.put(("user_id", "b"), b)
    table.touch(("user_id", "a"))  # b is now the least recently used
    table.put(("user_id", "c"), c)
    assert table.total_bytes == 300 and table.over()
    table.evict()
    assert list(table.entries) == [("user_id", "a"), ("user_id", "c")]
    assert (table.total_bytes, table.evictions) == (200, 1)
    # Figures measured for a cache that is no longer the key's are not counted.
    table.account(("user_id", "b"), b, 10_000, 5)
    assert table.total_bytes == 200 and ("user_id", "b") not in table.entries
    table.account(("user_id", "c"), c, 1_000, 0)  # c grew past the bound alone
    table.evict()
    assert list(table.entries) == [("user_id", "c")] and table.total_bytes == 1_000
    # A replaced cache's figures are replaced, not added.
    table.put(("user_id", "c"), _Sized(50))
    assert table.total_bytes == 50
    # A newer epoch drops everything and the totals with it; an older one nothing.
    table.see("0")
    assert table.total_bytes == 50
    table.see("2")
    assert (table.total_bytes, table.total_size, len(table.entries)) == (0, 0, 0)
    assert table.evictions == 2
    with pytest.raises(ValueError, match="cache bounds"):
        ScopeCaches(10, epoch="0", lock=threading.Lock(), max_bytes=-1)


# -- the configuration ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1, "256MB", 1.5, True, None])
@pytest.mark.parametrize("provider", ["sqlite", "postgres"])
def test_cache_bytes_must_be_a_non_negative_integer(
    provider: str, bad: object, tmp_path: Path
) -> None:
    config: dict[str, Any] = {"cache_bytes": bad}
    if provider == "postgres":
        config["url"] = "postgresql://nobody@127.0.0.1:1/none"  # never reached: refused first
    with pytest.raises(ConfigError) as refused:
        make_store(provider, config, tmp_path / "x.db")
    message = str(refused.value)
    assert "cache_bytes must be a non-negative integer" in message
    assert repr(bad) in message
    with pytest.raises(ConfigError, match="cache_bytes"):
        Memory(config={"vector_store": {"provider": provider, "config": config}})


def test_cache_bytes_reaches_the_stores(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    sqlite = make_store("sqlite", {"cache_bytes": 12_345}, tmp_path / "a.db")
    try:
        assert sqlite._table.max_bytes == 12_345  # type: ignore[attr-defined]
    finally:
        sqlite.close()
    default = make_store("sqlite", {}, tmp_path / "b.db")
    try:
        assert default._table.max_bytes == DEFAULT_CACHE_BYTES == 256 << 20  # type: ignore[attr-defined]
    finally:
        default.close()
    pg_config = dict(request.getfixturevalue("pg_config"))
    postgres = make_store("postgres", {**pg_config, "cache_bytes": 0}, tmp_path / "c.db")
    try:
        assert postgres.flows.caches.max_bytes == 0  # type: ignore[attr-defined]
    finally:
        postgres.close()


# -- the estimates -------------------------------------------------------------------------


def _text(rng: random.Random, vocabulary: list[str]) -> str:
    words = [vocabulary[min(int(rng.paretovariate(1.1)) - 1, len(vocabulary) - 1)]]
    words += rng.choices(vocabulary, k=rng.randint(8, 30))
    return " ".join(words).capitalize() + "."


def test_a_caches_estimate_is_within_a_quarter_of_what_it_holds(tmp_path: Path) -> None:
    """``_Cache.nbytes`` against tracemalloc: what dropping the cache gives back."""
    rng = random.Random(7)
    syllables = ["ka", "lo", "mi", "ner", "sto", "va", "ru", "pe", "tin", "dos", "el", "xa"]
    vocabulary = ["".join(rng.choices(syllables, k=rng.randint(2, 4))) for _ in range(3_000)]
    mem = _memory("sqlite", None, tmp_path)
    try:
        texts = [_text(rng, vocabulary) for _ in range(600)]
        for first in range(0, len(texts), 200):
            chunk = texts[first : first + 200]
            mem.add([{"role": "user", "content": t} for t in chunk], user_id="u", infer=False)
        table = _table(mem)
        table.clear()
        gc.collect()
        tracemalloc.start()
        try:
            for i in range(30):
                mem.search(" ".join(rng.choices(vocabulary, k=4)), user_id="u")
                if i == 0:  # and one catch-up by seq
                    mem.add([{"role": "user", "content": texts[0]}], user_id="u", infer=False)
            gc.collect()
            cache = table.entries[("user_id", "u")]
            estimate = cache.nbytes()
            assert len(cache.rows) > 0  # the row memo holds something to count
            held = tracemalloc.get_traced_memory()[0]
            with table.lock:
                table.clear()
            del cache
            gc.collect()
            freed = held - tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert freed > 500_000
        assert 0.75 * freed <= estimate <= 1.25 * freed, (estimate, freed)
    finally:
        mem.close()


def _postings_held(index: BM25Index) -> tuple[int, int]:
    posted = sum(len(rows) for rows, _tfs in index._postings.values())
    arrayed = sum(rows.size for rows, _tfs, _at in index._arrays.values())
    return posted, arrayed


def test_bm25_counts_what_its_estimate_reads() -> None:
    """The running counts behind ``BM25Index.nbytes`` match the postings they count."""
    rng = random.Random(3)
    vocabulary = [f"w{i}" for i in range(400)]
    index = BM25Index()
    keys = list(range(3_000))
    docs = [rng.choices(vocabulary, k=rng.randint(3, 12)) for _ in keys]
    index.add(keys[:300], docs[:300])  # bulk
    for key in keys[300:400]:
        index.add([key], [docs[key]])  # one by one
    for _ in range(20):
        index.search(rng.choices(vocabulary, k=3), 10)
    assert _postings_held(index) == (index._posted, index._arrayed)
    index.remove(keys[:50])
    for _ in range(20):
        index.search(rng.choices(vocabulary, k=3), 10)  # compacts the postings it reads
    assert _postings_held(index) == (index._posted, index._arrayed)
    index.add(keys[400:], docs[400:])
    index.remove(keys[100:1_500])  # past the compaction threshold: rebuilt
    index.add([7], [["w1", "w2"]])
    for _ in range(20):
        index.search(rng.choices(vocabulary, k=3), 10)
    assert _postings_held(index) == (index._posted, index._arrayed)


# -- engram bench tenants ------------------------------------------------------------------


@pytest.fixture
def runner() -> Iterator[CliRunner]:
    yield CliRunner(env={"ENGRAM_DB": None})


def test_engram_bench_tenants_smoke(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "tenants.json"
    args = ["bench", "tenants", "--tenants", "6", "--memories", "3", "--every", "3"]
    result = runner.invoke(app, [*args, "--cache-bytes", "40000", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report == json.loads(out.read_text(encoding="utf-8"))
    assert (report["benchmark"], report["store"], report["cache_bytes"]) == (
        "tenants",
        "sqlite",
        40_000,
    )
    assert [p["tenants"] for p in report["curve"]] == [3, 6]
    last = report["curve"][-1]
    assert last["evictions"] == report["evictions"] > 0
    assert last["cache_bytes"] <= 40_000 or last["cached_scopes"] == 1
    assert last["rss_bytes"] > 0 and report["warm_search_p50_ms"] > 0
    table = runner.invoke(app, [*args, "--cache-bytes", "40000"])
    assert table.exit_code == 0, table.output
    assert "RSS" in table.stdout and "evictions" in table.stdout
    bad = runner.invoke(app, [*args, "--cache-bytes", "-1"])
    assert bad.exit_code == 2 and "cache_bytes" in bad.output
    # Where keywords are ranked is a PostgreSQL setting: refused for SQLite, and checked.
    sqlite = runner.invoke(app, [*args, "--keyword-index", "process"])
    assert sqlite.exit_code == 2 and "PostgreSQL" in sqlite.output
    typo = runner.invoke(app, [*args, "--store", "embedded", "--keyword-index", "disk"])
    assert typo.exit_code == 2 and "keyword_index" in typo.output
