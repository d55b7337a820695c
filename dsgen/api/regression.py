"""``dsgen.regress``: a preset rerun from scratch and checked against its committed baseline (or the baseline
written from it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.api.common import OnResult, method_list
from dsgen.errors import DsgenError

DEFAULT_METHODS = ("base", "dino")
"""What ``update=True`` reruns when no methods are given."""


@dataclass
class Regression:
    """What :func:`regress` hands back.

    Attributes:
        preset: the preset's name.
        baseline: the baseline file checked (or written, with ``updated``).
        tolerance: points of Spearman x 100 a task may fall below the baseline.
        checks: one :class:`~dsgen.reports.baseline.Check` per (method, task) (none when ``updated``).
        against: which baseline entry the check used (a line: the one made the same way, or why another).
        updated: the baseline was written from this run instead of checked.
        kept: with ``updated``, the entries of other kinds of machine the file kept.
        made_with: how this run's scores were made (evaluation dtype, CPU capability).
        results: per method, the rerun's results.
    """

    preset: str
    baseline: Path
    tolerance: float
    checks: list[Any] = field(default_factory=list)
    against: str = ""
    updated: bool = False
    kept: list[dict[str, Any]] = field(default_factory=list, repr=False)
    made_with: dict[str, Any] = field(default_factory=dict)
    results: dict[str, list[Any]] = field(default_factory=dict, repr=False)

    @property
    def failed(self) -> list[Any]:
        """The checks that fell more than the tolerance below the baseline, or are not numbers."""
        return [c for c in self.checks if c.failed]

    @property
    def risen(self) -> list[Any]:
        """The checks that rose more than the tolerance above the baseline (they pass: the gate is one-sided)."""
        return [c for c in self.checks if c.delta > self.tolerance]

    @property
    def passed(self) -> bool:
        return not self.failed

    @property
    def table(self) -> Any:
        """One row per (method, task): baseline, now, Δ and status (what ``dsgen regress`` prints)."""
        import pandas as pd

        return pd.DataFrame([{"method": c.method, "task": c.task, "baseline": c.baseline, "now": c.current,
                              "Δ": c.delta, "status": c.status} for c in self.checks],
                            columns=["method", "task", "baseline", "now", "Δ", "status"])

    def summary(self, preset_arg: str | None = None) -> str:
        """The verdict line ``dsgen regress`` ends with; ``preset_arg`` is the preset as the caller named it (for the
        ``--update`` hint; default: its name)."""
        from dsgen.reports.baseline import describe

        tol, path, n = self.tolerance, self.baseline, len(self.checks)
        if self.updated:
            return (f"wrote baseline {path} for {describe(self.made_with)} (tolerance {tol:g})"
                    + "".join(f"; kept the one made with {describe(b.get('made_with'))}" for b in self.kept))
        if self.failed:
            return f"{len(self.failed)} of {n} scores fell more than {tol} below {path} or are not numbers"
        if not self.risen:
            return f"all {n} scores within {tol} of {path}"
        return (f"no score of {n} fell more than {tol} below {path}; {len(self.risen)} rose more than {tol} above "
                f"it ({', '.join(f'{c.method} {c.task} {c.delta:+.2f}' for c in self.risen)}): the baseline predates "
                f"what moved them, and a fall back would pass unseen (`dsgen regress --preset {preset_arg or self.preset}"
                " --update` remakes it)")


def _methods_of(baseline: dict[str, Any] | None) -> list[str]:
    """The methods a baseline file holds scores of, in its order (none for no file)."""
    return list(dict.fromkeys(m for entry in (baseline or {}).get("baselines", []) for m in entry["scores"]))


def regress(*, preset: str = "smoke", baseline: str | Path | None = None, tolerance: float | None = None,
            methods: Sequence[str] | str | None = None, update: bool = False, out: str | Path = "runs/regress",
            data_dir: str | None = None, progress: bool = True, on_result: OnResult | None = None) -> Regression:
    """Rerun ``preset`` from scratch under ``out`` (nothing reused) and check every task of every method against the
    baseline (default ``results/baseline/<preset>.json``): :attr:`Regression.passed` is False when one falls more
    than ``tolerance`` (default: the baseline file's) below it or is not a number. With ``update=True``, write the
    baseline from the rerun of ``methods`` instead (default: the file's own methods, or base and dino for a new
    file), keeping the file's tolerance and note unless ``tolerance`` is given and the entries of other kinds of
    machine.

    Example:
        >>> check = dsgen.regress(preset="smoke")  # doctest: +SKIP
        >>> check.passed, check.table
    """
    from dsgen.reports.baseline import (DEFAULT_TOLERANCE, check, describe, made_with, read_baseline, select,
                                           write_baseline)
    from dsgen.orchestration import check_overrides, prepare, run_many

    if tolerance is not None and tolerance < 0:
        raise DsgenError(f"--tolerance must be non-negative (got {tolerance})")
    if method_list(methods) and not update:
        raise DsgenError("methods go with --update; a check reruns the methods of its baseline")
    path = Path(baseline) if baseline is not None else Path("results") / "baseline" / f"{Path(preset).stem}.json"
    ref = None if update else read_baseline(path)
    previous = read_baseline(path) if update and path.exists() else None  # update keeps its tolerance and note
    names = ((method_list(methods) or _methods_of(previous) or list(DEFAULT_METHODS)) if update
             else _methods_of(ref))
    ov = check_overrides()
    p, runs, runner = prepare(names, preset, None if update else ref["seeds"], out, data_dir, progress, ov, fresh=True)
    if not update and ref.get("preset") != p.name:
        raise DsgenError(f"{path} is a baseline of preset '{ref.get('preset')}', not '{p.name}'")
    tol = tolerance if tolerance is not None else (ref or previous or {}).get("tolerance", DEFAULT_TOLERANCE)
    results = run_many(names, p, runs, runner, ov, on_result=on_result)
    if update:
        note = (previous or {}).get("note") if tolerance is None and previous else None
        made_by = f"dsgen regress {' '.join(names)} --preset {preset} --update --tolerance {tol:g}"
        kept = write_baseline(path, p.name, sorted({s for _, s in runs}), results, tolerance=tol, note=note or made_by,
                              previous=previous)
        return Regression(p.name, path, tol, updated=True, kept=kept, made_with=made_with(results), results=results)
    entry, differently = select(ref, results)
    against = differently or f"checked against the baseline made the same way ({describe(entry.get('made_with'))})"
    return Regression(p.name, path, tol, check(entry, results, tol), against, made_with=made_with(results),
                      results=results)


__all__ = ["DEFAULT_METHODS", "Regression", "regress"]
