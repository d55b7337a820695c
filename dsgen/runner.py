"""Runs a plan (:mod:`dsgen.planning`): generate (cached), postprocess, reweight, train, evaluate,
and write one result file.

Layout under the output folder (default ``runs/``)::

    cache/datasets/<task>-<key>.jsonl                   generated datasets, keyed by
                                                        dsgen.identity.dataset_key; shared by
                                                        every method and seed that needs them
    cache/fits/<kind>-<key>/                            data-level fits (RISE's SDI classifier),
                                                        keyed by dsgen.identity.data_fit_key; one
                                                        per dataset, shared likewise
    results/<preset>/<method>/<variant>/<run>.json      one result per run, with its per-pair
                                                        predictions (.pred.npz) and training pairs
                                                        (.train.jsonl) beside it

A run is a (data seed, training seed) pair; ``<run>`` is ``data-<d>-seed-<t>`` (a run that generates
its own data with its training seed t is ``data-<t>-seed-<t>``). ``<variant>`` names what the user chose
besides the seeds (the method's recipe, the preset, the command line), so variants of a method
never overwrite each other. A result is reused when
its run key (the plan, its models' fingerprints, the evaluation data's fingerprint) matches;
``fresh=True`` recomputes everything, partial generation chunks included.

Every result records how long each stage took (``timings``): generation (and what making its
dataset cost when it came from the cache), postprocessing, reweighting, training, evaluation.

A run that trains nothing is a failed run, never a score: its training log must show enough optimizer steps
taken with a non-zero learning rate and a weight update (:func:`dsgen.training.fit.training_failure`, the one
rule for fresh and cached results); otherwise it raises :class:`RunFailed` like a run whose filter kept nothing.
An unexpected exception inside a run (:class:`RunCrashed`) is recorded with its traceback under
``logs/<preset>/<method>/<variant>/<run>.log`` while :func:`run_many` goes on with the other runs.

A comparison is a graph of these artefacts (datasets, data-level fits, run results), each made once by one
task, executed by a scheduler (:mod:`dsgen.scheduling`: ``local``, in order in this process, or ``ray``). A
driver's runner (``makes=()``) only plans and stores: :meth:`Runner.prepare` says what a run needs that is
not on disk (a :class:`Missing` dataset or fit), the scheduler makes it, and a worker's runner makes each
artefact in a folder of its own whose files the driver writes here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.artifacts import ensure_writable_dir, read_json, sidecar_path, write_json
from dsgen.data.pairs import Pair, read_pairs, write_pairs
from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result
from dsgen.generation.base import GenerationContext
from dsgen.method import get_method
from dsgen.planning import Overrides, RunPlan, plan_run
from dsgen.presets import Preset
from dsgen.training.fit import training_failure


def result_path(out: Path, plan: RunPlan) -> Path:
    """Where the result of ``plan`` lives under an output folder (see the module docstring)."""
    data, seed = plan.run
    return Path(out) / "results" / plan.preset.name / plan.method.name / plan.variant / f"data-{data}-seed-{seed}.json"


def run_label(plan: RunPlan) -> str:
    """A run in words, as everywhere: ``data seed 1, training seed 2``."""
    from dsgen.evaluation.tables import run_text

    return run_text(plan.run)


def log_path(out: Path, plan: RunPlan) -> Path:
    """Where the traceback of a run that crashed is written: ``logs/`` beside ``results/``, the same names."""
    return Path(out) / "logs" / result_path(out, plan).relative_to(Path(out) / "results").with_suffix(".log")


class RunFailed(DsgenError):
    """A run that stopped on its data (a filter kept nothing, a reweighter could not fit, training trained nothing),
    with what it knew then: a row of the tables marked as failed, never a score."""

    def __init__(self, method: str, seed: int, message: str, extra: dict[str, Any], data_seed: int | None = None) -> None:
        from dsgen.evaluation.tables import run_text

        super().__init__(f"{method} ({run_text((data_seed, seed))}): {message}")
        self.method, self.seed, self.reason, self.extra, self.data_seed = method, seed, message, extra, data_seed

    def __reduce__(self) -> tuple[Any, ...]:  # travels from a Ray worker to the driver whole
        return (type(self), (self.method, self.seed, self.reason, self.extra, self.data_seed))

    @property
    def run(self) -> tuple[int | None, int]:
        return (self.data_seed, self.seed)


class KeyMismatch(DsgenError):
    """A process (a Ray worker's node) computes another key for an artefact than the driver did: it reads other data
    or models (its ``DSGEN_DATA_DIR``, its model cache), and so would make something else than asked."""


@dataclass
class DatasetNeed:
    """A dataset a plan reads that is not made yet: what a scheduler makes once before the plans that read it go on.

    Args:
        generator / config / inputs: what makes it (:meth:`Runner.dataset`).
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
    """What a driver knows of a plan before running it (:meth:`Runner.prepare`): its run key, its cached result if
    any, and otherwise the artefacts it reads (paths relative to the output folder) and those not made yet."""

    plan: RunPlan
    key: str
    result: Result | None = None
    needs: list[DatasetNeed | FitNeed] = field(default_factory=list)
    datasets: dict[str, Path] = field(default_factory=dict)  # key -> path
    fits: dict[str, Path] = field(default_factory=dict)  # key -> folder


class RunCrashed(RunFailed):
    """A run stopped by an unexpected exception (not a :class:`~dsgen.errors.DsgenError`): a bug, or a library's
    failure. Its traceback is in ``log``; the command that ran it goes on with the other runs and exits 1."""

    def __init__(self, method: str, seed: int, message: str, extra: dict[str, Any], data_seed: int | None = None,
                 log: Path | None = None) -> None:
        super().__init__(method, seed, message, extra, data_seed)
        self.log = log

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.method, self.seed, self.reason, self.extra, self.data_seed, self.log))


