"""Claude through Anthropic's Messages API, using the optional ``anthropic`` package.

Install with ``pip install 'engramdb[anthropic]'``. The package is imported
when an :class:`AnthropicLLM` is built, never when engramdb is imported.

Conversion from OpenAI-style messages and reading of the reply are pure
functions (tested without the SDK); the SDK only moves bytes and does the
retries, honouring ``Retry-After``. A schema is conveyed by forcing a tool
call whose input schema is the schema: Claude then answers with an object
of that shape, returned as JSON text (mode ``"json_schema"``).
"""

from __future__ import annotations

import importlib
import json
import os
import re
import threading
import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from engramdb._http import LoopClients, redact, redact_url, snippet
from engramdb.errors import (
    ConfigError,
    LLMConnectionError,
    LLMError,
    LLMRefusalError,
    LLMResponseError,
    LLMTimeoutError,
    MessagesError,
)
from engramdb.llms._options import headers_option, optional_int, optional_number, secrets_of
from engramdb.llms.base import (
    ClosingMixin,
    Completion,
    StructuredMode,
    Usage,
    UsageCounter,
    check_messages,
    schema_instruction,
    with_system_instruction,
)
from engramdb.llms.wire import ParsedReply, http_error

__all__ = [
    "ANTHROPIC_EXTRA",
    "AnthropicLLM",
    "build_anthropic_request",
    "parse_anthropic_message",
    "to_anthropic_messages",
]

ANTHROPIC_EXTRA = "anthropic"
"""The pip extra that installs the ``anthropic`` package."""

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_MAX_TOKENS = 4096
DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 2

_DATA_URL = re.compile(r"^data:(?P<media>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.DOTALL)
_TOOL_NAME_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]+")


def _load_sdk() -> ModuleType:
    try:
        return importlib.import_module("anthropic")
    except ImportError:
        raise ConfigError(
            "the anthropic LLM needs the 'anthropic' package, which is not installed: "
            f"pip install 'engramdb[{ANTHROPIC_EXTRA}]'"
        ) from None


# ------------------------------------------------------- pure functions


