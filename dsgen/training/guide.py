"""An unsupervised SimCSE guide: the run's encoder trained on the method's own input sentences with dropout noise as
the only augmentation, used by MultiCSR's loss to mask in-batch false negatives.

MultiCSR masks the candidates that a pre-trained unsupervised SimCSE model finds too similar to the anchor
(``Circle-Ming/MultiCSR@596898f``: ``README.md`` "We highly suggest using the pre-trained checkpoints of SimCSE",
``run.sh -n princeton-nlp/unsup-simcse-bert-base-uncased``; loaded as ``pretrained_model``, ``train.py#L380-L381``).
No such checkpoint exists for every encoder dsgen trains, so the guide is trained here the way SimCSE trains one
(Gao et al., 2021; ``princeton-nlp/SimCSE@49fa580:run_unsup_example.sh#L7-L26``): each sentence is its own positive,
the two views differing only by dropout, InfoNCE over the batch at temperature 0.05, batch 64, lr 3e-5, one epoch,
32 tokens, the checkpoint chosen on STSb dev every 125 steps; no warm-up, no weight decay (``train.py#L188``,
``OurTrainingArguments`` keeps transformers 4.2.1's defaults). It starts from the run's encoder and reads the
method's own input sentences (SimCSE: a million Wikipedia sentences), so it depends on the data and the encoder
only: it is a data-level fit (:mod:`dsgen.data.fits`, kind ``simcse-guide``, reading the run's ``inputs``), made once
per (encoder, inputs, recipe, data seed), stored under ``cache/fits/`` and shared by every run that reads the same
data; the contrastive trainer declares it (:meth:`dsgen.training.contrastive.ContrastiveTrainer.data_fit`).

This is sentence-transformers' ``MultipleNegativesRankingLoss`` on (x, x) pairs, the library's recipe for
unsupervised SimCSE. An encoder without dropout (the causal-LM slices of :mod:`dsgen.encoders`: Llama-family models
have none) would see two identical views, so SimCSE's dropout rate (0.1, BERT's) is set on its attention
(:func:`dropout_noise`).
"""

from __future__ import annotations

from typing import Any

from dsgen.errors import DsgenError

UNSUP_SIMCSE = {"batch_size": 64, "learning_rate": 3e-5, "epochs": 1.0, "max_seq_length": 32, "temperature": 0.05,
                "warmup_ratio": 0.0, "weight_decay": 0.0, "optimizer": "adamw-torch", "evaluation_steps": 125,
                "dropout": 0.1, "seed": 42}
"""SimCSE's unsupervised recipe (``run_unsup_example.sh#L7-L26``; seed: transformers' ``TrainingArguments`` default)."""

GUIDE_KIND, GUIDE_VERSION = "simcse-guide", 1  # the data-level fit's kind, and its algorithm's version


def dropout_noise(model: Any, rate: float) -> str:
    """Make sure ``model`` has dropout in training mode (SimCSE's only augmentation); returns what it has. A model
    with dropout keeps its own; one without (every dropout probability 0) gets ``rate`` on each ``nn.Dropout`` and
    on each attention module's ``attention_dropout`` (Llama-family attention reads it while training)."""
    from torch import nn

    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    attention = [m for m in model.modules() if isinstance(getattr(m, "attention_dropout", None), (int, float))
                 and not isinstance(getattr(m, "attention_dropout"), bool)]
    if any(m.p > 0 for m in dropouts) or any(m.attention_dropout > 0 for m in attention):
        return "the encoder's own dropout"
    if not dropouts and not attention:
        raise DsgenError("the guide's encoder has no dropout to make SimCSE's two views differ; use another encoder "
                         "or a named guide")
    for m in dropouts:
        m.p = rate
    for m in attention:
        m.attention_dropout = rate
    return f"dropout {rate:g} set (the encoder has none)"


def train_simcse_guide(encoder: str, sentences: list[str], device: str = "auto", progress: bool = True,
                       recipe: dict[str, Any] | None = None, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
    """Train an unsupervised SimCSE guide from ``encoder`` on ``sentences`` (the module docstring); returns the
    model (frozen, in evaluation mode) and its training log. ``seed`` (default: the recipe's) seeds its
    initialisation, dropout and batch order: a data-level fit passes the data seed (:mod:`dsgen.data.fits`)."""
    from datasets import Dataset
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    from dsgen.training.fit import TrainingConfig, fit, load_trainable_encoder, selection_evaluator

    r = {**UNSUP_SIMCSE, **(recipe or {})}
    seed = r["seed"] if seed is None else seed
    texts = list(dict.fromkeys(s for s in sentences if s))
    if len(texts) < 2:
        raise DsgenError(f"the SimCSE guide needs at least two input sentences (got {len(texts)})")
    cfg = TrainingConfig(encoder=encoder, batch_size=r["batch_size"], epochs=r["epochs"], learning_rate=r["learning_rate"],
                         warmup_ratio=r["warmup_ratio"], weight_decay=r["weight_decay"], optimizer=r["optimizer"],
                         max_seq_length=r["max_seq_length"], selection_data="stsb-dev", selection_metric="cosine",
                         evaluation_steps=r["evaluation_steps"], evaluate_at_epoch_end=False, device=device,
                         min_trained_steps=1)
    model = load_trainable_encoder(cfg, seed)
    noise = dropout_noise(model, r["dropout"])
    evaluator, metric = selection_evaluator(cfg, [])
    loss = MultipleNegativesRankingLoss(model, scale=1.0 / r["temperature"])
    log = fit(model, Dataset.from_dict({"anchor": texts, "positive": texts}), loss, cfg, seed, evaluator, metric,
              progress=progress, unit="sentences")
    model.eval()
    model.requires_grad_(False)
    return model, {"recipe": "unsupervised SimCSE", "sentences": len(texts), "noise": noise, "seed": seed, **log}


def save_guide(model: Any, folder: Any) -> None:
    """Write a trained guide into a data-level fit's folder (a sentence-transformers model folder)."""
    model.save(str(folder))


def load_guide(folder: Any, device: str = "auto") -> Any:
    """A stored guide, frozen and in evaluation mode."""
    from dsgen.encoders import load_saved
    from dsgen.models import resolve_device

    model = load_saved(folder, resolve_device(device), local_files_only=True)
    model.eval()
    model.requires_grad_(False)
    return model
