"""``dsgen.run`` and ``dsgen.compare``: one method's runs, and a comparison of methods with its tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.api.common import NoResult, OnResult, Report, RunSettings, method_list, records_call
from dsgen.api.common import publish as publish_tables  # ``publish`` is also an argument's name
from dsgen.orchestration import Seeds


@dataclass
class Runs(Report):
    """What :func:`run` hands back: the runs' results and their table.

    Attributes:
        method: the method run.
        folder: where its result files are (``out/results/<preset>/<method>``).
    """

    method: str = ""
    folder: Path | None = None

    @property
    def table(self) -> Any:
        """Spearman x 100 per run (rows) and task (columns), with the average: what ``dsgen run`` prints."""
        from dsgen.reports.tables import comparison_frame

        return comparison_frame(self.results[self.method], self.preset.tasks)


@records_call
def run(method: str, *, preset: str = "quick", seeds: Seeds = None, data_seeds: Seeds = None,
        generator: str | None = None, base_url: str | None = None, encoder: str | None = None,
        device: str | None = None, preprocess: str | None = None, save_model: bool = False,
        backend: str = "local", address: str | None = None, workers: int | None = None,
        cpus_per_worker: int | None = None, out: str | Path = "runs", data_dir: str | None = None,
        progress: bool = True, on_result: OnResult | None = None, console: Any = None,
        command: str | None = None) -> Runs:
    """Generate (cached), train and evaluate one method under a preset: one result file per run under ``out``.

    The arguments after ``method`` are :class:`~dsgen.api.common.RunSettings` (``dsgen run``'s options); the first
    run that produces no model raises its :class:`~dsgen.runs.records.RunFailed`.

    Example:
        >>> runs = dsgen.run("dino", preset="smoke", seeds=[1, 2])  # doctest: +SKIP
        >>> runs.table  # one row per run
    """
    settings = RunSettings(preset=preset, seeds=seeds, data_seeds=data_seeds, generator=generator, base_url=base_url,
                           encoder=encoder, device=device, preprocess=preprocess, save_model=save_model,
                           backend=backend, address=address, workers=workers, cpus_per_worker=cpus_per_worker,
                           out=out, data_dir=data_dir, progress=progress)
    ov = settings.overrides()
    planned = settings.prepare([method], ov)
    results = settings.execute([([method], planned.preset)], planned, ov, on_result, console)[0]
    return Runs(planned.preset, planned.runs, results, method=method,
                folder=planned.runner.out / "results" / planned.preset.name / method)


@dataclass
class Compared(Report):
    """What :func:`compare` hands back.

    Attributes:
        comparison: the :class:`~dsgen.reports.comparison.Comparison` (scores, differences to the first method
            with their intervals); ``table`` and ``long_table`` are the CSV files' frames.
    """

    comparison: Any = field(default=None, repr=False)

    @property
    def methods(self) -> list[str]:
        return list(self.comparison.methods)

    @property
    def table(self) -> Any:
        """One row per method: mean and std per task and of the average, the difference to the reference with its
        intervals, runs and failed runs (``<stem>.csv``)."""
        return self.comparison.frame()

    @property
    def long_table(self) -> Any:
        """One row per (method, variant, run, task, metric), with the plan's key fields (``<stem>.long.csv``)."""
        return self.comparison.long_frame()


@records_call
def compare(methods: Sequence[str], *, name: str | None = None, preset: str = "quick", seeds: Seeds = None,
            data_seeds: Seeds = None, generator: str | None = None, base_url: str | None = None,
            encoder: str | None = None, device: str | None = None, preprocess: str | None = None,
            save_model: bool = False, backend: str = "local", address: str | None = None,
            workers: int | None = None, cpus_per_worker: int | None = None, out: str | Path = "runs",
            publish: str | Path | None = None, data_dir: str | None = None, progress: bool = True,
            on_result: OnResult | None = None, console: Any = None, command: str | None = None) -> Compared:
    """Run what is missing, reuse what is cached, and write one comparison table (Markdown, CSV, long CSV, PNG) under
    ``out/tables/<preset>/<name>`` (default name ``compare-<methods>``).

    Differences are taken to the first method; ``base`` is added if absent. The other arguments are
    :class:`~dsgen.api.common.RunSettings` (``dsgen compare``'s options). A run that produces no model is a failure
    (``Compared.failures``; its method a failed row); :class:`~dsgen.api.common.NoResult` when the first method
    has no result at all.

    Example:
        >>> cmp = dsgen.compare(["dino"], preset="smoke", out="runs")  # doctest: +SKIP
        >>> cmp.table["Avg. mean"]
    """
    from dsgen.reports.comparison import Comparison
    from dsgen.reports.tables import write_comparison

    settings = RunSettings(preset=preset, seeds=seeds, data_seeds=data_seeds, generator=generator, base_url=base_url,
                           encoder=encoder, device=device, preprocess=preprocess, save_model=save_model,
                           backend=backend, address=address, workers=workers, cpus_per_worker=cpus_per_worker,
                           out=out, publish=publish, data_dir=data_dir, progress=progress)
    methods = method_list(methods)
    names = methods + ([] if "base" in methods else ["base"])  # a repeated method is refused by prepare
    planned, results, failures = settings.run_methods(names, on_result, console)
    p, runs = planned.preset, planned.runs
    failed = {f.method for f in failures}
    done = [m for m in names if m in results and m not in failed and len(results[m]) == len(runs)]
    if names[0] not in done:
        raise NoResult(f"the reference method '{names[0]}' produced no result; nothing to compare against", failures)
    comparison = Comparison(done, p.tasks, {m: results[m] for m in done}, preset=p.name, failures=failures)
    paths = write_comparison(comparison, planned.runner.out / "tables" / p.name, name or "compare-" + "-".join(names),
                             command=command or "")
    return Compared(p, runs, results, failures, paths, publish_tables(paths, settings.publish, p.name),
                    comparison=comparison)


__all__ = ["Compared", "Runs", "compare", "run"]
