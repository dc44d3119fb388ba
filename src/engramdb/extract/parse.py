"""Reply parsing: repair, check the shape, clean, and map ids back.

The rules, for every parser: a reply that is unusable after the repairs
of :func:`repair_json` raises :class:`ReplyFormatError` (whose
``feedback`` drives the one retry); a usable reply yields what is valid
in it, and every item dropped or defaulted is named in ``warnings``.
Nothing from the reply reaches the result unchecked: ids only through
the :class:`IdMap` of the prompt, texts only cleaned and bounded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from engramdb.core.text import normalize_text
from engramdb.errors import ReplyFormatError
from engramdb.extract.ids import IdMap
from engramdb.extract.prompting import INVISIBLE
from engramdb.extract.repair import repair_json, strip_reasoning
from engramdb.extract.types import Attribution, Event, Extracted, Operation, ParseOutcome

__all__ = [
    "clean_text",
    "parse_additive",
    "parse_description",
    "parse_facts",
    "parse_procedural",
    "parse_update",
    "retry_messages",
]

T = TypeVar("T")

MAX_WARNINGS = 50
"""Warnings kept per reply; a hostile reply could otherwise produce millions."""
MAX_LINKS = 50
"""Linked ids read per item (a prompt shows about 40 memories)."""
RETRY_ECHO_CHARS = 4000
"""How much of a bad reply :func:`retry_messages` shows the model again."""

_ADDITIVE_SHAPE = (
    '{"memory": [{"text": "<one self-contained fact>", "attributed_to": "user" or '
    '"assistant", "link_kind": "updates" | "contradicts" | "follows_up" | "related", '
    '"linked_memory_ids": ["<id from known_memories>"]}]}\n'
    'When nothing is worth remembering, reply {"memory": []}.'
)
_FACTS_SHAPE = (
    '{"facts": ["<one self-contained fact>", ...]}\nWhen there is none, reply {"facts": []}.'
)
_UPDATE_SHAPE = (
    '{"memory": [{"event": "ADD" | "UPDATE" | "DELETE" | "NONE", "id": "<id from '
    'existing_memories; not for ADD>", "text": "<new text, for ADD and UPDATE>", '
    '"old_memory": "<current text, for UPDATE and DELETE>"}]}'
)
_PROCEDURAL_SHAPE = '{"summary": "Task: ...\\nSteps:\\n1. ...\\nOutcome: ...\\nContext: ..."}'

_ATTRIBUTIONS: dict[str, Attribution] = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "bot": "assistant",
    "model": "assistant",
    "agent": "assistant",
}
_EVENTS: dict[str, Event] = {
    "ADD": "ADD",
    "INSERT": "ADD",
    "CREATE": "ADD",
    "NEW": "ADD",
    "UPDATE": "UPDATE",
    "MODIFY": "UPDATE",
    "EDIT": "UPDATE",
    "REPLACE": "UPDATE",
    "DELETE": "DELETE",
    "REMOVE": "DELETE",
    "NONE": "NONE",
    "NOOP": "NONE",
    "NO_OP": "NONE",
    "NO-OP": "NONE",
    "NO_CHANGE": "NONE",
    "NOCHANGE": "NONE",
    "UNCHANGED": "NONE",
    "KEEP": "NONE",
}
_SPACE = re.compile(r"[ \t\f\v\u00a0\u2000-\u200a\u202f\u205f\u3000]+")
_ANY_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"[.!?\u3002\uff01\uff1f](?=\s|$)")  # also CJK full stops


class _Notes:
    """Warnings with a cap, so a hostile reply cannot flood the logs."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.hidden = 0

    def add(self, message: str) -> None:
        if len(self.items) < MAX_WARNINGS:
            self.items.append(message)
        else:
            self.hidden += 1

    def done(self) -> list[str]:
        if self.hidden:
            return [*self.items, f"... and {self.hidden} more warnings"]
        return self.items


