"""Long-term memory for OpenAI Agents SDK agents, on engramdb.

Two ways in, usable together:

* :func:`memory_tools` gives an agent function tools — ``search_memories``,
  ``remember``, ``update_memory`` and ``forget`` — bound to a scope the
  application chooses (fixed ids, or ids taken from the run's context). The
  tools take no scope arguments and every call runs through a scoped view
  (:meth:`engramdb.Memory.scoped`), so the model can neither name nor reach
  another user's memories, not even by guessing an id.
* :func:`remember_run` / :func:`aremember_run` add what was said in a
  finished ``Runner.run`` to engramdb, for applications that record every
  turn rather than leave remembering to the model.

Both work with :class:`engramdb.Memory` (calls run in a worker thread) and
:class:`engramdb.AsyncMemory` (calls are awaited); neither blocks the event
loop. Needs the ``agents`` extra: ``pip install 'engramdb[agents]'``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from agents import FunctionTool, ItemHelpers, MessageOutputItem, RunContextWrapper, Tool
from agents.result import RunResultBase
from agents.tool_context import ToolContext

from engramdb.core.validate import check_metadata
from engramdb.errors import (
    ExtractionError,
    MemoryNotFoundError,
    ScopeError,
    ValidationError,
)
from engramdb.memory import AsyncMemory, Memory

__all__ = [
    "TOOL_NAMES",
    "ScopeFromContext",
    "aremember_run",
    "memory_tools",
    "remember_run",
    "run_messages",
]

log = logging.getLogger("engramdb")

TOOL_NAMES = ("search_memories", "remember", "update_memory", "forget")
"""The tools :func:`memory_tools` can build, in the order it returns them."""

ScopeFromContext = Callable[[RunContextWrapper[Any]], Mapping[str, str | None]]
"""Gives one tool call's scope ids (user_id, agent_id, run_id) from its run context."""

_SCOPE_KEYS = ("user_id", "agent_id", "run_id")

_AnyMemory = Memory | AsyncMemory
_Run = Callable[[_AnyMemory, dict[str, Any]], Awaitable[dict[str, Any]]]


class _ArgumentError(Exception):
    """The model's arguments cannot be used; the message goes back to the model."""


def memory_tools(
    memory: Memory | AsyncMemory,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    scope_from_context: ScopeFromContext | None = None,
    include: Iterable[str] = TOOL_NAMES,
    infer: bool = False,
    metadata: Mapping[str, Any] | None = None,
    default_limit: int = 5,
    max_limit: int = 20,
    threshold: float | None = None,
) -> list[Tool]:
    """Function tools that give an agent long-term memory in one scope.

    The scope is the application's choice, never the model's: the ids given
    here, narrowed per call by ``scope_from_context(run_context)`` when given
    (for an agent defined once and run for many users, with the user in the
    run's ``context``). ``scope_from_context`` returning no id, or an id
    conflicting with a fixed one, fails the run (an application bug, not the
    model's). The tools have no scope parameters; a call that sends any
    argument the tool does not take (``user_id``, say) is refused with an
    error message to the model. Every call goes through a scoped view, so an
    id from another scope is "not found" for ``update_memory`` and ``forget``.

    The tools (``include`` picks some, e.g. ``("search_memories",)`` for
    read-only memory):

    * ``search_memories(query, limit)``: the most relevant memories, with
      their ids and scores; ``limit`` is ``default_limit`` when null and at
      most ``max_limit``; ``threshold`` drops weaker matches.
    * ``remember(text)``: stores the text verbatim (``infer=False``, the
      default: the model already wrote the fact) or, with ``infer=True`` and
      an LLM configured, lets engramdb extract memories from it; ``metadata``
      is attached to each memory it stores.
    * ``update_memory(memory_id, text)``: changes a memory's text (history
      keeps the old one).
    * ``forget(memory_id)``: soft-deletes a memory (restorable).

    Tool outputs are JSON. Bad arguments, unknown ids and input engramdb
    refuses come back to the model as ``"Error: ..."`` messages instead of
    failing the run; any other failure is logged on the ``engramdb`` logger
    and reported to the model without details, as the SDK does for its own
    function tools. The list is typed ``list[Tool]`` so that it can be passed
    as ``Agent(tools=...)``; each is a plain :class:`agents.FunctionTool`, on
    which ``needs_approval`` or ``description`` can be set freely.
    """
    if not isinstance(memory, Memory | AsyncMemory):
        raise TypeError(f"memory must be an engramdb Memory or AsyncMemory, not {memory!r}")
    names = list(include)
    unknown = sorted(set(names) - set(TOOL_NAMES))
    if unknown:
        raise ValueError(f"unknown memory tool(s) {unknown}; the tools are {list(TOOL_NAMES)}")
    if not 1 <= default_limit <= max_limit:
        raise ValueError("need 1 <= default_limit <= max_limit")
    base: _AnyMemory = memory
    if scope_from_context is None or any(v is not None for v in (user_id, agent_id, run_id)):
        # Without scope_from_context, at least one id is required (ScopeError).
        base = memory.scoped(user_id=user_id, agent_id=agent_id, run_id=run_id)
    toolbox = _Toolbox(
        base,
        scope_from_context,
        root=memory,
        infer=infer,
        metadata=check_metadata(metadata),
        default_limit=default_limit,
        max_limit=max_limit,
        threshold=threshold,
    )
    tools: list[Tool] = [toolbox.build(name) for name in TOOL_NAMES if name in names]
    return tools


