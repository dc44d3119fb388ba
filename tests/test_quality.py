"""Lint and type checks run with the suite, so CI enforces them."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import pytest

import engramdb

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_clean() -> None:
    proc = run("ruff", "check", "src", "tests", "scripts")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_mypy_clean() -> None:
    proc = run("mypy")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_public_face_is_exactly_all() -> None:
    public = {
        n
        for n in dir(engramdb)
        if not n.startswith("_") and not isinstance(getattr(engramdb, n), types.ModuleType)
    }
    assert public == set(engramdb.__all__) - {"__version__"}
    for name in public:
        assert getattr(engramdb, name).__doc__, f"{name} has no docstring"
