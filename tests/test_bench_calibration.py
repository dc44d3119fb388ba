"""``engram bench calibration`` on a slice of LoCoMo dev, and the fit itself."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest

from engramdb.embedders import LocalEmbedder
from engramdb.search import ScoreCalibration
from engramdb_bench import calibration
from engramdb_bench._locomo import default_data_path

_DATA = default_data_path()


def test_fit_puts_the_two_medians_at_0_97_and_0_03() -> None:
    exact = [0.70 + 0.01 * i for i in range(11)]  # median 0.75
    unrelated = [0.20 + 0.01 * i for i in range(11)]  # median 0.25
    cal = calibration.fit(exact, unrelated)
    assert cal.center == pytest.approx(0.5, abs=1e-4)
    assert cal.apply(0.75) == pytest.approx(0.97, abs=1e-3)
    assert cal.apply(0.25) == pytest.approx(0.03, abs=1e-3)
    with pytest.raises(ValueError, match="do not score above"):
        calibration.fit([0.3, 0.3], [0.5, 0.5])


def test_the_curve_is_strictly_increasing_and_bounded() -> None:
    cal = ScoreCalibration()  # the shipped isotonic knots
    (first, low), (last, high) = cal.knots[0], cal.knots[-1]
    xs = [i / 1000 for i in range(1001)]
    ys = [cal.apply(x) for x in xs]
    assert all(low <= y <= high for y in ys) and 0.0 < low < high < 1.0
    inside = [y for x, y in zip(xs, ys, strict=True) if first <= x <= last]
    assert all(b > a for a, b in itertools.pairwise(inside))
    assert cal.apply(0.0) == low and cal.apply(1.0) == high  # flat beyond the ends
    for x, y in cal.knots:
        assert cal.apply(x) == pytest.approx(y)
    logistic = ScoreCalibration(center=0.77, width=0.06)  # giving the logistic's terms picks it
    assert logistic.knots == () and math.isclose(logistic.apply(0.77), 0.5)
    ys = [logistic.apply(x) for x in xs]
    assert all(b > a for a, b in itertools.pairwise(ys) if 1e-12 < b < 1 - 1e-12)
    assert ScoreCalibration(center=1.0, width=0.001).apply(0.0) == 0.0  # exp overflow guarded
    # From a config file: the logistic's terms alone pick it; a dumped config reads back equal.
    from engramdb.search import FusionConfig

    old = FusionConfig.model_validate({"calibration": {"center": 0.77, "width": 0.06}})
    assert old.calibration is not None and old.calibration.knots == ()
    dumped = json.loads(json.dumps(FusionConfig().model_dump()))
    assert FusionConfig.model_validate(dumped) == FusionConfig()


def test_a_question_that_names_a_speaker_has_its_own_curve() -> None:
    cal = ScoreCalibration()
    assert cal.speaker_knots and cal.speaker_knots != cal.knots
    for x, y in cal.speaker_knots:
        assert cal.apply(x, speaker=True) == pytest.approx(y)
    # A speaker's memories all gain the actor part, so as high a ``relative`` answers less often.
    assert all(cal.apply(x, speaker=True) < cal.apply(x) for x in (0.7, 0.8, 0.9, 0.95))
    # Knots given alone are the curve of every question; the logistic too.
    one = ScoreCalibration(knots=((0.2, 0.1), (0.8, 0.7)))
    assert one.speaker_knots == () and one.apply(0.5, speaker=True) == one.apply(0.5)
    logistic = ScoreCalibration(center=0.77, width=0.06)
    assert logistic.apply(0.8, speaker=True) == logistic.apply(0.8)
    with pytest.raises(ValueError, match="knots"):
        ScoreCalibration(speaker_knots=((0.5, 0.2), (0.4, 0.3)))


@pytest.mark.parametrize(
    "knots",
    [((0.5, 0.2), (0.4, 0.3)), ((0.1, 0.2), (0.5, 0.2)), ((0.1, 0.2), (0.5, 1.5))],
)
def test_knots_must_increase_and_be_probabilities(knots: tuple[tuple[float, float], ...]) -> None:
    with pytest.raises(ValueError, match="knots"):
        ScoreCalibration(knots=knots)


def _fitter() -> Any:
    """scripts/fit_calibration.py, loaded by path (scripts/ is not a package)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "fit_calibration.py"
    spec = importlib.util.spec_from_file_location("fit_calibration", path)
    assert spec is not None and spec.loader is not None
    fitter = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fitter)
    return fitter