def _show(value: object, limit: int = 40) -> str:
    """Return a short printable form of a reply value, for a warning."""
    text = repr(value) if not isinstance(value, str) else repr(value[: limit + 1])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clean_text(text: str, *, keep_lines: bool = False) -> tuple[str, bool]:
    """Remove invisible and control characters and tidy whitespace.

    Returns the cleaned text and whether invisible characters were removed
    (worth a repair note: they are a way to hide instructions in a fact).
    Whitespace runs become one space; with ``keep_lines`` line breaks are
    kept (at most one blank line in a row), otherwise the text is one line.
    """
    stripped = INVISIBLE.sub("", text)
    removed = len(stripped) != len(text)
    if keep_lines:
        lines = [_SPACE.sub(" ", line).strip() for line in stripped.splitlines()]
        out: list[str] = []
        for line in lines:
            if line or (out and out[-1]):
                out.append(line)
        return "\n".join(out).strip(), removed
    return _ANY_SPACE.sub(" ", stripped).strip(), removed


def _read(reply: str, shape: str) -> tuple[Any, list[str]]:
    """:func:`repair_json`, with the expected shape added to the retry feedback."""
    try:
        return repair_json(reply)
    except ReplyFormatError as exc:
        raise _format_error(str(exc), exc.feedback, shape) from None


def _format_error(message: str, reason: str, shape: str) -> ReplyFormatError:
    feedback = (
        f"{reason} Reply again with only one JSON object of this shape, and no other text:\n{shape}"
    )
    return ReplyFormatError(message, feedback=feedback)


def _field(item: Mapping[str, Any], names: Sequence[str], repairs: set[str]) -> tuple[bool, Any]:
    """Look up the first of ``names`` in ``item``, in any casing (noting other spellings)."""
    if names[0] in item:
        return True, item[names[0]]
    folded = {k.strip().casefold(): k for k in item if isinstance(k, str)}
    for name in names:
        key = folded.get(name)
        if key is not None:
            repairs.add(f"read key {_show(key)} as {names[0]!r}")
            return True, item[key]
    return False, None


def _top_list(
    value: Any,
    names: Sequence[str],
    item_keys: Sequence[str],
    repairs: set[str],
    shape: str,
) -> list[Any]:
    """Return the list of items a reply holds under ``names[0]`` (or a tolerated variant)."""
    if isinstance(value, list):
        repairs.add(f"read a bare list as the {names[0]!r} list")
        return value
    if not isinstance(value, dict):
        raise _format_error(
            f"the reply is {_a(value)}, not a JSON object",
            f"Your reply was {_a(value)}, not a JSON object.",
            shape,
        )
    found, items = _field(value, names, repairs)
    if not found:
        has_item_key, _ = _field(value, item_keys, set())
        if has_item_key:
            repairs.add(f"read a single item object as the {names[0]!r} list")
            return [value]
        raise _format_error(
            f"the reply has no {names[0]!r} list",
            f'Your reply had no "{names[0]}" key.',
            shape,
        )
    if isinstance(items, list):
        return items
    if items is None:
        repairs.add(f"read {names[0]!r}: null as an empty list")
        return []
    if isinstance(items, dict | str):
        repairs.add(f"read a single {_json_type(items)} as the {names[0]!r} list")
        return [items]
    raise _format_error(
        f"the reply's {names[0]!r} is {_a(items)}, not a list",
        f'In your reply, "{names[0]}" was {_a(items)}, not a list.',
        shape,
    )


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _a(value: object) -> str:
    """Return the JSON type of ``value`` with its article ("an object", "a list")."""
    kind = _json_type(value)
    return kind if kind == "null" else f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def _limit(items: list[Any], max_items: int, notes: _Notes) -> list[Any]:
    if len(items) > max_items:
        notes.add(f"the reply has {len(items)} items; only the first {max_items} were read")
        return items[:max_items]
    return items


