"""The `engram` command: in-process through Typer's CliRunner, and as a real process.

Every test works on a real SQLite file under tmp_path with the real local
embedding model; nothing is mocked. Embedding is the slow part, so each test
adds only a few short texts and reuses its database across commands.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner, Result

from engramdb.cli import app

ROOT = Path(__file__).resolve().parents[1]

# ENGRAM_DB unset: a developer's own store must never be touched by the tests.
runner = CliRunner(env={"ENGRAM_DB": None})


def run(db: Path, *args: str, input: str | None = None) -> Result:
    return runner.invoke(app, ["--db", str(db), *args], input=input, prog_name="engram")


def run_json(db: Path, *args: str, input: str | None = None) -> Any:
    result = run(db, *args, "--json", input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_fails(result: Result, message: str, code: int = 1) -> None:
    assert result.exit_code == code, result.output
    assert message in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.output


def test_round_trip_add_search_update_delete_restore_export_import(tmp_path: Path) -> None:
    db = tmp_path / "a.db"
    added = run_json(
        db, "add", "I am allergic to peanuts", "-u", "alice", "--metadata", '{"topic": "food"}'
    )
    assert [r["event"] for r in added["results"]] == ["ADD"]
    allergy_id = added["results"][0]["id"]
    run_json(db, "add", "I have a grey cat called Miso", "-u", "alice")
    again = run_json(db, "add", "I am allergic to peanuts", "-u", "alice")
    assert again["results"][0]["event"] == "NONE"

    listed = run_json(db, "list", "-u", "alice")["results"]
    assert {m["memory"] for m in listed} == {
        "I am allergic to peanuts",
        "I have a grey cat called Miso",
    }
    assert (
        run_json(db, "list", "-u", "alice", "--filters", '{"topic": "food"}')["results"][0]["id"]
        == allergy_id
    )
    assert len(run_json(db, "list", "-u", "alice", "--top-k", "1", "--offset", "1")["results"]) == 1

    hits = run_json(
        db, "search", "what food must she avoid?", "-u", "alice", "-k", "2", "--explain"
    )
    top = hits["results"][0]
    assert top["id"] == allergy_id
    assert 0.0 <= top["score"] <= 1.0
    assert "score_details" in top
    assert run_json(db, "search", "food", "-u", "alice", "--threshold", "1")["results"] == []

    updated = run_json(db, "update", allergy_id, "--text", "I am allergic to peanuts and cashews")
    assert updated["memory"] == "I am allergic to peanuts and cashews"
    events = run_json(db, "history", allergy_id)
    assert [e["event"] for e in events] == ["ADD", "UPDATE"]
    assert {e["actor"] for e in events} == {"cli"}

    deleted = run(db, "delete", allergy_id)
    assert deleted.exit_code == 0, deleted.output
    assert f"engram restore {allergy_id}" in deleted.stdout
    assert_fails(run(db, "get", allergy_id), "not found")
    restored = run_json(db, "restore", allergy_id)
    assert restored["memory"] == "I am allergic to peanuts and cashews"
    back = run_json(db, "restore", allergy_id, "--version", "1")
    assert back["memory"] == "I am allergic to peanuts"
    assert run_json(db, "get", allergy_id)["memory"] == "I am allergic to peanuts"

    # Human output: a table holding the text and the whole id.
    shown = run(db, "list", "-u", "alice")
    assert shown.exit_code == 0, shown.output
    assert allergy_id in shown.stdout
    assert "Miso" in shown.stdout

    dump = tmp_path / "dump.jsonl"
    assert run_json(db, "export", str(dump)) == 2
    to_stdout = run(db, "export")
    assert to_stdout.exit_code == 0, to_stdout.output
    assert to_stdout.stdout == dump.read_text(encoding="utf-8")

    copy = tmp_path / "copy.db"
    assert run_json(copy, "import", str(dump)) == 2
    assert run_json(copy, "list", "-u", "alice") == run_json(db, "list", "-u", "alice")

    # Event ids are the store's own row numbers; everything else must survive.
    def events_of(store: Path) -> list[dict[str, Any]]:
        return [
            {k: v for k, v in e.items() if k != "id"}
            for e in run_json(store, "history", allergy_id)
        ]

    assert events_of(copy) == events_of(db)

    # "-" reads the export from stdin.
    piped = tmp_path / "piped.db"
    assert run_json(piped, "import", "-", input=to_stdout.stdout) == 2
    assert run_json(piped, "list", "-u", "alice") == run_json(db, "list", "-u", "alice")


def test_add_messages_file_and_scopes(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    messages = tmp_path / "messages.json"
    messages.write_text(
        json.dumps(
            [
                {"role": "system", "content": "You are helpful."},
                {"role": "user", "content": "I moved to Lyon last spring."},
                {"role": "assistant", "content": "Lyon is a lovely city."},
            ]
        ),
        encoding="utf-8",
    )
    out = run_json(
        db,
        "add",
        "--messages-file",
        str(messages),
        "-u",
        "bob",
        "-r",
        "s1",
        "--timestamp",
        "2024-05-01T10:00:00Z",
    )
    assert [r["memory"] for r in out["results"]] == [
        "I moved to Lyon last spring.",
        "Lyon is a lovely city.",
    ]
    listed = run_json(db, "list", "-r", "s1")["results"]
    assert {m["observed_at"][:10] for m in listed} == {"2024-05-01"}
    assert run_json(db, "list", "-u", "someone-else")["results"] == []


def test_expected_errors_exit_1_with_message_on_stderr(tmp_path: Path) -> None:
    db = tmp_path / "e.db"
    assert_fails(run(db, "list", "--json"), "needs at least one of user_id")
    assert_fails(run(db, "search", "anything", "--json"), "needs at least one of user_id")
    for command in ("update", "delete", "history", "restore"):
        extra = ["--text", "x"] if command == "update" else []
        assert_fails(run(db, command, "no-such-id", *extra, "--json"), "not found")
    # get() returns None rather than raising: --json prints that null, and the
    # status still says "not found".
    missing = run(db, "get", "no-such-id", "--json")
    assert (missing.exit_code, missing.stdout) == (1, "null\n")
    assert "not found" in missing.stderr
    assert_fails(
        run(db, "add", "text", "-u", "alice", "--metadata", "{not json", "--json"),
        "--metadata is not valid JSON",
    )
    # Valid JSON of the wrong shape: the library's own message comes through.
    assert_fails(
        run(db, "add", "text", "-u", "alice", "--metadata", "[1, 2]"), "metadata must be a JSON"
    )
    assert_fails(run(db, "list", "-u", "alice", "--filters", "{"), "--filters is not valid JSON")
    assert_fails(run(db, "list", "-u", "alice", "--top-k", "0"), "top_k must be at least 1")
    bad_config = tmp_path / "config.json"
    bad_config.write_text('{"vector_store": {"provider": "pinecone"}}', encoding="utf-8")
    assert_fails(
        runner.invoke(app, ["--config", str(bad_config), "list", "-u", "a"]),
        "unknown vector_store provider 'pinecone'",
    )
    bad_import = tmp_path / "bad.jsonl"
    bad_import.write_text("not json\n", encoding="utf-8")
    assert_fails(run(db, "import", str(bad_import)), "line 1 is not JSON")
    # Usage errors are Typer's: status 2.
    assert run(db, "add", "-u", "alice").exit_code == 2
    assert run(db, "export", "-", "--json").exit_code == 2
    assert run(db, "import", str(tmp_path / "missing.jsonl")).exit_code == 2


def test_delete_all_and_purge_ask_first(tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    run_json(db, "add", "I like tea", "-u", "carol")
    first = run_json(db, "add", "I play the cello", "-u", "dave")["results"][0]["id"]

    refused = run(db, "delete-all", "-u", "carol", "--json", input="n\n")
    assert refused.exit_code == 1
    assert refused.stdout == ""  # the prompt goes to stderr, never into --json output
    assert "Delete every memory of user_id='carol'?" in refused.stderr
    assert len(run_json(db, "list", "-u", "carol")["results"]) == 1

    confirmed = run_json(db, "delete-all", "-u", "carol", input="y\n")
    assert confirmed["deleted"] == 1
    assert run_json(db, "list", "-u", "carol")["results"] == []
    assert_fails(run(db, "delete-all", "--yes"), "needs at least one of user_id")

    assert run_json(db, "purge", first, "--yes") == {"message": "Memories purged.", "purged": 1}
    assert_fails(run(db, "history", first), "not found")
    assert run_json(db, "purge", "-u", "carol", "--yes")["purged"] == 1
    assert_fails(run(db, "purge", "--yes"), "needs at least one of user_id")


def test_real_process_json_and_errors(tmp_path: Path) -> None:
    db = tmp_path / "p.db"
    memory_id = run_json(db, "add", "My sister Clara lives in Montreal", "-u", "erin")["results"][
        0
    ]["id"]
    command = [sys.executable, "-m", "engramdb.cli", "--db", str(db)]
    env = {k: v for k, v in os.environ.items() if k != "ENGRAM_DB"}
    env.update(PYTHONIOENCODING="utf-8", ENGRAM_HOME=str(tmp_path))

    ok = subprocess.run(
        [*command, "search", "where does her sister live?", "-u", "erin", "--json"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["results"][0]["id"] == memory_id

    missing = subprocess.run(
        [*command, "get", "no-such-id"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
        check=False,
    )
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert "not found" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_demo_json_finds_the_expected_messages(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["temporary"] is True
    assert not Path(out["db"]).exists()  # the temporary database is cleaned up
    assert out["added"] == out["messages"] > 25
    assert set(out["timings"]) == {"load_s", "embed_s", "search_s"}
    top = {s["query"]: s["results"][0]["memory"] for s in out["searches"]}
    assert all(len(s["results"]) == 3 for s in out["searches"])
    assert "allergic to peanuts" in top["Is she allergic to anything?"]
    assert "爬山" in top["她周末喜欢做什么？"]  # noqa: RUF001  (Chinese punctuation)

    kept = tmp_path / "demo.db"
    human = runner.invoke(app, ["demo", "--db", str(kept)])
    assert human.exit_code == 0, human.output
    assert "Timing:" in human.stdout
    assert str(kept) in human.stdout.replace("\n", "")
    assert kept.exists()


def test_every_command_has_help_text() -> None:
    group = get_command(app)
    assert isinstance(group, TyperGroup)
    assert app.registered_commands, "no commands registered"
    for info in app.registered_commands:
        assert info.callback is not None
        name = info.name or info.callback.__name__.replace("_", "-")
        assert (info.help or info.callback.__doc__ or "").strip(), f"{name} has no help"
        command = group.commands[name]
        for param in command.params:
            assert (getattr(param, "help", None) or "").strip(), f"{name} {param.name} has no help"
        assert "--json" in {opt for p in command.params for opt in p.opts}, f"{name} lacks --json"
        result = runner.invoke(app, [name, "--help"])
        assert result.exit_code == 0
        assert result.stdout.strip()


def test_cli_reference_is_current() -> None:
    docs = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    for name in get_command(app).commands:  # type: ignore[attr-defined]
        assert f"## `engram {name}`" in docs
    check = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_cli_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert check.returncode == 0, check.stderr


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_top_level_options(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 0
    assert "engram" in result.stdout


def _bench_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``engramdb_bench`` unimportable, as where engramdb-bench is not installed."""
    for name in [m for m in sys.modules if m.partition(".")[0] == "engramdb_bench"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "engramdb_bench", None)  # import → ModuleNotFoundError