def _image_block(part: Mapping[str, Any], where: str) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, Mapping) else image
    if not isinstance(url, str) or not url:
        raise MessagesError(f"{where}: an image_url part needs {{'image_url': {{'url': ...}}}}")
    match = _DATA_URL.match(url)
    if match:
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": match["media"], "data": match["data"]},
        }
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(content: object, where: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        kind = part.get("type")
        if kind == "text":
            if part.get("text"):
                blocks.append({"type": "text", "text": str(part["text"])})
        elif kind == "image_url":
            blocks.append(_image_block(part, where))
        else:
            raise MessagesError(
                f"{where}: content part type {kind!r} cannot be sent to Anthropic; "
                "use 'text' or 'image_url'"
            )
    return blocks


def to_anthropic_messages(
    messages: list[dict[str, Any]],
) -> tuple[str | None, list[dict[str, Any]]]:
    """Convert OpenAI-style messages to Anthropic's ``(system, messages)``.

    System (and ``developer``) messages join the top-level system prompt;
    other roles than ``assistant`` are sent as ``user``. Consecutive
    messages of one role are merged, since the API wants turns to alternate.
    """
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        role = message["role"]
        where = f"message {i}"
        if role in ("system", "developer"):
            text = "".join(
                block["text"]
                for block in _blocks(message.get("content"), where)
                if block["type"] == "text"
            )
            if text:
                system.append(text)
            continue
        role = "assistant" if role == "assistant" else "user"
        blocks = _blocks(message.get("content"), where)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return ("\n\n".join(system) or None), turns


def _tool_name(name: str) -> str:
    return _TOOL_NAME_BAD_CHARS.sub("_", name)[:64] or "response"


def build_anthropic_request(
    messages: list[dict[str, Any]],
    *,
    model: str,
    mode: StructuredMode,
    schema: Mapping[str, Any] | None = None,
    schema_name: str = "response",
    temperature: float | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    top_p: float | None = None,
) -> dict[str, Any]:
    """Return the keyword arguments of one ``messages.create`` call.

    With a schema in ``"json_schema"`` mode the model is made to call one
    tool whose input schema is ``schema``; in ``"text"`` mode the schema is
    written into the system prompt instead.
    """
    if schema is not None and mode != "json_schema":
        messages = with_system_instruction(messages, schema_instruction(schema, schema_name))
    system, turns = to_anthropic_messages(messages)
    if not turns:
        raise MessagesError("Anthropic needs at least one user or assistant message")
    request: dict[str, Any] = {"model": model, "messages": turns, "max_tokens": max_tokens}
    if system:
        request["system"] = system
    if schema is not None and mode == "json_schema":
        name = _tool_name(schema_name)
        request["tools"] = [
            {
                "name": name,
                "description": "Give the answer as this tool's input, in the required shape.",
                "input_schema": dict(schema),
            }
        ]
        request["tool_choice"] = {"type": "tool", "name": name}
    if temperature is not None:
        request["temperature"] = temperature
    if top_p is not None:
        request["top_p"] = top_p
    return request


def _tokens(value: object) -> int:
    return value if type(value) is int and value >= 0 else 0


def parse_anthropic_message(
    data: Mapping[str, Any], *, url: str, model: str, tool_name: str | None = None
) -> ParsedReply:
    """Read a Messages API reply (as a dict).

    The text is the forced tool's input as JSON when ``tool_name`` is given
    and the model called it, else the text blocks joined. Prompt tokens
    include cache reads and writes, so totals match what is billed.

    Raises:
        LLMRefusalError: the model stopped with ``stop_reason: refusal``.
        LLMResponseError: the reply has no content list.
    """
    where = f"POST {redact_url(url)} (model {model!r})"
    content = data.get("content")
    if not isinstance(content, list):
        raise LLMResponseError(
            f"{where} returned a reply without a content list: {snippet(str(data))!r}",
            url=redact_url(url),
            model=model,
        )
    text: str | None = None
    if tool_name is not None:
        for block in content:
            if (
                isinstance(block, Mapping)
                and block.get("type") == "tool_use"
                and block.get("name") == tool_name
            ):
                text = json.dumps(block.get("input"), ensure_ascii=False)
                break
    if text is None:
        text = "".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, Mapping) and block.get("type") == "text"
        )
    if data.get("stop_reason") == "refusal" and not text:
        raise LLMRefusalError(f"{where}: the model refused to answer", url=url, model=model)
    raw_usage = data.get("usage")
    reported = isinstance(raw_usage, Mapping) and (
        "input_tokens" in raw_usage or "output_tokens" in raw_usage
    )
    usage_map: Mapping[str, Any] = raw_usage if isinstance(raw_usage, Mapping) else {}
    usage = Usage(
        _tokens(usage_map.get("input_tokens"))
        + _tokens(usage_map.get("cache_creation_input_tokens"))
        + _tokens(usage_map.get("cache_read_input_tokens")),
        _tokens(usage_map.get("output_tokens")),
    )
    answered_by = data.get("model")
    stop = data.get("stop_reason")
    return ParsedReply(
        text=text,
        usage=usage,
        usage_reported=reported,
        model=answered_by if isinstance(answered_by, str) and answered_by else None,
        # Anthropic's "max_tokens" is OpenAI's "length".
        finish_reason="length"
        if stop == "max_tokens"
        else (stop if isinstance(stop, str) else None),
    )


# --------------------------------------------------------------- client


