"""The ``regression`` trainer: a bi-encoder trained to regress cosine similarity on the pair label.

DINO (Schick & Schütze, 2021) trains Sentence-BERT this way on its generated STS data; RISE
multiplies each example's loss by its importance weight.
"""

from __future__ import annotations


from dsgen import citations
from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.training.base import TRAINERS, Trainer, TrainingOutcome, weighted
from dsgen.training.fit import TrainingConfig, fit, load_trainable_encoder, selection_evaluator


@TRAINERS.register("regression")
class RegressionTrainer(Trainer):
    """Cosine-similarity regression with per-example weights and model selection by validation Spearman.

    Args:
        config: :class:`TrainingConfig` (DINO's defaults: batch 32, 1 epoch, lr 2e-5, 10% warm-up,
            evaluation every 100 steps, at each epoch's end and at the last step, best of four Spearmans).

    Inputs: pairs with a numeric ``label`` in [0, 1] and an optional ``weight``.

    Example:
        >>> outcome = RegressionTrainer(TrainingConfig()).train(train, validation, seed=1)  # doctest: +SKIP
        >>> outcome.model.encode(["A sentence."])                                            # doctest: +SKIP
    """

    config_class = TrainingConfig
    citation = citations.DINO + "\n\n" + citations.SBERT

    def __init__(self, config: TrainingConfig | None = None) -> None:
        super().__init__(config or TrainingConfig())

    def train(self, train: list[Pair], validation: list[Pair], seed: int, progress: bool = True) -> TrainingOutcome:
        from datasets import Dataset

        from dsgen.training.losses import WeightedCosineSimilarityLoss

        rows = [(p, w) for p, w in weighted(train) if p.text_b is not None]
        if not rows:
            raise DsgenError("no training pair left (all weights 0, or no pairs generated); "
                             "use more inputs or a looser filter")
        for p, _ in rows:
            if not isinstance(p.label, (int, float)):
                raise DsgenError(f"the regression trainer needs numeric labels, got {p.label!r}; "
                                 "use a method with the contrastive trainer for this data")
        dataset = Dataset.from_dict({"sentence1": [p.text_a for p, _ in rows], "sentence2": [p.text_b for p, _ in rows],
                                     "label": [[float(p.label), w] for p, w in rows]})
        model = load_trainable_encoder(self.config, seed)
        val = [(p.text_a, p.text_b, float(p.label)) for p in validation
               if p.text_b is not None and isinstance(p.label, (int, float))]
        evaluator, metric = selection_evaluator(self.config, val)
        log = fit(model, dataset, WeightedCosineSimilarityLoss(model), self.config, seed, evaluator, metric,
                  progress=progress)
        log["dropped_weight_zero"] = len(train) - len(rows)
        return TrainingOutcome(model, log)
