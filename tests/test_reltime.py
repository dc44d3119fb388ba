"""Relative times resolved against the day they were written (nlp/reltime.py)."""

from __future__ import annotations

import datetime as dt

import pytest

from engramdb.extract import AdditiveContext, ChatMessage, KnownMemory, build_additive_prompt
from engramdb.extract.prompting import additive_variant, load_prompt, load_static_messages
from engramdb.nlp.reltime import annotate, find_relative_times

MONDAY = dt.date(2023, 5, 8)


@pytest.mark.parametrize(
    ("text", "meaning"),
    [
        ("yesterday", "2023-05-07"),
        ("Last night", "2023-05-07"),
        ("today", "2023-05-08"),
        ("tonight", "2023-05-08"),
        ("tomorrow", "2023-05-09"),
        ("last week", "the week of 2023-05-01"),
        ("next week", "the week of 2023-05-15"),
        ("this week", "the week of 2023-05-08"),
        ("last weekend", "the weekend of 2023-05-06"),
        ("this weekend", "the weekend of 2023-05-13"),
        ("last month", "April 2023"),
        ("next month", "June 2023"),
        ("last year", "2022"),
        ("next year", "2024"),
        ("last Friday", "2023-05-05"),
        ("last Monday", "2023-05-01"),
        ("this Friday", "2023-05-12"),
        ("two days ago", "2023-05-06"),
        ("3 weeks ago", "the week of 2023-04-17"),
        ("a month ago", "April 2023"),
        ("five years ago", "2018"),
        ("a couple of days ago", "2023-05-06"),
        ("in two weeks", "the week of 2023-05-22"),
        ("last summer", "summer 2022"),
        ("this summer", "summer 2023"),
        ("last winter", "winter 2022-23"),
        ("next autumn", "fall 2023"),
    ],
)
def test_each_phrase_resolves(text: str, meaning: str) -> None:
    refs = find_relative_times(f"It was {text}, I think.", MONDAY)
    assert [(r.text.lower(), r.meaning) for r in refs] == [(text.lower(), meaning)]


def test_month_arithmetic_crosses_years() -> None:
    jan = dt.date(2024, 1, 15)
    assert find_relative_times("last month", jan)[0].meaning == "December 2023"
    assert find_relative_times("next month", dt.date(2023, 12, 2))[0].meaning == "January 2024"
    assert find_relative_times("last winter", jan)[0].meaning == "winter 2022-23"
    assert find_relative_times("this winter", jan)[0].meaning == "winter 2023-24"
    # in July, "this summer" is the one in progress; in October the one just ended
    assert find_relative_times("this summer", dt.date(2023, 7, 1))[0].meaning == "summer 2023"
    assert find_relative_times("this summer", dt.date(2023, 10, 1))[0].meaning == "summer 2023"
    assert find_relative_times("last summer", dt.date(2023, 7, 1))[0].meaning == "summer 2022"


@pytest.mark.parametrize(
    "text",
    [
        "I lastly think so",
        "recently I moved",
        "the other day",
        "a while ago",
        "Thisweek",
        "nextmonth",
        "2 days",
        "in a moment",
    ],
)
def test_vague_or_partial_phrases_are_left_alone(text: str) -> None:
    assert find_relative_times(text, MONDAY) == []


def test_annotate_keeps_the_text_and_adds_the_dates() -> None:
    text = "Yesterday I went camping, and next month we fly to Oslo."
    assert annotate(text, MONDAY) == (
        "Yesterday [2023-05-07] I went camping, and next month [June 2023] we fly to Oslo."
    )
    assert annotate("nothing relative here", MONDAY) == "nothing relative here"


def _context(**changes: object) -> AdditiveContext:
    base: dict[str, object] = {
        "new_messages": [ChatMessage("user", "I moved here last month.", "Ines")],
        "recent_messages": [
            ChatMessage("user", "We met yesterday.", "Ines", "2023-04-02T10:00:00Z")
        ],
        "recent_memories": [KnownMemory("m-1", "Ines lives in Lisbon.")],
        "related_memories": [],
        "observation_date": MONDAY,
    }
    base.update(changes)
    return AdditiveContext(**base)  # type: ignore[arg-type]


def test_hints_count_from_each_message_date_else_the_observation_date() -> None:
    messages, _ = build_additive_prompt(_context())
    request = messages[-1]["content"]
    assert "I moved here last month [April 2023]." in request
    # an older message counts from its own date, not the observation date
    assert "We met yesterday [2023-04-01]." in request
    plain, _ = build_additive_prompt(_context(), time_hints=False)
    assert "I moved here last month." in plain[-1]["content"]
    assert "[April 2023]" not in plain[-1]["content"]


def test_compact_variant_sends_its_example_as_a_static_chat_turn() -> None:
    one, _ = build_additive_prompt(_context(), variant="compact")
    two, _ = build_additive_prompt(
        _context(
            new_messages=[ChatMessage("user", "Other words.")], observation_date=dt.date(2020, 1, 1)
        ),
        variant="compact",
    )
    assert [m["role"] for m in one] == ["system", "user", "assistant", "user"]
    assert one[:3] == two[:3] == load_static_messages("additive_compact")
    assert one[0]["content"] == load_prompt("additive_compact")
    assert "=== example" not in "".join(m["content"] for m in one)
    # the worked example is a request of the real shape and a valid reply
    assert one[1]["content"].startswith("Observation date: ")
    assert "<new_messages>" in one[1]["content"]
    assert one[2]["content"].startswith('{"memory": [')
    # the real request comes last, and only it varies
    assert one[3] != two[3]
    standard, _ = build_additive_prompt(_context())
    assert [m["role"] for m in standard] == ["system", "user"]
    with pytest.raises(ValueError, match="variant"):
        build_additive_prompt(_context(), variant="tiny")


def test_auto_prompt_is_compact_for_local_servers_only() -> None:
    assert additive_variant("auto", "llamacpp") == "compact"
    assert additive_variant("auto", "ollama") == "compact"
    assert additive_variant("auto", "openai") == "standard"
    assert additive_variant("auto", None) == "standard"
    assert additive_variant("standard", "ollama") == "standard"
    assert additive_variant("compact", "openai") == "compact"
