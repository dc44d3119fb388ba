"""Prompt building: a static system message first, the per-call request last.

The system message of each prompt is read from a versioned text file and
sent byte-identical on every call, so providers that cache prompt
prefixes reuse it. Everything that varies (date, instructions, memories,
messages) goes into the one user message after it, with the untrusted
parts inside tagged blocks that their contents cannot close.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterable, Sequence
from importlib import resources

from engramdb.extract.ids import IdMap
from engramdb.extract.types import AdditiveContext, ChatMessage, KnownMemory
from engramdb.nlp.reltime import annotate

__all__ = [
    "ADDITIVE_VARIANTS",
    "LOCAL_PROVIDERS",
    "PROMPT_FILES",
    "additive_variant",
    "build_additive_prompt",
    "build_fact_prompt",
    "build_procedural_prompt",
    "build_update_prompt",
    "load_prompt",
    "load_static_messages",
    "observation_date",
]

PROMPT_FILES = {
    "additive": "additive_v2.txt",
    "additive_compact": "additive_compact_v2.txt",
    "facts": "facts_v1.txt",
    "update": "update_v1.txt",
    "procedural": "procedural_v1.txt",
    "vision": "vision_v1.txt",
}
"""The prompt file of each kind; a changed prompt gets a new version number."""

ADDITIVE_VARIANTS = {"standard": "additive", "compact": "additive_compact"}
"""The additive prompt's variants: ``standard`` (full rules and an inline
example) and ``compact`` (short numbered rules, the example as a chat turn
pair: what small local models follow; see docs/extraction.md)."""

LOCAL_PROVIDERS = frozenset({"llamacpp", "ollama", "lmstudio"})
"""Providers whose ``auto`` additive prompt is ``compact``: servers people run
small models on."""


def additive_variant(setting: str, provider: str | None) -> str:
    """The additive prompt variant for ``extraction.prompt`` = ``setting`` and an LLM provider."""
    if setting != "auto":
        if setting not in ADDITIVE_VARIANTS:
            raise ValueError(
                f"extraction.prompt must be auto or one of {', '.join(ADDITIVE_VARIANTS)}"
            )
        return setting
    return "compact" if provider in LOCAL_PROVIDERS else "standard"


# A prompt file may carry a worked example after its rules, sent as a user
# message and the assistant's reply: small models imitate a chat turn far
# more faithfully than an example quoted inside the system message.
_EXAMPLE_REQUEST = "=== example request ==="
_EXAMPLE_REPLY = "=== example reply ==="

# The tags that delimit blocks in the per-call message. Data containing one of
# them gets its "<" swapped for a look-alike, so a message cannot close its
# block and continue as instructions or fake a message from someone else.
_TAGS = (
    "application_instructions",
    "known_memories",
    "recent_conversation",
    "new_messages",
    "conversation",
    "message",
    "existing_memories",
    "new_facts",
    "agent_run",
)
_TAG = re.compile(r"<(\s*/?\s*(?:" + "|".join(_TAGS) + r"))(?![A-Za-z0-9_])", re.I)

# Characters that render as nothing: zero-width spaces, bidirectional
# overrides, Unicode "tag" characters (which smuggle invisible text that
# some models read as instructions) and C0/C1 controls other than tab,
# newline and carriage return. Zero-width (non-)joiners stay: scripts such
# as Persian and Devanagari and emoji sequences need them.
INVISIBLE = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u00ad\u180e\u200b\u200e\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)
_SPACE = re.compile(r"\s+")
_BLANK_LINES = re.compile(r"\n[ \t]*\n(?:[ \t]*\n)+")


@functools.cache
def load_prompt(kind: str) -> str:
    """Return the static system text of prompt ``kind`` (a key of :data:`PROMPT_FILES`).

    Read from the package once per process. Trailing whitespace is
    stripped so an editor's final newline does not change the bytes sent.
    """
    return load_static_messages(kind)[0]["content"]


@functools.cache
def _static(kind: str) -> tuple[tuple[str, str], ...]:
    path = resources.files("engramdb.extract").joinpath("prompts", PROMPT_FILES[kind])
    text = path.read_text(encoding="utf-8")
    system, _, example = text.partition(_EXAMPLE_REQUEST)
    if not example:
        return (("system", system.strip()),)
    request, _, reply = example.partition(_EXAMPLE_REPLY)
    if not reply.strip():
        raise ValueError(f"prompt file {PROMPT_FILES[kind]} has an example request but no reply")
    return (("system", system.strip()), ("user", request.strip()), ("assistant", reply.strip()))


def load_static_messages(kind: str) -> list[dict[str, str]]:
    """The messages every call of prompt ``kind`` starts with, byte-identical each time.

    The system message, then, when the prompt file has one, a worked
    example as a user message and the assistant's reply.
    """
    return [{"role": role, "content": content} for role, content in _static(kind)]


def _data(text: str) -> str:
    """Make untrusted text safe to place inside a block (line breaks kept)."""
    text = INVISIBLE.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _TAG.sub("\u2039\\1", _BLANK_LINES.sub("\n\n", text)).strip()


def _line(text: str) -> str:
    """Put untrusted text on one line: a memory text cannot start a fake "[7] ..." line."""
    return _SPACE.sub(" ", _data(text)).strip()


def _attr(text: str, limit: int = 80) -> str:
    """Return a value for a tag attribute: one line, no quotes or angle brackets."""
    cleaned = _line(text).replace('"', "'").replace("<", "").replace(">", "")
    return cleaned[:limit].strip()


def _day(timestamp: str | None) -> str | None:
    """Return ``YYYY-MM-DD`` (UTC) of an ISO-8601 timestamp; ``None`` if absent or bad."""
    if not timestamp:
        return None
    try:
        text = timestamp.strip()
        when = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except (ValueError, TypeError):
        return None
    if when.tzinfo is not None:
        when = when.astimezone(dt.UTC)
    return when.date().isoformat()


def observation_date(
    messages: Sequence[ChatMessage],
    timestamp: str | None = None,
    *,
    today: dt.date | None = None,
) -> dt.date:
    """Return the day the new messages were written: what relative dates count from.

    The latest day among the messages' own timestamps, with ``timestamp``
    (the call's) standing in for messages that have none; ``today`` (UTC
    by default) only when no time is known at all. Imported history thus
    gets the dates it was written on, not the day of the import.
    """
    days = [day for day in (_day(m.timestamp or timestamp) for m in messages) if day is not None]
    if not days and timestamp is not None:
        days = [d for d in (_day(timestamp),) if d is not None]
    if days:
        return dt.date.fromisoformat(max(days))
    return today if today is not None else dt.datetime.now(dt.UTC).date()


def _speaker(message: ChatMessage) -> str:
    if message.name and _attr(message.name):
        return _attr(message.name)
    return {"user": "the user", "assistant": "the assistant"}.get(
        message.role, _attr(message.role) or "unknown"
    )


def _messages(messages: Iterable[ChatMessage], hints: dt.date | None = None) -> str:
    """The messages as tagged blocks; with ``hints``, relative times get their dates.

    ``hints`` is the day a message without a date of its own was written
    (the observation date); ``None`` shows the text as it is.
    """
    parts = []
    for message in messages:
        head = f'<message speaker="{_speaker(message)}" role="{_attr(message.role, 20)}"'
        day = _day(message.timestamp)
        if day:
            head += f' date="{day}"'
        content = message.content
        if hints is not None:
            content = annotate(content, dt.date.fromisoformat(day) if day else hints)
        parts.append(f"{head}>\n{_data(content) or '(empty)'}\n</message>")
    return "\n".join(parts) if parts else "(none)"


def _memories(memories: Iterable[KnownMemory], ids: IdMap) -> str:
    lines = []
    for memory in memories:
        day = _day(memory.observed_at)
        suffix = f" ({day})" if day else ""
        lines.append(f"[{ids.small(memory.id)}] {_line(memory.text)}{suffix}")
    return "\n".join(lines) if lines else "(none)"


def _unique(memories: Iterable[KnownMemory]) -> list[KnownMemory]:
    seen: set[str] = set()
    out = []
    for memory in memories:
        if memory.id not in seen:
            seen.add(memory.id)
            out.append(memory)
    return out


def _instructions(
    custom_instructions: str | None, includes: str | None, excludes: str | None
) -> str:
    # The application's own words: trusted, so only normalised, but still kept
    # from closing the block so the request keeps its shape.
    lines = []
    if custom_instructions and custom_instructions.strip():
        lines.append(_data(custom_instructions))
    if includes and includes.strip():
        lines.append(f"Remember in particular: {_data(includes)}")
    if excludes and excludes.strip():
        lines.append(f"Do not remember: {_data(excludes)}")
    if not lines:
        return ""
    return "<application_instructions>\n" + "\n".join(lines) + "\n</application_instructions>\n\n"


def _system(kind: str) -> dict[str, str]:
    return {"role": "system", "content": load_prompt(kind)}


def build_additive_prompt(
    ctx: AdditiveContext, *, variant: str = "standard", time_hints: bool = True
) -> tuple[list[dict[str, str]], IdMap]:
    """Build the messages of one additive extraction call, and the ids they show.

    Returns the static messages of ``variant`` (a key of
    :data:`ADDITIVE_VARIANTS`; the same bytes on every call), then one user
    message with the observation date, the application's instructions, the
    known memories (recent, then related, each real id once, numbered from
    0), the recent conversation and the new messages. With ``time_hints``,
    relative times in the messages carry their dates
    (:mod:`engramdb.nlp.reltime`). Map the reply's ids back with the
    returned :class:`IdMap`.
    """
    if variant not in ADDITIVE_VARIANTS:
        raise ValueError(f"additive prompt variant must be one of {', '.join(ADDITIVE_VARIANTS)}")
    known = _unique([*ctx.recent_memories, *ctx.related_memories])
    ids = IdMap.from_memories(known)
    hints = ctx.observation_date if time_hints else None
    request = (
        f"Observation date: {ctx.observation_date.isoformat()}\n\n"
        + _instructions(ctx.custom_instructions, ctx.includes, ctx.excludes)
        + f"<known_memories>\n{_memories(known, ids)}\n</known_memories>\n\n"
        + "<recent_conversation>\n"
        + f"{_messages(ctx.recent_messages, hints)}\n</recent_conversation>\n\n"
        + f"<new_messages>\n{_messages(ctx.new_messages, hints)}\n</new_messages>\n\n"
        + 'Reply with the JSON object {"memory": [...]} for the new messages.'
    )
    static = load_static_messages(ADDITIVE_VARIANTS[variant])
    return [*static, {"role": "user", "content": request}], ids


def build_fact_prompt(
    messages: Sequence[ChatMessage],
    observation_date: dt.date,
    custom_instructions: str | None = None,
    includes: str | None = None,
    excludes: str | None = None,
    *,
    time_hints: bool = True,
) -> list[dict[str, str]]:
    """Build the consolidating mode's first call: list the facts of ``messages``.

    ``time_hints`` as in :func:`build_additive_prompt`.
    """
    hints = observation_date if time_hints else None
    request = (
        f"Observation date: {observation_date.isoformat()}\n\n"
        + _instructions(custom_instructions, includes, excludes)
        + f"<conversation>\n{_messages(messages, hints)}\n</conversation>\n\n"
        + 'Reply with the JSON object {"facts": [...]} for this conversation.'
    )
    return [_system("facts"), {"role": "user", "content": request}]


def build_update_prompt(
    facts: Sequence[str],
    existing: Sequence[KnownMemory],
    observation_date: dt.date,
) -> tuple[list[dict[str, str]], IdMap]:
    """Build the consolidating mode's second call: ADD/UPDATE/DELETE/NONE per fact.

    The existing memories are numbered from 0 (each real id once); the
    returned :class:`IdMap` knows their texts, so :func:`parse_update`
    can check the ``old_memory`` the model quotes.
    """
    known = _unique(existing)
    ids = IdMap.from_memories(known)
    fact_lines = "\n".join(f"- {_line(f)}" for f in facts if _line(f)) or "(none)"
    request = (
        f"Observation date: {observation_date.isoformat()}\n\n"
        f"<existing_memories>\n{_memories(known, ids)}\n</existing_memories>\n\n"
        f"<new_facts>\n{fact_lines}\n</new_facts>\n\n"
        'Reply with the JSON object {"memory": [...]} for these facts.'
    )
    return [_system("update"), {"role": "user", "content": request}], ids


def build_procedural_prompt(
    messages: Sequence[ChatMessage],
    observation_date: dt.date,
    custom_instructions: str | None = None,
    *,
    time_hints: bool = True,
) -> list[dict[str, str]]:
    """One call that turns an agent's run into a procedural memory.

    ``time_hints`` as in :func:`build_additive_prompt`.
    """
    hints = observation_date if time_hints else None
    request = (
        f"Observation date: {observation_date.isoformat()}\n\n"
        + _instructions(custom_instructions, None, None)
        + f"<agent_run>\n{_messages(messages, hints)}\n</agent_run>\n\n"
        + 'Reply with the JSON object {"summary": "..."} for this run.'
    )
    return [_system("procedural"), {"role": "user", "content": request}]
