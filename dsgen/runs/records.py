"""The run vocabulary: where a run's files live, what a run needs that is not made yet, and how a run fails.

Every layer that runs plans speaks it: the engine (:mod:`dsgen.runs.pipeline`) raises and records these, the
scheduler (:mod:`dsgen.scheduling`) turns them into tasks and outcomes, the tables and claims print them. It
imports nothing of the engine, so the scheduler and the engine both stand on it.

A run is a (data seed, training seed) pair; its files are named ``data-<d>-seed-<t>`` under
``results/<preset>/<method>/<variant>/`` (:func:`result_path`), a crash's traceback under ``logs/`` with the same
names (:func:`log_path`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result
from dsgen.planning import RunPlan

DEFAULT_THREADS = 2
"""The threads a task computes with when ``--cpus-per-worker`` is not given, whichever scheduler runs it (a Ray task
then also reserves that many CPUs). Training's bits depend on the count (measured: a tiny BERT trained on 1 and on
2 threads ends with other weights, an STS16 average 0.0002 apart; generation's and evaluation's bits do not), so a
run computes on one count everywhere; 2 is what the local scheduler used on the 2-core machines the presets were
timed on, so a local comparison keeps its speed there. Every command that trains uses it (a runner's default), so
``compare``, ``analyze``, ``regress`` and ``export`` find each other's runs."""


def run_text(run: tuple[int | None, int | None]) -> str:
    """A run in words, one wording for every run, its log line, its failure and its table row:
    ``data seed 1, training seed 2`` (``training seed 2`` for a result without a data seed)."""
    data, seed = run
    return f"training seed {seed}" if data is None else f"data seed {data}, training seed {seed}"


def result_path(out: Path, plan: RunPlan) -> Path:
    """Where the result of ``plan`` lives under an output folder (see the module docstring)."""
    data, seed = plan.run
    return Path(out) / "results" / plan.preset.name / plan.method.name / plan.variant / f"data-{data}-seed-{seed}.json"


def run_label(plan: RunPlan) -> str:
    """A run in words, as everywhere: ``data seed 1, training seed 2``."""
    return run_text(plan.run)


def log_path(out: Path, plan: RunPlan) -> Path:
    """Where the traceback of a run that crashed is written: ``logs/`` beside ``results/``, the same names."""
    return Path(out) / "logs" / result_path(out, plan).relative_to(Path(out) / "results").with_suffix(".log")


class RunFailed(DsgenError):
    """A run that stopped on its data (a filter kept nothing, a reweighter could not fit, training trained nothing),
    with what it knew then: a row of the tables marked as failed, never a score."""

    def __init__(self, method: str, seed: int, message: str, extra: dict[str, Any], data_seed: int | None = None) -> None:
        super().__init__(f"{method} ({run_text((data_seed, seed))}): {message}")
        self.method, self.seed, self.reason, self.extra, self.data_seed = method, seed, message, extra, data_seed

    def __reduce__(self) -> tuple[Any, ...]:  # travels from a Ray worker to the driver whole
        return (type(self), (self.method, self.seed, self.reason, self.extra, self.data_seed))

    @property
    def run(self) -> tuple[int | None, int]:
        return (self.data_seed, self.seed)


class RunCrashed(RunFailed):
    """A run stopped by an unexpected exception (not a :class:`~dsgen.errors.DsgenError`): a bug, or a library's
    failure. Its traceback is in ``log``; the command that ran it goes on with the other runs and exits 1."""

    def __init__(self, method: str, seed: int, message: str, extra: dict[str, Any], data_seed: int | None = None,
                 log: Path | None = None) -> None:
        super().__init__(method, seed, message, extra, data_seed)
        self.log = log

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.method, self.seed, self.reason, self.extra, self.data_seed, self.log))


class KeyMismatch(DsgenError):
    """A process (a Ray worker's node) computes another key for an artefact than the driver did: it reads other data
    or models (its ``DSGEN_DATA_DIR``, its model cache), and so would make something else than asked."""


@dataclass
class DatasetNeed:
    """A dataset a plan reads that is not made yet: what a scheduler makes once before the plans that read it go on.

    Args:
        generator / config / inputs: what makes it (:meth:`dsgen.runs.data.DataStages.dataset`).
        key: its key (:func:`dsgen.identity.dataset_key`).
        path: where it lives, relative to the output folder.
    """

    generator: str
    config: Any
    inputs: list[str] | None
    key: str
    path: Path

    kind = "dataset"


@dataclass
class FitNeed:
    """A data-level fit a plan's stage needs that is not made yet (:mod:`dsgen.data.fits`).

    Args:
        plan: a plan whose stage declares it (any plan that reads the same data gives the same fit).
        stage: which stage: ``labeller``, ``reweighter`` or ``trainer``.
        fit_kind / key: the fit's kind and key (:func:`dsgen.identity.data_fit_key`).
        path: its folder, relative to the output folder.
    """

    plan: RunPlan
    stage: str
    fit_kind: str
    key: str
    path: Path

    kind = "fit"


class Missing(Exception):
    """Raised by a runner that does not make an artefact itself (a driver's, see ``Runner.makes``) when a plan reads
    one that is not on disk; ``need`` says what to make."""

    def __init__(self, need: DatasetNeed | FitNeed) -> None:
        super().__init__(f"{need.kind} {need.key} is not made yet")
        self.need = need


@dataclass
class Prepared:
    """What a driver knows of a plan before running it (:meth:`dsgen.runs.pipeline.Runner.prepare`): its run key, its
    cached result if any, and otherwise the artefacts it reads (paths relative to the output folder) and those not
    made yet."""

    plan: RunPlan
    key: str
    result: Result | None = None
    needs: list[DatasetNeed | FitNeed] = field(default_factory=list)
    datasets: dict[str, Path] = field(default_factory=dict)  # key -> path
    fits: dict[str, Path] = field(default_factory=dict)  # key -> folder


__all__ = ["DatasetNeed", "FitNeed", "KeyMismatch", "Missing", "Prepared", "RunCrashed", "RunFailed", "log_path",
           "result_path", "run_label", "run_text"]
