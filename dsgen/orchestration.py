"""Runs of methods under a preset, planned and executed as one graph of artefacts: what every command that runs
methods (``run``, ``compare``, ``curve``, ``claims``, ``regress``, ``analyze``) and the library API build on.

It stands above the scheduler (:mod:`dsgen.scheduling`), which executes a graph of plans, and the run engine
(:mod:`dsgen.runs`), which runs one plan: here methods, presets and seeds become plans, and the plans' results are
handed back grouped by method.
"""

from __future__ import annotations

from typing import Any

from dsgen.evaluation.results import Result
from dsgen.planning import Overrides, plan_run
from dsgen.presets import Preset
from dsgen.runs.pipeline import Runner
from dsgen.runs.records import RunFailed
from dsgen.scheduling import run_plans


def run_many(methods: list[str], preset: Preset, runs: list[tuple[int, int]] | list[int], runner: Runner,
             overrides: Overrides | None = None, on_result: Any = None,
             failures: list[RunFailed] | None = None, scheduler: Any = None, view: Any = None) -> dict[str, list[Result]]:
    """Every (method, run) pair, reusing what is cached; every plan is resolved before any work starts, and they run
    as one graph of artefacts (:func:`dsgen.scheduling.run_plans`).

    Args:
        runs: (data seed, training seed) pairs (:meth:`dsgen.presets.Preset.runs`), or training seeds
            alone (each its own data, or the preset's single data seed).
        on_result: ``(method, plan, result)`` for each run with a result, as it arrives.
        failures: where a run that stops on its data (:class:`~dsgen.runs.records.RunFailed`) or crashes on an
            unexpected exception (:class:`~dsgen.runs.records.RunCrashed`, its traceback written under ``logs/``) is
            recorded while the other runs go on (the run is left out of the returned results, a method without any run
            too); None: it is raised. A :class:`~dsgen.errors.DsgenError` that is not a
            :class:`~dsgen.runs.records.RunFailed` (bad input) is always raised.
        scheduler: where the tasks run (:mod:`dsgen.scheduling`; default ``local``: in order, in this process).
        view: a progress view over the runs (:class:`dsgen.scheduling.view.RunsView`).
    """
    return run_groups([(methods, preset)], runs, runner, overrides, on_result,
                      None if failures is None else [failures], scheduler, view)[0]


def run_groups(groups: list[tuple[list[str], Preset]], runs: list[tuple[int, int]] | list[int], runner: Runner,
               overrides: Overrides | None = None, on_result: Any = None,
               failures: list[list[RunFailed]] | None = None, scheduler: Any = None,
               view: Any = None) -> list[dict[str, list[Result]]]:
    """:func:`run_many` for several (methods, preset) groups run as one graph (a learning curve's sizes share its
    scheduler and fan out together); one ``{method: results}`` per group, and the failed runs of group g appended to
    ``failures[g]`` (None: the first failure is raised)."""
    from dsgen.method import get_method

    pairs = [r if isinstance(r, tuple) else (None, r) for r in runs]
    plans = [(g, plan_run(get_method(m), preset, s, overrides, d)) for g, (methods, preset) in enumerate(groups)
             for m in methods for d, s in pairs]
    failed: list[RunFailed] | None = None if failures is None else []
    results = run_plans([p for _, p in plans], runner, scheduler, None if on_result is None else
                        (lambda plan, result: on_result(plan.method.name, plan, result)), failed, view)
    out: list[dict[str, list[Result]]] = [{} for _ in groups]
    pending = iter(failed or [])  # one failure per plan without a result, in plan order
    for (g, plan), result in zip(plans, results):
        if result is not None:
            out[g].setdefault(plan.method.name, []).append(result)
        elif failures is not None:
            failures[g].append(next(pending))
    return [{m: by[m] for m in methods if m in by} for by, (methods, _) in zip(out, groups)]


__all__ = ["run_groups", "run_many"]
