"""A lenient JSON reader for LLM replies.

Models wrap JSON in reasoning blocks, Markdown fences and prose, leave
trailing commas, write Python literals, and get cut off by ``max_tokens``.
Each fault fixed here is one a model makes while meaning a well-formed
answer, so fixing it loses nothing; anything that needs a guess about
what the model meant is refused (:class:`ReplyFormatError`) and left to
the one retry, where the model can say it properly.

Every step is linear in the reply's length, and nothing recurses on the
reply's nesting (a hostile ``[[[[…`` raises, it does not crash). The worst
case, a megabyte of tiny tokens that must be repaired one by one, costs
about two seconds; a well-formed megabyte costs a tenth of that.
"""

from __future__ import annotations

import json
import re
from collections import deque
from typing import Any

from engramdb.errors import ReplyFormatError

__all__ = ["MAX_REPLY_CHARS", "repair_json", "strip_reasoning"]

MAX_REPLY_CHARS = 1_500_000
"""Replies longer than this are refused unread (a runaway generation)."""

_MAX_DEPTH = 64  # our shapes need 4 levels; deeper is garbage, not a fault to repair
_MAX_CANDIDATES = 20  # where a JSON value might start, tried left to right
_SALVAGE_TRIES = 5

_REASONING_TAGS = ("think", "thinking", "reasoning")

# A JSON string (complete or cut off), a single-quoted string, a bracket, a
# comma or a Python literal. Strings are matched whole by the regex engine
# (the unrolled-loop pattern cannot backtrack), so scanning is linear.
_TOKEN = re.compile(
    r"""
    "(?P<dq>[^"\\]*(?:\\.[^"\\]*)*)(?P<dq_end>"?)
  | '(?P<sq>[^'\\]*(?:\\.[^'\\]*)*)(?P<sq_end>'?)
  | (?P<open>[{\[])
  | (?P<close>[}\]])
  | (?P<comma>,)
  | (?P<py>\b(?:True|False|None)\b)
    """,
    re.S | re.X,
)
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[ \t]*\r?\n?")
_START = re.compile(r"[{\[]")
_SINGLE_QUOTE_ESCAPES = re.compile(r"\\(['\\])")


def _safe_int(digits: str) -> int | str:
    # Python refuses to convert integers of more than 4,300 digits (a ValueError
    # from deep inside json); a number that long is no id, so keep it as text.
    return int(digits) if len(digits) <= 30 else digits


_DECODER = json.JSONDecoder(strict=False, parse_int=_safe_int)


def _loads(text: str) -> Any:
    """Parse strict-grammar JSON (control characters inside strings allowed)."""
    return _DECODER.decode(text)


def strip_reasoning(text: str) -> tuple[str, bool]:
    """Remove leading ``<think>…</think>`` blocks (and a lone leading ``…</think>``).

    Only reasoning at the *start* of a reply is removed: that is where
    reasoning models put it, and a tag further on may be part of a fact's
    text. An opening tag that is never closed means the reply was cut off
    while the model was still reasoning: nothing usable is left.
    Returns the remaining text and whether anything was removed.
    """
    removed = False
    rest = text.lstrip("\ufeff \t\r\n")
    for _ in range(10):
        head = rest[:16].lower()
        tag = next((t for t in _REASONING_TAGS if head.startswith(f"<{t}>")), None)
        if tag is None:
            break
        close = rest.lower().find(f"</{tag}>")
        removed = True
        if close < 0:
            return "", True
        rest = rest[close + len(tag) + 3 :].lstrip()
    if not rest.startswith(("{", "[", "`", '"')):
        # Some chat templates put the opening <think> in the prompt, so the reply
        # starts with bare reasoning and one closing tag.
        close = rest.lower().find("</think>")
        after = rest[close + len("</think>") :] if close >= 0 else ""
        # Only when an answer follows: a tag inside a fact's text is not reasoning.
        if close >= 0 and ("{" in after or "[" in after):
            rest = after.lstrip()
            removed = True
    return rest, removed


def _fenced_blocks(text: str) -> list[str]:
    """Return the contents of the code fences in ``text`` (an unclosed one runs to the end)."""
    blocks: list[str] = []
    pos = 0
    while len(blocks) < 5:
        match = _FENCE.search(text, pos)
        if match is None:
            break
        end = text.find("```", match.end())
        if end < 0:
            blocks.append(text[match.end() :])
            break
        blocks.append(text[match.end() : end])
        pos = end + 3
    return blocks


