"""A rich progress bar with a rate column, used by every long-running stage."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def progress_bar(description: str, total: float | None, unit: str = "pairs", enabled: bool = True) -> Iterator[object]:
    """Yield ``advance(n)``; shows done/total, ``<unit>/s`` and ETA on a terminal-like stderr."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    if not enabled:
        yield lambda n=1, **kw: None
        return
    console = Console(file=sys.stderr)
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
               TextColumn("{task.fields[rate]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task(description, total=total, rate="")

        def advance(n: float = 1, **fields: object) -> None:
            progress.advance(task, n)
            t = progress.tasks[task]
            speed = t.finished_speed or t.speed
            progress.update(task, rate=f"{speed:.2f} {unit}/s" if speed else "", **fields)

        yield advance
