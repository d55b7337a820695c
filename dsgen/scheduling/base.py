"""The scheduler interface: where and when the tasks of a comparison's graph run (:mod:`dsgen.scheduling.graph`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from dsgen.errors import DsgenError
from dsgen.runs.records import DEFAULT_THREADS  # noqa: F401 -- where schedulers read it
from dsgen.scheduling.tasks import Outcome, Task

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
