"""Confirming claims without optional stopping: fresh data seeds, a number fixed before they are seen.

A claims report's verdicts are **exploratory**: a reader who adds data seeds to the same run after seeing an
inconclusive claim, and tests again, spends the 5% level twice (for a claim with no true effect, 15 -> 37 data seeds
gave 6.6-8.7% wrong verdicts). A **confirmation** (``dsgen claims --confirm <claim,...>``) instead

1. plans, from the exploratory run alone, how many data seeds the named claims need (:func:`plan_confirmation`);
2. runs that many data seeds that the exploratory run never used (:func:`confirmation_seeds`: from
   :data:`CONFIRM_FIRST` on, skipping any the exploratory run has), at its training seeds per data seed;
3. tests the named claims on those runs alone as a new family (Holm at 5%, the instrument checks gating it, as
   :func:`dsgen.claims.judge_all` does every family).

Because the confirmation's data are independent of the exploratory data that chose the claims and the number of
seeds, its family's rate of wrong verdicts is that of one fixed test: at most 5% whichever claims were chosen and
however (``tests/claims/test_confirmation.py`` simulates explore-then-confirm on the measured spreads).

**How many data seeds** (not the plug-in point, which treats the observed difference as true: no-smoothing's 37
would be 116 at a true +0.8 and 290 at +0.5, both inside its interval). The plausible effects are those in the
exploratory run's two-sided :data:`PLAUSIBLE` (80%) interval; the planned difference is the one of them that is
hardest to confirm, with the sd of the data seeds' means at its one-sided 80% upper bound (chi-square):

- a direction (``reproduced`` / ``contradicted`` of ``greater`` / ``less`` / ``between``; ``contradicted`` of
  ``close``): the end of the interval nearest the test's null (0, or the margin for ``close``), but never closer
  to it than the claim's margin m: an effect smaller than the margin would need unboundedly many seeds, and the
  claims treat differences within it as none (``no effect``);
- ``no effect`` and ``close``'s ``reproduced`` (TOST): the end farthest from 0, but at most m / 2.

The number is the fewest data seeds at which the verdict being confirmed has :data:`~dsgen.claims.POWER` (80%) at
the strictest threshold of the confirmation's family (ALPHA / K, K the confirmed claims), so every plausible
effect at least that large is confirmed with at least that power. The verdict confirmed is the exploratory one
(its leading verdict when it was inconclusive).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dsgen.claims import ALPHA, Claim, Verdict, power_tests
from dsgen.errors import DsgenError
from dsgen.evaluation.statistics import MOST_DATA_SEEDS, POWER, data_seeds_for_power, mean_sd, t_interval

CONFIRM_FIRST = 1001  # confirmation data seeds start here (presets' exploratory data seeds are small numbers)
PLAUSIBLE = 0.8  # the exploratory interval whose effects a confirmation is planned for
SD_BOUND = 0.8  # the one-sided confidence of the upper bound of the data seeds' sd it is planned at


@dataclass(frozen=True)
class ConfirmPlan:
    """How many fresh data seeds a claim's confirmation needs, and why."""

    claim: Claim
    verdict: str                       # the verdict to confirm (the exploratory one, or its leading verdict)
    exploratory: str                   # the exploratory verdict as reported
    threshold: float                   # ALPHA / K of the confirmation's family
    plausible: dict[str, tuple[float, float]] = field(default_factory=dict)  # role -> the PLAUSIBLE interval
    planned: dict[str, tuple[float, float]] = field(default_factory=dict)    # role -> (difference, sd) planned at
    data_seeds: int | None = None      # the fewest for POWER at the planned differences (None: beyond MOST or why)
    power: float | None = None         # at data_seeds (a lower bound for ``between``'s reproduced)
    why: str = ""

    def text(self) -> str:
        if self.why:
            return self.why
        at = "; ".join(f"{'vs `' + self.claim_role(role) + '` ' if len(self.planned) > 1 else ''}Δ {d:+.2f}, sd {sd:.2f}"
                       for role, (d, sd) in self.planned.items())
        seeds = (f"more than {MOST_DATA_SEEDS:,} data seeds" if self.data_seeds is None
                 else f"{self.data_seeds} data seeds ({self.power:.0%} power)")
        return f"{seeds} to confirm '{self.verdict}' at p < {self.threshold:.2g}, planned at {at}"

    def claim_role(self, role: str) -> str:
        names = {"reference": self.claim.reference, "lower": self.claim.lower, "upper": self.claim.upper}[role]
        return names[0] if names else role

    def to_dict(self) -> dict[str, Any]:
        return {"claim": self.claim.id, "verdict": self.verdict, "exploratory": self.exploratory,
                "threshold": self.threshold, "plausible_level": PLAUSIBLE,
                "plausible": {r: list(v) for r, v in self.plausible.items()},
                "planned": {r: {"difference": d, "sd": sd} for r, (d, sd) in self.planned.items()},
                "data_seeds": self.data_seeds, "power": self.power, "target_power": POWER, "why": self.why or None}


