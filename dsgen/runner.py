"""Runs a method under a preset and a seed: generate (cached), postprocess, reweight, train,
evaluate, and write one result file.

Layout under the output folder (default ``runs/``)::

    cache/datasets/<task>-<key>.jsonl        generated datasets, keyed by everything that
                                             determines them; shared by methods and seeds
    results/<preset>/<method>/seed-<n>.json  one result per (method, preset, seed), with its
                                             per-pair predictions beside it (.pred.npz)

A result is reused when its ``run_key`` (hash of the method, the resolved configs, the
inputs and the seed) matches; ``fresh=True`` recomputes everything.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.artifacts import ensure_writable_dir, read_json, sidecar_path, stable_hash
from dsgen.data.pairs import Pair, read_pairs
from dsgen.errors import DsgenError
from dsgen.evaluation.results import Result
from dsgen.method import Method, get_method
from dsgen.presets import Preset

_LMS: dict[tuple[str, str, str], Any] = {}


class RunFailed(DsgenError):
    """A run that stopped on bad data (e.g. a filter kept nothing to train on), with what it knew then."""

    def __init__(self, method: str, seed: int, message: str, extra: dict[str, Any]) -> None:
        super().__init__(f"{method} (seed {seed}): {message}")
        self.method, self.seed, self.reason, self.extra = method, seed, message, extra


def shared_lm(name: str, device: str, dtype: str) -> Any:
    """Load a generator LM once per process (generation and zero-shot discrimination share it)."""
    key = (name, device, dtype)
    if key not in _LMS:
        from dsgen.models import load_causal_lm

        _LMS[key] = load_causal_lm(name, device, dtype)
    return _LMS[key]


def _merge(*layers: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for layer in layers:
        for k, v in (layer or {}).items():
            out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _fields(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _scale(preset_layer: dict[str, Any], cls: type) -> dict[str, Any]:
    """The preset's settings that ``cls`` knows (a preset sets scale for every trainer at once)."""
    return {k: v for k, v in preset_layer.items() if k in _fields(cls)}


def _check_preset_keys(preset: Preset) -> None:
    """A preset key that no config of its section knows is a typo: say so instead of ignoring it."""
    import difflib

    from dsgen.generation.debiased import GenerationConfig
    from dsgen.reweighting.base import REWEIGHTERS
    from dsgen.training.base import TRAINERS

    sections = {"generation": {GenerationConfig},
                "training": {TRAINERS.get(n).config_class for n in TRAINERS.names()},
                "reweighting": {REWEIGHTERS.get(n).config_class for n in REWEIGHTERS.names()}}
    for section, classes in sections.items():
        known = set().union(*(_fields(c) for c in classes))
        for key in getattr(preset, section):
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise DsgenError(f"preset {preset.name}: unknown [{section}] setting '{key}'{hint}")


@dataclass
class RunPlan:
    """Every resolved setting of one run; its hash is the run key."""

    method: Method
    preset: Preset
    seed: int
    generation: Any = None
    x1_generation: Any = None
    postprocess: Any = None
    reweighter: Any = None
    trainer: Any = None
    encoder: str = "minilm-l6"
    overrides: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method.to_dict(), "preset": self.preset.name, "inputs": self.preset.inputs,
                "max_inputs": self.preset.max_inputs, "tasks": self.preset.tasks,
                "seed": self.seed if self.method.uses_seed else None,
                "generation": self.generation.to_dict() if self.generation else None,
                "x1_generation": self.x1_generation.to_dict() if self.x1_generation else None,
                "postprocess": self.postprocess.to_dict() if self.postprocess else None,
                "reweighter": self.reweighter.get_config_dict() if self.reweighter else None,
                "trainer": self.trainer.get_config_dict() if self.trainer else None, "encoder": self.encoder}

    @property
    def key(self) -> str:
        return stable_hash(self.to_dict())


