"""The run store: where a comparison's artefacts live under its output folder, which of them this runner may reuse,
and the records of what failed.

Layout under the output folder (default ``runs/``)::

    cache/datasets/<task>-<key>.jsonl                   generated datasets, keyed by
                                                        dsgen.identity.dataset_key; shared by
                                                        every method and seed that needs them
    cache/fits/<kind>-<key>/                            data-level fits (RISE's SDI classifier),
                                                        keyed by dsgen.identity.data_fit_key; one
                                                        per dataset, shared likewise
    results/<preset>/<method>/<variant>/<run>.json      one result per run, with its per-pair
                                                        predictions (.pred.npz), training and
                                                        validation pairs (.train.jsonl,
                                                        .validation.jsonl) and kept model (.model/)
                                                        beside it; a failed run's record
                                                        (.failed.json) instead
    logs/<preset>/<method>/<variant>/<run>.log          the traceback of a run that crashed
    .dsgen.lock                                         who writes here now (dsgen.runs.lock)

A run's files (:data:`RUN_FILES`) are one set: its folder holds its current key's result set or its failure record,
never both and never an older key's files. Writing a result removes the run's previous files first (its result JSON
first of all, so that no half-replaced set looks whole) and writes the result JSON last; a failure removes the stale
result set before its record is written (:meth:`RunStore.write_result`, :meth:`RunStore.fail`,
:meth:`RunStore.write_run_files` for the files a Ray worker returns).

An artefact is reused when its key matches; with ``fresh`` only once this store made it (each is recomputed once,
then reused within the store like any cached one). An artefact whose making failed here is remembered by key, so
every run that needs it fails the same way without making it again.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dsgen.artifacts import ensure_writable_dir, finite_json, read_json, sidecar_path, write_json
from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result
from dsgen.planning import RunPlan
from dsgen.runs.records import RunCrashed, RunFailed, log_path, result_path

RUN_FILES = (".json", ".pred.npz", ".train.jsonl", ".validation.jsonl", ".model", ".failed.json")
"""A run's files beside each other (suffixes of ``<run>``): its result, predictions, training and validation pairs,
kept model folder, or its failure record; written and removed as one set."""


class RunStore:
    """The files of a comparison under ``out`` and this runner's memory of them.

    Args:
        out: the output folder (created).
        fresh: reuse nothing made before this store (see the module docstring).
        save_models: a trained run's result counts as cached only with its kept model folder beside it.
        shown_out: the output folder that paths written into records name (a Ray worker's store works in a folder of
            its own whose files the driver writes under ``shown_out``); default ``out``.
    """

    def __init__(self, out: str | Path, fresh: bool = False, save_models: bool = False,
                 shown_out: str | Path | None = None, lock: bool = True) -> None:
        self.out = ensure_writable_dir(Path(out))
        self._lock: str | None = None
        if lock:  # one command at a time under an output folder (dsgen.runs.lock)
            import weakref

            from dsgen.runs import lock as locks

            self._lock = locks.acquire(self.out)
            self._release = weakref.finalize(self, locks.release, self._lock)
        self.shown_out = Path(shown_out) if shown_out is not None else self.out
        self.fresh = fresh
        self.save_models = save_models
        self._made: set[str] = set()  # keys made here (a fresh store reuses only these)
        self._failed: dict[str, BaseException] = {}  # artefacts whose making failed here

    def close(self) -> None:
        """Let go of the output folder's lock (also when the store is collected, or the process ends)."""
        if self._lock is not None:
            self._release()
            self._lock = None

    # -- where things go ---------------------------------------------------------------------
    def result_path(self, plan: RunPlan) -> Path:
        return result_path(self.out, plan)

    def dataset_path(self, task: str, key: str) -> Path:
        return self.out / "cache" / "datasets" / f"{Path(task).stem}-{key}.jsonl"

    @property
    def fits(self) -> Any:
        """The output folder's data-level fits (:class:`dsgen.data.fits.FitStore`, ``cache/fits/``)."""
        from dsgen.data.fits import FitStore

        return FitStore(self.out / "cache" / "fits")

    # -- what may be reused ------------------------------------------------------------------
    def usable(self, key: str) -> bool:
        """Whether a stored artefact of ``key`` may be reused here (always, but with ``fresh``: once made here)."""
        return not self.fresh or key in self._made

    def made(self, key: str) -> None:
        """Record that the artefact of ``key`` was made for this store (a fresh store then reuses it)."""
        self._made.add(key)

    def dataset_stored(self, path: Path, key: str) -> bool:
        """Whether the dataset of ``key`` is on disk at ``path``, whole (its sidecar, written last, names the key), and
        usable here."""
        meta = sidecar_path(path)
        if not self.usable(key):
            return False
        try:
            return path.exists() and meta.exists() and read_json(meta).get("dataset_key") == key
        except DsgenError:
            return False

    def fit_stored(self, kind: str, key: str) -> bool:
        """Whether the fit of ``key`` is stored whole and usable here."""
        return self.usable(key) and self.fits.complete(kind, key)

    def cached_result(self, plan: RunPlan, key: str) -> Result | None:
        """``plan``'s stored result when its run key is ``key`` and it is usable here (a trained run's only when it
        trained, and with ``save_models`` only beside its kept model); a seed-independent run's result stored under
        another seed of its folder is copied to this run's name."""
        from dsgen.training.model_folder import holds_weights

        path = self.result_path(plan)
        if not self.usable(key):
            return None
        if self.save_models and plan.trainer is not None and not holds_weights(path.with_suffix(".model")):
            return None  # the model was not kept then (or not whole): train again to keep it
        candidates = [path] if plan.uses_seed else [path, *sorted(path.parent.glob("data-*-seed-*.json"))]
        for candidate in candidates:
            if not candidate.exists():
                continue
            try:
                result = Result.load(candidate)
            except DsgenError:
                continue
            if result.extra.get("run_key") == key:
                if result.training_failure() is not None:
                    return None  # never a score: made before the training record, it trained nothing, or diverged
                if candidate == path and path.with_suffix(".failed.json").exists():
                    return None  # the run failed since (a folder from before runs were written as one set)
                result.predictions = Result.load_predictions(candidate)
                if candidate != path:  # a seed-independent method: the same result under this run
                    result.seed, result.data_seed = plan.seed, plan.run[0]
                    self.write_result(plan, result)
                return result
        return None

    # -- a run's files, one set ----------------------------------------------------------------
    def run_files(self, plan: RunPlan) -> dict[str, Path]:
        """Where each of ``plan``'s files lives, by suffix (:data:`RUN_FILES`)."""
        path = self.result_path(plan)
        return {suffix: path.with_suffix(suffix) for suffix in RUN_FILES}

    def clear_run(self, plan: RunPlan) -> None:
        """Remove ``plan``'s files (its result JSON first, so no half-removed set looks whole); a ``.model/`` folder
        only when dsgen kept it there (:func:`dsgen.folders.export_kind`), as ``--save-model`` replaces only those."""
        from dsgen.folders import export_kind

        for suffix, path in self.run_files(plan).items():
            if suffix == ".model":
                if path.is_dir() and export_kind(path) == "model-folder":
                    shutil.rmtree(path)
            elif path.is_file() or path.is_symlink():
                path.unlink()

    def write_result(self, plan: RunPlan, result: Result, train: list[Any] | None = None,
                     validation: list[Any] | None = None, keep_model: Callable[[Path], Any] | None = None) -> Path:
        """Write ``plan``'s result set in place of whatever its folder held (see the module docstring): its training and
        validation pairs (with weights) when there are any, its kept model (``keep_model(folder)``), its predictions
        and its result JSON last. A file the run does not write this time is gone afterwards."""
        from dsgen.data.pairs import write_pairs

        files = self.run_files(plan)
        self.clear_run(plan)
        if train:
            write_pairs(files[".train.jsonl"], train)
        if validation:
            write_pairs(files[".validation.jsonl"], validation)
        if keep_model is not None:
            keep_model(files[".model"])
        return result.save(files[".json"])

    def write_run_files(self, plan: RunPlan, files: dict[str, bytes]) -> None:
        """Write the files a worker made for ``plan``'s run (paths relative to the output folder: its result set or its
        failure record, its log) in place of the run's files here: the run's stale files removed, a kept model folder
        written whole into a folder of its own and renamed into place (never merged into an older model's), the result
        JSON last."""
        from dsgen.artifacts import atomic_open, staging_dir

        def target(relative: str) -> Path:
            if Path(relative).is_absolute() or ".." in Path(relative).parts:
                raise DsgenError(f"a worker returned a file outside the output folder: {relative}")
            return self.out / relative

        mine = self.run_files(plan)
        result, model = mine[".json"], mine[".model"]
        parts = {name: data for name, data in files.items() if target(name) != result
                 and model not in target(name).parents}
        model_files = {target(name).relative_to(model): data for name, data in files.items()
                       if model in target(name).parents}
        self.clear_run(plan)
        for name in sorted(parts):
            with atomic_open(target(name), "wb") as fh:
                fh.write(parts[name])
        if model_files:
            if model.exists():
                raise DsgenError(f"will not replace {model}: it is not a model folder dsgen kept; move it away")
            stage = staging_dir(ensure_writable_dir(model.parent), f".{model.name}.partial-")
            try:
                for relative, data in model_files.items():
                    (stage / relative).parent.mkdir(parents=True, exist_ok=True)
                    with atomic_open(stage / relative, "wb") as fh:
                        fh.write(data)
                stage.rename(model)
            except BaseException:
                shutil.rmtree(stage, ignore_errors=True)
                raise
        for name, data in files.items():
            if target(name) == result:
                with atomic_open(result, "wb") as fh:
                    fh.write(data)

    # -- failures ------------------------------------------------------------------------------
    def failure(self, key: str) -> BaseException | None:
        """Why making the artefact of ``key`` failed here, or None."""
        return self._failed.get(key)

    def record_failure(self, key: str, error: BaseException) -> None:
        """Remember that making the artefact of ``key`` failed (every run that needs it then fails the same way)."""
        self._failed[key] = error

    def fail(self, plan: RunPlan, message: str, extra: dict[str, Any], log: Path | None = None) -> RunFailed:
        """Record a failed run (``.failed.json`` beside where its result would be) and return what says so: a
        :class:`RunCrashed` when a traceback ``log`` was written, else a :class:`RunFailed`."""
        self.clear_run(plan)  # a failed run's folder holds its failure, never an older result beside it
        write_json(self.result_path(plan).with_suffix(".failed.json"),
                   finite_json({"method": plan.method.name, "seed": plan.seed, "data_seed": plan.run[0],
                                "reason": message, "extra": extra}))
        if log is not None:
            return RunCrashed(plan.method.name, plan.seed, message, extra, plan.run[0], log)
        return RunFailed(plan.method.name, plan.seed, message, extra, plan.run[0])

    def crashed(self, plan: RunPlan, exc: BaseException) -> RunFailed:
        """Record a run stopped by an unexpected exception: its traceback under ``logs/`` (:func:`log_path`) and a
        ``.failed.json`` beside where its result would be; returns the :class:`RunCrashed` that says so in one line."""
        import traceback

        from dsgen.artifacts import atomic_open

        with atomic_open(log_path(self.out, plan)) as fh:
            fh.write(f"{plan.method.name} ({plan.preset.name}, variant {plan.variant}), run {list(plan.run)}\n\n")
            # an exception raised on a Ray worker (a dataset that crashed for this run) keeps its traceback as text
            fh.write(getattr(exc, "remote_traceback", None) or "".join(traceback.format_exception(exc)))
        log = log_path(self.shown_out, plan)  # where the driver writes it (a worker's store works in a folder of its own)
        first = (str(exc).strip().splitlines() or [""])[0]
        reason = f"crashed: {type(exc).__name__}" + (f": {first}" if first else "") + f" (traceback in {log})"
        crash = self.fail(plan, reason, {"traceback_log": str(log)}, log)
        crash.__cause__ = exc  # raised as itself where no failure list collects it (run_many without one)
        return crash


__all__ = ["RunStore"]