class _Toolbox:
    """Builds the memory tools over one base view and runs their calls."""

    def __init__(
        self,
        base: _AnyMemory,
        scope_from_context: ScopeFromContext | None,
        *,
        root: _AnyMemory | None = None,
        infer: bool,
        metadata: dict[str, Any],
        default_limit: int,
        max_limit: int,
        threshold: float | None,
    ) -> None:
        self.base = base
        self.root = root if root is not None else base
        """The memory the per-call views are made from: the application's own, so a
        view names the run context's user with the fixed agent (a view made from the
        fixed agent's view would be an agent-only view, which names no user)."""
        self.scope_from_context = scope_from_context
        self.infer = infer
        self.metadata = metadata
        self.default_limit = default_limit
        self.max_limit = max_limit
        self.threshold = threshold

    # -- scope and calls -------------------------------------------------------------

    def view(self, ctx: RunContextWrapper[Any]) -> _AnyMemory:
        """The view one tool call runs in."""
        if self.scope_from_context is None:
            return self.base
        ids = dict(self.scope_from_context(ctx))
        extra = sorted(set(ids) - set(_SCOPE_KEYS))
        if extra:
            raise ScopeError(f"scope_from_context returned unknown keys {extra}")
        if all(v is None for v in ids.values()):
            # Falling back to the fixed ids alone would widen the scope (say, to
            # every user of an agent) exactly when the context lacks its user.
            raise ScopeError("scope_from_context returned no scope id for this run")
        fixed = self.base.within
        if fixed is not None:
            for kind, value in fixed.items():
                given = ids.get(kind)
                if given is not None and given != value:
                    raise ScopeError(
                        f"scope_from_context returned {kind}={given!r}; these tools are bound "
                        f"to {kind}={value!r}"
                    )
                ids[kind] = value
        return self.root.scoped(
            user_id=ids.get("user_id"), agent_id=ids.get("agent_id"), run_id=ids.get("run_id")
        )

    @staticmethod
    async def call(view: _AnyMemory, method: str, *args: Any, **kwargs: Any) -> Any:
        """``view.method(...)``: awaited on AsyncMemory, in a worker thread on Memory."""
        fn = getattr(view, method)
        if isinstance(view, AsyncMemory):
            return await fn(*args, **kwargs)
        return await asyncio.to_thread(fn, *args, **kwargs)

    # -- the tools -------------------------------------------------------------------

    def build(self, name: str) -> FunctionTool:
        """The tool called ``name`` (one of :data:`TOOL_NAMES`)."""
        memory_id = {
            "type": "string",
            "description": "The id of the memory, as search_memories returned it.",
        }
        if name == "search_memories":
            return self._tool(
                name,
                "Search your long-term memory of the user (facts, preferences, past "
                "events) for what is relevant to a query. Returns the best matches first, "
                "each with its id (for update_memory and forget) and a score in [0, 1].",
                {
                    "query": {
                        "type": "string",
                        "description": "What to look for, in natural language.",
                    },
                    "limit": {
                        "type": ["integer", "null"],
                        "description": f"How many memories to return (1 to {self.max_limit}); "
                        f"null for {self.default_limit}.",
                    },
                },
                self._search,
            )
        if name == "remember":
            return self._tool(
                name,
                "Store something worth knowing in later conversations, as one short, "
                "self-contained statement (e.g. 'Alice is allergic to peanuts'). Returns "
                "the stored memory's id; event NONE means it was already remembered.",
                {"text": {"type": "string", "description": "The statement to remember."}},
                self._remember,
            )
        if name == "update_memory":
            return self._tool(
                name,
                "Replace the text of a stored memory that changed or was wrong (find it "
                "with search_memories first). The old text is kept in its history.",
                {
                    "memory_id": memory_id,
                    "text": {"type": "string", "description": "The new, complete statement."},
                },
                self._update,
            )
        return self._tool(
            name,
            "Delete a stored memory that is wrong or that the user asked you to forget "
            "(find its id with search_memories first).",
            {"memory_id": memory_id},
            self._forget,
        )

    def _tool(
        self,
        name: str,
        description: str,
        properties: dict[str, dict[str, Any]],
        run: _Run,
    ) -> FunctionTool:
        allowed = tuple(properties)

        async def invoke(ctx: ToolContext[Any], raw: str) -> str:
            # Outside the try: a broken scope_from_context is the application's
            # bug and fails the run rather than being shown to the model.
            view = self.view(ctx)
            try:
                out = await run(view, _parse_arguments(raw, name, allowed))
            except _ArgumentError as exc:
                return f"Error: {exc}"
            except MemoryNotFoundError as exc:
                return (
                    f"Error: there is no memory with id {exc.memory_id!r}; "
                    "search_memories returns the ids you can use"
                )
            except ExtractionError:
                log.warning("memory tool %s: extraction failed", name, exc_info=True)
                return (
                    "Error: the text was kept, but extracting memories from it failed; "
                    "do not send it again"
                )
            except ValidationError as exc:
                return f"Error: {exc}"
            except Exception:
                log.exception("memory tool %s failed", name)
                return "Error: the memory tool failed; try again later"
            return json.dumps(out, ensure_ascii=False)

        return FunctionTool(
            name=name,
            description=description,
            params_json_schema={
                "type": "object",
                "properties": properties,
                "required": list(allowed),
                "additionalProperties": False,
            },
            on_invoke_tool=invoke,
            strict_json_schema=True,
        )

    async def _search(self, view: _AnyMemory, args: dict[str, Any]) -> dict[str, Any]:
        query = _string(args, "query")
        limit = _limit(args.get("limit"), self.default_limit, self.max_limit)
        found = await self.call(view, "search", query, top_k=limit, threshold=self.threshold)
        return {"results": [_hit(row) for row in found["results"]]}

    def _text(self, view: _AnyMemory, args: dict[str, Any]) -> str:
        text = _string(args, "text")
        most = view.config.limits.max_text_chars
        if len(text) > most:
            raise _ArgumentError(f"text is {len(text)} characters long; at most {most} fit")
        return text

    async def _remember(self, view: _AnyMemory, args: dict[str, Any]) -> dict[str, Any]:
        text = self._text(view, args)
        added = await self.call(
            view, "add", text, infer=self.infer, metadata=dict(self.metadata) or None
        )
        return {
            "results": [
                {"id": r["id"], "memory": r["memory"], "event": r["event"]}
                for r in added["results"]
            ]
        }

    async def _update(self, view: _AnyMemory, args: dict[str, Any]) -> dict[str, Any]:
        memory_id = _string(args, "memory_id")
        text = self._text(view, args)
        row = await self.call(view, "update", memory_id, text, reason="update_memory tool")
        return {"id": row["id"], "memory": row["memory"], "event": "UPDATE"}

    async def _forget(self, view: _AnyMemory, args: dict[str, Any]) -> dict[str, Any]:
        memory_id = _string(args, "memory_id")
        await self.call(view, "delete", memory_id, reason="forget tool")
        return {"id": memory_id, "event": "DELETE"}


