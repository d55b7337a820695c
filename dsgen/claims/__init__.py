"""The papers' claims as data, and a verdict for each against a comparison.

Each paper's figures live in ``dsgen/claims/papers/<paper>.toml``: one ``[[claim]]`` per
comparison the paper makes, with the methods it involves, the paper's figures (with table and
page) and a kind:

| kind | reproduced when | contradicted when |
| --- | --- | --- |
| ``greater`` | the 95% interval of method - reference lies above 0 | it lies below 0 |
| ``less`` | it lies below 0 | it lies above 0 |
| ``close`` | it lies within ± ``margin`` | it lies entirely outside ± ``margin`` |
| ``between`` | method > lower and method < upper, both | either is significantly the other way |

anything else is **inconclusive** (the interval covers 0, or the methods are missing). The
interval is the comparison's headline one: a t-interval on paired per-seed differences of the
7-column average (:mod:`dsgen.evaluation.statistics`). A paper figure given as
``{sts12_16, stsb, sick}`` (DINO's Table 2) is turned into that average as
``(5 * sts12_16 + stsb + sick) / 7``.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from dsgen.errors import DsgenError
from dsgen.evaluation.statistics import Interval, seed_t_interval

KINDS = ("greater", "less", "close", "between")
VERDICTS = ("reproduced", "contradicted", "inconclusive")


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

    @property
    def methods(self) -> list[str]:
        """Every method the claim may use (alternatives included)."""
        return list(dict.fromkeys([self.method, *self.reference, *self.lower, *self.upper]))

    @property
    def paper_difference(self) -> float | None:
        if self.kind == "between" or self.paper_method is None or self.paper_reference is None:
            return None
        return self.paper_method - self.paper_reference

    def paper_text(self) -> str:
        if self.kind == "between" and self.paper_method is not None:
            return f"{self.paper_lower:.2f} < {self.paper_method:.2f} < {self.paper_upper:.2f}"
        if self.paper_method is None:
            return "no figure"
        return f"{self.paper_method:.2f} vs {self.paper_reference:.2f} (Δ {self.paper_difference:+.2f})"


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
                                paper_upper=paper_average(c.get("paper_upper")), note=c.get("note", "")))
    return claims


def claim_methods(claims: list[Claim]) -> list[str]:
    """The methods a claims report runs: the first alternative of every role, plus base."""
    names = []
    for c in claims:
        names.append(c.method)
        for role in (c.reference, c.lower, c.upper):
            if role:
                names.append(role[0])
    return list(dict.fromkeys([*names, "base"]))


@dataclass
class Verdict:
    claim: Claim
    verdict: str
    intervals: dict[str, Interval] = field(default_factory=dict)  # role ("vs <name>") -> interval
    used: dict[str, str] = field(default_factory=dict)            # role -> method used
    reason: str = ""


def _pick(names: tuple[str, ...], scores: dict[str, list[float]]) -> str | None:
    return next((n for n in names if n in scores), None)


def judge(claim: Claim, scores: dict[str, list[float]]) -> Verdict:
    """The verdict of one claim from per-seed average scores (method -> scores in seed order)."""
    if claim.method not in scores:
        return Verdict(claim, "inconclusive", reason=f"'{claim.method}' has no result")
    roles = {"reference": claim.reference} if claim.kind != "between" else {"lower": claim.lower, "upper": claim.upper}
    used, intervals = {}, {}
    for role, names in roles.items():
        name = _pick(names, scores)
        if name is None:
            return Verdict(claim, "inconclusive", reason=f"none of {', '.join(names)} has a result")
        used[role] = name
        intervals[role] = seed_t_interval(scores[name], scores[claim.method])
    if any(iv.low is None for iv in intervals.values()):
        return Verdict(claim, "inconclusive", intervals, used, "one seed: no interval")
    if claim.kind == "greater":
        iv = intervals["reference"]
        verdict = "reproduced" if iv.low > 0 else "contradicted" if iv.high < 0 else "inconclusive"
    elif claim.kind == "less":
        iv = intervals["reference"]
        verdict = "reproduced" if iv.high < 0 else "contradicted" if iv.low > 0 else "inconclusive"
    elif claim.kind == "close":
        iv = intervals["reference"]
        m = claim.margin
        verdict = "reproduced" if -m <= iv.low and iv.high <= m else \
            "contradicted" if iv.low > m or iv.high < -m else "inconclusive"
    else:
        lo, up = intervals["lower"], intervals["upper"]
        if lo.low > 0 and up.high < 0:
            verdict = "reproduced"
        elif lo.high < 0 or up.low > 0:
            verdict = "contradicted"
        else:
            verdict = "inconclusive"
    return Verdict(claim, verdict, intervals, used, "interval covers 0" if verdict == "inconclusive" else "")


def judge_all(claims: list[Claim], scores: dict[str, list[float]]) -> list[Verdict]:
    return [judge(c, scores) for c in claims]
