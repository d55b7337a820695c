"""The GPU check's cost model: a preset's wall time per method on the device measured, from the rates the check
measured and the sizes the preset's plans resolve (:func:`dsgen.planning.plan_run`), per method::

    generation  = decoded outputs x seconds per output (once per dataset: one for the `paper` preset's data seed)
    training    = examples x epochs x seconds per example (per run: each training seed)
    selection   = evaluations x sentences x seconds per sentence (the trainer's model selection, per run)
    evaluation  = distinct test sentences x seconds per sentence (per run)

Sizes are those of the plan: inputs as the runner reads them (``dsgen.data.inputs.load_inputs`` with the method's
sample and the data seed), the task spec's labels and counter labels, samples per label, x1 made from scratch,
RISE's separately generated dev set, the trainer's batch, epochs and selection schedule. Training examples are an
upper bound: every sample accepted and every cap of DINO's postprocessing filled (``max_per_x1_label`` per (x1,
label), ``random_pairs_per_x1``, the validation split); a real generator's rejected samples make fewer. Time per
output is scaled from the measured task to another by its rows per sample (1 + counter labels) and its
``max_new_tokens``. What the check does not time is named in each row's ``not_modelled`` and left out of its total:
an API or another generator model, labellers, reweighters, a trained guide, an NLI stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

LOOPS = ("core", "reference", "hf_generate")
"""The generation loops the check times: dsgen's decoder, DINO's reference loop, ``transformers``' ``generate``
(no self-debiasing: the counter rows are not scaled into its cost)."""


@dataclass
class Rates:
    """What the check measured, as the cost model reads it."""

    generator: str  # the preset's generator name (its architecture was timed)
    generator_dtype: str
    task: str  # the task timed (``sts-x2``)
    rows_per_sample: float  # of that task: 1 + counter labels, averaged over its labels
    max_new_tokens: int
    seconds_per_output: dict[str, float]  # loop -> seconds per decoded output (a loop not measured: absent)
    encoder: str  # the preset's encoder name (its architecture was timed)
    seconds_per_example: dict[str, float]  # trainer -> seconds per pair / triplet (not measured: absent)
    seconds_per_test_sentence: float | None  # None: not measured
    seconds_per_selection_sentence: float | None


@dataclass
class Sizes:
    """One method's sizes under a preset (per dataset and per run)."""

    outputs: int = 0  # samples decoded, every generation stage of one dataset
    stages: list[dict[str, Any]] = field(default_factory=list)
    x1: int = 0
    train_examples: int = 0
    validation_pairs: int = 0
    steps: int = 0
    selection_evaluations: int = 0
    selection_sentences: int = 0  # per evaluation
    test_sentences: int = 0
    notes: list[str] = field(default_factory=list)


def rows_per_sample(spec: Any, counter_labels: bool = True) -> float:
    """Rows one sample decodes: its main row and one per counter label, averaged over the spec's labels."""
    return sum(1 + (len(spec.counter_labels[y]) if counter_labels else 0) for y in spec.labels) / len(spec.labels)


def _spec(cfg: Any) -> Any:
    from dsgen.taskspec import load_task_spec

    return load_task_spec(cfg.task)


def stage_outputs(cfg: Any, spec: Any, n_inputs: int | None) -> int:
    """Samples one generation stage decodes: ``per_label`` per (input, label), or ``entries_per_label`` per label
    without inputs (one sample each), as :meth:`dsgen.generation.debiased.DebiasedGenerator.chunks` makes them."""
    if spec.needs_inputs:
        return int(n_inputs or 0) * len(spec.labels) * getattr(cfg, "per_label", 1)
    return getattr(cfg, "entries_per_label", 1) * len(spec.labels)