class _Texts:
    """Checks item texts: type, invisible characters, emptiness, length, repeats."""

    def __init__(self, max_chars: int, notes: _Notes) -> None:
        self.max_chars = max_chars
        self.notes = notes
        self.seen: set[str] = set()
        self.invisible = 0

    def check(self, where: str, value: object, *, dedup: bool = True) -> str | None:
        """Return the cleaned text, or ``None`` (with a warning) if it cannot be kept."""
        if not isinstance(value, str):
            self.notes.add(f"{where}: the text is {_a(value)}, not a string; dropped")
            return None
        # A cheap bound before cleaning: invisible characters could only shorten it so much.
        if len(value) > 4 * self.max_chars + 1000:
            self.notes.add(
                f"{where}: the text is {len(value)} characters long (limit "
                f"{self.max_chars}); dropped, since a cut fact may be wrong"
            )
            return None
        text, removed = clean_text(value)
        if removed:
            self.invisible += 1
        if not text:
            self.notes.add(f"{where}: the text is empty; dropped")
            return None
        if len(text) > self.max_chars:
            self.notes.add(
                f"{where}: the text is {len(text)} characters long (limit "
                f"{self.max_chars}); dropped, since a cut fact may be wrong"
            )
            return None
        if dedup:
            key = normalize_text(text)
            if key in self.seen:
                self.notes.add(f"{where}: repeats an earlier item; dropped")
                return None
            self.seen.add(key)
        return text

    def report(self, repairs: set[str]) -> None:
        if self.invisible:
            repairs.add(f"removed invisible or control characters from {self.invisible} texts")


def _outcome(items: list[T], notes: _Notes, early: list[str], repairs: set[str]) -> ParseOutcome[T]:
    # Repairs made while reading the JSON come first, in order; those found while
    # checking items are sorted so equal replies give equal outcomes.
    return ParseOutcome(items, notes.done(), [*early, *sorted(repairs - set(early))])


def _none_usable(raw: list[Any], kept: list[Any], notes: _Notes, shape: str) -> None:
    """Raise when a reply listed items but none survived: worth the retry.

    An empty result must mean that the model said "nothing to remember",
    never that everything it said was unreadable.
    """
    if raw and not kept:
        reasons = "; ".join(notes.items[:3])
        raise _format_error(
            f"none of the {len(raw)} items in the reply is usable ({reasons})",
            f"None of the items in your reply could be used ({reasons}).",
            shape,
        )


def _attribution(
    where: str, item: Mapping[str, Any], notes: _Notes, repairs: set[str]
) -> Attribution:
    found, value = _field(item, ("attributed_to", "attribution"), repairs)
    if not found or value is None:
        notes.add(f"{where}: no attributed_to; assumed 'user'")
        return "user"
    if isinstance(value, str):
        folded = value.strip().casefold()
        role = _ATTRIBUTIONS.get(folded)
        if role is not None:
            if folded != role:
                repairs.add(f"read attributed_to {_show(value)} as {role!r}")
            return role
    notes.add(
        f"{where}: attributed_to {_show(value)} is neither 'user' nor 'assistant'; assumed 'user'"
    )
    return "user"


def _links(
    where: str, item: Mapping[str, Any], ids: IdMap, notes: _Notes, repairs: set[str]
) -> tuple[str, ...]:
    found, value = _field(
        item,
        ("linked_memory_ids", "linked_ids", "linked_memories", "related_memory_ids", "links"),
        repairs,
    )
    if not found or value is None:
        return ()
    if isinstance(value, str) and "," in value:
        repairs.add("split comma-separated linked_memory_ids")
        raw: list[Any] = value.split(",")
    elif isinstance(value, str | int | float) and not isinstance(value, bool):
        repairs.add("read a single linked id as a list")
        raw = [value]
    elif isinstance(value, list):
        raw = value
    else:
        notes.add(f"{where}: linked_memory_ids is {_a(value)}, not a list; ignored")
        return ()
    if len(raw) > MAX_LINKS:
        notes.add(f"{where}: {len(raw)} linked ids; only the first {MAX_LINKS} were read")
        raw = raw[:MAX_LINKS]
    linked: list[str] = []
    unknown: list[str] = []
    for small in raw:
        real = ids.real(small)
        if real is None:
            unknown.append(_show(small, 20))
        elif real not in linked:
            linked.append(real)
    if unknown:
        notes.add(
            f"{where}: dropped {len(unknown)} linked ids that name no memory shown: "
            + ", ".join(unknown[:5])
            + (" ..." if len(unknown) > 5 else "")
        )
    return tuple(linked)