def _planned_difference(claim: Claim, verdict: str, role: str, low: float, high: float, point: float) -> float:
    """The plausible difference (within [low, high]) hardest for ``verdict``'s test to find (module docstring)."""
    m = claim.margin
    if verdict == "no effect" or (claim.kind == "close" and verdict == "reproduced"):
        return math.copysign(min(max(abs(low), abs(high)), m / 2), point)
    if claim.kind == "close":  # contradicted: beyond the margin on the side the run saw
        side = 1.0 if point >= 0 else -1.0
        return side * (m + max(min(side * low, side * high) - m, m))
    wanted = {"greater": 1.0, "less": -1.0}.get(claim.kind)
    if claim.kind == "between":  # reproduced: lower role > 0 and upper role < 0; contradicted: the other way
        wanted = 1.0 if role == "lower" else -1.0
    if verdict == "contradicted":
        wanted = -wanted
    return wanted * max(min(wanted * low, wanted * high), m)


def plan_confirmation(verdicts: list[Verdict], ids: list[str], alpha: float = ALPHA) -> list[ConfirmPlan]:
    """The confirmation plan of the claims named by ``ids`` from their exploratory ``verdicts`` (module docstring);
    a one-line error for an id no verdict has."""
    from scipy.stats import chi2

    by_id = {v.claim.id: v for v in verdicts}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        from dsgen.suggest import unknown as unknown_text

        raise DsgenError(unknown_text("claim", unknown[0], list(by_id)))
    papers = [i for i in ids if not by_id[i].claim.instrument]
    threshold = alpha / max(len(papers), 1)
    plans = []
    for i in ids:
        v = by_id[i]
        t = alpha if v.claim.instrument else threshold
        explored = v.verdict
        if v.p is None or not v.differences:
            plans.append(ConfirmPlan(v.claim, explored, explored, t,
                                     why=f"no exploratory test to plan from ({v.reason or 'no differences'})"))
            continue
        verdict = v.leading if explored == "inconclusive" else explored
        if v.data_seeds < 2 or v.train_seeds is None:
            plans.append(ConfirmPlan(v.claim, verdict, explored, t, why=(
                "one dataset: the data seeds' spread is not measured" if v.train_seeds is not None else
                "unequal training seeds per data seed: the spread of a data seed's mean is not defined")))
            continue
        plausible, planned = {}, {}
        for role, diffs in v.differences.items():
            iv = t_interval(diffs, "", level=PLAUSIBLE)
            plausible[role] = (iv.low, iv.high)
            _, sd = mean_sd(diffs)
            k = len(diffs)
            planned[role] = (_planned_difference(v.claim, verdict, role, iv.low, iv.high, iv.point),
                             sd * math.sqrt((k - 1) / float(chi2.ppf(1 - SD_BOUND, k - 1))))
        power_at = power_tests(v.claim, planned, t)[verdict]
        seeds = data_seeds_for_power(power_at)
        plans.append(ConfirmPlan(v.claim, verdict, explored, t, plausible, planned, seeds,
                                 power_at(seeds) if seeds is not None else None))
    return plans


def confirmation_seeds(n: int, used: list[int] | set[int]) -> list[int]:
    """``n`` data seeds from :data:`CONFIRM_FIRST` on that are not in ``used`` (the exploratory run's)."""
    seeds, s = [], CONFIRM_FIRST
    while len(seeds) < n:
        if s not in used:
            seeds.append(s)
        s += 1
    return seeds


def seeds_to_run(plans: list[ConfirmPlan], data_seeds: int | None = None) -> int:
    """How many fresh data seeds the confirmation runs: ``data_seeds`` when given (a named departure from the
    plan), else the most any planned claim needs; a one-line error when a claim cannot be planned."""
    if data_seeds is not None:
        if data_seeds < 2:
            raise DsgenError(f"--confirm-data-seeds must be at least 2 (got {data_seeds}): an interval needs 2")
        return data_seeds
    blocked = [p for p in plans if p.why or p.data_seeds is None]
    if blocked:
        p = blocked[0]
        why = p.why or f"it needs more than {MOST_DATA_SEEDS:,} data seeds at its plausible effects"
        raise DsgenError(f"cannot plan the confirmation of '{p.claim.id}': {why}; leave it out, or give "
                         "--confirm-data-seeds N")
    return max(p.data_seeds for p in plans)


__all__ = ["CONFIRM_FIRST", "PLAUSIBLE", "ConfirmPlan", "confirmation_seeds", "plan_confirmation", "seeds_to_run"]