def test_bench_without_the_benchmarks_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engramdb.cli.bench import NOT_INSTALLED

    _bench_missing(monkeypatch)
    data = tmp_path / "locomo.json"
    data.write_text("[]", encoding="utf-8")
    group = get_command(app).commands["bench"]  # type: ignore[attr-defined]
    assert isinstance(group, TyperGroup)
    for name, command in group.commands.items():
        takes_data = any("--data" in p.opts for p in command.params)
        result = runner.invoke(app, ["bench", name, *(["--data", str(data)] if takes_data else [])])
        assert_fails(result, NOT_INSTALLED)
        assert "pip install -e benchmarks/" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        # What the commands take still shows without them.
        assert runner.invoke(app, ["bench", name, "--help"]).exit_code == 0
    # --data missing too: the install message, not the benchmarks' own.
    monkeypatch.delenv("ENGRAM_LOCOMO", raising=False)
    assert_fails(runner.invoke(app, ["bench", "calibration"]), NOT_INSTALLED)


def test_engram_imports_no_benchmark_code() -> None:
    from engramdb.cli.bench import LOCOMO_ENV
    from engramdb_bench._locomo import ENV_VAR

    assert LOCOMO_ENV == ENV_VAR
    # Neither the library nor the command loads the benchmarks until one is run.
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, engramdb, engramdb.cli; "
            "print(sorted(m for m in sys.modules if m.startswith('engramdb_bench')))",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"
