"""The papers' claims as data, and a verdict for each against a comparison.

Each paper's figures live in ``dsgen/claims/papers/<paper>.toml``: one ``[[claim]]`` per
comparison the paper makes, with the methods it involves, the paper's figures (with table and
page) and a kind. A paper figure given as ``{sts12_16, stsb, sick}`` (DINO's Table 2) is shown as
printed and turned into the 7-column average as ``(5 * sts12_16 + stsb + sick) / 7``. A file with
``instrument = true`` (``control.toml``: the encoder and trainer learn from human pairs) holds
instrument checks, not a paper's claims (below).

**One claim's test.** A claim is judged on the difference ``d`` of the 7-column average between
its methods (``between`` has two: ``dL = method - lower``, ``dU = method - upper``), paired by (data
seed, training seed) run: the data are the data seeds' mean differences and every p-value is a
t-test over them (:func:`dsgen.evaluation.statistics.seed_differences`; over training seeds when
there is one dataset). ``p(>c)`` is the one-sided p-value of "``d > c``", ``p(<c)`` the other side.
Every verdict a claim can reach is right for some true differences and has a p-value:

| kind | verdict | right when | p-value |
| --- | --- | --- | --- |
| ``greater`` | reproduced | d > 0 | 2 p(>0) |
| | contradicted | d < 0 | 2 p(<0) |
| | no effect at this scale | abs(d) < m, where the paper's abs(Δ) > m or it gives none | max(p(>-m), p(<m)) (TOST) |
| ``less`` | as ``greater``, sides swapped | | |
| ``close`` | reproduced | abs(d) <= m | max(p(>-m), p(<m)) (TOST) |
| | contradicted | abs(d) > m | 2 min(p(>m), p(<-m)) |
| ``between`` | reproduced | dL > 0 and dU < 0 | max(pL(>0), pU(<0)) (intersection-union) |
| | contradicted | dL <= 0 or dU >= 0 | 2 min(pL(<0), pU(>0)) |

(m: the claim's ``margin``; doubled p-values capped at 1). The claim's p-value is the smallest of
its verdicts' and, if it is decided, its verdict is that one's; otherwise it is **inconclusive**
(and the row says why: the interval too wide even alone, the multiplicity step, or a method
without a result).

*Why a wrong verdict at threshold t has probability at most t, whatever the true differences.*
Write ``L_a``/``U_a`` for the lower/upper ends of the t-interval at tail ``a`` (``p(>c) <= a`` iff
``L_a >= c``). A decision at t is a confidence statement: a directional verdict needs the interval
at tail t/2 (the two-sided 1 - t interval) on one side of 0; "no effect" and ``close``'s support
need the interval at tail t (the 1 - 2t interval) inside (-m, m); ``close``'s contradiction needs
the tail-t/2 interval beyond +m or -m; ``between``'s support ``L_t(dL) > 0`` and ``U_t(dU) < 0``,
its contradiction ``U_t/2(dL) < 0`` or ``L_t/2(dU) > 0``. A verdict that is wrong is reached only
if the interval end it uses misses the true difference:

- ``greater`` at d = 0: reproduced and contradicted are both wrong, and need the tail-t/2 interval
  to miss 0 above or below: t/2 + t/2 = t (the two-sided test). No effect is right.
- 0 < d < m: only contradicted is wrong (``U_t/2 < 0 < d``): at most t/2.
- d >= m: contradicted and no effect are wrong, and both need ``U_t < m <= d`` (contradicted's
  ``U_t/2 < 0`` implies it): one tail, at most t. This is why the TOST p-value is not doubled:
  the wrong-verdict event is a single tail. Negative d mirrors this, ``less`` too.
- ``close``, abs(d) <= m: only contradicted is wrong, and needs ``L_t/2 > m >= d`` or
  ``U_t/2 < -m <= d``: two tails at t/2, at most t. Undoubled (before this module's present form),
  this was t + t at the margin when the margin is small against the interval's width: size up to 2t.
  abs(d) > m: only reproduced is wrong, and needs ``U_t < m < d`` (or ``L_t > -m > d``): at most t.
- ``between``, dL > 0 and dU < 0: only contradicted is wrong, and needs one of two intervals at
  tail t/2 to miss (whatever their correlation): at most t (undoubled: 2t at the boundary). Else,
  say dL <= 0: only reproduced is wrong, and needs ``L_t(dL) > 0 >= dL``: at most t.

So each claim's p-value is valid for its own wrong verdict: P(decided wrongly at t) <= t.

**Two families.** *Instrument checks* (the control) are each tested alone at ``ALPHA``: they say
whether the instrument (encoder, trainer, evaluation) works, not whether a paper is right. They **gate** the papers'
family: unless every instrument check in the report is reproduced, no paper's claim gets a verdict (each is
inconclusive, its row naming the check that failed and the verdict its test would have given); withholding verdicts
can only lower the rate of wrong ones. *The papers' claims* are one family, whichever verdict
each reaches, tested by Holm's step-down at ``ALPHA`` = 5% over their K p-values
(:func:`dsgen.evaluation.statistics.holm`): in order of p, the claim at each step is decided if
``p < ALPHA / (K - j)``, j the decisions before it that free their share of the level, and the
first claim that fails stops the rest. A "no effect" decision frees none (below).

What this rests on. At ALPHA / K for every claim (Bonferroni) the rate of wrong verdicts is at most
K x ALPHA / K = ALPHA by the union bound and the claim-level bound above, under any dependence
between the claims (they share methods and datasets). Holm's step-down relaxes the later steps
because a claim already decided is taken to have been one that could not err (Holm 1979, Scand. J.
Statist. 6:65-70). Decided in a direction, a claim nearly is: its wrong verdict would be the other
direction, at most t/2 and vanishing as the effect grows clear; Holm with directional decisions
keeps the rate of all wrong verdicts (false and reversed directions) at ALPHA for independent
statistics (Shaffer 1980, Ann. Statist. 8:1342-1347; Finner 1999, Ann. Statist. 27:274-289, more
widely), and no theorem covers the dependence of claims that share a method or a dataset. A claim
decided "no effect" is different: its true difference is near 0, the boundary between its two
directional verdicts, where their risk stays the full t however many data seeds there are, and the
claims it leaves undecided are those with large observed differences. Letting it free its share
(plain Holm) took the rate of wrong verdicts under the null to 5.7% at 50 data seeds x 3 training
seeds, 7.9-8.1% at 100 and 10.1% at 200 (2,000 draws each, the measured spreads or independent
methods); held, 2.3-3.0% on the same draws. So a "no effect" decision is made at its step's
threshold but frees no share. The check is a simulation of the whole procedure on the real family with the measured
spreads and correlations, under the null and under effects (``tests/claims/test_family_simulation.py``).

**What would decide an inconclusive claim** (:meth:`Verdict.power`): a plug-in estimate, taking the
observed mean difference and spread of the data seeds' means (at the run's training seeds per data
seed) as true, of the fewest data seeds at which the claim's test has 80% power
(:func:`dsgen.evaluation.statistics.data_seeds_for_power`; noncentral t, TOST power for "no
effect", a lower bound for ``between``), at the strictest threshold its family can ask, ALPHA / K
(enough whatever the other claims do), or ALPHA for an instrument check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from dsgen.artifacts import tomllib
from dsgen.errors import DsgenError
from dsgen.evaluation.statistics import (MOST_DATA_SEEDS, POWER, Interval, Run, data_seeds_for_power, holm,
                                         mean_sd, seed_differences, t_interval, t_p_value, t_power, tost_power)

KINDS = ("greater", "less", "close", "between")
VERDICTS = ("reproduced", "contradicted", "no effect", "inconclusive")
ALPHA = 0.05  # a claim's verdicts together are a level-5% test; Holm over the papers' family keeps them at 5% together


def paper_average(figure: Any) -> float | None:
    """A paper figure as DINO's 7-column average."""
    if figure is None:
        return None
    if isinstance(figure, (int, float)):
        return float(figure)
    if isinstance(figure, dict) and set(figure) == {"sts12_16", "stsb", "sick"}:
        return (5 * figure["sts12_16"] + figure["stsb"] + figure["sick"]) / 7
    raise DsgenError(f"a paper figure must be a number or {{sts12_16, stsb, sick}} (got {figure!r})")


