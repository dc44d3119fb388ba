"""Ranking the way applications use engramdb: facts one add at a time, "the user", changes.

Each test is a failure an independent user run found (issue 28 / 29), kept
as the smallest store that shows it, with the real embedder and SQLite.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engramdb import Memory, search
from engramdb.core.records import Hit, MemoryRow
from engramdb.embedders import LocalEmbedder
from engramdb.expand import same_conversation
from engramdb.nlp.querytime import asks_present, asks_previous, before_what
from engramdb.search import (
    FusionConfig,
    before_unlinked,
    names_newer,
    plan_query,
    subject_free_text,
    subject_terms,
)
from rows import memory_row


@pytest.fixture
def mem(tmp_path: Path, embedder: LocalEmbedder) -> Memory:
    return Memory(tmp_path / "e.db", embedder=embedder, llm=None)


def _say_each(memory: Memory, user_id: str, turns: list[tuple[str, str, str]]) -> None:
    """Store each ``(day, speaker, text)`` as its own chat turn (``infer=False``)."""
    for day, who, text in turns:
        memory.add(
            [{"role": "user", "content": text, "name": who}],
            user_id=user_id,
            infer=False,
            timestamp=day,
        )


def _first(memory: Memory, query: str, **scope: str) -> str:
    hits = memory.search(query, **scope, top_k=5)["results"]
    assert hits, query
    return str(hits[0]["memory"])


_PERSONAL_OFF = {"attribute_gate": 0.0, "owner_names": False, "other_subject_factor": 1.0}
"""The personal-question levers off, to measure another lever alone."""


def test_who_the_question_is_about_is_a_scope_fact_not_a_keyword(mem: Memory) -> None:
    for text in (
        "Alice likes Thai green curry",
        "User's partner is called Sam",
        "User's favourite band is Radiohead",
        "I'm vegan and allergic to peanuts",
        "We adopted a cat called Miso",
    ):
        mem.add(text, user_id="alice", infer=False)
    # "the user" and the user's own name lift nothing by themselves: no keyword or
    # entity points for the "User ..." summaries or the memory that names alice
    hits = mem.search("What can the user not eat?", user_id="alice", explain=True)["results"]
    for hit in hits:
        if hit["memory"].startswith(("User's", "Alice")):
            assert hit["score_details"]["bm25"] == 0.0 and hit["score_details"]["entity"] == 0.0
    # what earns keyword points is the attribute asked (attributes.py), which the answer has
    assert hits[0]["memory"].startswith("I'm vegan")
    hits = mem.search("What can alice not eat?", user_id="alice", explain=True)["results"]
    # The failure: the answer ninth at 0.001 behind every memory naming alice.
    # The name earns no keyword or entity points, and the attribute asked (diet) is the
    # answer's: it comes first.
    assert hits[0]["memory"].startswith("I'm vegan"), [h["memory"] for h in hits]
    curry = next(h for h in hits if h["memory"].startswith("Alice likes"))
    assert curry["score_details"]["entity"] == 0.0 and curry["score_details"]["bm25"] == 0.0
    assert _first(mem, "Who is the user's partner?", user_id="alice").startswith("User's partner")
    plan = plan_query("What can alice not eat?", FusionConfig(), subject_terms("alice"))
    assert "alice" not in plan.terms and "alice" not in plan.entities
    assert "alice" in plan.names  # still a speaker name for the actor signal
    assert subject_terms("alice_smith-2") >= {"alice", "smith", "user"}
    assert "2" not in subject_terms("alice_smith-2")


def test_the_subject_is_kept_out_of_the_vectors(tmp_path: Path, embedder: LocalEmbedder) -> None:
    facts = (
        "User's partner is called Sam",
        "User's favourite band is Radiohead",
        "I'm vegan and allergic to peanuts",
        "We adopted a cat called Miso",
    )
    assert subject_free_text("User's partner is called Sam") == "partner is called Sam"
    assert subject_free_text("The user has a dog.") == "has a dog."
    assert subject_free_text("Sam is the user's partner") == "Sam is partner"
    assert subject_free_text("User") == "User"  # never embeds an empty text
    assert subject_free_text("What does the user eat?") == "What does eat?"
    firsts = {}
    for free in (True, False):
        memory = Memory(
            tmp_path / f"{free}.db",
            embedder=embedder,
            llm=None,
            # measured apart from the personal-question levers, which also help here
            config={"retrieval": {"subject_free": free, **_PERSONAL_OFF}},
        )
        for text in facts:
            memory.add(text, user_id="u1", infer=False)
        firsts[free] = _first(memory, "What can the user not eat?", user_id="u1")
    # The small model matches the word "user": with it in the vectors, a "User's ..."
    # summary outranks the first-person memory that answers.
    assert firsts[True].startswith("I'm vegan")
    assert not firsts[False].startswith("I'm vegan")


def test_facts_added_one_at_a_time_are_not_a_conversation(mem: Memory) -> None:
    for text, day in (
        ("We have a corgi named Mochi", "2024-03-01"),
        ("My blood type is O negative", "2024-03-05"),
        ("I work as a nurse at St Mary's", "2024-03-09"),
    ):
        mem.add(text, user_id="dana", infer=False, timestamp=f"{day}T10:00:00Z")
    hits = mem.search("What is Dana's blood type?", user_id="dana", explain=True)["results"]
    assert hits[0]["memory"] == "My blood type is O negative"
    # no hit was lent a score by the fact stored next to it, nor borrowed its words
    assert all("neighbour_of" not in h["score_details"] for h in hits)
    corgi = next(h for h in hits if "corgi" in h["memory"])
    assert corgi["score_details"]["bm25"] == 0.0


def test_one_conversation_still_lends_to_its_neighbours(mem: Memory) -> None:
    mem.add(
        [
            {"role": "user", "content": "How long have you had your boat?", "name": "Ann"},
            {"role": "user", "content": "Three years now, since the spring.", "name": "Bo"},
        ],
        user_id="pair",
        run_id="s1",
        infer=False,
        timestamp="2024-05-01T10:00:00Z",
    )
    hits = mem.search("How long has Bo had the boat?", user_id="pair", explain=True)["results"]
    answer = next(h for h in hits if h["memory"].startswith("Three years"))
    # the answer borrows the question's words: it is one conversation (one add)
    assert answer["score_details"]["bm25"] > 0


def _row(created: str, run: str | None, observed: str | None = None) -> MemoryRow:
    return dataclasses.replace(memory_row("m", observed=observed), created_at=created, run_id=run)


def test_same_conversation_rule() -> None:
    a = _row("2024-01-01T10:00:00+00:00", None)
    b = _row("2024-01-01T10:00:00+00:00", None)
    c = _row("2024-01-01T10:00:05+00:00", None)
    assert same_conversation(a, b, 6.0)  # one add: one transaction
    assert not same_conversation(a, c, 6.0)  # separate adds without a run
    r1 = _row("2024-01-01T10:00:00+00:00", "r", "2024-01-01T10:00:00+00:00")
    r2 = _row("2024-01-01T11:00:00+00:00", "r", "2024-01-01T12:00:00+00:00")
    r3 = _row("2024-01-02T11:00:00+00:00", "r", "2024-01-03T12:00:00+00:00")
    assert same_conversation(r1, r2, 6.0)
    assert not same_conversation(r1, r3, 6.0)


def test_a_question_about_before_gets_the_replaced_version_first(mem: Memory) -> None:
    old = mem.add("I drive a Kia Niro", user_id="eve", infer=False, timestamp="2024-01-10")
    old_id = old["results"][0]["id"]
    mem.add("Something else entirely about gardening", user_id="eve", infer=False)
    mem.add(
        "We sold the Kia; I drive a Ford Focus now",
        user_id="eve",
        infer=False,
        timestamp="2024-06-10",
        links={old_id: "updates"},
    )
    assert _first(mem, "What car does eve drive?", user_id="eve").startswith("We sold the Kia")
    assert _first(mem, "What car did eve drive before?", user_id="eve") == "I drive a Kia Niro"
    assert _first(mem, "What was her previous car?", user_id="eve") == "I drive a Kia Niro"


@pytest.mark.parametrize(
    ("question", "previous"),
    [
        ("What car did Dana drive before?", True),
        ("Where did the user use to live?", True),
        ("What was his previous job?", True),
        ("What is her old phone number?", True),
        ("Which city was Idris based in before moving to Gdansk?", True),
        ("What did she do before the concert?", False),
        ("Where does Dana live now?", False),
        ("How old is Dana?", False),
        ("When did Caroline go to the support group?", False),
    ],
)
def test_asks_previous(question: str, previous: bool) -> None:
    assert asks_previous(question) is previous


@pytest.mark.parametrize(
    ("question", "present"),
    [
        ("Where does Dana live?", True),
        ("Which sport is Sofia into these days?", True),
        ("What car does the user drive now?", True),
        ("Is she still vegetarian?", True),
        ("Who is Dana dating?", True),
        ("Where did Dana live in June 2026?", False),
        ("What car did eve drive before?", False),
        ("When did Caroline go to the support group?", False),
        ("Where was Dana living last spring?", False),
        ("What did the user eat at the wedding?", False),
        ("What is the user's phone number as of 2023?", False),
        # A manner asks how, not which value holds, unless it says "now".
        ("How does Gina stay confident in her business?", False),
        ("How does Nate describe the stuffed animal?", False),
        ("How does Ines keep fit these days?", True),
        ("How old is Dana?", True),
        # Contractions are the same question ("what's" is "what is").
        ("What's my address?", True),
        ("Who\u2019s Dana seeing?", True),
        ("Who's been Dana's dentist?", False),
        # A question inside a request takes the inner clause's tense.
        ("Any idea where Maya is based?", True),
        ("Can you tell me what Sofia's phone number is?", True),
        ("Do you know where Dana lived?", False),
        ("Do you remember which car Sofia drove?", False),
        ("Do you know where Dana lives?", False),  # no auxiliary to read: not claimed
    ],
)
def test_asks_present(question: str, present: bool) -> None:
    assert asks_present(question) is present


def test_a_present_question_gets_the_newer_statement(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """Verbatim turns, no links: with the present-tense decay on (off by default, see
    docs/retrieval.md), "what now" prefers the newer of two alike statements."""
    config = {"retrieval": {"present_recency_weight": 0.6}}
    with Memory(tmp_path / "p.db", config, embedder=embedder, llm=None) as m:
        m.add("I drive a Kia Niro", user_id="eve", infer=False, timestamp="2023-02-01")
        m.add("I drive a Ford Focus", user_id="eve", infer=False, timestamp="2025-02-01")
        now = m.search("What car does eve drive now?", user_id="eve", explain=True)["results"]
        assert now[0]["memory"] == "I drive a Ford Focus"
        assert now[0]["score_details"]["recency"] > now[1]["score_details"]["recency"]
        # A question about a date is not about now: no decay applied.
        then = m.search("What car did eve drive in 2023?", user_id="eve", explain=True)
        assert all("recency" not in r["score_details"] for r in then["results"])


_CHAT = [
    ("Sofia", "Hey Bram! How was your week?"),
    ("Bram", "Not bad at all! Tired, but good."),
    ("Sofia", "Lol, classic."),
    ("Bram", "I've been birdwatching every Sunday at the reservoir."),
    ("Sofia", "That's lovely."),
    ("Bram", "Pretty good, busy though. You?"),
]


@pytest.mark.parametrize("question", ["What is Bram's hobby?", "What does Bram do on weekends?"])
def test_small_talk_does_not_outrank_what_was_said(
    tmp_path: Path, embedder: LocalEmbedder, question: str
) -> None:
    """Verbatim turns: a content-free reply sits near every question in the vector space."""
    messages = [{"role": "user", "content": text, "name": who} for who, text in _CHAT]
    tops = {}
    for factor in (1.0, FusionConfig().chatter_factor):
        # Measured apart from the speaker and personal-question levers, which also put
        # the fact first here.
        config = {"retrieval": {"chatter_factor": factor, "speaker_names": False, **_PERSONAL_OFF}}
        with Memory(tmp_path / f"c{factor}.db", config, embedder=embedder, llm=None) as m:
            m.add(messages, user_id="bram", infer=False)
            hits = m.search(question, user_id="bram", explain=True)["results"]
            tops[factor] = hits[0]["memory"]
            said = {h["memory"]: h["score_details"].get("chatter", 1.0) for h in hits}
    assert tops[1.0] != _CHAT[3][1]  # without the lever, small talk comes first
    assert tops[FusionConfig().chatter_factor] == _CHAT[3][1]
    assert said[_CHAT[3][1]] == 1.0 and said[_CHAT[1][1]] == FusionConfig().chatter_factor


def test_what_counts_as_small_talk() -> None:
    chatter = search._chatter_terms()
    for text in ("Not bad at all! Tired, but good.", "Lol, classic.", "Haha, fair enough."):
        assert search._own_terms(text) <= chatter, text
    for text in ("I'm vegan", "I love hiking", "Work has been crazy, too many meetings"):
        assert not search._own_terms(text) <= chatter, text


def test_newer_first_for_the_present_among_alike_statements(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """Facts stored one add at a time, no links: with ``present_alike_cosine`` on
    (off by default), "what now" gets the later of two statements about the same
    thing; a question with a date, and a chain of linked versions, are left alone."""
    # The attribute lever (on by default) finds the Ford Focus by itself: off, to
    # measure this one alone.
    config = {"retrieval": {"present_alike_cosine": 0.88, "attribute_currency": False}}
    with Memory(tmp_path / "n.db", config, embedder=embedder, llm=None) as m:
        m.add("Eve drives a Kia Niro.", user_id="eve", infer=False, timestamp="2023-02-01")
        m.add("Eve adopted a greyhound.", user_id="eve", infer=False, timestamp="2023-05-01")
        m.add("Eve drives a Ford Focus.", user_id="eve", infer=False, timestamp="2025-02-01")
        now = m.search("What car does Eve drive now?", user_id="eve", explain=True)["results"]
        assert now[0]["memory"] == "Eve drives a Ford Focus."
        assert now[0]["score_details"].get("newer_first") is True
        assert [r["score"] for r in now] == sorted((r["score"] for r in now), reverse=True)
        then = m.search("What car did Eve drive in 2023?", user_id="eve", explain=True)
        assert not any(r["score_details"].get("newer_first") for r in then["results"])
    with Memory(tmp_path / "off.db", embedder=embedder, llm=None) as m:  # the default: off
        m.add("Eve drives a Kia Niro.", user_id="eve", infer=False, timestamp="2023-02-01")
        m.add("Eve drives a Ford Focus.", user_id="eve", infer=False, timestamp="2025-02-01")
        found = m.search("What car does Eve drive now?", user_id="eve", explain=True)["results"]
        assert not any(r["score_details"].get("newer_first") for r in found)


def test_newer_first_leaves_chains_and_unalike_hits_alone() -> None:
    import numpy as np

    def hit(ident: str, day: str, score: float, kinds: dict[str, str] | None = None) -> Hit:
        row = dataclasses.replace(
            memory_row(ident, observed=f"{day}T00:00:00.000000+00:00"), link_kinds=kinds or {}
        )
        return Hit(row, score, {"semantic": score})

    hits = [hit("old", "2023-01-01", 0.9), hit("other", "2024-01-01", 0.8),
            hit("new", "2025-01-01", 0.7)]  # fmt: skip
    vectors = np.array([[1.0, 0.0], [0.0, 1.0], [0.995, 0.0998]], dtype=np.float32)
    moved = search.newer_first(hits, vectors, 0.9)
    assert [h.row.id for h in moved] == ["new", "old", "other"]
    assert [h.score for h in moved] == [0.9, 0.8, 0.7]
    chained = [hit("old", "2023-01-01", 0.9, {"x": "updated_by"}), hits[1], hits[2]]
    assert [h.row.id for h in search.newer_first(chained, vectors, 0.9)] == [
        "old", "other", "new",
    ]  # fmt: skip
    assert [h.row.id for h in search.newer_first(hits, vectors, 0.999)] == [
        "old", "other", "new",
    ]  # fmt: skip


def test_mem0_result_shape(mem: Memory) -> None:
    mem.add("I like tea", user_id="u", infer=False)
    hit = mem.search("tea", user_id="u", explain=True)["results"][0]
    assert "expiration_date" in hit and hit["expiration_date"] is None
    details = hit["score_details"]
    for key in ("semantic_score", "bm25_score", "entity_boost", "final_score"):
        assert key in details
    assert details["final_score"] == hit["score"]
    listed = mem.get_all(user_id="u")["results"][0]
    assert listed["expiration_date"] is None


def test_the_top_answer_does_not_depend_on_top_k(mem: Memory) -> None:
    """single -> dating -> engaged -> married: whichever version matches, the latest wins."""
    previous = None
    for day, text in (
        ("2024-01-05", "Dana is single and not looking"),
        ("2024-03-05", "Dana is dating Sam, they met at the climbing gym"),
        ("2024-06-05", "Dana and Sam got engaged in Lisbon"),
        ("2024-09-05", "Dana married Sam in a small ceremony"),
    ):
        links = {previous: "updates"} if previous else None
        out = mem.add(text, user_id="dana", infer=False, timestamp=day, links=links)
        previous = out["results"][0]["id"]
    for i in range(30):  # others' news, dating included
        mem.add(f"Colleague {i} is dating someone from the office", user_id="dana", infer=False)
    tops = {
        k: mem.search("Who is Dana dating?", user_id="dana", top_k=k)["results"][0]["memory"]
        for k in (1, 5, 10, 50)
    }
    assert set(tops.values()) == {"Dana married Sam in a small ceremony"}, tops


def test_the_extraction_prompt_shows_the_latest_version_of_a_related_chain(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    """Austin shown, Melbourne not: Gdansk could not supersede Melbourne. Now it is shown."""
    import json

    from engramdb.llms import ScriptedLLM

    llm = ScriptedLLM([json.dumps({"memory": []})])
    with Memory(tmp_path / "e.db", embedder=embedder, llm=llm) as m:
        austin = m.add("Idris lives in Austin, Texas", user_id="idris", infer=False)
        austin_id = austin["results"][0]["id"]
        # the replacement shares no words with what is said next
        m.add(
            "Moved to Melbourne for the new role",
            user_id="idris",
            infer=False,
            links={austin_id: "updates"},
        )
        for i in range(30):  # they fill the related budget after Austin, before Melbourne
            m.add(
                f"Idris packed box {i} of Texas souvenirs for a move", user_id="idris", infer=False
            )
        m.add(
            [{"role": "user", "content": "Packing up Austin, Texas for good: Gdansk, here I come"}],
            user_id="idris",
        )
    prompt = "\n".join(str(msg["content"]) for msg in llm.calls[0].messages)
    assert "Idris lives in Austin, Texas" in prompt
    assert "Moved to Melbourne for the new role" in prompt


@pytest.mark.parametrize(
    ("question", "terms"),
    [
        ("What did Bram study before a coding bootcamp?", {"coding", "bootcamp"}),
        ("Which sport did Sofia play before taking up boxing?", {"take", "box"}),
        ("Who did Diego date before Hamid?", {"hamid"}),
        ("What did she drive before?", set()),
        ("Before the move, where did Dana work?", set()),
    ],
)
def test_before_what(question: str, terms: set[str]) -> None:
    assert before_what(question) == terms


def test_names_newer_needs_a_memory_that_replaced_another() -> None:
    newer = memory_row("Sofia joined a boxing club in May 2023.")
    assert names_newer(frozenset({"take", "box"}), {"old": [newer]})  # 1 of 2 terms
    assert not names_newer(frozenset({"concert"}), {"old": [newer]})
    assert not names_newer(frozenset(), {"old": [newer]})
    assert not names_newer(frozenset({"box"}), {})  # nothing was replaced


def test_before_a_value_asks_for_what_it_replaced(tmp_path: Path, embedder: LocalEmbedder) -> None:
    """Issue 29's "before" questions that name the current value, on a linked chain.

    "before boxing" names the newer version: the answer is the one it replaced,
    whichever ranks higher on the words. "before the concert" names no newer
    version: an event anchor, the order is left alone.
    """
    with Memory(tmp_path / "b.db", embedder=embedder, llm=None) as m:
        old = m.add(
            "Sofia swims three times a week.", user_id="s", infer=False, timestamp="2023-01-10"
        )["results"][0]["id"]
        new = m.add(
            "Sofia joined a boxing club and quit swimming.",
            user_id="s",
            infer=False,
            timestamp="2023-05-02",
            links={old: "updates"},
        )["results"][0]["id"]
        m.add(
            "Sofia went to a Radiohead concert in March.",
            user_id="s",
            infer=False,
            timestamp="2023-03-20",
        )
        before = m.search("Which sport did Sofia do before taking up boxing?", user_id="s")
        assert [r["id"] for r in before["results"][:2]] == [old, new]
        now = m.search("Which sport does Sofia do now?", user_id="s")["results"]
        assert now[0]["id"] == new
        event = m.search("What did Sofia do before the concert?", user_id="s")["results"]
        plain = m.search("What did Sofia do around the concert?", user_id="s")["results"]
        # No newer version says "concert": the chain keeps its usual order (newer first).
        ids = [r["id"] for r in event]
        assert ids.index(new) < ids.index(old)
        assert {r["id"] for r in plain} == set(ids)


def test_before_a_value_without_links_on_facts_not_on_chat_turns() -> None:
    """No link to follow: the subject's earlier fact rises above the one that says X."""
    what = before_what("Which sport did Sofia play before taking up boxing?")

    def hits(*rows: MemoryRow) -> list[Hit]:
        return [Hit(r, 1.0 - i / 10, {}) for i, r in enumerate(rows)]

    boxing = memory_row("Sofia joined a boxing club.", observed="2023-05-02", actor="Sofia")
    bram = memory_row("Bram swims on Sundays.", observed="2023-01-01", actor="Bram")
    later = memory_row("Sofia moved to Gdansk.", observed="2023-06-01", actor="Sofia")
    swim = memory_row("Sofia swims three times a week.", observed="2023-01-10", actor="Sofia")
    out = before_unlinked(hits(boxing, bram, later, swim), what)
    assert [h.row.id for h in out] == [swim.id, boxing.id, bram.id, later.id]
    assert out[0].score == 1.0 and out[0].explain["before"] == boxing.id
    # Chat turns ("Switched to boxing!", first person): nothing moves.
    turn = memory_row("Switched to boxing last week!", observed="2023-05-02", actor="Sofia")
    old_turn = memory_row("I swim three times a week.", observed="2023-01-10", actor="Sofia")
    assert before_unlinked(hits(turn, old_turn), what) == hits(turn, old_turn)
    # No anchor, or no earlier fact of the same person: nothing moves.
    assert before_unlinked(hits(bram, swim), what) == hits(bram, swim)
    assert before_unlinked(hits(boxing, bram, later), what) == hits(boxing, bram, later)


