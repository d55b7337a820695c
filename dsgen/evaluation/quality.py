"""A cheap, direct measurement of a dataset's labels: do they agree with an independent judge?

The judge is the embedded all-MiniLM-L6-v2 (trained on about a billion human pairs, never on
this data): for the training pairs a method ends up with, Spearman x100 between each pair's
label and the judge's cosine similarity of its two sentences, overall and for the generated
pairs alone, plus the judge's mean cosine per label. It is not a metric of the papers; it
shows whether self-debiasing or a filter changed the data at all, at a fraction of the cost
of training. String labels count entailment as 1 and contradiction as 0.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from dsgen.data.pairs import Pair

STRING_LABELS = {"entailment": 1.0, "contradiction": 0.0, "neutral": 0.5}


def numeric(label: Any) -> float | None:
    if isinstance(label, (int, float)):
        return float(label)
    return STRING_LABELS.get(str(label))


class LabelJudge:
    """Scores pairs with an encoder. The distinct sentences of one call are encoded together, in one order (sorted),
    as the evaluation encodes its test sentences (:func:`~dsgen.evaluation.evaluator.encode_bucketed`: batches of equal
    token length, no padding, side by side on the cores: 1.6x sentence-transformers' ``encode`` of the same sentences, in
    ``dsgen bench eval --model minilm-l6`` 23.7 s against 14.6 s for 7,559 on a 2-core AVX-512 EPYC), and
    kept for the process by that set of sentences: a dataset's cosines are a function of the dataset alone, the same
    in any process whatever was judged before. (Embeddings kept per sentence across datasets would carry the batch
    each sentence was first encoded in, i.e. what ran before, into the last digits.) The set is the pairs' own, or
    the larger ``among`` holding them: a run judges its training pairs among the whole postprocessed dataset
    (training and validation pairs), which its training seeds split apart differently but share whole, so the seeds
    after the first encode nothing (``make run``: 3 of 6 encodings, about 9 of 14 s, saved)."""

    KEPT_SETS = 8  # sets of sentences kept (a comparison judges each of its datasets once per training seed)

    def __init__(self, encoder: str = "minilm-l6", device: str = "auto", batch_size: int = 128) -> None:
        self.encoder_name = encoder
        self.device = device
        self.batch_size = batch_size
        self.model: Any = None
        self.cache: dict[tuple[str, ...], dict[str, Any]] = {}

    def cosines(self, pairs: list[Pair], among: list[Pair] | None = None) -> Any:
        """The judge's cosine of each pair, its sentences encoded with those of ``among`` (default: the pairs'; pairs
        without a second sentence add none)."""
        import numpy as np
        import torch

        if self.model is None:
            from dsgen.encoders import load_encoder

            self.model = load_encoder(self.encoder_name, self.device)
        texts = tuple(sorted({s for p in [*pairs, *(among or ())] if p.text_b for s in (p.text_a, p.text_b)}))
        if texts not in self.cache:
            from dsgen.evaluation.evaluator import encode_bucketed

            emb = torch.nn.functional.normalize(encode_bucketed(self.model, list(texts), max_batch=self.batch_size),
                                                dim=-1)
            self.cache[texts] = dict(zip(texts, emb.cpu()))
            while len(self.cache) > self.KEPT_SETS:
                self.cache.pop(next(iter(self.cache)))
        kept = self.cache[texts]
        a = torch.stack([kept[p.text_a] for p in pairs])
        b = torch.stack([kept[p.text_b] for p in pairs])
        return np.asarray((a * b).sum(-1))

    def agreement(self, pairs: list[Pair], among: list[Pair] | None = None) -> dict[str, Any]:
        """Spearman(label, judge cosine) x100 over the pairs with weight > 0 (all, and generated
        only), and the judge's mean cosine per label; ``among``: as :meth:`cosines`."""
        from scipy.stats import spearmanr

        kept = [p for p in pairs if p.text_b and (p.weight is None or p.weight > 0) and numeric(p.label) is not None]
        if len(kept) < 3:
            return {"judge": self.encoder_name, "pairs": len(kept)}
        cos = self.cosines(kept, among)
        labels = [numeric(p.label) for p in kept]
        generated = [i for i, p in enumerate(kept) if p.extra.get("source", "generated") == "generated"]

        def rho(idx: list[int]) -> float | None:
            if len(idx) < 3 or len({labels[i] for i in idx}) < 2:
                return None
            return round(float(spearmanr([labels[i] for i in idx], cos[idx]).statistic) * 100, 2)

        by_label: dict[str, list[int]] = defaultdict(list)
        for i, p in enumerate(kept):
            by_label[str(p.label)].append(i)
        return {"judge": self.encoder_name, "pairs": len(kept), "spearman": rho(list(range(len(kept)))),
                "spearman_generated": rho(generated),
                "mean_cosine_by_label": {lab: {"n": len(idx), "mean_cosine": round(float(cos[idx].mean()), 4)}
                                         for lab, idx in sorted(by_label.items())}}
