"""The run engine: one plan (:mod:`dsgen.planning`) through its stages, generate (cached), postprocess, label,
reweight, train, evaluate, into one result file.

A run is a (data seed, training seed) pair; ``<run>`` is ``data-<d>-seed-<t>`` (a run that generates its own data
with its training seed t is ``data-<t>-seed-<t>``). ``<variant>`` names what the user chose besides the seeds (the
method's recipe, the preset, the command line), so variants of a method never overwrite each other
(:mod:`dsgen.runs.store` has the layout). A result is reused when its run key (the plan, its models' fingerprints,
the evaluation data's fingerprint) matches; ``fresh=True`` recomputes everything, partial generation chunks
included.

Every result records how long each stage took (``timings``): generation (and what making its dataset cost when it
came from the cache), postprocessing, labelling, reweighting, training, evaluation.

A run that trains nothing is a failed run, never a score: its training log must show enough optimizer steps taken
with a non-zero learning rate and a finite weight update and loss (:func:`dsgen.training.fit.training_failure`, the
one rule for fresh and cached results), and its evaluation finite scores
(:func:`dsgen.evaluation.results.score_failure`); otherwise it raises :class:`~dsgen.runs.records.RunFailed` like a
run whose filter kept nothing. No result file holds a non-finite number. An unexpected exception inside a run is
recorded by the scheduler as a :class:`~dsgen.runs.records.RunCrashed` with its traceback (:meth:`Runner.crashed`).

A comparison is a graph of artefacts (datasets, data-level fits, run results), each made once by one task and
executed by a scheduler (:mod:`dsgen.scheduling`). A driver's runner only plans and stores: :meth:`Runner.prepare`
says what a run needs that is not on disk (a :class:`~dsgen.runs.records.Missing` dataset or fit), the scheduler
makes it, and a worker's runner makes each artefact in a folder of its own whose files the driver writes here.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result, nonfinite_failure, score_failure
from dsgen.generation.base import GenerationContext
from dsgen.planning import RunPlan
from dsgen.runs.data import DataInputs, DataStages
from dsgen.runs.records import DEFAULT_THREADS, DatasetNeed, FitNeed, KeyMismatch, Prepared, RunFailed, run_label
from dsgen.runs.store import RunStore
from dsgen.training.fit import training_failure

STAGES = (("labeller", "label_seconds"), ("reweighter", "reweight_seconds"), ("trainer", "train_seconds"))
"""A run's model stages after its data stages, in order, with the timing each records."""