def plan_run(method: Method | str, preset: Preset, seed: int, generator: str | None = None,
             encoder: str | None = None, device: str | None = None) -> RunPlan:
    """Resolve the configs of one run: paper defaults < preset < method < command line."""
    from dsgen.data.postprocess import PostprocessConfig
    from dsgen.generation.debiased import GenerationConfig
    from dsgen.reweighting.base import REWEIGHTERS
    from dsgen.training.base import TRAINERS

    method = get_method(method) if isinstance(method, str) else method
    _check_preset_keys(preset)
    cli_gen = {k: v for k, v in {"generator": generator, "device": device}.items() if v}
    data_seed = preset.data_seed if preset.data_seed is not None else seed
    plan = RunPlan(method, preset, seed, overrides={"generator": generator, "encoder": encoder, "device": device})
    if method.generator:
        layers = (_scale(preset.generation, GenerationConfig), method.generation, cli_gen, {"seed": data_seed})
        plan.generation = GenerationConfig.from_dict(_merge(*layers))
        if method.x1_generation is not None:
            x1 = _merge(_scale(preset.generation, GenerationConfig), {"entries_per_label": preset.x1_entries_per_label},
                        method.x1_generation, cli_gen, {"seed": data_seed})
            plan.x1_generation = GenerationConfig.from_dict(x1)
        if method.postprocess is not None:
            plan.postprocess = PostprocessConfig.from_dict(_merge(method.postprocess, {"seed": seed}))
    if method.reweighter:
        cls = REWEIGHTERS.get(method.reweighter)
        plan.reweighter = cls(cls.config_class.from_dict(_merge(_scale(preset.reweighting, cls.config_class),
                                                                 method.reweighter_config,
                                                                 {"device": device} if device else {})))
    train_layer = _merge(preset.training, {"encoder": encoder, "device": device} if (encoder or device) else {})
    train_layer = {k: v for k, v in train_layer.items() if v is not None}
    if method.trainer:
        cls = TRAINERS.get(method.trainer)
        plan.trainer = cls(cls.config_class.from_dict(_merge(_scale(train_layer, cls.config_class), method.trainer_config)))
        plan.encoder = plan.trainer.config.encoder
    else:
        plan.encoder = train_layer.get("encoder", "minilm-l6")
    return plan


