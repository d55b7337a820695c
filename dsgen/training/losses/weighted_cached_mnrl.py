"""InfoNCE with in-batch and hard negatives, per-example weights, and gradient caching for large batches."""

from __future__ import annotations

from typing import Any

from sentence_transformers.sentence_transformer.losses import CachedMultipleNegativesRankingLoss
from torch import Tensor


class WeightedCachedMultipleNegativesRankingLoss(CachedMultipleNegativesRankingLoss):
    """sentence-transformers' ``CachedMultipleNegativesRankingLoss`` (InfoNCE: each anchor's positive
    against every positive and hard negative of the batch, with GradCache so that a batch of any
    size fits in memory) where each anchor's cross-entropy is multiplied by its weight:
    ``loss = mean_i w_i * CE_i``. Scale 20 = temperature 0.05 (GenSE, Chen et al. 2022; SimCSE).

    In-batch negatives make the batch size part of the method: GenSE trains with 512 (NLI) and
    1024 (synthetic) examples per batch; ``mini_batch_size`` only bounds memory and does not change
    the loss. With all weights 1 it equals the parent loss (and ``MultipleNegativesRankingLoss``)
    in their default setting (query-to-document direction, no hardness weighting, one device);
    other settings are refused rather than silently changed.

    Inputs:
        +--------------------------------------------+----------------------+
        | Texts                                      | Labels               |
        +============================================+======================+
        | (anchor, positive, hard negative) triplets | weight per triplet   |
        +--------------------------------------------+----------------------+

    Example:
        >>> loss = WeightedCachedMultipleNegativesRankingLoss(model, scale=20.0, mini_batch_size=64)  # doctest: +SKIP
    """

    def __init__(self, model: Any, scale: float = 20.0, mini_batch_size: int = 32) -> None:
        super().__init__(model, scale=scale, mini_batch_size=mini_batch_size)
        if tuple(self.directions) != ("query_to_doc",) or self.hardness_mode is not None or self.gather_across_devices:
            raise ValueError("WeightedCachedMultipleNegativesRankingLoss supports the default MNRL setting only")

    def calculate_loss(self, reps: list[list[Tensor]], labels: Tensor | None = None, *,
                       with_backward: bool = False) -> Tensor:
        """Weighted InfoNCE over the whole batch, computed (and back-propagated) in row chunks."""
        import torch
        import torch.nn.functional as F

        queries = torch.cat(reps[0])
        docs = torch.cat([torch.cat(r) for r in reps[1:]])
        n = queries.size(0)
        weights = torch.ones(n, device=queries.device) if labels is None else labels.float().view(-1).to(queries.device)
        losses = []
        for begin in range(0, n, self.mini_batch_size):
            end = min(begin + self.mini_batch_size, n)
            scores = self.similarity_fct(queries[begin:end], docs) * self.scale
            target = torch.arange(begin, end, device=queries.device)
            chunk = (F.cross_entropy(scores, target, reduction="none") * weights[begin:end]).sum() / n
            if with_backward:
                chunk.backward()
                chunk = chunk.detach()
            losses.append(chunk)
        return sum(losses)

    def get_config_dict(self) -> dict[str, Any]:
        return {**super().get_config_dict(), "weighted": True, "reduction": "mean of w_i * loss_i"}

    @property
    def citation(self) -> str:
        """GenSE's contrastive objective with per-anchor weights, and the gradient cache it runs through."""
        from dsgen import citations

        return citations.GENSE + "\n" + super().citation