class Runner:
    """Runs plans and caches their datasets and results under ``out``.

    Args:
        out: output folder (``runs/`` by default on the command line).
        data_dir: STS data folder (default ``$DSGEN_DATA_DIR``).
        progress: show progress bars.
        fresh: ignore cached datasets and results (and partial chunks) made before this runner: each
            is recomputed once, then reused within the runner like any cached one.
        backend: generation backend (:mod:`dsgen.generation.backends`); default: local.
        save_models: keep every trained encoder as a sentence-transformers folder with its model card
            beside its result (``<run>.model/``, :mod:`dsgen.training.model_folder`).
        makes: the artefacts it makes itself when a plan reads one that is missing (``dataset``, ``fit``: the
            local way); one it does not make raises :class:`~dsgen.runs.records.Missing` (a driver, which hands it to
            a scheduler, makes none; a Ray worker makes only what its task is for).
        shown_out: the output folder that paths written into records name (a Ray worker's runner works in a
            folder of its own whose files the driver writes under ``shown_out``); default ``out``.
        threads: torch's threads for every task of a comparison (:mod:`dsgen.scheduling`), whichever scheduler
            runs it: training's bits depend on the count (a tiny encoder trained on 1 and on 2 threads ends with
            other weights), generation's and evaluation's do not; default :data:`~dsgen.runs.records.DEFAULT_THREADS`,
            whatever command made the runner. None: torch's own count (this process's).
        evaluators: a cache of evaluators (their task pairs read once) to share with other runners of this process.
        lock: hold the output folder's lock while the runner lives (:mod:`dsgen.runs.lock`: another process's command
            on the same folder fails at once; runners of one process share it); a Ray worker's runner, in a scratch
            folder of its own, holds none.

    A runner is also a context manager that lets go of the lock on exit (:meth:`close`).
    """

    def __init__(self, out: str | Path = "runs", data_dir: str | None = None, progress: bool = True,
                 fresh: bool = False, backend: Any = None, save_models: bool = False,
                 makes: tuple[str, ...] = ("dataset", "fit"), shown_out: str | Path | None = None,
                 threads: int | None = DEFAULT_THREADS, evaluators: dict[tuple[Any, ...], Any] | None = None,
                 lock: bool = True) -> None:
        self.store = RunStore(out, fresh=fresh, save_models=save_models, shown_out=shown_out, lock=lock)
        self.data_dir = data_dir
        self.progress = progress
        self.backend = backend
        self.context = GenerationContext(data_dir=data_dir, backend=backend, progress=progress)
        self.data = DataStages(self.store, self.context, data_dir, progress, makes, threads)
        self._evaluators = evaluators if evaluators is not None else {}  # task pairs read once per runner
        self.judge = None  # dsgen.evaluation.quality.LabelJudge, loaded on first use

    def close(self) -> None:
        """Let go of the output folder's lock (also when the runner is collected, or the process ends)."""
        self.store.close()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- what the scheduler reads and sets -------------------------------------------------------
    @property
    def out(self) -> Path:
        return self.store.out

    @property
    def save_models(self) -> bool:
        return self.store.save_models

    @property
    def threads(self) -> int | None:
        """The thread count every task computes with (None: torch's own); a scheduler may set it before starting."""
        return self.data.threads

    @threads.setter
    def threads(self, value: int | None) -> None:
        self.data.threads = value

    @property
    def makes(self) -> tuple[str, ...]:
        return self.data.makes

    @contextlib.contextmanager
    def making(self, kinds: tuple[str, ...]) -> Iterator[None]:
        """Within the block this runner makes only the artefact kinds ``kinds`` when missing (a driver: none; a
        task: its own), then as before."""
        before, self.data.makes = self.data.makes, tuple(kinds)
        try:
            yield
        finally:
            self.data.makes = before

    def result_path(self, plan: RunPlan) -> Path:
        return self.store.result_path(plan)

    def cached_result(self, plan: RunPlan, key: str) -> Result | None:
        return self.store.cached_result(plan, key)

    def made(self, key: str) -> None:
        """Record that the artefact of ``key`` was made for this runner (a fresh runner then reuses it)."""
        self.store.made(key)

    def failures(self, keys: Any) -> dict[str, BaseException]:
        """Of the artefacts ``keys``, those whose making failed here, with why."""
        return {k: e for k in keys if (e := self.store.failure(k)) is not None}

    def record_failures(self, failed: dict[str, BaseException]) -> None:
        """Remember artefacts whose making failed (elsewhere): every run that needs one fails the same way."""
        for key, error in failed.items():
            self.store.record_failure(key, error)

    def crashed(self, plan: RunPlan, exc: BaseException) -> RunFailed:
        """Record ``plan``'s run as stopped by an unexpected exception (:meth:`RunStore.crashed`)."""
        return self.store.crashed(plan, exc)

    # -- keys ------------------------------------------------------------------------------------
    def evaluator(self, plan: RunPlan) -> Any:
        from dsgen.evaluation.evaluator import StsEvaluator

        ev = plan.evaluation
        key = (tuple(ev["tasks"]), ev["preprocess"], ev["dtype"])
        if key not in self._evaluators:
            self._evaluators[key] = StsEvaluator(list(ev["tasks"]), self.data_dir, preprocess=ev["preprocess"],
                                                 dtype=ev["dtype"])
        return self._evaluators[key]

    def run_key(self, plan: RunPlan, data: DataInputs | None = None) -> str:
        """The key of ``plan``'s result (:func:`dsgen.identity.run_key`), from the keys of what it
        consumes: its datasets' keys (from the inputs' contents), every stage's name, version and
        config, the seeds, the models' fingerprints, the texts a reweighter reads besides its pairs,
        and the evaluation data's key. A stage's ``device = "auto"`` enters as the device it resolves to
        (:meth:`~dsgen.runs.data.DataStages.resolved`)."""
        from dsgen.data.sts import using_data_dir
        from dsgen.identity import run_key, stage_identity, texts_key
        from dsgen.training.fit import selection_data_key, selection_data_of
        from dsgen.models import model_fingerprint

        with using_data_dir(self.data_dir):
            data = data if data is not None else self.data.data_inputs(plan)
            ev = self.evaluator(plan)
            stages: dict[str, Any] = {"postprocess": plan.postprocess.to_dict() if plan.postprocess else None}
            if plan.trainer is not None:  # training's bits depend on the thread count (see ``threads``)
                stages["threads"] = self.data.training_threads()
            for stage, _ in STAGES:  # "auto" as the device it resolves to: a GPU's run is not a CPU's
                component = getattr(plan, stage)
                stages[stage] = self.data.resolved(stage_identity(component)) if component is not None else None
            sources = {}
            if plan.reweighter is not None and plan.reweighter.reads_source():
                sources["reweighter"] = texts_key(self.data.source(plan))
            if plan.trainer is not None and selection_data_of(plan.trainer.config) == "stsb-dev":
                sources["selection"] = selection_data_key(self.data_dir)  # the checkpoint is chosen on these pairs
            models = {m: model_fingerprint(m) for m in plan.models()}
            seeds = {"data": plan.run[0] if plan.generation is not None else None,
                     "train": plan.seed if plan.uses_seed else None}
            evaluation = {**plan.evaluation, "data": ev.fingerprint()}
            return run_key(data.keys, stages, seeds, models, sources, evaluation)

    # -- the graph's artefacts -------------------------------------------------------------------
    def prepare(self, plan: RunPlan) -> Prepared:
        """What a driver knows of ``plan`` before running it (nothing is made here): the evaluation data checked, the
        run key, the cached result if there is one; otherwise the datasets and data-level fits it reads and those not
        made yet, datasets first (a fit is made from them). Raises :class:`~dsgen.runs.records.Missing` when the keys
        themselves wait for a dataset (x1 generated from scratch, a dataset sized by another method's)."""
        from dsgen.data.sts import using_data_dir

        with using_data_dir(self.data_dir):
            self.evaluator(plan).pairs  # fail on missing data before any long work
            with self.data.recording_reads() as reads:
                data = self.data.data_inputs(plan)
            key = self.run_key(plan, data)
            cached = self.cached_result(plan, key)
            if cached is not None:
                return Prepared(plan, key, cached)
            out = Prepared(plan, key, datasets=reads)
            if plan.generation is None:
                return out
            task = getattr(data.config, "task", plan.generator)
            for name, inputs in (("train", data.inputs), ("dev", data.dev_inputs)):
                if name not in data.keys:
                    continue
                dkey = data.keys[name]
                failed = self.store.failure(dkey)
                if failed is not None:
                    raise failed
                path = self.store.dataset_path(task, dkey)
                out.datasets[dkey] = path.relative_to(self.out)
                if not self.store.dataset_stored(path, dkey):
                    out.needs.append(DatasetNeed(plan.generator, data.config, inputs, dkey, path.relative_to(self.out)))
            for attr, _ in STAGES:
                stage = getattr(plan, attr)
                fit = stage.data_fit() if hasattr(stage, "data_fit") else None
                if fit is None:
                    continue
                fkey, _ = self.data.fit_identity(fit, plan, data)
                folder = self.store.fits.folder(fit.kind, fkey).relative_to(self.out)
                out.fits[fkey] = folder
                if self.store.failure(fkey) is None and not self.store.fit_stored(fit.kind, fkey) and not out.needs:
                    out.needs.append(FitNeed(plan, attr, fit.kind, fkey, folder))
            return out

    def make_dataset(self, need: DatasetNeed) -> None:
        """Make the dataset ``need`` names (a dataset task of the graph), checking its key is the driver's."""
        from dsgen.data.sts import using_data_dir

        with using_data_dir(self.data_dir):
            self.data.dataset(need.generator, need.config, need.inputs, expected=need.key)

    def make_fit(self, need: FitNeed) -> None:
        """Make the data-level fit ``need`` names (a fit task of the graph), checking its key is the driver's."""
        from dsgen.data.sts import using_data_dir

        with using_data_dir(self.data_dir):
            self.data.data_fit(getattr(need.plan, need.stage), need.plan, self.data.data_inputs(need.plan),
                               expected=need.key)

    # -- one run -------------------------------------------------------------------------------
    def run(self, plan: RunPlan, expected: str | None = None) -> Result:
        """Run one plan (or return its cached result) and write the result file; ``expected``: the run key the driver
        computed (a worker computing another reads other data or models: :class:`~dsgen.runs.records.KeyMismatch`)."""
        from dsgen.data.sts import using_data_dir

        with using_data_dir(self.data_dir):
            return self._run(plan, expected)

    def _run(self, plan: RunPlan, expected: str | None = None) -> Result:
        evaluator = self.evaluator(plan)
        evaluator.pairs  # fail on missing data before any long work
        inputs = self.data.data_inputs(plan)
        key = self.run_key(plan, inputs)
        if expected is not None and key != expected:
            raise KeyMismatch(f"{plan.method.name} ({run_label(plan)}): this node computes run key {key}, the driver "
                              f"{expected}: its evaluation data (fingerprint {evaluator.fingerprint()}, "
                              f"{evaluator.root}) or models differ from the driver's")
        cached = self.cached_result(plan, key)
        if cached is not None:
            return cached
        import torch

        extra: dict[str, Any] = {"run_key": key, "variant": plan.variant, "plan": plan.to_dict(), "origins": plan.origins,
                                 "threads": torch.get_num_threads(),  # training's bits depend on it
                                 "evaluation_data": {"fingerprint": evaluator.fingerprint(), "root": str(evaluator.root),
                                                     "preprocess": evaluator.preprocess, "dtype": evaluator.dtype}}
        data = self.data.training_data(plan, inputs)
        extra.update(data.extra)
        timings = dict(data.timings)
        apply = self._stage_bodies(plan, data, extra)
        model = template = None
        for stage, timing in STAGES:
            if stage == "trainer" and data.train:  # the labels a trainer gets, against an independent judge
                t2 = time.perf_counter()
                extra["data_quality"] = self.label_agreement(data.train, data.train + data.validation)
                timings["data_quality_seconds"] = round(time.perf_counter() - t2, 2)
            component = getattr(plan, stage)
            if component is None:
                continue
            started = time.perf_counter()
            try:
                self.data.attach_fit(component, plan, inputs, extra, timings)
                outcome = apply[stage](component)
            except DsgenError as exc:
                raise self.store.fail(plan, str(exc), extra) from None
            if stage == "trainer":
                model, extra["training"] = outcome.model, outcome.log
                template = outcome.log.get("text_template")
            timings[timing] = round(time.perf_counter() - started, 2)
            if stage == "trainer":
                failure = training_failure(outcome.log)
                if failure is not None:
                    raise self.store.fail(plan, failure, extra)
        if plan.trainer is None:
            from dsgen.encoders import load_encoder

            model = load_encoder(plan.encoder, plan.overrides.device or "auto")
        t4 = time.perf_counter()
        result = evaluator.evaluate(model, name=plan.encoder, keep_predictions=True, template=template)
        timings["evaluate_seconds"] = round(time.perf_counter() - t4, 2)
        result.method, result.preset, result.seed, result.data_seed = plan.method.name, plan.preset.name, plan.seed, plan.run[0]
        result.timings = {**timings, **result.timings}
        result.extra = extra
        failure = score_failure(result.tasks) or nonfinite_failure(result)
        if failure is not None:  # never a score, never a bare NaN in a result file
            raise self.store.fail(plan, failure, extra)
        self._write(plan, result, model, data.train, data.validation)
        self.store.made(key)  # a fresh runner recomputes a run once, then reuses it like any other
        return result

    def _stage_bodies(self, plan: RunPlan, data: Any, extra: dict[str, Any]) -> dict[str, Callable[[Any], Any]]:
        """What each model stage does to ``data`` (its training pairs replaced as they go), given its component."""
        gen = plan.generation
        local = gen is not None and hasattr(gen, "generator") and hasattr(gen, "dtype")  # a local LM (not an API)
        load_generator = (lambda: self.context.lm(gen.generator, gen.device, gen.dtype)) if local else None
        device = plan.overrides.device or "auto"

        def label(labeller: Any) -> None:  # a judge's labels for the training and the validation pairs alike
            from dsgen.labelling import LabelContext

            ctx = LabelContext(load_generator=load_generator, load_lm=self.context.lm, seed=plan.seed, device=device,
                               progress=self.progress, cache=self.out / "cache" / "labels")
            data.train, extra["labelling"] = labeller.apply(data.train, ctx)
            data.validation, _ = labeller.apply(data.validation, ctx)

        def reweight(reweighter: Any) -> None:
            from dsgen.reweighting.base import ReweightContext

            ctx = ReweightContext(human_texts=data.human, seed=plan.seed, device=device, progress=self.progress,
                                  source=plan.preset.inputs, data_dir=self.data_dir, load_generator=load_generator)
            data.train, extra["reweighting"] = reweighter.apply(data.train, ctx)

        def train(trainer: Any) -> Any:
            return trainer.train(data.train, data.validation, seed=plan.seed, progress=self.progress)

        return {"labeller": label, "reweighter": reweight, "trainer": train}

    def _write(self, plan: RunPlan, result: Result, model: Any, train: list[Pair], validation: list[Pair]) -> None:
        """Write a run's files as one set (:meth:`RunStore.write_result`): its training and validation pairs (with
        weights, for analysis and exports), its kept model, its result last; what it does not write is removed."""
        keep = None
        if self.save_models and plan.trainer is not None:
            from dsgen.training.model_folder import save_model_folder

            def keep(folder: Path) -> None:
                save_model_folder(model, folder, result, plan.encoder,
                                  f"dsgen {plan.method.name} dataset {result.extra.get('dataset_key', '')}".strip())
        self.store.write_result(plan, result, train, validation, keep)

    def label_agreement(self, pairs: list[Pair], among: list[Pair]) -> dict[str, Any]:
        """How well the training labels agree with an independent judge (:mod:`dsgen.evaluation.quality`), their
        sentences encoded with those of ``among`` (the run's whole dataset: its training seeds share it)."""
        from dsgen.evaluation.quality import LabelJudge

        if self.judge is None:
            self.judge = LabelJudge()
        return self.judge.agreement(pairs, among)


__all__ = ["STAGES", "Runner"]
