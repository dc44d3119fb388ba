"""Reading the attribute terms again after a classifier change (retag.py), on both stores.

A store written by an older classifier holds that classifier's attribute terms.
Here the old reading is made by hand through the store (a memory about a car
tagged ``@pet`` instead of ``@vehicle``, another with no attribute term at all),
then ``Memory.reindex_attributes`` must read them again from the stored vectors:
the keyword index follows (a ranked read of ``@vehicle`` finds the car again),
deleted memories are read too, a second run changes nothing, and a memory
written since its terms were read keeps its own.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from engramdb import AsyncMemory, Memory
from engramdb.cli import app
from engramdb.embedders import LocalEmbedder
from engramdb.errors import ScopeError, ValidationError
from engramdb.nlp.terms import split_attribute_terms
from engramdb.stores.base import Scope, TermChange

CAR = "I drive a Kia Niro these days, the old Ford Focus went to scrap."
CAT = "Our cat Miso sleeps on the radiator all day."
GONE = "We bought a second-hand Mazda MX-5 for the summer."


def _terms(m: Memory) -> dict[int, str]:
    return {s.key: s.terms for s in m.store.term_sources(0, 1000)}


def _age(m: Memory) -> dict[int, str]:
    """Write an older classifier's reading by hand: @vehicle -> @pet, or no attribute."""
    now = _terms(m)
    old: dict[int, str] = {}
    for key, terms in now.items():
        words, attrs = split_attribute_terms(terms)
        aged = attrs.replace("@vehicle", "@pet") if "@vehicle" in attrs else ""
        old[key] = f"{words} {aged}".strip()
    changes = [TermChange(k, now[k], old[k]) for k in now if old[k] != now[k]]
    assert m.store.retag(changes) == len(changes) > 0
    return now


def _vehicle_hits(m: Memory, embedder: LocalEmbedder) -> list[str]:
    """The memories the keyword index finds for the term ``@vehicle`` alone."""
    vec = np.asarray(embedder.embed_query("car"), dtype=np.float32)
    found = m.store.candidates(Scope(user_id="u"), None, vec, ["@vehicle"], [], 10)
    return sorted(c.row.text for c in found if c.bm25 > 0)


def _fill(m: Memory) -> None:
    for text in (CAR, CAT, GONE):
        m.add(text, user_id="u", infer=False)
    gone = m.get_all(user_id="u")["results"]
    m.delete(next(r["id"] for r in gone if r["memory"] == GONE))


def test_reindex_reads_every_memory_again(mem: Memory, embedder: LocalEmbedder) -> None:
    _fill(mem)
    current = _terms(mem)
    assert any("@vehicle" in t for t in current.values())
    assert _vehicle_hits(mem, embedder) == [CAR]

    _age(mem)
    assert _vehicle_hits(mem, embedder) == []

    dry = mem.reindex_attributes(dry_run=True)
    assert (dry.read, dry.dry_run) == (3, True) and dry.changed > 0
    assert _vehicle_hits(mem, embedder) == []  # a dry run writes nothing

    done = mem.reindex_attributes(batch_size=2)
    assert done.read == 3 and done.changed == dry.changed and done.skipped == 0
    assert done.classifier is not None and done.classifier.startswith("attributes_")
    assert _terms(mem) == current  # the deleted memory too
    assert _vehicle_hits(mem, embedder) == [CAR]
    assert mem.search("What car does the user drive?", user_id="u")["results"][0]["memory"] == CAR

    again = mem.reindex_attributes()
    assert (again.read, again.changed) == (3, 0)


def test_a_memory_written_meanwhile_keeps_its_terms(mem: Memory) -> None:
    _fill(mem)
    terms = _terms(mem)
    key = next(iter(terms))
    # The caller read "stale" terms, then the memory changed: the change is refused.
    assert mem.store.retag([TermChange(key, terms[key] + " stale", "rewritten")]) == 0
    assert _terms(mem)[key] == terms[key]
    assert mem.store.retag([]) == 0


