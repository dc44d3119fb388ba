"""Read LoCoMo-format conversations (the benchmarks' realistic input).

The format (Maharana et al. 2024): a JSON list of samples, each with
``conversation`` (``speaker_a``, ``speaker_b``, ``session_N`` lists of turns
with ``speaker``, ``dia_id``, ``text`` and an optional ``blip_caption``, and
``session_N_date_time`` such as ``"1:56 pm on 8 May, 2023"``), ``qa``
(``question``, ``answer``, ``evidence``, ``category`` 1-5; category 5 has
``adversarial_answer`` instead of ``answer``) and ``observation``
(``session_N_observation`` → speaker → ``[fact, dia_id]`` pairs).

The data is CC BY-NC 4.0, so it is never shipped in the package: every
benchmark reads it from an explicit path (``--data FILE``) or ``$ENGRAM_LOCOMO``
(:func:`data_path`), and says so when neither is given.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "ENV_VAR",
    "MISSING_DATA",
    "QA",
    "Conversation",
    "MissingDataError",
    "Session",
    "Turn",
    "data_path",
    "default_data_path",
    "load_conversations",
    "parse_session_date",
]


ENV_VAR = "ENGRAM_LOCOMO"
"""The environment variable naming the LoCoMo file when ``--data`` is not given."""

MISSING_DATA = (
    "no LoCoMo data: pass --data FILE or set ENGRAM_LOCOMO to a LoCoMo-format JSON file "
    "(e.g. LoCoMo's locomo10.json); the data is CC BY-NC 4.0, so engramdb does not ship it"
)
"""The message given when neither ``--data`` nor ``$ENGRAM_LOCOMO`` names the data."""


class MissingDataError(FileNotFoundError):
    """Neither an explicit path nor ``$ENGRAM_LOCOMO`` names the LoCoMo data."""

    def __init__(self) -> None:
        super().__init__(MISSING_DATA)


def default_data_path() -> Path | None:
    """The file ``$ENGRAM_LOCOMO`` names, or ``None`` when it is unset or empty."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else None


def data_path(data: str | Path | None = None) -> Path:
    """``data`` if given, else ``$ENGRAM_LOCOMO``; :class:`MissingDataError` if neither.

    Only resolves the name: whether the file exists is the reader's to report.
    """
    if data is not None:
        return Path(data).expanduser()
    found = default_data_path()
    if found is None:
        raise MissingDataError()
    return found


@dataclass(frozen=True)
class Turn:
    """One line of dialogue."""

    speaker: str
    dia_id: str
    text: str
    caption: str | None = None
    """LoCoMo's ``blip_caption`` of a photo the speaker shared."""


@dataclass(frozen=True)
class Session:
    """One dated session of a conversation."""

    number: int
    date: datetime | None
    date_text: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class QA:
    """One question with its gold answer."""

    question: str
    answer: str
    """The gold answer as text; for category 5 the adversarial (wrong) answer is
    kept in ``adversarial_answer`` and this is empty."""
    category: int
    evidence: tuple[str, ...] = ()
    adversarial_answer: str | None = None


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo sample."""

    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: tuple[Session, ...]
    qa: tuple[QA, ...] = ()
    observations: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    """``dia_id`` → ``(speaker, fact)`` pairs written for that turn."""

    def role(self, speaker: str) -> str:
        """The chat role a speaker's turns are given: ``speaker_a`` is the user."""
        return "user" if speaker == self.speaker_a else "assistant"

    def messages(self, turns: tuple[Turn, ...] | list[Turn]) -> list[dict[str, Any]]:
        """Turns as chat messages, with the speaker's name and any photo caption."""
        out = []
        for turn in turns:
            text = turn.text
            if turn.caption:
                text = f"{text}\n[shares a photo: {turn.caption}]".strip()
            out.append({"role": self.role(turn.speaker), "content": text, "name": turn.speaker})
        return out


_DATE = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap]m)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.I
)
_MONTHS = {
    m: i
    for i, m in enumerate(
        [
            "january",
            "february",
            "march",
            "april",
            "may",
            "june",
            "july",
            "august",
            "september",
            "october",
            "november",
            "december",
        ],
        1,
    )
}


def parse_session_date(text: str) -> datetime | None:
    """``"1:56 pm on 8 May, 2023"`` → an aware UTC datetime; ``None`` if unreadable.

    Parsed by hand rather than with ``strptime`` so the locale cannot change
    the month names.
    """
    match = _DATE.match(text or "")
    if not match:
        return None
    hour, minute, half, day, month_name, year = match.groups()
    month = _MONTHS.get(month_name.lower()) or next(
        (v for k, v in _MONTHS.items() if k.startswith(month_name.lower()[:3])), None
    )
    if month is None:
        return None
    h = int(hour) % 12 + (12 if half.lower() == "pm" else 0)
    try:
        return datetime(int(year), month, int(day), h, int(minute), tzinfo=UTC)
    except ValueError:
        return None


def _session_numbers(conv: dict[str, Any]) -> list[int]:
    numbers = []
    for key, value in conv.items():
        match = re.fullmatch(r"session_(\d+)", key)
        if match and isinstance(value, list):
            numbers.append(int(match.group(1)))
    return sorted(numbers)


def _answer_text(value: object) -> str:
    if value is None:
        return ""
    return str(value).strip()


def _conversation(sample: dict[str, Any], index: int) -> Conversation:
    conv = sample.get("conversation")
    if not isinstance(conv, dict):
        raise ValueError(f"sample {index} has no 'conversation' object")
    sessions = []
    for n in _session_numbers(conv):
        date_text = str(conv.get(f"session_{n}_date_time") or "")
        turns = tuple(
            Turn(
                speaker=str(t.get("speaker") or "unknown"),
                dia_id=str(t.get("dia_id") or f"D{n}:{i + 1}"),
                text=str(t.get("text") or ""),
                caption=(str(t["blip_caption"]) if t.get("blip_caption") else None),
            )
            for i, t in enumerate(conv[f"session_{n}"])
            if isinstance(t, dict)
        )
        sessions.append(Session(n, parse_session_date(date_text), date_text, turns))
    qa = tuple(
        QA(
            question=str(q.get("question") or ""),
            answer=_answer_text(q.get("answer")),
            category=int(q.get("category") or 0),
            evidence=tuple(str(e) for e in q.get("evidence") or ()),
            adversarial_answer=(
                _answer_text(q["adversarial_answer"]) if "adversarial_answer" in q else None
            ),
        )
        for q in sample.get("qa") or ()
        if isinstance(q, dict) and q.get("question")
    )
    observations: dict[str, list[tuple[str, str]]] = {}
    for per_session in (sample.get("observation") or {}).values():
        if not isinstance(per_session, dict):
            continue
        for speaker, facts in per_session.items():
            for pair in facts or ():
                if isinstance(pair, list | tuple) and len(pair) >= 2:
                    fact, dia = pair[0], pair[1]
                    for one in dia if isinstance(dia, list) else [dia]:
                        observations.setdefault(str(one), []).append((str(speaker), str(fact)))
    return Conversation(
        sample_id=str(sample.get("sample_id") or f"conv-{index}"),
        speaker_a=str(conv.get("speaker_a") or ""),
        speaker_b=str(conv.get("speaker_b") or ""),
        sessions=tuple(sessions),
        qa=qa,
        observations={k: tuple(v) for k, v in observations.items()},
    )


def load_conversations(path: str | Path) -> list[Conversation]:
    """Read a LoCoMo-format JSON file."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of LoCoMo samples")
    return [_conversation(s, i) for i, s in enumerate(data) if isinstance(s, dict)]
