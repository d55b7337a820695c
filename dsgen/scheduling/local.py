"""The ``local`` scheduler: every task in this process, one at a time, in plan order (what ``dsgen compare`` always
did: each run makes its datasets and fits when it first needs them, then trains and evaluates)."""

from __future__ import annotations

from typing import Any

from dsgen.scheduling.base import Scheduler
from dsgen.scheduling.tasks import Outcome, Task, execute


class LocalScheduler(Scheduler):
    """Executes each task as it is submitted, with the driver's runner over the output folder, so the artefacts are
    written in place (a dataset's chunks as they finish, as always: a killed command resumes from them)."""

    name = "local"

    def __init__(self) -> None:
        self.runner: Any = None
        self._finished: list[tuple[Task, Outcome]] = []
        self.records: list[dict[str, Any]] = []  # one per task: kind, label, status, seconds

    def start(self, runner: Any, plans: list[Any]) -> None:
        self.runner = runner

    def room(self) -> int:
        return 0 if self._finished else 1

    def submit(self, task: Task) -> None:
        with self.runner.making((task.kind,) if task.kind != "run" else ()):  # its own artefact, nothing else
            outcome = execute(task, self.runner)
        self._finished.append((task, outcome))
        self.records.append({"kind": task.kind, "task": task.label(), "status": outcome.status,
                             "task_seconds": outcome.seconds})

    def running(self) -> int:
        return len(self._finished)

    def wait(self) -> list[tuple[Task, Outcome]]:
        finished, self._finished = self._finished, []
        return finished

    def stop(self) -> None:
        self._finished = []
