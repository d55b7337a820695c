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

**Power** (:func:`t_power`, :func:`tost_power`, :func:`data_seeds_for_power`): the fewest data
seeds at which a test over the data seeds' means reaches a power, for the claims report's plug-in
estimate of what would decide an inconclusive claim (``dsgen/claims/__init__.py``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

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


def by_data_seed(scores: dict[Run, float]) -> dict[int, list[float]]:
    """A method's runs grouped by data seed, in seed order: data seed -> its runs' values by training seed."""
    out: dict[int, list[float]] = {}
    for (d, _), v in sorted(scores.items()):
        out.setdefault(d, []).append(v)
    return out


def seed_differences(reference: dict[Run, float], other: dict[Run, float]) -> tuple[Any, str]:
    """The paired differences ``other - reference`` that the nested interval and its test are over,
    and what they are: the data seeds' means of the runs both sides have (each over its training
    seeds), or, with one dataset, its training seeds' differences (an empty array without common runs)."""
    import numpy as np

    by_data = by_data_seed({r: other[r] - reference[r] for r in set(reference) & set(other)})
    if not by_data:
        return np.asarray([]), "no common runs"
    if len(by_data) == 1:  # one dataset: over its training seeds only
        diffs = np.asarray(next(iter(by_data.values())))
        return diffs, f"t-interval over {len(diffs)} training seeds on one dataset (data-seed variance not included)"
    n_train = sorted({len(v) for v in by_data.values()})
    per = f"{n_train[0]}" if len(n_train) == 1 else f"{n_train[0]}-{n_train[-1]}"
    what = (f"t-interval over {len(by_data)} data seeds" if n_train == [1] else
            f"nested t-interval over {len(by_data)} data seeds x {per} training seeds")
    return np.asarray([math.fsum(v) / len(v) for v in by_data.values()]), what


def nested_interval(reference: dict[Run, float], other: dict[Run, float], level: float = LEVEL) -> Interval:
    """Hierarchical interval of ``other - reference`` over runs paired by (data seed, training seed).

    Runs only one side has are left out. See the module docstring for why this interval.
    """
    return t_interval(*seed_differences(reference, other), level=level)


def t_interval(diffs: Any, what: str, level: float = LEVEL) -> Interval:
    """t-interval of the mean of ``diffs`` (described by ``what``); no ends with fewer than 2 values."""
    from scipy.special import stdtrit

    if not len(diffs):
        return Interval(float("nan"), None, None, what)
    if len(diffs) < 2:
        return Interval(float(diffs[0]), None, None, what + " (needs 2+)")
    point, sd = mean_sd(diffs)
    half = float(stdtrit(len(diffs) - 1, 0.5 + level / 2) * sd / math.sqrt(len(diffs)))
    return Interval(point, point - half, point + half, what)


def mean_sd(values: Any) -> tuple[float, float]:
    """Mean and sample sd (ddof 1) of a few values (plain floats: faster than numpy on a handful)."""
    xs = [float(x) for x in values]
    mean = math.fsum(xs) / len(xs)
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (len(xs) - 1))


def t_p_value(diffs: Any, null: float = 0.0, alternative: str = "two-sided") -> float:
    """p-value of the one-sample t-test of the mean of ``diffs`` against ``null`` (``alternative``:
    ``two-sided``, ``greater`` or ``less``); NaN with fewer than 2 values. With no spread the mean is
    taken as known (0 or 1)."""
    from scipy.special import stdtr

    if len(diffs) < 2:
        return float("nan")
    mean, sd = mean_sd(diffs)
    if sd == 0:
        return {"two-sided": 0.0 if mean != null else 1.0, "greater": 0.0 if mean > null else 1.0,
                "less": 0.0 if mean < null else 1.0}[alternative]
    stat = (mean - null) / (sd / math.sqrt(len(diffs)))
    df = len(diffs) - 1
    if alternative == "greater":
        return float(stdtr(df, -stat))
    if alternative == "less":
        return float(stdtr(df, stat))
    return float(2 * stdtr(df, -abs(stat)))


def nested_p_value(reference: dict[Run, float], other: dict[Run, float], null: float = 0.0,
                   alternative: str = "two-sided") -> float:
    """p-value of the test behind :func:`nested_interval`: the mean difference against ``null``
    (``alternative``: ``two-sided``, ``greater`` or ``less``). NaN when it cannot be computed."""
    return t_p_value(seed_differences(reference, other)[0], null, alternative)


