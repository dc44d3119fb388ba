"""Relative times in English text, resolved against the day the text was written.

``"Yesterday I went to a support group"`` written on 2023-05-08 says
2023-05-07. Large models do that arithmetic; small local ones mostly copy
"yesterday" into the memory, which is useless months later. The extraction
prompt therefore shows each resolvable expression with its meaning beside
it (``yesterday [2023-05-07]``, see :func:`annotate`), so any model only has
to copy a date.

Deliberately narrow: only expressions whose meaning follows from the date
alone — ``today``, ``tonight``, ``yesterday``, ``tomorrow``,
``last/this/next week|weekend|month|year|<weekday>|<season>``,
``N days/weeks/months/years ago``, ``in N days/weeks``, ``N years ago``.
Vague ones ("recently", "the other day", "a while ago") are left alone:
there is no date to give. English only; other languages pass through
unchanged (the prompt still asks the model to resolve them).

The precision given is the one the words carry: a day for "yesterday", a
week ("the week of 2023-05-01", weeks start on Monday) for "last week", a
month for "last month", a season with its year for "last summer"
(northern-hemisphere months). ``dateparser`` was considered: it resolves
"2 days ago" but not "last summer" or "this weekend", gives a point in time
where the words name a period, and pulls in a large dependency for a
dozen rules.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

__all__ = ["TimeRef", "annotate", "find_relative_times"]

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
_SEASONS = {"spring": 3, "summer": 6, "fall": 9, "autumn": 9, "winter": 12}
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a couple of": 2,
    "couple of": 2,
}
_NUM = r"(?P<n>\d{1,3}|a couple of|couple of|an?|one|two|three|four|five|six|seven|eight|nine|ten)"
_UNIT = r"(?P<unit>day|week|month|year)s?"
_PERIOD = r"(?P<period>week|weekend|month|year|" + "|".join(_WEEKDAYS) + "|" + "|".join(_SEASONS)
_PERIOD += ")"

_PATTERN = re.compile(
    r"\b(?:"
    r"(?P<single>today|tonight|yesterday|tomorrow|last night|this morning|this afternoon|"
    r"this evening)"
    rf"|(?P<which>last|this|next|coming) {_PERIOD}"
    rf"|{_NUM} {_UNIT} ago"
    rf"|in {_NUM.replace('?P<n>', '?P<n2>')} {_UNIT.replace('?P<unit>', '?P<unit2>')}"
    r")\b",
    re.I,
)


@dataclass(frozen=True)
class TimeRef:
    """One relative time found in a text, and what it means."""

    start: int
    end: int
    text: str
    meaning: str
    """``2023-05-07``, ``the week of 2023-05-01``, ``May 2023``, ``summer 2022``, ``2022``."""


def _day(d: dt.date) -> str:
    return d.isoformat()


def _week(d: dt.date) -> str:
    return f"the week of {_day(d - dt.timedelta(days=d.weekday()))}"


def _month(year: int, month: int) -> str:
    while month < 1:
        month += 12
        year -= 1
    while month > 12:
        month -= 12
        year += 1
    return f"{_MONTHS[month - 1]} {year}"


def _weekday(which: str, name: str, today: dt.date) -> str:
    target = _WEEKDAYS.index(name)
    delta = target - today.weekday()
    if which == "last":
        # "Last Friday" said on a Monday: the Friday three days before.
        delta = delta - 7 if delta >= 0 else delta
    elif which in ("next", "coming"):
        delta = delta + 7 if delta <= 0 else delta
    return _day(today + dt.timedelta(days=delta))


def _season(which: str, name: str, today: dt.date) -> str:
    start = _SEASONS[name]
    # ``began``: the year the latest season of that name began (on or before today).
    began = today.year if today.month >= start else today.year - 1
    in_progress = (today.month - start) % 12 < 3
    if which == "last":
        year = began - 1 if in_progress else began
    elif which == "this":
        # Past this calendar year's season: the one that ended; else the one to come.
        year = began if in_progress or began + 1 != today.year else began + 1
    else:
        year = began + 1
    if start == 12:
        return f"winter {year}-{str(year + 1)[-2:]}"
    return f"{'fall' if name == 'autumn' else name} {year}"


def _count(raw: str) -> int:
    return int(raw) if raw.isdigit() else _NUMBERS[raw.lower()]


def _shift(today: dt.date, unit: str, n: int) -> str:
    if unit == "day":
        return _day(today + dt.timedelta(days=n))
    if unit == "week":
        return _week(today + dt.timedelta(weeks=n))
    if unit == "month":
        return _month(today.year, today.month + n)
    return str(today.year + n)


def _meaning(match: re.Match[str], today: dt.date) -> str | None:
    single = match.group("single")
    if single:
        word = single.lower()
        if word in ("today", "tonight", "this morning", "this afternoon", "this evening"):
            return _day(today)
        if word in ("yesterday", "last night"):
            return _day(today - dt.timedelta(days=1))
        return _day(today + dt.timedelta(days=1))
    which = match.group("which")
    if which:
        which = which.lower()
        period = match.group("period").lower()
        step = {"last": -1, "this": 0}.get(which, 1)
        if period in _WEEKDAYS:
            return _weekday(which, period, today)
        if period in _SEASONS:
            return _season(which, period, today)
        if period == "weekend":
            saturday = today + dt.timedelta(days=5 - today.weekday())
            if which == "last":
                saturday -= dt.timedelta(weeks=1)
            elif which != "this":
                saturday += dt.timedelta(weeks=1)
            return f"the weekend of {_day(saturday)}"
        return _shift(today, period, step)
    if match.group("n"):
        n = _count(match.group("n"))
        return _shift(today, match.group("unit").lower(), -n)
    n = _count(match.group("n2"))
    return _shift(today, match.group("unit2").lower(), n)


def find_relative_times(text: str, today: dt.date) -> list[TimeRef]:
    """Every resolvable relative time in ``text``, with its meaning as of ``today``."""
    refs = []
    for match in _PATTERN.finditer(text):
        meaning = _meaning(match, today)
        if meaning is not None:
            refs.append(TimeRef(match.start(), match.end(), match.group(0), meaning))
    return refs


def annotate(text: str, today: dt.date) -> str:
    """``text`` with ``[meaning]`` after each resolvable relative time (see the module doc)."""
    out = []
    last = 0
    for ref in find_relative_times(text, today):
        out.append(text[last : ref.end])
        out.append(f" [{ref.meaning}]")
        last = ref.end
    out.append(text[last:])
    return "".join(out)