def test_the_shipped_knots_are_what_the_fitter_makes() -> None:
    """scripts/fit_calibration.py's binned isotonic fit, on rows whose answer is known."""
    import numpy as np

    fitter = _fitter()
    x = np.array([0.1, 0.12, 0.3, 0.32, 0.6, 0.62, 0.9, 0.92])
    y = np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0])  # 0.3 bin above the 0.6 one: pooled
    knots = fitter.fit_knots(x, y, np.ones_like(x))
    # A bin without an answer still gets the smallest probability, never 0.
    assert [k[1] for k in knots] == [0.0001, 0.25, 1.0]
    ScoreCalibration(knots=knots)  # valid as shipped


def test_the_fitter_reads_a_hits_dumped_relative_unless_a_lever_moved_its_score() -> None:
    """Past a flat end of the curve the score says nothing of ``relative``: the dump does."""
    fitter = _fitter()
    cal = ScoreCalibration(knots=((0.2, 0.01), (0.8, 0.7)))
    top = {"score": cal.apply(0.95), "score_details": {"relative": 0.95}}
    bottom = {"score": cal.apply(0.05), "score_details": {"relative": 0.05}}
    assert fitter.hit_relative(top, cal) == 0.95 and fitter.hit_relative(bottom, cal) == 0.05
    # Read back through the curve, both would sit on its ends.
    assert fitter.relative_of(top["score"], cal) == 0.8
    assert fitter.relative_of(bottom["score"], cal) == 0.2
    # A neighbour lent this hit a score its relative does not map to: read it back.
    lent = {"score": cal.apply(0.5), "score_details": {"relative": 0.3}}
    assert fitter.hit_relative(lent, cal) == pytest.approx(0.5)
    assert fitter.hit_relative({"score": cal.apply(0.5)}, cal) == pytest.approx(0.5)
    # A turn that asks scores the curve's times its factor: the factor comes out first.
    asked = {"score": 0.5 * cal.apply(0.95), "score_details": {"relative": 0.95, "question": 0.5}}
    assert fitter.after_curve_factor(asked) == 0.5 and fitter.after_curve_factor(top) == 1.0
    assert fitter.hit_relative(asked, cal) == 0.95
    # A replaced memory, for a question about now, with a question's factor too: both out.
    stale = {
        "score": 0.02 * 0.5 * cal.apply(0.7),
        "score_details": {"relative": 0.7, "question": 0.5, "superseded": 0.02},
    }
    assert fitter.after_curve_factor(stale) == pytest.approx(0.01)
    assert fitter.hit_relative(stale, cal) == 0.7


@pytest.mark.skipif(_DATA is None or not _DATA.is_file(), reason="LoCoMo data not found")
def test_run_on_two_short_conversations(tmp_path: Path, embedder: LocalEmbedder) -> None:
    assert _DATA is not None
    samples = json.loads(_DATA.read_text(encoding="utf-8"))[:2]
    for sample in samples:  # the first two sessions of each, and questions about them
        conv = sample["conversation"]
        keep = {"session_1", "session_2"}
        for key in list(conv):
            if key.startswith("session_") and key.split("_date_time")[0] not in keep:
                del conv[key]
        said = {t["dia_id"] for k in keep for t in conv.get(k, [])}
        sample["qa"] = [q for q in sample["qa"] if set(q.get("evidence", [])) <= said][:15]
        sample.pop("observation", None)
        sample.pop("session_summary", None)
    data = tmp_path / "slice.json"
    data.write_text(json.dumps(samples), encoding="utf-8")
    out = tmp_path / "calibration.json"
    report = calibration.run(data, out=out, embedder=embedder)
    assert json.loads(out.read_text(encoding="utf-8")) == report
    assert [f["held_out"] for f in report["folds"]] == [s["sample_id"] for s in samples]
    for fold in report["folds"]:
        # a fit on the other conversation still separates exact repeats from unrelated hits
        assert fold["exact_median"] > 0.8 and fold["unrelated_median"] < 0.2, fold
        assert sum(b["hits"] for b in fold["bands"]) > 0
    assert report["default"] == ScoreCalibration().model_dump(mode="json")
    assert "held-out fold" in calibration.format_report(report)
