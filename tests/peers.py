"""The peer python the bench tests compare against (mem0's own venv), when there is one."""

from __future__ import annotations

import os

import pytest

__all__ = ["MEM0_BENCH_PYTHON", "needs_mem0_bench_python"]

MEM0_BENCH_PYTHON = os.environ.get("ENGRAM_MEM0_BENCH_PYTHON")
"""A python with mem0ai, torch and the MiniLM weights (scripts/mem0-bench-venv), or None."""

needs_mem0_bench_python = pytest.mark.skipif(
    not MEM0_BENCH_PYTHON,
    reason="$ENGRAM_MEM0_BENCH_PYTHON is not set (scripts/mem0-bench-venv makes mem0's venv; "
    "torch is too heavy for CI)",
)
