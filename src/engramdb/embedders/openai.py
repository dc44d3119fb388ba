"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint.

Works with OpenAI itself and with local servers that speak the same wire
format: Ollama, vLLM, LM Studio. The request building, reply parsing and
retry policy are small pure functions, so an async client can reuse them;
:class:`OpenAIEmbedder` only adds a synchronous ``httpx`` transport.

Dimension: when ``embedding_dims`` is not configured, the dimension is learnt
from the first reply, so the first access to :attr:`OpenAIEmbedder.dim`
before any embed sends one probe request (embedding a short fixed string).
"""

from __future__ import annotations

import json
import math
import os
import random
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import httpx
import numpy as np

from engramdb._http import resolve_base_url
from engramdb.embedders.base import Vector, Vectors
from engramdb.errors import ConfigError, EmbedderError

__all__ = [
    "DEFAULT_BASE_URLS",
    "DEFAULT_MODELS",
    "OPENAI_FAMILY",
    "OpenAIEmbedder",
    "backoff_delay",
    "build_headers",
    "build_payload",
    "describe_http_error",
    "encode_payload",
    "is_retryable_status",
    "parse_embeddings",
]

OPENAI_BASE_URL = "https://api.openai.com/v1"

DEFAULT_BASE_URLS: dict[str, str | None] = {
    "openai": OPENAI_BASE_URL,
    "ollama": "http://localhost:11434/v1",
    "vllm": "http://localhost:8000/v1",
    "lmstudio": "http://localhost:1234/v1",
    # A generic server has no address we could guess.
    "openai_compatible": None,
}
"""Base URL used by each provider name when none is configured."""

OPENAI_FAMILY = tuple(DEFAULT_BASE_URLS)
"""Provider names served by :class:`OpenAIEmbedder`."""

DEFAULT_MODELS: dict[str, str] = {
    "openai": "text-embedding-3-small",
    "ollama": "nomic-embed-text",
}
"""Model used when none is configured (the same defaults as mem0)."""

# Only these read OPENAI_API_KEY / OPENAI_BASE_URL: a local Ollama, vLLM or
# LM Studio server should neither receive the user's OpenAI key nor be
# redirected by a variable meant for the OpenAI client.
_ENV_PROVIDERS = frozenset({"openai", "openai_compatible"})

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 3
DEFAULT_BATCH_SIZE = 128
DEFAULT_RETRY_BACKOFF = 0.5
MAX_RETRY_DELAY = 30.0

_PROBE_TEXT = "dimension probe"
_ERROR_SNIPPET = 300


# ------------------------------------------------------- pure functions


def _clean(text: str) -> str:
    # OpenAI rejects an empty input string, and a lone surrogate cannot be
    # encoded as UTF-8 at all; neither carries meaning worth an error.
    if not text:
        return " "
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def build_payload(
    texts: Sequence[str], model: str, dimensions: int | None = None
) -> dict[str, Any]:
    """Return the JSON body of one embeddings request.

    ``dimensions`` is included only when given: most servers other than
    OpenAI reject or ignore it.
    """
    payload: dict[str, Any] = {"model": model, "input": [_clean(t) for t in texts]}
    if dimensions is not None:
        payload["dimensions"] = dimensions
    return payload


def encode_payload(payload: Mapping[str, Any]) -> bytes:
    """Serialise a request body to UTF-8 JSON bytes."""
    return json.dumps(payload, ensure_ascii=False, allow_nan=False).encode("utf-8")


def build_headers(api_key: str | None) -> dict[str, str]:
    """Return the request headers; ``Authorization`` only when a key is set."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


def _snippet(body: bytes | str) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text if len(text) <= _ERROR_SNIPPET else text[:_ERROR_SNIPPET] + "..."


def _server_message(body: bytes) -> str:
    """Pull the human-readable message out of an error reply, whatever its dialect."""
    try:
        data = json.loads(body)
    except ValueError:
        return _snippet(body)
    if isinstance(data, dict):
        # OpenAI / vLLM: {"error": {"message": ...}}; Ollama: {"error": "..."};
        # FastAPI-based servers: {"detail": ...}.
        error = data.get("error", data.get("detail"))
        if isinstance(error, dict) and "message" in error:
            return _snippet(str(error["message"]))
        if error is not None:
            return _snippet(str(error))
    return _snippet(body)


def is_retryable_status(status: int) -> bool:
    """Return whether an HTTP status is worth retrying (rate limits, server faults)."""
    return status in (408, 429) or status >= 500


