"""``engram bench ui`` end to end on a small store: every page answers, figures are reported.

The speed itself is measured at 10,000 and 100,000 memories by hand (docs/ui.md,
"Speed"); this run only checks that the benchmark works and reports honestly
(the 100 ms target of issue 30, the garbage collector's share, the heap frozen as
``engram serve`` freezes it, and unfrozen afterwards).
"""

from __future__ import annotations

import gc

import pytest

from engramdb_bench import ui


def test_bench_ui_small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_ACTIVITY_ROWS", "300")
    lines: list[str] = []
    report = ui.run(memories=120, samples=2, echo=lines.append)
    assert report["target_ms"] == ui.TARGET_MS == 100.0
    assert report["gc_frozen"] is True and gc.get_freeze_count() == 0
    pages = report["pages"]
    shown = ("scopes (counts, cold)", "memories, filtered", "entities", "entity (its memories)")
    for name in shown:
        assert pages[name]["samples"] == 2
        assert {"p50_ms", "p95_ms", "gc_ms", "gc_full", "met"} <= set(pages[name])
    assert report["activity_rows"] == 300
    text = ui.format_report(report)
    assert "heap frozen after startup" in text and "< 100 ms" in text