@dataclass(frozen=True)
class Claim:
    """One comparison a paper makes (see the module docstring)."""

    paper: str
    id: str
    table: str
    page: int | None
    statement: str
    kind: str
    method: str
    reference: tuple[str, ...] = ()
    lower: tuple[str, ...] = ()
    upper: tuple[str, ...] = ()
    margin: float = 1.0
    paper_method: float | None = None
    paper_reference: float | None = None
    paper_lower: float | None = None
    paper_upper: float | None = None
    note: str = ""
    printed: dict[str, Any] = field(default_factory=dict)  # role -> the paper's figure as printed (a number or columns)
    instrument: bool = False  # an instrument check (the control), tested alone, outside the papers' family

    @property
    def methods(self) -> list[str]:
        """Every method the claim may use (alternatives included)."""
        return list(dict.fromkeys([self.method, *self.reference, *self.lower, *self.upper]))

    @property
    def paper_difference(self) -> float | None:
        if self.kind == "between" or self.paper_method is None or self.paper_reference is None:
            return None
        return self.paper_method - self.paper_reference

    @property
    def offers_no_effect(self) -> bool:
        """Whether "no effect" is one of the claim's verdicts: a ``greater`` / ``less`` claim whose paper difference
        lies beyond the margin or is not given ("no effect" says more than the paper's own difference only then)."""
        paper = self.paper_difference
        return self.kind in ("greater", "less") and (paper is None or abs(paper) > self.margin)

    def paper_text(self) -> str:
        """The paper's figures as printed, with the derived 7-column average where they are columns."""
        def shown(role: str, value: float | None) -> str:
            figure = self.printed.get(role)
            if isinstance(figure, dict):
                return " / ".join(f"{figure[k]:.2f}" for k in ("sts12_16", "stsb", "sick")) + f" (avg. {value:.2f})"
            return f"{value:.2f}"

        if self.kind == "between" and self.paper_method is not None:
            return (f"{shown('lower', self.paper_lower)} < {shown('method', self.paper_method)} < "
                    f"{shown('upper', self.paper_upper)}")
        if self.paper_method is None:
            return "no figure"
        return (f"{shown('method', self.paper_method)} vs {shown('reference', self.paper_reference)} "
                f"(Δ {self.paper_difference:+.2f})")


