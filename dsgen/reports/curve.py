"""A learning curve: each method's score as the number of generation inputs grows, built from result
files (one comparison per size). Rendering (Markdown, CSV, PNG) lives in :mod:`dsgen.reports.tables`.

Each point is a method's mean average score over its runs at that size, with the 95% nested interval
of that mean (:func:`dsgen.evaluation.statistics.nested_interval`, over data seeds, or over training
seeds on one dataset). The ``human`` row trains on as many human pairs as DINO's dataset holds, so it
grows with the inputs until the human set runs out: such a point is marked as capped. A method with a failed run
at a size (``dsgen.runs.records.RunFailed``: it trained nothing, or crashed) has no score there: its point is marked
failed, with the reasons.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsgen.evaluation.results import Result
from dsgen.evaluation.statistics import Interval, nested_interval


@dataclass(frozen=True)
class CurvePoint:
    """One method at one input count."""

    size: int
    method: str
    interval: Interval | None   # the mean average score with its 95% interval (None: failed, no score)
    runs: int
    train_pairs: float | None   # mean training pairs over the runs
    capped_at: int | None       # the human pairs a capped human point trained on
    failed: tuple[tuple[str, str], ...] = ()  # (run in words, reason) of each failed run at this size

    def to_dict(self) -> dict[str, Any]:
        iv = self.interval
        return {"inputs": self.size, "method": self.method, "mean": None if iv is None else round(iv.point, 3),
                "low": None if iv is None or iv.low is None else round(iv.low, 3),
                "high": None if iv is None or iv.high is None else round(iv.high, 3),
                "interval": None if iv is None else iv.method, "runs": self.runs,
                "train_pairs": None if self.train_pairs is None else round(self.train_pairs, 1),
                "capped_at": self.capped_at, "failed_runs": len(self.failed)}


def mean_interval(scores: dict[tuple[int, int], float]) -> Interval:
    """A method's mean score over its runs with the nested 95% interval of that mean."""
    iv = nested_interval({run: 0.0 for run in scores}, scores)
    return Interval(iv.point, iv.low, iv.high, iv.method.replace("t-interval", "t-interval of the mean"))


def curve_points(results: dict[int, dict[str, list[Result]]],
                 failures: dict[int, list[Any]] | None = None) -> list[CurvePoint]:
    """Points of every (size, method), from ``results[size][method]`` (one result per run) and the failed runs
    at each size (``failures[size]``: ``RunFailed``); a method with any failed run at a size is a failed point."""
    from dsgen.runs.records import run_text

    points = []
    failures = failures or {}
    for size in sorted(set(results) | set(failures)):
        failed: dict[str, list[Any]] = {}
        for f in failures.get(size, []):
            failed.setdefault(f.method, []).append(f)
        at = results.get(size, {})
        for method in dict.fromkeys([*at, *failed]):
            rs = at.get(method, [])
            if method in failed:
                points.append(CurvePoint(size, method, None, len(rs), None, None,
                                         tuple((run_text(f.run), f.reason) for f in failed[method])))
                continue
            if not rs:
                continue
            pairs = [r.extra["train_pairs"] for r in rs if "train_pairs" in r.extra]
            capped = [r.extra.get("size_of", {}).get("capped_at") for r in rs]
            points.append(CurvePoint(size, method, mean_interval({r.run: r.average for r in rs}), len(rs),  # type: ignore[misc]
                                     sum(pairs) / len(pairs) if pairs else None,
                                     max((c for c in capped if c), default=None)))
    return points