def holm(p_values: list[float], frees: list[bool] | None = None) -> list[float]:
    """Holm's step-down adjustment of a family of p-values (NaN stays NaN and is not counted).

    ``frees`` (default: all true) says, per hypothesis, whether its rejection frees its share of the
    level for the rest: the hypothesis at step i (in order of p) is compared with
    ``alpha / (K - j)``, j the rejections before it that free their share, so its adjusted p-value
    is the running maximum of ``(K - j) * p``. With every one freeing this is Holm's procedure;
    with none, Bonferroni's.
    """
    valid = sorted((p, i) for i, p in enumerate(p_values) if p == p)
    frees = frees if frees is not None else [True] * len(p_values)
    adjusted = [float("nan")] * len(p_values)
    running, freed = 0.0, 0
    for p, i in valid:
        running = max(running, min(1.0, (len(valid) - freed) * p))
        adjusted[i] = running
        freed += bool(frees[i])
    return adjusted


POWER = 0.8  # the power a plug-in estimate of the data seeds a decision needs is asked for
MOST_DATA_SEEDS = 1000  # beyond this a plug-in estimate says "more than"
TOST_NODES = 200  # Gauss-Legendre nodes of the TOST power's integral over the sample sd (error below 1e-4)


def t_power(effect: float, sd: float, n: int, level: float) -> float:
    """Power of the one-sided t-test at ``level`` over ``n`` values of sd ``sd`` when the true mean
    lies ``effect`` beyond the null on the tested side (negative: on the other side): the noncentral
    t's tail beyond the critical value, ``P(T(n-1, effect * sqrt(n) / sd) > t(1 - level, n-1))``."""
    from scipy.special import nctdtr, stdtrit

    if n < 2:
        return float("nan")
    if sd == 0:
        return 1.0 if effect > 0 else 0.0
    critical = float(stdtrit(n - 1, 1 - level))
    return float(1 - nctdtr(n - 1, effect * math.sqrt(n) / sd, critical))


@functools.cache
def _gauss_legendre(n: int) -> tuple[Any, Any]:
    import numpy as np

    return np.polynomial.legendre.leggauss(n)


def tost_power(difference: float, sd: float, n: int, margin: float, level: float) -> float:
    """Power of the two one-sided tests (TOST) at ``level`` each that the mean lies within
    ``±margin``, over ``n`` values of sd ``sd`` with true mean ``difference``: exact, as the
    probability that ``|mean| + t(1 - level, n-1) * s / sqrt(n) < margin``, integrated over the
    sample sd ``s`` (``(n-1) s^2 / sd^2`` is chi-square with n-1 degrees of freedom, independent of
    the mean)."""
    import numpy as np
    from scipy.special import chdtr, chdtri, ndtr, stdtrit

    if n < 2:
        return float("nan")
    if sd == 0:
        return 1.0 if abs(difference) < margin else 0.0
    df, se = n - 1, sd / math.sqrt(n)
    critical = float(stdtrit(df, 1 - level))
    top = float(chdtr(df, (margin / (critical * se)) ** 2 * df))  # P(s small enough that some mean can pass)
    # Gauss-Legendre over the quantile u of s (as chi-square: df * s^2 / sd^2 = chdtri(df, 1 - u)), u in (0, top)
    nodes, weights = _gauss_legendre(TOST_NODES)
    u = (nodes + 1) * top / 2
    half = margin - critical * se * np.sqrt(chdtri(df, 1 - u) / df)
    passing = np.where(half > 0, ndtr((half - difference) / se) - ndtr((-half - difference) / se), 0.0)
    return float(min(1.0, max(0.0, (weights * passing).sum() * top / 2)))


def data_seeds_for_power(power_at: Any, target: float = POWER, most: int = MOST_DATA_SEEDS) -> int | None:
    """The smallest number of data seeds ``D >= 2`` at which ``power_at(D)`` reaches ``target``
    (None when even ``most`` do not). ``power_at`` must grow with D, as the power of a test whose
    effect lies on its side does (:func:`t_power`, :func:`tost_power`)."""
    if power_at(most) < target:
        return None
    low, high = 1, most  # power_at(low) < target <= power_at(high)
    if power_at(2) >= target:
        return 2
    low = 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if power_at(mid) >= target else (mid, high)
    return high