class Runner:
    """Runs plans and caches their datasets and results under ``out``.

    Args:
        out: output folder (``runs/`` by default on the command line).
        data_dir: STS data folder (default ``$DSGEN_DATA_DIR``).
        progress: show progress bars.
        fresh: ignore cached datasets and results.
    """

    def __init__(self, out: str | Path = "runs", data_dir: str | None = None, progress: bool = True,
                 fresh: bool = False) -> None:
        self.out = ensure_writable_dir(Path(out))
        self.data_dir = data_dir
        self.progress = progress
        self.fresh = fresh
        self._fresh_done: set[str] = set()
        self._evaluators: dict[tuple[str, ...], Any] = {}  # task pairs read once per runner

    def result_path(self, plan: RunPlan) -> Path:
        seed = f"seed-{plan.seed}"
        return self.out / "results" / plan.preset.name / plan.method.name / f"{seed}.json"

    def cached_result(self, plan: RunPlan) -> Result | None:
        path = self.result_path(plan)
        if self.fresh:
            return None
        candidates = [path] if plan.method.uses_seed else [path, *sorted(path.parent.glob("seed-*.json"))]
        for candidate in candidates:
            if not candidate.exists():
                continue
            try:
                result = Result.load(candidate)
            except DsgenError:
                continue
            if result.extra.get("run_key") == plan.key:
                result.predictions = Result.load_predictions(candidate)
                if candidate != path:  # a seed-independent method: the same result under this seed
                    result.seed = plan.seed
                    result.save(path)
                return result
        return None

    # -- stages ------------------------------------------------------------------------------
    def dataset(self, cfg: Any, inputs: list[str] | None, generator: str) -> list[Pair]:
        """Generate or reuse the dataset keyed by ``dataset_key(cfg, inputs)``; resumable."""
        from dsgen.generation import GENERATORS
        from dsgen.generation.debiased import dataset_key

        key = dataset_key(cfg, inputs)
        path = self.out / "cache" / "datasets" / f"{Path(cfg.task).stem}-{key}.jsonl"
        meta = sidecar_path(path)
        fresh = self.fresh and key not in self._fresh_done
        if not fresh and path.exists() and meta.exists() and read_json(meta).get("dataset_key") == key:
            return read_pairs(path)
        gen_cls = GENERATORS.get(generator)
        gen = gen_cls(cfg, lm=shared_lm(cfg.generator, cfg.device, cfg.dtype)) if generator == "debiased" else gen_cls(cfg)
        pairs = gen.generate(inputs, path, progress=self.progress)
        self._fresh_done.add(key)
        return pairs

    def run(self, plan: RunPlan) -> Result:
        """Run one plan (or return its cached result) and write the result file."""
        from dsgen.data.inputs import load_inputs
        from dsgen.data.postprocess import postprocess
        from dsgen.evaluation.evaluator import StsEvaluator
        from dsgen.reweighting.base import ReweightContext

        cached = self.cached_result(plan)
        if cached is not None:
            return cached
        method, preset = plan.method, plan.preset
        timings: dict[str, float] = {}
        extra: dict[str, Any] = {"run_key": plan.key, "plan": plan.to_dict()}
        evaluator = self._evaluators.setdefault(tuple(preset.tasks), StsEvaluator(preset.tasks, self.data_dir))
        evaluator.pairs  # fail on missing data before any long work
        t0 = time.perf_counter()
        human: list[str] | None = None
        train: list[Pair] = []
        validation: list[Pair] = []
        if plan.generation is not None:
            if plan.x1_generation is not None:
                x1_pairs = self.dataset(plan.x1_generation, None, method.generator)
                inputs = list(dict.fromkeys(p.text_a for p in x1_pairs))
                extra["x1_generated"] = len(inputs)
            else:
                inputs = human = load_inputs(preset.inputs, preset.max_inputs, self.data_dir)
            pairs = self.dataset(plan.generation, inputs, method.generator)
            from dsgen.generation.debiased import dataset_key

            extra["dataset_key"] = dataset_key(plan.generation, inputs)
            extra["generated_pairs"] = len(pairs)
            timings["generate_seconds"] = round(time.perf_counter() - t0, 2)
            if plan.postprocess is not None:
                train, validation = postprocess(pairs, plan.postprocess)
            else:
                train = pairs
            extra["train_pairs"], extra["validation_pairs"] = len(train), len(validation)
        if plan.reweighter is not None:
            t1 = time.perf_counter()
            gen = plan.generation
            ctx = ReweightContext(human_texts=human, seed=plan.seed, device=plan.overrides.get("device") or "auto",
                                  progress=self.progress,
                                  load_generator=(lambda: shared_lm(gen.generator, gen.device, gen.dtype)) if gen else None)
            train, extra["reweighting"] = plan.reweighter.apply(train, ctx)
            timings["reweight_seconds"] = round(time.perf_counter() - t1, 2)
        template = None
        if plan.trainer is not None:
            t2 = time.perf_counter()
            try:
                outcome = plan.trainer.train(train, validation, seed=plan.seed, progress=self.progress)
            except DsgenError as exc:
                from dsgen.artifacts import write_json

                failure = RunFailed(method.name, plan.seed, str(exc), extra)
                write_json(self.result_path(plan).with_suffix(".failed.json"),
                           {"method": method.name, "seed": plan.seed, "reason": str(exc), "extra": extra})
                raise failure from None
            model, extra["training"] = outcome.model, outcome.log
            template = outcome.log.get("text_template")
            timings["train_seconds"] = round(time.perf_counter() - t2, 2)
        else:
            from dsgen.models import load_encoder

            model = load_encoder(plan.encoder, plan.overrides.get("device") or "auto")
        t3 = time.perf_counter()
        result = evaluator.evaluate(model, name=plan.encoder, keep_predictions=True, template=template)
        timings["evaluate_seconds"] = round(time.perf_counter() - t3, 2)
        result.method, result.preset, result.seed = method.name, preset.name, plan.seed
        result.timings = {**timings, **result.timings}
        result.extra = extra
        path = self.result_path(plan)
        if train:
            from dsgen.data.pairs import write_pairs

            write_pairs(path.with_suffix(".train.jsonl"), train)  # with weights, for analysis
        result.save(path)
        return result


def run_many(methods: list[str], preset: Preset, seeds: list[int], runner: Runner, generator: str | None = None,
             encoder: str | None = None, device: str | None = None, on_result: Any = None,
             failures: list[RunFailed] | None = None) -> dict[str, list[Result]]:
    """Every (method, seed) run, reusing what is cached; methods resolved before any work starts.

    With a ``failures`` list, a run that stops on its data (:class:`RunFailed`) is recorded there
    and the other runs go on; the method is left out of the returned results.
    """
    plans = {m: [plan_run(get_method(m), preset, s, generator, encoder, device) for s in seeds] for m in methods}
    out: dict[str, list[Result]] = {}
    for m, ps in plans.items():
        out[m] = []
        for p in ps:
            try:
                r = runner.run(p)
            except RunFailed as exc:
                if failures is None:
                    raise
                failures.append(exc)
                continue
            out[m].append(r)
            if on_result:
                on_result(m, p, r)
        if not out[m]:
            del out[m]
    return out