_SOFIA = (
    "Sofia enjoys gardening in their spare time.",
    "Got tickets to see Miles Davis in November!",
    "Cracked the screen on my OnePlus 11 again",
    "Rent in Edinburgh went up again, ugh",
    "Work has been crazy this week, too many meetings",
    "Adopted a dachshund from the shelter, we call her Frankie",
)


def test_a_paraphrased_personal_question_finds_the_fact_not_the_summary_with_the_name(
    mem: Memory,
) -> None:
    # Before the attribute part and the one-fact owner, the summary that names Sofia
    # answered every question about her on the name alone (issue 28's facts shape).
    for text in _SOFIA:
        mem.add(text, user_id="pf09", infer=False)
    asked = {
        "What does Sofia put on their headphones?": "Got tickets",
        "What device does Sofia text from?": "Cracked the screen",
        "Which city does Sofia call home?": "Rent in Edinburgh",
        "What's the name of Sofia's animal?": "Adopted a dachshund",
    }
    for question, answer in asked.items():
        hits = mem.search(question, user_id="pf09", top_k=6, explain=True)["results"]
        top = hits[0]
        assert top["memory"].startswith(answer), (question, top["memory"])
        # the name says who: the store's own person, not a keyword or entity of the summary
        assert top["score_details"]["owner"] == ["sofia"]
        assert top["score_details"]["entity"] == 0.0
        # and the answer is the memory most about what the question asks
        parts = [h["score_details"]["parts"]["attribute"] for h in hits]
        assert parts[0] == max(parts) > 0, (question, parts)