class _Scan:
    """One pass over a would-be JSON value starting at ``start``, fixing what it can."""

    def __init__(self, text: str, start: int) -> None:
        self.out: list[str] = []
        self.notes: set[str] = set()
        self.stack: list[str] = []
        self.end = len(text)
        self.balanced = False
        self.mismatched = False  # no point salvaging either
        self.too_deep = False
        # (pieces of output so far, open brackets) after the last complete items of
        # a top-level list: the only places where cutting loses whole items only.
        self.cuts: deque[tuple[int, str]] = deque(maxlen=_SALVAGE_TRIES)
        self._run(text, start)

    def _run(self, text: str, start: int) -> None:
        # The hot loop of hostile replies (one iteration per token): locals only.
        out, stack, emit, cuts = self.out, self.stack, self.out.append, self.cuts
        last_comma: int | None = None  # index in out of a comma no value has followed yet
        pos = start
        restart = True
        while restart:
            restart = False
            for match in _TOKEN.finditer(text, pos):
                if match.start() > pos:
                    between = text[pos : match.start()]
                    emit(between)
                    if not between.isspace():
                        last_comma = None
                pos = match.end()
                kind = match.lastgroup
                if kind == "comma":
                    last_comma = len(out)
                    emit(",")
                    continue
                if kind == "dq_end":
                    emit(match.group(0))
                    if not match.group("dq_end"):
                        return  # cut off inside a string
                elif kind == "open":
                    if len(stack) >= _MAX_DEPTH:
                        self.too_deep = True
                        return
                    stack.append(match.group(0))
                    emit(match.group(0))
                    last_comma = None
                    continue
                elif kind == "close":
                    closer = match.group(0)
                    if not stack or (stack[-1] == "{") != (closer == "}"):
                        self.mismatched = True
                        return
                    if last_comma is not None:
                        out[last_comma] = ""
                        self.notes.add("removed trailing commas")
                    stack.pop()
                    emit(closer)
                    if not stack:
                        self.balanced = True
                        self.end = pos
                        return
                elif kind == "sq_end":
                    if not self._value_expected():
                        # An apostrophe in bare text ("I'm"), not a string delimiter:
                        # rescan from the character after it.
                        emit("'")
                        pos = match.start() + 1
                        restart = True
                        break
                    if not match.group("sq_end"):
                        return
                    inner = _SINGLE_QUOTE_ESCAPES.sub(r"\1", match.group("sq"))
                    emit(json.dumps(inner, ensure_ascii=False))
                    self.notes.add("converted single-quoted strings to JSON strings")
                else:  # a Python literal outside any string
                    emit(_PY_LITERALS[match.group(0)])
                    self.notes.add("replaced Python literals (True/False/None) with JSON ones")
                    last_comma = None
                    continue
                # A string or a container just ended: a complete item if its parent
                # is the top-level list (depth 1, or 2 under the top object).
                last_comma = None
                if stack[-1:] == ["["] and len(stack) <= 2:
                    cuts.append((len(out), "".join(stack)))
        emit(text[pos:])

    def _value_expected(self) -> bool:
        """Tell whether the output so far ends where a JSON key or value may start."""
        for piece in reversed(self.out):
            tail = piece.rstrip()
            if tail:
                return tail[-1] in "{[,:"
        return False

    def text(self, pieces: int | None = None) -> str:
        return "".join(self.out if pieces is None else self.out[:pieces])


def _decode(text: str, repairs: list[str]) -> Any:
    """Find and read the JSON value the reply holds (an object preferred to a list)."""
    stripped = text.strip()
    try:
        return _loads(stripped)
    except (ValueError, RecursionError) as exc:
        first_error = exc
    # A list found in prose may be a citation ("see [1]") rather than the answer;
    # every shape we ask for is an object, so a later object wins over it.
    fallback: tuple[Any, list[str]] | None = None
    pos = 0
    for _ in range(_MAX_CANDIDATES):
        match = _START.search(stripped, pos)
        if match is None:
            break
        start = match.start()
        notes: list[str] = []
        try:
            value, end = _DECODER.raw_decode(stripped, start)
        except (ValueError, RecursionError):
            scan = _Scan(stripped, start)
            if not scan.balanced:
                try:
                    salvaged = _salvage(scan)
                except ReplyFormatError:
                    if fallback is not None:
                        break  # a complete list came before the broken rest
                    raise
                if fallback is not None and not isinstance(salvaged, dict):
                    break  # the earlier list was complete; prefer it to a fragment
                repairs.extend(sorted(scan.notes))
                repairs.append("the reply was cut off; kept the items completed before the cut")
                return salvaged
            end = scan.end
            try:
                value = _loads(scan.text())
            except (ValueError, RecursionError):
                pos = end  # a value inside this one is not what the model meant
                continue
            notes.extend(sorted(scan.notes))
        if start > 0 or stripped[end:].strip():
            notes.append("ignored text before or after the JSON")
        if isinstance(value, dict):
            repairs.extend(notes)
            return value
        if fallback is None:
            fallback = (value, notes)
        pos = end
    if fallback is not None:
        repairs.extend(fallback[1])
        return fallback[0]
    if _START.search(stripped) is None:
        raise ReplyFormatError(
            "the reply contains no JSON",
            feedback="Your reply contained no JSON.",
        )
    detail = first_error.msg if isinstance(first_error, json.JSONDecodeError) else "too deep"
    raise ReplyFormatError(
        f"the reply's JSON is malformed ({detail})",
        feedback=f"Your reply was not valid JSON ({detail}).",
    )