def _names(value: Any) -> tuple[str, ...]:
    return tuple([value] if isinstance(value, str) else list(value or []))


def load_claims(papers: list[str] | None = None) -> list[Claim]:
    """Every claim of the built-in paper files (or of the named papers), checked on load."""
    folder = resources.files("dsgen.claims") / "papers"
    claims = []
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if not entry.name.endswith(".toml") or (papers and entry.name[:-5] not in papers):
            continue
        data = tomllib.loads(entry.read_text(encoding="utf-8"))
        for c in data.get("claim", []):
            kind = c.get("kind")
            if kind not in KINDS:
                raise DsgenError(f"{entry.name}: claim {c.get('id')} has kind {kind!r}; use one of {', '.join(KINDS)}")
            claims.append(Claim(paper=data["paper"], id=c["id"], table=c["table"], page=c.get("page"),
                                statement=c["statement"], kind=kind, method=c["method"],
                                reference=_names(c.get("reference")), lower=_names(c.get("lower")),
                                upper=_names(c.get("upper")), margin=float(c.get("margin", 1.0)),
                                paper_method=paper_average(c.get("paper_method")),
                                paper_reference=paper_average(c.get("paper_reference")),
                                paper_lower=paper_average(c.get("paper_lower")),
                                paper_upper=paper_average(c.get("paper_upper")), note=c.get("note", ""),
                                printed={role: c[f"paper_{role}"] for role in ("method", "reference", "lower", "upper")
                                         if c.get(f"paper_{role}") is not None},
                                instrument=bool(data.get("instrument", False))))
    return claims


FOUNDING = ("dino", "rise", "gense", "control")  # the papers ``dsgen claims`` tests unless told otherwise


def paper_files() -> list[str]:
    """The names of the built-in paper files (``dsgen/claims/papers/<name>.toml``)."""
    folder = resources.files("dsgen.claims") / "papers"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


@dataclass(frozen=True)
class Figure:
    """A paper's headline figure that no comparison here can test, and why (listed in the report)."""

    paper: str
    table: str
    page: int | None
    statement: str
    why: str


def load_figures(papers: list[str] | None = None) -> list[Figure]:
    """The ``[[figure]]`` entries of the paper files (or of the named ones)."""
    folder = resources.files("dsgen.claims") / "papers"
    out = []
    for name in paper_files():
        if papers and name not in papers:
            continue
        data = tomllib.loads((folder / f"{name}.toml").read_text(encoding="utf-8"))
        for f in data.get("figure", []):
            out.append(Figure(data["paper"], f["table"], f.get("page"), f["statement"], f["why"]))
    return out


