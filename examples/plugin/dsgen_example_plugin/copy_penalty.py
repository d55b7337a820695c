"""A reweighter written outside dsgen: down-weight x2 that nearly copy their x1.

Small generators often "paraphrase" by repeating the input; such pairs teach an encoder little. The
weight of a pair falls linearly from 1 to ``floor`` as the word overlap (Jaccard) of x1 and x2 rises
from ``threshold`` to 1. It keeps dsgen's component contract: a typed config, a ``version`` that enters
every key of what it makes, a citation, and its name given by the registry (the entry point's name).
"""

from __future__ import annotations

from dataclasses import dataclass

from dsgen.config import Config
from dsgen.reweighting.base import ReweightContext, Reweighter, ReweightReport


@dataclass
class CopyPenaltyConfig(Config):
    """Args:
        threshold: word overlap (Jaccard) up to which a pair keeps weight 1.
        floor: the weight of an exact copy.
    """

    threshold: float = 0.6
    floor: float = 0.1


def overlap(a: str, b: str) -> float:
    wa, wb = set(a.lower().split()), set(b.lower().split())
    return len(wa & wb) / max(1, len(wa | wb))


class CopyPenalty(Reweighter):
    config_class = CopyPenaltyConfig
    version = 1
    citation = """@misc{dsgen-example-copy-penalty,
  title = {A copy penalty for generated sentence pairs (dsgen example plug-in)},
  author = {dsgen authors},
  year = {2026}
}"""

    def score(self, pairs, context: ReweightContext) -> ReweightReport:
        cfg = self.config
        weights, overlaps = [], []
        for p in pairs:
            o = overlap(p.text_a, p.text_b or "")
            span = max(1e-9, 1.0 - cfg.threshold)
            weights.append(1.0 if o <= cfg.threshold else max(cfg.floor, 1.0 - (1.0 - cfg.floor) * (o - cfg.threshold) / span))
            overlaps.append(round(o, 4))
        penalised = sum(w < 1.0 for w in weights)
        return ReweightReport(weights, {"penalised": penalised}, {"word_overlap": overlaps})
