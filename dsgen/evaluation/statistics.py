"""Intervals for differences between methods: over seeds (the headline) and over test pairs.

Three sources of variation make a difference between two methods uncertain:

- **data seeds**: each data seed generates its own dataset;
- **training seeds**: on one dataset, each training seed draws its own postprocessing,
  reweighting, initialisation and batch order;
- **test pairs**: the STS test sets are samples too.

A run is a (data seed, training seed) pair; two methods are compared on the runs both have. The
headline interval is **hierarchical** (:func:`nested_interval`): the paired differences are
averaged over the training seeds of each data seed, and a t-interval is taken over those
data-seed means, ``mean ± t(0.975, D-1) * sd / sqrt(D)``. For a balanced nested design (every data
seed with the same training seeds) this is the mixed-model interval of the mean difference
(data seed as a random effect, training seeds nested in it): each data-seed mean carries the
data-seed variance plus the training variance divided by the number of training seeds, so more
training seeds narrow it only as far as the data-seed variance allows. Its coverage is checked
against simulations with a known true difference (``tests/evaluation/test_statistics.py``); a
two-level percentile bootstrap over so few data seeds covers far less than 95% (the same test
measures it), which is why it is not the headline. With one data seed the interval is over
training seeds only and says so: it holds for that dataset, not for another draw of data.
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


Run = tuple[int, int]  # (data seed, training seed)


def nested_interval(reference: dict[Run, float], other: dict[Run, float], level: float = LEVEL) -> Interval:
    """Hierarchical interval of ``other - reference`` over runs paired by (data seed, training seed).

    Runs only one side has are left out. See the module docstring for why this interval.
    """
    import numpy as np
    from scipy.stats import t

    runs = sorted(set(reference) & set(other))
    if not runs:
        return Interval(float("nan"), None, None, "no common runs")
    by_data: dict[int, list[float]] = {}
    for d, s in runs:
        by_data.setdefault(d, []).append(other[(d, s)] - reference[(d, s)])
    if len(by_data) == 1:  # one dataset: over its training seeds only
        diffs = np.asarray(next(iter(by_data.values())))
        what = f"t-interval over {len(diffs)} training seeds on one dataset (data-seed variance not included)"
    else:
        diffs = np.asarray([np.mean(v) for v in by_data.values()])
        n_train = sorted({len(v) for v in by_data.values()})
        per = f"{n_train[0]}" if len(n_train) == 1 else f"{n_train[0]}-{n_train[-1]}"
        what = (f"t-interval over {len(diffs)} data seeds" if n_train == [1] else
                f"nested t-interval over {len(diffs)} data seeds x {per} training seeds")
    point = float(diffs.mean())
    if len(diffs) < 2:
        return Interval(point, None, None, what + " (needs 2+)")
    half = float(t.ppf(0.5 + level / 2, len(diffs) - 1) * diffs.std(ddof=1) / math.sqrt(len(diffs)))
    return Interval(point, point - half, point + half, what)


def nested_p_value(reference: dict[Run, float], other: dict[Run, float], null: float = 0.0,
                   alternative: str = "two-sided") -> float:
    """p-value of the test behind :func:`nested_interval`: the mean difference against ``null``
    (``alternative``: ``two-sided``, ``greater`` or ``less``). NaN when it cannot be computed."""
    import numpy as np
    from scipy.stats import t

    runs = sorted(set(reference) & set(other))
    by_data: dict[int, list[float]] = {}
    for d, s in runs:
        by_data.setdefault(d, []).append(other[(d, s)] - reference[(d, s)])
    diffs = (np.asarray(next(iter(by_data.values()))) if len(by_data) == 1
             else np.asarray([np.mean(v) for v in by_data.values()]))
    if len(diffs) < 2:
        return float("nan")
    sd = diffs.std(ddof=1)
    if sd == 0:
        above = diffs.mean() > null
        return {"two-sided": 0.0 if diffs.mean() != null else 1.0, "greater": 0.0 if above else 1.0,
                "less": 0.0 if diffs.mean() < null else 1.0}[alternative]
    stat = (diffs.mean() - null) / (sd / math.sqrt(len(diffs)))
    df = len(diffs) - 1
    if alternative == "greater":
        return float(t.sf(stat, df))
    if alternative == "less":
        return float(t.cdf(stat, df))
    return float(2 * t.sf(abs(stat), df))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (NaN stays NaN and is not counted)."""
    valid = sorted((p, i) for i, p in enumerate(p_values) if p == p)
    adjusted = [float("nan")] * len(p_values)
    running = 0.0
    for rank, (p, i) in enumerate(valid):
        running = max(running, min(1.0, (len(valid) - rank) * p))
        adjusted[i] = running
    return adjusted


def variance_components(scores: dict[Run, float]) -> dict[str, float]:
    """Spread of one method's scores by source (one-way random-effects ANOVA on a nested design):
    ``train_sd`` within a dataset, ``data_sd`` between datasets beyond what training explains
    (0 when the data-seed means vary less than training alone would make them), ``total_sd`` of a
    single run, and the counts."""
    import numpy as np

    by_data: dict[int, list[float]] = {}
    for (d, _), v in sorted(scores.items()):
        by_data.setdefault(d, []).append(v)
    groups = [np.asarray(v) for v in by_data.values()]
    within = [g.var(ddof=1) for g in groups if len(g) > 1]
    train_var = float(np.mean(within)) if within else float("nan")
    means = np.asarray([g.mean() for g in groups])
    n_train = float(np.mean([len(g) for g in groups]))
    between = float(means.var(ddof=1)) if len(means) > 1 else float("nan")
    data_var = max(0.0, between - (train_var if train_var == train_var else 0.0) / n_train) if between == between \
        else float("nan")
    total = data_var + train_var if data_var == data_var and train_var == train_var else float("nan")
    return {"data_seeds": len(groups), "train_seeds": n_train, "train_sd": math.sqrt(train_var) if train_var == train_var
            else float("nan"), "data_sd": math.sqrt(data_var) if data_var == data_var else float("nan"),
            "total_sd": math.sqrt(total) if total == total else float("nan")}


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
