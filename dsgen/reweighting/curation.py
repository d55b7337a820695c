"""MultiCSR's self-curation: keep a triplet only when the LM that judged its pairs rates the positive as
similar and the negative as dissimilar (NAACL 2024; ``Circle-Ming/MultiCSR@596898f``).

It reads each pair's ``judge_score`` (in [0, 1]; the labeller ``lm-judge`` with ``replace_label = false`` writes
it) and keeps the positive and negative pairs of an input x1 (weight 1) when every positive scores at least
``min_positive``, every negative at most ``max_negative``, and the lowest positive exceeds the highest negative by
more than ``min_gap``; anything else gets weight 0 (dropped). MultiCSR thresholds the score its judge *writes*: Flan-T5
greedily decodes a number, kept only when the whole answer is one (``flan_filter.py#L148-L156``), and filter type 15
keeps ``negative <= 3``, ``positive >= 3`` and ``positive != negative`` (``#L123-L126``, ``#L162-L165``, ``#L170-L173``),
i.e. 0.6 / 0.6 on the judge's 0-5 scale divided by 5, the positive strictly above the negative (``min_gap`` 0). So
MultiCSR's labeller reads the written score (``read = "written"``, ``parse = "exact"``): thresholds on an expected
digit (a continuous score) kept 0 of 85 pairs on ``cpu``, where the written scores are the discrete numbers these
thresholds were set for. A pair the judge gave no score (``judge_score`` None: it abstained) cannot be checked, so its
triplet is dropped, as MultiCSR writes no triplet whose two ratings are not both numbers (``#L155-L156``); the
abstentions are counted and more than ``max_abstention_share`` of them fail the run, as in the labelling stage
(:func:`dsgen.labelling.base.count_abstentions`).

Departure: MultiCSR also swaps a triplet whose "contradiction" the judge rates as the positive and whose
"entailment" as the negative (``flan_filter.py#L157-L165``, ``flan_generate_scoring.py#L138-L141``); a reweighter
only weighs pairs, so such a triplet is dropped here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from dsgen.config import Config
from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.labelling.base import MAX_ABSTENTION_SHARE, check_abstention_share, count_abstentions
from dsgen.reweighting.base import REWEIGHTERS, ReweightContext, Reweighter, ReweightReport

MULTICSR = """@inproceedings{wang-etal-2024-large,
  title = {Large Language Models can Contrastively Refine their Generation for Better Sentence Representation Learning},
  author = {Wang, Huiming and Li, Zhaodonghui and Cheng, Liying and Soh, De Wen and Bing, Lidong},
  booktitle = {Proceedings of the 2024 Conference of the North American Chapter of the Association for Computational Linguistics},
  year = {2024},
  url = {https://aclanthology.org/2024.naacl-long.436}
}"""


@dataclass
class CurationConfig(Config):
    """Args:
        min_positive / max_negative: the judge's score (in [0, 1]) a positive must reach and a negative must
            not exceed (MultiCSR: 3.0 and 3.0 of 5, its written scores).
        min_gap: positive minus negative must exceed this (0: strictly greater).
        positive_label / negative_label: the pair labels of a triplet's two sides.
        max_abstention_share: the run fails when the judge gave no score for more than this share of the pairs
            read (:data:`dsgen.labelling.base.MAX_ABSTENTION_SHARE`, 0.1, says why).
    """

    min_positive: float = 0.6
    max_negative: float = 0.6
    min_gap: float = 0.0
    positive_label: str = "entailment"
    negative_label: str = "contradiction"
    max_abstention_share: float = MAX_ABSTENTION_SHARE

    def __post_init__(self) -> None:
        check_abstention_share(self.max_abstention_share)


@REWEIGHTERS.register("self-curation")
class SelfCuration(Reweighter):
    """Weights 1 for the pairs of triplets the judge's ratings keep, 0 for the rest (module docstring)."""

    config_class = CurationConfig
    citation = MULTICSR

    def score(self, pairs: list[Pair], context: ReweightContext) -> ReweightReport:
        cfg = self.config
        if pairs and "judge_score" not in pairs[0].extra:
            raise DsgenError("self-curation needs each pair's judge_score: put the labeller lm-judge (replace_label = "
                             "false) before it")
        sides: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"pos": [], "neg": []})
        for i, p in enumerate(pairs):
            if p.label == cfg.positive_label:
                sides[p.text_a]["pos"].append(i)
            elif p.label == cfg.negative_label:
                sides[p.text_a]["neg"].append(i)
        read = [i for side in sides.values() for i in side["pos"] + side["neg"]]
        abstentions = count_abstentions([pairs[i].extra.get("judge_score") for i in read], cfg.max_abstention_share,
                                        f"reweighter {self.name}", "reweighting")
        weights = [0.0] * len(pairs)
        reasons: dict[str, int] = defaultdict(int)
        for x1, side in sides.items():
            if not side["pos"] or not side["neg"]:
                reasons["incomplete"] += 1
                continue
            pos = [pairs[i].extra.get("judge_score") for i in side["pos"]]
            neg = [pairs[i].extra.get("judge_score") for i in side["neg"]]
            if None in pos or None in neg:
                reasons["abstained"] += 1
            elif min(pos) < cfg.min_positive:
                reasons["positive_too_low"] += 1
            elif max(neg) > cfg.max_negative:
                reasons["negative_too_high"] += 1
            elif min(pos) - max(neg) <= cfg.min_gap:
                reasons["no_gap"] += 1
            else:
                for i in side["pos"] + side["neg"]:
                    weights[i] = 1.0
        kept = sum(1 for x1, side in sides.items() if side["pos"] and weights[side["pos"][0]] == 1.0)
        info: dict[str, Any] = {"inputs": len(sides), "kept_inputs": kept, "dropped": dict(sorted(reasons.items())),
                                **abstentions,
                                "kept_fraction": round(sum(weights) / len(weights), 4) if weights else 0.0}
        return ReweightReport(weights, info)
