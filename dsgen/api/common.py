"""What the functions of :mod:`dsgen.api` share: the settings of every function that runs methods, the report they
hand back, the text the tables record as their command, and publishing tables."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result
from dsgen.orchestration import Planned, Seeds, check_overrides, prepare, run_groups
from dsgen.planning import Overrides
from dsgen.presets import Preset
from dsgen.runs.records import RunCrashed, RunFailed
from dsgen.scheduling.placement import Placement

OnResult = Callable[[str, Any, Result], None]
"""Called with ``(method, plan, result)`` for each run with a result, as it arrives (the command line prints a line)."""


@dataclass(frozen=True)
class RunSettings:
    """The settings of every function that runs methods (:func:`~dsgen.api.run`, :func:`~dsgen.api.compare`,
    :func:`~dsgen.api.curve`, :func:`~dsgen.api.claims`), named as the command line's options (``seeds`` for
    ``--seeds``; ``progress`` is ``not --quiet``).

    Args:
        preset: ``smoke``, ``quick``, ``cpu``, ``paper`` or a ``.toml`` file.
        seeds / data_seeds: training / data (generation) seeds, a list or ``"1,2,3"``; each data seed runs with every
            training seed (default: the preset's).
        generator / base_url / encoder / device / preprocess: what replaces the preset's (``openai:<model>`` for an
            OpenAI-compatible endpoint at ``base_url``).
        save_model: keep each trained encoder under ``out`` as a sentence-transformers folder.
        backend / address / workers / cpus_per_worker: where the runs compute
            (:class:`~dsgen.scheduling.placement.Placement`).
        out: the runs folder (cached datasets, result files, logs, tables).
        publish: also copy the tables under ``publish/<preset>/``.
        data_dir: the STS data folder (default ``$DSGEN_DATA_DIR``).
        progress: progress bars.
    """

    preset: str = "quick"
    seeds: Seeds = None
    data_seeds: Seeds = None
    generator: str | None = None
    base_url: str | None = None
    encoder: str | None = None
    device: str | None = None
    preprocess: str | None = None
    save_model: bool = False
    backend: str = "local"
    address: str | None = None
    workers: int | None = None
    cpus_per_worker: int | None = None
    out: str | Path = "runs"
    publish: str | Path | None = None
    data_dir: str | None = None
    progress: bool = True

    @property
    def placement(self) -> Placement:
        return Placement(self.backend, self.address, self.workers, self.cpus_per_worker)

    def overrides(self) -> Overrides:
        return check_overrides(self.generator, self.encoder, self.device, self.preprocess, self.base_url)

    def prepare(self, methods: list[str], overrides: Overrides) -> Planned:
        """:func:`dsgen.orchestration.prepare` with these settings, where the runs compute checked first."""
        placement = self.placement.check()
        return prepare(methods, self.preset, self.seeds, self.out, self.data_dir, self.progress, overrides,
                       data_seeds=self.data_seeds, save_models=self.save_model, threads=placement.threads)

    def run_methods(self, names: list[str], on_result: OnResult | None = None,
                    console: Any = None) -> tuple[Planned, dict[str, list[Result]], list[RunFailed]]:
        """Every run of ``names`` under these settings as one graph: the prepared runs, the results by method, and
        the runs that failed (each a row marked failed, not an exception)."""
        overrides = self.overrides()
        planned = self.prepare(names, overrides)
        failures: list[RunFailed] = []
        results = self.execute([(names, planned.preset)], planned, overrides, on_result, console, [failures])[0]
        return planned, results, failures

    def execute(self, groups: list[tuple[list[str], Preset]], planned: Planned, overrides: Overrides,
                on_result: OnResult | None = None, console: Any = None,
                failures: list[list[RunFailed]] | None = None) -> list[dict[str, list[Result]]]:
        """Every (methods, preset) group's runs as one graph (:func:`dsgen.orchestration.run_groups`) where
        ``backend`` says; on Ray with ``progress``, one bar over the runs on ``console`` (the one the caller prints
        its per-run lines on; default: a new one on stdout)."""
        from dsgen.scheduling.view import RunsView

        scheduler = self.placement.scheduler(self.device)
        shown = scheduler is not None and self.progress
        if shown and console is None:
            from dsgen.console import console as make_console

            console = make_console()
        total = sum(len(methods) for methods, _ in groups) * len(planned.runs)
        with RunsView(console, total, enabled=shown) as view:
            return run_groups(groups, planned.runs, planned.runner, overrides, on_result=on_result,
                              failures=failures, scheduler=scheduler, view=view)


@dataclass
class Report:
    """What a function that runs methods hands back: its runs' results and failures, and the files it wrote.

    Attributes:
        preset: the preset the runs used.
        runs: the (data seed, training seed) runs.
        results: per method, one result per run that produced a model.
        failures: the runs that produced no model (:class:`~dsgen.runs.records.RunFailed`; a
            :class:`~dsgen.runs.records.RunCrashed` for an unexpected exception, its traceback under ``out/logs/``).
        paths: the tables written, by kind (``markdown``, ``csv``, ``png``...).
        published: their copies under ``publish``.
    """

    preset: Preset = field(repr=False)
    runs: list[tuple[int, int]]
    results: dict[str, list[Result]] = field(repr=False)
    failures: list[RunFailed] = field(default_factory=list)
    paths: dict[str, Path] = field(default_factory=dict)
    published: list[Path] = field(default_factory=list)

    @property
    def written(self) -> list[Path]:
        """Every table written, its published copies after."""
        return [*self.paths.values(), *self.published]

    @property
    def crashed(self) -> list[RunCrashed]:
        """The runs stopped by an unexpected exception (the command line exits 1 naming them)."""
        return [f for f in self.failures if isinstance(f, RunCrashed)]


class NoResult(DsgenError):
    """Nothing to build a table from (the reference method of a comparison produced no result); ``failures`` holds
    why its runs failed."""

    def __init__(self, message: str, failures: list[RunFailed]) -> None:
        super().__init__(message)
        self.failures = failures


def run_commits(results: dict[str, list[Result]]) -> list[dict[str, Any]]:
    """Each run's provenance, in (method, data seed, training seed) order: the commit it was made at and whether the
    tree was dirty (None for both outside a git checkout)."""
    rows = [{"method": m, "data_seed": r.run[0], "seed": r.run[1], "commit": r.versions.get("dsgen_git_commit"),
             "dirty": r.versions.get("dsgen_git_dirty")} for m, rs in results.items() for r in rs]
    return sorted(rows, key=lambda x: (x["method"], x["data_seed"] or 0, x["seed"] or 0))


def commits_text(rows: list[dict[str, Any]]) -> str:
    """``12 method runs at 5d8eb1b (clean), 3 method runs at 04129ae (dirty tree)``: the runs counted by commit."""
    counts: dict[tuple[Any, Any], int] = {}
    for x in rows:
        counts[(x["commit"], x["dirty"])] = counts.get((x["commit"], x["dirty"]), 0) + 1
    parts = [f"{n} method run{'s' if n != 1 else ''} at " + (f"{c[:7]} ({'dirty tree' if d else 'clean'})" if c else
                                                     "an unknown commit (not a git checkout)")
             for (c, d), n in sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))]
    return ", ".join(parts)


def check_clean(allow_mixed: bool) -> None:
    """Before any run of a command that publishes: a one-line error unless dsgen runs from a clean checkout (or
    ``allow_mixed``)."""
    from dsgen.artifacts import git_state

    state = git_state()
    if allow_mixed or (state["commit"] and state["dirty"] is False):
        return
    where = ("dsgen does not run from a git checkout, so its runs' commit is unknown" if not state["commit"] else
             f"the checkout at {state['commit'][:7]} has uncommitted changes" if state["dirty"] else
             "git could not say whether the checkout has uncommitted changes")
    raise DsgenError(f"--publish writes one report per clean commit, and {where}: commit them (or publish from a "
                     "clean checkout), or pass --allow-mixed to publish with each run's commit listed")


def published_provenance(results: dict[str, list[Result]], allow_mixed: bool) -> dict[str, Any]:
    """What a published report says about the commits its runs were made at; a one-line error when they are not
    all this checkout's clean commit, unless ``allow_mixed`` (then the report flags them)."""
    from dsgen.artifacts import git_state

    rows, head = run_commits(results), git_state()["commit"]
    clean = bool(rows) and all(x["commit"] == head and x["dirty"] is False for x in rows) and head is not None
    if not clean and not allow_mixed:
        raise DsgenError(f"--publish needs every run made at this clean commit ({(head or 'unknown')[:7]}), but: "
                         f"{commits_text(rows)}; rerun them here into a new --out, or pass --allow-mixed to publish "
                         "with each run's commit listed")
    return {"commit": head, "clean": clean, "summary": commits_text(rows), "runs": rows}


