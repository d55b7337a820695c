"""A Hugging Face / sentence-transformers ``Trainer`` run the way dsgen runs every one: behind dsgen's rich progress
bar, its checkpoints in a temporary folder, the libraries' own printing dropped, the process's heap frozen
for the run (:func:`dsgen.heap.heap_frozen`), and its batches computed without most of their padding where asked
(:mod:`dsgen.training.padding`). Serves the encoders' training (:mod:`dsgen.training.fit`) and RISE's SDI
classifier (:mod:`dsgen.reweighting.sdi`)."""

from __future__ import annotations

import tempfile
from typing import Any, Callable

from dsgen.heap import heap_frozen


def train_with_progress(build: Callable[[str, Any], Any], description: str, steps: int, progress: bool = True,
                        on_evaluate: Callable[[int, dict[str, float]], None] | None = None,
                        trim_padding: bool = False) -> None:
    """Run a Hugging Face / sentence-transformers trainer behind dsgen's rich progress bar.

    ``build(output_dir, callback)`` returns the trainer; the output folder is temporary (checkpoints
    for model selection) and removed afterwards, and the libraries' own printing callbacks are dropped.
    ``trim_padding``: the trainer's model computes each batch without most of its padding, packed or in groups of
    similar length (:func:`dsgen.training.padding.trimmed_padding`) while it trains, on one device; a trainer that
    spreads the model over several GPUs (``DataParallel``, whose replicas copy the module's attributes and would run
    the original's forward) computes its batches padded whole.
    """
    from transformers import TrainerCallback

    from dsgen.progress import progress_bar
    from dsgen.training.padding import trimmed_padding

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
        with heap_frozen(), trimmed_padding(trainer.model, trim_padding and trainer.args.n_gpu <= 1):
            trainer.train()


def noise_callbacks(trainer: Any) -> list[Any]:
    """Callbacks that print next to the rich bar: metric dicts, tqdm bars, model-card widgets
    (dsgen keeps the trained model in memory and writes no model card)."""
    from sentence_transformers.base.model_card import BaseModelCardCallback
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    noisy = (PrinterCallback, ProgressCallback, BaseModelCardCallback)
    return [cb for cb in trainer.callback_handler.callbacks if isinstance(cb, noisy)]
