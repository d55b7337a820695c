"""Runs a sentence-transformers training job the way every dsgen trainer wants it.

``SentenceTransformerTrainer`` does the work (AdamW, linear warm-up and decay, evaluation,
keeping the best checkpoint by the validation metric). This module sets its arguments from a
:class:`TrainingConfig`, adds the evaluation schedule DINO's and RISE's code use (every N steps,
at the end of every epoch and always at the last step), replaces tqdm with dsgen's rich progress
bar, and cleans up the temporary checkpoints.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from dsgen.config import Config
from dsgen.errors import DsgenError

SELECTION_METRICS = ("max", "cosine")


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
        min_trained_steps: the fewest optimizer steps with a non-zero learning rate a run must take to count as
            trained (:func:`training_failure`; a run below it is a failed run, never a score). 10: with fewer,
            every batch is more than a tenth of all the model learned, and the row shows the starting encoder
            nudged by a few batches, not what the method's data teaches (on ``cpu``, ``e5-sts``'s 22 pairs make
            one step, all of it warm-up at learning rate 0; ``syncse-scratch``'s triplets fit one batch, seen
            three times, and its training seeds agree within 0.01). The runs the presets exist for stay well
            above it: DINO's and the human pairs on ``cpu``, ``intro`` and ``quick`` (about 640 pairs, batch 32)
            take 20 steps, 19 with a non-zero rate; on ``smoke`` (48 inputs, 3 epochs) about 30.
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
    min_trained_steps: int = 10

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
        if self.ema_decay and self.model_selection:
            raise DsgenError("weight averaging (ema_decay) replaces model selection: set model_selection = false")


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


def selection_evaluator(cfg: TrainingConfig, validation: list[tuple[str, str, float]],
                        template: Callable[[str], str] = lambda text: text) -> tuple[Any, str | None]:
    """The evaluator that chooses the checkpoint, with the name of its metric (None, None: nothing to
    choose on): the STS benchmark dev split for ``selection_data = "stsb-dev"`` (gold / 5), else the
    method's own validation pairs (at least two). ``template`` wraps every sentence (GenSE's prompt)."""
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
    """Why a run did not train (one line, ready for :class:`dsgen.runner.RunFailed`), or None when it did.

    The one rule for fresh and cached results alike: a run trained when its log (:func:`fit`) records at least
    ``min_trained_steps`` optimizer steps taken with a non-zero learning rate (:class:`TrainingConfig`, where the
    floor is justified) and a weight update (relative L2 norm of the change of the trained parameters, from the
    start to the returned weights, after model selection or averaging) of at least :data:`UNCHANGED`. A log
    without these fields (a result made before dsgen recorded them, or a trainer that does not) did not show
    that it trained, and fails too.
    """
    log = log or {}
    if any(log.get(k) is None for k in TRAINING_RECORD):
        return ("its training log records no optimizer steps or weight update (made before dsgen recorded them): "
                "nothing shows that it trained; run it again")
    steps, trained, update, floor = (log[k] for k in TRAINING_RECORD)
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

    from dsgen.models import resolve_device

    n = len(train_dataset)
    steps_per_epoch = max(1, math.ceil(n / cfg.batch_size))
    steps = max(1, math.ceil(steps_per_epoch * cfg.epochs))
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
            weight_decay=cfg.weight_decay,
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
                                          optimizer_cls_and_kwargs=optimizer_cls_and_kwargs(cfg.optimizer, cfg.learning_rate))

    train_with_progress(build, "train", int(steps), progress)
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
            "selection_metric": cfg.selection_metric if select else None,
            "validation_history": [{"step": s, "spearman": round(v * 100, 3)} for s, v in history],
            "best_step": best[0] if best else int(steps), "best_validation_spearman": round(best[1] * 100, 3) if best else None,
            "train_seconds": round(time.perf_counter() - started, 2)}


def train_with_progress(build: Callable[[str, Any], Any], description: str, steps: int, progress: bool = True,
                        on_evaluate: Callable[[int, dict[str, float]], None] | None = None) -> None:
    """Run a Hugging Face / sentence-transformers trainer behind dsgen's rich progress bar.

    ``build(output_dir, callback)`` returns the trainer; the output folder is temporary (checkpoints
    for model selection) and removed afterwards, and the libraries' own printing callbacks are dropped.
    """
    from transformers import TrainerCallback

    from dsgen.progress import progress_bar

    with tempfile.TemporaryDirectory(prefix="dsgen-train-", ignore_cleanup_errors=True) as tmp, \
            progress_bar(description, total=steps, unit="steps", enabled=progress) as advance:

        class _Progress(TrainerCallback):
            def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
                advance(1)

            def on_evaluate(self, args, state, control, metrics=None, **kw):  # noqa: ANN001
                if on_evaluate and metrics:
                    on_evaluate(state.global_step, metrics)

        trainer = build(tmp, _Progress())
        for cb in noise_callbacks(trainer):
            trainer.remove_callback(cb)
        trainer.train()


def noise_callbacks(trainer: Any) -> list[Any]:
    """Callbacks that print next to the rich bar: metric dicts, tqdm bars, model-card widgets
    (dsgen keeps the trained model in memory and writes no model card)."""
    from sentence_transformers.base.model_card import BaseModelCardCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    noisy = (PrinterCallback, ProgressCallback, BaseModelCardCallback)
    return [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, noisy)]