def publish(paths: dict[str, Path], folder: str | Path | None, preset: str) -> list[Path]:
    """Copy written tables into ``folder/<preset>/`` (an explicit choice, e.g. the committed ``results/``)."""
    if folder is None:
        return []
    from dsgen.artifacts import atomic_open, ensure_writable_dir

    target_folder = ensure_writable_dir(Path(folder) / preset)
    copied = []
    for path in paths.values():
        target = target_folder / path.name
        with atomic_open(target, "wb") as fh:
            fh.write(path.read_bytes())
        copied.append(target)
    return copied


def name_list(value: Sequence[str] | str | None) -> list[str]:
    """Names as a list: a list as given, or the command line's comma-separated form (``"a, b"``); None: none."""
    if isinstance(value, str):
        return [x.strip() for x in value.split(",") if x.strip()]
    return list(value or [])


def method_list(methods: Sequence[str] | str | None) -> list[str]:
    """Methods as a list (one name alone is a list of one, not its letters)."""
    if methods is None:
        return []
    return [methods] if isinstance(methods, str) else list(methods)


UNRECORDED = ("command", "on_result", "console", "progress")


def _shown(value: Any) -> str:
    if isinstance(value, Path):
        return repr(str(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return repr(value)


def call_text(name: str, arguments: dict[str, Any], positional: tuple[str, ...] = ()) -> str:
    """``dsgen.compare(['dino'], preset='smoke')``: a call with the arguments its caller gave (in the function's
    order; those in ``positional`` without their name), for a table's *Command* line."""
    shown = [_shown(v) if k in positional else f"{k}={_shown(v)}" for k, v in arguments.items() if k not in UNRECORDED]
    return f"dsgen.{name}({', '.join(shown)})"


def records_call(func: Callable[..., Any]) -> Callable[..., Any]:
    """Give ``func`` (a function of :mod:`dsgen.api` with a ``command`` argument, the text its tables record as the
    command that made them) the Python call as written when its caller gives no ``command`` (the command line gives
    its own)."""
    signature = inspect.signature(func)
    positional = tuple(n for n, p in signature.parameters.items() if p.kind is p.POSITIONAL_OR_KEYWORD)

    @functools.wraps(func)
    def with_command(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("command") is None:
            kwargs["command"] = call_text(func.__name__, signature.bind(*args, **kwargs).arguments, positional)
        return func(*args, **kwargs)
    return with_command


__all__ = ["NoResult", "OnResult", "Report", "RunSettings", "call_text", "check_clean", "commits_text", "method_list", "name_list",
           "publish", "published_provenance", "records_call", "run_commits"]
