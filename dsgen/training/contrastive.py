"""The ``contrastive`` trainer: InfoNCE over (x, entailment, contradiction) triplets (GenSE).

GenSE (Chen et al., EMNLP 2022) trains with the entailment as positive and the contradiction
as hard negative, the other sentences of the batch as in-batch negatives, temperature 0.05,
batches of 1024 synthetic triplets (512 for its NLI stage), lr 5e-5, and always wraps each
sentence in its encoder prompt ``"[X] Question: what can we draw from the above sentence?"``.
Its second stage fine-tunes on human NLI triplets; no NLI data ships with dsgen, so that stage
runs only when ``nli_file`` points at a triplet file.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsgen import citations
from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.training.base import TRAINERS, Trainer, TrainingOutcome, weighted
from dsgen.training.fit import TrainingConfig, fit, load_trainable_encoder, selection_evaluator

GENSE_PROMPT = "{} Question: what can we draw from the above sentence?"
NLI_COLUMNS = (("sent0", "sent1", "hard_neg"), ("anchor", "positive", "negative"))


@dataclass
class Triplet:
    anchor: str
    positive: str
    negative: str
    weight: float


def assemble_triplets(pairs: list[Pair], positive: str = "entailment", negative: str = "contradiction") -> list[Triplet]:
    """Pair the i-th kept ``positive`` x2 of each x1 with its i-th kept ``negative`` x2.

    Pairs of weight 0 (filtered) count as missing, so a triplet with a filtered side drops out.
    A triplet's weight is the product of its two pairs' weights.
    """
    pos: dict[str, list[tuple[str, float]]] = defaultdict(list)
    neg: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for p, w in weighted(pairs):
        if p.text_b is None:
            continue
        if p.label == positive:
            pos[p.text_a].append((p.text_b, w))
        elif p.label == negative:
            neg[p.text_a].append((p.text_b, w))
    triplets = []
    for x in pos:
        for (e, we), (c, wc) in zip(pos[x], neg.get(x, [])):
            triplets.append(Triplet(x, e, c, we * wc))
    return triplets


def read_nli_triplets(path: str) -> list[Triplet]:
    """Human NLI triplets from a CSV/TSV/JSONL file with SimCSE's columns (sent0, sent1, hard_neg) or
    (anchor, positive, negative)."""
    import pandas as pd

    p = Path(path)
    if not p.is_file():
        raise DsgenError(f"NLI triplet file {path} not found")
    try:
        frame = (pd.read_json(p, lines=True) if p.suffix == ".jsonl" else
                 pd.read_csv(p, sep="\t" if p.suffix == ".tsv" else ",", dtype=str, keep_default_na=False))
    except ValueError as exc:
        raise DsgenError(f"{path}: cannot read NLI triplets ({exc})") from None
    for cols in NLI_COLUMNS:
        if all(c in frame.columns for c in cols):
            return [Triplet(str(a), str(b), str(c), 1.0) for a, b, c in frame[list(cols)].itertuples(index=False)]
    raise DsgenError(f"{path}: expected columns {' / '.join(', '.join(c) for c in NLI_COLUMNS)}")


@dataclass
class ContrastiveConfig(TrainingConfig):
    """:class:`TrainingConfig` with GenSE's settings as defaults.

    Args:
        temperature: InfoNCE temperature (GenSE: 0.05, i.e. scale 20).
        batch_size: triplets per batch (GenSE: 1024 on synthetic data); in-batch negatives make it
            part of the method. The CPU presets use smaller ones.
        learning_rate: GenSE's 5e-5.
        mini_batch_size: GradCache chunk: bounds memory only, the loss is the same.
        positive_label / negative_label: pair labels that make the triplet's sides.
        prompt: wrap every sentence in GenSE's encoder prompt in training and evaluation (GenSE: always).
        nli_file: optional human NLI triplets for GenSE's second stage (SimCSE's ``sent0, sent1,
            hard_neg`` CSV); trained after the synthetic stage with ``nli_epochs`` and ``nli_batch_size``.
        max_seq_length: 64, GenSE's ``train.sh`` (``--max_source_length 64``, ``train.sh#L17``).
        optimizer: torch's AdamW (GenSE used Adafactor: a listed departure).
        selection_data: keep the checkpoint with the best Spearman on these human pairs (``stsb-dev``:
            the STS benchmark dev split, gold / 5, GenSE's ``train.sh`` ``--metric_for_best_model
            stsb_spearman``, evaluated every ``evaluation_steps`` = 250 steps only: ``evaluation_strategy
            steps``, ``train.sh#L28-L33``); None: train the whole schedule and keep the last step.
        selection_metric: cosine Spearman, as GenSE's (SimCSE's) evaluation.
        loss: ``infonce`` (GenSE's, weighted per triplet) or ``gist``: sentence-transformers'
            ``GISTEmbedLoss`` (cached), where a ``guide`` encoder masks in-batch negatives it finds more similar
            to the anchor than the positive is (MultiCSR's guided masking, approximately: MultiCSR masks with
            unsupervised SimCSE at a fixed cosine of 0.95, here the guide's own positive sets the bar); only the
            anchor-positive and anchor-negative columns (no anchor-anchor or positive-positive negatives), at
            ``temperature``. Weights must be 0 or 1 (dropped or kept: the loss is unweighted).
        guide: the guide encoder of ``gist`` (all-MiniLM-L6-v2 offline).
    """

    batch_size: int = 1024
    max_seq_length: int | None = 64
    optimizer: str = "adamw-torch"
    selection_data: str | None = "stsb-dev"
    evaluation_steps: int = 250
    evaluate_at_epoch_end: bool = False
    selection_metric: str = "cosine"
    learning_rate: float = 5e-5
    temperature: float = 0.05
    mini_batch_size: int = 32
    positive_label: str = "entailment"
    negative_label: str = "contradiction"
    prompt: bool = True
    loss: str = "infonce"
    guide: str = "minilm-l6"
    nli_file: str | None = None
    nli_epochs: float = 3.0
    nli_batch_size: int = 512


@TRAINERS.register("contrastive")
class ContrastiveTrainer(Trainer):
    """InfoNCE with in-batch negatives and the contradiction as hard negative, per-triplet weights.

    Model selection is on the human STS benchmark dev pairs (``selection_data``), as GenSE selects.

    Example:
        >>> ContrastiveTrainer(ContrastiveConfig(batch_size=64)).train(pairs, [], seed=1)  # doctest: +SKIP
    """

    config_class = ContrastiveConfig
    citation = citations.GENSE

    def __init__(self, config: ContrastiveConfig | None = None) -> None:
        super().__init__(config or ContrastiveConfig())

    def get_config_dict(self) -> dict[str, Any]:
        out = super().get_config_dict()
        if self.config.nli_file:
            from pathlib import Path

            from dsgen.identity import file_key

            path = Path(self.config.nli_file)
            out["nli_file_fingerprint"] = file_key(path) if path.is_file() else None  # the file's bytes, not its path
        return out

    def models(self, plan: Any) -> list[str]:
        return [self.config.guide] if self.config.loss == "gist" else []

    def loss(self, model: Any, triplets: list[Triplet], seed: int) -> Any:
        """The contrastive loss: weighted InfoNCE, or GIST's guided one (see ``ContrastiveConfig.loss``)."""
        cfg = self.config
        if cfg.loss == "infonce":
            from dsgen.training.losses import WeightedCachedMultipleNegativesRankingLoss

            return WeightedCachedMultipleNegativesRankingLoss(model, scale=1.0 / cfg.temperature,
                                                              mini_batch_size=cfg.mini_batch_size)
        if cfg.loss != "gist":
            raise DsgenError(f"contrastive loss must be infonce or gist (got '{cfg.loss}')")
        if any(t.weight not in (0.0, 1.0) for t in triplets):
            raise DsgenError("the gist loss is unweighted: a reweighter may only keep (1) or drop (0) pairs for it")
        from sentence_transformers.sentence_transformer.losses import CachedGISTEmbedLoss

        from dsgen.encoders import load_encoder

        guide = load_encoder(cfg.guide, cfg.device, seed=seed)
        return CachedGISTEmbedLoss(model, guide, temperature=cfg.temperature, mini_batch_size=cfg.mini_batch_size,
                                   contrast_anchors=False, contrast_positives=False)

    def template(self, text: str) -> str:
        return GENSE_PROMPT.format(text) if self.config.prompt else text

    def _dataset(self, triplets: list[Triplet]) -> Any:
        from datasets import Dataset

        t = self.template
        return Dataset.from_dict({"anchor": [t(x.anchor) for x in triplets], "positive": [t(x.positive) for x in triplets],
                                  "negative": [t(x.negative) for x in triplets], "label": [x.weight for x in triplets]})

    def train(self, train: list[Pair], validation: list[Pair], seed: int, progress: bool = True) -> TrainingOutcome:
        cfg = self.config
        triplets = assemble_triplets(train, cfg.positive_label, cfg.negative_label)
        if not triplets:
            raise DsgenError(f"no complete ({cfg.positive_label}, {cfg.negative_label}) triplet to train on; "
                             "use more inputs or a looser filter")
        nli = read_nli_triplets(cfg.nli_file) if cfg.nli_file else None
        model = load_trainable_encoder(cfg, seed)
        loss = self.loss(model, triplets, seed)
        evaluator, metric = selection_evaluator(cfg, [], self.template) if cfg.selection_data else (None, None)
        log = fit(model, self._dataset(triplets), loss, cfg, seed, evaluator, metric, no_duplicates=True, progress=progress,
                  unit="triplets")
        log.update(triplets=len(triplets), text_template=GENSE_PROMPT if cfg.prompt else None)
        if nli is not None:
            stage = cfg.replace(epochs=cfg.nli_epochs, batch_size=cfg.nli_batch_size)
            log["nli_stage"] = {"file": cfg.nli_file, "triplets": len(nli),
                                **fit(model, self._dataset(nli), loss, stage, seed, no_duplicates=True, progress=progress,
                                      unit="triplets")}
        return TrainingOutcome(model, log)
