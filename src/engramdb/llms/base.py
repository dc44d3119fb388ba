"""The LLM port: what a chat model must offer, and what one call returns.

Messages are OpenAI-style dicts (``{"role": ..., "content": ...}``, where
``content`` may be a list of parts such as ``{"type": "text", ...}`` and
``{"type": "image_url", ...}``), whatever the provider: each implementation
converts them to its own wire format.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self, runtime_checkable

from engramdb.errors import MessagesError

__all__ = [
    "LLM",
    "STRUCTURED_MODES",
    "ClosingMixin",
    "Completion",
    "StructuredMode",
    "Usage",
    "UsageCounter",
    "check_messages",
    "schema_instruction",
    "with_system_instruction",
]

StructuredMode = Literal["json_schema", "json_object", "text"]
"""How a reply was asked to be JSON: a JSON schema response format, JSON mode,
or plain instructions in the prompt (also the mode of calls without a schema)."""

STRUCTURED_MODES: tuple[StructuredMode, ...] = ("json_schema", "json_object", "text")
"""Structured-output modes from the strongest guarantee to the weakest."""


@dataclass(frozen=True)
class Usage:
    """Tokens one call consumed, as the server reported them (zeros when it did not)."""

    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Completion:
    """The result of one successful LLM call."""

    text: str
    """The reply exactly as the model wrote it (possibly empty); never cleaned up."""
    usage: Usage
    model: str
    """The model that answered, as the server named it (else the configured one)."""
    latency_s: float
    """Wall-clock seconds of the whole call, retries and fallbacks included."""
    mode: StructuredMode
    """How JSON output was requested; ``"text"`` when no schema was given."""


@runtime_checkable
class LLM(Protocol):
    """A chat model. Implementations are thread-safe and usable from asyncio."""

    @property
    def model(self) -> str:
        """The configured model name."""
        ...

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Send ``messages`` and return the reply.

        With ``schema`` (a JSON schema) the model is asked for a JSON
        object of that shape by the strongest means the server supports;
        the text is still returned unparsed. ``temperature`` and
        ``max_tokens`` override the configured defaults for this call.
        """
        ...

    async def acomplete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Like :meth:`complete`, without blocking the event loop."""
        ...

    def close(self) -> None:
        """Release connections held for synchronous calls."""
        ...

    async def aclose(self) -> None:
        """Release all connections, those of asynchronous calls included."""
        ...


class ClosingMixin:
    """``with`` / ``async with`` for a client that has ``close()`` and ``aclose()``."""

    def close(self) -> None:
        """Release connections held for synchronous calls."""

    async def aclose(self) -> None:
        """Release every connection."""
        self.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class UsageCounter:
    """Running totals of an LLM instance's calls, safe to update from many threads.

    Read with :meth:`snapshot`, which the LLMs expose as ``stats()``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls = 0
        self._errors = 0
        self._requests = 0
        self._retries = 0
        self._fallbacks = 0
        self._prompt_tokens = 0
        self._completion_tokens = 0
        self._usage_missing = 0
        self._latency_s = 0.0

    def started(self) -> None:
        """Count a call that began."""
        with self._lock:
            self._calls += 1

    def request(self) -> None:
        """Count one request sent to the server (a call may send several)."""
        with self._lock:
            self._requests += 1

    def retried(self) -> None:
        """Count a retry after a transient failure."""
        with self._lock:
            self._retries += 1

    def fell_back(self) -> None:
        """Count a downgrade to a weaker structured-output mode."""
        with self._lock:
            self._fallbacks += 1

    def failed(self) -> None:
        """Count a call that raised."""
        with self._lock:
            self._errors += 1

    def succeeded(self, completion: Completion, *, usage_reported: bool) -> None:
        """Add a successful call's tokens and latency."""
        with self._lock:
            self._prompt_tokens += completion.usage.prompt_tokens
            self._completion_tokens += completion.usage.completion_tokens
            self._latency_s += completion.latency_s
            if not usage_reported:
                self._usage_missing += 1

    def snapshot(self) -> dict[str, int | float]:
        """Return the totals as a plain dict (a copy).

        Keys: ``calls`` (started), ``errors`` (calls that raised),
        ``requests`` (HTTP requests, retries and fallbacks included),
        ``retries``, ``fallbacks`` (structured-output downgrades),
        ``prompt_tokens``, ``completion_tokens``, ``total_tokens``,
        ``usage_missing`` (successful calls whose reply had no usage, so
        the token totals undercount) and ``latency_s`` (summed over
        successful calls).
        """
        with self._lock:
            return {
                "calls": self._calls,
                "errors": self._errors,
                "requests": self._requests,
                "retries": self._retries,
                "fallbacks": self._fallbacks,
                "prompt_tokens": self._prompt_tokens,
                "completion_tokens": self._completion_tokens,
                "total_tokens": self._prompt_tokens + self._completion_tokens,
                "usage_missing": self._usage_missing,
                "latency_s": self._latency_s,
            }