def pair_bound(cfg: Any, spec: Any, post: Any, n_x1: int) -> tuple[int, dict[str, int], int]:
    """(x1 groups, kept pairs per pair label, random pairs) when every sample is accepted and every cap filled."""
    cap = post.max_per_x1_label if post is not None and post.max_per_x1_label else math.inf
    per_label = getattr(cfg, "per_label", 1) if spec.needs_inputs else 1
    if spec.output.structured:
        outputs = stage_outputs(cfg, spec, n_x1)
        groups = outputs if spec.output.anchor else n_x1  # x1 written in the answer: each answer its own x1
        each = 1 if spec.output.anchor else per_label * len(spec.labels)
        labels = {label: each for _, label in spec.output.pairs}
    else:
        groups, labels = n_x1, {y: per_label for y in spec.labels}
    kept = {y: int(groups * min(n, cap)) for y, n in labels.items()}
    random_pairs = groups * (post.random_pairs_per_x1 if post is not None else 0)
    return groups, kept, random_pairs


def selection_schedule(trainer: Any, examples: int, validation_pairs: int, data_dir: str | None) -> tuple[int, int, int]:
    """(optimizer steps, evaluations, sentences per evaluation) of one run: the trainer's schedule
    (:func:`dsgen.training.fit.fit`: every interval, each epoch's end and the last step when asked, and the
    check of the restored weights), on STSb dev or its own validation pairs."""
    from dsgen.training.fit import TrainingConfig, evaluation_interval, stsb_dev_pairs

    cfg = trainer.config
    steps_per_epoch = max(1, math.ceil(examples / cfg.batch_size))
    steps = max(1, math.ceil(steps_per_epoch * cfg.epochs))
    if not isinstance(cfg, TrainingConfig):
        return steps, 0, 0
    sel = cfg.selection(steps)
    if not sel.model_selection:
        return steps, 0, 0
    sentences = 2 * (len(stsb_dev_pairs(data_dir)) if sel.selection_data == "stsb-dev" else validation_pairs)
    if sentences < 4:
        return steps, 0, 0
    interval = evaluation_interval(sel, steps_per_epoch)
    at = set(range(interval, steps + 1, interval))
    if sel.evaluate_at_epoch_end:
        at |= {min(steps, round(i * steps_per_epoch)) for i in range(1, math.ceil(cfg.epochs) + 1)} | {steps}
    return steps, len(at) + (1 if at else 0), sentences


def method_sizes(plan: Any, data_dir: str | None, test_sentences: int, dino_total: int | None = None) -> Sizes:
    """The sizes of ``plan`` (one run of a method under a preset)."""
    from dsgen.data.inputs import load_inputs
    from dsgen.data.sts import data_dir as resolve, read_stsb

    out = Sizes(test_sentences=test_sentences)
    method, preset = plan.method, plan.preset
    trainer, post = plan.trainer, plan.postprocess
    if plan.generation is None:
        return out
    cfg = plan.generation
    if plan.generator == "human":
        available = len(read_stsb(resolve(data_dir), "train"))
        total = min(dino_total or available, available)  # as many as DINO's dataset, at most what STSb holds
        out.notes.append(f"human pairs: as many as {method.size_of}'s dataset, at most the {available} STSb train pairs")
        groups, kept, random_pairs = total, {"gold": total}, 0
    else:
        if plan.x1_generation is not None:
            x1_cfg = plan.x1_generation
            x1_spec = _spec(x1_cfg)
            n = stage_outputs(x1_cfg, x1_spec, None)
            out.stages.append({"stage": "x1", "task": x1_cfg.task, "outputs": n, "config": x1_cfg})
            n_x1 = n  # every x1 kept (an upper bound)
        else:
            spec0 = _spec(cfg)
            n_x1 = len(load_inputs(preset.inputs, preset.max_inputs, data_dir, sample=method.input_sample,
                                   seed=plan.run[0])) if spec0.needs_inputs else 0
        spec = _spec(cfg)
        n = stage_outputs(cfg, spec, n_x1)
        out.stages.append({"stage": "pairs", "task": cfg.task, "outputs": n, "config": cfg})
        groups, kept, random_pairs = pair_bound(cfg, spec, post, n_x1 if spec.needs_inputs else n)
        if method.dev_inputs:  # RISE: a dev set generated apart, postprocessed whole
            n_dev = len(load_inputs(method.dev_inputs, preset.dev_max_inputs, data_dir, sample=method.input_sample,
                                    seed=plan.run[0]))
            out.stages.append({"stage": "dev", "task": cfg.task, "outputs": stage_outputs(cfg, spec, n_dev), "config": cfg})
            _, dev_kept, dev_random = pair_bound(cfg, spec, post, n_dev)
            out.validation_pairs = sum(dev_kept.values()) + dev_random
    out.x1 = groups
    out.outputs = sum(s["outputs"] for s in out.stages)
    total = sum(kept.values()) + random_pairs
    fraction = post.validation_fraction if post is not None and not method.dev_inputs else 0.0
    if not method.dev_inputs:
        out.validation_pairs = int(total * fraction)
    if trainer is None:
        return out
    if trainer.name == "contrastive":
        pos, neg = trainer.config.positive_label, trainer.config.negative_label
        out.train_examples = int(min(kept.get(pos, 0), kept.get(neg, 0)) * (1 - fraction))
    else:
        out.train_examples = int(total * (1 - fraction))
    out.steps, out.selection_evaluations, out.selection_sentences = selection_schedule(
        trainer, out.train_examples, out.validation_pairs, data_dir)
    return out


