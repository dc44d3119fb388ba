"""OpenAI's chat completions wire format: building requests, reading replies.

Pure functions only (no I/O), shared by the sync and async paths of
:class:`~engramdb.llms.OpenAICompatibleLLM` and, for error wording, by the
other clients.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engramdb._http import describe_body, redact, redact_url, server_message
from engramdb.errors import (
    LLMAuthError,
    LLMHTTPError,
    LLMRateLimitError,
    LLMRefusalError,
    LLMResponseError,
    MessagesError,
)
from engramdb.llms.base import (
    StructuredMode,
    Usage,
    schema_instruction,
    with_system_instruction,
)

__all__ = [
    "ParsedReply",
    "build_chat_request",
    "build_headers",
    "encode_request",
    "http_error",
    "is_unsupported_response_format",
    "parse_chat_completion",
    "reply_status",
]

_SCHEMA_NAME_BAD_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
# Words an error reply uses when the server cannot honour response_format.
_FORMAT_WORDS = (
    "response_format",
    "response format",
    "json_schema",
    "json schema",
    "json_object",
    "json mode",
    "structured output",
    "guided_json",
)


def _schema_name(name: str) -> str:
    # OpenAI accepts only [A-Za-z0-9_-]{1,64} here; a caller's "memory facts"
    # should not turn into a 400 that looks like an unsupported feature.
    cleaned = _SCHEMA_NAME_BAD_CHARS.sub("_", name)[:64]
    return cleaned or "response"


def build_chat_request(
    messages: list[dict[str, Any]],
    *,
    model: str,
    mode: StructuredMode,
    schema: Mapping[str, Any] | None = None,
    schema_name: str = "response",
    temperature: float | None = None,
    max_tokens: int | None = None,
    top_p: float | None = None,
    max_tokens_field: str = "max_tokens",
) -> dict[str, Any]:
    """Return the JSON body of one chat completions request.

    With a ``schema``, ``mode`` picks how it is conveyed: as a
    ``json_schema`` response format (non-strict, so schemas need not meet
    OpenAI's strict-mode rules); as JSON mode plus the schema in the system
    prompt; or in the system prompt alone (``"text"``). Options left at
    ``None`` are not sent, so each server applies its own default (and
    models that reject e.g. ``temperature`` are not sent one).
    ``messages`` is not modified.
    """
    if schema is not None and mode != "json_schema":
        messages = with_system_instruction(messages, schema_instruction(schema, schema_name))
    payload: dict[str, Any] = {"model": model, "messages": messages}
    if schema is not None and mode == "json_schema":
        payload["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": _schema_name(schema_name),
                "schema": dict(schema),
                "strict": False,
            },
        }
    elif schema is not None and mode == "json_object":
        payload["response_format"] = {"type": "json_object"}
    if temperature is not None:
        payload["temperature"] = temperature
    if top_p is not None:
        payload["top_p"] = top_p
    if max_tokens is not None:
        payload[max_tokens_field] = max_tokens
    return payload


def encode_request(payload: Mapping[str, Any]) -> bytes:
    """Serialise a request body to UTF-8 JSON bytes.

    Raises:
        MessagesError: the messages or schema hold something JSON cannot encode.
    """
    try:
        text = json.dumps(payload, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise MessagesError(
            f"the messages or schema cannot be sent as JSON: {exc}; pass only strings, "
            "numbers, booleans, None, lists and dicts"
        ) from None
    # A lone surrogate (from badly decoded input) cannot be UTF-8; replacing
    # it loses one character, refusing would lose the whole call.
    return text.encode("utf-8", "replace")


def build_headers(api_key: str | None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return request headers; ``Authorization`` only when a key is set."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json",
        "User-Agent": "engramdb",
    }
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if extra:
        headers.update(extra)
    return headers


def reply_status(status: int, body: bytes) -> int:
    """Return the status a reply really has.

    Some gateways (OpenRouter among them) answer HTTP 200 with an
    ``{"error": {...}}`` body and no choices when the upstream model
    failed; that is treated as the error's own ``code`` when it is an HTTP
    status, else as 502, so that it is retried and reported like one.
    """
    if not 200 <= status < 300 or b'"error"' not in body[:4096]:
        return status
    try:
        data = json.loads(body)
    except ValueError:
        return status
    if not isinstance(data, dict) or not data.get("error") or "choices" in data:
        return status
    error = data["error"]
    code = error.get("code") if isinstance(error, dict) else None
    if type(code) is int and 400 <= code < 600:
        return code
    return 502


def is_unsupported_response_format(status: int, body: bytes) -> bool:
    """Return whether an error reply says the server cannot honour ``response_format``.

    Servers word this differently ("response_format json_schema is not
    supported", "unknown variant `json_schema`", "json_object not
    supported with this model"); all name the feature, so the error text
    is searched for it.
    """
    if status not in (400, 422):
        return False
    text = server_message(body).lower()
    if "invalid schema" in text:
        # The server supports schemas but rejects this one: the caller's bug,
        # which a weaker mode would hide (and then use for every later call).
        return False
    return any(word in text for word in _FORMAT_WORDS)


@dataclass(frozen=True)
class ParsedReply:
    """What :func:`parse_chat_completion` read from a successful reply."""

    text: str
    usage: Usage
    usage_reported: bool
    model: str | None
    finish_reason: str | None


def _token_count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _parse_usage(raw: object) -> tuple[Usage, bool]:
    if not isinstance(raw, dict):
        return Usage(0, 0), False
    prompt = _token_count(raw.get("prompt_tokens"))
    completion = _token_count(raw.get("completion_tokens"))
    if prompt is None and completion is None:
        return Usage(0, 0), False
    return Usage(prompt or 0, completion or 0), True


def _content_text(content: object) -> str | None:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # A few servers return content as parts, like requests may send it.
        texts: list[str] = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
        return "".join(texts)
    return None


def parse_chat_completion(
    body: bytes, *, url: str, model: str, secrets: tuple[str, ...] = ()
) -> ParsedReply:
    """Read a successful chat completions reply.

    The text of the first choice is returned exactly as sent; ``content:
    null`` becomes ``""``. Missing ``usage`` gives zeros and
    ``usage_reported=False``.

    Raises:
        LLMRefusalError: the model sent a refusal instead of content.
        LLMResponseError: the body is not a chat completion (not JSON, an
            HTML page, no choices, no message).
    """
    where = f"POST {redact_url(url)} (model {model!r})"

    def problem(what: str, advice: str) -> LLMResponseError:
        return LLMResponseError(
            redact(f"{where} returned {what}; {advice}", secrets), url=redact_url(url), model=model
        )

    try:
        data = json.loads(body)
    except ValueError:
        raise problem(
            describe_body(body),
            "check that base_url points at an OpenAI-compatible server's /v1 root",
        ) from None
    if not isinstance(data, dict):
        raise problem(
            f"JSON that is not an object ({type(data).__name__})",
            "check that base_url points at an OpenAI-compatible server's /v1 root",
        )
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise problem(
            "a reply without choices" if choices is None else "an empty 'choices' list",
            "the server produced no answer (a content filter or an overloaded server "
            "can cause this); retry, or check the server's logs",
        )
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict):
        raise problem(
            "a choice without a 'message' object",
            "the server may be answering in another format (a completions or streaming "
            "endpoint); check base_url",
        )
    text = _content_text(message.get("content"))
    if text is None:
        raise problem(
            f"message content of type {type(message.get('content')).__name__}",
            "expected a string; the server is not OpenAI-compatible here",
        )
    refusal = message.get("refusal")
    if not text and isinstance(refusal, str) and refusal:
        raise LLMRefusalError(
            redact(f"{where}: the model refused to answer: {refusal!r}", secrets),
            url=redact_url(url),
            model=model,
        )
    usage, reported = _parse_usage(data.get("usage"))
    answered_by = data.get("model")
    finish = first.get("finish_reason")
    return ParsedReply(
        text=text,
        usage=usage,
        usage_reported=reported,
        model=answered_by if isinstance(answered_by, str) and answered_by else None,
        finish_reason=finish if isinstance(finish, str) else None,
    )


def http_error(
    status: int,
    body: bytes,
    *,
    url: str,
    model: str,
    attempts: int = 1,
    secrets: tuple[str, ...] = (),
    note: str = "",
    key_env: str | None = None,
    pull_hint: bool = False,
) -> LLMHTTPError:
    """Return the error for a non-2xx reply: what failed, the server's words, what to do.

    ``key_env`` names the environment variable a 401 should point at;
    ``pull_hint`` adds Ollama's ``ollama pull`` advice to a 404.
    """
    detail = server_message(body)
    cls: type[LLMHTTPError] = LLMHTTPError
    if status in (401, 403):
        cls = LLMAuthError
        where = "api_key in the llm config"
        if key_env:
            where += f" (or {key_env})"
        advice = f"check {where}: the key is missing, wrong, or lacks access to this model"
    elif status == 404:
        advice = (
            f"check base_url (it normally ends in /v1) and that model {model!r} exists "
            "on the server"
        )
        if pull_hint:
            advice += f" (run `ollama pull {model}`)"
    elif status == 429:
        cls = LLMRateLimitError
        advice = (
            "the server is rate limiting or the account is out of quota; wait, send "
            "fewer calls at once, or raise max_retries"
        )
    elif status == 413:
        advice = "the request is too large for the server; send shorter messages"
    elif status >= 500:
        advice = "the server failed; check its logs, or raise max_retries if it is transient"
    else:
        advice = (
            "the server rejected the request; check the model name and the options "
            "(temperature, top_p, max_tokens, structured_output)"
        )
    tries = f" after {attempts} attempts" if attempts > 1 else ""
    message = f"POST {redact_url(url)} (model {model!r}) failed{tries}: HTTP {status}: "
    message += f"{detail}{note}; {advice}"
    return cls(
        redact(message, secrets),
        url=redact_url(url),
        model=model,
        status=status,
        attempts=attempts,
    )
