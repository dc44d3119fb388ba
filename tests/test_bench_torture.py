"""``engram bench torture`` runs at tiny sizes, reports well-formed figures, and fails loudly.

The command runs in a subprocess, as a user or CI would run it: its exit
status is the contract (0 when every invariant held, 1 when one did not).
The sabotage hook breaks a promise on purpose after the real work, so the
checks that must catch it are the ones the benchmark runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from engramdb_bench import torture

SMOKE_PARTS = "kills,writers-sqlite,writers-pg,corpus,fuzz"


def _torture(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, Any]:
    out = tmp_path / "torture.json"
    proc = subprocess.run(
        [sys.executable, "-m", "engramdb.cli", "bench", "torture", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    if "--json" in args:
        assert json.loads(proc.stdout) == report  # stdout holds the report and nothing else
    return proc.returncode, report


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def test_tiny_run_reports_every_part_and_holds(tmp_path: Path) -> None:
    code, report = _torture(
        tmp_path,
        "--kills", "5", "--writers", "2", "--adds", "20", "--fuzz-examples", "2",
        "--parts", SMOKE_PARTS, "--json",
    )  # fmt: skip
    assert report["benchmark"] == "engramdb_bench.torture"
    assert report["sizes"] == {
        "kills": 5, "writers": 2, "adds": 20, "fuzz_examples": 2, "seed": 0,
    }  # fmt: skip
    assert len(report["machine"]["load_avg_start"]) == 3
    assert set(report["parts"]) == set(SMOKE_PARTS.split(","))
    for name, part in report["parts"].items():
        assert part["wall_s"] >= 0 and part["load_avg_start"] >= 0, name
        assert part["status"] in ("ok", "skipped"), (name, part)
    assert report["violations"] == [] and report["ok"] is True and code == 0

    kills = report["parts"]["kills"]
    assert kills["kills"] == 5 and kills["broken"] == 0 and kills["works_after"] is True
    assert kills["memories"] > 0 and kills["problems"] == []

    for name in ("writers-sqlite", "writers-pg"):
        part = report["parts"][name]
        if part["status"] == "skipped":
            assert name == "writers-pg" and part["reason"]  # said why, never faked
            continue
        assert part["adds"] == 40 and part["answers"] >= 40
        assert part["errors"] == part["lost"] == part["duplicated"] == 0
        # the writers did repeat each other: fewer memories than messages
        assert 0 < part["memories"] == part["distinct_texts"] < part["messages"]

    corpus = report["parts"]["corpus"]
    assert corpus["total"] >= 80 and corpus["handled"] == corpus["total"]
    assert corpus["failures"] >= 20 and corpus["raw_kept"] == corpus["failures"]
    assert set(corpus["by_kind"]) == {"additive", "facts", "update"}

    fuzz = report["parts"]["fuzz"]
    assert fuzz["operations"] >= 10 and fuzz["requests"] >= fuzz["operations"]
    assert fuzz["server_errors"] == 0 and _count(fuzz["bad_envelope"])


@pytest.mark.parametrize(
    ("part", "args", "broken"),
    [
        ("kills", ["--kills", "2"], "memories without a vector"),
        ("writers-sqlite", ["--writers", "1", "--adds", "5"], "lost"),
    ],
)
def test_a_broken_promise_exits_non_zero(
    tmp_path: Path, part: str, args: list[str], broken: str
) -> None:
    code, report = _torture(
        tmp_path, "--parts", part, *args, env={torture.SABOTAGE_ENV: part.split("-")[0]}
    )
    assert code == 1
    assert report["ok"] is False and report["parts"][part]["status"] == "violated"
    assert report["violations"] and all(v.startswith(part) for v in report["violations"])
    found = report["parts"][part]
    if part == "kills":
        assert found["broken"] >= 1 and any(broken in p for p in found["problems"])
    else:
        assert found["lost"] >= 1


def test_parts_written_elsewhere_are_reported_missing_when_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules makes the import fail as if the module were not installed.
    monkeypatch.setitem(sys.modules, "engramdb_bench._attacks", None)
    monkeypatch.setitem(sys.modules, "engramdb_bench._probes", None)
    report = torture.run(parts=["attacks", "purge"], workdir=tmp_path, progress=False)
    for name in ("attacks", "purge"):
        assert report["parts"][name]["status"] == "missing"
        assert "not installed" in report["parts"][name]["reason"]
    assert report["violations"] == [] and report["ok"] is True


def test_unknown_part_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "engramdb.cli", "bench", "torture", "--parts", "nope"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2 and "unknown part" in proc.stderr