def _salvage(scan: _Scan) -> Any:
    """Close a cut-off value after its last complete top-level item, or raise."""
    if scan.too_deep:
        raise ReplyFormatError(
            f"the reply's JSON is nested more than {_MAX_DEPTH} levels deep",
            feedback="Your reply was not of the requested shape: it was nested far too deeply.",
        )
    if scan.mismatched:
        raise ReplyFormatError(
            "the reply's JSON has mismatched brackets",
            feedback="Your reply was not valid JSON: its brackets do not match.",
        )
    # Brackets still open at the end: the reply was cut off (max_tokens).
    for pieces, opened in reversed(scan.cuts):
        closers = "".join("]" if c == "[" else "}" for c in reversed(opened))
        try:
            return _loads(scan.text(pieces) + closers)
        except (ValueError, RecursionError):
            continue
    raise ReplyFormatError(
        "the reply's JSON was cut off before any item was complete",
        feedback="Your reply was cut off before the JSON was complete; "
        "write shorter items, or fewer.",
    )


def repair_json(text: str, *, max_chars: int = MAX_REPLY_CHARS) -> tuple[Any, list[str]]:
    """Read the JSON value an LLM meant to write; return it and the repairs made.

    Repairs, in order: a byte-order mark; leading ``<think>`` reasoning;
    a Markdown code fence; prose before or after the value (the first
    ``{`` or ``[`` that starts a readable value wins); trailing commas;
    single-quoted strings; Python ``True``/``False``/``None``; a reply cut
    off mid-way (only the items of the top-level list that were complete
    are kept); a JSON string that itself holds JSON. Control characters
    inside strings are accepted. Integers longer than 30 digits are
    returned as strings. The value may be of any JSON type; checking its
    shape is the caller's job.

    Raises:
        ReplyFormatError: the reply is not text, empty, longer than
            ``max_chars``, holds no JSON, or JSON that none of the repairs fix.
    """
    if not isinstance(text, str):
        raise ReplyFormatError(
            f"the reply must be text, got {type(text).__name__}",
            feedback="Your reply was not text.",
        )
    if len(text) > max_chars:
        raise ReplyFormatError(
            f"the reply is {len(text)} characters long; the limit is {max_chars}",
            feedback="Your reply was far too long; keep it short.",
        )
    repairs: list[str] = []
    body, removed = strip_reasoning(text)
    if removed:
        repairs.append("removed reasoning (<think> block) before the answer")
    if not body.strip():
        if removed:
            raise ReplyFormatError(
                "the reply holds only reasoning, no answer (it may have been cut off)",
                feedback="Your reply contained only reasoning and no JSON answer; "
                "keep reasoning short and end with the JSON.",
            )
        raise ReplyFormatError("the reply is empty", feedback="Your reply was empty.")
    value: Any = None
    found = False
    if not body.lstrip().startswith(("{", "[")):
        for block in _fenced_blocks(body):
            block_repairs: list[str] = []
            try:
                value = _decode(block, block_repairs)
            except ReplyFormatError:
                continue
            repairs.append("removed a Markdown code fence")
            repairs.extend(block_repairs)
            found = True
            break
    if not found:
        value = _decode(body, repairs)
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        # The model (or a proxy) JSON-encoded its JSON answer once more.
        try:
            value = _decode(value, repairs)
        except ReplyFormatError:
            pass
        else:
            repairs.append("decoded JSON that was wrapped in a JSON string")
    return value, repairs
