"""The ``contrastive`` trainer: InfoNCE over (x, entailment, contradiction) triplets (GenSE).

GenSE (Chen et al., EMNLP 2022) trains with the entailment as positive and the contradiction
as hard negative, other sentences of the batch as in-batch negatives, temperature 0.05.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.training.base import TRAINERS, Trainer, TrainingOutcome, weighted
from dsgen.training.fit import TrainingConfig, fit, load_trainable_encoder

GENSE_PROMPT = "{} Question: what can we draw from the above sentence?"


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


@dataclass
class ContrastiveConfig(TrainingConfig):
    """:class:`TrainingConfig` plus GenSE's settings.

    Args:
        temperature: InfoNCE temperature (GenSE: 0.05, i.e. scale 20).
        positive_label / negative_label: pair labels that make the triplet's sides.
        prompt: wrap every sentence in GenSE's encoder prompt ``"[X] Question: what can we draw
            from the above sentence?"`` in training and evaluation (GenSE's option; off by default).
        batch_size: 32 as DINO (GenSE trains with 128 on GPUs; the ``paper`` preset sets it).
    """

    temperature: float = 0.05
    positive_label: str = "entailment"
    negative_label: str = "contradiction"
    prompt: bool = False


@TRAINERS.register("contrastive")
class ContrastiveTrainer(Trainer):
    """InfoNCE with in-batch negatives and the contradiction as hard negative, per-triplet weights.

    Without numeric validation labels, model selection is off: it trains the full epoch.

    Example:
        >>> ContrastiveTrainer(ContrastiveConfig()).train(pairs, [], seed=1)  # doctest: +SKIP
    """

    name = "contrastive"
    config_class = ContrastiveConfig

    def __init__(self, config: ContrastiveConfig | None = None) -> None:
        super().__init__(config or ContrastiveConfig())

    def template(self, text: str) -> str:
        return GENSE_PROMPT.format(text) if self.config.prompt else text

    def train(self, train: list[Pair], validation: list[Pair], seed: int, progress: bool = True) -> TrainingOutcome:
        from datasets import Dataset

        from dsgen.training.losses import WeightedMultipleNegativesRankingLoss

        cfg = self.config
        triplets = assemble_triplets(train, cfg.positive_label, cfg.negative_label)
        if not triplets:
            raise DsgenError(f"no complete ({cfg.positive_label}, {cfg.negative_label}) triplet to train on; "
                             "use more inputs or a looser filter")
        t = self.template
        dataset = Dataset.from_dict({"anchor": [t(x.anchor) for x in triplets], "positive": [t(x.positive) for x in triplets],
                                     "negative": [t(x.negative) for x in triplets], "label": [x.weight for x in triplets]})
        model = load_trainable_encoder(cfg)
        loss = WeightedMultipleNegativesRankingLoss(model, scale=1.0 / cfg.temperature)
        log = fit(model, dataset, loss, cfg, seed, no_duplicates=True, progress=progress)
        log.update(triplets=len(triplets), text_template=GENSE_PROMPT if cfg.prompt else None)
        return TrainingOutcome(model, log)
