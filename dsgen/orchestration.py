"""Runs of methods under a preset, planned and executed as one graph of artefacts: what the library API
(:mod:`dsgen.api`: ``run``, ``compare``, ``curve``, ``claims``, ``regress``, ``analyze``) and so every command that
runs methods build on.

It stands above the scheduler (:mod:`dsgen.scheduling`), which executes a graph of plans, and the run engine
(:mod:`dsgen.runs`), which runs one plan: here methods, presets and seeds become plans (:func:`prepare` checks every
one of them, and everything else that is cheap, before any long work), and the plans' results are handed back grouped
by method (:func:`run_many`, :func:`run_groups`). Where the work runs (``--backend`` and its Ray settings) is checked
and built by :class:`dsgen.scheduling.placement.Placement`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result
from dsgen.planning import Overrides, plan_run
from dsgen.presets import Preset
from dsgen.runs.pipeline import Runner
from dsgen.runs.records import DEFAULT_THREADS, RunFailed
from dsgen.scheduling import run_plans

Seeds = Sequence[int] | str | None
"""Seeds as a list (``[1, 2, 3]``) or as the command line writes them (``"1,2,3"``); None: the preset's."""


class Planned(NamedTuple):
    """What :func:`prepare` hands back: the preset, its (data seed, training seed) runs, and the runner over ``out``."""

    preset: Preset
    runs: list[tuple[int, int]]
    runner: Runner


def check_overrides(generator: str | None = None, encoder: str | None = None, device: str | None = None,
              preprocess: str | None = None, base_url: str | None = None) -> Overrides:
    """What the caller sets over the preset (None: not set), checked: a one-line error for an unknown device or
    preprocessing, ``base_url`` without ``openai:<model>``, or ``openai:`` without a model."""
    from dsgen.evaluation.preprocess import check_preprocess
    from dsgen.models import check_device

    if device is not None:
        check_device(device)
    if preprocess is not None:
        check_preprocess(preprocess)
    ov = Overrides(generator, encoder, device, preprocess, base_url)
    if base_url is not None and ov.api_model is None:
        raise DsgenError("--base-url goes with --generator openai:<model>")
    if ov.api_model == "":
        raise DsgenError("--generator openai: needs the model the endpoint serves, e.g. openai:gpt-4o-mini")
    return ov


def seed_list(seeds: Seeds, option: str = "--seeds") -> list[int] | None:
    """``seeds`` as a list of distinct non-negative integers (None: the preset's); a one-line error naming ``option``
    for anything else, an empty list too (:func:`dsgen.presets.parse_seeds`)."""
    from dsgen.presets import parse_seeds

    if seeds is None or isinstance(seeds, str):
        return parse_seeds(seeds, None, option)
    return parse_seeds(",".join(str(s) for s in seeds), None, option)


def prepare(methods: Sequence[str], preset: str, seeds: Seeds = None, out: str | Path = "runs",
            data_dir: str | None = None, progress: bool = True, overrides: Overrides | None = None,
            fresh: bool = False, backend: Any = None, data_seeds: Seeds = None, save_models: bool = False,
            threads: int = DEFAULT_THREADS) -> Planned:
    """Validate everything cheap before any long work (methods, a method given twice, preset, seeds, every plan,
    the output folder), then make the runner (which creates ``out``). A run is a (data seed, training seed) pair.

    Args:
        backend: the generation backend of the runner's datasets (None: this process).
        threads: the threads every task computes with (:attr:`dsgen.scheduling.placement.Placement.threads`; the same
            default for every command, so that each finds the runs another made).
    """
    from dsgen.artifacts import check_writable_target
    from dsgen.method import get_method
    from dsgen.presets import load_preset

    methods = list(methods)
    for m in methods:
        get_method(m)
    repeated = sorted({m for m in methods if methods.count(m) > 1})
    if repeated:
        raise DsgenError(f"method '{repeated[0]}' is given twice; name each method once")
    p = load_preset(preset)
    runs = p.runs(seed_list(seeds), seed_list(data_seeds, "--data-seeds"))
    from dsgen.models import check_weights

    models = []
    for m in methods:
        for d, s in runs:
            models += plan_run(m, p, s, overrides, d).models()  # a bad setting fails here, before anything runs
    for name in dict.fromkeys(models):
        check_weights(name)  # so does a damaged weights file
    out = Path(out)
    check_writable_target(out)
    return Planned(p, runs, Runner(out, data_dir, progress=progress, fresh=fresh, backend=backend,
                                   save_models=save_models, threads=threads))


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


__all__ = ["Planned", "Seeds", "check_overrides", "prepare", "run_groups", "run_many", "seed_list"]
