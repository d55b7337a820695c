"""Runs a sentence-transformers training job the way every dsgen trainer wants it.

``SentenceTransformerTrainer`` does the work (AdamW, linear warm-up and decay, evaluation,
keeping the best checkpoint by the validation metric). This module sets its arguments from a
:class:`TrainingConfig`, adds the evaluation schedule DINO's and RISE's code use (every N steps,
at the end of every epoch and always at the last step), replaces tqdm with dsgen's rich progress
bar, and cleans up the temporary checkpoints.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from dsgen.config import Config
from dsgen.errors import DsgenError

SELECTION_METRICS = ("max", "cosine")
SELECTION_RULES = {
    "paper": "each method's own rule (its repository's: the data, metric and schedule its recipe sets)",
    "stsb-dev": "the best STSb dev Spearman (cosine, gold / 5), evaluated at every epoch's end, at the last step and "
                "selection_evaluations times over the run",
    "last": "the last step (no model selection)",
    "ema": "an exponential moving average of the weights over the optimizer steps (Polyak averaging, ema_decay)",
}
"""How a trainer chooses the weights it returns (:attr:`TrainingConfig.selection_rule`). ``paper`` keeps what each
method's recipe sets; the others replace it, so that every method of a comparison is selected by one rule on one
set of data (a preset's ``[training] selection_rule``, which applies to every trainer)."""


@dataclass
class TrainingConfig(Config):
    """Settings shared by the trainers. Defaults are DINO's (Sentence-BERT's defaults).

    Args:
        encoder: ``minilm-l6`` (embedded all-MiniLM-L6-v2), a causal-LM encoder alias or spec
            (:mod:`dsgen.encoders`), any sentence-transformers or HF id or local directory; a plain
            transformer gets mean pooling.
        batch_size / epochs / learning_rate / warmup_ratio / weight_decay: optimisation
            (32, 1, 2e-5, 10% linear warm-up, AdamW with weight decay 0.01 as Sentence-BERT).
        evaluation_steps: evaluate on the validation split every N steps (DINO's code: 100);
            evaluations also run at the end of every epoch and at the last step, and the best
            checkpoint is kept ("the exact number of training steps is determined based on
            Spearman's rank correlation on the validation set").
        evaluations_per_epoch: when > 0, evaluate this many times per epoch instead of every
            ``evaluation_steps`` (RISE's code: 3).
        selection_metric: ``max``: the best of the cosine, Euclidean, Manhattan and dot-product
            Spearman (what sentence-transformers 0.4, used by DINO and RISE, returned); ``cosine``.
        model_selection: keep the best validation checkpoint (False: keep the last step).
        selection_data: where the checkpoint is chosen: None (the method's validation pairs: DINO's held-out
            generated split, RISE's separately generated dev set) or ``stsb-dev`` (the STS benchmark dev split,
            gold / 5: GenSE's ``train.sh``, CLAIF's ``--using_stsb_dev``).
        evaluate_at_epoch_end: evaluate also at every epoch's end and at the last step (sentence-transformers
            0.4's schedule, DINO's and RISE's code); False: only every N steps (GenSE's Hugging Face Trainer,
            ``evaluation_strategy steps``).
        warmup_steps: linear warm-up over this many steps instead of ``warmup_ratio`` of them (0: the ratio).
        ema_decay: 0 (the papers'): keep the trained weights. d in (0, 1): keep an exponential moving average
            of the weights over the optimizer steps, ``w_avg <- d * w_avg + (1 - d) * w`` (Polyak averaging),
            which smooths the last steps' noise; it replaces model selection (``model_selection = false``).
        max_seq_length: truncate inputs at this many tokens (128: sentence-transformers 0.4's
            ``models.Transformer`` default, which DINO's and RISE's code used; None: the encoder's own
            limit, e.g. 512).
        optimizer: ``adamw-uncorrected`` (sentence-transformers 0.4's AdamW without bias correction,
            eps 1e-6: DINO's and RISE's code) or ``adamw-torch`` (torch's bias-corrected AdamW, eps
            1e-8); :mod:`dsgen.training.optimizers`.
        device: cpu, cuda or auto.
        selection_rule: how the returned weights are chosen (:data:`SELECTION_RULES`). ``paper`` (default): as the
            fields above say, i.e. as each method's recipe sets them (DINO: its generated validation split at every
            100 steps and each epoch's end; GenSE and the SimCSE family: STSb dev every 25-250 steps only; E5:
            the last step). ``stsb-dev``, ``last`` and ``ema`` replace ``model_selection``, ``selection_data``,
            ``selection_metric``, ``evaluation_steps``, ``evaluations_per_epoch`` and ``evaluate_at_epoch_end`` for
            every trainer alike: set in a preset's ``[training]``, it puts every method of a comparison under one
            rule on the same data (:meth:`selection`). A method never sets it, unless its paper's own rule is
            what the method tests.
        selection_evaluations: under ``selection_rule = "stsb-dev"``, evaluations spread over the run (every
            ``ceil(steps / n)`` steps, besides every epoch's end and the last step), so the schedule scales with
            the run's length: 10, so a run of a few dozen steps is evaluated every few steps and one of thousands
            every few hundred (DINO's every 100, RISE's thirds of an epoch, SimCSE's every 125 are fixed counts).
        adam_epsilon: the optimizer's epsilon (None: its own default, 1e-6 for ``adamw-uncorrected``, 1e-8 for
            ``adamw-torch``; CLAIF's sentence-transformers 2.2.2 builds ``transformers.AdamW`` with eps 1e-6 and bias
            correction).
        min_trained_steps: the fewest optimizer steps with a non-zero learning rate a run must take to count as
            trained (:func:`training_failure`; a run below it is a failed run, never a score). 10: with fewer,
            every batch is more than a tenth of all the model learned, and the row shows the starting encoder
            nudged by a few batches, not what the method's data teaches (on ``cpu``, ``e5-sts``'s 22 pairs make
            one step, all of it warm-up at learning rate 0; ``syncse-scratch``'s triplets fit one batch, seen
            three times, and its training seeds agree within 0.01). The runs the presets exist for stay well
            above it: DINO's and the human pairs on ``cpu``, ``intro`` and ``quick`` (about 640 pairs, batch 32)
            take 20 steps, 19 with a non-zero rate; on ``smoke`` (48 inputs, 3 epochs) about 30.
        trim_padding: compute each drawn batch without most of its padding (:mod:`dsgen.training.padding`): its
            real tokens packed into one row where the encoder's transformer keeps packed sentences apart (checked;
            the raw causal-LM encoders), else in groups of rows of similar length, each trimmed to its own longest
            row. The same batches and the same function of each row's tokens (a batch of STS sentences is 2.4-2.9x
            its real tokens padded). False: each batch in one call, padded to its longest row, as
            sentence-transformers does (float rounding differs between the ways, as between any two batch shapes;
            results made before this option existed were made so, and before packing, in groups).
    """

    encoder: str = "minilm-l6"
    batch_size: int = 32
    epochs: float = 1.0
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    evaluation_steps: int = 100
    evaluations_per_epoch: int = 0
    selection_metric: str = "max"
    model_selection: bool = True
    selection_data: str | None = None
    evaluate_at_epoch_end: bool = True
    warmup_steps: int = 0
    ema_decay: float = 0.0
    max_seq_length: int | None = 128
    optimizer: str = "adamw-uncorrected"
    device: str = "auto"
    selection_rule: str = "paper"
    selection_evaluations: int = 10
    adam_epsilon: float | None = None
    min_trained_steps: int = 10
    trim_padding: bool = True

    def __post_init__(self) -> None:
        from dsgen.training.optimizers import OPTIMIZERS

        if self.optimizer not in OPTIMIZERS:
            raise DsgenError(f"optimizer must be one of {', '.join(OPTIMIZERS)} (got '{self.optimizer}')")
        if self.selection_metric not in SELECTION_METRICS:
            raise DsgenError(f"selection_metric must be one of {', '.join(SELECTION_METRICS)} (got '{self.selection_metric}')")
        if self.batch_size < 1 or self.epochs <= 0 or self.learning_rate < 0:
            raise DsgenError("batch_size must be >= 1, epochs > 0 and learning_rate >= 0")
        if not 0 <= self.ema_decay < 1 or self.warmup_steps < 0:
            raise DsgenError(f"ema_decay must be in [0, 1) and warmup_steps >= 0 (got {self.ema_decay}, {self.warmup_steps})")
        if self.selection_data not in (None, "stsb-dev"):
            raise DsgenError(f"selection_data must be stsb-dev or empty (got '{self.selection_data}')")
        if self.min_trained_steps < 1:
            raise DsgenError(f"min_trained_steps must be at least 1 (got {self.min_trained_steps})")
        if self.selection_rule not in SELECTION_RULES:
            from dsgen.suggest import did_you_mean

            raise DsgenError(f"selection_rule must be one of {', '.join(SELECTION_RULES)} (got '{self.selection_rule}')"
                             f"{did_you_mean(self.selection_rule, list(SELECTION_RULES))}")
        if self.selection_evaluations < 1 or (self.adam_epsilon is not None and self.adam_epsilon <= 0):
            raise DsgenError(f"selection_evaluations must be at least 1 and adam_epsilon positive (got "
                             f"{self.selection_evaluations}, {self.adam_epsilon})")
        if self.selection_rule == "ema" and not self.ema_decay:
            raise DsgenError("selection_rule = \"ema\" averages the weights: set ema_decay in (0, 1) beside it")
        if self.selection_rule in ("stsb-dev", "last") and self.ema_decay:
            raise DsgenError(f"selection_rule = \"{self.selection_rule}\" keeps a checkpoint, not an average: "
                             "set ema_decay = 0, or selection_rule = \"ema\"")
        if self.ema_decay and self.model_selection and self.selection_rule == "paper":
            raise DsgenError("weight averaging (ema_decay) replaces model selection: set model_selection = false")

    def selection(self, steps: int | None = None) -> "TrainingConfig":
        """This config with its selection rule applied (:data:`SELECTION_RULES`): the settings that decide which
        weights a run returns, as :func:`fit` and :func:`selection_evaluator` use them. ``steps`` (the run's
        optimizer steps) sets the ``stsb-dev`` rule's interval, ``ceil(steps / selection_evaluations)``."""
        rule = self.selection_rule
        if rule == "paper":
            return self
        if rule == "stsb-dev":
            interval = max(1, math.ceil(steps / self.selection_evaluations)) if steps else self.evaluation_steps
            return self.replace(model_selection=True, selection_data="stsb-dev", selection_metric="cosine",
                                evaluate_at_epoch_end=True, evaluations_per_epoch=0, evaluation_steps=interval)
        return self.replace(model_selection=False, selection_rule=rule)  # last, ema: nothing evaluated


def load_trainable_encoder(cfg: TrainingConfig, seed: int) -> Any:
    """The encoder to train; any freshly initialised part is seeded by ``seed``."""
    from dsgen.encoders import load_encoder

    model = load_encoder(cfg.encoder, cfg.device, seed=seed)
    if cfg.max_seq_length:
        model.max_seq_length = cfg.max_seq_length
    return model


def validation_evaluator(sentences1: list[str], sentences2: list[str], scores: list[float], selection: str = "max",
                         name: str = "validation") -> tuple[Any, str]:
    """Spearman on a held-out split of generated pairs, for model selection during training; returns
    the evaluator and the name of the metric to select by.

    ``selection="max"``: the best of the cosine, Euclidean, Manhattan and dot-product Spearman, as
    sentence-transformers 0.4 (DINO's and RISE's code) scored; ``"cosine"``: cosine only. This is
    sentence-transformers' ``EmbeddingSimilarityEvaluator``.
    """
    from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator

    fns = ["cosine", "euclidean", "manhattan", "dot"] if selection == "max" else ["cosine"]
    evaluator = EmbeddingSimilarityEvaluator(sentences1, sentences2, scores, similarity_fn_names=fns, name=name,
                                             show_progress_bar=False, write_csv=False)
    return evaluator, f"eval_{name}_spearman_{selection}"


def stsb_dev_pairs(root: Any = None) -> list[tuple[str, str, float]]:
    """The STS benchmark dev split as (sentence 1, sentence 2, gold / 5): the human pairs a checkpoint is chosen
    on with ``selection_data = "stsb-dev"``."""
    from dsgen.data.sts import data_dir, read_stsb

    dev = read_stsb(data_dir(root), "dev")
    return [(a, b, s / 5.0) for a, b, s in zip(dev.sentences1, dev.sentences2, dev.scores)]


def selection_data_key(root: Any = None) -> str:
    """The key of those pairs (:func:`dsgen.identity.evaluation_data_key`), for run keys."""
    from dsgen.identity import evaluation_data_key

    return evaluation_data_key({"stsb-dev": [list(p) for p in stsb_dev_pairs(root)]})


def selection_data_of(config: Any) -> str | None:
    """The data a trainer's config chooses its checkpoint on, its selection rule applied (``stsb-dev``; None: its
    own validation pairs, or no selection): what a run key must hold the fingerprint of."""
    if isinstance(config, TrainingConfig):
        effective = config.selection()
        return effective.selection_data if effective.model_selection else None
    return getattr(config, "selection_data", None)


def selection_evaluator(cfg: TrainingConfig, validation: list[tuple[str, str, float]],
                        template: Callable[[str], str] = lambda text: text) -> tuple[Any, str | None]:
    """The evaluator that chooses the checkpoint, with the name of its metric (None, None: nothing to
    choose on): the STS benchmark dev split for ``selection_data = "stsb-dev"`` (gold / 5), else the
    method's own validation pairs (at least two), as the config's selection rule says (:meth:`TrainingConfig.selection`;
    None, None under ``last`` and ``ema``). ``template`` wraps every sentence (GenSE's prompt)."""
    cfg = cfg.selection()
    if not cfg.model_selection:
        return None, None
    if cfg.selection_data == "stsb-dev":
        validation, name = stsb_dev_pairs(), "stsb-dev"
    else:
        name = "validation"
    if len(validation) < 2:
        return None, None
    return validation_evaluator([template(a) for a, _, _ in validation], [template(b) for _, b, _ in validation],
                                [float(y) for _, _, y in validation], cfg.selection_metric, name=name)


def evaluation_interval(cfg: TrainingConfig, steps_per_epoch: int) -> int:
    if cfg.evaluations_per_epoch > 0:
        return max(1, steps_per_epoch // cfg.evaluations_per_epoch)
    return max(1, cfg.evaluation_steps)


def best_weights(model: Any, metric: str, greater_is_better: bool = True) -> Any:
    """A trainer callback that keeps the best evaluated weights in memory (a copy of the trainable
    parameters; frozen ones never change) and puts them back when training ends: what the libraries'
    best-checkpoint reload does, without writing and reading a checkpoint at every evaluation (seconds
    each for a model with a large embedding matrix). Of equal scores the first is kept, as the libraries do."""
    from transformers import TrainerCallback

    class BestWeights(TrainerCallback):
        def __init__(self) -> None:
            self.best: float | None = None
            self.params = [p for p in model.parameters() if p.requires_grad]
            self.kept: list[Any] | None = None

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None, **kw: Any) -> None:
            if not metrics or metric not in metrics:
                return
            value = float(metrics[metric])
            if self.best is None or (value > self.best if greater_is_better else value < self.best):
                self.best = value
                self.kept = [p.detach().clone() for p in self.params]

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            import torch

            if self.kept is not None:
                with torch.no_grad():
                    for p, k in zip(self.params, self.kept):
                        p.copy_(k)

    return BestWeights()


class WeightAverage:
    """An exponential moving average of parameters: starts at their values now, ``update()`` after each
    step (``a <- decay * a + (1 - decay) * w``), ``apply()`` writes the averages into the parameters."""

    def __init__(self, params: list[Any], decay: float) -> None:
        self.params, self.decay = params, decay
        self.average = [p.detach().clone() for p in params]

    def update(self) -> None:
        import torch

        with torch.no_grad():
            torch._foreach_lerp_(self.average, [p.detach() for p in self.params], 1.0 - self.decay)

    def apply(self) -> None:
        import torch

        with torch.no_grad():
            for p, a in zip(self.params, self.average):
                p.copy_(a)


def step_recorder() -> Any:
    """A trainer callback that records every optimizer step actually taken, with the learning rate it was taken
    at: a step pre-hook on the torch optimizer reads the rate its parameter groups hold as the step runs (the
    largest of them), i.e. what the scheduler set, not what the config asks. A step the trainer skips (a
    gradient scaler's overflow) never reaches the optimizer and is not counted."""
    from transformers import TrainerCallback

    class StepRecorder(TrainerCallback):
        def __init__(self) -> None:
            self.rates: list[float] = []
            self.handle: Any = None

        def _record(self, optimizer: Any, args: Any, kwargs: Any) -> None:
            self.rates.append(max(float(group["lr"]) for group in optimizer.param_groups))

        def on_train_begin(self, args: Any, state: Any, control: Any, optimizer: Any = None, **kw: Any) -> None:
            inner = getattr(optimizer, "optimizer", optimizer)  # accelerate wraps the torch optimizer
            self.handle = inner.register_step_pre_hook(self._record)

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if self.handle is not None:
                self.handle.remove()
                self.handle = None

    return StepRecorder()


def weight_update(before: list[Any], after: list[Any]) -> float:
    """The relative L2 norm of a change of parameters, ``||after - before|| / ||before||`` over all of them
    together (in float64), or the absolute norm when ``before`` is all zeros."""
    import torch

    with torch.no_grad():
        change = sum(float((a.double() - b.double()).pow(2).sum()) for a, b in zip(after, before))
        size = sum(float(b.double().pow(2).sum()) for b in before)
    return math.sqrt(change / size) if size > 0 else math.sqrt(change)


UNCHANGED = 1e-7
"""A relative weight update below this is no change: float32 resolves relative differences of about 1.2e-7
(its machine epsilon), so an update below it moved no weight by more than rounding."""

TRAINING_RECORD = ("optimizer_steps", "nonzero_lr_steps", "weight_update", "min_trained_steps")
"""The fields every trainer's log carries (:func:`fit` records them) and :func:`training_failure` reads."""


def training_failure(log: dict[str, Any] | None) -> str | None:
    """Why a run did not train (one line, ready for :class:`dsgen.runs.records.RunFailed`), or None when it did.

    The one rule for fresh and cached results alike: a run trained when its log (:func:`fit`) records at least
    ``min_trained_steps`` optimizer steps taken with a non-zero learning rate (:class:`TrainingConfig`, where the
    floor is justified) and a weight update (relative L2 norm of the change of the trained parameters, from the
    start to the returned weights, after model selection or averaging) of at least :data:`UNCHANGED`. A log
    without these fields (a result made before dsgen recorded them, or a trainer that does not) did not show
    that it trained, and fails too. A run that diverged, its weight update or a loss (``nonfinite_loss_steps``, the
    optimizer steps whose loss was not finite, recorded only when there are any) not a finite number, fails: its
    weights are no model. A validation Spearman that is undefined (constant gold labels or cosines on a tiny
    validation set) is no divergence: it is recorded as null.
    """
    log = log or {}
    if any(log.get(k) is None for k in TRAINING_RECORD):
        return ("its training log records no optimizer steps or weight update (made before dsgen recorded them): "
                "nothing shows that it trained; run it again")
    steps, trained, update, floor = (log[k] for k in TRAINING_RECORD)
    lower = f"lower the learning rate (it was {log['learning_rate']:g})" if isinstance(
        log.get("learning_rate"), (int, float)) else "lower the learning rate"
    if not _finite(update):
        return f"diverged: the weight update is {update}, not a finite number (the weights blew up); {lower}"
    if log.get("nonfinite_loss_steps"):
        return (f"diverged: the loss was not finite at {log['nonfinite_loss_steps']} of {steps} optimizer steps; "
                f"{lower}")
    n, unit = log.get("train_examples", "?"), log.get("train_unit", "examples")
    made = (f"{n} {unit.removesuffix('s') + ' makes' if n == 1 else unit + ' make'} "
            f"{'one optimizer step' if steps == 1 else f'{steps} optimizer steps'}")
    if steps == 0:
        return f"trained nothing: the optimizer took no step ({log.get('steps', '?')} planned)"
    if trained == 0 and steps == 1:
        return f"trained nothing: {made}, all of it warm-up (learning rate 0); use more inputs"
    if trained == 0:
        return f"trained nothing: {made}, every one at learning rate 0; check the learning rate"
    if update < UNCHANGED:  # e.g. model selection kept the first step, taken at learning rate 0
        kept = (f"model selection kept step {log.get('best_step')} of {steps}, " if log.get("weights") ==
                "best validation step" else "")
        return (f"trained nothing: the weights returned are the starting ones ({kept}relative update {update:.1e}); "
                "use more inputs")
    if trained < floor:
        return (f"trained too little: {made}, {trained} with a non-zero learning rate, fewer than the {floor} a run "
                "needs (trainer setting min_trained_steps); use more inputs")
    return None


def _percent(value: float) -> float | None:
    """A validation Spearman x 100 as the training log records it; None where it is undefined (constant input)."""
    return round(value * 100, 3) if math.isfinite(value) else None


def _finite(value: Any) -> bool:
    """Whether ``value`` is a finite number (a NaN read back from an old result file, or a string naming one, is
    not)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def loss_watch(loss: Any) -> tuple[list[int], Any]:
    """Count the calls of the loss module ``loss`` whose value is not finite (a forward hook: the loss, the model card
    and the training are unchanged); returns (the count, in a list, and the hook's handle to remove)."""
    import torch

    count = [0]

    def watch(module: Any, inputs: Any, output: Any) -> None:
        if isinstance(output, torch.Tensor) and not bool(torch.isfinite(output.detach()).all()):
            count[0] += 1

    return count, loss.register_forward_hook(watch)


def selection_text(log: dict[str, Any]) -> str:
    """How one run's returned weights were chosen, in words, from its training log (:func:`fit` records it)."""
    if log.get("selection_rule") is None:
        return "not recorded (a result made before dsgen recorded its selection)"
    if log.get("weights") != "best validation step":
        return str(log.get("weights"))
    data = "STSb dev" if log.get("selection_data") == "stsb-dev" else "its own validation pairs"
    metric = "cosine Spearman" if log.get("selection_metric") == "cosine" else "the best of four Spearmans"
    ends = ", each epoch's end and the last step" if log.get("selection_at_epoch_end") else " only"
    return f"the best checkpoint by {metric} on {data}, evaluated every {log.get('evaluation_interval')} steps{ends}"


def selection_summary(logs: dict[str, list[dict[str, Any]]]) -> str:
    """One line for a comparison table: the selection rule its trained methods ran under (``logs``: method -> its
    runs' training logs). One rule for every method is named once (with its intervals when it scales them); each
    method's own rule (``paper``) is spelled out per method, so a reader sees that the rows were selected apart."""
    rules = {log.get("selection_rule") for runs in logs.values() for log in runs}
    if not logs:
        return ""
    if len(rules) == 1 and None not in rules and "paper" not in rules:
        (rule,) = rules
        text = f"one rule for every trained method, `selection_rule = \"{rule}\"`: {SELECTION_RULES[rule]}"
        if rule == "stsb-dev":
            text += " (every " + ", ".join(f"`{m}` {'/'.join(sorted({str(log.get('evaluation_interval')) for log in runs}))}"
                                           for m, runs in logs.items()) + " steps)"
        return text
    per = {m: "; ".join(sorted({selection_text(log) for log in runs})) for m, runs in logs.items()}
    named = ", ".join(f"`{r}`" for r in sorted(r for r in rules if r)) or "not recorded"
    return (f"each method's own (selection_rule {named}), so the rows were not selected alike: "
            + "; ".join(f"`{m}`: {text}" for m, text in per.items()))


def fit(model: Any, train_dataset: Any, loss: Any, cfg: TrainingConfig, seed: int, evaluator: Any = None,
        metric: str | None = None, no_duplicates: bool = False, progress: bool = True,
        unit: str = "pairs") -> dict[str, Any]:
    """Train ``model`` in place; return a log: the schedule planned (``steps``), what the optimizer did
    (``optimizer_steps`` taken, ``nonzero_lr_steps`` among them taken at a non-zero learning rate, read from the
    optimizer at each step, and ``weight_update``, the relative L2 norm of the change of the trained parameters
    from the start to the weights returned, after model selection or averaging), the floor the run is held to
    (``min_trained_steps``; :func:`training_failure` judges), evaluations, best step and validation score,
    seconds. ``unit`` names a row of ``train_dataset`` (pairs, triplets) in the log and in a failure's message."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers
    from transformers import TrainerCallback

    from dsgen.training.optimizers import optimizer_cls_and_kwargs
    from dsgen.training.trainer_run import train_with_progress

    from dsgen.models import resolve_device

    optimizer = optimizer_cls_and_kwargs(cfg.optimizer, cfg.learning_rate)
    if optimizer is not None and cfg.adam_epsilon is not None:
        optimizer = (optimizer[0], {**optimizer[1], "eps": cfg.adam_epsilon})

    n = len(train_dataset)
    steps_per_epoch = max(1, math.ceil(n / cfg.batch_size))
    steps = max(1, math.ceil(steps_per_epoch * cfg.epochs))
    cfg = cfg.selection(steps)  # the selection rule's settings (a no-op for the methods' own rule, "paper")
    interval = evaluation_interval(cfg, steps_per_epoch)
    select = evaluator is not None and metric is not None and cfg.model_selection
    started = time.perf_counter()
    history: list[tuple[int, float]] = []
    trained = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in trained]
    recorder = step_recorder()

    class Averaging(TrainerCallback):
        """Polyak averaging of the trainable weights over the optimizer steps (``ema_decay``), swapped
        into the model when training ends."""

        def __init__(self) -> None:
            self.average = WeightAverage([p for p in model.parameters() if p.requires_grad], cfg.ema_decay)

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.average.update()

        def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            self.average.apply()

    class Schedule(TrainerCallback):
        """Evaluate also at each epoch's end and at the last step, once per step."""

        def __init__(self) -> None:
            self.last = -1

        def _ask(self, state: Any, control: Any) -> None:
            if state.global_step != self.last:
                control.should_evaluate = True

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step >= state.max_steps and cfg.evaluate_at_epoch_end:
                self._ask(state, control)

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if cfg.evaluate_at_epoch_end:
                self._ask(state, control)

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: Any = None, **kw: Any) -> None:
            self.last = state.global_step
            if metrics and metric in metrics:
                history.append((state.global_step, float(metrics[metric])))

    def build(output_dir: str, callback: Any) -> Any:
        args = SentenceTransformerTrainingArguments(
            output_dir=output_dir, per_device_train_batch_size=cfg.batch_size, num_train_epochs=cfg.epochs,
            learning_rate=cfg.learning_rate, warmup_steps=cfg.warmup_steps or cfg.warmup_ratio,
            weight_decay=cfg.weight_decay, adam_epsilon=cfg.adam_epsilon if cfg.adam_epsilon is not None else 1e-8,
            lr_scheduler_type="linear", seed=seed, data_seed=seed,
            eval_strategy="steps" if select else "no", eval_steps=interval if select else None,
            save_strategy="no",  # the best weights are kept in memory (Schedule)
            batch_sampler=BatchSamplers.NO_DUPLICATES if no_duplicates else BatchSamplers.BATCH_SAMPLER,
            logging_strategy="no", report_to="none", disable_tqdm=True, use_cpu=resolve_device(cfg.device) == "cpu",
            dataloader_pin_memory=False)
        callbacks = [callback, recorder, Schedule(), best_weights(model, metric)] if select else [callback, recorder]
        if cfg.ema_decay:
            callbacks.append(Averaging())
        return SentenceTransformerTrainer(model=model, args=args, train_dataset=train_dataset, loss=loss,
                                          evaluator=evaluator if select else None, callbacks=callbacks,
                                          optimizer_cls_and_kwargs=optimizer)

    nonfinite, watching = loss_watch(loss)
    try:
        train_with_progress(build, "train", int(steps), progress, trim_padding=cfg.trim_padding)
    finally:
        watching.remove()
    best = max(history, key=lambda h: h[1]) if history else None
    if best is not None:
        # check that the weights returned are the ones that scored the best evaluation
        restored = float(evaluator(model)[metric.removeprefix("eval_")])
        if abs(restored - best[1]) > 1e-4:
            raise RuntimeError(f"model selection kept step {best[0]} (validation {best[1]:.5f}) but the returned model "
                               f"scores {restored:.5f}: the best checkpoint was not restored")
    update = weight_update(start, trained)
    del start
    return {"train_examples": n, "train_unit": unit, "steps": int(steps), "optimizer_steps": len(recorder.rates),
            "nonzero_lr_steps": sum(rate > 0 for rate in recorder.rates), "weight_update": float(f"{update:.4g}"),
            "min_trained_steps": cfg.min_trained_steps, "evaluation_interval": interval if select else None,
            "weights": f"exponential moving average, decay {cfg.ema_decay:g}" if cfg.ema_decay else "last step"
            if not select else "best validation step",
            "selection_rule": cfg.selection_rule, "selection_data": (cfg.selection_data or "validation") if select else None,
            "selection_at_epoch_end": cfg.evaluate_at_epoch_end if select else None,
            "selection_metric": cfg.selection_metric if select else None,
            "validation_history": [{"step": s, "spearman": _percent(v)} for s, v in history],
            "best_step": best[0] if best else int(steps), "best_validation_spearman": _percent(best[1]) if best else None,
            **({"nonfinite_loss_steps": nonfinite[0]} if nonfinite[0] else {}),  # a diverged run (training_failure)
            "train_seconds": round(time.perf_counter() - started, 2)}

