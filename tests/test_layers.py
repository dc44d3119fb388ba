"""The layer contracts (.importlinter) hold, and they catch an upward import or a cycle.

`lint-imports` reads every import of the package, lazy ones inside functions
too. The second test copies the package, adds one import that goes up the
layers and closes a cycle (core importing the flows), and checks that both
contracts then fail: the contracts are not decoration.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(pythonpath: Path, config: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [str(LINT), "--config", str(config), "--no-cache"],
        capture_output=True,
        text=True,
        env=env,
        cwd=pythonpath,
        timeout=300,
    )


def test_the_layer_contracts_hold() -> None:
    done = _lint(ROOT / "src", ROOT / ".importlinter")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


def test_an_upward_import_and_a_cycle_break_the_contracts(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "engramdb",
        copy / "engramdb",
        ignore=shutil.ignore_patterns("__pycache__", "*.onnx", "*.model"),
    )
    text = copy / "engramdb" / "core" / "text.py"
    # A lazy import counts as much as one at the top.
    text.write_text(
        text.read_text(encoding="utf-8")
        + "\n\ndef _upward() -> object:\n"
        + "    from engramdb.flows import change\n\n"
        + "    return change\n",
        encoding="utf-8",
    )
    done = _lint(copy, ROOT / ".importlinter")
    assert done.returncode != 0
    assert "0 kept, 2 broken" in done.stdout, done.stdout
    assert "engramdb.core.text -> engramdb.flows.change" in done.stdout
