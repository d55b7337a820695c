"""InfoNCE with in-batch and hard negatives, with per-example weights."""

from __future__ import annotations

from typing import Any

from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from torch import Tensor


class WeightedMultipleNegativesRankingLoss(MultipleNegativesRankingLoss):
    """sentence-transformers' ``MultipleNegativesRankingLoss`` (InfoNCE: the anchor's positive
    against every positive and hard negative in the batch) where each anchor's cross-entropy is
    multiplied by its weight: ``loss = mean_i w_i * CE_i``. Scale 20 = temperature 0.05
    (GenSE, Chen et al. 2022, and SimCSE).

    With all weights 1 it equals the parent loss in its default setting (query-to-document
    direction, no hardness weighting); other settings are refused rather than silently changed.

    Inputs:
        +-------------------------------------------+------------------------+
        | Texts                                     | Labels                 |
        +===========================================+========================+
        | (anchor, positive, hard negative) triplets | weight per triplet     |
        +-------------------------------------------+------------------------+

    Example:
        >>> loss = WeightedMultipleNegativesRankingLoss(model, scale=20.0)  # doctest: +SKIP
    """

    def __init__(self, model: Any, scale: float = 20.0) -> None:
        super().__init__(model, scale=scale)
        if tuple(self.directions) != ("query_to_doc",) or self.hardness_mode is not None:
            raise ValueError("WeightedMultipleNegativesRankingLoss supports the default MNRL setting only")

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        import torch
        import torch.nn.functional as F

        queries = embeddings[0]
        docs = torch.cat(embeddings[1:], dim=0)
        scores = self.similarity_fct(queries, docs) * self.scale
        target = torch.arange(queries.size(0), device=queries.device)
        per_example = F.cross_entropy(scores, target, reduction="none")
        weights = torch.ones_like(per_example) if labels is None else labels.float().view(-1).to(per_example.device)
        return (per_example * weights).mean()

    def get_config_dict(self) -> dict[str, Any]:
        return {**super().get_config_dict(), "reduction": "mean of w_i * loss_i"}