def runs_and_datasets(preset: Any) -> tuple[int, int]:
    """(runs, datasets) of a preset: every (data seed, training seed), and one dataset per data seed (each training
    seed its own dataset when the preset names no data seed)."""
    seeds = len(preset.seeds)
    if preset.data_seeds is not None:
        return len(preset.data_seeds) * seeds, len(preset.data_seeds)
    return seeds, 1 if preset.data_seed is not None else seeds


def not_modelled(plan: Any, rates: Rates) -> list[str]:
    """What this method runs that the check does not time (left out of its total)."""
    out = []
    cfg = plan.generation
    if plan.generator == "openai":
        out.append(f"generation through an API ({getattr(cfg, 'model', '?')})")
    elif plan.generator == "debiased":
        for stage in (plan.x1_generation, cfg):
            if stage is not None and (stage.generator, stage.dtype) != (rates.generator, rates.generator_dtype):
                out.append(f"generator {stage.generator} ({stage.dtype})")
    if plan.labeller is not None:
        out.append(f"labeller {plan.labeller.name}")
    if plan.reweighter is not None:
        out.append(f"reweighter {plan.reweighter.name}")
    tcfg = getattr(plan.trainer, "config", None)
    if tcfg is not None and getattr(tcfg, "loss", "infonce") != "infonce" and getattr(tcfg, "guide", None):
        out.append(f"the {tcfg.loss} loss's guide ({tcfg.guide})")
    if tcfg is not None and getattr(tcfg, "nli_file", None):
        out.append("GenSE's NLI stage")
    return list(dict.fromkeys(out))


