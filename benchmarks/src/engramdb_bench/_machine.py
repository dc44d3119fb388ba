"""The machine a benchmark ran on, for its report: CPUs, Python, platform, load average.

Other work on the machine shares its cores with a benchmark, so a report
records the load average at its start and at its end.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from typing import Any

__all__ = ["machine", "machine_line"]


def machine(load_start: Sequence[float]) -> dict[str, Any]:
    """The report's ``machine`` section; ``load_start`` is ``os.getloadavg()`` at the start."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_start": [round(x, 2) for x in load_start],
        "load_avg_end": [round(x, 2) for x in os.getloadavg()],
    }


def machine_line(section: dict[str, Any]) -> str:
    """``N CPUs; load average A at start, B at end`` of a :func:`machine` section."""
    return (
        f"{section['cpus']} CPUs; load average {section['load_avg_start'][0]:.1f} at start, "
        f"{section['load_avg_end'][0]:.1f} at end"
    )
