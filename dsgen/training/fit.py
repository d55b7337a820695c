"""Runs a sentence-transformers training job the way every dsgen trainer wants it.

``SentenceTransformerTrainer`` does the work (AdamW, linear warm-up and decay, evaluation
every N steps, keeping the best checkpoint by the validation metric). This module only sets
its arguments from a :class:`TrainingConfig`, replaces tqdm with dsgen's rich progress bar,
and cleans up the temporary checkpoints.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from dsgen.config import Config


@dataclass
class TrainingConfig(Config):
    """Settings shared by the trainers. Defaults are DINO's (Sentence-BERT's defaults).

    Args:
        encoder: ``minilm-l6`` (embedded all-MiniLM-L6-v2), any sentence-transformers or HF
            id or local directory; a plain transformer gets mean pooling.
        batch_size / epochs / learning_rate / warmup_ratio / weight_decay: optimisation
            (32, 1, 2e-5, 10% linear warm-up, AdamW with weight decay 0.01 as Sentence-BERT).
        evaluation_steps: evaluate on the validation split every N steps and keep the best
            model (DINO: "the exact number of training steps is determined based on Spearman's
            rank correlation on the validation set"). 0: ten evaluations per epoch.
        model_selection: keep the best validation checkpoint (False: keep the last step).
        max_seq_length: truncate inputs (None: the encoder's own limit).
        device: cpu, cuda or auto.
    """

    encoder: str = "minilm-l6"
    batch_size: int = 32
    epochs: float = 1.0
    learning_rate: float = 2e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    evaluation_steps: int = 0
    model_selection: bool = True
    max_seq_length: int | None = None
    device: str = "auto"


def load_trainable_encoder(cfg: TrainingConfig) -> Any:
    from dsgen.models import load_encoder

    model = load_encoder(cfg.encoder, cfg.device)
    if cfg.max_seq_length:
        model.max_seq_length = cfg.max_seq_length
    return model


def fit(model: Any, train_dataset: Any, loss: Any, cfg: TrainingConfig, seed: int, evaluator: Any = None,
        metric: str | None = None, no_duplicates: bool = False, progress: bool = True) -> dict[str, Any]:
    """Train ``model`` in place; return a log (steps, best step and validation score, seconds)."""
    from sentence_transformers import SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.base.sampler import BatchSamplers

    from dsgen.models import resolve_device

    n = len(train_dataset)
    steps = max(1, math.ceil(n / cfg.batch_size) * cfg.epochs)
    eval_steps = cfg.evaluation_steps or max(1, math.ceil(steps / 10))
    select = evaluator is not None and metric is not None and cfg.model_selection
    started = time.perf_counter()
    history: list[tuple[int, float]] = []

    def on_evaluate(step: int, metrics: dict[str, float]) -> None:
        if metric in metrics:
            history.append((step, float(metrics[metric])))

    def build(output_dir: str, callback: Any) -> Any:
        args = SentenceTransformerTrainingArguments(
            output_dir=output_dir, per_device_train_batch_size=cfg.batch_size, num_train_epochs=cfg.epochs,
            learning_rate=cfg.learning_rate, warmup_steps=cfg.warmup_ratio, weight_decay=cfg.weight_decay,
            lr_scheduler_type="linear", seed=seed, data_seed=seed,
            eval_strategy="steps" if select else "no", eval_steps=eval_steps if select else None,
            save_strategy="steps" if select else "no", save_steps=eval_steps if select else None,
            save_only_model=True, save_total_limit=1, load_best_model_at_end=select,
            metric_for_best_model=metric if select else None, greater_is_better=True,
            batch_sampler=BatchSamplers.NO_DUPLICATES if no_duplicates else BatchSamplers.BATCH_SAMPLER,
            logging_strategy="no", report_to="none", disable_tqdm=True, use_cpu=resolve_device(cfg.device) == "cpu",
            dataloader_pin_memory=False)
        return SentenceTransformerTrainer(model=model, args=args, train_dataset=train_dataset, loss=loss,
                                          evaluator=evaluator if select else None, callbacks=[callback])

    train_with_progress(build, "train", int(steps), progress, on_evaluate)
    best = max(history, key=lambda h: h[1]) if history else None
    return {"train_examples": n, "steps": int(steps), "evaluation_steps": eval_steps if select else None,
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
