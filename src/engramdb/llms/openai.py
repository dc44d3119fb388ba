"""Chat completions from any server that speaks OpenAI's ``/v1/chat/completions``.

One client serves OpenAI, Ollama, vLLM, LM Studio, the llama.cpp server,
Groq, Together, DeepSeek and OpenRouter: they differ only in base URL, API
key and how much of the structured-output API they accept.

Layout: request building, reply parsing and error wording are pure
functions in :mod:`engramdb.llms.wire`. One generator
(:meth:`OpenAICompatibleLLM._flow`) holds the whole call logic (retries,
structured-output fallback, accounting) and only *yields* "post these
bytes" / "sleep this long". The sync and async methods are two small
drivers of that generator that move bytes with ``httpx``, so the logic
exists once and the async path never blocks the event loop.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from engramdb._http import (
    LoopClients,
    RetryPolicy,
    is_retryable_status,
    parse_retry_after,
    redact,
    redact_url,
    resolve_base_url,
    server_message,
    shared_ssl_context,
)
from engramdb.errors import (
    ConfigError,
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMTimeoutError,
)
from engramdb.llms._options import headers_option, optional_int, optional_number, secrets_of
from engramdb.llms.base import (
    STRUCTURED_MODES,
    ClosingMixin,
    Completion,
    StructuredMode,
    UsageCounter,
    check_messages,
)
from engramdb.llms.wire import (
    build_chat_request,
    build_headers,
    encode_request,
    http_error,
    is_unsupported_response_format,
    parse_chat_completion,
    reply_status,
)

__all__ = [
    "API_KEY_ENV",
    "DEFAULT_BASE_URLS",
    "DEFAULT_MODELS",
    "OPENAI_FAMILY",
    "OpenAICompatibleLLM",
]

logger = logging.getLogger(__name__)

OPENAI_BASE_URL = "https://api.openai.com/v1"

DEFAULT_BASE_URLS: dict[str, str | None] = {
    "openai": OPENAI_BASE_URL,
    "ollama": "http://localhost:11434/v1",
    "vllm": "http://localhost:8000/v1",
    "lmstudio": "http://localhost:1234/v1",
    "llamacpp": "http://localhost:8080/v1",
    "groq": "https://api.groq.com/openai/v1",
    "together": "https://api.together.xyz/v1",
    "deepseek": "https://api.deepseek.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    # Any other OpenAI-compatible server: no address we could guess.
    "openai_compatible": None,
}
"""Base URL each provider name uses when none is configured."""

OPENAI_FAMILY: tuple[str, ...] = tuple(DEFAULT_BASE_URLS)
"""Provider names served by :class:`OpenAICompatibleLLM`."""

API_KEY_ENV: dict[str, str] = {
    "openai": "OPENAI_API_KEY",
    "openai_compatible": "OPENAI_API_KEY",
    "groq": "GROQ_API_KEY",
    "together": "TOGETHER_API_KEY",
    "deepseek": "DEEPSEEK_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
}
"""Environment variable holding each provider's API key. Local servers
(Ollama, vLLM, LM Studio, llama.cpp) read none, so a user's OpenAI key is
never sent to them."""

# Only these read OPENAI_BASE_URL: a variable meant for the OpenAI client
# must not redirect a configured Ollama or Groq.
_BASE_URL_ENV_PROVIDERS = frozenset({"openai", "openai_compatible"})

# Hosted services that always want a key at their own address.
_CLOUD_PROVIDERS = frozenset({"openai", "groq", "together", "deepseek", "openrouter"})

DEFAULT_MODELS: dict[str, str] = {"openai": "gpt-4.1-mini"}
"""Model used when none is configured; other providers must name one."""

DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 2
DEFAULT_RETRY_BACKOFF = 0.5

_BASE_URL_KEYS = (
    "base_url",
    "openai_base_url",
    "ollama_base_url",
    "vllm_base_url",
    "lmstudio_base_url",
    "deepseek_base_url",
    "openrouter_base_url",
)
_FORCED_MODES: dict[str, StructuredMode | None] = {
    "auto": None,
    **{mode: mode for mode in STRUCTURED_MODES},
}
_STRUCTURED_OPTIONS = tuple(_FORCED_MODES)


# ---------------------------------------------------------- configuration


def _resolve_base_url(provider: str, given: Mapping[str, object]) -> str:
    return resolve_base_url(
        "llm",
        provider,
        given,
        default=DEFAULT_BASE_URLS[provider],
        env_allowed=provider in _BASE_URL_ENV_PROVIDERS,
    )


# --------------------------------------------------------- the client


@dataclass(frozen=True)
class _Post:
    body: bytes


@dataclass(frozen=True)
class _Sleep:
    seconds: float


@dataclass(frozen=True)
class _Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes


@dataclass(frozen=True)
class _Failure:
    timed_out: bool
    detail: str


_Step = _Post | _Sleep
_Outcome = _Reply | _Failure


class OpenAICompatibleLLM(ClosingMixin):
    """An LLM behind an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Retries timeouts, dropped connections, HTTP 408/409/429 and 5xx with
    exponential backoff (honouring ``Retry-After``); other errors raise at
    once. Structured output degrades from a JSON-schema response format to
    JSON mode to prompt instructions when the server says it lacks one, and
    remembers what works. Thread-safe; usable from many asyncio tasks at
    once. Use as a (async) context manager, or call :meth:`close` /
    :meth:`aclose`, to release connections.
    """

    CONFIG_KEYS: tuple[str, ...] = tuple(
        sorted(
            (
                *_BASE_URL_KEYS,
                "api_key",
                "enable_vision",
                "headers",
                "max_retries",
                "max_tokens",
                "model",
                "retry_backoff",
                "structured_output",
                "temperature",
                "timeout",
                "top_p",
                "vision",
            )
        )
    )
    """Config keys accepted by :func:`engramdb.llms.make_llm` (mem0's names included)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        provider: str = "openai",
        api_key: str | None = None,
        base_url: str | None = None,
        openai_base_url: str | None = None,
        ollama_base_url: str | None = None,
        vllm_base_url: str | None = None,
        lmstudio_base_url: str | None = None,
        deepseek_base_url: str | None = None,
        openrouter_base_url: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        top_p: float | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
        structured_output: str = "auto",
        vision: bool = False,
        enable_vision: bool | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Configure the client; nothing is sent until the first call.

        Args:
            model: model name on the server; defaults to ``gpt-4.1-mini`` for
                ``openai``, required for other providers.
            provider: one of :data:`OPENAI_FAMILY`; picks the default
                ``base_url`` and which environment variable holds the key.
            api_key: bearer token; defaults to the provider's variable in
                :data:`API_KEY_ENV`. Local servers need none.
            base_url: the ``/v1`` root. ``openai`` and ``openai_compatible``
                default to ``OPENAI_BASE_URL``, then their own default.
            openai_base_url: mem0's name for ``base_url`` (as are
                ``vllm_base_url``, ``lmstudio_base_url``,
                ``deepseek_base_url`` and ``openrouter_base_url``).
            ollama_base_url: mem0's name for ``base_url``; a bare
                ``http://host:11434`` gets ``/v1`` appended.
            vllm_base_url: see ``openai_base_url``.
            lmstudio_base_url: see ``openai_base_url``.
            deepseek_base_url: see ``openai_base_url``.
            openrouter_base_url: see ``openai_base_url``.
            temperature: default sampling temperature; unset means the
                server's default.
            max_tokens: default cap on reply tokens (sent to OpenAI as
                ``max_completion_tokens``, which its newer models require).
            top_p: nucleus sampling; unset means the server's default.
            timeout: seconds per HTTP request (connect, send, and waiting
                for the reply each).
            max_retries: retries after the first attempt.
            retry_backoff: first retry delay in seconds; doubles each retry.
            structured_output: ``"auto"`` (try ``json_schema``, fall back to
                ``json_object``, then ``text``) or one of those to force it.
            vision: whether messages may carry images.
            enable_vision: mem0's name for ``vision``.
            headers: extra HTTP headers (e.g. OpenRouter's ``HTTP-Referer``).
        """
        if provider not in DEFAULT_BASE_URLS:
            raise ConfigError(
                f"OpenAICompatibleLLM provider must be one of {', '.join(OPENAI_FAMILY)}, "
                f"got {provider!r}"
            )
        model = model if model is not None else DEFAULT_MODELS.get(provider)
        if not isinstance(model, str) or not model.strip():
            raise ConfigError(
                f"llm provider {provider!r} needs 'model' (the model's name on the server, "
                f"e.g. ENGRAM_LLM={provider}:MODEL), got {model!r}"
            )
        self._base_url = _resolve_base_url(
            provider,
            {
                "base_url": base_url,
                "openai_base_url": openai_base_url,
                "ollama_base_url": ollama_base_url,
                "vllm_base_url": vllm_base_url,
                "lmstudio_base_url": lmstudio_base_url,
                "deepseek_base_url": deepseek_base_url,
                "openrouter_base_url": openrouter_base_url,
            },
        )
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigError("llm option 'api_key' must be a string")
        env = API_KEY_ENV.get(provider)
        if not api_key and env:
            api_key = os.environ.get(env) or None
        host = httpx.URL(self._base_url).host
        default_url = DEFAULT_BASE_URLS[provider]
        if (
            not api_key
            and provider in _CLOUD_PROVIDERS
            and default_url is not None
            and host == httpx.URL(default_url).host
        ):
            raise ConfigError(
                f"the {provider} LLM at {self._base_url} needs an API key: set api_key in "
                f"the llm config or the {env} environment variable"
            )
        if not isinstance(structured_output, str) or structured_output not in _FORCED_MODES:
            raise ConfigError(
                f"llm option 'structured_output' must be one of "
                f"{', '.join(_STRUCTURED_OPTIONS)}, got {structured_output!r}"
            )
        if enable_vision is not None:
            vision = enable_vision
        if not isinstance(vision, bool):
            raise ConfigError(f"llm option 'vision' must be true or false, got {vision!r}")

        self._provider = provider
        self._model_name = model.strip()
        self._api_key = api_key or None
        self._temperature = optional_number("temperature", temperature, 0.0, 2.0)
        self._top_p = optional_number("top_p", top_p, 0.0, 1.0)
        self._max_tokens = optional_int("max_tokens", max_tokens, 1)
        timeout_s = optional_number("timeout", timeout, 0.0, None)
        if not timeout_s:
            raise ConfigError(f"llm option 'timeout' must be a positive number, got {timeout!r}")
        self._timeout = timeout_s
        retries = optional_int("max_retries", max_retries, 0)
        backoff = optional_number("retry_backoff", retry_backoff, 0.0, None)
        self._policy = RetryPolicy(
            max_retries=DEFAULT_MAX_RETRIES if retries is None else retries,
            backoff=DEFAULT_RETRY_BACKOFF if backoff is None else backoff,
        )
        self._vision = vision
        extra_headers = headers_option(headers)
        self._secrets = secrets_of(self._api_key, extra_headers)
        self._headers = build_headers(self._api_key, extra_headers)
        self._forced = _FORCED_MODES[structured_output]
        self._learned: StructuredMode = "json_schema"
        self._mode_lock = threading.Lock()
        # OpenAI's newer models refuse max_tokens; other servers may not know
        # max_completion_tokens, so the new name goes to OpenAI only.
        self._max_tokens_field = (
            "max_completion_tokens" if host == "api.openai.com" else "max_tokens"
        )
        self._url = self._base_url + "/chat/completions"
        self._counter = UsageCounter()
        self._client: httpx.Client | None = None
        self._client_lock = threading.Lock()
        self._aclients = LoopClients(self._new_async_client, _close_async_client)

    @classmethod
    def from_config(cls, provider: str, config: Mapping[str, Any]) -> OpenAICompatibleLLM:
        """Build from an llm config dict (keys as in :attr:`CONFIG_KEYS`)."""
        return cls(provider=provider, **dict(config))

    # ------------------------------------------------------------ facts

    @property
    def model(self) -> str:
        """The configured model name."""
        return self._model_name

    @property
    def provider(self) -> str:
        """The provider name this client was built for."""
        return self._provider

    @property
    def base_url(self) -> str:
        """The resolved ``/v1`` root requests go to."""
        return self._base_url

    @property
    def vision(self) -> bool:
        """Whether messages may carry images."""
        return self._vision

    @property
    def structured_mode(self) -> StructuredMode:
        """The structured-output mode the next call with a schema starts with."""
        if self._forced is not None:
            return self._forced
        with self._mode_lock:
            return self._learned

    def stats(self) -> dict[str, int | float]:
        """Return running totals of this instance's calls (see ``UsageCounter.snapshot``)."""
        return self._counter.snapshot()

    # ------------------------------------------------------------ calls

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Send ``messages`` and return the reply; see :class:`~engramdb.llms.LLM`.

        Raises:
            MessagesError: ``messages`` has the wrong shape.
            LLMError: the call failed (a subclass says how).
        """
        flow = self._flow(messages, schema, schema_name, temperature, max_tokens)
        client = self._sync_client()
        outcome: _Outcome | None = None
        while True:
            try:
                step = flow.send(outcome)
            except StopIteration as done:
                result: Completion = done.value
                return result
            if isinstance(step, _Sleep):
                time.sleep(step.seconds)
                outcome = None
                continue
            try:
                response = client.post(self._url, content=step.body)
            except httpx.HTTPError as exc:
                outcome = _failure(exc)
            else:
                outcome = _reply(response)

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
        flow = self._flow(messages, schema, schema_name, temperature, max_tokens)
        client = await self._aclients.get()
        outcome: _Outcome | None = None
        while True:
            try:
                step = flow.send(outcome)
            except StopIteration as done:
                result: Completion = done.value
                return result
            if isinstance(step, _Sleep):
                await asyncio.sleep(step.seconds)
                outcome = None
                continue
            try:
                response = await client.post(self._url, content=step.body)
            except httpx.HTTPError as exc:
                outcome = _failure(exc)
            else:
                outcome = _reply(response)

    # ------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Close the connections of synchronous calls; a later call opens new ones.

        Async connections belong to their event loop: they are closed by
        :meth:`aclose` from that loop, or when the loop shuts down.
        """
        with self._client_lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    async def aclose(self) -> None:
        """Close the running loop's async connections and the sync ones."""
        await self._aclients.aclose()
        self.close()

    def __repr__(self) -> str:
        return (
            f"OpenAICompatibleLLM(provider={self._provider!r}, model={self._model_name!r}, "
            f"base_url={redact_url(self._base_url)!r})"
        )

    # -------------------------------------------------------- internals

    def _sync_client(self) -> httpx.Client:
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(
                    timeout=httpx.Timeout(self._timeout),
                    headers=self._headers,
                    verify=shared_ssl_context(),
                )
            return self._client

    def _new_async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=httpx.Timeout(self._timeout),
            headers=self._headers,
            verify=shared_ssl_context(),
        )

    def _modes(self, schema: Mapping[str, Any] | None) -> tuple[StructuredMode, ...]:
        if schema is None:
            return ("text",)
        if self._forced is not None:
            return (self._forced,)
        with self._mode_lock:
            start = STRUCTURED_MODES.index(self._learned)
        return STRUCTURED_MODES[start:]

    def _downgrade(self, failed: StructuredMode, to: StructuredMode, body: bytes) -> None:
        with self._mode_lock:
            # Only ever move down: a concurrent call that already learnt a
            # weaker mode must not be undone by one that started earlier.
            if STRUCTURED_MODES.index(to) <= STRUCTURED_MODES.index(self._learned):
                return
            self._learned = to
        logger.warning(
            "%s (model %r) does not accept structured output %r (%s); using %r from now on",
            redact_url(self._base_url),
            self._model_name,
            failed,
            redact(server_message(body), self._secrets),
            to,
        )

    def _flow(
        self,
        messages: list[dict[str, Any]],
        schema: dict[str, Any] | None,
        schema_name: str,
        temperature: float | None,
        max_tokens: int | None,
    ) -> Generator[_Step, _Outcome | None, Completion]:
        """Run the whole logic of one call as a generator of I/O requests.

        Yields :class:`_Post` (the driver answers with a :class:`_Reply` or
        :class:`_Failure`) and :class:`_Sleep` (answered with ``None``);
        returns the :class:`Completion` or raises an :class:`LLMError`.
        """
        checked = check_messages(messages, vision=self._vision)
        if schema is not None and not isinstance(schema, Mapping):
            raise TypeError(f"schema must be a dict (a JSON schema), got {type(schema).__name__}")
        temperature = optional_number(
            "temperature", self._temperature if temperature is None else temperature, 0.0, 2.0
        )
        max_tokens = optional_int(
            "max_tokens", self._max_tokens if max_tokens is None else max_tokens, 1
        )
        started = time.monotonic()
        self._counter.started()
        try:
            modes = self._modes(schema)
            for position, mode in enumerate(modes):
                body = encode_request(
                    build_chat_request(
                        checked,
                        model=self._model_name,
                        mode=mode,
                        schema=schema,
                        schema_name=schema_name,
                        temperature=temperature,
                        max_tokens=max_tokens,
                        top_p=self._top_p,
                        max_tokens_field=self._max_tokens_field,
                    )
                )
                reply, attempts = yield from self._send(body)
                status = reply_status(reply.status, reply.body)
                if 200 <= status < 300:
                    parsed = parse_chat_completion(
                        reply.body, url=self._url, model=self._model_name, secrets=self._secrets
                    )
                    completion = Completion(
                        text=parsed.text,
                        usage=parsed.usage,
                        model=parsed.model or self._model_name,
                        latency_s=time.monotonic() - started,
                        mode=mode,
                    )
                    self._counter.succeeded(completion, usage_reported=parsed.usage_reported)
                    if parsed.finish_reason == "length":
                        logger.warning(
                            "the reply of %r was cut off at the token limit; raise max_tokens",
                            self._model_name,
                        )
                    return completion
                if position + 1 < len(modes) and is_unsupported_response_format(status, reply.body):
                    self._downgrade(mode, modes[position + 1], reply.body)
                    self._counter.fell_back()
                    continue
                raise self._status_error(reply, status, attempts)
            raise AssertionError("unreachable: the last mode returns or raises")
        except Exception:
            self._counter.failed()
            raise

    def _send(self, body: bytes) -> Generator[_Step, _Outcome | None, tuple[_Reply, int]]:
        """Post ``body`` until a non-retryable reply; return it and the attempt count."""
        for attempt in itertools.count():
            self._counter.request()
            outcome = yield _Post(body)
            if outcome is None:
                raise AssertionError("the driver must answer a _Post with an outcome")
            retry_after: float | None = None
            if isinstance(outcome, _Reply):
                if not is_retryable_status(reply_status(outcome.status, outcome.body)):
                    return outcome, attempt + 1
                retry_after = parse_retry_after(outcome.headers)
            delay = self._policy.next_delay(attempt, retry_after)
            if delay is None:
                raise self._final_error(outcome, attempt + 1, retry_after)
            self._counter.retried()
            logger.info(
                "retrying %s (model %r) in %.2f s after %s",
                redact_url(self._url),
                self._model_name,
                delay,
                outcome.detail if isinstance(outcome, _Failure) else f"HTTP {outcome.status}",
            )
            yield _Sleep(delay)
        raise AssertionError("unreachable: itertools.count() never ends")

    def _status_error(
        self, reply: _Reply, status: int, attempts: int, note: str = ""
    ) -> LLMHTTPError:
        if status != reply.status:
            note = f" (an error object in an HTTP {reply.status} reply){note}"
        return http_error(
            status,
            reply.body,
            url=self._url,
            model=self._model_name,
            attempts=attempts,
            secrets=self._secrets,
            note=note,
            key_env=API_KEY_ENV.get(self._provider),
            pull_hint=self._provider == "ollama",
        )

    def _final_error(self, outcome: _Outcome, attempts: int, retry_after: float | None) -> LLMError:
        url = redact_url(self._url)
        where = f"POST {url} (model {self._model_name!r})"
        if isinstance(outcome, _Reply):
            note = ""
            if retry_after is not None and retry_after > self._policy.max_delay:
                note = f" (the server asked to retry after {retry_after:g} s)"
            return self._status_error(
                outcome, reply_status(outcome.status, outcome.body), attempts, note
            )
        if outcome.timed_out:
            return LLMTimeoutError(
                f"{where} got no reply within timeout={self._timeout:g} s, {attempts} "
                "attempt(s); the model may be slow (loading, long prompt or reply): raise "
                "timeout, lower max_tokens, or check that the server is not overloaded",
                url=url,
                model=self._model_name,
                attempts=attempts,
            )
        return LLMConnectionError(
            redact(
                f"{where} got no usable reply after {attempts} attempt(s): "
                f"{outcome.detail}; check that the server is running and that base_url "
                "is right",
                self._secrets,
            ),
            url=url,
            model=self._model_name,
            attempts=attempts,
        )


async def _close_async_client(client: httpx.AsyncClient) -> None:
    await client.aclose()


def _reply(response: httpx.Response) -> _Reply:
    headers = {name.lower(): value for name, value in response.headers.items()}
    return _Reply(response.status_code, headers, response.content)


def _failure(exc: httpx.HTTPError) -> _Failure:
    if isinstance(exc, httpx.TimeoutException):
        return _Failure(timed_out=True, detail=type(exc).__name__)
    # Refused, reset, dropped mid-reply, undecodable body: all worth a retry.
    return _Failure(timed_out=False, detail=f"{type(exc).__name__}: {exc}")