def claim_methods(claims: list[Claim]) -> list[str]:
    """The methods a claims report runs: the first alternative of every role, plus base."""
    names = []
    for c in claims:
        names.append(c.method)
        for role in (c.reference, c.lower, c.upper):
            if role:
                names.append(role[0])
    return list(dict.fromkeys([*names, "base"]))


@dataclass(frozen=True)
class PowerEstimate:
    """What would decide an inconclusive claim: a plug-in estimate (the observed mean difference and
    spread of the data seeds' means taken as true) of the fewest data seeds, at the run's training
    seeds per data seed, at which the claim's test at ``threshold`` has 80% power."""

    data_seeds: int | None  # None: not within MOST_DATA_SEEDS, or cannot be estimated (``why``)
    verdict: str | None     # the verdict it would reach
    threshold: float
    rule: str               # which threshold: "ALPHA / K" (the strictest Holm step) or "ALPHA" (alone)
    train_seeds: int | None
    power: float | None = None  # the plug-in power at ``data_seeds``
    bound: bool = False         # a lower bound of the power (``between``: two tests at once)
    why: str = ""

    def text(self) -> str:
        if self.why:
            return self.why
        at = f"p < {self.threshold:.2g} = {self.rule}"
        if self.data_seeds is None:
            return f"more than {MOST_DATA_SEEDS:,} data seeds at the observed difference and spread ({at})"
        per = f" x {self.train_seeds} training seeds" if self.train_seeds and self.train_seeds > 1 else ""
        find = "find no effect" if self.verdict == "no effect" else f"find it {self.verdict}"
        return (f"{self.data_seeds} data seeds{per} for {POWER:.0%} power to {find} ({at}; plug-in"
                f"{', a lower bound' if self.bound else ''})")

    def to_dict(self) -> dict[str, Any]:
        return {"data_seeds": self.data_seeds, "verdict": self.verdict, "threshold": self.threshold, "rule": self.rule,
                "train_seeds": self.train_seeds, "power": self.power, "lower_bound": self.bound,
                "target_power": POWER, "estimate": "plug-in (observed difference and spread taken as true)",
                "why": self.why}


@dataclass
class Verdict:
    """A claim's verdict, with the test behind it (see the module docstring)."""

    claim: Claim
    verdict: str
    intervals: dict[str, Interval] = field(default_factory=dict)  # role -> interval of method - that role's method
    used: dict[str, str] = field(default_factory=dict)            # role -> method used
    reason: str = ""
    p_values: dict[str, float] = field(default_factory=dict)      # verdict -> its p-value (module docstring)
    p: float | None = None          # the claim's p-value: the smallest of ``p_values``
    leading: str | None = None      # the verdict of that p-value (the claim's verdict if decided)
    p_holm: float | None = None     # Holm-adjusted over the family (= p for an instrument check)
    step: float | None = None       # its Holm step's threshold, ALPHA / (K - j): j decisions before it free a share
    family: str = "papers"          # "papers" or "instrument"
    family_size: int = 1            # K: the claims with a p-value in its family (1 for an instrument check)
    gate: str = ""                  # why the papers' family was not judged (an instrument check did not pass)
    alpha: float = ALPHA
    differences: dict[str, Any] = field(default_factory=dict, repr=False)  # role -> the differences tested
    data_seeds: int = 0             # of the runs the claim's methods share
    train_seeds: int | None = None  # per data seed in those runs (None when the counts differ)

    @property
    def half_width(self) -> float | None:
        """Half the width of the widest 95% interval of the claim (None without one)."""
        widths = [(iv.high - iv.low) / 2 for iv in self.intervals.values() if iv.low is not None]
        return max(widths) if widths else None

    @property
    def threshold(self) -> float:
        """The strictest threshold the claim's family can ask: ALPHA / K (ALPHA alone for an instrument check)."""
        return self.alpha / max(self.family_size, 1)

    def power(self) -> PowerEstimate | None:
        """What would decide this claim if it is inconclusive (None when it is decided or has no test)."""
        if self.verdict != "inconclusive" or self.p is None:
            return None
        if self.gate:
            return PowerEstimate(None, None, self.threshold, "", self.train_seeds,
                                 why="first the instrument checks must pass (more data seeds do not help a broken instrument)")
        rule = "ALPHA" if self.family == "instrument" else f"ALPHA / K = {self.alpha:g} / {self.family_size}"
        why = ("one dataset: the data seeds' spread is not measured" if self.data_seeds < 2 else
               "unequal training seeds per data seed: no plug-in estimate" if self.train_seeds is None else "")
        if why:
            return PowerEstimate(None, None, self.threshold, rule, self.train_seeds, why=why)
        return claim_power(self.claim, self.differences, self.threshold, rule, self.train_seeds)