# -- arguments -------------------------------------------------------------------------


def _parse_arguments(raw: str, tool: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    takes = ", ".join(allowed)
    try:
        args = json.loads(raw) if raw.strip() else {}
    except ValueError:
        raise _ArgumentError(
            f"the arguments are not valid JSON; {tool} takes one JSON object with {takes}"
        ) from None
    if not isinstance(args, dict):
        raise _ArgumentError(f"{tool} takes one JSON object with {takes}")
    unknown = sorted(set(args) - set(allowed))
    if unknown:
        message = f"{tool} takes only {takes}; unknown argument(s): {', '.join(unknown)}"
        if set(unknown) & set(_SCOPE_KEYS):
            message += (
                ". Whose memories these are is set by the application; a tool call cannot choose it"
            )
        raise _ArgumentError(message)
    return args


def _string(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if value is None:
        raise _ArgumentError(f"{key} is required")
    if not isinstance(value, str):
        raise _ArgumentError(f"{key} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise _ArgumentError(f"{key} is empty")
    return value.strip()


def _limit(value: object, default: int, most: int) -> int:
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _ArgumentError(f"limit must be an integer or null, got {value!r}")
    if value < 1:
        raise _ArgumentError(f"limit must be at least 1, got {value}")
    return min(value, most)


def _hit(row: dict[str, Any]) -> dict[str, Any]:
    score = row.get("score")
    return {
        "id": row["id"],
        "memory": row["memory"],
        "score": round(score, 3) if isinstance(score, float) else score,
        "created_at": row.get("created_at"),
    }


# -- a run's conversation ----------------------------------------------------------------


def run_messages(result: RunResultBase) -> list[dict[str, Any]]:
    """The new turn of a finished run as chat messages: the user's, then the agents' replies.

    From the run's input, the user messages after the last assistant message
    (with a replayed history or a ``Session``, that is the turn this run
    answered; with a string input, that string); from the run's new items,
    the text of every message an agent wrote. Tool calls, tool outputs and
    system or developer messages are left out.
    """
    items: list[Any] = list(ItemHelpers.input_to_new_input_list(result.input))
    last_reply = max(
        (n for n, entry in enumerate(items) if _role(entry) == "assistant"), default=-1
    )
    messages: list[dict[str, Any]] = []
    for entry in items[last_reply + 1 :]:
        if _role(entry) == "user":
            text = _content_text(entry.get("content"))
            if text:
                messages.append({"role": "user", "content": text})
    for item in result.new_items:
        if isinstance(item, MessageOutputItem):
            text = ItemHelpers.text_message_output(item).strip()
            if text:
                messages.append({"role": "assistant", "content": text})
    return messages


def _role(entry: object) -> str | None:
    if not isinstance(entry, Mapping) or entry.get("type", "message") != "message":
        return None
    role = entry.get("role")
    return role if isinstance(role, str) else None


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content.strip()
    if not isinstance(content, list):
        return ""
    parts = [
        part["text"]
        for part in content
        if isinstance(part, Mapping)
        and part.get("type") in ("input_text", "output_text", "text")
        and isinstance(part.get("text"), str)
    ]
    return "\n".join(parts).strip()


def remember_run(
    memory: Memory,
    result: RunResultBase,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    infer: bool = True,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Add a finished run's new turn (see :func:`run_messages`) to ``memory``.

    The mem0 way of remembering: after each ``Runner.run``, the application
    hands the conversation to engramdb. With an LLM configured and
    ``infer=True`` (the default) engramdb extracts the facts worth keeping;
    otherwise every message is stored verbatim. Returns what
    :meth:`engramdb.Memory.add` returns (``{"results": []}`` when the run
    has no text to remember).
    """
    if not isinstance(memory, Memory):
        raise TypeError("remember_run takes a Memory; use aremember_run with an AsyncMemory")
    messages = run_messages(result)
    if not messages:
        return {"results": []}
    return memory.add(
        messages,
        user_id=user_id,
        agent_id=agent_id,
        run_id=run_id,
        infer=infer,
        metadata=metadata,
    )


async def aremember_run(
    memory: AsyncMemory,
    result: RunResultBase,
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    infer: bool = True,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """:func:`remember_run` for an :class:`engramdb.AsyncMemory`."""
    if not isinstance(memory, AsyncMemory):
        raise TypeError("aremember_run takes an AsyncMemory; use remember_run with a Memory")
    messages = run_messages(result)
    if not messages:
        return {"results": []}
    return await memory.add(
        messages,
        user_id=user_id,
        agent_id=agent_id,
        run_id=run_id,
        infer=infer,
        metadata=metadata,
    )
