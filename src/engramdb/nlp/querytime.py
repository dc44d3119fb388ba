"""The periods a query names: explicit dates and relative times, as day ranges.

``"What did Nate make on 25 February, 2022?"`` names the day 2022-02-25;
``"What is Tim learning in December 2023?"`` the month; ``"... in 2023?"`` the
year; ``"What did she photograph last summer?"`` a season, resolved against
the day of the search (:mod:`engramdb.nlp.reltime`, the same rules the
extraction prompt uses). Used by the time lever of search
(``FusionConfig.time_weight``). English only, deliberately narrow: a month
without a year ("in December"), vague words ("recently") and intervals
("between August 11 and 15") name no period here, or only their dated end.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

from engramdb.nlp.reltime import find_relative_times
from engramdb.nlp.terms import query_terms

__all__ = [
    "Period",
    "asks_collection",
    "asks_present",
    "asks_previous",
    "asks_when",
    "before_what",
    "mentions_time",
    "query_periods",
    "topic_words",
]

Period = tuple[dt.date, dt.date]
"""A day range, ``(first day, day after the last)``."""

_MONTHS = {
    name: i + 1
    for i, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        )
    )
    for name in names
}
_MONTH = r"(?P<{g}>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<{g}>\d{{1,2}})(?:st|nd|rd|th)?"
_YEAR = r"(?P<{g}>(?:19|20)\d\d)"

_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("iso", re.compile(r"\b(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})\b")),
    (
        "day",
        re.compile(
            rf"\b{_DAY.format(g='d')}(?: of)? {_MONTH.format(g='m')},? ?{_YEAR.format(g='y')}\b",
            re.I,
        ),
    ),
    (
        "day",
        re.compile(
            rf"\b{_MONTH.format(g='m')} {_DAY.format(g='d')},? ?{_YEAR.format(g='y')}\b", re.I
        ),
    ),
    ("month", re.compile(rf"\b{_MONTH.format(g='m')},? {_YEAR.format(g='y')}\b", re.I)),
    ("year", re.compile(rf"\b(?:in|during|of|by|from|since) {_YEAR.format(g='y')}\b", re.I)),
)

_MEANING = (
    ("day", re.compile(r"^(?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})$")),
    ("week", re.compile(r"^the week of (?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})$")),
    ("weekend", re.compile(r"^the weekend of (?P<y>\d{4})-(?P<m>\d{2})-(?P<d>\d{2})$")),
    ("month", re.compile(r"^(?P<m>[A-Z][a-z]+) (?P<y>\d{4})$")),
    ("season", re.compile(r"^(?P<s>spring|summer|fall) (?P<y>\d{4})$")),
    ("winter", re.compile(r"^winter (?P<y>\d{4})-\d\d$")),
    ("year", re.compile(r"^(?P<y>\d{4})$")),
)
_SEASON_START = {"spring": 3, "summer": 6, "fall": 9}


def _month_range(year: int, month: int, months: int = 1) -> Period:
    end_month = month - 1 + months
    return dt.date(year, month, 1), dt.date(year + end_month // 12, end_month % 12 + 1, 1)


def _absolute(kind: str, match: re.Match[str]) -> Period | None:
    year = int(match.group("y"))
    if kind == "year":
        return dt.date(year, 1, 1), dt.date(year + 1, 1, 1)
    raw = match.group("m")
    month = int(raw) if raw.isdigit() else _MONTHS[raw.lower()]
    if not 1 <= month <= 12:
        return None
    if kind == "month":
        return _month_range(year, month)
    try:
        day = dt.date(year, month, int(match.group("d")))
    except ValueError:
        return None
    return day, day + dt.timedelta(days=1)


def _relative(meaning: str) -> Period | None:
    """The day range of one :func:`find_relative_times` meaning."""
    for kind, pattern in _MEANING:
        match = pattern.match(meaning)
        if match is None:
            continue
        year = int(match.group("y"))
        if kind in ("day", "week", "weekend"):
            start = dt.date(year, int(match.group("m")), int(match.group("d")))
            days = {"day": 1, "week": 7, "weekend": 2}[kind]
            return start, start + dt.timedelta(days=days)
        if kind == "month":
            month = _MONTHS.get(match.group("m").lower())
            return _month_range(year, month) if month else None
        if kind == "season":
            return _month_range(year, _SEASON_START[match.group("s")], 3)
        if kind == "winter":
            return _month_range(year, 12, 3)
        return dt.date(year, 1, 1), dt.date(year + 1, 1, 1)
    return None


def query_periods(query: str, today: dt.date) -> list[Period]:
    """Every period ``query`` names, in the order they appear; relative times as of ``today``.

    A span of text counts once: "25 February, 2022" is that day, not also
    February 2022 and 2022; an impossible date names nothing.
    """
    found: list[tuple[int, Period]] = []
    taken: list[tuple[int, int]] = []

    def free(start: int, end: int) -> bool:
        return all(end <= s or start >= e for s, e in taken)

    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(query):
            if not free(match.start(), match.end()):
                continue
            # An impossible date ("31 February, 2022") names nothing, not its month.
            taken.append((match.start(), match.end()))
            period = _absolute("day" if kind == "iso" else kind, match)
            if period is not None:
                found.append((match.start(), period))
    for ref in find_relative_times(query, today):
        if free(ref.start, ref.end):
            period = _relative(ref.meaning)
            if period is not None:
                taken.append((ref.start, ref.end))
                found.append((ref.start, period))
    return [p for _, p in sorted(found, key=lambda t: t[0])]


_ASKS_WHEN = re.compile(
    r"^\W*when\b|\b(?:what|which) (?:date|day|year|month|week|time)\b|\bhow long ago\b", re.I
)
_TIME_WORDS = re.compile(
    r"\b(?:today|tonight|yesterday|tomorrow|ago|last|next|weekend|week|month|year|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|spring|summer|fall|autumn|"
    r"winter|morning|evening|night|recently|(?:19|20)\d\d|january|february|march|april|"
    r"june|july|august|september|october|november|december|may \d{1,2}|\d{1,2} may)\b",
    re.I,
)


def asks_when(query: str) -> bool:
    """Whether ``query`` asks for a time ("When did ...", "What year ...", "how long ago")."""
    return _ASKS_WHEN.search(query) is not None


def mentions_time(text: str) -> bool:
    """Whether ``text`` says when something happened (a date, a weekday, "yesterday", ...)."""
    return _TIME_WORDS.search(text) is not None


_ASKS_PREVIOUS = re.compile(
    r"\b(?:used to|use to|previous(?:ly)?|formerly|former|prior to (?:that|this|now)|"
    r"before (?:that|this|now|moving|switching|changing|getting)|"
    r"(?:her|his|their|my|your|the user's|its) (?:old|last|first|original) |"
    r"(?:what|which|where|who) (?:was|were) .{0,60}\bbefore\b|"
    r"\bbefore\W*$|at first|originally|in the past)",
    re.IGNORECASE,
)


def asks_previous(query: str) -> bool:
    """Whether ``query`` asks what held *before* the present value.

    "What car did Dana drive before?", "Where did the user use to live?",
    "What was his previous job?", "her old phone number": the answer is the
    version a newer memory replaced, not the current one. English only; a
    "before" that anchors an event ("what did she do before the concert?")
    is not a question about a replaced value and is not matched.
    """
    return _ASKS_PREVIOUS.search(query) is not None


_BEFORE_WHAT = re.compile(r"\bbefore\s+(?P<what>[^?.!,;:]+?)\s*[?.!]*\s*$", re.IGNORECASE)


def before_what(query: str) -> frozenset[str]:
    """The keyword terms of what a question puts "before" at its end ("before boxing").

    "Which sport did Sofia play before taking up boxing?" ->
    ``{"take", "box"}`` (lemmas, as the index keeps them). Empty when the
    question ends otherwise. Whether it asks for a replaced value or anchors
    an event ("before the concert") is not decided here: a search reads it as
    the former when a memory that replaced another one says it
    (``search.names_newer``), or when a fact about its subject says it
    (``search.before_unlinked``).
    """
    found = _BEFORE_WHAT.search(query)
    return frozenset(query_terms(found.group("what"))) if found else frozenset()


_COLLECTION = re.compile(
    r"\bhow\s+(?:many|often)\b|\bboth\b|\b(?:kinds|types|sorts)\s+of\b"
    # the plural copula: "what are Joanna's hobbies", "what are her dogs' names"
    r"|^\W*(?:what|which|who)\s+are\b"
    # a plural asked for: "what books", "which events" (not "what is", "which does")
    r"|^\W*(?:what|which)\s+(?!is\b|does\b|has\b|was\b|this\b|us\b)[a-z]+[^s\W]s\b"
    # the present perfect, what has piled up: "what has she painted", "has he seen"
    r"|\b(?:has|have)\s+(?:\w+\s+){0,3}?(?:\w+ed|been|done|made|seen|read|gone|taken|"
    r"given|written|won|got|bought|built|heard|met|tried|visited)\b",
    re.IGNORECASE,
)


def topic_words(query: str, names: Iterable[str] = ()) -> frozenset[str]:
    """The keyword terms of what a question asks about, past who and when.

    Left out: the terms of ``names`` (the person asked about), times ("in June
    2026", "last spring", "these days", "now") and what the question puts
    "before" (:func:`before_what`). "Where is Sofia employed these days?" ->
    ``{"employ"}``; "What important values does John want to teach his kids
    through adopting a rescue dog?" keeps eight: a specific question, not one
    about an attribute.
    """
    bare = _PRESENT_MARK.sub(" ", _TIME_WORDS.sub(" ", query))
    drop = set(before_what(query))
    for name in names:
        drop.update(query_terms(name))
    return frozenset(t for t in query_terms(bare) if t not in drop and not t.isdigit())


def asks_collection(query: str) -> bool:
    """Whether ``query`` asks for many things or what has piled up, not one value.

    "What books has Melanie read?", "How many children does she have?", "What
    types of pottery ...", "What has she painted?", "... both ...": their
    answer is several statements, so no single latest statement holds it (the
    ``attribute_currency`` lever stays out). "Where is Sofia employed?",
    "What does Dana drive these days?" ask one value. English only.
    """
    return _COLLECTION.search(query) is not None


_PRESENT_MARK = re.compile(
    r"\b(?:now|these days|nowadays|currently|current|at the moment|at present|presently|"
    r"still|anymore|any more|today)\b",
    re.IGNORECASE,
)
_WH_PRESENT = (
    r"(?:what|which|where|who|whom|whose|how)(?:['\u2019](?:s|re)\b|\b[^?.!]{0,40}?\b"
    r"(?:is|are|does|do|has|have)\b)"
)
_PRESENT_FORM = re.compile(
    rf"^\W*(?:{_WH_PRESENT}|(?:is|are|does|do|has|have)\b)",
    re.IGNORECASE,
)
"""A present-tense question: "Where does Dana live?", "What's her address?"."""
_ASKING = re.compile(
    r"^\W*(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?(?:tell|remind)\s+me|"
    r"(?:do|does)\s+(?:you|anyone)\s+(?:know|remember|recall)|any\s+idea|"
    r"(?:please\s+)?(?:tell|remind)\s+me|i\s+(?:wonder|forget))\b[\s,:]*",
    re.IGNORECASE,
)
"""A question put inside a request ("Do you know where Dana lives?", "Any idea where
Maya is based?"): its tense is the inner clause's, which has no auxiliary up front."""
_INNER_FORM = re.compile(rf"^\W*{_WH_PRESENT}", re.IGNORECASE)
_PAST_MARK = re.compile(
    r"\b(?:did|was|were|had|been|ago|last|once|ever|went|used|earlier|first|originally)\b",
    re.IGNORECASE,
)


_MANNER = re.compile(r"^\W*how\s+(?:does|do|is|are)\b", re.IGNORECASE)
"""A question of manner: "How does Gina stay confident?". With a present marker ("How
does Ines keep fit these days?") it asks what holds now all the same."""


def asks_present(query: str) -> bool:
    """Whether ``query`` asks what holds *now* ("Where does Dana live?").

    "Which sport is Sofia into these days?" too. A present marker ("now",
    "these days", "currently", ...) or a present-tense question form ("what
    is", "where does", "does she ..."), with no past tense ("did", "was",
    "ago", ...), no time named ("in June 2026", "last spring":
    :func:`mentions_time`) and neither a "when" (:func:`asks_when`) nor a
    "before" (:func:`asks_previous`) question. English only.
    """
    if asks_previous(query) or asks_when(query) or _PAST_MARK.search(query):
        return False
    if _PRESENT_MARK.search(query):
        return _TIME_WORDS.search(_PRESENT_MARK.sub(" ", query)) is None
    if _MANNER.search(query):
        return False  # how someone does something, not which value holds
    inner = _ASKING.sub("", query, count=1)
    if inner != query:
        # "Do you know where Dana lived?" is past, though it opens with "do": only an
        # inner clause with its own present form says now ("... where Maya is based").
        return _INNER_FORM.search(inner) is not None and not mentions_time(query)
    return _PRESENT_FORM.search(query) is not None and not mentions_time(query)
