"""Intervals for differences between methods: over training seeds (the headline) and over test pairs.

Two sources of variation make a difference between two methods uncertain:

- **seeds**: each seed draws its own generated data (the ``cpu`` preset), postprocessing,
  reweighting and training. The headline interval is a **t-interval on the paired per-seed
  differences**: seed s of method A against seed s of the reference, ``mean(d) ± t(0.975, n-1) *
  sd(d) / sqrt(n)``. It needs two seeds or more; it is what another run with new seeds would show.
- **test pairs**: the STS test sets are samples too. The **paired bootstrap** resamples each
  task's pairs (the same resample for both methods), recomputes every seed's Spearman on it,
  averages over seeds and takes the difference; the interval is the 2.5-97.5 percentile of the
  resampled differences. It says nothing about seed noise.

A difference whose interval covers 0 is not a difference this run can claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A difference with its interval (``low``/``high`` None when it cannot be computed)."""

    point: float
    low: float | None
    high: float | None
    method: str

    @property
    def covers_zero(self) -> bool | None:
        if self.low is None or self.high is None:
            return None
        return self.low <= 0.0 <= self.high

    def to_dict(self) -> dict[str, Any]:
        return {"point": self.point, "low": self.low, "high": self.high, "method": self.method,
                "covers_zero": self.covers_zero}

    def text(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.point:+.2f} [n/a]"
        return f"{self.point:+.2f} [{self.low:+.2f}, {self.high:+.2f}]"


def seed_t_interval(reference: list[float], other: list[float], level: float = LEVEL) -> Interval:
    """t-interval of ``other - reference`` over paired seeds (same position = same seed)."""
    import numpy as np
    from scipy.stats import t

    if len(reference) != len(other):
        raise ValueError("paired per-seed scores need the same seeds on both sides")
    d = np.asarray(other, dtype=float) - np.asarray(reference, dtype=float)
    point = float(d.mean())
    if len(d) < 2:
        return Interval(point, None, None, "t-interval over seeds (needs 2+ seeds)")
    half = float(t.ppf(0.5 + level / 2, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d)))
    return Interval(point, point - half, point + half, f"t-interval over {len(d)} paired seeds")


def centred_ranks(x: Any) -> Any:
    """Ranks of each row of ``x`` (B, n), ties averaged, minus the row's mean rank."""
    from scipy.stats import rankdata

    r = rankdata(x, axis=1)
    r -= r.mean(axis=1, keepdims=True)
    return r


def spearman_centred(rp: Any, rg: Any) -> Any:
    """Spearman x100 of each row pair, from :func:`centred_ranks` of both sides."""
    import numpy as np

    return 100 * (rp * rg).sum(1) / np.sqrt((rp**2).sum(1) * (rg**2).sum(1))


def spearman_rows(pred: Any, gold: Any) -> Any:
    """Spearman x100 of each row of ``pred`` (B, n) against the matching row of ``gold`` (B, n)."""
    return spearman_centred(centred_ranks(pred), centred_ranks(gold))


def paired_bootstrap(reference: list[Any], other: list[Any], gold: Any, n_boot: int = 1000, seed: int = 0,
                     chunk: int = 100) -> Any:
    """Bootstrap distribution (``n_boot`` values) of mean-over-seeds Spearman(other) - Spearman(reference).

    Args:
        reference / other: per-seed predictions (each of shape (n,)) on the same pairs.
        gold: gold scores (n,).

    Ranking the resamples is the cost: the gold resample is ranked once per chunk, and seeds with
    identical predictions (a seed-independent method such as ``base``) once between them; the
    values are those of ranking every seed on its own.
    """
    import numpy as np

    gold = np.asarray(gold, dtype=float)
    rng = np.random.default_rng(seed)
    n = len(gold)
    preds = [np.asarray(p) for p in (*reference, *other)]
    first: dict[bytes, int] = {}
    same = [first.setdefault(np.ascontiguousarray(p).tobytes(), i) for i, p in enumerate(preds)]
    distinct = sorted(set(same))
    out = []
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_boot - start), n))
        rg = centred_ranks(gold[idx])
        scores = {i: spearman_centred(centred_ranks(preds[i][idx]), rg) for i in distinct}
        per_seed = [scores[j] for j in same]
        ref = np.mean(per_seed[:len(reference)], axis=0)
        oth = np.mean(per_seed[len(reference):], axis=0)
        out.append(oth - ref)
    return np.concatenate(out)


def percentile_interval(point: float, samples: Any, level: float = LEVEL, n_boot: int | None = None) -> Interval:
    import numpy as np

    lo, hi = np.percentile(samples, [50 * (1 - level), 50 * (1 + level)])
    return Interval(float(point), float(lo), float(hi), f"paired bootstrap over test pairs ({n_boot or len(samples)} resamples)")