Scores = dict[str, dict[Run, float]]  # method -> (data seed, training seed) -> 7-column average


def verdict_p_values(claim: Claim, differences: dict[str, Any]) -> dict[str, float]:
    """The p-value of each verdict the claim can reach (module docstring), from the differences its test
    is over (role -> the data seeds' mean differences of the method minus that role's method)."""
    def p(role: str, null: float, side: str) -> float:
        return t_p_value(differences[role], null, side)

    def doubled(value: float) -> float:
        return min(1.0, 2 * value)

    m = claim.margin
    if claim.kind == "between":
        return {"reproduced": max(p("lower", 0, "greater"), p("upper", 0, "less")),
                "contradicted": doubled(min(p("lower", 0, "less"), p("upper", 0, "greater")))}
    equivalent = max(p("reference", -m, "greater"), p("reference", m, "less"))
    if claim.kind == "close":
        return {"reproduced": equivalent,
                "contradicted": doubled(min(p("reference", m, "greater"), p("reference", -m, "less")))}
    side, other = ("greater", "less") if claim.kind == "greater" else ("less", "greater")
    out = {"reproduced": doubled(p("reference", 0, side)), "contradicted": doubled(p("reference", 0, other))}
    if claim.offers_no_effect:
        out["no effect"] = equivalent
    return out


def power_tests(claim: Claim, stats: dict[str, tuple[float, float]], threshold: float) -> dict[str, Any]:
    """For each verdict the claim can reach, its test's power at ``threshold`` as a function of the data seeds,
    if each role's (mean, sd) of the data seeds' mean differences in ``stats`` is the truth."""
    m, half = claim.margin, threshold / 2  # a doubled p-value below t is a one-sided one below t / 2
    tests: dict[str, Any] = {}
    if claim.kind == "between":
        (lo, slo), (up, sup) = stats["lower"], stats["upper"]
        tests["reproduced"] = lambda n: max(0.0, t_power(lo, slo, n, threshold) + t_power(-up, sup, n, threshold) - 1)
        tests["contradicted"] = lambda n: max(t_power(-lo, slo, n, half), t_power(up, sup, n, half))
        return tests
    d, sd = stats["reference"]
    sign = -1.0 if claim.kind == "less" else 1.0
    if claim.kind == "close":
        tests["reproduced"] = lambda n: tost_power(d, sd, n, m, threshold)
        tests["contradicted"] = lambda n: t_power(d - m, sd, n, half) + t_power(-d - m, sd, n, half)
        return tests
    tests["reproduced"] = lambda n: t_power(sign * d, sd, n, half)
    tests["contradicted"] = lambda n: t_power(-sign * d, sd, n, half)
    if claim.offers_no_effect:
        tests["no effect"] = lambda n: tost_power(d, sd, n, m, threshold)
    return tests


def claim_power(claim: Claim, differences: dict[str, Any], threshold: float, rule: str,
                train_seeds: int) -> PowerEstimate:
    """The plug-in estimate of :meth:`Verdict.power`: for each verdict the claim can reach, the fewest
    data seeds at which its test at ``threshold`` has 80% power if the observed mean differences and
    spreads are the truth; the verdict that needs the fewest is reported."""
    tests = power_tests(claim, {role: mean_sd(d) for role, d in differences.items()}, threshold)
    best = None
    for verdict, power_at in tests.items():
        seeds = data_seeds_for_power(power_at)
        if seeds is not None and (best is None or seeds < best[0]):
            best = (seeds, verdict, power_at(seeds))
    if best is None:
        return PowerEstimate(None, None, threshold, rule, train_seeds)
    return PowerEstimate(best[0], best[1], threshold, rule, train_seeds, power=best[2], bound=claim.kind == "between")