def check_messages(messages: object, *, vision: bool) -> list[dict[str, Any]]:
    """Validate OpenAI-style messages and return a shallow copy of the list.

    Each message must be a dict with a string ``role`` and a ``content``
    that is a string, ``None`` or a list of part dicts. Image parts are
    refused unless ``vision`` is on: a text-only model would reject them,
    or worse, silently ignore the picture.

    Raises:
        MessagesError: the messages have the wrong shape.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Iterable):
        raise MessagesError(
            f"messages must be a list of {{'role': ..., 'content': ...}} dicts, "
            f"got {type(messages).__name__}"
        )
    checked: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise MessagesError(f"message {i} must be a dict, got {type(message).__name__}")
        role = message.get("role")
        if not isinstance(role, str) or not role:
            raise MessagesError(f"message {i} needs a string 'role', got {role!r}")
        content = message.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                    raise MessagesError(
                        f"message {i} content part {j} must be a dict with a 'type'"
                    )
                if not vision and part["type"] in ("image_url", "image", "input_image"):
                    raise MessagesError(
                        f"message {i} contains an image, but this LLM is not configured "
                        "for images; set 'vision': true in the llm config if the model "
                        "accepts them, or send text only"
                    )
        elif content is not None and not isinstance(content, str):
            raise MessagesError(
                f"message {i} content must be a string, a list of parts or None, "
                f"got {type(content).__name__}"
            )
        checked.append(dict(message))
    if not checked:
        raise MessagesError("messages is empty; send at least one message")
    return checked


def schema_instruction(schema: Mapping[str, Any], schema_name: str) -> str:
    """Return the system instruction that carries a JSON schema in the prompt.

    Used when the server cannot take the schema as a response format, so
    the model must learn the shape from the prompt. It mentions JSON
    explicitly: OpenAI's JSON mode refuses prompts that do not.
    """
    rendered = json.dumps(schema, ensure_ascii=False, sort_keys=True, indent=1)
    return (
        f"Output format: reply with a single JSON object ({schema_name!s}) and nothing "
        "else: no explanation and no Markdown code fence. The object must be valid JSON "
        f"that conforms to this JSON Schema:\n{rendered}"
    )


def with_system_instruction(
    messages: list[dict[str, Any]], instruction: str
) -> list[dict[str, Any]]:
    """Return ``messages`` with ``instruction`` added to the leading system message.

    The instruction joins the first system message (or becomes one at the
    start) rather than trailing the conversation: many open-model chat
    templates served by vLLM or llama.cpp reject a system message anywhere
    but first, and a fixed prefix stays cacheable by the provider.
    ``messages`` itself is not modified.
    """
    out = list(messages)
    if out and out[0].get("role") == "system":
        first = dict(out[0])
        content = first.get("content")
        if isinstance(content, list):
            first["content"] = [*content, {"type": "text", "text": instruction}]
        elif isinstance(content, str) and content.strip():
            first["content"] = f"{content}\n\n{instruction}"
        else:
            first["content"] = instruction
        out[0] = first
    else:
        out.insert(0, {"role": "system", "content": instruction})
    return out
