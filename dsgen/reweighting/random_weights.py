"""RISE's Random ablation: weights drawn from U(0, 1), reproducible by the run seed."""

from __future__ import annotations

from dataclasses import dataclass

from dsgen import citations
from dsgen.config import Config
from dsgen.data.pairs import Pair
from dsgen.reweighting.base import REWEIGHTERS, ReweightContext, Reweighter, ReweightReport


@dataclass
class RandomWeightsConfig(Config):
    """Args: low / high: bounds of the uniform distribution (RISE: 0 and 1)."""

    low: float = 0.0
    high: float = 1.0


@REWEIGHTERS.register("random")
class RandomReweighter(Reweighter):
    """Each pair's weight drawn from U(low, high) with the run seed (RISE, "Random")."""

    config_class = RandomWeightsConfig
    citation = citations.RISE

    def __init__(self, config: RandomWeightsConfig | None = None) -> None:
        super().__init__(config or RandomWeightsConfig())

    def score(self, pairs: list[Pair], context: ReweightContext) -> ReweightReport:
        import numpy as np

        rng = np.random.default_rng(context.seed)
        return ReweightReport(rng.uniform(self.config.low, self.config.high, size=len(pairs)).tolist())
