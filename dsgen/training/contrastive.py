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
from dsgen.data.fits import FitsOnData
from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.training.base import TRAINERS, Trainer, TrainingOutcome, weighted
from dsgen.training.fit import TrainingConfig, fit, load_trainable_encoder, selection_evaluator

GENSE_PROMPT = "{} Question: what can we draw from the above sentence?"
TRAINED_GUIDE = "unsup-simcse"  # ContrastiveConfig.guide: trained on the run's own inputs (dsgen.training.guide)
LOSSES = ("infonce", "multicsr", "gist")
NLI_COLUMNS = (("sent0", "sent1", "hard_neg"), ("anchor", "positive", "negative"))


GUIDE_LOG = ("sentences", "noise", "seed", "optimizer_steps", "weight_update", "best_step", "best_validation_spearman")


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
        loss: ``infonce`` (GenSE's and SimCSE's, weighted per triplet); ``multicsr``: MultiCSR's loss
            (:class:`~dsgen.training.losses.MultiCSRGuidedLoss`: candidates whose ``guide`` cosine with the anchor
            exceeds ``guide_threshold`` masked, a binary cross-entropy of every softmax entry, weighted per triplet);
            or ``gist``: sentence-transformers' ``GISTEmbedLoss`` (cached), where the guide masks candidates it finds
            more similar to the anchor than the positive (only the anchor-positive and anchor-negative columns), at
            ``temperature``; weights 0 or 1 only (the loss is unweighted).
        guide: the guide encoder of ``multicsr`` and ``gist``: ``unsup-simcse`` (default): unsupervised SimCSE
            trained from the run's encoder on the method's own input sentences (:mod:`dsgen.training.guide`, as
            MultiCSR's pre-trained unsupervised SimCSE guide), or any encoder name (e.g. ``minilm-l6``).
        guide_threshold: the guide cosine above which ``multicsr`` masks a candidate (MultiCSR's ``phi``: 0.95).

    The trainer's other defaults are :class:`TrainingConfig`'s (Sentence-BERT's 10% warm-up and weight decay 0.01);
    the methods of the SimCSE family set SimCSE's (no warm-up, no weight decay: ``methods/syncse.py``).
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
    guide: str = "unsup-simcse"
    guide_threshold: float = 0.95
    nli_file: str | None = None
    nli_epochs: float = 3.0
    nli_batch_size: int = 512


@TRAINERS.register("contrastive")
class ContrastiveTrainer(Trainer, FitsOnData):
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
        if self.guided and self.config.guide == TRAINED_GUIDE:
            from dsgen.training.guide import UNSUP_SIMCSE

            out["guide_recipe"] = dict(UNSUP_SIMCSE)  # what the trained guide depends on besides encoder and data
        return out

    @property
    def guided(self) -> bool:
        return self.config.loss in ("multicsr", "gist")

    def models(self, plan: Any) -> list[str]:
        """A named guide (its fingerprint enters the run key); a trained one is a function of the encoder, the data
        and its recipe (:meth:`get_config_dict`), which the key holds already."""
        return [self.config.guide] if self.guided and self.config.guide != TRAINED_GUIDE else []

    def data_fit(self) -> Any:
        """The trained guide (``guide = "unsup-simcse"`` with a guided loss) as a data-level fit
        (:mod:`dsgen.data.fits`): unsupervised SimCSE from the run's encoder on the method's input sentences, seeded
        with the data seed, made once per dataset and shared by every run that reads it; None otherwise."""
        cfg = self.config
        if not self.guided or cfg.guide != TRAINED_GUIDE:
            return None
        from dsgen.data.fits import DataFit
        from dsgen.training.guide import GUIDE_KIND, GUIDE_VERSION, UNSUP_SIMCSE

        settings = {"encoder": cfg.encoder, "recipe": dict(UNSUP_SIMCSE), "template": GENSE_PROMPT if cfg.prompt else None}
        return DataFit(GUIDE_KIND, settings, ("inputs",), self._fit_guide, self._load_guide, models=(cfg.encoder,),
                       version=GUIDE_VERSION)

    def _fit_guide(self, data: Any, folder: Path) -> dict[str, Any]:
        from dsgen.training.guide import save_guide, train_simcse_guide

        if not data.inputs:
            raise DsgenError("the trained guide (unsup-simcse) reads the method's input sentences, and this run has "
                             "none (its x1 is generated): name a guide encoder")
        model, log = train_simcse_guide(self.config.encoder, [self.template(x) for x in data.inputs], data.device,
                                        data.progress, seed=data.seed)
        save_guide(model, folder)
        return {"guide": TRAINED_GUIDE, **{k: log.get(k) for k in GUIDE_LOG}}

    def _load_guide(self, folder: Path, info: dict[str, Any]) -> Any:
        from dsgen.training.guide import load_guide

        return load_guide(folder, self.config.device)

    def guide(self, train: list[Pair], seed: int, progress: bool) -> tuple[Any, dict[str, Any]]:
        """The guide encoder and what to log of it: the trained guide the engine made for this run's data
        (:meth:`data_fit`; used alone, outside a run, fitted here on the anchors of ``train``), or a named encoder."""
        cfg = self.config
        if cfg.guide == TRAINED_GUIDE:
            from dsgen.data.fits import FitData

            fitted = self.fitted or self.fit_alone(FitData(seed=seed, inputs=list(dict.fromkeys(p.text_a for p in train)),
                                                           device=cfg.device, progress=progress))
            return fitted.value, {**fitted.info, "key": fitted.key or None}
        from dsgen.encoders import load_encoder

        return load_encoder(cfg.guide, cfg.device, seed=seed), {"guide": cfg.guide}

    def loss(self, model: Any, triplets: list[Triplet], seed: int, guide: Any = None) -> Any:
        """The contrastive loss: weighted InfoNCE, MultiCSR's guided loss, or GIST's (see ``ContrastiveConfig.loss``);
        the guided ones take the ``guide`` encoder."""
        cfg = self.config
        if cfg.loss not in LOSSES:
            raise DsgenError(f"contrastive loss must be one of {', '.join(LOSSES)} (got '{cfg.loss}')")
        if cfg.loss == "infonce":
            from dsgen.training.losses import WeightedCachedMultipleNegativesRankingLoss

            return WeightedCachedMultipleNegativesRankingLoss(model, scale=1.0 / cfg.temperature,
                                                              mini_batch_size=cfg.mini_batch_size)
        if guide is None:
            raise ValueError(f"the {cfg.loss} loss needs its guide encoder")
        if cfg.loss == "multicsr":
            from dsgen.training.losses import MultiCSRGuidedLoss

            return MultiCSRGuidedLoss(model, guide, temperature=cfg.temperature, threshold=cfg.guide_threshold)
        if any(t.weight not in (0.0, 1.0) for t in triplets):
            raise DsgenError("the gist loss is unweighted: a reweighter may only keep (1) or drop (0) pairs for it")
        from sentence_transformers.sentence_transformer.losses import CachedGISTEmbedLoss

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
        guide, guide_log = (None, {})
        if self.guided:
            guide, guide_log = self.guide(train, seed, progress)
        model = load_trainable_encoder(cfg, seed)
        loss = self.loss(model, triplets, seed, guide)
        evaluator, metric = selection_evaluator(cfg, [], self.template)
        log = fit(model, self._dataset(triplets), loss, cfg, seed, evaluator, metric, no_duplicates=True, progress=progress,
                  unit="triplets")
        log.update(triplets=len(triplets), text_template=GENSE_PROMPT if cfg.prompt else None)
        if guide_log:
            masked = getattr(loss, "masked_fraction", [])
            log["guide"] = {**guide_log, "masked_share": round(sum(masked) / len(masked), 4) if masked else None}
        if nli is not None:
            stage = cfg.replace(epochs=cfg.nli_epochs, batch_size=cfg.nli_batch_size)
            log["nli_stage"] = {"file": cfg.nli_file, "triplets": len(nli),
                                **fit(model, self._dataset(nli), loss, stage, seed, no_duplicates=True, progress=progress,
                                      unit="triplets")}
        return TrainingOutcome(model, log)