class AnthropicLLM(ClosingMixin):
    """Claude models through the ``anthropic`` SDK (the ``anthropic`` extra).

    Thread-safe and usable from asyncio. Structured output uses a forced
    tool call (``structured_output`` ``"auto"`` or ``"json_schema"``) or
    prompt instructions (``"text"``); Anthropic has no JSON mode, so
    ``"json_object"`` is refused. Retries (timeouts, 408/409/429/5xx,
    ``Retry-After``) are the SDK's; ``stats()["requests"]`` therefore
    counts calls, not the SDK's retries.
    """

    CONFIG_KEYS: tuple[str, ...] = (
        "anthropic_base_url",
        "api_key",
        "base_url",
        "enable_vision",
        "headers",
        "max_retries",
        "max_tokens",
        "model",
        "structured_output",
        "temperature",
        "timeout",
        "top_p",
        "vision",
    )
    """Config keys accepted by :func:`engramdb.llms.make_llm` for ``anthropic``."""

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        anthropic_base_url: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_p: float | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        structured_output: str = "auto",
        vision: bool = False,
        enable_vision: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Check the configuration and import the SDK; nothing is sent yet.

        Args:
            model: Claude model name (required, e.g. ``claude-sonnet-4-5``).
            api_key: defaults to ``ANTHROPIC_API_KEY``.
            base_url: API root; defaults to Anthropic's.
            anthropic_base_url: another name for ``base_url``.
            temperature: default sampling temperature (0 to 1).
            max_tokens: default reply cap (the API requires one; 4096 if unset).
            top_p: nucleus sampling.
            timeout: seconds per request.
            max_retries: retries after the first attempt (done by the SDK).
            structured_output: ``"auto"``, ``"json_schema"`` or ``"text"``.
            vision: whether messages may carry images.
            enable_vision: mem0's name for ``vision``.
            headers: extra HTTP headers.

        Raises:
            ConfigError: a bad option, no API key, or the SDK is not installed.
        """
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(
                "llm provider 'anthropic' needs 'model' (e.g. ENGRAM_LLM=anthropic:MODEL), "
                f"got {model!r}"
            )
        if base_url and anthropic_base_url and base_url != anthropic_base_url:
            raise ConfigError("conflicting llm base URLs: set base_url or anthropic_base_url")
        url = base_url or anthropic_base_url
        if url is not None and (
            not isinstance(url, str) or not url.startswith(("http://", "https://"))
        ):
            raise ConfigError(f"llm base_url must be an http:// or https:// URL, got {url!r}")
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigError("llm option 'api_key' must be a string")
        api_key = api_key or os.environ.get("ANTHROPIC_API_KEY") or None
        if api_key is None and url is None:
            raise ConfigError(
                "the anthropic LLM needs an API key: set api_key in the llm config or the "
                "ANTHROPIC_API_KEY environment variable"
            )
        if structured_output not in ("auto", "json_schema", "text"):
            raise ConfigError(
                "llm option 'structured_output' for anthropic must be auto, json_schema or "
                f"text (Anthropic has no JSON mode), got {structured_output!r}"
            )
        if enable_vision is not None:
            vision = enable_vision
        if not isinstance(vision, bool):
            raise ConfigError(f"llm option 'vision' must be true or false, got {vision!r}")
        self._temperature = optional_number("temperature", temperature, 0.0, 1.0)
        self._top_p = optional_number("top_p", top_p, 0.0, 1.0)
        self._max_tokens = optional_int("max_tokens", max_tokens, 1) or DEFAULT_MAX_TOKENS
        retries = optional_int("max_retries", max_retries, 0)
        self._max_retries = DEFAULT_MAX_RETRIES if retries is None else retries
        timeout_s = optional_number("timeout", timeout, 0.0, None)
        if not timeout_s:
            raise ConfigError(f"llm option 'timeout' must be a positive number, got {timeout!r}")
        self._timeout = timeout_s
        self._headers = headers_option(headers)
        # Last, so that configuration mistakes are reported even without the SDK.
        self._sdk = _load_sdk()

        self._model_name = model.strip()
        self._api_key = api_key
        self._base_url = (url or ANTHROPIC_BASE_URL).rstrip("/")
        self._url = self._base_url + "/v1/messages"
        self._mode: StructuredMode = "text" if structured_output == "text" else "json_schema"
        self._vision = vision
        self._secrets = secrets_of(api_key, self._headers)
        self._counter = UsageCounter()
        self._client: Any = None
        self._lock = threading.Lock()
        self._aclients: LoopClients[Any] = LoopClients(self._new_async_client, _close_client)

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AnthropicLLM:
        """Build from an llm config dict (keys as in :attr:`CONFIG_KEYS`)."""
        return cls(**dict(config))

    @property
    def model(self) -> str:
        """The configured model name."""
        return self._model_name

    @property
    def base_url(self) -> str:
        """The API root requests go to."""
        return self._base_url

    @property
    def vision(self) -> bool:
        """Whether messages may carry images."""
        return self._vision

    def stats(self) -> dict[str, int | float]:
        """Return running totals of this instance's calls (see ``UsageCounter.snapshot``)."""
        return self._counter.snapshot()

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Send ``messages`` and return the reply; see :class:`~engramdb.llms.LLM`."""
        request, mode, tool = self._request(messages, schema, schema_name, temperature, max_tokens)
        started = time.monotonic()
        self._counter.started()
        self._counter.request()
        try:
            message = self._sync_client().messages.create(**request)
            return self._finish(message, mode, tool, started)
        except Exception as exc:
            self._counter.failed()
            translated = self._translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    async def acomplete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Like :meth:`complete`, awaiting the network instead of blocking."""
        request, mode, tool = self._request(messages, schema, schema_name, temperature, max_tokens)
        started = time.monotonic()
        self._counter.started()
        self._counter.request()
        try:
            client = await self._aclients.get()
            message = await client.messages.create(**request)
            return self._finish(message, mode, tool, started)
        except Exception as exc:
            self._counter.failed()
            translated = self._translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    def close(self) -> None:
        """Close the connections of synchronous calls."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close the running loop's async connections and the sync ones."""
        await self._aclients.aclose()
        self.close()

    def __repr__(self) -> str:
        return f"AnthropicLLM(model={self._model_name!r}, base_url={self._base_url!r})"

    # -------------------------------------------------------- internals

    def _client_kwargs(self) -> dict[str, Any]:
        return {
            "api_key": self._api_key or "none",
            "base_url": self._base_url,
            "timeout": self._timeout,
            "max_retries": self._max_retries,
            "default_headers": self._headers or None,
        }

    def _sync_client(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._sdk.Anthropic(**self._client_kwargs())
            return self._client

    def _new_async_client(self) -> Any:
        return self._sdk.AsyncAnthropic(**self._client_kwargs())

    def _request(
        self,
        messages: list[dict[str, Any]],
        schema: dict[str, Any] | None,
        schema_name: str,
        temperature: float | None,
        max_tokens: int | None,
    ) -> tuple[dict[str, Any], StructuredMode, str | None]:
        checked = check_messages(messages, vision=self._vision)
        mode: StructuredMode = self._mode if schema is not None else "text"
        request = build_anthropic_request(
            checked,
            model=self._model_name,
            mode=mode,
            schema=schema,
            schema_name=schema_name,
            temperature=self._temperature if temperature is None else temperature,
            max_tokens=self._max_tokens if max_tokens is None else max_tokens,
            top_p=self._top_p,
        )
        tool = request["tool_choice"]["name"] if "tool_choice" in request else None
        return request, mode, tool

    def _finish(
        self, message: Any, mode: StructuredMode, tool: str | None, started: float
    ) -> Completion:
        data = message.model_dump() if hasattr(message, "model_dump") else message
        if not isinstance(data, Mapping):
            raise LLMResponseError(
                f"POST {self._url} (model {self._model_name!r}) returned "
                f"{type(message).__name__}, not a message",
                url=self._url,
                model=self._model_name,
            )
        parsed = parse_anthropic_message(
            data, url=self._url, model=self._model_name, tool_name=tool
        )
        completion = Completion(
            text=parsed.text,
            usage=parsed.usage,
            model=parsed.model or self._model_name,
            latency_s=time.monotonic() - started,
            mode=mode,
        )
        self._counter.succeeded(completion, usage_reported=parsed.usage_reported)
        return completion

    def _translate(self, exc: Exception) -> Exception:
        """Map an SDK exception onto the LLMError tree; others pass through."""
        if isinstance(exc, LLMError | MessagesError):
            return exc
        sdk = self._sdk
        where = f"POST {redact_url(self._url)} (model {self._model_name!r})"
        attempts = self._max_retries + 1
        if isinstance(exc, sdk.APITimeoutError):
            return LLMTimeoutError(
                f"{where} got no reply within timeout={self._timeout:g} s, {attempts} "
                "attempt(s); raise timeout or lower max_tokens",
                url=self._url,
                model=self._model_name,
                attempts=attempts,
            )
        if isinstance(exc, sdk.APIConnectionError):
            return LLMConnectionError(
                redact(
                    f"{where} could not reach the server after {attempts} attempt(s): {exc}; "
                    "check the network and base_url",
                    self._secrets,
                ),
                url=self._url,
                model=self._model_name,
                attempts=attempts,
            )
        if isinstance(exc, sdk.APIStatusError):
            response = getattr(exc, "response", None)
            body = getattr(response, "content", b"") or str(exc).encode()
            status = int(getattr(exc, "status_code", 0) or 0)
            # The SDK retries 408/409/429/5xx before raising.
            retried = status in (408, 409, 429) or status >= 500
            return http_error(
                status,
                body if isinstance(body, bytes) else str(body).encode(),
                url=self._url,
                model=self._model_name,
                key_env="ANTHROPIC_API_KEY",
                attempts=attempts if retried else 1,
                secrets=self._secrets,
            )
        if isinstance(exc, sdk.APIError):
            return LLMResponseError(
                redact(f"{where} failed: {exc}", self._secrets),
                url=self._url,
                model=self._model_name,
            )
        return exc


async def _close_client(client: Any) -> None:
    await client.close()
