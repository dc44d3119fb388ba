"""Small pure helpers shared by engramdb's HTTP clients.

Nothing here sends a request: these functions decide whether to retry and
how long to wait, read ``Retry-After``, and turn an error reply into a short
human-readable message without leaking credentials. The sync and async
clients call the same functions, so the policy exists once.
:class:`LoopClients` keeps async clients tied to the event loop they belong to.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import json
import math
import os
import random
import re
import ssl
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

import httpx

from engramdb.errors import ConfigError

__all__ = [
    "LoopClients",
    "RetryPolicy",
    "describe_body",
    "is_retryable_status",
    "parse_retry_after",
    "redact",
    "redact_url",
    "server_message",
    "shared_ssl_context",
    "snippet",
]

_C = TypeVar("_C")

_SNIPPET_CHARS = 300
_MIN_SECRET_CHARS = 4
_HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)
_HTML_TAG = re.compile(r"<[^>]+>")
_URL_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/@:]*:)[^/@]*@")


@functools.cache
def shared_ssl_context() -> ssl.SSLContext:
    """Return one TLS context (httpx's defaults) for all of engramdb's clients.

    Building one loads the whole CA bundle, 50-100 ms of CPU; sharing it
    (SSL contexts are thread-safe) keeps that cost from recurring for every
    client and every event loop.
    """
    return httpx.create_ssl_context()


def is_retryable_status(status: int) -> bool:
    """Return whether an HTTP status is worth retrying.

    408 (request timeout), 409 (lock conflict), 429 (rate limit) and server
    faults are usually transient. 501 and 505 say the server can never do
    this, so retrying them only wastes time.
    """
    return status in (408, 409, 429) or (status >= 500 and status not in (501, 505))


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """Return the wait in seconds a reply asks for, or ``None`` when it asks none.

    Reads ``retry-after-ms`` (sent by OpenAI, more precise) and then
    ``retry-after`` as seconds or as an HTTP date. ``headers`` must have
    lower-case names. ``now`` (a Unix time) is for tests.
    """
    millis = headers.get("retry-after-ms")
    if millis is not None:
        seconds = _non_negative(millis)
        if seconds is not None:
            return seconds / 1000.0
    value = headers.get("retry-after")
    if value is None:
        return None
    seconds = _non_negative(value)
    if seconds is not None:
        return seconds
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _non_negative(text: str) -> float | None:
    try:
        number = float(text.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) and number >= 0 else None


@dataclass(frozen=True)
class RetryPolicy:
    """When to retry a failed request and how long to wait first.

    Exponential backoff with jitter (so many clients rate limited together
    do not retry in lockstep), unless the server said how long to wait.
    """

    max_retries: int = 2
    """Retries after the first attempt."""
    backoff: float = 0.5
    """Delay before the first retry, in seconds; doubles each retry."""
    max_delay: float = 60.0
    """Longest wait; a server asking for longer is not retried at all."""

    def next_delay(
        self, attempt: int, retry_after: float | None = None, *, jitter: float | None = None
    ) -> float | None:
        """Return seconds to wait before retrying, or ``None`` to give up.

        Args:
            attempt: 0-based number of the attempt that just failed.
            retry_after: seconds the server asked for (``Retry-After``), if any.
            jitter: factor in ``[0.5, 1]`` applied to the computed backoff;
                random when not given (tests pass a fixed one).
        """
        if attempt >= self.max_retries:
            return None
        if retry_after is not None:
            # Retrying sooner than asked only earns another refusal, and waiting
            # minutes inside one call is worse than failing with a clear message.
            return retry_after if retry_after <= self.max_delay else None
        delay = min(self.max_delay, self.backoff * (2.0**attempt))
        return delay * (random.uniform(0.5, 1.0) if jitter is None else jitter)


def snippet(text: bytes | str, limit: int = _SNIPPET_CHARS) -> str:
    """Return ``text`` on one line, shortened to ``limit`` characters."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _looks_like_html(body: bytes) -> bool:
    head = body[:512].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html", b"<head", b"<body")) or (b"<html" in head)


def describe_body(body: bytes) -> str:
    """Describe a reply body that is not the JSON we wanted, for an error message.

    HTML (a proxy's or web UI's page) is summarised by its title rather
    than dumped; anything else is shown as a short snippet.
    """
    if not body.strip():
        return "an empty body"
    if _looks_like_html(body):
        text = body.decode("utf-8", "replace")
        match = _HTML_TITLE.search(text)
        title = match.group(1) if match else _HTML_TAG.sub(" ", text)
        return f"an HTML page ({snippet(title, 120)!r}), not JSON"
    return repr(snippet(body))


def server_message(body: bytes) -> str:
    """Pull the human-readable message out of an error reply, whatever its dialect."""
    try:
        data = json.loads(body)
    except ValueError:
        return describe_body(body)
    if isinstance(data, dict):
        # OpenAI / vLLM / Groq: {"error": {"message": ...}}; Ollama and
        # llama.cpp: {"error": "..."}; FastAPI-based servers: {"detail": ...}.
        error = data.get("error", data.get("detail", data.get("message")))
        if isinstance(error, dict) and "message" in error:
            return snippet(str(error["message"]))
        if error is not None:
            return snippet(str(error))
    return snippet(body)


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every occurrence of each secret in ``text`` with ``***``.

    Servers sometimes echo the key they rejected; very short "secrets"
    are skipped so that redaction cannot garble ordinary words.
    """
    for secret in secrets:
        if secret and len(secret) >= _MIN_SECRET_CHARS:
            text = text.replace(secret, "***")
    return text


def redact_url(url: str) -> str:
    """Return ``url`` with any password replaced (``https://user:***@host/...``)."""
    return _URL_PASSWORD.sub(r"\1***@", url)


class LoopClients(Generic[_C]):
    """One async client per running event loop, closed when that loop shuts down.

    An async HTTP client's pooled connections belong to the event loop that
    opened them: reused from another loop they fail, and left open when
    their loop ends they leak sockets. Each loop therefore gets its own
    client, and a small async generator parked on that loop closes it:
    ``asyncio.run()`` (like every well-behaved runner) finalises pending
    async generators before closing the loop, so the client is closed even
    if the caller never calls ``aclose``. Thread-safe.
    """

    def __init__(
        self, factory: Callable[[], _C], closer: Callable[[_C], Awaitable[object]]
    ) -> None:
        """Make clients with ``factory()``; close one with ``await closer(client)``."""
        self._factory = factory
        self._closer = closer
        self._lock = threading.Lock()
        self._clients: dict[asyncio.AbstractEventLoop, tuple[_C, AsyncGenerator[None, None]]] = {}

    async def get(self) -> _C:
        """Return the running loop's client, creating it on first use."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._clients.get(loop)
            if entry is not None:
                return entry[0]
            client = self._factory()
            keeper = self._keeper(loop, client)
            self._clients[loop] = (client, keeper)
        # Runs the generator up to its yield (no suspension), which registers
        # it with this loop's async-generator finaliser.
        await keeper.__anext__()
        return client

    async def aclose(self) -> None:
        """Close the running loop's client now (others close with their loops)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._clients.get(loop)
        if entry is not None:
            await entry[1].aclose()

    async def _keeper(
        self, loop: asyncio.AbstractEventLoop, client: _C
    ) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                if self._clients.get(loop, (None,))[0] is client:
                    del self._clients[loop]
            await self._closer(client)


def resolve_base_url(
    kind: str,
    provider: str,
    given: Mapping[str, object],
    *,
    default: str | None,
    env_allowed: bool,
) -> str:
    """The base URL of an OpenAI-compatible server, from config, env or the default.

    ``kind`` ("llm" or "embedder") names the config section in messages;
    ``given`` maps option names (``base_url``, ``openai_base_url``, …) to
    values, ``None`` for unset; ``OPENAI_BASE_URL`` is read only when
    ``env_allowed`` (never for local servers, which must not receive an
    OpenAI setting meant for another provider).
    """
    named = {key: value for key, value in given.items() if value is not None}
    for key, value in named.items():
        if not isinstance(value, str) or not value.strip():
            raise ConfigError(f"{kind} option {key!r} must be a URL string, got {value!r}")
    if len({str(v).strip().rstrip("/") for v in named.values()}) > 1:
        raise ConfigError(
            f"conflicting {kind} base URLs: "
            + ", ".join(f"{key}={value!r}" for key, value in named.items())
            + "; set only one"
        )
    url = str(next(iter(named.values()))) if named else None
    if url is None and env_allowed:
        url = os.environ.get("OPENAI_BASE_URL") or None
    if url is None:
        url = default
    if url is None:
        raise ConfigError(
            f"{kind} provider {provider!r} needs base_url (the server's /v1 root, e.g. "
            "http://localhost:8000/v1) or the OPENAI_BASE_URL environment variable"
        )
    url = url.strip().rstrip("/")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"{kind} base_url {url!r} is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ConfigError(f"{kind} base_url {url!r} must be an http:// or https:// URL with a host")
    # mem0's ollama_base_url is the bare server address (its Ollama client adds
    # paths itself); the OpenAI-compatible API lives under /v1.
    if provider == "ollama" and parsed.path in ("", "/"):
        url += "/v1"
    return url
