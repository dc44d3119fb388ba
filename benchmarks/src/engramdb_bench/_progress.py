"""Progress bars and quiet loggers for the long benchmarks (torture)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

Tick = Callable[..., None]
"""A progress callback: ``tick(done, total, **figures)``."""


@contextlib.contextmanager
def quiet(*names: str) -> Iterator[None]:
    """Silence loggers whose messages the part counts itself (restored afterwards)."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def load_average() -> float:
    """The one-minute load average, rounded (a figure for the report)."""
    return round(os.getloadavg()[0], 2)


class Progress:
    """Rich progress bars on stderr, or nothing."""

    def __init__(self, enabled: bool) -> None:
        self._progress: Any = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
            )

    def __enter__(self) -> Progress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    @contextlib.contextmanager
    def bar(self, description: str, total: int | None) -> Iterator[Tick]:
        """Yield ``tick(n=1, *, completed=None, total=None, description=None)``."""
        if self._progress is None:
            yield lambda *a, **k: None
            return
        task = self._progress.add_task(description, total=total)

        def tick(
            n: int = 1,
            *,
            completed: int | None = None,
            total: int | None = None,
            description: str | None = None,
        ) -> None:
            fields: dict[str, Any] = {}
            if completed is not None:
                fields["completed"] = completed
            else:
                fields["advance"] = n
            if total is not None:
                fields["total"] = total
            if description is not None:
                fields["description"] = description
            self._progress.update(task, **fields)

        try:
            yield tick
        finally:
            self._progress.update(task, visible=True)
