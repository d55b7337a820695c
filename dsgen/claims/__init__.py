"""The papers' claims as data, and a verdict for each against a comparison.

Each paper's figures live in ``dsgen/claims/papers/<paper>.toml``: one ``[[claim]]`` per
comparison the paper makes, with the methods it involves, the paper's figures (with table and
page) and a kind. A claim is judged on the difference of the 7-column average between the methods,
paired by (data seed, training seed) run, with the nested interval of
:mod:`dsgen.evaluation.statistics`. Each verdict is a one-sided test at level 2.5% (the side of a
95% interval), and the family of claims is Holm-adjusted, so that all verdicts of a report hold
together at that level:

| kind | reproduced when | contradicted when | no effect at this scale when |
| --- | --- | --- | --- |
| ``greater`` | method - reference > 0 | < 0 | within ± ``margin`` of 0 while the paper's difference is not |
| ``less`` | < 0 | > 0 | as for ``greater`` |
| ``close`` | within ± ``margin`` | beyond ± ``margin`` | - |
| ``between`` | method > lower and method < upper | either the other way | - |

anything else is **inconclusive** (the interval is too wide to say, or a method has no result, in
which case the row says why). A paper figure given as ``{sts12_16, stsb, sick}`` (DINO's Table 2)
is shown as printed and turned into the 7-column average as ``(5 * sts12_16 + stsb + sick) / 7``.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from dsgen.errors import DsgenError
from dsgen.evaluation.statistics import Interval, Run, holm, nested_interval, nested_p_value

KINDS = ("greater", "less", "close", "between")
VERDICTS = ("reproduced", "contradicted", "no effect", "inconclusive")
ALPHA = 0.025  # each verdict's one-sided level (a 95% interval's side), family-wise with Holm


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
                                         if c.get(f"paper_{role}") is not None}))
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


@dataclass
class Verdict:
    claim: Claim
    verdict: str
    intervals: dict[str, Interval] = field(default_factory=dict)  # role -> interval of method - that role's method
    used: dict[str, str] = field(default_factory=dict)            # role -> method used
    reason: str = ""
    p_values: dict[str, float] = field(default_factory=dict)     # support / against / null, Holm-adjusted

    @property
    def half_width(self) -> float | None:
        """Half the width of the widest 95% interval of the claim (None without one)."""
        widths = [(iv.high - iv.low) / 2 for iv in self.intervals.values() if iv.low is not None]
        return max(widths) if widths else None


Scores = dict[str, dict[Run, float]]  # method -> (data seed, training seed) -> 7-column average


def _tests(claim: Claim, scores: Scores, used: dict[str, str]) -> dict[str, float]:
    """One-sided p-values of the claim's three possible verdicts (NaN where a verdict does not apply)."""
    m = scores[claim.method]
    margin = claim.margin
    nan = float("nan")
    if claim.kind == "between":
        lo, up = scores[used["lower"]], scores[used["upper"]]
        return {"support": max(nested_p_value(lo, m, 0, "greater"), nested_p_value(up, m, 0, "less")),
                "against": min(nested_p_value(lo, m, 0, "less"), nested_p_value(up, m, 0, "greater")), "null": nan}
    ref = scores[used["reference"]]
    equivalent = max(nested_p_value(ref, m, -margin, "greater"), nested_p_value(ref, m, margin, "less"))
    if claim.kind == "close":
        return {"support": equivalent, "against": min(nested_p_value(ref, m, margin, "greater"),
                                                      nested_p_value(ref, m, -margin, "less")), "null": nan}
    side = "greater" if claim.kind == "greater" else "less"
    other = "less" if side == "greater" else "greater"
    paper = claim.paper_difference
    no_effect_applies = paper is None or abs(paper) > margin
    return {"support": nested_p_value(ref, m, 0, side), "against": nested_p_value(ref, m, 0, other),
            "null": equivalent if no_effect_applies else nan}


def judge_all(claims: list[Claim], scores: Scores, missing: dict[str, str] | None = None,
              alpha: float = ALPHA) -> list[Verdict]:
    """Verdicts of a family of claims (see the module docstring), Holm-adjusted over the family.

    Args:
        scores: per method, the 7-column average of every run.
        missing: method -> why it has no result (a run that produced no model), for the claim's row.
    """
    missing = missing or {}
    verdicts: list[Verdict] = []
    tests: list[dict[str, float]] = []
    for claim in claims:
        roles = {"reference": claim.reference} if claim.kind != "between" else {"lower": claim.lower, "upper": claim.upper}
        used = {role: names[0] for role, names in roles.items()}  # the claim's own comparison, never a stand-in
        absent = [n for n in [claim.method, *used.values()] if n not in scores]
        if absent:
            why = "; ".join(f"'{n}' has no result" + (f": {missing[n]}" if n in missing else "") for n in absent)
            verdicts.append(Verdict(claim, "inconclusive", used=used, reason=why))
            tests.append({})
            continue
        intervals = {role: nested_interval(scores[name], scores[claim.method]) for role, name in used.items()}
        verdicts.append(Verdict(claim, "inconclusive", intervals, used))
        tests.append(_tests(claim, scores, used) if all(iv.low is not None for iv in intervals.values()) else {})
    adjusted = {kind: holm([t.get(kind, float("nan")) for t in tests]) for kind in ("support", "against", "null")}
    for i, v in enumerate(verdicts):
        if not tests[i]:
            v.reason = v.reason or "one run: no interval"
            continue
        v.p_values = {kind: adjusted[kind][i] for kind in adjusted}
        if v.p_values["support"] < alpha:
            v.verdict = "reproduced"
        elif v.p_values["against"] < alpha:
            v.verdict = "contradicted"
        elif v.p_values["null"] < alpha:
            v.verdict = "no effect"
            v.reason = f"within ±{v.claim.margin:g} of 0, the paper's effect is not"
        else:
            v.reason = "interval too wide to decide"
    return verdicts


def judge(claim: Claim, scores: Scores, missing: dict[str, str] | None = None) -> Verdict:
    """The verdict of one claim on its own (a family of one: no adjustment)."""
    return judge_all([claim], scores, missing)[0]
