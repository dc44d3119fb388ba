"""An LLM that replays scripted responses: the LLM boundary in tests.

Everything above the LLM port (prompt building, parsing, storage) runs for
real; only the model's words are fixed in advance.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engramdb.errors import LLMScriptError
from engramdb.llms.base import ClosingMixin, Completion, Usage, UsageCounter, check_messages

__all__ = ["ScriptEntry", "ScriptedCall", "ScriptedLLM"]

ScriptEntry = (
    str
    | Mapping[str, Any]
    | Callable[[list[dict[str, Any]]], "str | Mapping[str, Any]"]
    | BaseException
)
"""One scripted reply: text, a dict (sent as JSON), a function of the call's
messages returning either, or an exception to raise instead of replying."""


@dataclass(frozen=True)
class ScriptedCall:
    """One call a :class:`ScriptedLLM` received (messages deep-copied)."""

    messages: list[dict[str, Any]]
    schema: dict[str, Any] | None
    schema_name: str
    temperature: float | None
    max_tokens: int | None


def _rough_tokens(text: str) -> int:
    # About four characters per token for English: close enough to exercise
    # the token accounting without a tokenizer.
    return len(text) // 4


def _message_text(messages: list[dict[str, Any]]) -> str:
    parts: list[str] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(
                str(part["text"])
                for part in content
                if isinstance(part, Mapping) and "text" in part
            )
    return "\n".join(parts)


class ScriptedLLM(ClosingMixin):
    """Replays ``responses`` in order, one per call, and records every call.

    Dict responses are JSON-encoded; a callable is called with the call's
    messages and its result used; an exception instance is raised (to test
    error handling). Calling past the end raises :class:`LLMScriptError`.
    Usage is faked as ``len(text) // 4`` tokens each way so that token
    accounting runs. Thread-safe; ``acomplete`` works too.
    """

    CONFIG_KEYS: tuple[str, ...] = ("model", "responses")
    """Config keys accepted by :func:`engramdb.llms.make_llm` for ``scripted``."""

    def __init__(self, responses: Sequence[ScriptEntry] = (), *, model: str = "scripted") -> None:
        """Start with ``responses`` queued; :meth:`add` queues more later."""
        if isinstance(responses, str | bytes | Mapping):
            # A lone string would otherwise be replayed one character per call.
            raise TypeError("ScriptedLLM takes a sequence of responses; wrap one in a list")
        self._model = model
        self._script: deque[ScriptEntry] = deque(responses)
        self._calls: list[ScriptedCall] = []
        self._lock = threading.Lock()
        self._counter = UsageCounter()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ScriptedLLM:
        """Build from an llm config dict: ``responses`` and ``model``, both optional."""
        return cls(config.get("responses", ()), model=config.get("model", "scripted"))

    @property
    def model(self) -> str:
        """The name given at construction (``"scripted"`` by default)."""
        return self._model

    @property
    def calls(self) -> list[ScriptedCall]:
        """Every call received so far, oldest first (a copy of the list)."""
        with self._lock:
            return list(self._calls)

    @property
    def remaining(self) -> int:
        """How many scripted responses are still unused."""
        with self._lock:
            return len(self._script)

    def add(self, *responses: ScriptEntry) -> None:
        """Queue more responses after the ones still unused."""
        with self._lock:
            self._script.extend(responses)

    def stats(self) -> dict[str, int | float]:
        """Return running totals, with the same keys as the real clients' ``stats()``."""
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
        """Record the call and return the next scripted response.

        Raises:
            LLMScriptError: no scripted response is left.
            MessagesError: ``messages`` has the wrong shape.
        """
        started = time.monotonic()
        checked = check_messages(messages, vision=True)
        record = ScriptedCall(
            messages=copy.deepcopy(checked),
            schema=copy.deepcopy(schema),
            schema_name=schema_name,
            temperature=temperature,
            max_tokens=max_tokens,
        )
        self._counter.started()
        self._counter.request()
        with self._lock:
            self._calls.append(record)
            number = len(self._calls)
            entry = self._script.popleft() if self._script else None
        try:
            if entry is None:
                raise LLMScriptError(
                    f"ScriptedLLM {self._model!r} has no response left for call {number} "
                    f"({number - 1} scripted); add responses, or find why the code under "
                    "test calls the LLM more often than expected",
                    model=self._model,
                )
            if isinstance(entry, BaseException):
                raise entry
            reply = entry(copy.deepcopy(checked)) if callable(entry) else entry
            text = reply if isinstance(reply, str) else json.dumps(reply, ensure_ascii=False)
        except Exception:
            self._counter.failed()
            raise
        completion = Completion(
            text=text,
            usage=Usage(_rough_tokens(_message_text(checked)), _rough_tokens(text)),
            model=self._model,
            latency_s=time.monotonic() - started,
            mode="json_schema" if schema is not None else "text",
        )
        self._counter.succeeded(completion, usage_reported=True)
        return completion

    async def acomplete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: dict[str, Any] | None = None,
        schema_name: str = "response",
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """Like :meth:`complete` (there is no I/O to await)."""
        return self.complete(
            messages,
            schema=schema,
            schema_name=schema_name,
            temperature=temperature,
            max_tokens=max_tokens,
        )

    def close(self) -> None:
        """Nothing to release; present for the :class:`~engramdb.llms.LLM` protocol."""

    async def aclose(self) -> None:
        """Nothing to release; present for the :class:`~engramdb.llms.LLM` protocol."""

    def __repr__(self) -> str:
        return f"ScriptedLLM(model={self._model!r}, remaining={self.remaining})"