_LINK_KIND_WORDS = {
    "updates": "updates",
    "update": "updates",
    "updated": "updates",
    "replaces": "updates",
    "replace": "updates",
    "supersedes": "updates",
    "changes": "updates",
    "contradicts": "contradicts",
    "contradict": "contradicts",
    "contradiction": "contradicts",
    "follows_up": "follows_up",
    "follow_up": "follows_up",
    "followup": "follows_up",
    "follows": "follows_up",
    "continues": "follows_up",
    "related": "related",
    "relates": "related",
    "none": "related",
}


def _link_kind(
    where: str, item: Mapping[str, Any], linked: tuple[str, ...], notes: _Notes, repairs: set[str]
) -> str:
    """The item's ``link_kind``: ``related`` when missing, unknown, or with no link."""
    found, value = _field(item, ("link_kind", "relation", "link_type", "kind"), repairs)
    if not found or value is None or value == "":
        return "related"
    if not isinstance(value, str):
        notes.add(f"{where}: link_kind is {_a(value)}, not a string; read as 'related'")
        return "related"
    key = value.strip().casefold().replace("-", "_").replace(" ", "_")
    kind = _LINK_KIND_WORDS.get(key)
    if kind is None:
        notes.add(
            f"{where}: link_kind {_show(value, 30)} is not one of updates, contradicts, "
            "follows_up, related; read as 'related'"
        )
        return "related"
    if key != kind:
        repairs.add(f"read link_kind {key!r} as {kind!r}")
    if not linked:
        return "related"
    return kind


def parse_additive(
    reply: str, ids: IdMap, *, max_items: int = 100, max_chars: int = 2000
) -> ParseOutcome[Extracted]:
    """Read an additive extraction reply into :class:`Extracted` items.

    Accepts ``{"memory": [{"text", "attributed_to", "linked_memory_ids",
    "link_kind"}]}`` and these variants (each noted in ``repaired``): any fault
    :func:`repair_json` fixes; a bare list; the key spelled ``Memory`` or
    ``memories``; plain strings instead of objects (attributed to the
    user); ``text`` spelled ``memory``/``fact``/``content``; ids as
    integers, a single id or a comma-separated string. Dropped, with a
    warning: items that are not objects or strings; texts that are not
    strings, empty after cleaning, or longer than ``max_chars`` (a cut fact
    may be false); repeats within the reply (by :func:`normalize_text`);
    items past ``max_items``; linked ids that name no memory of ``ids``
    (an invented number, a real id seen in a message). A missing or
    unknown ``attributed_to`` becomes ``"user"`` with a warning; a missing
    ``link_kind`` is ``related``, a synonym ("update", "follow-up") is read
    as its kind, an unknown one is ``related`` with a warning.
    ``{"memory": []}`` is a valid empty answer.

    Raises:
        ReplyFormatError: no readable JSON, JSON of another shape, or a
            list of items none of which is usable.
    """
    value, early = _read(reply, _ADDITIVE_SHAPE)
    repairs: set[str] = set()
    notes = _Notes()
    raw = _top_list(value, ("memory", "memories"), ("text", "fact"), repairs, _ADDITIVE_SHAPE)
    texts = _Texts(max_chars, notes)
    items: list[Extracted] = []
    plain = 0
    for index, entry in enumerate(_limit(raw, max_items, notes)):
        where = f"item {index}"
        if isinstance(entry, str):
            text = texts.check(where, entry)
            if text is not None:
                plain += 1
                items.append(Extracted(text, "user"))
            continue
        if not isinstance(entry, dict):
            notes.add(f"{where} is {_a(entry)}, not an object; dropped")
            continue
        found, value = _field(entry, ("text", "memory", "fact", "content"), repairs)
        if not found:
            notes.add(f"{where} has no text; dropped")
            continue
        text = texts.check(where, value)
        if text is None:
            continue
        attributed = _attribution(where, entry, notes, repairs)
        linked = _links(where, entry, ids, notes, repairs)
        kind = _link_kind(where, entry, linked, notes, repairs)
        items.append(Extracted(text, attributed, linked, kind))
    if plain:
        repairs.add(f"read {plain} plain strings as memories attributed to the user")
    _none_usable(raw, items, notes, _ADDITIVE_SHAPE)
    texts.report(repairs)
    return _outcome(items, notes, early, repairs)


