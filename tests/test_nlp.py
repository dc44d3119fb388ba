"""The NLP layer: keyword terms (any language) and rule-based entities."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from engramdb.nlp import (
    Entity,
    detect_language,
    extract_entities,
    index_terms,
    normalize_entity,
    query_terms,
)

TOKENIZER = "unicode61 remove_diacritics 2"  # the store's memory_fts tokenizer

# ----------------------------------------------------------------- terms


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("went", "go"),
        ("running", "run"),
        ("dogs", "dog"),
        ("painted", "paint"),
        ("children", "child"),
        ("Studies", "study"),
        ("Caroline's", "caroline"),
        ("well-known", "well know"),
    ],
)
def test_lemmas(text: str, expected: str) -> None:
    assert index_terms(text) == expected


def test_sentence_is_lemmatised_and_stop_words_dropped() -> None:
    terms = index_terms("Caroline went to an LGBTQ support group on 7 May 2023.")
    assert terms == "caroline go lgbtq support group 7 may 2023"


def test_stop_words_and_contractions_vanish() -> None:
    assert index_terms("I don't think that she's been there, and it's not hers.") == "think"
    assert index_terms("the of and to a in is was") == ""


def test_acronym_spelling_a_stop_word_is_kept() -> None:
    assert index_terms("She moved to the US") == "move us"
    assert index_terms("tell us") == "tell"
    # In all-capital text every word looks like an acronym; none is trusted.
    assert index_terms("TELL US NOW") == "tell now"


def test_numbers_are_kept_and_normalised() -> None:
    assert index_terms("1,000 people on the 7th, 05/07, 2023-05-07, 3.5 km, 02139") == (
        "1000 people 7 5 7 2023 5 7 3 5 kilometer 02139"
    )


def test_punctuation_emoji_and_symbols_are_separators() -> None:
    assert index_terms("Wow!!! 😀 pizza... (yummy) — #food @mel 🍕🍕") == "pizza yummy food mel"
    assert index_terms("😀 ❤️ 🎉") == ""


def test_diacritics_and_compatibility_forms_fold() -> None:
    assert index_terms("Café naïve façade") == "cafe naive facade"
    # Full-width letters and a ligature.
    assert index_terms("\uff21\uff22\uff23 \ufb01ne") == "abc fine"
    assert query_terms("cafe") == query_terms("CAFÉ")


def test_empty_and_whitespace() -> None:
    assert index_terms("") == ""
    assert index_terms(" \n\t ") == ""
    assert query_terms("") == []
    assert query_terms("   ") == []


def test_query_terms_dedupe_in_order() -> None:
    assert query_terms("Dogs? I love dogs and my dog loves cats") == ["dog", "love", "cat"]


def test_other_latin_languages_are_lemmatised() -> None:
    assert detect_language("Ich habe zwei Häuser in Berlin gekauft und wir sind gegangen.") == "de"
    assert index_terms("Ich habe zwei Häuser in Berlin gekauft.") == "zwei haus berlin kaufen"
    assert detect_language("Nous sommes allés à Paris avec les enfants.") == "fr"
    assert index_terms("Nous sommes allés à Paris avec les enfants.") == "aller paris enfant"
    # English stays English even with words that are stop words elsewhere.
    assert detect_language("I hope the plants don't die in the winter") == "en"
    assert index_terms("I hope the plants don't die in the winter") == "hope plant die winter"


def test_chinese_bigrams_and_unigrams() -> None:
    assert index_terms("我喜欢吃寿司") == "我喜 喜 喜欢 欢 欢吃 吃 吃寿 寿 寿司 司"
    query = set(query_terms("我喜欢吃寿司"))
    related = set(index_terms("她最喜欢的食物是寿司").split())
    unrelated = set(index_terms("我上周去北京出差了").split())
    assert {"喜欢", "寿司"} <= query & related
    assert not query & unrelated - {"我喜"}
    # A one-character word is findable; a lone particle is not a term.
    assert index_terms("猫") == "猫"
    assert index_terms("的") == ""


def test_japanese_and_korean_runs_become_bigrams() -> None:
    assert "すし" in index_terms("すしが好きです").split()
    assert "초밥" in index_terms("나는 초밥을 좋아해요").split()


def test_mixed_chinese_and_english() -> None:
    terms = index_terms("我的猫叫Luna\uff0c它3岁了, she loves running")
    assert terms.split()[:5] == ["我的", "的猫", "猫", "猫叫", "叫"]
    assert {"luna", "3", "岁", "love", "run"} <= set(terms.split())


def test_very_long_text() -> None:
    text = "Melanie painted a lake sunrise with her kids last summer. " * 5000
    terms = index_terms(text).split()
    assert terms == ["melanie", "paint", "lake", "sunrise", "kid", "last", "summer"] * 5000


def test_every_term_survives_unicode61_unsplit() -> None:
    """Index terms are what FTS5 stores: unicode61 must not cut them further."""
    texts = [
        "Caroline's e-mail to O'Brien: COVID-19 is over; 3.5km in 30' — ok?",
        "Straße, ÆØÅ, İstanbul, ǆ, naïve",
        "हिन्दी भाषा ภาษาไทย مرحبا بالعالم Ελληνικά русский",
        "我喜欢吃寿司 すしが好きです 나는 초밥을 좋아해요",
        "x_y snake_case a.b.c 1,000,000 ½ ²",
    ]
    con = sqlite3.connect(":memory:")
    con.execute(
        "CREATE VIRTUAL TABLE t USING fts5(terms, tokenize='unicode61 remove_diacritics 2')"
    )
    con.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    for text in texts:
        terms = index_terms(text)
        con.execute("DELETE FROM t")
        con.execute("INSERT INTO t(rowid, terms) VALUES (1, ?)", (terms,))
        stored = [row[0] for row in con.execute("SELECT term FROM v ORDER BY offset")]
        assert len(stored) == len(terms.split()), (text, terms, stored)


def test_fts5_ranks_the_right_memory_first() -> None:
    memories = [
        "Caroline went to an LGBTQ support group on 7 May 2023.",
        "Melanie painted a lake sunrise last year.",
        "Melanie's kids love running and swimming at the beach.",
        "John signed a deal with Nike for basketball shoes.",
        "她最喜欢的食物是寿司",
        "我上周去北京出差了",
        "Ich habe zwei Häuser in Berlin gekauft.",
    ]
    queries = [
        ("When did Caroline go to the support group?", 0),
        ("what paintings did melanie paint", 1),
        ("Do the kids like to run?", 2),
        ("Which shoe deal did John sign?", 3),
        ("我喜欢吃寿司", 4),
        ("你去过北京吗", 5),
        ("Wo hat sie die Häuser gekauft?", 6),
    ]
    con = sqlite3.connect(":memory:")
    con.execute(f"CREATE VIRTUAL TABLE memory_fts USING fts5(terms, tokenize='{TOKENIZER}')")
    for rowid, text in enumerate(memories):
        con.execute(
            "INSERT INTO memory_fts(rowid, terms) VALUES (?, ?)", (rowid, index_terms(text))
        )
    for query, expected in queries:
        expr = " OR ".join('"' + t.replace('"', '""') + '"' for t in query_terms(query))
        rows = con.execute(
            "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY bm25(memory_fts)",
            (expr,),
        ).fetchall()
        assert rows and rows[0][0] == expected, (query, expr, rows)


def test_threads_agree() -> None:
    texts = [
        f"Caroline went running with {n} dogs in Paris on May {n % 28 + 1}" for n in range(200)
    ]
    expected = [index_terms(t) for t in texts]
    results: dict[int, list[str]] = {}

    def work(k: int) -> None:
        results[k] = [index_terms(t) for t in texts]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expected for r in results.values())


# -------------------------------------------------------------- entities


def _ents(text: str) -> set[tuple[str, str]]:
    return {(e.normalized, e.type) for e in extract_entities(text)}


def test_entity_is_frozen() -> None:
    entity = Entity("Paris", "paris", "PLACE")
    with pytest.raises(AttributeError):
        entity.name = "Rome"  # type: ignore[misc]


def test_people() -> None:
    assert _ents("Caroline went to an LGBTQ support group.") >= {("caroline", "PERSON")}
    assert ("mel", "PERSON") in _ents("Hey Mel! Good to see you!")
    assert ("jolene", "PERSON") in _ents("Yesterday was great. Thanks Jolene!")
    assert ("smith", "PERSON") in _ents("Dr. Smith works at the hospital.")
    assert ("ed sheeran", "PERSON") in _ents("I saw Ed Sheeran live.")
    assert ("melanie", "PERSON") in _ents("Melanie painted a lake sunrise.")  # not a word
    assert ("mel_paints", "PERSON") in _ents("Follow @mel_paints for more")


def test_places_and_organisations() -> None:
    found = _ents("We visited the Eiffel Tower in Paris and walked to Central Park.")
    assert {("eiffel tower", "PLACE"), ("paris", "PLACE"), ("central park", "PLACE")} <= found
    assert ("sweden", "PLACE") in _ents("She moved to Sweden.")
    assert ("stanford university", "ORG") in _ents("He studies at Stanford University.")
    assert ("bank of america", "ORG") in _ents("I work for Bank of America now.")


def test_things_titles_and_tags() -> None:
    found = _ents('I loved reading "Charlotte\'s Web" and The Lord of the Rings. #artlife')
    assert ("charlotte's web", "THING") in found
    assert any(key == "lord of the ring" for key, _ in found)
    assert ("artlife", "THING") in found
    assert ("红楼梦", "THING") in _ents("我读了《红楼梦》")
    assert ("lgbtq", "THING") in _ents("an LGBTQ support group")


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("on 7 May 2023", "2023-05-07"),
        ("on May 7th, 2023", "2023-05-07"),
        ("on 8 May, 2023", "2023-05-08"),
        ("due 2023-05-07.", "2023-05-07"),
        ("in May 2023", "2023-05"),
        ("on May 7", "05-07"),
        ("the 7th of May", "05-07"),
        ("in August", "august"),
        ("in May", "may"),
        ("last Friday", "friday"),
        ("back in 2019", "2019"),
        ("music from the 1990s", "1990s"),
        ("at Christmas", "christmas"),
        ("她在2023年5月7日去了北京", "2023-05-07"),
    ],
)
def test_dates(text: str, key: str) -> None:
    assert (key, "DATE") in _ents(text)


def test_modal_may_is_not_a_date() -> None:
    assert _ents("May I ask? You may go.") == set()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("I paid $50 for it", "50 usd"),
        ("it cost 1,200 dollars", "1200 usd"),
        ("I ran 5 km today", "5 km"),
        ("married for five years", "5 year"),
        ("a 10-minute walk", "10 minute"),
        ("10% faster", "10 percent"),
    ],
)
def test_amounts(text: str, key: str) -> None:
    assert (key, "NUMBER") in _ents(text)


def test_no_entities_in_plain_text() -> None:
    assert extract_entities("i like dogs and long walks on the beach.") == []
    assert extract_entities("That's amazing! Good to see you! Thanks!") == []
    assert extract_entities("") == []
    assert extract_entities("   ") == []
    assert extract_entities("JUST DOING IT!!!") == []


def test_sentence_start_words_are_not_names() -> None:
    assert _ents("Yesterday I went hiking. Painting helps me relax.") == set()
    # ...unless the same word is capitalised elsewhere in the text.
    found = _ents("Painting is fun. I joined Painting Club.")
    assert any(kind != "DATE" for _, kind in found)


def test_one_entity_per_key_in_order() -> None:
    found = extract_entities("Caroline met Melanie. Later Caroline's kids met Melanie too.")
    assert [e.normalized for e in found] == ["caroline", "melanie"]
    assert found[0].name == "Caroline"


def test_normalize_entity() -> None:
    assert normalize_entity("the Eiffel Tower") == "eiffel tower"
    assert normalize_entity("  Eiffel   Tower ") == "eiffel tower"
    assert normalize_entity("Rocky Mountains") == "rocky mountain"
    assert normalize_entity("Caroline's") == "caroline"
    assert normalize_entity("Zürich") == "zurich"
    assert normalize_entity("NASA") == "nasa"


def test_entities_on_long_text_stay_linear() -> None:
    text = "Caroline met Melanie in Paris on 7 May 2023 and paid $50. " * 2000
    found = extract_entities(text)
    assert {e.normalized for e in found} == {"caroline", "melanie", "paris", "2023-05-07", "50 usd"}
    assert extract_entities("Abc " * 5000) == []


def test_model_extractor_never_downloads() -> None:
    from engramdb.nlp.model import ModelEntityExtractor, ModelUnavailableError

    extractor = ModelEntityExtractor("engramdb_no_such_model")
    with pytest.raises(ModelUnavailableError, match="install"):
        extractor("Caroline went to Paris.")