def test_nothing_is_read_when_attribute_terms_are_off(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    config = {"retrieval": {"attribute_gate": 0}}
    with Memory(tmp_path / "off.db", config=config, embedder=embedder) as m:
        m.add(CAR, user_id="u", infer=False)
        report = m.reindex_attributes()
    assert report.read == 0 and report.reason == "attribute terms are off"
    with Memory(tmp_path / "empty.db", embedder=embedder) as m:
        assert m.reindex_attributes().reason == "the store holds no vectors yet"


def test_bad_calls_are_refused(tmp_path: Path, embedder: LocalEmbedder) -> None:
    with Memory(tmp_path / "a.db", embedder=embedder) as m:
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValidationError, match="batch_size"):
                m.reindex_attributes(batch_size=bad)  # type: ignore[arg-type]
        with pytest.raises(ScopeError):
            m.scoped(user_id="u").reindex_attributes()


def test_async_and_cli(tmp_path: Path, embedder: LocalEmbedder) -> None:
    path = tmp_path / "a.db"
    with Memory(path, embedder=embedder) as m:
        _fill(m)
        _age(m)

    async def run() -> int:
        async with AsyncMemory(path, embedder=embedder) as am:
            report = await am.reindex_attributes(dry_run=True)
            return report.changed

    would = asyncio.run(run())
    assert would > 0
    runner = CliRunner()
    dry = runner.invoke(app, ["--db", str(path), "reindex-attributes", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert f"Would rewrite the attribute terms of {would} of 3 memories" in dry.stdout
    done = runner.invoke(app, ["--db", str(path), "reindex-attributes", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["changed"] == would
    again = runner.invoke(app, ["--db", str(path), "reindex-attributes"])
    assert "Rewrote the attribute terms of 0 of 3 memories" in again.stdout


def test_the_store_records_whose_reading_its_terms_hold(
    mem: Memory, embedder: LocalEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    from engramdb.attributes import VERSION

    # A new store records this release's classifier with its first memory.
    assert mem.store.attribute_terms_version() is None
    _fill(mem)
    assert mem.store.attribute_terms_version() == VERSION

    # A store from before the record (or another classifier's): a warning on first use.
    _age(mem)
    mem.store.record_attribute_terms_version("attributes_v0")
    config = {"vector_store": mem.config.vector_store.model_dump()}
    with (
        caplog.at_level("WARNING", logger="engramdb"),
        Memory(config=config, embedder=embedder) as other,
    ):
        other.search("car", user_id="u")
        other.search("cat", user_id="u")
    said = [r.getMessage() for r in caplog.records if "reindex-attributes" in r.getMessage()]
    assert len(said) == 1 and "attributes_v0" in said[0], said

    mem.reindex_attributes(dry_run=True)
    assert mem.store.attribute_terms_version() == "attributes_v0"  # a dry run records nothing
    mem.reindex_attributes()
    assert mem.store.attribute_terms_version() == VERSION
    caplog.clear()
    with (
        caplog.at_level("WARNING", logger="engramdb"),
        Memory(config=config, embedder=embedder) as other,
    ):
        other.search("car", user_id="u")
    assert not [r for r in caplog.records if "reindex-attributes" in r.getMessage()]


def test_an_import_forgets_whose_reading_the_terms_hold(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    dump = tmp_path / "export.jsonl"
    with Memory(tmp_path / "a.db", embedder=embedder) as m:
        _fill(m)
        with dump.open("w", encoding="utf-8") as fp:
            m.export_jsonl(fp)
    with Memory(tmp_path / "b.db", embedder=embedder) as b:
        with dump.open(encoding="utf-8") as fp:
            assert b.import_jsonl(fp) == 3
        # The imported terms are the exporting store's classifier's reading: unknown here.
        assert b.store.attribute_terms_version() is None
        assert b.reindex_attributes().read == 3
        assert b.store.attribute_terms_version() is not None