def parse_facts(reply: str, *, max_items: int = 100, max_chars: int = 2000) -> ParseOutcome[str]:
    """Read a fact-listing reply (``{"facts": ["…"]}``) into fact texts.

    The same tolerance and dropping rules as :func:`parse_additive`: a bare
    list, other key spellings (``Facts``, ``fact``, ``memory``) and
    objects with a ``text``/``fact`` string are read with a repair note;
    non-strings, empty, over-long and repeated facts are dropped with a
    warning. ``{"facts": []}`` is a valid empty answer.

    Raises:
        ReplyFormatError: no readable JSON, JSON of another shape, or a
            list of facts none of which is usable.
    """
    value, early = _read(reply, _FACTS_SHAPE)
    repairs: set[str] = set()
    notes = _Notes()
    raw = _top_list(
        value, ("facts", "fact", "memory", "memories"), ("text", "fact"), repairs, _FACTS_SHAPE
    )
    texts = _Texts(max_chars, notes)
    facts: list[str] = []
    for index, entry in enumerate(_limit(raw, max_items, notes)):
        where = f"fact {index}"
        if isinstance(entry, dict):
            found, entry = _field(entry, ("text", "fact", "memory", "content"), repairs)
            if not found:
                notes.add(f"{where} is an object without a text; dropped")
                continue
            repairs.add("read objects with a text as facts")
        text = texts.check(where, entry)
        if text is not None:
            facts.append(text)
    _none_usable(raw, facts, notes, _FACTS_SHAPE)
    texts.report(repairs)
    return _outcome(facts, notes, early, repairs)


def _similar(quoted: str, known: str) -> bool:
    """Whether ``old_memory`` plausibly quotes ``known`` (models paraphrase a little)."""
    a, b = normalize_text(quoted), normalize_text(known)
    if a == b or a in b or b in a:
        return True
    words_a, words_b = set(_WORD.findall(a)), set(_WORD.findall(b))
    if not words_a or not words_b:
        return False
    return len(words_a & words_b) / len(words_a | words_b) >= 0.5


