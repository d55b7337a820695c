"""The tasks of a comparison's graph: one per artefact (a dataset, a data-level fit, a run's result), each named by
the artefact's key, and the one function that executes a task wherever a scheduler places it.

| task | key | makes (under the output folder) | reads |
| --- | --- | --- | --- |
| :class:`DatasetTask` | the dataset key | ``cache/datasets/<task>-<key>.jsonl`` and its sidecar | its inputs (carried in the task) |
| :class:`FitTask` | the data-level fit key | ``cache/fits/<kind>-<key>/`` | the datasets its plan reads |
| :class:`RunTask` | the run key | ``results/<preset>/<method>/<variant>/<run>.*``, its log | its datasets and fits (and an API judge's cache) |

:func:`execute` runs a task with a :class:`~dsgen.runs.pipeline.Runner` over an output folder (the driver's own for the
``local`` scheduler; a Ray worker's scratch folder, whose new files the driver then writes) and turns what
happened into an :class:`Outcome`, by the rules every scheduler shares (issue 30's): a run that fails on its data is
a :class:`~dsgen.runs.records.RunFailed`; an unexpected exception inside a run is a :class:`~dsgen.runs.records.RunCrashed`
with its traceback in the run's log; a :class:`~dsgen.errors.DsgenError` outside a run's own stages is bad input
that stops the command; a dataset or fit that fails is recorded, and every run that needs it fails the way it would
have failed making it itself.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Iterator

from dsgen.errors import DsgenError
from dsgen.runs.records import DatasetNeed, FitNeed, KeyMismatch, Missing, RunFailed, log_path, run_label

DONE, FAILED, ERROR, CRASHED = "done", "failed", "error", "crashed"


@dataclass
class Outcome:
    """What executing a task gave.

    Args:
        status: ``done``; ``failed`` (a run's :class:`~dsgen.runs.records.RunFailed` or :class:`~dsgen.runs.records.RunCrashed`,
            a fit that failed on its data); ``error`` (a :class:`~dsgen.errors.DsgenError` that stops the command);
            ``crashed`` (an unexpected exception in a dataset or fit task).
        value: a run's result (when it ran here; a Ray driver reads it back from the files it wrote).
        error: the exception of any status but ``done``.
        seconds: the task's own time where it ran (what the scheduler adds is the rest of its wall time).
        where: the process that ran it (``host:pid``) and its node.
        peak_rss: the peak resident memory of that process during the task, in bytes (when measured).
        files: the files it wrote, relative to its output folder (a Ray worker's; the driver writes them).
    """

    status: str
    value: Any = None
    error: BaseException | None = None
    seconds: float = 0.0
    where: str = ""
    peak_rss: int | None = None
    files: dict[str, bytes] = field(default_factory=dict)


@dataclass
class Task:
    """One artefact to make (see the module docstring)."""

    kind: ClassVar[str] = "task"
    key: str
    order: int  # the first plan that needs it: tasks start in plan order when several are ready

    def execute(self, runner: Any) -> Any:
        raise NotImplementedError

    def reads(self) -> list[Path]:
        """Files and folders under the output folder it reads (a Ray worker gets a copy)."""
        return []

    def log(self) -> Path:
        """Its log, relative to the output folder (what it printed on a worker; a run's traceback)."""
        raise NotImplementedError

    def label(self) -> str:
        raise NotImplementedError


@dataclass
class NeedTask(Task):
    """A task that makes what a :class:`~dsgen.runs.records.DatasetNeed` or :class:`~dsgen.runs.records.FitNeed` names: logged and
    labelled by the artefact's path."""

    need: Any = None

    def log(self) -> Path:
        return Path("logs") / self.need.path.with_suffix(".log")

    def label(self) -> str:
        return f"{self.kind} {self.need.path.name}"


@dataclass
class DatasetTask(NeedTask):
    kind: ClassVar[str] = "dataset"
    need: DatasetNeed = None  # type: ignore[assignment]

    def execute(self, runner: Any) -> Any:
        runner.make_dataset(self.need)

    def partial(self) -> Path:
        """Its finished chunks while it is made (:class:`~dsgen.generation.chunks.ChunkStore`'s folder)."""
        from dsgen.generation.chunks import ChunkStore

        return ChunkStore(self.need.path).folder

    def reads(self) -> list[Path]:
        """What an interrupted making left under the output folder: its finished chunks and an API generator's
        answered requests (:class:`~dsgen.endpoints.RequestCache`'s folder), so a worker resumes as a
        local run does."""
        from dsgen.endpoints import RequestCache

        return [self.partial(), RequestCache(self.need.path).folder]


@dataclass
class FitTask(NeedTask):
    kind: ClassVar[str] = "fit"
    need: FitNeed = None  # type: ignore[assignment]
    datasets: list[Path] = field(default_factory=list)

    def execute(self, runner: Any) -> Any:
        runner.make_fit(self.need)

    def reads(self) -> list[Path]:
        return list(self.datasets)


@dataclass
class RunTask(Task):
    kind: ClassVar[str] = "run"
    plan: Any = None
    datasets: list[Path] = field(default_factory=list)
    fits: list[Path] = field(default_factory=list)
    failed: dict[str, BaseException] = field(default_factory=dict)  # artefacts it reads whose making failed

    def execute(self, runner: Any) -> Any:
        runner.record_failures(self.failed)
        return runner.run(self.plan, expected=self.key)

    def reads(self) -> list[Path]:
        labels = [Path("cache") / "labels"] if self.plan.labeller is not None else []  # an API judge's requests
        return [*self.datasets, *self.fits, *labels]

    def log(self) -> Path:
        out = Path("/")
        return log_path(out, self.plan).relative_to(out)

    def label(self) -> str:
        return f"{self.plan.method.name} ({run_label(self.plan)})"


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the block with torch computing on ``threads`` threads (None: as it is), then put the count back."""
    if threads is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def execute(task: Task, runner: Any) -> Outcome:
    """Run ``task`` with ``runner`` on the runner's thread count (``runner.threads``: training's bits depend on it, so
    every scheduler computes a task with the same count) and say what happened (:class:`Outcome`, by the module
    docstring's rules)."""
    import os
    import socket

    started = time.perf_counter()
    where = f"{socket.gethostname()}:{os.getpid()}"
    try:
        with torch_threads(runner.threads):
            value = task.execute(runner)
        status, error = DONE, None
    except RunFailed as exc:
        value, status, error = None, FAILED, exc
    except KeyMismatch as exc:  # this node reads other data or models than the driver: never mixed in
        value, status, error = None, ERROR, exc
    except Missing as exc:  # what the driver sent is not what this node asks for: it computes other keys
        value, status, error = None, ERROR, KeyMismatch(
            f"{task.label()}: this node looks for {exc.need.kind} {exc.need.key}, which the driver did not send: it "
            "computes other keys than the driver (its data, task specs or models differ)")
    except DsgenError as exc:
        value, status, error = None, (FAILED if task.kind == "fit" else ERROR), exc
    except Exception as exc:  # noqa: BLE001 - one task's bug must not take the comparison with it
        value = None
        if isinstance(task, RunTask):
            status, error = FAILED, runner.crashed(task.plan, exc)
        else:
            status, error = CRASHED, exc
    return Outcome(status, value, error, round(time.perf_counter() - started, 3), where)