@dataclass
class DataInputs:
    """What a plan's generation stages will read, and the keys of the datasets they make: computed
    from contents before the result cache is consulted (cheap: the inputs are read and hashed; only
    an upstream dataset, x1 generated from scratch or the dataset another method sizes this one by,
    is made or read from its cache)."""

    config: Any = None                   # the generation config, with n_pairs set by size_of
    inputs: list[str] | None = None      # the x1 texts
    dev_inputs: list[str] | None = None  # RISE's separately generated validation set's inputs
    human: list[str] | None = None       # the human-written inputs x1, when x1 came from a source
    keys: dict[str, str | None] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    made_seconds: float = 0.0            # what making the upstream datasets cost


@dataclass
class TrainingData:
    """What the data stages of a plan produced."""

    train: list[Pair] = field(default_factory=list)
    validation: list[Pair] = field(default_factory=list)
    human: list[str] | None = None       # the human-written inputs x1, when x1 came from a source
    extra: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)


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
            beside its result (``<run>.model/``, :mod:`dsgen.export.model_folder`).
        makes: the artefacts it makes itself when a plan reads one that is missing (``dataset``, ``fit``: the
            local way); one it does not make raises :class:`Missing` (a driver, which hands it to a scheduler, makes
            none; a Ray worker makes only what its task is for).
        shown_out: the output folder that paths written into records name (a Ray worker's runner works in a
            folder of its own whose files the driver writes under ``shown_out``); default ``out``.
        threads: torch's threads for every task of a comparison (:mod:`dsgen.scheduling`), whichever scheduler
            runs it: training's bits depend on the count (a tiny encoder trained on 1 and on 2 threads ends with
            other weights), generation's and evaluation's do not. None: torch's own count (this process's).
    """

    def __init__(self, out: str | Path = "runs", data_dir: str | None = None, progress: bool = True,
                 fresh: bool = False, backend: Any = None, save_models: bool = False,
                 makes: tuple[str, ...] = ("dataset", "fit"), shown_out: str | Path | None = None,
                 threads: int | None = None) -> None:
        self.out = ensure_writable_dir(Path(out))
        self.threads = threads
        self.shown_out = Path(shown_out) if shown_out is not None else self.out
        self.makes = tuple(makes)
        self.save_models = save_models
        self.data_dir = data_dir
        self.progress = progress
        self.fresh = fresh
        self.backend = backend
        self._fresh_done: set[str] = set()
        self._failed: dict[str, BaseException] = {}  # artefacts whose making failed here: every run that needs one fails so
        self._sources: dict[str, list[str]] = {}  # a reweighter's or fit's human source, read once per runner
        self._evaluators: dict[tuple[Any, ...], Any] = {}  # task pairs read once per runner
        self._reads: dict[str, Path] | None = None  # while preparing: the datasets a plan reads (key -> path under out)
        self.judge = None  # dsgen.evaluation.quality.LabelJudge, loaded on first use
        self.context = GenerationContext(data_dir=data_dir, backend=backend, progress=progress)

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

    def source(self, plan: RunPlan) -> list[str]:
        """Every distinct sentence of the source ``plan``'s inputs come from (RISE's human class); a named source is
        read once per runner, a file every time (it may be edited in place)."""
        from dsgen.data.inputs import NAMED_INPUTS
        from dsgen.reweighting.base import source_texts

        name = plan.preset.inputs
        if name not in NAMED_INPUTS:
            return source_texts(name, self.data_dir)
        if name not in self._sources:
            self._sources[name] = source_texts(name, self.data_dir)
        return self._sources[name]

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
        and the evaluation data's key."""
        from dsgen.data.sts import using_data_dir
        from dsgen.identity import run_key, stage_identity, texts_key
        from dsgen.training.fit import selection_data_key, selection_data_of
        from dsgen.models import model_fingerprint

        with using_data_dir(self.data_dir):
            data = data if data is not None else self.data_inputs(plan)
            ev = self.evaluator(plan)
            stages: dict[str, Any] = {"postprocess": plan.postprocess.to_dict() if plan.postprocess else None}
            if plan.trainer is not None:  # training's bits depend on the thread count (see ``threads``)
                stages["threads"] = self.training_threads()
            for stage in ("labeller", "reweighter", "trainer"):
                component = getattr(plan, stage)
                stages[stage] = stage_identity(component) if component is not None else None
            sources = {}
            if plan.reweighter is not None and plan.reweighter.reads_source():
                sources["reweighter"] = texts_key(self.source(plan))
            if plan.trainer is not None and selection_data_of(plan.trainer.config) == "stsb-dev":
                sources["selection"] = selection_data_key(self.data_dir)  # the checkpoint is chosen on these pairs
            models = {m: model_fingerprint(m) for m in plan.models()}
            seeds = {"data": plan.run[0] if plan.generation is not None else None,
                     "train": plan.seed if plan.uses_seed else None}
            evaluation = {**plan.evaluation, "data": ev.fingerprint()}
            return run_key(data.keys, stages, seeds, models, sources, evaluation)

    def cached_result(self, plan: RunPlan, key: str) -> Result | None:
        path = self.result_path(plan)
        if self.fresh and key not in self._fresh_done:
            return None
        if self.save_models and plan.trainer is not None and not path.with_suffix(".model").is_dir():
            return None  # the model was not kept then: train again to keep it
        candidates = [path] if plan.uses_seed else [path, *sorted(path.parent.glob("data-*-seed-*.json"))]
        for candidate in candidates:
            if not candidate.exists():
                continue
            try:
                result = Result.load(candidate)
            except DsgenError:
                continue
            if result.extra.get("run_key") == key:
                if plan.trainer is not None and training_failure(result.extra.get("training")) is not None:
                    return None  # never a score: made before the training record, or it trained nothing
                result.predictions = Result.load_predictions(candidate)
                if candidate != path:  # a seed-independent method: the same result under this run
                    result.seed, result.data_seed = plan.seed, plan.run[0]
                    result.save(path)
                return result
        return None

    # -- data stages ---------------------------------------------------------------------------
    def generator(self, name: str, cfg: Any) -> Any:
        from dsgen.generation import GENERATORS

        return GENERATORS.get(name).build(cfg, self.context)

    def dataset_stored(self, path: Path, key: str) -> bool:
        """Whether the dataset of ``key`` is on disk at ``path``, whole (its sidecar, written last, names the key), and
        usable by this runner (with ``fresh``: made by it)."""
        meta = sidecar_path(path)
        if self.fresh and key not in self._fresh_done:
            return False
        try:
            return path.exists() and meta.exists() and read_json(meta).get("dataset_key") == key
        except DsgenError:
            return False

    def dataset(self, generator: str, cfg: Any, inputs: list[str] | None,
                expected: str | None = None) -> tuple[list[Pair], str, dict[str, Any]]:
        """Generate or reuse a dataset; returns (pairs, dataset key, its sidecar). A runner that does not make datasets
        (a driver) raises :class:`Missing` for one not on disk; ``expected``: the key the driver computed (else
        :class:`KeyMismatch`)."""
        gen = self.generator(generator, cfg)
        key = gen.dataset_key(inputs)
        if expected is not None and key != expected:
            raise KeyMismatch(f"dataset {getattr(cfg, 'task', generator)}: this node computes key {key}, the driver "
                              f"{expected}: its inputs, task spec or generator model differ from the driver's")
        if key in self._failed:
            raise self._failed[key]
        path = self.dataset_path(getattr(cfg, "task", generator), key)
        if self._reads is not None:
            self._reads[key] = path.relative_to(self.out)
        if self.dataset_stored(path, key):
            meta = sidecar_path(path)
            return read_pairs(path), key, read_json(meta)
        if "dataset" not in self.makes:
            raise Missing(DatasetNeed(generator, cfg, inputs, key, path.relative_to(self.out)))
        pairs = gen.generate(inputs, path, progress=self.progress, resume=not (self.fresh and key not in self._fresh_done))
        self._fresh_done.add(key)
        return pairs, key, read_json(sidecar_path(path))

    def training_threads(self) -> int:
        """The threads this runner's training computes with (``threads``, else torch's count in this process), part
        of every key of a trained artefact: a result made on another count is another result."""
        import torch

        return self.threads if self.threads is not None else torch.get_num_threads()

    def made(self, key: str) -> None:
        """Record that the artefact of ``key`` was made for this runner (a fresh runner then reuses it)."""
        self._fresh_done.add(key)

    def data_inputs(self, plan: RunPlan) -> DataInputs:
        """The inputs of ``plan``'s generation stages and the keys of the datasets they make (see
        :class:`DataInputs`); nothing is generated but what they consume."""
        from dsgen.data.inputs import load_inputs

        data = DataInputs()
        if plan.generation is None:
            return data
        method, preset = plan.method, plan.preset
        if plan.x1_generation is not None:
            x1_pairs, data.keys["x1"], meta = self.dataset(plan.generator, plan.x1_generation, None)
            data.made_seconds += meta.get("timings", {}).get("generate_seconds", 0.0)
            data.inputs = list(dict.fromkeys(p.text_a for p in x1_pairs))
            data.extra["x1_generated"] = len(data.inputs)
        elif self.generator(plan.generator, plan.generation).needs_inputs():
            data.inputs = data.human = load_inputs(preset.inputs, preset.max_inputs, self.data_dir,
                                                   sample=method.input_sample, seed=plan.run[0])
        data.config = plan.generation
        if plan.size_of is not None:
            ref = self.training_data(plan.size_of)
            data.config = data.config.replace(n_pairs=len(ref.train) + len(ref.validation))
            data.extra["size_of"] = {"method": plan.size_of.method.name, "pairs": data.config.n_pairs}
            data.keys["size_of"] = ref.extra.get("dataset_key")
        data.keys["train"] = self.generator(plan.generator, data.config).dataset_key(data.inputs)
        if method.dev_inputs:  # RISE: a validation set generated apart, from other inputs (a second cached dataset)
            data.dev_inputs = load_inputs(method.dev_inputs, preset.dev_max_inputs, self.data_dir,
                                          sample=method.input_sample, seed=plan.run[0])
            data.keys["dev"] = self.generator(plan.generator, data.config).dataset_key(data.dev_inputs)
        return data

    def training_data(self, plan: RunPlan, data: DataInputs | None = None) -> TrainingData:
        """Generation (cached), then postprocessing: the pairs a plan trains and validates on."""
        from dsgen.data.postprocess import postprocess

        out = TrainingData()
        if plan.generation is None:
            return out
        t0 = time.perf_counter()
        data = data if data is not None else self.data_inputs(plan)
        out.human, made = data.human, data.made_seconds
        out.extra.update(data.extra)
        pairs, key, meta = self.dataset(plan.generator, data.config, data.inputs)
        made += meta.get("timings", {}).get("generate_seconds", 0.0)
        out.extra.update(dataset_key=key, generated_pairs=len(pairs))
        if meta.get("capped") and "size_of" in out.extra:  # asked for more pairs than the source holds
            out.extra["size_of"]["capped_at"] = len(pairs)
        dev_pairs = None
        if data.dev_inputs is not None:
            dev_pairs, dev_key, dev_meta = self.dataset(plan.generator, data.config, data.dev_inputs)
            made += dev_meta.get("timings", {}).get("generate_seconds", 0.0)
            out.extra.update(dev_dataset_key=dev_key, dev_generated_pairs=len(dev_pairs), dev_inputs=len(data.dev_inputs))
        out.timings["generate_seconds"] = round(time.perf_counter() - t0, 2)
        out.timings["dataset_generate_seconds"] = round(made, 2)
        t1 = time.perf_counter()
        if plan.postprocess is not None:
            counts: dict[str, int] = {}
            if dev_pairs is None:
                out.train, out.validation = postprocess(pairs, plan.postprocess, counts)
            else:  # the whole training file, and the separate dev set postprocessed the same way
                whole = plan.postprocess.replace(validation_fraction=0.0)
                out.train, _ = postprocess(pairs, whole, counts)
                out.validation, _ = postprocess(dev_pairs, whole)
                counts["validation"] = len(out.validation)
            out.extra["postprocess_counts"] = counts
        else:
            out.train = pairs
        out.timings["postprocess_seconds"] = round(time.perf_counter() - t1, 2)
        out.extra["train_pairs"], out.extra["validation_pairs"] = len(out.train), len(out.validation)
        return out

    # -- data-level fits ----------------------------------------------------------------------
    def fit_identity(self, fit: Any, plan: RunPlan, data: DataInputs) -> tuple[str, dict[str, Any]]:
        """(key, record) of ``plan``'s data-level fit ``fit`` (:mod:`dsgen.data.fits`): the keys of what it reads
        (the training dataset's key and the seed-free postprocessing filters, the inputs' and the source's texts),
        its settings, its models' fingerprints and the data seed."""
        from dsgen.data.fits import filter_settings
        from dsgen.identity import data_fit_key, texts_key
        from dsgen.models import model_fingerprint

        reads: dict[str, Any] = {}
        if "generated" in fit.reads:
            reads["generated"] = {"dataset": data.keys.get("train"), "filters": filter_settings(plan.postprocess)}
        if "inputs" in fit.reads:
            reads["inputs"] = texts_key(data.human)
        if "source" in fit.reads:
            reads["source"] = texts_key(self.source(plan))
        models = {m: model_fingerprint(m) for m in fit.models}
        seed = plan.run[0]
        threads = self.training_threads()  # a fit trains (the SDI classifier, a guide): its bits depend on the count
        key = data_fit_key(fit.kind, fit.version, {**fit.settings, "threads": threads}, reads, models, seed)
        return key, {"reads": reads, "settings": fit.settings, "models": models, "seed": seed, "threads": threads}

    def fit_data(self, fit: Any, plan: RunPlan, data: DataInputs) -> Any:
        """What ``fit`` is computed from (:class:`dsgen.data.fits.FitData`): only what it reads."""
        from dsgen.data.fits import FitData, seed_free_pairs

        out = FitData(seed=plan.run[0], device=plan.overrides.device or "auto", progress=self.progress)
        if "generated" in fit.reads:
            pairs, _, _ = self.dataset(plan.generator, data.config, data.inputs)
            out.generated = seed_free_pairs(pairs, plan.postprocess)
        if "inputs" in fit.reads:
            out.inputs = data.human
        if "source" in fit.reads:
            out.source = self.source(plan)
        return out

    def fit_stored(self, kind: str, key: str) -> bool:
        """Whether the fit of ``key`` is stored whole and usable by this runner (with ``fresh``: made by it)."""
        return not (self.fresh and key not in self._fresh_done) and self.fits.complete(kind, key)

    def data_fit(self, stage: Any, plan: RunPlan, data: DataInputs, expected: str | None = None) -> Any:
        """``stage``'s data-level fit for ``plan`` (a :class:`dsgen.data.fits.Fitted`), made here once per key when it
        is not stored (or, with ``fresh``, not yet made by this runner), else loaded; None when the stage declares
        none. A fit that failed here fails every run that needs it the same way, without fitting again. A runner that
        does not make fits (a driver) raises :class:`Missing` instead; ``expected``: the key the driver computed."""
        fit = stage.data_fit() if hasattr(stage, "data_fit") else None
        if fit is None:
            return None
        key, record = self.fit_identity(fit, plan, data)
        if expected is not None and key != expected:
            raise KeyMismatch(f"data-level fit {fit.kind}: this node computes key {key}, the driver {expected}: the data "
                              "or models it reads differ from the driver's")
        if key in self._failed:
            raise self._failed[key]
        store = self.fits
        if not self.fit_stored(fit.kind, key):
            if "fit" not in self.makes:
                raise Missing(FitNeed(plan, stage.kind, fit.kind, key, store.folder(fit.kind, key).relative_to(self.out)))
            try:
                store.make(fit, key, self.fit_data(fit, plan, data), record)
            except Exception as exc:
                self._failed[key] = exc
                raise
            self._fresh_done.add(key)
        return store.load(fit, key)

    def attach_fit(self, stage: Any, plan: RunPlan, data: DataInputs, extra: dict[str, Any],
                   timings: dict[str, float]) -> None:
        """Hand ``stage`` its data-level fit (``stage.fitted``) before it runs, and record which one it used."""
        if not hasattr(stage, "data_fit"):
            return
        started = time.perf_counter()
        stage.fitted = self.data_fit(stage, plan, data)
        if stage.fitted is not None:
            extra.setdefault("data_fits", {})[stage.kind] = stage.fitted.summary()
            timings["data_fit_seconds"] = round(timings.get("data_fit_seconds", 0.0) + time.perf_counter() - started, 2)

    def _fail(self, plan: RunPlan, message: str, extra: dict[str, Any], log: Path | None = None) -> RunFailed:
        """Record a failed run (``.failed.json`` beside where its result would be) and return what says so: a
        :class:`RunCrashed` when a traceback ``log`` was written, else a :class:`RunFailed`."""
        write_json(self.result_path(plan).with_suffix(".failed.json"),
                   {"method": plan.method.name, "seed": plan.seed, "data_seed": plan.run[0], "reason": message,
                    "extra": extra})
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
        log = log_path(self.shown_out, plan)  # where the driver writes it (a worker's runner works in a folder of its own)
        first = (str(exc).strip().splitlines() or [""])[0]
        reason = f"crashed: {type(exc).__name__}" + (f": {first}" if first else "") + f" (traceback in {log})"
        crash = self._fail(plan, reason, {"traceback_log": str(log)}, log)
        crash.__cause__ = exc  # raised as itself where no failure list collects it (run_many without one)
        return crash

    # -- the graph's artefacts -------------------------------------------------------------------
    def prepare(self, plan: RunPlan) -> Prepared:
        """What a driver knows of ``plan`` before running it (nothing is made here): the evaluation data checked, the
        run key, the cached result if there is one; otherwise the datasets and data-level fits it reads and those not
        made yet, datasets first (a fit is made from them). Raises :class:`Missing` when the keys themselves wait for
        a dataset (x1 generated from scratch, a dataset sized by another method's)."""
        from dsgen.data.sts import using_data_dir

        with using_data_dir(self.data_dir):
            self.evaluator(plan).pairs  # fail on missing data before any long work
            self._reads = reads = {}
            try:
                data = self.data_inputs(plan)
            finally:
                self._reads = None
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
                if dkey in self._failed:
                    raise self._failed[dkey]
                path = self.dataset_path(task, dkey)
                out.datasets[dkey] = path.relative_to(self.out)
                if not self.dataset_stored(path, dkey):
                    out.needs.append(DatasetNeed(plan.generator, data.config, inputs, dkey, path.relative_to(self.out)))
            for attr in ("labeller", "reweighter", "trainer"):
                stage = getattr(plan, attr)
                fit = stage.data_fit() if hasattr(stage, "data_fit") else None
                if fit is None:
                    continue
                fkey, _ = self.fit_identity(fit, plan, data)
                folder = self.fits.folder(fit.kind, fkey).relative_to(self.out)
                out.fits[fkey] = folder
                if fkey not in self._failed and not self.fit_stored(fit.kind, fkey) and not out.needs:
                    out.needs.append(FitNeed(plan, attr, fit.kind, fkey, folder))
            return out

    def make_dataset(self, need: DatasetNeed) -> None:
        """Make the dataset ``need`` names (a dataset task of the graph), checking its key is the driver's."""
        from dsgen.data.sts import using_data_dir

        with using_data_dir(self.data_dir):
            self.dataset(need.generator, need.config, need.inputs, expected=need.key)

    def make_fit(self, need: FitNeed) -> None:
        """Make the data-level fit ``need`` names (a fit task of the graph), checking its key is the driver's."""
        from dsgen.data.sts import using_data_dir

        with using_data_dir(self.data_dir):
            self.data_fit(getattr(need.plan, need.stage), need.plan, self.data_inputs(need.plan), expected=need.key)

    # -- one run -------------------------------------------------------------------------------
    def run(self, plan: RunPlan, expected: str | None = None) -> Result:
        """Run one plan (or return its cached result) and write the result file; ``expected``: the run key the driver
        computed (a worker computing another reads other data or models: :class:`KeyMismatch`)."""
        from dsgen.data.sts import using_data_dir

        with using_data_dir(self.data_dir):
            return self._run(plan, expected)

    def _run(self, plan: RunPlan, expected: str | None = None) -> Result:
        from dsgen.reweighting.base import ReweightContext

        evaluator = self.evaluator(plan)
        evaluator.pairs  # fail on missing data before any long work
        inputs = self.data_inputs(plan)
        key = self.run_key(plan, inputs)
        if expected is not None and key != expected:
            raise KeyMismatch(f"{plan.method.name} ({run_label(plan)}): this node computes run key {key}, the driver "
                              f"{expected}: its evaluation data (fingerprint {evaluator.fingerprint()}, "
                              f"{evaluator.root}) or models differ from the driver's")
        cached = self.cached_result(plan, key)
        if cached is not None:
            return cached
        method = plan.method
        import torch

        extra: dict[str, Any] = {"run_key": key, "variant": plan.variant, "plan": plan.to_dict(), "origins": plan.origins,
                                 "threads": torch.get_num_threads(),  # training's bits depend on it
                                 "evaluation_data": {"fingerprint": evaluator.fingerprint(), "root": str(evaluator.root),
                                                     "preprocess": evaluator.preprocess, "dtype": evaluator.dtype}}
        data = self.training_data(plan, inputs)
        extra.update(data.extra)
        timings = dict(data.timings)
        train = data.train
        gen = plan.generation
        local = gen is not None and hasattr(gen, "generator") and hasattr(gen, "dtype")  # a local LM (not an API)
        load_generator = (lambda: self.context.lm(gen.generator, gen.device, gen.dtype)) if local else None
        if plan.labeller is not None:  # a judge's labels for the training and the validation pairs alike
            from dsgen.labelling import LabelContext

            t0 = time.perf_counter()
            lctx = LabelContext(load_generator=load_generator, load_lm=self.context.lm, seed=plan.seed,
                                device=plan.overrides.device or "auto", progress=self.progress,
                                cache=self.out / "cache" / "labels")
            try:
                self.attach_fit(plan.labeller, plan, inputs, extra, timings)
                train, extra["labelling"] = plan.labeller.apply(train, lctx)
                data.validation, _ = plan.labeller.apply(data.validation, lctx)
            except DsgenError as exc:
                raise self._fail(plan, str(exc), extra) from None
            timings["label_seconds"] = round(time.perf_counter() - t0, 2)
        if plan.reweighter is not None:
            t1 = time.perf_counter()
            ctx = ReweightContext(human_texts=data.human, seed=plan.seed, device=plan.overrides.device or "auto",
                                  progress=self.progress, source=plan.preset.inputs, data_dir=self.data_dir,
                                  load_generator=load_generator)
            try:
                self.attach_fit(plan.reweighter, plan, inputs, extra, timings)
                train, extra["reweighting"] = plan.reweighter.apply(train, ctx)
            except DsgenError as exc:
                raise self._fail(plan, str(exc), extra) from None
            timings["reweight_seconds"] = round(time.perf_counter() - t1, 2)
        if train:
            t2 = time.perf_counter()
            extra["data_quality"] = self.label_agreement(train)
            timings["data_quality_seconds"] = round(time.perf_counter() - t2, 2)
        template = None
        if plan.trainer is not None:
            t3 = time.perf_counter()
            try:
                self.attach_fit(plan.trainer, plan, inputs, extra, timings)
                outcome = plan.trainer.train(train, data.validation, seed=plan.seed, progress=self.progress)
            except DsgenError as exc:
                raise self._fail(plan, str(exc), extra) from None
            model, extra["training"] = outcome.model, outcome.log
            template = outcome.log.get("text_template")
            timings["train_seconds"] = round(time.perf_counter() - t3, 2)
            failure = training_failure(outcome.log)
            if failure is not None:
                raise self._fail(plan, failure, extra)
        else:
            from dsgen.encoders import load_encoder

            model = load_encoder(plan.encoder, plan.overrides.device or "auto")
        t4 = time.perf_counter()
        result = evaluator.evaluate(model, name=plan.encoder, keep_predictions=True, template=template)
        timings["evaluate_seconds"] = round(time.perf_counter() - t4, 2)
        result.method, result.preset, result.seed, result.data_seed = method.name, plan.preset.name, plan.seed, plan.run[0]
        result.timings = {**timings, **result.timings}
        result.extra = extra
        path = self.result_path(plan)
        if train:
            write_pairs(path.with_suffix(".train.jsonl"), train)  # with weights, for analysis and exports
        if data.validation:
            write_pairs(path.with_suffix(".validation.jsonl"), data.validation)
        if self.save_models and plan.trainer is not None:
            from dsgen.export.model_folder import save_model_folder

            save_model_folder(model, path.with_suffix(".model"), result, plan.encoder,
                              f"dsgen {method.name} dataset {extra.get('dataset_key', '')}".strip())
        result.save(path)
        self._fresh_done.add(key)  # a fresh runner recomputes a run once, then reuses it like any other
        return result

    def label_agreement(self, pairs: list[Pair]) -> dict[str, Any]:
        """How well the training labels agree with an independent judge (:mod:`dsgen.evaluation.quality`)."""
        from dsgen.evaluation.quality import LabelJudge

        if self.judge is None:
            self.judge = LabelJudge()
        return self.judge.agreement(pairs)


def run_many(methods: list[str], preset: Preset, runs: list[tuple[int, int]] | list[int], runner: Runner,
             overrides: Overrides | None = None, on_result: Any = None,
             failures: list[RunFailed] | None = None, scheduler: Any = None, view: Any = None) -> dict[str, list[Result]]:
    """Every (method, run) pair, reusing what is cached; every plan is resolved before any work starts, and they run
    as one graph of artefacts (:func:`dsgen.scheduling.run_plans`).

    Args:
        runs: (data seed, training seed) pairs (:meth:`dsgen.presets.Preset.runs`), or training seeds
            alone (each its own data, or the preset's single data seed).
        on_result: ``(method, plan, result)`` for each run with a result, as it arrives.
        failures: where a run that stops on its data (:class:`RunFailed`) or crashes on an unexpected exception
            (:class:`RunCrashed`, its traceback written under ``logs/``) is recorded while the other runs go on (the
            run is left out of the returned results, a method without any run too); None: it is raised. A
            :class:`~dsgen.errors.DsgenError` that is not a :class:`RunFailed` (bad input) is always raised.
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
    from dsgen.scheduling import run_plans

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