def variance_components(scores: dict[Run, float]) -> dict[str, float]:
    """Spread of one method's scores by source (one-way random-effects ANOVA on a nested design):
    ``train_sd`` within a dataset, ``data_sd`` between datasets beyond what training explains
    (0 when the data-seed means vary less than training alone would make them), ``total_sd`` of a
    single run, and the counts."""
    import numpy as np

    groups = [np.asarray(v) for v in by_data_seed(scores).values()]
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
    """Ranks of each row of ``x`` (B, n), ties averaged, minus the row's mean rank, in float64. scipy 1.18 ranks a
    float32 input in float32 (1.17 and before in float64): the ranks are the same half-integers, but a Spearman summed
    over them in float32 rounds, so they are widened before anything is computed from them."""
    import numpy as np
    from scipy.stats import rankdata

    r = np.asarray(rankdata(x, axis=1), dtype=np.float64)
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
    """
    return paired_bootstraps(reference, {"other": other}, gold, n_boot, seed, chunk)["other"]


def paired_bootstraps(reference: list[Any], others: dict[str, list[Any]], gold: Any, n_boot: int = 1000,
                      seed: int = 0, chunk: int = 100) -> dict[str, Any]:
    """:func:`paired_bootstrap` of every method in ``others`` against one ``reference``, on the same resamples.

    Ranking the resamples is the cost. Each distinct prediction vector (and the gold) is ranked once per chunk of
    resamples, whichever methods and seeds share it (the reference for all the others; a seed-independent method
    such as ``base`` once for its seeds), and a resample is ranked by counting, not sorting: the values' order is
    known from one sort of the original vector (:func:`_resample_ranker`). The values are those of ranking every
    seed's resample on its own with ``scipy.stats.rankdata`` (ties averaged), bit for bit.
    """
    import numpy as np

    gold = np.asarray(gold, dtype=float)
    rng = np.random.default_rng(seed)
    n = len(gold)
    names = list(others)
    seeds = [list(reference), *(list(others[m]) for m in names)]
    first: dict[bytes, int] = {}
    vectors: list[Any] = []
    which = []  # per method (the reference first): the index in `vectors` of each seed's predictions
    for preds in seeds:
        row = []
        for p in preds:
            p = np.ascontiguousarray(p)
            key = p.dtype.str.encode() + p.tobytes()
            if key not in first:
                first[key] = len(vectors)
                vectors.append(p)
            row.append(first[key])
        which.append(row)
    rank_gold = _resample_ranker(gold)
    rankers = [_resample_ranker(v) for v in vectors]
    out: dict[str, list[Any]] = {m: [] for m in names}
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_boot - start), n))
        rg = rank_gold(idx)
        scores = [spearman_centred(rank(idx), rg) for rank in rankers]
        ref = np.mean([scores[j] for j in which[0]], axis=0)
        for m, row in zip(names, which[1:]):
            out[m].append(np.mean([scores[j] for j in row], axis=0) - ref)
    return {m: np.concatenate(v) for m, v in out.items()}


def _resample_ranker(values: Any) -> Callable[[Any], Any]:
    """``rank(idx)``: :func:`centred_ranks` of ``values[idx]`` for a (B, n) array of resampling indices.

    A resampled value's average rank is the number of resampled values below it plus (its copies + 1) / 2; with the
    values coded by their order once (``np.unique``), a row's counts per code and their running sum give every rank
    in linear time. The ranks are half-integers and the row's mean rank is (n + 1) / 2, so the result equals the
    sorting path's exactly; values with a NaN take that path."""
    import numpy as np

    values = np.asarray(values)
    if np.isnan(values).any():
        return lambda idx: centred_ranks(values[idx])
    levels, codes = np.unique(values, return_inverse=True)
    k = len(levels)

    def rank(idx: Any) -> Any:
        b, n = idx.shape
        x = codes[idx]
        counts = np.bincount((x + (np.arange(b) * k)[:, None]).ravel(), minlength=b * k).reshape(b, k)
        centred = np.cumsum(counts, axis=1) - (counts - 1) / 2 - (n + 1) / 2
        return np.take_along_axis(centred, x, axis=1)

    return rank


def percentile_interval(point: float, samples: Any, level: float = LEVEL, n_boot: int | None = None) -> Interval:
    import numpy as np

    lo, hi = np.percentile(samples, [50 * (1 - level), 50 * (1 + level)])
    return Interval(float(point), float(lo), float(hi), f"paired bootstrap over test pairs ({n_boot or len(samples)} resamples)")
