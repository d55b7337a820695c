"""One progress view over the runs of a comparison, in the driver: done / running / failed and an ETA."""

from __future__ import annotations

import time
from typing import Any


class RunsView:
    """A rich progress bar over runs on ``console`` (the one the per-run lines are printed on, so they scroll above
    it). The ETA divides the runs still to make by the rate at which runs were made since the first started (runs
    read from the cache count as done, not in the rate).

    Args:
        console: a rich console (the command's).
        total: how many runs.
        enabled: False: nothing is shown (``--quiet``).
    """

    def __init__(self, console: Any, total: int, enabled: bool = True) -> None:
        self.console, self.total, self.enabled = console, total, enabled
        self.done = self.failed = self.running = self.cached = self.made = 0
        self.first_start: float | None = None
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> "RunsView":
        if self.enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]runs"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[state]}"), TimeElapsedColumn(),
                                      TextColumn("{task.fields[eta]}"), console=self.console, transient=False)
            self._progress.start()
            self._task = self._progress.add_task("runs", total=self.total, state="", eta="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._refresh()
            self._progress.stop()
            self._progress = None

    def eta(self) -> str:
        """The time left at the rate runs were made so far, as ``ETA 1:02:03`` (empty before the first is made)."""
        left = self.total - self.done - self.failed
        if not self.made or self.first_start is None or not left:
            return ""
        seconds = left * (time.monotonic() - self.first_start) / self.made
        return f"ETA {int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{int(seconds % 60):02d}"

    def _refresh(self) -> None:
        if self._progress is not None:
            state = f"{self.running} running, {self.failed} failed" + (f", {self.cached} cached" if self.cached else "")
            self._progress.update(self._task, completed=self.done + self.failed, state=state, eta=self.eta())

    def started(self) -> None:
        self.running += 1
        if self.first_start is None:
            self.first_start = time.monotonic()
        self._refresh()

    def stopped(self) -> None:
        self.running -= 1
        self._refresh()

    def finished(self, ok: bool, cached: bool = False) -> None:
        if ok:
            self.done += 1
        else:
            self.failed += 1
        if cached:
            self.cached += 1
        elif self.first_start is not None:
            self.made += 1
        self._refresh()