def describe_http_error(status: int, body: bytes, model: str) -> str:
    """Return an error message for a non-2xx reply: what happened and what to do."""
    detail = _server_message(body)
    if status in (401, 403):
        advice = "check api_key (or the OPENAI_API_KEY environment variable)"
    elif status == 404:
        advice = (
            f"check base_url (it normally ends in /v1) and that model {model!r} exists "
            f"on the server (for Ollama: `ollama pull {model}`)"
        )
    elif status == 413:
        advice = "the request is too large; lower batch_size"
    elif status == 429:
        advice = "the server is rate limiting; lower batch_size, raise max_retries or wait"
    elif status >= 500:
        advice = "the server failed; check its logs, or raise max_retries if it is transient"
    else:
        advice = (
            "the server rejected the request; check the model name and, if set, "
            "embedding_dims (not every model supports it)"
        )
    return f"HTTP {status}: {detail or '(empty body)'}; {advice}"


def backoff_delay(attempt: int, base: float, retry_after: str | None = None) -> float:
    """Return seconds to wait before retry number ``attempt + 1``.

    A numeric ``Retry-After`` header from the server wins; otherwise the
    delay doubles each attempt, with jitter so that many clients rate
    limited together do not retry in lockstep. Capped at 30 s.
    """
    if retry_after is not None:
        try:
            seconds = float(retry_after)
        except ValueError:
            seconds = math.nan
        if math.isfinite(seconds) and seconds >= 0:
            return min(seconds, MAX_RETRY_DELAY)
    delay = min(MAX_RETRY_DELAY, base * (2.0**attempt))
    return delay * random.uniform(0.5, 1.0)


def _is_number(value: object) -> bool:
    # type() rather than isinstance(): JSON true/false arrive as bool, a
    # subclass of int, and must not pass as 1.0 / 0.0.
    return type(value) is float or type(value) is int


def parse_embeddings(body: bytes, expected: int) -> Vectors:
    """Validate an embeddings reply and return its vectors in input order.

    Checks that the reply is JSON with a ``data`` list of ``expected`` items,
    each with an ``embedding`` of numbers of one common length and (when
    present) a distinct ``index`` in ``range(expected)``. Rows are returned
    ordered by ``index`` and L2-normalised. Any violation raises
    :class:`EmbedderError` naming it.
    """
    try:
        data = json.loads(body)
    except ValueError:
        raise EmbedderError(
            f"the embeddings server replied with malformed JSON: {_snippet(body)!r}; "
            "check that base_url points at an OpenAI-compatible /v1 endpoint"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        if isinstance(data, dict) and "error" in data:
            raise EmbedderError(f"the embeddings server returned an error: {_server_message(body)}")
        raise EmbedderError(
            "the embeddings reply has no 'data' list; check that base_url points at an "
            f"OpenAI-compatible /v1 endpoint (reply: {_snippet(body)!r})"
        )
    items: list[Any] = data["data"]
    if len(items) != expected:
        raise EmbedderError(
            f"asked the embeddings server for {expected} embeddings, got {len(items)}; "
            "the server may truncate batches: lower batch_size"
        )
    if expected == 0:
        return np.empty((0, 0), dtype=np.float32)

    indexed = [isinstance(item, dict) and "index" in item for item in items]
    if any(indexed) and not all(indexed):
        raise EmbedderError("the embeddings reply gives an 'index' for some items but not all")
    order: list[int] = []
    seen: set[int] = set()
    dim: int | None = None
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise EmbedderError(f"embeddings reply item {position} is not an object")
        vector = item.get("embedding")
        if not isinstance(vector, list) or not all(_is_number(x) for x in vector):
            raise EmbedderError(
                f"embeddings reply item {position} has no 'embedding' list of numbers "
                f"(got {type(vector).__name__})"
            )
        if not vector:
            raise EmbedderError(f"embeddings reply item {position} has an empty embedding")
        if dim is None:
            dim = len(vector)
        elif len(vector) != dim:
            raise EmbedderError(
                f"embeddings reply mixes dimensions: item 0 has {dim} numbers, "
                f"item {position} has {len(vector)}"
            )
        if indexed[0]:
            index = item["index"]
            if type(index) is not int or not 0 <= index < expected or index in seen:
                raise EmbedderError(
                    f"embeddings reply item {position} has index {index!r}; expected "
                    f"each of 0..{expected - 1} exactly once"
                )
            seen.add(index)
            order.append(index)
        else:
            order.append(position)

    rows = np.empty((expected, dim or 0), dtype=np.float32)
    # Numbers beyond float32 become inf here and are rejected just below.
    with np.errstate(over="ignore"):
        try:
            for item, index in zip(items, order, strict=True):
                rows[index] = np.asarray(item["embedding"], dtype=np.float64)
        except OverflowError:
            raise EmbedderError("the embeddings server returned a number out of range") from None
    return _unit_rows(rows)


def _unit_rows(rows: Vectors) -> Vectors:
    if not np.isfinite(rows).all():
        raise EmbedderError("the embeddings server returned non-finite numbers (NaN or inf)")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    if (norms == 0).any():
        raise EmbedderError("the embeddings server returned an all-zero vector")
    rows /= norms
    return np.ascontiguousarray(rows, dtype=np.float32)


# ---------------------------------------------------------- configuration


def _resolve_base_url(provider: str, candidates: Mapping[str, str | None]) -> str:
    return resolve_base_url(
        "embedder",
        provider,
        candidates,
        default=DEFAULT_BASE_URLS[provider],
        env_allowed=provider in _ENV_PROVIDERS,
    )


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"embedder option {name!r} must be a positive integer, got {value!r}")
    return value


