"""Cosine-similarity regression loss with per-example weights."""

from __future__ import annotations

from typing import Any

from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss
from torch import Tensor, nn


class WeightedCosineSimilarityLoss(CosineSimilarityLoss):
    """sentence-transformers' ``CosineSimilarityLoss`` where each example's squared error is
    multiplied by its weight: ``loss = mean_i w_i * (cos(u_i, v_i) - y_i) ** 2``.

    With all weights 1 it equals ``CosineSimilarityLoss`` (MSE). DINO trains with it unweighted;
    RISE (COLING 2022, Eq. 3) multiplies each synthetic example's loss by its importance.

    Args:
        model: the ``SentenceTransformer`` being trained.

    Inputs:
        +--------------------------+--------------------------------------------------+
        | Texts                    | Labels                                           |
        +==========================+==================================================+
        | (sentence_A, sentence_B) | ``[score, weight]`` per example (shape ``(B, 2)``) |
        +--------------------------+--------------------------------------------------+

    A label of shape ``(B,)`` is read as scores with weight 1.

    Example:
        >>> loss = WeightedCosineSimilarityLoss(model)                    # doctest: +SKIP
        >>> dataset = Dataset.from_dict({"s1": ["a"], "s2": ["b"], "label": [[0.9, 0.5]]})  # doctest: +SKIP
    """

    def __init__(self, model: Any) -> None:
        super().__init__(model, loss_fct=nn.MSELoss(reduction="none"))

    def compute_loss_from_embeddings(self, embeddings: list[Tensor], labels: Tensor) -> Tensor:
        import torch

        labels = labels.float()
        scores, weights = (labels[:, 0], labels[:, 1]) if labels.dim() == 2 else (labels, torch.ones_like(labels))
        output = self.cos_score_transformation(torch.cosine_similarity(embeddings[0], embeddings[1]))
        return (self.loss_fct(output, scores) * weights).mean()

    def get_config_dict(self) -> dict[str, Any]:
        return {**super().get_config_dict(), "weighted": True, "reduction": "mean of w_i * loss_i"}

    @property
    def citation(self) -> str:
        """RISE's weighted loss (its Eq. 3), as the model card cites it; the loss is Sentence-BERT's."""
        from dsgen import citations

        return citations.RISE + "\n\n" + citations.SBERT
