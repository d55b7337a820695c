"""A comparison as a graph of artefacts, executed by a scheduler.

The runs of a comparison share work: one dataset feeds every training seed and several methods, one data-level
fit every run of a data seed. The graph's nodes are the artefacts, named by the keys that already identify them
(:mod:`dsgen.identity`: dataset keys, data-level fit keys, run keys): each is made once, by one task
(:mod:`dsgen.scheduling.tasks`), and the plans that need it wait for it. The driver builds the graph from the plans
with its own runner, which makes nothing (``makes=()``): :meth:`dsgen.runs.pipeline.Runner.prepare` says for each plan what
it reads that is not on disk; a node whose key itself depends on another artefact (x1 generated from scratch, a
dataset sized by another method's) appears when that artefact is made, as the plan is prepared again.

Every plan is prepared before any task starts; then the ready tasks start in plan order (the first plan that
needs a task gives its priority), as many at once as the scheduler has room for: with the ``local`` scheduler one,
so a comparison runs plan after plan, each making its datasets and fits when it first needs them, as it always
did. Whatever the scheduler, every artefact is made by the same code from the same inputs, so the outputs are the
same (``tests/scheduling``).
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result
from dsgen.runs.pipeline import Runner
from dsgen.runs.records import DatasetNeed, FitNeed, Missing, RunCrashed, RunFailed
from dsgen.scheduling.tasks import CRASHED, DONE, ERROR, FAILED, DatasetTask, FitTask, Outcome, RunTask, Task


@dataclass
class Node:
    """An artefact of the graph: the task that makes it and the plans (by index) waiting for it."""

    task: Task
    waiters: list[int] = field(default_factory=list)
    state: str = "ready"  # ready, running, done, failed


class Graph:
    """The driver of a comparison: prepares every plan, hands each missing artefact to ``scheduler`` once, and
    collects the runs' results.

    Args:
        plans: the runs, in the order their results are listed.
        runner: the driver's runner (it writes under the output folder; it makes nothing itself).
        scheduler: ``local`` or ``ray`` (:mod:`dsgen.scheduling`).
        on_result: ``(plan, result)`` for every run with a result, as it arrives.
        on_failure: ``(plan, failure)`` for every failed run, as it happens (None: the first failure is raised).
        view: the progress view over runs (:class:`dsgen.scheduling.view.RunsView`), or None.
    """

    def __init__(self, plans: list[Any], runner: Runner, scheduler: Any,
                 on_result: Callable[[Any, Result], None] | None = None,
                 on_failure: Callable[[Any, RunFailed], None] | None = None, view: Any = None) -> None:
        self.plans, self.runner, self.scheduler = plans, runner, scheduler
        self.on_result, self.on_failure, self.view = on_result, on_failure, view
        self.results: list[Result | None] = [None] * len(plans)
        self.failures: dict[int, RunFailed] = {}
        self.nodes: dict[str, Node] = {}
        self._pending: list[int] = list(range(len(plans)))  # plans to prepare (again), a heap
        self._ready: list[tuple[int, int, str]] = []  # (order, sequence, key), a heap
        self._sequence = itertools.count()

    # -- building --------------------------------------------------------------------------------
    def _id(self, task: Task) -> str:
        """A node's name: an artefact's key; a run's key with the folder its result is stored in, since one key can be
        stored under two presets (``base`` at every size of a learning curve: the same untrained model), and a run
        is made for each folder (a seed-independent run is then found by every seed of its folder)."""
        if isinstance(task, RunTask):
            return f"{task.key}:{self.runner.result_path(task.plan).parent.relative_to(self.runner.out)}"
        return task.key

    def _add(self, task: Task, waiter: int) -> None:
        name = self._id(task)
        node = self.nodes.get(name)
        if node is None or node.state == "failed":  # a run that failed before is tried again for the next plan
            node = self.nodes[name] = Node(task)
            heapq.heappush(self._ready, (task.order, next(self._sequence), name))
        if node.state == "done":  # made, yet the plan still misses it: it was not stored where the plan reads it
            raise DsgenError(f"{task.label()} was made, but {self.plans[waiter].method.name} still misses it under "
                             f"{self.runner.out}; was the folder changed while the comparison ran?")
        if waiter not in node.waiters:
            node.waiters.append(waiter)

    def _task(self, need: DatasetNeed | FitNeed, order: int, datasets: dict[str, Any]) -> Task:
        if isinstance(need, DatasetNeed):
            return DatasetTask(need.key, order, need=need)
        return FitTask(need.key, order, need=need, datasets=list(datasets.values()))

    def _prepare(self, i: int) -> None:
        plan = self.plans[i]
        try:
            prepared = self.runner.prepare(plan)
        except Missing as missing:
            self._add(self._task(missing.need, i, {}), i)
            return
        except RunFailed as exc:
            self._failed(i, exc)
            return
        except DsgenError:
            raise
        except Exception as exc:  # noqa: BLE001 - one run's bug (or a dataset that crashed for it) is its failure
            self._failed(i, self.runner.crashed(plan, exc))
            return
        if prepared.result is not None:
            self._done(i, prepared.result, cached=True)
            return
        for need in prepared.needs:
            self._add(self._task(need, i, prepared.datasets), i)
        if not prepared.needs:
            failed = self.runner.failures((*prepared.datasets, *prepared.fits))
            self._add(RunTask(prepared.key, i, plan=plan, datasets=list(prepared.datasets.values()),
                              fits=[f for k, f in prepared.fits.items() if k not in failed], failed=failed), i)

    # -- outcomes ---------------------------------------------------------------------------------
    def _done(self, i: int, result: Result, cached: bool = False) -> None:
        self.results[i] = result
        if self.view is not None:
            self.view.finished(ok=True, cached=cached)
        if self.on_result is not None:
            self.on_result(self.plans[i], result)

    def _failed(self, i: int, failure: RunFailed) -> None:
        self.failures[i] = failure
        if self.view is not None:
            self.view.finished(ok=False)
        if self.on_failure is None:  # nothing collects failures: the first is raised (a crash as its own exception)
            cause = failure.__cause__ if isinstance(failure, RunCrashed) else None
            raise cause if isinstance(cause, Exception) else failure
        self.on_failure(self.plans[i], failure)

    def _finish(self, task: Task, outcome: Outcome) -> None:
        node = self.nodes[self._id(task)]
        waiters, node.waiters = node.waiters, []
        if outcome.status == ERROR:
            raise outcome.error  # type: ignore[misc]
        node.state = "done" if outcome.status == DONE else "failed"
        if isinstance(task, RunTask):
            if self.view is not None:
                self.view.stopped()
            owner = task.order if task.order in waiters else waiters[0]
            if outcome.status == DONE:
                self.runner.made(task.key)
                result = outcome.value if outcome.value is not None else self.runner.cached_result(task.plan, task.key)
                if result is None:
                    raise DsgenError(f"{task.label()}: the task ended without a result file under {self.runner.out}")
                self._done(owner, result)
            else:
                self._failed(owner, outcome.error)  # type: ignore[arg-type]
            waiters = [w for w in waiters if w != owner]  # other runs with this key (base: one model for every seed)
        elif outcome.status == DONE:
            self.runner.made(task.key)
        elif outcome.status in (FAILED, CRASHED):  # every run that needs it fails as it would have failing to make it
            self.runner.record_failures({task.key: outcome.error})  # type: ignore[dict-item]
        for w in waiters:
            heapq.heappush(self._pending, w)

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> list[Result | None]:
        """Execute the graph; returns each plan's result (None: it failed, see ``failures``)."""
        with self.runner.making(()):  # the driver makes nothing itself: its tasks do
            try:
                self.scheduler.start(self.runner, self.plans)
                while self._step():
                    pass
            finally:
                self.scheduler.stop()
        return self.results

    def _step(self) -> bool:
        """Prepare what is pending, start what is ready while there is room, collect what finished; False once
        nothing is left to do."""
        while self._pending:
            self._prepare(heapq.heappop(self._pending))
        while self._ready and self.scheduler.room() > 0:
            _, _, key = heapq.heappop(self._ready)
            node = self.nodes[key]
            node.state = "running"
            if isinstance(node.task, RunTask) and self.view is not None:
                self.view.started()
            self.scheduler.submit(node.task)
        if not self.scheduler.running():
            if self._pending:
                return True
            if self._ready:  # ready tasks, none running, no room: wait for a worker (or fail in one line)
                self.scheduler.await_room()
                return True
            return False
        for task, outcome in self.scheduler.wait():
            self._finish(task, outcome)
        return True


def run_plans(plans: list[Any], runner: Runner, scheduler: Any = None,
              on_result: Callable[[Any, Result], None] | None = None, failures: list[RunFailed] | None = None,
              view: Any = None) -> list[Result | None]:
    """Run ``plans`` as one graph (see the module docstring); each plan's result, None for a failed one.

    Args:
        scheduler: where tasks run (default: ``local``, in order in this process).
        failures: receives each failed run (:class:`~dsgen.runs.records.RunFailed`, :class:`~dsgen.runs.records.RunCrashed`),
            in plan order, while the others go on; None: the first one is raised.
    """
    from dsgen.scheduling.local import LocalScheduler

    graph = Graph(plans, runner, scheduler or LocalScheduler(), on_result,
                  None if failures is None else (lambda plan, failure: None), view)
    try:
        return graph.run()
    finally:
        collected = graph.failures
        if failures is not None:
            failures.extend(collected[i] for i in sorted(collected))
