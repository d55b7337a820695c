"""The data stages of a run: the inputs a plan's generation reads, its datasets (generated once per key, or read
from the store), postprocessing, and the data-level fits its stages need (:mod:`dsgen.data.fits`).

What they make they store through :class:`~dsgen.runs.store.RunStore`; a runner that does not make an artefact
kind itself (a comparison's driver, which hands it to a scheduler) raises :class:`~dsgen.runs.records.Missing`
for one that is not stored.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.artifacts import read_json, sidecar_path
from dsgen.data.pairs import Pair, read_pairs
from dsgen.generation.base import GenerationContext
from dsgen.planning import RunPlan
from dsgen.runs.records import DatasetNeed, FitNeed, KeyMismatch, Missing
from dsgen.runs.store import RunStore


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


class DataStages:
    """Generation (cached), postprocessing and data-level fits for the plans of one store.

    Args:
        store: where datasets and fits are stored and what this runner may reuse.
        context: what generators are built with (data folder, backend, progress, loaded LMs).
        data_dir: STS data folder (default ``$DSGEN_DATA_DIR``).
        progress: show progress bars.
        makes: the artefact kinds made here when missing (``dataset``, ``fit``); another raises :class:`Missing`.
        threads: the thread count a fit trains with (None: torch's in this process); part of its key.

    ``auto_device``: the device a stage's ``device = "auto"`` resolves to where the artefacts are made (None: as
    :func:`dsgen.models.resolve_device` resolves it in this process; a scheduler whose tasks run elsewhere sets it),
    which the keys of runs and fits hold instead of ``auto`` (:meth:`resolved`).
    """

    def __init__(self, store: RunStore, context: GenerationContext, data_dir: str | None = None, progress: bool = True,
                 makes: tuple[str, ...] = ("dataset", "fit"), threads: int | None = None) -> None:
        self.store, self.context = store, context
        self.data_dir, self.progress = data_dir, progress
        self.makes = tuple(makes)
        self.threads = threads
        self.auto_device: str | None = None
        self._sources: dict[str, list[str]] = {}  # a reweighter's or fit's human source, read once
        self._reads: dict[str, Path] | None = None  # while recording: the datasets a plan reads (key -> path under out)

    @contextlib.contextmanager
    def recording_reads(self) -> Iterator[dict[str, Path]]:
        """Within the block, every dataset a plan reads (made or not) is recorded: key -> path under the output
        folder."""
        self._reads = reads = {}
        try:
            yield reads
        finally:
            self._reads = None

    def training_threads(self) -> int:
        """The threads training computes with (``threads``, else torch's count in this process), part of every key of
        a trained artefact: a result made on another count is another result."""
        import torch

        return self.threads if self.threads is not None else torch.get_num_threads()

    def resolved(self, settings: Any) -> Any:
        """``settings`` (a stage's identity or a fit's settings) with every ``"device": "auto"`` replaced by the device
        it resolves to (:attr:`auto_device`), so that a key names the device that computes: a GPU-trained and a
        CPU-trained run are two results. An explicit device is left as it is."""
        if isinstance(settings, dict):
            out = {k: self.resolved(v) for k, v in settings.items()}
            if out.get("device") == "auto":
                from dsgen.models import resolve_device

                out["device"] = self.auto_device or resolve_device("auto")
            return out
        if isinstance(settings, list):
            return [self.resolved(v) for v in settings]
        return settings

    def source(self, plan: RunPlan) -> list[str]:
        """Every distinct sentence of the source ``plan``'s inputs come from (RISE's human class); a named source is
        read once, a file every time (it may be edited in place)."""
        from dsgen.data.inputs import NAMED_INPUTS
        from dsgen.reweighting.base import source_texts

        name = plan.preset.inputs
        if name not in NAMED_INPUTS:
            return source_texts(name, self.data_dir)
        if name not in self._sources:
            self._sources[name] = source_texts(name, self.data_dir)
        return self._sources[name]

    # -- datasets ------------------------------------------------------------------------------
    def generator(self, name: str, cfg: Any) -> Any:
        from dsgen.generation import GENERATORS

        return GENERATORS.get(name).build(cfg, self.context)

    def dataset(self, generator: str, cfg: Any, inputs: list[str] | None,
                expected: str | None = None) -> tuple[list[Pair], str, dict[str, Any]]:
        """Generate or reuse a dataset; returns (pairs, dataset key, its sidecar). Raises :class:`Missing` for one not
        stored when datasets are not made here; ``expected``: the key the driver computed (else
        :class:`KeyMismatch`)."""
        gen = self.generator(generator, cfg)
        key = gen.dataset_key(inputs)
        if expected is not None and key != expected:
            raise KeyMismatch(f"dataset {getattr(cfg, 'task', generator)}: this node computes key {key}, the driver "
                              f"{expected}: its inputs, task spec or generator model differ from the driver's")
        failed = self.store.failure(key)
        if failed is not None:
            raise failed
        store = self.store
        path = store.dataset_path(getattr(cfg, "task", generator), key)
        if self._reads is not None:
            self._reads[key] = path.relative_to(store.out)
        if store.dataset_stored(path, key):
            meta = sidecar_path(path)
            return read_pairs(path), key, read_json(meta)
        if "dataset" not in self.makes:
            raise Missing(DatasetNeed(generator, cfg, inputs, key, path.relative_to(store.out)))
        pairs = gen.generate(inputs, path, progress=self.progress, resume=store.usable(key))
        store.made(key)
        return pairs, key, read_json(sidecar_path(path))

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
        settings = self.resolved(fit.settings)  # "auto" as the device it resolves to
        key = data_fit_key(fit.kind, fit.version, {**settings, "threads": threads}, reads, models, seed)
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

    def data_fit(self, stage: Any, plan: RunPlan, data: DataInputs, expected: str | None = None) -> Any:
        """``stage``'s data-level fit for ``plan`` (a :class:`dsgen.data.fits.Fitted`), made here once per key when it
        is not stored (or, with ``fresh``, not yet made by this store), else loaded; None when the stage declares
        none. A fit that failed here fails every run that needs it the same way, without fitting again. Raises
        :class:`Missing` instead when fits are not made here; ``expected``: the key the driver computed."""
        fit = stage.data_fit() if hasattr(stage, "data_fit") else None
        if fit is None:
            return None
        key, record = self.fit_identity(fit, plan, data)
        if expected is not None and key != expected:
            raise KeyMismatch(f"data-level fit {fit.kind}: this node computes key {key}, the driver {expected}: the data "
                              "or models it reads differ from the driver's")
        failed = self.store.failure(key)
        if failed is not None:
            raise failed
        store = self.store.fits
        if not self.store.fit_stored(fit.kind, key):
            if "fit" not in self.makes:
                raise Missing(FitNeed(plan, stage.kind, fit.kind, key,
                                      store.folder(fit.kind, key).relative_to(self.store.out)))
            try:
                store.make(fit, key, self.fit_data(fit, plan, data), record)
            except Exception as exc:
                self.store.record_failure(key, exc)
                raise
            self.store.made(key)
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


__all__ = ["DataInputs", "DataStages", "TrainingData"]