def method_cost(plan: Any, sizes: Sizes, rates: Rates) -> dict[str, Any]:
    """One method's predicted seconds per stage (``None`` where a stage is not modelled) and in total: the sum of
    the stages modelled, a lower bound where ``complete`` is false."""
    gen: dict[str, float | None] = {loop: 0.0 for loop in LOOPS}
    skipped = not_modelled(plan, rates)
    for stage in sizes.stages:
        cfg = stage["config"]
        if plan.generator != "debiased" or (cfg.generator, cfg.dtype) != (rates.generator, rates.generator_dtype):
            gen = {loop: None for loop in LOOPS}
            break
        spec = _spec(cfg)
        length = cfg.sampling.max_new_tokens / rates.max_new_tokens
        rows = rows_per_sample(spec, cfg.counter_labels) / rates.rows_per_sample
        for loop in LOOPS:
            scale = length * (1.0 if loop == "hf_generate" else rows)
            rate = rates.seconds_per_output.get(loop)
            gen[loop] = None if rate is None or gen[loop] is None else gen[loop] + stage["outputs"] * scale * rate
    if plan.generator == "openai":
        gen = {loop: None for loop in LOOPS}
    if plan.generation is not None and plan.generator == "debiased" and any(g is None for g in gen.values()) \
            and not any(s.startswith("generator ") for s in skipped):
        skipped.append("generation (not measured in this run)")
    train: float | None = 0.0
    select: float | None = 0.0
    if plan.trainer is not None:
        per = rates.seconds_per_example.get(plan.trainer.name)
        train = None if per is None else sizes.train_examples * plan.trainer.config.epochs * per
        sel = rates.seconds_per_selection_sentence
        select = 0.0 if not sizes.selection_evaluations else (
            None if sel is None else sizes.selection_evaluations * sizes.selection_sentences * sel)
        if per is None:
            skipped.append(f"training ({plan.trainer.name}: not measured in this run)")
        if select is None:
            skipped.append("model selection (not measured in this run)")
    test = rates.seconds_per_test_sentence
    evaluate = None if test is None else sizes.test_sentences * test
    if evaluate is None:
        skipped.append("evaluation (not measured in this run)")
    runs, datasets = runs_and_datasets(plan.preset)
    per_run = sum(x for x in (train, select, evaluate) if x is not None)
    # the stages timed; a row with stages not timed (``not_modelled``) is a lower bound ("at least")
    totals = {loop: datasets * (g or 0.0) + runs * per_run for loop, g in gen.items()}
    encoder_note = [] if plan.encoder == rates.encoder or plan.trainer is None else [
        f"encoder {plan.encoder} timed as {rates.encoder}'s architecture"]
    return {
        "method": plan.method.name, "generator": plan.generator,
        "generator_model": getattr(plan.generation, "generator", None) or getattr(plan.generation, "model", None),
        "encoder": plan.encoder, "trainer": plan.trainer.name if plan.trainer is not None else None,
        "runs": runs, "datasets": datasets, "decoded_outputs_per_dataset": sizes.outputs,
        "generation_stages": [{k: v for k, v in s.items() if k != "config"} for s in sizes.stages],
        "x1": sizes.x1, "train_examples_per_run_at_most": sizes.train_examples,
        "epochs": plan.trainer.config.epochs if plan.trainer is not None else None,
        "batch_size": plan.trainer.config.batch_size if plan.trainer is not None else None,
        "steps_per_run": sizes.steps, "validation_pairs": sizes.validation_pairs,
        "selection_evaluations_per_run": sizes.selection_evaluations,
        "selection_sentences_per_evaluation": sizes.selection_sentences, "test_sentences_per_run": sizes.test_sentences,
        "seconds": {"generation": {k: _round(v) for k, v in gen.items()}, "training_per_run": _round(train),
                    "selection_per_run": _round(select), "evaluation_per_run": _round(evaluate),
                    "total": {k: _round(v) for k, v in totals.items()}},
        "not_modelled": skipped, "complete": not skipped, "notes": sizes.notes + encoder_note}


def cost_model(preset: Any, rates: Rates, data_dir: str | None, test_sentences: int) -> list[dict[str, Any]]:
    """One row per method registered (built-in and plug-in), planned under ``preset`` with its first seed."""
    from dsgen.method import METHODS
    from dsgen.planning import plan_run

    plans = {name: plan_run(name, preset, preset.seeds[0]) for name in METHODS.names()}
    sizes = {}
    for name, plan in plans.items():  # methods sized like another (human: like dino) after that one
        if plan.size_of is None:
            sizes[name] = method_sizes(plan, data_dir, test_sentences)
    for name, plan in plans.items():
        if plan.size_of is not None:
            ref = sizes.get(plan.size_of.method.name) or method_sizes(plan.size_of, data_dir, test_sentences)
            sizes[name] = method_sizes(plan, data_dir, test_sentences, ref.train_examples + ref.validation_pairs)
    return [method_cost(plans[name], sizes[name], rates) for name in plans]


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def hours(seconds: float | None) -> str:
    """``1 h 05 min``, ``12 min``, ``40 s``; ``n/a`` for a stage the check does not time."""
    if seconds is None:
        return "n/a"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{minutes} min"
