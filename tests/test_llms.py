"""The LLM port: OpenAI-compatible client against a real local HTTP server,
the scripted provider, configuration, and the pure helpers."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import engramdb.llms as llms
from engramdb._http import (
    RetryPolicy,
    describe_body,
    is_retryable_status,
    parse_retry_after,
    redact,
    redact_url,
)
from engramdb.errors import (
    ConfigError,
    LLMAuthError,
    LLMConnectionError,
    LLMError,
    LLMHTTPError,
    LLMRateLimitError,
    LLMRefusalError,
    LLMResponseError,
    LLMScriptError,
    LLMTimeoutError,
    MessagesError,
    UnknownProviderError,
)
from engramdb.llms import (
    LLM,
    AnthropicLLM,
    Completion,
    OpenAICompatibleLLM,
    ScriptedLLM,
    Usage,
    llm_from_env,
    make_llm,
    parse_llm_spec,
)
from engramdb.llms.anthropic import (
    build_anthropic_request,
    parse_anthropic_message,
    to_anthropic_messages,
)
from engramdb.llms.wire import (
    build_chat_request,
    is_unsupported_response_format,
    reply_status,
)
from openai_wire import Reply, WireServer, openai_server

__all__ = ["openai_server"]  # the fixture, re-exported so pytest finds it here

HI = [{"role": "user", "content": "hi"}]
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
    "required": ["facts"],
}
KEY = "sk-test-SECRET-0123456789"
UNSUPPORTED_SCHEMA = "response_format type 'json_schema' is not supported by this model"
UNSUPPORTED_OBJECT = "Invalid value for response_format: json_object is unavailable"

_ENV = (
    "ENGRAM_LLM",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "ANTHROPIC_API_KEY",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def client(openai_server: WireServer) -> Iterator[Callable[..., OpenAICompatibleLLM]]:
    """Build clients against the test server with fast retries; closes them after."""
    made: list[OpenAICompatibleLLM] = []

    def build(**options: Any) -> OpenAICompatibleLLM:
        config: dict[str, Any] = {
            "base_url": openai_server.base_url,
            "model": "test-model",
            "retry_backoff": 0.01,
            "timeout": 5,
        }
        config.update(options)
        llm = make_llm(config.pop("provider", "openai_compatible"), config)
        assert isinstance(llm, OpenAICompatibleLLM)
        made.append(llm)
        return llm

    yield build
    for llm in made:
        llm.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------- success


def test_success_returns_text_usage_and_model(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(
        "  hello  ", usage={"prompt_tokens": 12, "completion_tokens": 3}, model="served-x"
    )
    llm = client()
    result = llm.complete(HI)
    assert isinstance(result, Completion)
    assert result.text == "  hello  "  # nothing stripped
    assert result.usage == Usage(12, 3)
    assert result.usage.total_tokens == 15
    assert result.model == "served-x"
    assert result.mode == "text"
    assert result.latency_s > 0
    sent = openai_server.last
    assert sent.method == "POST"
    assert sent.path == "/v1/chat/completions"
    assert sent.json == {"model": "test-model", "messages": HI}
    assert sent.headers["content-type"] == "application/json"
    stats = llm.stats()
    assert stats["calls"] == 1
    assert stats["requests"] == 1
    assert stats["errors"] == 0
    assert stats["prompt_tokens"] == 12
    assert stats["completion_tokens"] == 3
    assert stats["total_tokens"] == 15


def test_options_are_sent_and_per_call_values_win(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    llm = client(temperature=0.2, max_tokens=100, top_p=0.9)
    llm.complete(HI)
    assert openai_server.last.json["temperature"] == 0.2
    assert openai_server.last.json["max_tokens"] == 100
    assert openai_server.last.json["top_p"] == 0.9
    llm.complete(HI, temperature=0.0, max_tokens=7)
    assert openai_server.last.json["temperature"] == 0.0
    assert openai_server.last.json["max_tokens"] == 7


def test_unset_options_are_not_sent(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    client().complete(HI)
    assert set(openai_server.last.json) == {"model", "messages"}


def test_openai_gets_max_completion_tokens() -> None:
    body = build_chat_request(
        HI, model="m", mode="text", max_tokens=5, max_tokens_field="max_completion_tokens"
    )
    assert body["max_completion_tokens"] == 5
    assert "max_tokens" not in body


def test_message_list_is_not_modified(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=400, error=UNSUPPORTED_SCHEMA)
    openai_server.reply(status=400, error=UNSUPPORTED_OBJECT)
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x"}]
    before = json.dumps(messages)
    client().complete(messages, schema=SCHEMA)
    assert json.dumps(messages) == before


# ---------------------------------------------------- structured output


def test_schema_goes_first_as_json_schema_response_format(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply('{"facts": []}')
    result = client().complete(HI, schema=SCHEMA, schema_name="memory facts")
    assert result.mode == "json_schema"
    assert result.text == '{"facts": []}'
    assert openai_server.last.response_format == {
        "type": "json_schema",
        "json_schema": {"name": "memory_facts", "schema": SCHEMA, "strict": False},
    }
    # The server has the schema; the prompt is left alone.
    assert openai_server.last.messages == HI


def test_fallback_to_json_object_then_text_is_remembered(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=400, error=UNSUPPORTED_SCHEMA)
    openai_server.reply(status=400, error=UNSUPPORTED_OBJECT)
    openai_server.reply('{"facts": ["a"]}')
    llm = client()
    messages = [{"role": "system", "content": "Extract facts."}, *HI]
    result = llm.complete(messages, schema=SCHEMA)
    assert result.mode == "text"
    assert result.text == '{"facts": ["a"]}'
    sent = openai_server.chat_requests
    assert [r.response_format_type for r in sent] == ["json_schema", "json_object", None]
    # JSON mode and text mode carry the schema in the leading system message.
    for request in sent[1:]:
        system = request.messages[0]
        assert system["role"] == "system"
        assert system["content"].startswith("Extract facts.\n\n")
        assert '"facts"' in system["content"]
        assert "JSON" in system["content"]
        assert request.messages[1:] == HI
    assert llm.structured_mode == "text"
    assert llm.stats()["fallbacks"] == 2

    # Remembered: the next call goes straight to text mode, one request.
    openai_server.reset()
    again = llm.complete(HI, schema=SCHEMA)
    assert again.mode == "text"
    assert len(openai_server.requests) == 1
    assert openai_server.last.response_format is None
    assert openai_server.last.messages[0]["role"] == "system"


def test_fallback_stops_at_json_object_when_it_works(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=422, error="unknown variant `json_schema`, expected `json_object`")
    openai_server.reply("{}")
    llm = client()
    assert llm.complete(HI, schema=SCHEMA).mode == "json_object"
    assert llm.structured_mode == "json_object"
    llm.complete(HI, schema=SCHEMA)
    assert openai_server.last.response_format == {"type": "json_object"}
    # Calls without a schema are unaffected.
    assert llm.complete(HI).mode == "text"
    assert openai_server.last.response_format is None


@pytest.mark.parametrize(
    ("forced", "expected_type"),
    [("json_schema", "json_schema"), ("json_object", "json_object"), ("text", None)],
)
def test_forced_structured_mode(
    openai_server: WireServer,
    client: Callable[..., OpenAICompatibleLLM],
    forced: str,
    expected_type: str | None,
) -> None:
    result = client(structured_output=forced).complete(HI, schema=SCHEMA)
    assert result.mode == forced
    assert openai_server.last.response_format_type == expected_type


def test_forced_mode_does_not_fall_back(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=400, error=UNSUPPORTED_SCHEMA)
    with pytest.raises(LLMHTTPError) as info:
        client(structured_output="json_schema").complete(HI, schema=SCHEMA)
    assert info.value.status == 400
    assert "structured_output" in str(info.value)
    assert len(openai_server.requests) == 1


def test_other_400s_do_not_fall_back(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=400, error="'temperature' is out of range")
    with pytest.raises(LLMHTTPError) as info:
        client().complete(HI, schema=SCHEMA)
    assert type(info.value) is LLMHTTPError
    assert "temperature" in str(info.value)
    assert len(openai_server.requests) == 1


def test_invalid_schema_is_not_mistaken_for_missing_support(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=400, error="Invalid schema for response_format 'response'")
    llm = client()
    with pytest.raises(LLMHTTPError, match="Invalid schema"):
        llm.complete(HI, schema=SCHEMA)
    assert llm.structured_mode == "json_schema"


def test_schema_instruction_without_system_message_comes_first() -> None:
    body = build_chat_request(HI, model="m", mode="text", schema=SCHEMA)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "response_format" not in body


# ------------------------------------------------------------ retries


def test_429_with_retry_after_then_success(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=429, headers={"Retry-After": "0"})
    openai_server.reply("done")
    llm = client()
    assert llm.complete(HI).text == "done"
    assert len(openai_server.requests) == 2
    assert llm.stats()["retries"] == 1
    assert llm.stats()["requests"] == 2


def test_retry_after_is_honoured(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=503, headers={"Retry-After": "0.3"})
    llm = client(retry_backoff=0)
    llm.complete(HI)
    first, second = openai_server.requests
    assert second.at - first.at >= 0.29


def test_500s_are_retried(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=500)
    openai_server.reply(status=502, body=b"<html><title>502 Bad Gateway</title></html>")
    openai_server.reply("fine")
    assert client(max_retries=2).complete(HI).text == "fine"
    assert len(openai_server.requests) == 3


def test_retries_exhausted_raises_with_attempts(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    for _ in range(3):
        openai_server.reply(status=503, error="overloaded")
    llm = client(max_retries=2)
    with pytest.raises(LLMHTTPError) as info:
        llm.complete(HI)
    err = info.value
    assert err.status == 503
    assert err.attempts == 3
    assert err.model == "test-model"
    assert err.url == openai_server.base_url + "/chat/completions"
    message = str(err)
    assert "after 3 attempts" in message
    assert "overloaded" in message
    assert openai_server.base_url in message
    assert "max_retries" in message
    stats = llm.stats()
    assert (stats["calls"], stats["errors"], stats["requests"], stats["retries"]) == (1, 1, 3, 2)


def test_rate_limit_exhausted_is_a_rate_limit_error(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=429, headers={"Retry-After": "0"})
    openai_server.reply(status=429, headers={"Retry-After": "0"})
    with pytest.raises(LLMRateLimitError, match="rate limit"):
        client(max_retries=1).complete(HI)


def test_retry_after_longer_than_we_wait_is_not_retried(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=429, headers={"Retry-After": "3600"})
    with pytest.raises(LLMRateLimitError, match="retry after 3600 s"):
        client().complete(HI)
    assert len(openai_server.requests) == 1


def test_client_errors_are_not_retried(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(status=404, error="model 'nope' not found")
    with pytest.raises(LLMHTTPError) as info:
        client(provider="ollama", model="nope").complete(HI)
    assert info.value.status == 404
    assert "ollama pull nope" in str(info.value)
    assert len(openai_server.requests) == 1


def test_timeout(openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]) -> None:
    openai_server.reply(delay=3)
    openai_server.reply(delay=3)
    llm = client(timeout=0.2, max_retries=1)
    started = time.monotonic()
    with pytest.raises(LLMTimeoutError) as info:
        llm.complete(HI)
    assert time.monotonic() - started < 2
    assert isinstance(info.value, TimeoutError)
    assert info.value.attempts == 2
    assert "timeout=0.2 s" in str(info.value)
    assert len(openai_server.requests) == 2


def test_timeout_then_success(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(delay=3)
    openai_server.reply("quick")
    assert client(timeout=0.2).complete(HI).text == "quick"


def test_connection_refused() -> None:
    llm = OpenAICompatibleLLM(
        "m",
        provider="openai_compatible",
        base_url=f"http://127.0.0.1:{free_port()}/v1",
        max_retries=1,
        retry_backoff=0.01,
    )
    with llm, pytest.raises(LLMConnectionError) as info:
        llm.complete(HI)
    assert isinstance(info.value, ConnectionError)
    assert info.value.attempts == 2
    assert "server is running" in str(info.value)


def test_dropped_connection_is_retried(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(drop=True)
    openai_server.reply("after drop")
    assert client().complete(HI).text == "after drop"


# ----------------------------------------------------- malformed replies


def test_malformed_json_body(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(body=b'{"choices": [')
    llm = client()
    with pytest.raises(LLMResponseError, match="base_url"):
        llm.complete(HI)
    assert len(openai_server.requests) == 1
    assert llm.stats()["errors"] == 1


def test_html_page_is_summarised(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    page = "<!DOCTYPE html><html><head><title>Open WebUI</title></head><body>" + "x" * 5000
    openai_server.reply(body=page, content_type="text/html")
    with pytest.raises(LLMResponseError) as info:
        client().complete(HI)
    assert "HTML page ('Open WebUI')" in str(info.value)
    assert "xxxxxxxxxx" not in str(info.value)


def test_html_error_page_after_retries(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    for _ in range(2):
        openai_server.reply(status=502, body="<html><title>502 Bad Gateway</title></html>")
    with pytest.raises(LLMHTTPError, match=r"HTTP 502: an HTML page \('502 Bad Gateway'\)"):
        client(max_retries=1).complete(HI)


@pytest.mark.parametrize("body", [{"choices": []}, {"id": "x"}, []])
def test_no_choices(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM], body: Any
) -> None:
    openai_server.reply(body=body)
    with pytest.raises(LLMResponseError):
        client().complete(HI)


def test_choice_without_message(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(body={"choices": [{"text": "legacy completions"}]})
    with pytest.raises(LLMResponseError, match="without a 'message'"):
        client().complete(HI)


def test_null_content_is_empty_text(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(None)
    assert client().complete(HI).text == ""


def test_content_parts_are_joined(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(
        body={"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"text": "b"}]}}]}
    )
    assert client().complete(HI).text == "ab"


def test_refusal(openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]) -> None:
    openai_server.reply(None, refusal="I can't help with that.")
    with pytest.raises(LLMRefusalError, match="can't help"):
        client().complete(HI)


def test_missing_usage_counts_zero_and_is_recorded(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply("x", usage=None)
    openai_server.reply("y", usage={"prompt_tokens": 4, "completion_tokens": 1})
    llm = client()
    assert llm.complete(HI).usage == Usage(0, 0)
    llm.complete(HI)
    stats = llm.stats()
    assert stats["usage_missing"] == 1
    assert stats["prompt_tokens"] == 4
    assert stats["calls"] == 2


def test_error_object_in_a_200_reply_is_treated_as_its_code(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.reply(body={"error": {"message": "upstream busy", "code": 503}})
    openai_server.reply("recovered")
    assert client().complete(HI).text == "recovered"
    openai_server.reply(body={"error": {"message": "no such model", "code": 400}})
    with pytest.raises(LLMHTTPError, match="an error object in an HTTP 200 reply"):
        client().complete(HI)


# ------------------------------------------------------ keys and headers


def test_api_key_is_sent_as_bearer(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    client(api_key=KEY).complete(HI)
    assert openai_server.last.authorization == f"Bearer {KEY}"


def test_local_server_gets_no_key(
    openai_server: WireServer,
    client: Callable[..., OpenAICompatibleLLM],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    for provider in ("ollama", "vllm", "lmstudio", "llamacpp"):
        client(provider=provider).complete(HI)
        assert openai_server.last.authorization is None, provider


def test_openai_compatible_reads_openai_api_key(
    openai_server: WireServer,
    client: Callable[..., OpenAICompatibleLLM],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    client().complete(HI)
    assert openai_server.last.authorization == f"Bearer {KEY}"


def test_extra_headers_are_sent(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    client(headers={"HTTP-Referer": "https://example.org", "X-Title": "engram"}).complete(HI)
    assert openai_server.last.headers["http-referer"] == "https://example.org"
    assert openai_server.last.headers["x-title"] == "engram"


def test_api_key_never_appears_in_errors_or_logs(
    openai_server: WireServer,
    client: Callable[..., OpenAICompatibleLLM],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # A server that echoes the rejected key back, as some do.
    openai_server.handler = lambda req: Reply(
        status=401, error=f"invalid api key {req.authorization}"
    )
    llm = client(api_key=KEY)
    with pytest.raises(LLMAuthError) as info:
        llm.complete(HI)
    err = info.value
    assert err.status == 401
    assert "check api_key" in str(err)
    for text in (str(err), repr(err), repr(err.args), str(err.url), repr(llm), caplog.text):
        assert KEY not in text
    assert "***" in str(err)

    openai_server.handler = lambda req: Reply(status=503, error=f"bad {req.authorization}")
    with pytest.raises(LLMHTTPError) as again:
        llm.complete(HI)
    assert KEY not in str(again.value)
    assert KEY not in caplog.text


def test_credential_headers_are_masked_too(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    openai_server.handler = lambda req: Reply(status=403, error=f"no: {req.headers['x-api-key']}")
    with pytest.raises(LLMAuthError) as info:
        client(headers={"X-Api-Key": KEY}).complete(HI)
    assert KEY not in str(info.value)


def test_401_names_the_providers_key_variable() -> None:
    from engramdb.llms.wire import http_error

    err = http_error(401, b"{}", url="https://x/v1", model="m", key_env="GROQ_API_KEY")
    assert isinstance(err, LLMAuthError)
    assert "GROQ_API_KEY" in str(err)


def test_url_credentials_are_hidden() -> None:
    assert redact_url("https://user:pw@host/v1") == "https://user:***@host/v1"
    assert redact_url("http://host/v1") == "http://host/v1"


# ------------------------------------------------------------- messages


@pytest.mark.parametrize(
    "messages",
    [
        "hello",
        [],
        ["hello"],
        [{"content": "no role"}],
        [{"role": "user", "content": 5}],
        [{"role": "user", "content": [{"no": "type"}]}],
    ],
)
def test_bad_messages_are_rejected_before_sending(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM], messages: Any
) -> None:
    with pytest.raises(MessagesError):
        client().complete(messages)
    assert openai_server.requests == []


IMAGE = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        ],
    }
]


def test_images_need_vision(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    with pytest.raises(MessagesError, match="vision"):
        client().complete(IMAGE)
    client(vision=True).complete(IMAGE)
    assert openai_server.last.messages == IMAGE
    client(enable_vision=True).complete(IMAGE)  # mem0's name


def test_unencodable_messages(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    with pytest.raises(MessagesError, match="JSON"):
        client().complete([{"role": "user", "content": "x", "extra": object()}])


# ---------------------------------------------------------------- async


def test_async_concurrent_calls_overlap(openai_server: WireServer) -> None:
    openai_server.handler = lambda req: Reply(delay=0.5, content=req.messages[-1]["content"])
    llm = OpenAICompatibleLLM("m", provider="openai_compatible", base_url=openai_server.base_url)

    async def main() -> list[Completion]:
        async with llm:
            return await asyncio.gather(
                *(llm.acomplete([{"role": "user", "content": f"n{i}"}]) for i in range(20))
            )

    started = time.monotonic()
    results = asyncio.run(main())
    elapsed = time.monotonic() - started
    assert [r.text for r in results] == [f"n{i}" for i in range(20)]
    assert elapsed < 3, f"20 calls to a 0.5 s server took {elapsed:.1f} s: not concurrent"
    assert openai_server.max_in_flight >= 10
    assert llm.stats()["calls"] == 20


def test_async_retries_fallbacks_and_errors(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    llm = client(max_retries=1)

    async def main() -> None:
        openai_server.reply(status=429, headers={"Retry-After": "0"})
        openai_server.reply(status=400, error=UNSUPPORTED_SCHEMA)
        openai_server.reply("{}")
        result = await llm.acomplete(HI, schema=SCHEMA)
        assert result.mode == "json_object"
        openai_server.reply(delay=3)
        openai_server.reply(delay=3)
        fast = client(timeout=0.2, max_retries=1)
        with pytest.raises(LLMTimeoutError):
            await fast.acomplete(HI)
        await fast.aclose()
        await llm.aclose()

    asyncio.run(main())
    assert llm.stats()["retries"] == 1
    assert llm.stats()["fallbacks"] == 1


def test_async_client_works_across_event_loops(
    openai_server: WireServer, client: Callable[..., OpenAICompatibleLLM]
) -> None:
    # Each asyncio.run() is a new loop; connections of the old one are closed
    # when it shuts down, even without aclose() (no ResourceWarning).
    llm = client()
    for _ in range(3):
        assert asyncio.run(llm.acomplete(HI)).text == "ok"


def test_sync_calls_from_many_threads(openai_server: WireServer) -> None:
    openai_server.handler = lambda req: Reply(delay=0.2, content=req.messages[-1]["content"])
    llm = OpenAICompatibleLLM("m", provider="openai_compatible", base_url=openai_server.base_url)
    results: dict[int, str] = {}

    def work(i: int) -> None:
        results[i] = llm.complete([{"role": "user", "content": str(i)}]).text

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    llm.close()
    assert results == {i: str(i) for i in range(8)}
    assert llm.stats()["calls"] == 8


# ------------------------------------------------------- configuration


def test_env_ollama(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_LLM", "ollama:llama3.2")
    # Meant for the OpenAI client: must neither redirect nor be sent to Ollama.
    monkeypatch.setenv("OPENAI_BASE_URL", "http://elsewhere:9999/v1")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    llm = llm_from_env()
    assert isinstance(llm, OpenAICompatibleLLM)
    assert llm.model == "llama3.2"
    assert llm.provider == "ollama"
    assert llm.base_url == "http://localhost:11434/v1"


def test_env_openai_with_base_url_works_end_to_end(
    openai_server: WireServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENGRAM_LLM", "openai:gpt-test")
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    llm = make_llm(None, None)
    with llm:  # type: ignore[attr-defined]
        assert llm.complete(HI).text == "ok"
    assert openai_server.last.json["model"] == "gpt-test"
    assert openai_server.last.authorization == f"Bearer {KEY}"


def test_env_spec_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_llm_spec("ollama:llama3.2:3b") == ("ollama", "llama3.2:3b")
    assert parse_llm_spec(" openai ") == ("openai", None)
    with pytest.raises(ConfigError):
        parse_llm_spec(":model")
    assert llm_from_env() is None
    monkeypatch.setenv("ENGRAM_LLM", "  ")
    assert llm_from_env() is None
    monkeypatch.setenv("ENGRAM_LLM", "ollama:from-env")
    llm = make_llm(None, {"model": "from-config"})
    assert llm.model == "from-config"


def test_no_provider_and_no_env_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="ENGRAM_LLM"):
        make_llm(None, None)


def test_openai_defaults_and_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        make_llm("openai", {})
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    llm = make_llm("openai", {})
    assert isinstance(llm, OpenAICompatibleLLM)
    assert llm.model == "gpt-4.1-mini"
    assert llm.base_url == "https://api.openai.com/v1"
    assert KEY not in repr(llm)


@pytest.mark.parametrize(
    ("provider", "url", "env"),
    [
        ("groq", "https://api.groq.com/openai/v1", "GROQ_API_KEY"),
        ("together", "https://api.together.xyz/v1", "TOGETHER_API_KEY"),
        ("deepseek", "https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
        ("openrouter", "https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    ],
)
def test_cloud_providers(
    provider: str, url: str, env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigError, match=env):
        make_llm(provider, {"model": "m"})
    monkeypatch.setenv(env, KEY)
    llm = make_llm(provider, {"model": "m"})
    assert isinstance(llm, OpenAICompatibleLLM)
    assert llm.base_url == url


@pytest.mark.parametrize(
    ("provider", "url"),
    [
        ("ollama", "http://localhost:11434/v1"),
        ("vllm", "http://localhost:8000/v1"),
        ("lmstudio", "http://localhost:1234/v1"),
        ("LM-Studio", "http://localhost:1234/v1"),
        ("llamacpp", "http://localhost:8080/v1"),
        ("llama.cpp", "http://localhost:8080/v1"),
    ],
)
def test_local_providers_need_no_key(provider: str, url: str) -> None:
    llm = make_llm(provider, {"model": "m"})
    assert isinstance(llm, OpenAICompatibleLLM)
    assert llm.base_url == url


def test_mem0_base_url_names() -> None:
    llm = make_llm("ollama", {"model": "m", "ollama_base_url": "http://gpu-box:11434"})
    assert isinstance(llm, OpenAICompatibleLLM)
    assert llm.base_url == "http://gpu-box:11434/v1"
    llm = make_llm("openai", {"api_key": "k", "openai_base_url": "http://proxy:4000/v1/"})
    assert isinstance(llm, OpenAICompatibleLLM)
    assert llm.base_url == "http://proxy:4000/v1"
    with pytest.raises(ConfigError, match="conflicting"):
        make_llm("vllm", {"model": "m", "base_url": "http://a/v1", "vllm_base_url": "http://b/v1"})


def test_openai_compatible_needs_a_base_url() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        make_llm("openai_compatible", {"model": "m"})


def test_unknown_provider() -> None:
    with pytest.raises(UnknownProviderError) as info:
        make_llm("gpt5-direct", {})
    assert isinstance(info.value, ConfigError)
    for name in ("ollama", "anthropic", "openrouter", "scripted"):
        assert name in str(info.value)


def test_unknown_keys_list_the_accepted_ones() -> None:
    with pytest.raises(ConfigError) as info:
        make_llm("ollama", {"model": "m", "temprature": 0.1})
    message = str(info.value)
    assert "temprature" in message
    for key in ("temperature", "base_url", "structured_output", "max_retries"):
        assert key in message


@pytest.mark.parametrize(
    "options",
    [
        {"temperature": 3},
        {"temperature": "hot"},
        {"top_p": 1.5},
        {"max_tokens": 0},
        {"max_tokens": True},
        {"timeout": 0},
        {"max_retries": -1},
        {"structured_output": "xml"},
        {"vision": "yes"},
        {"headers": {"X": 1}},
        {"base_url": "ftp://host/v1"},
        {"api_key": 123},
        {"model": ""},
    ],
)
def test_bad_option_values(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        make_llm("vllm", {"model": "m", **options})


def test_config_must_be_a_mapping() -> None:
    with pytest.raises(ConfigError):
        make_llm("ollama", ["model", "m"])  # type: ignore[arg-type]


def test_local_provider_without_model_says_how() -> None:
    with pytest.raises(ConfigError, match="ENGRAM_LLM=ollama:MODEL"):
        make_llm("ollama", {})


# ------------------------------------------------------------ anthropic

_HAS_ANTHROPIC = importlib.util.find_spec("anthropic") is not None


@pytest.mark.skipif(_HAS_ANTHROPIC, reason="the anthropic extra is installed")
def test_anthropic_without_the_extra_names_it() -> None:
    with pytest.raises(ConfigError, match=r"engramdb\[anthropic\]"):
        make_llm("anthropic", {"model": "claude-x", "api_key": "k"})


def test_anthropic_unknown_keys_are_checked_before_import() -> None:
    with pytest.raises(ConfigError, match="top_k"):
        make_llm("anthropic", {"model": "claude-x", "top_k": 5})


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"model": "claude-x"}, "ANTHROPIC_API_KEY"),
        ({"api_key": "k"}, "needs 'model'"),
        ({"model": "claude-x", "api_key": "k", "structured_output": "json_object"}, "JSON mode"),
        ({"model": "claude-x", "api_key": "k", "temperature": 1.5}, "temperature"),
        ({"model": "claude-x", "api_key": "k", "base_url": "api.anthropic.com"}, "http"),
    ],
)
def test_anthropic_config_is_checked_even_without_the_sdk(
    options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        make_llm("anthropic", options)


def test_anthropic_message_conversion() -> None:
    system, turns = to_anthropic_messages(
        [
            {"role": "system", "content": "rules"},
            {"role": "user", "content": "a"},
            {"role": "user", "content": "b"},
            {"role": "assistant", "content": None},
            {"role": "assistant", "content": "c"},
            {"role": "tool", "content": "d"},
            *IMAGE,
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}],
            },
        ]
    )
    assert system == "rules"
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert turns[0]["content"] == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    last = turns[2]["content"]
    assert last[0] == {"type": "text", "text": "d"}
    assert last[2] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
    }
    assert last[3] == {"type": "image", "source": {"type": "url", "url": "https://x/cat.png"}}


def test_anthropic_request_forces_a_tool_for_schemas() -> None:
    request = build_anthropic_request(
        HI, model="claude-x", mode="json_schema", schema=SCHEMA, schema_name="facts"
    )
    assert request["tools"][0]["input_schema"] == SCHEMA
    assert request["tool_choice"] == {"type": "tool", "name": "facts"}
    assert request["max_tokens"] > 0
    assert "system" not in request
    text_mode = build_anthropic_request(HI, model="claude-x", mode="text", schema=SCHEMA)
    assert "tools" not in text_mode
    assert '"facts"' in text_mode["system"]


def test_anthropic_reply_parsing() -> None:
    reply = {
        "model": "claude-x-2025",
        "content": [
            {"type": "text", "text": "thinking aloud"},
            {"type": "tool_use", "name": "facts", "input": {"facts": ["é"]}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 2},
    }
    parsed = parse_anthropic_message(reply, url="u", model="claude-x", tool_name="facts")
    assert json.loads(parsed.text) == {"facts": ["é"]}
    assert parsed.usage == Usage(15, 2)
    assert parsed.model == "claude-x-2025"
    plain = parse_anthropic_message(reply, url="u", model="claude-x")
    assert plain.text == "thinking aloud"
    with pytest.raises(LLMRefusalError):
        parse_anthropic_message(
            {"content": [], "stop_reason": "refusal"}, url="u", model="claude-x"
        )
    with pytest.raises(LLMResponseError):
        parse_anthropic_message({"type": "error"}, url="u", model="claude-x")
    no_usage = parse_anthropic_message({"content": []}, url="u", model="claude-x")
    assert (no_usage.usage, no_usage.usage_reported) == (Usage(0, 0), False)


@pytest.mark.skipif(not _HAS_ANTHROPIC, reason="needs the anthropic extra")
def test_anthropic_against_the_wire_server(openai_server: WireServer) -> None:
    def messages_api(req: Any) -> Reply:
        assert req.path == "/v1/messages"
        tool = req.json.get("tool_choice", {}).get("name")
        content = (
            [{"type": "tool_use", "id": "t1", "name": tool, "input": {"facts": []}}]
            if tool
            else [{"type": "text", "text": "hello"}]
        )
        return Reply(
            body={
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-x",
                "content": content,
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 3, "output_tokens": 1},
            }
        )

    openai_server.handler = messages_api
    llm = AnthropicLLM("claude-x", api_key=KEY, base_url=f"http://127.0.0.1:{openai_server.port}")
    with llm:
        assert llm.complete(HI).text == "hello"
        assert llm.complete(HI, schema=SCHEMA).text == '{"facts": []}'
    # SDK versions differ in the header they put the key in.
    sent = openai_server.last.headers
    assert KEY in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))
    assert asyncio.run(llm.acomplete(HI)).usage == Usage(3, 1)
    openai_server.handler = None
    openai_server.reply(status=401, error=f"bad key {KEY}")
    with pytest.raises(LLMAuthError) as info:
        llm.complete(HI)
    assert KEY not in str(info.value)


# ------------------------------------------------------------- scripted


def test_scripted_replays_in_order_and_records() -> None:
    llm = ScriptedLLM(["first", {"facts": ["x"]}, lambda messages: messages[-1]["content"] * 2])
    messages = [{"role": "user", "content": "ab"}]
    assert llm.complete(messages).text == "first"
    second = llm.complete(messages, schema=SCHEMA, schema_name="facts", temperature=0.0)
    assert json.loads(second.text) == {"facts": ["x"]}
    assert second.mode == "json_schema"
    messages[0]["content"] = "cd"  # recorded calls are copies
    assert llm.complete(messages).text == "cdcd"
    calls = llm.calls
    assert [c.messages[0]["content"] for c in calls] == ["ab", "ab", "cd"]
    assert calls[1].schema == SCHEMA
    assert calls[1].schema_name == "facts"
    assert calls[1].temperature == 0.0
    assert llm.remaining == 0


def test_scripted_exhaustion_is_clear() -> None:
    llm = ScriptedLLM(["only"])
    llm.complete(HI)
    with pytest.raises(LLMScriptError, match="no response left for call 2"):
        llm.complete(HI)
    assert isinstance(LLMScriptError("x"), LLMError)
    llm.add("more")
    assert llm.complete(HI).text == "more"


def test_scripted_exceptions_and_stats() -> None:
    llm = ScriptedLLM([LLMTimeoutError("simulated"), "x" * 40])
    with pytest.raises(LLMTimeoutError):
        llm.complete(HI)
    result = llm.complete([{"role": "user", "content": "y" * 80}])
    assert result.usage == Usage(20, 10)
    stats = llm.stats()
    assert (stats["calls"], stats["errors"], stats["completion_tokens"]) == (2, 1, 10)


def test_scripted_async_and_factory() -> None:
    llm = make_llm("scripted", {"responses": ["a", "b"], "model": "fake"})
    assert isinstance(llm, ScriptedLLM)
    assert llm.model == "fake"

    async def main() -> list[str]:
        results = [await llm.acomplete(HI), await llm.acomplete(HI)]
        await llm.aclose()
        return [r.text for r in results]

    assert asyncio.run(main()) == ["a", "b"]
    with pytest.raises(TypeError):
        ScriptedLLM("not a list")


def test_scripted_validates_messages() -> None:
    with pytest.raises(MessagesError):
        ScriptedLLM(["x"]).complete([{"content": "no role"}])


# ----------------------------------------------------- the public face


def test_every_llm_satisfies_the_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(ScriptedLLM([]), LLM)
    assert isinstance(make_llm("ollama", {"model": "m"}), LLM)


def test_public_names() -> None:
    assert set(llms.__all__) == {
        "ENV_VAR",
        "LLM",
        "STRUCTURED_MODES",
        "SUPPORTED_LLMS",
        "AnthropicLLM",
        "Completion",
        "OpenAICompatibleLLM",
        "ScriptEntry",
        "ScriptedCall",
        "ScriptedLLM",
        "StructuredMode",
        "Usage",
        "llm_from_env",
        "make_llm",
        "parse_llm_spec",
    }
    for name in llms.__all__:
        assert getattr(llms, name) is not None
    assert set(llms.SUPPORTED_LLMS) >= {
        "openai",
        "ollama",
        "vllm",
        "lmstudio",
        "llamacpp",
        "groq",
        "together",
        "deepseek",
        "openrouter",
        "anthropic",
        "scripted",
    }


def test_importing_does_not_import_the_anthropic_sdk() -> None:
    import subprocess
    import sys

    code = "import sys, engramdb.llms; print('anthropic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------- pure helpers


def test_retry_policy() -> None:
    policy = RetryPolicy(max_retries=3, backoff=1.0, max_delay=5.0)
    assert [policy.next_delay(a, jitter=1.0) for a in range(4)] == [1.0, 2.0, 4.0, None]
    assert policy.next_delay(10 - 10, jitter=0.5) == 0.5
    assert RetryPolicy(max_retries=9, backoff=1.0, max_delay=5.0).next_delay(5, jitter=1) == 5.0
    assert policy.next_delay(0, retry_after=2.5) == 2.5
    assert policy.next_delay(0, retry_after=6) is None  # longer than we are willing to wait
    assert policy.next_delay(3, retry_after=0) is None  # out of retries
    assert 0.5 <= (policy.next_delay(0) or 0) <= 1.0


def test_parse_retry_after() -> None:
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "2"}) == 2.0
    assert parse_retry_after({"retry-after": "1.5", "retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after": "-1"}) is None
    assert parse_retry_after({"retry-after": "soon"}) is None
    date = "Wed, 21 Oct 2015 07:28:10 GMT"
    assert parse_retry_after({"retry-after": date}, now=1445412480.0) == 10.0
    assert parse_retry_after({"retry-after": date}, now=1445412499.0) == 0.0


def test_status_helpers() -> None:
    assert [is_retryable_status(s) for s in (400, 401, 408, 409, 429, 500, 501, 503)] == [
        False,
        False,
        True,
        True,
        True,
        True,
        False,
        True,
    ]
    assert reply_status(200, b'{"choices": []}') == 200
    assert reply_status(200, b'{"error": {"message": "x", "code": 429}}') == 429
    assert reply_status(200, b'{"error": "x"}') == 502
    assert reply_status(404, b'{"error": "x"}') == 404
    body = json.dumps({"error": {"message": UNSUPPORTED_SCHEMA}}).encode()
    assert is_unsupported_response_format(400, body)
    assert not is_unsupported_response_format(500, body)
    assert not is_unsupported_response_format(400, b'{"error": "model not found"}')
    assert is_unsupported_response_format(400, b'{"detail": "guided_json not available"}')


def test_redaction_and_body_description() -> None:
    assert redact(f"key {KEY} again {KEY}", [KEY, None]) == "key *** again ***"
    assert redact("a b c", ["b"]) == "a b c"  # too short to be a secret
    assert describe_body(b"") == "an empty body"
    assert describe_body(b"<html><body><h1>Not Found</h1></body></html>").startswith(
        "an HTML page ('Not Found')"
    )
    assert describe_body(b"plain") == "'plain'"


def test_wire_server_serves_models_and_reports_handler_errors() -> None:
    import httpx

    with WireServer() as server:
        server.models = ["a", "b"]
        data = httpx.get(server.base_url + "/models").json()
        assert [m["id"] for m in data["data"]] == ["a", "b"]
        assert httpx.get(server.base_url + "/nope").status_code == 404

        def broken(req: Any) -> Reply:
            raise RuntimeError("bug in test handler")

        server.handler = broken
        response = httpx.post(server.base_url + "/chat/completions", json={"messages": []})
        assert response.status_code == 500
        assert "bug in test handler" in response.text
        assert len(server.errors) == 1
        server.reset()
        assert server.errors == [] and server.requests == []
        server.reply({"json": True})
        reply = httpx.post(server.base_url + "/chat/completions", json={"model": "q"}).json()
        assert reply["choices"][0]["message"]["content"] == '{"json": true}'
        assert reply["model"] == "q"
        assert server.pending == 0
