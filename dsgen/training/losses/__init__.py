"""Losses that honour per-example weights (subclasses of sentence-transformers' losses)."""

from dsgen.training.losses.weighted_cosine import WeightedCosineSimilarityLoss
from dsgen.training.losses.weighted_mnrl import WeightedMultipleNegativesRankingLoss

__all__ = ["WeightedCosineSimilarityLoss", "WeightedMultipleNegativesRankingLoss"]
