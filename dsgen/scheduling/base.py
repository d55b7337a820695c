"""The scheduler interface: where and when the tasks of a comparison's graph run (:mod:`dsgen.scheduling.graph`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from dsgen.errors import DsgenError
from dsgen.scheduling.tasks import Outcome, Task

DEFAULT_THREADS = 2
"""The threads a task computes with when ``--cpus-per-worker`` is not given, whichever scheduler runs it (a Ray task
then also reserves that many CPUs). Training's bits depend on the count (measured: a tiny BERT trained on 1 and on
2 threads ends with other weights, an STS16 average 0.0002 apart; generation's and evaluation's bits do not), so a
run computes on one count everywhere; 2 is what the local scheduler used on the 2-core machines the presets were
timed on, so a local comparison keeps its speed there."""


class Scheduler(ABC):
    """Runs tasks for a :class:`~dsgen.scheduling.graph.Graph`: the graph submits ready tasks while there is room and
    waits for finished ones; only the driver (the graph's process) writes under the output folder."""

    name = "scheduler"

    @abstractmethod
    def start(self, runner: Any, plans: list[Any]) -> None:
        """Get ready to run the tasks of ``plans`` for the driver's ``runner`` (connect, check the workers)."""

    @abstractmethod
    def room(self) -> int:
        """How many more tasks may start now."""

    @abstractmethod
    def submit(self, task: Task) -> None:
        """Start ``task``."""

    @abstractmethod
    def running(self) -> int:
        """Tasks submitted and not yet returned by :meth:`wait`."""

    @abstractmethod
    def wait(self) -> list[tuple[Task, Outcome]]:
        """Block until at least one task has finished; return the finished ones, their files written by the driver."""

    def await_room(self) -> None:
        """Called when nothing runs, tasks are ready and :meth:`room` is 0 (every worker that could take one is gone):
        return once there is room, or raise a one-line :class:`~dsgen.errors.DsgenError`."""
        raise DsgenError(f"the {self.name} scheduler has no room for a task and none is running")

    @abstractmethod
    def stop(self) -> None:
        """Cancel what still runs and let go of what :meth:`start` took (a Ray started for the command)."""
