"""Derived supersessions (engramdb.derived, `engram maintain --apply` / `--undo`).

Real stores (SQLite in tmp_path, embedded PostgreSQL through the ``mem``
fixture), the real local embedding model; no LLM.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engramdb import Memory
from engramdb.cli import app
from engramdb.embedders import LocalEmbedder
from engramdb.errors import MemoryNotFoundError, ValidationError
from engramdb.maintain import DERIVED_KIND, maintain
from engramdb.stores.base import LinkChange

CAR_OLD = "Dana drives a Ford Focus."
CAR_NEW = "Dana sold the Ford Focus and now drives a Tesla Model 3."
DAD_PHONE = "Dana's dad's phone number is 555 0101."
DANA_PHONE = "Dana's phone number is 555 0199."
JAN, MAR, JUN = (
    "2024-01-01T10:00:00+00:00",
    "2024-03-01T10:00:00+00:00",
    "2024-06-01T10:00:00+00:00",
)
QUESTION = "What car does Dana drive now?"


def add(m: Memory, text: str, when: str, user: str = "u") -> str:
    out = m.add(
        [{"role": "user", "content": text, "name": "Dana"}],
        user_id=user,
        infer=False,
        timestamp=when,
    )
    return str(out["results"][0]["id"])


def store_of(m: Memory) -> dict[str, str]:
    return {
        "car_old": add(m, CAR_OLD, JAN),
        "dad": add(m, DAD_PHONE, JAN),
        "dana": add(m, DANA_PHONE, MAR),
        "car_new": add(m, CAR_NEW, JUN),
    }


def state(m: Memory, ids: list[str]) -> dict[str, Any]:
    """What a link would change: each memory's links and version, and the store's rows."""
    out: dict[str, Any] = {"count": m.store.count()}
    for i in ids:
        row = m.store.get(i)
        assert row is not None
        out[i] = (row.linked_ids, row.link_kinds, row.version, row.updated_at, row.text)
    return out


def test_proposes_a_change_of_one_person_never_across_people(mem: Memory) -> None:
    ids = store_of(mem)
    before = state(mem, list(ids.values()))
    report = maintain(mem, user_id="u", expire=False, duplicates=False, supersessions=True)
    pairs = [(d.older_id, d.newer_id, d.status) for d in report.supersessions]
    assert (ids["car_old"], ids["car_new"], "proposed") in pairs
    # Dana's dad's phone is not Dana's: different subjects are never a pair.
    assert all({o, n} != {ids["dad"], ids["dana"]} for o, n, _ in pairs)
    car = next(d for d in report.supersessions if d.older_id == ids["car_old"])
    assert car.subject == "dana" and car.attribute == "@vehicle"
    assert car.confidence >= report.settings["threshold"]
    assert state(mem, list(ids.values())) == before  # a proposal writes nothing


def test_apply_links_ranks_the_newer_and_undo_restores_exactly(mem: Memory) -> None:
    ids = store_of(mem)
    top = mem.search(QUESTION, user_id="u", as_of=JUN)["results"]
    before = state(mem, list(ids.values()))

    dry = maintain(
        mem, user_id="u", expire=False, duplicates=False, supersessions=True, apply=True,
        dry_run=True,
    )  # fmt: skip
    assert any(d.status == "would_link" for d in dry.supersessions) and dry.run is None
    assert state(mem, list(ids.values())) == before

    done = maintain(
        mem, user_id="u", expire=False, duplicates=False, supersessions=True, apply=True
    )
    assert done.run is not None and done.counts()["supersessions_linked"] >= 1
    old, new = mem.store.get(ids["car_old"]), mem.store.get(ids["car_new"])
    assert old is not None and new is not None
    assert old.link_kinds[ids["car_new"]] == "derived_updated_by"
    assert new.link_kinds[ids["car_old"]] == DERIVED_KIND
    assert old.superseder_ids == [ids["car_new"]]
    assert (old.version, old.updated_at) == before[ids["car_old"]][2:4]
    # History on both ends, with the run and the confidence.
    for memory_id in (ids["car_old"], ids["car_new"]):
        link = mem.history(memory_id)[-1]
        assert link["event"] == "LINK" and link["actor"] == "system"
        assert done.run in link["reason"] and "confidence" in link["reason"]
    # Search: the newer holds now, the older is marked superseded.
    after = mem.search(QUESTION, user_id="u", as_of=JUN)["results"]
    assert after[0]["id"] == ids["car_new"], (top[0]["memory"], after[0]["memory"])
    shown = {r["id"]: r for r in after}
    assert shown[ids["car_old"]]["superseded_by"] == [ids["car_new"]]
    # A second run proposes nothing new for a replaced memory.
    again = maintain(mem, user_id="u", expire=False, duplicates=False, supersessions=True)
    assert all(d.older_id != ids["car_old"] for d in again.supersessions)

    undone = maintain(mem, user_id="u", expire=False, duplicates=False, undo=done.run)
    assert undone.counts()["supersessions_unlinked"] == done.counts()["supersessions_linked"]
    assert state(mem, list(ids.values())) == before
    assert [h["event"] for h in mem.history(ids["car_old"])] == ["ADD", "LINK", "UNLINK"]
    nothing = maintain(mem, user_id="u", expire=False, duplicates=False, undo=done.run)
    assert nothing.counts()["supersessions_unlinked"] == 0 and nothing.notes


def test_a_failed_apply_writes_nothing(mem: Memory) -> None:
    ids = store_of(mem)
    store = mem.store
    gone = add(mem, "Dana's dentist is Dr Okafor.", MAR)
    mem.delete(gone)
    bob = add(mem, "Bob drives a Fiat.", MAR, user="bob")
    before = state(mem, list(ids.values()))
    good = LinkChange(ids["car_new"], ids["car_old"], DERIVED_KIND, "test")
    with pytest.raises(MemoryNotFoundError):
        store.link([good, LinkChange(ids["car_new"], gone, DERIVED_KIND)], "system")
    with pytest.raises(ValidationError):
        store.link([good, LinkChange(ids["car_new"], bob, DERIVED_KIND)], "system")
    assert state(mem, list(ids.values())) == before
    assert [h["event"] for h in mem.history(ids["car_new"])] == ["ADD"]

    # Through maintain: a memory deleted between the proposals and the write
    # (the progress callback runs then) fails the one transaction; nothing lands.
    def meanwhile(phase: str, done: int, total: int | None) -> None:
        if phase == "link" and done == 0:
            mem.delete(ids["car_old"])

    report = maintain(
        mem, user_id="u", expire=False, duplicates=False, supersessions=True, apply=True,
        progress=meanwhile,
    )  # fmt: skip
    assert report.run is None and report.counts()["supersessions_linked"] == 0
    assert any(d.status == "failed" for d in report.supersessions) and report.notes
    new = mem.store.get(ids["car_new"])
    assert new is not None and new.linked_ids == []
    assert [h["event"] for h in mem.history(ids["car_new"])] == ["ADD"]


def test_link_is_idempotent_and_unlink_skips_what_is_not_there(mem: Memory) -> None:
    a, b = add(mem, CAR_OLD, JAN), add(mem, CAR_NEW, JUN)
    change = LinkChange(b, a, DERIVED_KIND, "by hand")
    assert [e.event for e in mem.store.link([change], "me")] == ["LINK", "LINK"]
    assert mem.store.link([change], "me") == []
    assert [e.memory_id for e in mem.store.unlink([change], "me")] == [b, a]
    assert mem.store.unlink([change], "me") == []
    with pytest.raises(ValidationError):
        mem.store.link([LinkChange(a, a, DERIVED_KIND)], "me")


runner = CliRunner(env={"ENGRAM_DB": None, "ENGRAM_LLM": None})


def test_cli_dry_run_apply_and_undo(db_path: Path, embedder: LocalEmbedder) -> None:
    with Memory(db_path, embedder=embedder) as m:
        ids = store_of(m)

    def run(*args: str) -> Any:
        out = runner.invoke(app, ["--db", str(db_path), "maintain", *args], prog_name="engram")
        assert out.exit_code == 0, out.output
        return out

    human = run("-u", "u", "--no-expire", "--no-duplicates")
    assert "Derived supersessions" in human.stdout and "Ford Focus" in human.stdout
    data = json.loads(run("-u", "u", "--no-expire", "--no-duplicates", "--json").stdout)
    assert data["counts"]["supersessions_linked"] == 0 and data["run"] is None
    applied = json.loads(run("-u", "u", "--apply", "--json").stdout)
    assert applied["run"] and applied["counts"]["supersessions_linked"] >= 1
    assert any(d["newer_id"] == ids["car_new"] for d in applied["supersessions"])
    undone = run("-u", "u", "--undo", applied["run"])
    assert "unlinked" in undone.stdout
    with Memory(db_path, embedder=embedder) as m:
        row = m.store.get(ids["car_old"])
        assert row is not None and row.linked_ids == []