def test_the_attribute_part_is_off_with_its_weight_and_on_rrf(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    for config in ({"attribute_weight": 0.0}, {"method": "rrf"}):
        m = Memory(
            tmp_path / f"{len(config)}{next(iter(config))}.db",
            {"retrieval": config},
            embedder=embedder,
        )
        for text in _SOFIA:
            m.add(text, user_id="u", infer=False)
        hit = m.search("What device does Sofia text from?", user_id="u", explain=True)["results"][0]
        assert "attribute" not in hit["score_details"]["parts"]
        m.close()


def test_before_a_named_value_on_chat_turns_gets_what_held_before_it(mem: Memory) -> None:
    # Verbatim turns, no links: "before Swahili" anchors at the first statement of
    # Swahili by the person asked about, and the answer is their latest statement of
    # the attribute before it (not the current value the question names, not a later
    # restatement, not the other speaker's).
    turns = [
        ("2024-01-05", "Bram", "I've been learning Japanese for a while, the grammar is wild."),
        ("2024-02-11", "Sofia", "My Portuguese lessons start next week!"),
        ("2024-03-02", "Bram", "Surviving! The week flew by."),
        ("2024-04-20", "Bram", "I've let my Japanese slide; Swahili is all I practise now."),
        ("2024-05-30", "Bram", "My Swahili teacher says my accent is improving."),
    ]
    _say_each(mem, "pair", turns)
    question = "What language did Bram learn before Swahili?"
    hits = mem.search(question, user_id="pair", top_k=5, explain=True)["results"]
    assert hits[0]["memory"].startswith("I've been learning Japanese"), [h["memory"] for h in hits]
    assert hits[0]["score_details"]["latest_of"] == ["@language"]
    # the present question still gets the latest statement
    now = _first(mem, "Which language is Bram studying now?", user_id="pair")
    assert "Swahili" in now


def test_a_question_about_what_was_said_is_not_a_question_about_which_value_holds(
    mem: Memory,
) -> None:
    # "What does Kai's cat do all day?" asks the pet attribute, but it is about what a
    # statement says ("sleeps all day"), not which pet holds now: the latest statement
    # of the attribute ("At night Mruczek hunts moths") does not take the first place.
    _say_each(
        mem,
        "u",
        [
            ("2024-01-02", "Kai", "My cat sleeps all day on the sofa, his name is Mruczek."),
            ("2024-02-02", "Kai", "I spend all day at the office on Mondays."),
            ("2024-03-02", "Kai", "At night Mruczek hunts moths on the balcony."),
        ],
    )
    hits = mem.search("What does Kai's cat do all day?", user_id="u", explain=True)["results"]
    assert hits[0]["memory"].startswith("My cat sleeps all day"), [h["memory"] for h in hits]
    assert "latest_of" not in hits[0]["score_details"]
    # asked which pet, the latest statement of the attribute still comes first
    assert _first(mem, "Which pet does Kai have these days?", user_id="u").startswith("At night")


def test_a_reply_of_one_word_does_not_state_what_holds_now(mem: Memory) -> None:
    # Verbatim turns: the replies after news of a partner lean towards the partner
    # attribute as the classifier reads their vectors, and they are the person's
    # latest turns; but "That's huge, I'm so happy for you." states no partner. What
    # holds now is the latest turn that says something (search.STATING_TERMS).
    _say_each(
        mem,
        "pair",
        [
            ("2024-01-05", "Nadia", "My partner Aziz says hi, by the way."),
            ("2024-06-10", "Nadia", "Okay don't laugh, I started dating Noa two weeks ago."),
            ("2024-06-10", "Tariq", "No way! Tell me everything."),
            ("2024-09-01", "Nadia", "Yes, still loving it!"),
            ("2024-11-20", "Nadia", "That's huge, I'm so happy for you."),
        ],
    )
    for question in ("Who is Nadia dating?", "Who is Nadia's partner these days?"):
        hits = mem.search(question, user_id="pair")["results"]
        assert hits[0]["memory"].startswith("Okay don't laugh"), [h["memory"] for h in hits]


def test_a_short_fact_that_names_its_subject_states_what_holds_now(mem: Memory) -> None:
    # "Bram is vegan." has one content word past the speaker's name, but the name opens
    # it as its subject: it is a statement, and the latest one of the diet attribute.
    _say_each(
        mem,
        "facts",
        [
            ("2024-01-05", "Bram", "Bram is vegetarian."),
            ("2024-06-10", "Bram", "Bram is vegan."),
        ],
    )
    hits = mem.search("Is Bram vegetarian these days?", user_id="facts", explain=True)["results"]
    assert hits[0]["memory"] == "Bram is vegan.", [h["memory"] for h in hits]
    assert hits[0]["score_details"]["latest_of"] == ["@diet"]


def test_a_new_occupation_does_not_answer_which_company(mem: Memory) -> None:
    # Work is one attribute (@job) with two sides that change on their own: Signe
    # joined a hotel group, then qualified as a vet there. The latest work statement
    # says her occupation; "Which company ...?" asks for the employer
    # (nlp/facets.py), and "What does she do for a living?" for the occupation.
    _say_each(
        mem,
        "work",
        [
            ("2023-02-01", "Signe", "Signe works as an architect."),
            ("2023-03-10", "Signe", "Signe joined Harbourside Hotels in March."),
            ("2023-11-20", "Signe", "Signe changed jobs from architect to veterinarian."),
        ],
    )
    for question, answer in (
        ("Which company does Signe work for now?", "Signe joined Harbourside"),
        ("What does Signe do for a living these days?", "Signe changed jobs"),
    ):
        hits = mem.search(question, user_id="work", explain=True)["results"]
        assert hits[0]["memory"].startswith(answer), [h["memory"] for h in hits]


def test_a_question_about_many_things_is_not_one_of_which_value_holds(mem: Memory) -> None:
    # "What are Joanna's hobbies?" asks for several statements, not which one value of
    # the hobby attribute holds now: the latest hobby statement ("tried a pottery class
    # once") does not take the first place from the one that answers. (A question of
    # manner, "How does Gina stay confident?", is left out the same way: test_asks_present.)
    _say_each(
        mem,
        "j",
        [
            (
                "2024-01-05",
                "Joanna",
                "Joanna's hobbies are reading, hiking and old films.",
            ),
            ("2024-02-10", "Joanna", "Joanna is training for a half marathon in spring."),
            ("2024-03-15", "Joanna", "Joanna tried a pottery class once and made a wonky bowl."),
        ],
    )
    hits = mem.search("What are Joanna's hobbies?", user_id="j", explain=True)["results"]
    assert hits[0]["memory"].startswith("Joanna's hobbies are"), [h["memory"] for h in hits]
    assert "latest_of" not in hits[0]["score_details"]
