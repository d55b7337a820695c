"""Losses that honour per-example weights (subclasses of sentence-transformers' losses)."""

from dsgen.training.losses.guided_binary import MultiCSRGuidedLoss
from dsgen.training.losses.weighted_cached_mnrl import WeightedCachedMultipleNegativesRankingLoss
from dsgen.training.losses.weighted_cosine import WeightedCosineSimilarityLoss

__all__ = ["MultiCSRGuidedLoss", "WeightedCosineSimilarityLoss", "WeightedCachedMultipleNegativesRankingLoss"]