def _decide(verdicts: list[Verdict], alpha: float, family: str) -> None:
    """Decide a family of claims: Holm's step-down over the tested ones' p-values, a "no effect" decision
    freeing no share of the level (module docstring); for an instrument check, a family of one."""
    tested = [v for v in verdicts if v.p is not None]
    for v in verdicts:
        v.family, v.family_size, v.alpha = family, len(tested), alpha
    frees = [v.leading != "no effect" for v in tested]
    adjusted = holm([v.p for v in tested], frees)
    freed = 0
    for i in sorted(range(len(tested)), key=lambda i: tested[i].p):  # the order holm() steps in
        v = tested[i]
        v.p_holm, v.step = adjusted[i], alpha / (len(tested) - freed)
        freed += frees[i]
        if v.p_holm < alpha:
            v.verdict = v.leading
            if v.verdict == "no effect":
                v.reason = f"within ±{v.claim.margin:g} of 0, the paper's effect is not"
        elif v.p >= alpha:
            v.reason = "interval too wide to decide"
        else:
            stop = (f"needs p < {v.step:.2g} at its step" if v.p >= v.step else
                    f"its step's p < {v.step:.2g} is met, but Holm stopped at a claim before it")
            v.reason = (f"decided alone as {v.leading} at p = {v.p:.2g}, not after Holm over {len(tested)} claims "
                        f"({stop})")


def judge_all(claims: list[Claim], scores: Scores, missing: dict[str, str] | None = None,
              alpha: float = ALPHA, gate: bool = True) -> list[Verdict]:
    """Verdicts of a set of claims (see the module docstring): each instrument check alone, the papers'
    claims as one family, Holm-adjusted at ``alpha`` whichever verdict each reaches, and judged only if every
    instrument check among ``claims`` is reproduced.

    Args:
        scores: per method, the 7-column average of every run.
        missing: method -> why it has no result (a run that produced no model), for the claim's row.
        gate: False judges the papers' family whatever the instrument checks say (their rows still say it).
    """
    missing = missing or {}
    verdicts: list[Verdict] = []
    for claim in claims:
        roles = {"reference": claim.reference} if claim.kind != "between" else {"lower": claim.lower, "upper": claim.upper}
        used = {role: names[0] for role, names in roles.items()}  # the claim's own comparison, never a stand-in
        family = "instrument" if claim.instrument else "papers"
        v = Verdict(claim, "inconclusive", used=used, family=family, alpha=alpha)
        verdicts.append(v)
        absent = [n for n in [claim.method, *used.values()] if n not in scores]
        if absent:
            v.reason = "; ".join(f"'{n}' has no result" + (f": {missing[n]}" if n in missing else "") for n in absent)
            continue
        paired = {role: seed_differences(scores[name], scores[claim.method]) for role, name in used.items()}
        v.intervals = {role: t_interval(*diffs) for role, diffs in paired.items()}
        if any(iv.low is None for iv in v.intervals.values()):
            v.reason = "one run: no interval"
            continue
        v.differences = {role: diffs for role, (diffs, _) in paired.items()}
        v.p_values = verdict_p_values(claim, v.differences)
        v.leading = min(v.p_values, key=v.p_values.get)
        v.p = v.p_values[v.leading]
        v.data_seeds, v.train_seeds = _design(scores[claim.method], *(scores[n] for n in used.values()))
    instruments = [v for v in verdicts if v.family == "instrument"]
    for v in instruments:
        _decide([v], alpha, "instrument")
    papers = [v for v in verdicts if v.family == "papers"]
    _decide(papers, alpha, "papers")
    failed = [v for v in instruments if v.verdict != "reproduced"]
    if gate and failed:
        why = ("not judged: the instrument check " + ", ".join(f"{v.claim.id} ({v.verdict})" for v in failed)
               + " did not pass")
        for v in papers:
            would = v.verdict + (f", {v.reason}" if v.reason and v.verdict == "inconclusive" else "")
            v.gate, v.verdict, v.reason = why, "inconclusive", f"{why}; ungated, the family's test gives: {would}"
    return verdicts


def _design(*scores: dict[Run, float]) -> tuple[int, int | None]:
    """The data seeds of the runs the scores share, and the training seeds per data seed (None when they differ)."""
    per: dict[int, int] = {}
    for d, _ in set.intersection(*(set(s) for s in scores)):
        per[d] = per.get(d, 0) + 1
    counts = set(per.values())
    return len(per), counts.pop() if len(counts) == 1 else None


def judge(claim: Claim, scores: Scores, missing: dict[str, str] | None = None) -> Verdict:
    """The verdict of one claim on its own (a family of one: no adjustment)."""
    return judge_all([claim], scores, missing)[0]
