"""The question readings the attribute-currency lever relies on (nlp/querytime.py)."""

from __future__ import annotations

import pytest

from engramdb.nlp.querytime import asks_collection, topic_words


@pytest.mark.parametrize(
    "question",
    [
        "What books has Melanie read?",
        "How many children does Melanie have?",
        "What types of pottery have Melanie and her kids made?",
        "What has Melanie painted?",
        "What instruments does Melanie play?",
        "What subject have Caroline and Melanie both painted?",
        "How often does Dana go running?",
        "What are Joanna's hobbies?",
        "What are Maria's dogs' names?",
    ],
)
def test_a_question_about_many_things_asks_a_collection(question: str) -> None:
    assert asks_collection(question)


@pytest.mark.parametrize(
    "question",
    [
        "Where is Sofia employed?",
        "What is Bram's hobby?",
        "What does the user drive?",
        "Which sport is Nadia into now?",
        "Who is Sofia dating these days?",
        "Which company does Samir work for?",
        "What is Caroline's relationship status?",
        "Where did Dana live before Lisbon?",
    ],
)
def test_a_question_about_one_value_does_not(question: str) -> None:
    assert not asks_collection(question)


def test_topic_words_leave_out_who_when_and_what_came_after() -> None:
    assert topic_words("Where is Sofia employed these days?", ["Sofia"]) == {"employ"}
    assert topic_words("What language was Bram learning in January 2023?", ["Bram"]) == {
        "language",
        "learn",
    }
    # "before Swahili" names the newer value, not what is asked
    assert topic_words("What did Bram learn before Swahili?", ["Bram"]) == {"learn"}
    assert topic_words("What does the user drive?", ["user"]) == {"drive"}
    # a specific question keeps its many words
    specific = "What important values does John want to teach his kids through adopting a dog?"
    assert len(topic_words(specific, ["John"])) > 3