def parse_update(
    reply: str, ids: IdMap, *, max_items: int = 100, max_chars: int = 2000
) -> ParseOutcome[Operation]:
    """Read a consolidation reply into :class:`Operation` items.

    Rules (each violation drops the operation with a warning; the store is
    never asked to touch a memory the prompt did not show):

    - ``event`` must be ADD, UPDATE, DELETE or NONE, in any casing; plain
      synonyms (``INSERT``, ``REMOVE``, ``NOOP``…) are read with a note.
    - ADD needs a valid text; its ``id``, if any, is ignored. Repeated ADD
      texts are dropped.
    - UPDATE, DELETE and NONE need the small id of a shown memory; an
      UPDATE with an unknown id is dropped, not turned into an ADD (the
      model meant to change something it misnamed; guessing is worse).
      UPDATE needs a valid text; an UPDATE to the memory's current text is
      read as NONE.
    - When UPDATE or DELETE quotes an ``old_memory`` that does not resemble
      the shown text of that id, the id is probably wrong: dropped.
    - Each memory id is acted on once; later operations on it are dropped.

    Raises:
        ReplyFormatError: no readable JSON, or JSON of another shape.
    """
    value, early = _read(reply, _UPDATE_SHAPE)
    repairs: set[str] = set()
    notes = _Notes()
    raw = _top_list(value, ("memory", "memories"), ("event",), repairs, _UPDATE_SHAPE)
    texts = _Texts(max_chars, notes)
    ops: list[Operation] = []
    acted: set[str] = set()
    for index, entry in enumerate(_limit(raw, max_items, notes)):
        where = f"item {index}"
        if not isinstance(entry, dict):
            notes.add(f"{where} is {_a(entry)}, not an object; dropped")
            continue
        event = _event(where, entry, notes, repairs)
        if event is None:
            continue
        _, text_value = _field(entry, ("text", "memory", "fact"), repairs)
        if event == "ADD":
            text = texts.check(where, text_value)
            if text is not None:
                ops.append(Operation("ADD", text, None))
            continue
        _, small = _field(entry, ("id", "memory_id"), repairs)
        real = ids.real(small)
        if real is None:
            notes.add(f"{where}: {event} names no memory shown (id {_show(small, 20)}); dropped")
            continue
        if real in acted:
            notes.add(f"{where}: memory {ids.small(real)} was already acted on; {event} dropped")
            continue
        known = ids.text(real)
        if event in ("UPDATE", "DELETE"):
            _, old = _field(entry, ("old_memory", "old_text", "previous_memory"), repairs)
            if (
                isinstance(old, str)
                and old.strip()
                and known is not None
                and not _similar(clean_text(old)[0], known)
            ):
                notes.add(
                    f"{where}: {event} of memory {ids.small(real)} quotes an old_memory "
                    "that does not match it; the id is probably wrong; dropped"
                )
                continue
        if event == "UPDATE":
            text = texts.check(where, text_value, dedup=False)
            if text is None:
                continue
            if known is not None and normalize_text(text) == normalize_text(known):
                repairs.add("read UPDATEs that change nothing as NONE")
                event, text = "NONE", None
            ops.append(Operation(event, text, real))
        else:
            ops.append(Operation(event, None, real))
        acted.add(real)
    texts.report(repairs)
    return _outcome(ops, notes, early, repairs)


def _event(where: str, entry: Mapping[str, Any], notes: _Notes, repairs: set[str]) -> Event | None:
    found, value = _field(entry, ("event", "action", "operation", "op"), repairs)
    if not found or not isinstance(value, str):
        notes.add(f"{where}: no event; dropped")
        return None
    word = value.strip().upper().replace(" ", "_")
    event = _EVENTS.get(word)
    if event is None:
        notes.add(f"{where}: unknown event {_show(value, 20)}; dropped")
        return None
    if word != event:
        repairs.add(f"read event {_show(value, 20)} as {event!r}")
    return event