def _positive_number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigError(f"embedder option {name!r} must be a positive number, got {value!r}")
    return float(value)


# --------------------------------------------------------------- client


class OpenAIEmbedder:
    """Embedder for an OpenAI-compatible ``/v1/embeddings`` endpoint.

    Retries (up to ``max_retries`` times, with exponential backoff) on
    timeouts, connection errors, HTTP 408, 429 and 5xx; other HTTP errors
    and malformed replies raise :class:`EmbedderError` at once. Vectors are
    reordered by the reply's ``index`` and L2-normalised. Thread-safe.
    Use as a context manager, or call :meth:`close`, to release connections.
    """

    CONFIG_KEYS = (
        "api_key",
        "base_url",
        "batch_size",
        "embedding_dims",
        "max_retries",
        "model",
        "ollama_base_url",
        "openai_base_url",
        "timeout",
    )
    """Config keys accepted by :func:`engramdb.embedders.make_embedder`."""

    def __init__(
        self,
        model: str | None = None,
        *,
        provider: str = "openai",
        api_key: str | None = None,
        base_url: str | None = None,
        openai_base_url: str | None = None,
        ollama_base_url: str | None = None,
        embedding_dims: int | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        batch_size: int = DEFAULT_BATCH_SIZE,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
    ) -> None:
        """Configure the client; no request is sent until the first embed.

        Args:
            model: model name on the server; defaults to
                ``text-embedding-3-small`` (openai) or ``nomic-embed-text``
                (ollama), required for other providers.
            provider: one of :data:`OPENAI_FAMILY`; picks the default
                ``base_url`` and whether ``dimensions`` is sent.
            api_key: bearer token; for ``openai`` and ``openai_compatible``
                defaults to ``OPENAI_API_KEY``.
            base_url: the ``/v1`` root. For ``openai`` and
                ``openai_compatible`` defaults to ``OPENAI_BASE_URL``.
            openai_base_url: mem0's name for ``base_url``.
            ollama_base_url: mem0's name for ``base_url``; a bare
                ``http://host:11434`` gets ``/v1`` appended.
            embedding_dims: the vector length; sent as ``dimensions`` to
                OpenAI, checked against every reply for all providers.
            timeout: seconds per HTTP request.
            max_retries: retries after the first attempt.
            batch_size: texts per request.
            retry_backoff: first retry delay in seconds; doubles each retry.
        """
        if provider not in DEFAULT_BASE_URLS:
            raise ConfigError(
                f"OpenAIEmbedder provider must be one of {', '.join(OPENAI_FAMILY)}, "
                f"got {provider!r}"
            )
        model = model if model is not None else DEFAULT_MODELS.get(provider)
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(
                f"embedder provider {provider!r} needs 'model' (the embedding model's "
                f"name on the server), got {model!r}"
            )
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigError("embedder option 'api_key' must be a string")
        if api_key is None and provider in _ENV_PROVIDERS:
            api_key = os.environ.get("OPENAI_API_KEY") or None
        self._base_url = _resolve_base_url(
            provider,
            {
                "base_url": base_url,
                "openai_base_url": openai_base_url,
                "ollama_base_url": ollama_base_url,
            },
        )
        if api_key is None and httpx.URL(self._base_url).host == "api.openai.com":
            raise ConfigError(
                "the OpenAI embedder needs an API key: set api_key in the embedder "
                "config or the OPENAI_API_KEY environment variable"
            )
        if embedding_dims is not None:
            _positive_int("embedding_dims", embedding_dims)
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
            raise ConfigError(
                f"embedder option 'max_retries' must be an integer >= 0, got {max_retries!r}"
            )
        if (
            isinstance(retry_backoff, bool)
            or not isinstance(retry_backoff, int | float)
            or retry_backoff < 0
        ):
            raise ConfigError(f"retry_backoff must be a number >= 0, got {retry_backoff!r}")

        self._provider = provider
        self._model_name = model.strip()
        self._api_key = api_key
        self._timeout = _positive_number("timeout", timeout)
        self._max_retries = max_retries
        self._batch_size = _positive_int("batch_size", batch_size)
        self._retry_backoff = float(retry_backoff)
        # OpenAI is the one server known to accept "dimensions" (and shorten
        # the vectors accordingly); others may reject the request for it.
        self._send_dimensions = embedding_dims if provider == "openai" else None
        self._dim: int | None = embedding_dims
        self._dims_configured = embedding_dims is not None
        self._url = self._base_url + "/embeddings"
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self._dim_lock = threading.Lock()
        self._probe_lock = threading.Lock()

    @classmethod
    def from_config(cls, provider: str, config: Mapping[str, Any]) -> OpenAIEmbedder:
        """Build from an embedder config dict (keys as in :attr:`CONFIG_KEYS`)."""
        return cls(provider=provider, **dict(config))

    @property
    def model(self) -> str:
        """``openai-compatible/<model name>``."""
        return f"openai-compatible/{self._model_name}"

    @property
    def base_url(self) -> str:
        """The resolved ``/v1`` root requests go to."""
        return self._base_url

    @property
    def dim(self) -> int:
        """Vector length: from ``embedding_dims``, else learnt (one probe request if needed)."""
        if self._dim is None:
            with self._probe_lock:
                if self._dim is None:
                    self._embed([_PROBE_TEXT])
        assert self._dim is not None
        return self._dim

    def embed_documents(self, texts: list[str]) -> Vectors:
        """Embed texts to store: an ``(n, dim)`` float32 array of unit rows."""
        if isinstance(texts, str):
            raise TypeError(
                "embed_documents() takes a list of strings, not one string; "
                "wrap it in a list or use embed_query()"
            )
        items = list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(
                    f"embed_documents() takes strings; item {i} is {type(text).__name__}"
                )
        if not items:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._embed(items)

    def embed_query(self, text: str) -> Vector:
        """Embed a search query: a ``(dim,)`` float32 unit vector."""
        if not isinstance(text, str):
            raise TypeError(f"embed_query() takes a string, got {type(text).__name__}")
        vector: Vector = self._embed([text])[0]
        return vector

    def close(self) -> None:
        """Close the HTTP connections; a later embed opens new ones."""
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def __enter__(self) -> OpenAIEmbedder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"OpenAIEmbedder(provider={self._provider!r}, model={self._model_name!r}, "
            f"base_url={self._base_url!r})"
        )

    # -------------------------------------------------------- internals

    def _http(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(
                    timeout=self._timeout, headers=build_headers(self._api_key)
                )
            return self._client

    def _embed(self, texts: list[str]) -> Vectors:
        parts = [
            self._request(texts[start : start + self._batch_size])
            for start in range(0, len(texts), self._batch_size)
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _accept_dim(self, dim: int) -> None:
        with self._dim_lock:
            if self._dim is None:
                self._dim = dim
                return
            expected = self._dim
        if dim != expected:
            if self._dims_configured:
                raise EmbedderError(
                    f"the embeddings server returned {dim}-dimensional vectors but "
                    f"embedding_dims is {expected}; set embedding_dims to {dim} or remove it"
                )
            raise EmbedderError(
                f"the embeddings server returned {dim}-dimensional vectors, earlier "
                f"{expected}: the model behind {self._base_url} changed; vectors of "
                "different models cannot be mixed"
            )

    def _request(self, texts: list[str]) -> Vectors:
        body = encode_payload(build_payload(texts, self._model_name, self._send_dimensions))
        client = self._http()
        attempts = self._max_retries + 1
        last_error = ""
        for attempt in range(attempts):
            retry_after: str | None = None
            try:
                response = client.post(self._url, content=body)
            except httpx.TimeoutException:
                last_error = f"no reply within timeout={self._timeout:g} s"
            except httpx.TransportError as exc:
                last_error = f"connection failed ({type(exc).__name__}: {exc})"
            else:
                if response.is_success:
                    vectors = parse_embeddings(response.content, len(texts))
                    self._accept_dim(vectors.shape[1])
                    return vectors
                message = describe_http_error(
                    response.status_code, response.content, self._model_name
                )
                if not is_retryable_status(response.status_code):
                    raise EmbedderError(f"POST {self._url} failed: {message}")
                last_error = message
                retry_after = response.headers.get("retry-after")
            if attempt + 1 < attempts:
                time.sleep(backoff_delay(attempt, self._retry_backoff, retry_after))
        raise EmbedderError(
            f"POST {self._url} failed after {attempts} attempt(s): {last_error}. "
            "Check that the server is running and reachable; raise max_retries or "
            "timeout if it is only slow"
        )
