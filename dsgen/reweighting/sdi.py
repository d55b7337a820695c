"""RISE's synthetic data identification (SDI) and the importance weights it gives
(Reweighting based on Importance of machine-written SEntences, COLING 2022).

A binary sequence classifier (machine = 0, human = 1), initialised from an encoder's
transformer, learns to tell generated sentences x2 from human-written sentences of the source.
A pair's weight is the classifier's temperature-scaled confidence that its x2 is human:
``p_D = softmax(logits / tau)[human]``.

The classifier's recipe is RISE's (``discrimination.py`` of its code): lr 1e-5, 5 epochs,
batch 32, 10% linear warm-up, no weight decay, inputs cut at 128 tokens, evaluated after every
epoch on held-out sentences, keeping the epoch with the lowest validation loss. RISE starts
from bert-base-uncased; here the backbone is the preset's (no BERT ships offline).

The classifier is a function of the data, so it is a data-level fit (:mod:`dsgen.data.fits`): fitted once
per dataset, seeded with the data seed, and shared by every run that reads it (``rise`` and ``rise-filter``
of a data seed and all their training seeds), as RISE fits one classifier for its dataset
(``discrimination.py``, with a seed of its own) and every training run reads the scores it wrote
(``run_training.py#L196-L199``, ``#L315-L317``). It reads the
dataset's generated x2 after the postprocessing filters that do not depend on the training seed (the random
augmentation pairs, drawn per training seed, carry x2 of the same set) and the human source (or the inputs,
``human = "inputs"``). Only the scoring of a run's pairs, and the temperature, filter and random-pair policy
that turn scores into weights, are the run's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsgen import citations
from dsgen.config import Config
from dsgen.data.fits import DataFit, FitData
from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.reweighting.base import REWEIGHTERS, ReweightContext, Reweighter, ReweightReport, source_texts

MACHINE, HUMAN = 0, 1
RANDOM_PAIR_POLICIES = ("score", "one")
HUMAN_SOURCES = ("source", "inputs")


@dataclass
class SdiConfig(Config):
    """Settings of the SDI classifier and of how its scores become weights.

    Args:
        encoder: transformer the classifier starts from (``minilm-l6``: the embedded
            all-MiniLM-L6-v2; any HF encoder id or directory). RISE uses bert-base-uncased.
        input: ``single``: the machine sentence x2 alone (RISE's default); ``pair``: (x1, x2).
        human: the human class. ``source`` (RISE): every sentence of the source the inputs come
            from (all STS benchmark train sentences for ``stsb-train``), subsampled to the number
            of machine sentences; ``inputs``: only this run's inputs x1.
        temperature: tau of ``softmax(logits / tau)`` (RISE: STSb 0.5, QQP 0.9, MRPC 0.7).
        epochs / batch_size / learning_rate / warmup_ratio / weight_decay: classifier training
            (RISE: 5, 32, 1e-5, 10%, 0).
        validation_fraction: held-out share of each class, never trained on: picks the epoch with
            the lowest validation loss and gives the reported accuracy (RISE: 77.87% on STSb).
        random_pairs: weight of the pairs DINO's augmentation adds (x1, x2 of another entry, 0):
            ``score`` (RISE's code) weighs them by p_D of their x2, which is machine-written too;
            ``one`` leaves them at weight 1.
        filter_fraction: 0: weights are p_D (``rise``). f > 0: drop the bottom f of pairs by p_D and
            give the rest weight 1 (RISE's Filtering ablation, f = 0.1).
        max_length: tokens per classifier input.
        device: cpu, cuda or auto.
        trim_padding: compute each training batch in groups of similar length, each trimmed to its own longest
            input (:mod:`dsgen.training.padding`, as the encoders' trainers do): the same batches, logits and mean
            loss up to float rounding (dropout draws other masks). False: each batch padded whole.
    """

    encoder: str = "minilm-l6"
    input: str = "single"
    human: str = "source"
    temperature: float = 0.5
    epochs: float = 5.0
    batch_size: int = 32
    learning_rate: float = 1e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.0
    validation_fraction: float = 0.1
    random_pairs: str = "score"
    filter_fraction: float = 0.0
    max_length: int = 128
    device: str = "auto"
    trim_padding: bool = True

    def __post_init__(self) -> None:
        if self.input not in ("single", "pair"):
            raise DsgenError(f"SDI input must be 'single' or 'pair' (got '{self.input}')")
        if self.human not in HUMAN_SOURCES:
            raise DsgenError(f"SDI human must be one of {', '.join(HUMAN_SOURCES)} (got '{self.human}')")
        if self.random_pairs not in RANDOM_PAIR_POLICIES:
            raise DsgenError(f"SDI random_pairs must be one of {', '.join(RANDOM_PAIR_POLICIES)} (got '{self.random_pairs}')")
        if self.temperature <= 0:
            raise DsgenError(f"SDI temperature must be positive (got {self.temperature})")
        if not 0 <= self.filter_fraction < 1:
            raise DsgenError(f"SDI filter_fraction must be in [0, 1) (got {self.filter_fraction})")
        if not 0 < self.validation_fraction < 1:
            raise DsgenError(f"SDI validation_fraction must be in (0, 1) (got {self.validation_fraction})")


@dataclass
class SdiData:
    """Balanced train and validation examples ((text or (x1, x2)), label) for the classifier."""

    train: list[tuple[Any, int]]
    validation: list[tuple[Any, int]]


def sdi_training_data(human: list[str], machine_pairs: list[Pair], single: bool, seed: int,
                      validation_fraction: float = 0.1) -> SdiData:
    """Balanced classes, each split into train and validation (the validation part never trains).

    Machine examples are the distinct generated x2 not identical to any human sentence; human
    examples are the given human sentences. In the ``pair`` setting a human example is (x, x')
    with x' another human sentence. The larger class is subsampled to the smaller one, with the
    seed; then ``validation_fraction`` of each class is held out.
    """
    rng = random.Random(seed)
    human_set = set(human)
    if single:
        machine = list(dict.fromkeys(p.text_b for p in machine_pairs if p.text_b not in human_set))
        hum: list[Any] = list(dict.fromkeys(human))
    else:
        machine = list(dict.fromkeys((p.text_a, p.text_b) for p in machine_pairs if p.text_b not in human_set))
        shuffled = human[:]
        rng.shuffle(shuffled)
        hum = [(a, b) for a, b in zip(human, shuffled[1:] + shuffled[:1]) if a != b]
    n = min(len(machine), len(hum))
    if n < 4:
        raise DsgenError(f"SDI needs human and machine sentences ({len(hum)} human, {len(machine)} machine); "
                         "use a method whose x1 are human inputs, and more of them")
    classes = [[(x, MACHINE) for x in rng.sample(machine, n)], [(x, HUMAN) for x in rng.sample(hum, n)]]
    n_val = max(1, round(n * validation_fraction))
    train = classes[0][n_val:] + classes[1][n_val:]
    validation = classes[0][:n_val] + classes[1][:n_val]
    rng.shuffle(train)
    rng.shuffle(validation)
    return SdiData(train, validation)


class SdiClassifier:
    """The SDI model: fit on (text, label) examples, then p_human for any text.

    Example:
        >>> clf = SdiClassifier(SdiConfig(epochs=1))                                 # doctest: +SKIP
        >>> clf.fit(SdiData([("a human sentence", 1), ("a machine one", 0)], [...]), seed=1)  # doctest: +SKIP
        >>> clf.p_human(["another sentence"])                                         # doctest: +SKIP
    """

    def __init__(self, config: SdiConfig) -> None:
        self.config = config
        self.model: Any = None
        self.tokenizer: Any = None

    def _encode(self, texts: list[Any]) -> Any:
        if texts and isinstance(texts[0], tuple):
            return self.tokenizer([a for a, _ in texts], [b for _, b in texts], truncation=True,
                                  max_length=self.config.max_length)
        return self.tokenizer(list(texts), truncation=True, max_length=self.config.max_length)

    def _dataset(self, examples: list[tuple[Any, int]]) -> Any:
        from datasets import Dataset

        return Dataset.from_dict({**self._encode([x for x, _ in examples]), "labels": [y for _, y in examples]})

    def fit(self, data: SdiData, seed: int, progress: bool = True) -> dict[str, Any]:
        """Train on ``data.train``, keep the epoch with the lowest loss on ``data.validation``;
        return its accuracy there and the training log."""
        import math
        import time

        from transformers import (AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding, Trainer,
                                  TrainingArguments)

        from dsgen.models import encoder_path, resolve_device
        from dsgen.seeding import seeded
        from dsgen.training.fit import best_weights
        from dsgen.training.trainer_run import train_with_progress

        cfg = self.config
        path = encoder_path(cfg.encoder)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            with seeded(seed):  # the new classification head: the same whatever ran before
                self.model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=2)
        except OSError as exc:
            raise DsgenError(f"cannot load SDI encoder '{cfg.encoder}': {str(exc).splitlines()[0]}") from None
        train_set, val_set = self._dataset(data.train), self._dataset(data.validation)
        steps = max(1, math.ceil(len(data.train) / cfg.batch_size) * math.ceil(cfg.epochs))
        history: list[dict[str, float]] = []
        started = time.perf_counter()

        def build(output_dir: str, callback: Any) -> Any:
            args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=cfg.batch_size,
                                     per_device_eval_batch_size=64, num_train_epochs=cfg.epochs,
                                     learning_rate=cfg.learning_rate, warmup_steps=cfg.warmup_ratio,
                                     weight_decay=cfg.weight_decay, lr_scheduler_type="linear", seed=seed,
                                     data_seed=seed, eval_strategy="epoch", save_strategy="no",
                                     logging_strategy="no", report_to="none", disable_tqdm=True,
                                     use_cpu=resolve_device(cfg.device) == "cpu", dataloader_pin_memory=False)
            return Trainer(model=self.model, args=args, train_dataset=train_set, eval_dataset=val_set,
                           data_collator=DataCollatorWithPadding(self.tokenizer),
                           callbacks=[callback, best_weights(self.model, "eval_loss", greater_is_better=False)])

        def on_evaluate(step: int, metrics: dict[str, float]) -> None:
            if "eval_loss" in metrics:
                history.append({"step": step, "loss": round(float(metrics["eval_loss"]), 5)})

        train_with_progress(build, "SDI classifier", steps, progress, on_evaluate, trim_padding=cfg.trim_padding)
        self.model.eval()
        best = min(history, key=lambda h: h["loss"]) if history else None
        pred = self.logits([x for x, _ in data.validation]).argmax(-1)
        accuracy = round(100 * float((pred == [y for _, y in data.validation]).mean()), 2)
        return {"sdi_train_examples": len(data.train), "sdi_validation_examples": len(data.validation),
                "sdi_validation_accuracy": accuracy, "sdi_validation_history": history,
                "sdi_best_step": best["step"] if best else None, "sdi_train_seconds": round(time.perf_counter() - started, 2)}

    def save(self, folder: Path) -> None:
        """Write the fitted model and its tokenizer into ``folder`` (what :meth:`load` reads)."""
        if self.model is None:
            raise RuntimeError("SdiClassifier.fit must run first")
        self.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)

    @classmethod
    def load(cls, config: SdiConfig, folder: Path) -> "SdiClassifier":
        """A classifier :meth:`save` wrote, on ``config``'s device, ready to score."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        from dsgen.models import resolve_device

        classifier = cls(config)
        classifier.tokenizer = AutoTokenizer.from_pretrained(folder)
        classifier.model = AutoModelForSequenceClassification.from_pretrained(folder).to(resolve_device(config.device))
        classifier.model.eval()
        return classifier

    def logits(self, texts: list[Any], batch_size: int = 128) -> Any:
        import numpy as np
        import torch

        if self.model is None:
            raise RuntimeError("SdiClassifier.fit must run first")
        out = []
        device = next(self.model.parameters()).device
        with torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                batch = self.tokenizer.pad(self._encode(texts[i:i + batch_size]), return_tensors="pt").to(device)
                out.append(self.model(**batch).logits.float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 2))

    def p_human(self, texts: list[Any]) -> Any:
        """``softmax(logits / tau)[human]`` per text."""
        return importance(self.logits(texts), self.config.temperature)


def importance(logits: Any, temperature: float) -> Any:
    """Temperature-scaled softmax probability of the human class (RISE's p_D)."""
    import numpy as np

    z = np.asarray(logits, dtype=float) / temperature
    z -= z.max(axis=-1, keepdims=True)
    p = np.exp(z)
    return p[..., HUMAN] / p.sum(axis=-1)


def bottom_filter(scores: Any, fraction: float) -> Any:
    """Weights 0 for the ``round(fraction * n)`` lowest scores (stable order on ties), 1 for the rest."""
    import numpy as np

    scores = np.asarray(scores, dtype=float)
    n_drop = int(round(fraction * len(scores)))
    weights = np.ones(len(scores))
    weights[np.argsort(scores, kind="stable")[:n_drop]] = 0.0
    return weights


NO_HUMAN_INPUTS = ("the SDI reweighter needs human-written inputs x1 (e.g. stsb-train); "
                   "this method generates x1 too")
# classifier settings -> what a fit depends on (not how its scores become weights: temperature, filter, random pairs)
FIT_SETTINGS = ("encoder", "input", "human", "epochs", "batch_size", "learning_rate", "warmup_ratio", "weight_decay",
                "validation_fraction", "max_length", "device")


@REWEIGHTERS.register("sdi")
class SdiReweighter(Reweighter):
    """RISE: fit the SDI classifier on human sentences and the dataset's generated sentences (once per dataset,
    a data-level fit), then weigh each pair by p_D of its x2 (or drop the bottom ``filter_fraction`` by p_D).

    Example:
        >>> pairs, summary = SdiReweighter(SdiConfig()).apply(train, ReweightContext(human_texts=x1s))  # doctest: +SKIP
    """

    config_class = SdiConfig
    citation = citations.RISE
    version = 2  # 2: the classifier is a data-level fit, seeded with the data seed (was refitted per run)

    def __init__(self, config: SdiConfig | None = None) -> None:
        super().__init__(config or SdiConfig())

    def models(self, plan: Any) -> list[str]:
        return [self.config.encoder]

    def reads_source(self) -> bool:
        return self.config.human == "source"

    def data_fit(self) -> DataFit:
        """The classifier, fitted on the dataset's generated x2 and the human class (the whole source, or the
        inputs), with the data seed (:mod:`dsgen.data.fits`)."""
        cfg = self.config
        return DataFit("sdi-classifier", {k: getattr(cfg, k) for k in FIT_SETTINGS},
                       ("generated", "inputs", "source") if cfg.human == "source" else ("generated", "inputs"),
                       self.fit_classifier, self.load_classifier, models=(cfg.encoder,))

    def fit_classifier(self, data: FitData, folder: Path) -> dict[str, Any]:
        """Fit on balanced human and machine sentences (:func:`sdi_training_data`, with the data seed) and write the
        classifier into ``folder``."""
        cfg = self.config
        if not data.inputs:
            raise DsgenError(NO_HUMAN_INPUTS)
        human = data.source if cfg.human == "source" and data.source else data.inputs
        generated = [p for p in data.generated or [] if p.text_b is not None]
        examples = sdi_training_data(human, generated, cfg.input == "single", data.seed, cfg.validation_fraction)
        classifier = SdiClassifier(cfg)
        info = classifier.fit(examples, data.seed, data.progress)
        classifier.save(folder)
        return {**info, "sdi_human": {"rule": cfg.human, "available": len(set(human))}}

    def load_classifier(self, folder: Path, info: dict[str, Any]) -> SdiClassifier:
        return SdiClassifier.load(self.config, folder)

    def score(self, pairs: list[Pair], context: ReweightContext) -> ReweightReport:
        import numpy as np

        cfg = self.config
        fitted = self.fitted
        if fitted is None:  # used alone, outside a run: fit on the generated pairs it is given
            if not context.human_texts:
                raise DsgenError(NO_HUMAN_INPUTS)
            source = source_texts(context.source, context.data_dir) if cfg.human == "source" and context.source else None
            fitted = self.fit_alone(FitData(context.seed, [p for p in pairs if p.extra.get("source", "generated")
                                                           == "generated"], list(context.human_texts), source,
                                            context.device, context.progress))
        classifier: SdiClassifier = fitted.value
        info = dict(fitted.info)
        single = cfg.input == "single"
        texts = [p.text_b if single else (p.text_a, p.text_b) for p in pairs]
        p_d = classifier.p_human(texts)
        if cfg.random_pairs == "one":
            is_random = np.array([p.extra.get("source") == "random" for p in pairs])
            p_d = np.where(is_random, 1.0, p_d)
        weights = bottom_filter(p_d, cfg.filter_fraction) if cfg.filter_fraction else p_d
        info["filtered_out"] = int((weights == 0).sum())
        return ReweightReport([float(w) for w in weights], info, {"p_d": [round(float(x), 6) for x in p_d]})