def _unfence(text: str) -> str:
    """Return the inside of a reply that is entirely one Markdown code fence."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) >= 6:
        inner = stripped[3:-3]
        first, _, rest = inner.partition("\n")
        # The info string ("json", "markdown") is not content.
        return (rest if first.strip().isalnum() or not first.strip() else inner).strip()
    return stripped


def _prose_or_json(reply: object, keys: Sequence[str], shape: str, what: str) -> str:
    """Return text that came as prose or as a JSON object holding it under ``keys``."""
    if not isinstance(reply, str):
        raise _format_error(
            f"the reply must be text, got {type(reply).__name__}", "Your reply was not text.", shape
        )
    body, _ = strip_reasoning(reply)
    body = _unfence(body)
    if body.startswith('"'):
        # A JSON string holding the text, or prose that opens with a quotation.
        try:
            decoded = json.loads(body, strict=False)
        except ValueError:
            decoded = None
        if isinstance(decoded, str):
            return decoded
    if body.startswith("{"):
        # Looks like the JSON object that was asked for: it must be one.
        value, _ = _read(body, shape)
        if isinstance(value, dict):
            found, value = _field(value, keys, set())
            if not found:
                raise _format_error(
                    f"the reply's JSON has no {keys[0]!r}",
                    f'Your reply had no "{keys[0]}" key.',
                    shape,
                )
        if not isinstance(value, str):
            raise _format_error(
                f"the reply's {what} is {_a(value)}, not a string",
                f"Your reply's {what} was not a string.",
                shape,
            )
        body = value
    return body


def parse_procedural(reply: str, *, max_chars: int = 8000) -> str:
    """Return the procedural summary in a reply: ``{"summary": "…"}`` or plain text.

    Reasoning blocks and a surrounding code fence are removed; invisible
    characters are removed and line breaks kept. A reply that starts like
    JSON must be readable JSON with a ``summary`` string; anything else is
    taken as a prose summary.

    Raises:
        ReplyFormatError: the summary is empty, not a string, longer than
            ``max_chars`` (a cut summary loses the outcome, which comes
            last), or the JSON is broken.
    """
    text, _ = clean_text(
        _prose_or_json(
            reply, ("summary", "procedural_memory", "memory", "text"), _PROCEDURAL_SHAPE, "summary"
        ),
        keep_lines=True,
    )
    if not text:
        raise _format_error(
            "the procedural summary is empty",
            "Your reply held no summary.",
            _PROCEDURAL_SHAPE,
        )
    if len(text) > max_chars:
        raise _format_error(
            f"the procedural summary is {len(text)} characters long; the limit is {max_chars}",
            f"Your summary was {len(text)} characters long; keep it under {max_chars}.",
            _PROCEDURAL_SHAPE,
        )
    return text


def parse_description(reply: str, *, max_chars: int = 1000) -> str:
    """Return the image description in a vision reply (prose, or JSON ``description``).

    One line, invisible characters removed. A description longer than
    ``max_chars`` is cut at the last sentence end before the limit: the
    prompt asks for one or two sentences, so the first ones carry it.

    Raises:
        ReplyFormatError: the description is empty.
    """
    shape = "A plain one- or two-sentence description, no JSON."
    text, _ = clean_text(
        _prose_or_json(reply, ("description", "text", "caption"), shape, "description")
    )
    if len(text) > max_chars:
        ends = [m.end() for m in _SENTENCE_END.finditer(text, 0, max_chars)]
        text = text[: ends[-1]] if ends else text[:max_chars].rstrip() + "…"
    if not text:
        raise _format_error("the image description is empty", "Your reply was empty.", shape)
    return text


def retry_messages(
    messages: Iterable[Mapping[str, Any]], bad_reply: str, error: ReplyFormatError
) -> list[dict[str, Any]]:
    """Return the messages of the one retry: the prompt, the bad reply, what was wrong.

    The original messages are kept unchanged (so a cached prefix still
    applies), followed by the bad reply as the assistant's turn (reasoning
    removed, cut to :data:`RETRY_ECHO_CHARS`, so a runaway reply does not
    double the cost) and a user turn with ``error.feedback``.
    """
    shown = ""
    if isinstance(bad_reply, str):
        shown, _ = strip_reasoning(bad_reply)
        shown = shown.strip()
    if len(shown) > RETRY_ECHO_CHARS:
        shown = (
            shown[:RETRY_ECHO_CHARS] + f"\n[... cut: the reply was {len(shown)} characters long]"
        )
    return [
        *(dict(message) for message in messages),
        {"role": "assistant", "content": shown or "(empty reply)"},
        {"role": "user", "content": error.feedback},
    ]
