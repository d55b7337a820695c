"""Each verdict path of a claim, its p-value's size, the two families and the wording of an undecided claim
(issue 31, item 1; the procedure and its proof are in ``dsgen/claims/__init__.py``)."""

import numpy as np
import pytest

from dsgen.claims import ALPHA, Claim, judge, judge_all, load_claims


def runs(values, data=(1, 2, 3), train=(1, 2)):
    """Scores over data seeds x training seeds: ``values`` per data seed, a training jitter that pairing cancels."""
    return {(d, t): v + 0.05 * t for d, v in zip(data, values) for t in train}


def shifted(diffs, base=(50.0, 52.0, 51.0, 50.5, 51.5, 49.5)):
    """(reference, method) whose paired data-seed differences are exactly ``diffs``."""
    base = base[:len(diffs)]
    data = tuple(range(1, len(diffs) + 1))
    return runs(base, data), runs([b + d for b, d in zip(base, diffs)], data)


def claim(kind="greater", margin=1.0, paper=(76.2, 74.49), method="a", **kw):
    roles = {"lower": ("l",), "upper": ("u",)} if kind == "between" else {"reference": ("b",)}
    return Claim("P", kw.pop("id", "c"), "Table 1", 1, f"{method} vs b", kind, method, margin=margin,
                 paper_method=paper[0], paper_reference=paper[1], **roles, **kw)


def verdict(kind, diffs, **kw):
    ref, method = shifted(diffs)
    return judge(claim(kind, **kw), {"a": method, "b": ref})


# -- every verdict path, and the side it is on --------------------------------------------------------------------

@pytest.mark.parametrize("kind,diffs,expected", [
    ("greater", [3.0, 3.2, 2.9], "reproduced"),
    ("greater", [-3.0, -3.2, -2.9], "contradicted"),
    ("greater", [0.05, -0.05, 0.02], "no effect"),
    ("less", [-3.0, -3.2, -2.9], "reproduced"),
    ("less", [3.0, 3.2, 2.9], "contradicted"),
    ("less", [0.05, -0.05, 0.02], "no effect"),
    ("close", [0.05, -0.05, 0.02], "reproduced"),
    ("close", [0.85, 0.9, 0.88], "reproduced"),       # inside +1, near it: the upper side of the TOST
    ("close", [-0.85, -0.9, -0.88], "reproduced"),    # the lower side
    ("close", [3.0, 3.2, 2.9], "contradicted"),       # beyond +1
    ("close", [-3.0, -3.2, -2.9], "contradicted"),    # beyond -1
    ("close", [1.5, 1.55, 1.52], "contradicted"),     # just beyond +1: the margin, not 0, is the boundary
])
def test_each_verdict_is_reached_on_its_own_side(kind, diffs, expected):
    """Reversing any inequality of a verdict (its side, or the margin's) turns one of these rows into another."""
    v = verdict(kind, diffs)
    assert v.verdict == expected, (v.verdict, v.p_values)
    assert v.p == min(v.p_values.values()) and v.leading == expected


@pytest.mark.parametrize("method,expected", [(52.0, "reproduced"), (49.0, "contradicted"), (56.0, "contradicted")])
def test_between_is_reproduced_only_strictly_between_its_bounds(method, expected):
    lower, upper = runs([50.0, 50.1, 49.9]), runs([54.0, 54.1, 53.9])
    a = runs([method, method + 0.1, method - 0.1])
    v = judge(claim("between"), {"a": a, "l": lower, "u": upper})
    assert v.verdict == expected, v.p_values
    swapped = judge(claim("between"), {"a": a, "l": upper, "u": lower})  # bounds the other way round: never between
    assert swapped.verdict == "contradicted"


def test_no_effect_only_where_it_says_more_than_the_paper():
    """'No effect' is a verdict only when the paper's own difference lies beyond the margin."""
    assert verdict("greater", [0.05, -0.05, 0.02], paper=(75.0, 74.8)).verdict == "inconclusive"
    assert "no effect" not in verdict("greater", [0.05, -0.05, 0.02], paper=(75.0, 74.8)).p_values


def test_directional_verdicts_use_the_two_sided_interval_and_no_effect_the_90_percent_one():
    """Reproduced needs the 95% interval (one side at 2.5%: 2 x the one-sided p below 5%); 'no effect' needs the
    90% interval within the margin (TOST at 5%, not doubled: its wrong verdict is one tail)."""
    from dsgen.evaluation.statistics import nested_interval

    ref, method = shifted([0.5, 1.5, 1.0])  # 90% interval above 0, 95% interval covers 0
    assert nested_interval(ref, method, 0.90).low > 0 > nested_interval(ref, method).low
    v = judge(claim(), {"a": method, "b": ref})
    assert v.verdict == "inconclusive" and ALPHA < v.p_values["reproduced"] < 2 * ALPHA

    ref, method = shifted([-0.3, 0.35, 0.0, 0.1, -0.15])  # 90% interval inside ±0.27, 95% interval not
    iv90, iv95 = nested_interval(ref, method, 0.90), nested_interval(ref, method, 0.95)
    assert -0.27 < iv90.low and iv90.high < 0.27 and not (-0.27 < iv95.low and iv95.high < 0.27)
    v = judge(claim(margin=0.27), {"a": method, "b": ref})
    assert v.verdict == "no effect" and v.p_values["no effect"] < ALPHA


# -- the size of each verdict's test: simulations at the boundary ----------------------------------------------

def _rate(kind, truth, wrong, n=4000, sd=1.0, n_data=3, seed=0, **kw):
    """How often a claim whose true difference(s) are ``truth`` gets a verdict in ``wrong`` (one training seed)."""
    rng = np.random.default_rng(seed)
    c = claim(kind, **kw)
    roles = ("l", "u") if kind == "between" else ("b",)
    hits = 0
    for _ in range(n):
        method = rng.normal(0.0, sd, n_data)  # the method's own noise, shared by both of between's differences
        scores = {"a": {(d + 1, 1): float(x) for d, x in enumerate(method)}}
        for role, delta in zip(roles, np.atleast_1d(truth)):
            other = rng.normal(0.0, sd, n_data) - delta
            scores[role] = {(d + 1, 1): float(x) for d, x in enumerate(other)}
        hits += judge(c, scores).verdict in wrong
    return hits / n


def _bound(n=4000):
    return ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / n)  # the level plus 3 Monte Carlo sd


def test_close_contradiction_keeps_its_size_at_the_margin():
    """A difference exactly at the margin is close: 'contradicted' is wrong. With a margin small against the
    interval both one-sided tests beyond ±margin fire at their level; the smaller p taken undoubled had size 2 x the
    level (88cfe5f: 5% for a verdict at 2.5%), doubled it stays at the level."""
    rate = _rate("close", 0.05, {"contradicted"}, margin=0.05)
    assert rate <= _bound(), rate
    assert rate > ALPHA / 2  # near its level: both tails count, neither is lost


def test_between_contradiction_keeps_its_size_just_inside_the_bounds():
    """The method a hair above its lower and below its upper bound: 'contradicted' is wrong, and its two one-sided
    tests each fire at their level (undoubled: size up to 2 x the level)."""
    rate = _rate("between", (0.01, -0.01), {"contradicted"})
    assert rate <= _bound(), rate


@pytest.mark.parametrize("kind,truth,wrong,margin", [
    ("greater", 0.0, {"reproduced", "contradicted"}, 1.0),  # both directions wrong: two tails at half the level
    ("greater", 1.0, {"no effect", "contradicted"}, 1.0),   # at the margin: no effect wrong, one tail (TOST undoubled)
    ("less", -1.0, {"no effect", "contradicted"}, 1.0),
    ("close", 1.02, {"reproduced"}, 1.0),                   # just beyond the margin: close is wrong
    ("between", (0.0, -2.0), {"reproduced"}, 1.0),          # on the lower bound: not between
])
def test_a_claims_wrong_verdict_has_probability_at_most_the_level(kind, truth, wrong, margin):
    assert _rate(kind, truth, wrong, n=3000, sd=0.8, margin=margin) <= _bound(3000)


# -- the families --------------------------------------------------------------------------------------------------

def test_the_control_is_an_instrument_check_tested_alone():
    claims = load_claims(["control", "dino"])
    assert [c.id for c in claims if c.instrument] == ["human-beats-untrained"]
    ref = runs([50.0, 52.0, 51.0, 50.5, 51.5], data=(1, 2, 3, 4, 5))
    shift = dict(zip((1, 2, 3, 4, 5), (1.2, 2.0, 0.6, 1.5, 0.2)))  # 2 x one-sided p = 0.026: decided alone
    scores = {"b": ref, "a": {k: v + shift[k[0]] for k, v in ref.items()}}
    control = claim(id="control", instrument=True)
    verdicts = judge_all([control] + [claim(id=f"c{i}") for i in range(10)], scores)
    assert verdicts[0].verdict == "reproduced" and verdicts[0].family == "instrument" and verdicts[0].family_size == 1
    assert verdicts[0].p_holm == verdicts[0].p
    assert all(v.verdict == "inconclusive" and v.family == "papers" and v.family_size == 10 for v in verdicts[1:])


def test_one_family_whichever_verdict_each_claim_reaches():
    """Holm counts every claim once, by its smallest p, whatever verdict that is (before: three families, support,
    contradiction and no effect, each with its own Holm, so the verdicts did not hold together). A claim decided
    in a direction frees its share of the level for the next step; one decided 'no effect' does not."""
    ref, flat = shifted([0.02, -0.03, 0.01, 0.0, -0.01])
    _, clear = shifted([5.02, 4.97, 5.01, 5.0, 4.99])
    _, borderline = shifted([1.2, 2.0, 0.6, 1.5, 0.2])  # 2 x one-sided p = 0.026
    first, x = judge_all([claim(id="clear"), claim(id="x", method="x")], {"a": clear, "x": borderline, "b": ref})
    assert first.verdict == "reproduced" and first.family_size == x.family_size == 2
    assert first.p_holm == pytest.approx(2 * first.p) and x.step == pytest.approx(ALPHA)  # x 2, then x 1
    assert x.p_holm == pytest.approx(x.p) and x.verdict == "reproduced"
    first, x = judge_all([claim(id="flat"), claim(id="x", method="x")], {"a": flat, "x": borderline, "b": ref})
    assert first.verdict == "no effect" and first.p_holm == pytest.approx(2 * first.p)
    assert x.step == pytest.approx(ALPHA / 2) and x.p_holm == pytest.approx(2 * x.p)  # still x 2: no share freed
    assert x.verdict == "inconclusive" and "needs p < 0.025 at its step" in x.reason


# -- the wording of an undecided claim, and what would decide it -----------------------------------------------

def test_an_undecided_claim_says_whether_the_interval_or_holm_stopped_it():
    ref = runs([50.0, 52.0, 51.0, 50.5, 51.5], data=(1, 2, 3, 4, 5))
    shift = dict(zip((1, 2, 3, 4, 5), (1.2, 2.0, 0.6, 1.5, 0.2)))
    scores = {"b": ref, "a": {k: v + shift[k[0]] for k, v in ref.items()}}
    alone = judge(claim(), scores)
    family = judge_all([claim(id=f"c{i}") for i in range(10)], scores)
    assert alone.verdict == "reproduced" and alone.p < ALPHA
    reason = family[0].reason
    assert family[0].verdict == "inconclusive"
    assert reason.startswith(f"decided alone as reproduced at p = {alone.p:.2g}")
    assert "not after Holm over 10 claims (needs p < 0.005 at its step)" in reason
    wide = verdict("greater", [-2.0, 5.0, 1.0])
    assert wide.verdict == "inconclusive" and wide.reason == "interval too wide to decide"


def test_an_inconclusive_claim_says_how_many_data_seeds_would_decide_it():
    """The plug-in estimate: at the observed difference and spread, the fewest data seeds (at the run's training
    seeds each) for 80% power at ALPHA / K; the claim re-judged on that many seeds drawn at those values is decided
    about 80% of the time."""
    from dsgen.evaluation.statistics import t_power

    diffs = [1.2, 2.0, 0.6]  # mean 1.27, sd 0.70 over 3 data seeds
    ref, method = shifted(diffs)
    verdicts = judge_all([claim(id=f"c{i}") for i in range(4)], {"a": method, "b": ref})
    power = verdicts[0].power()
    assert power.verdict == "reproduced" and power.train_seeds == 2 and power.threshold == pytest.approx(ALPHA / 4)
    mean, sd = np.mean(diffs), np.std(diffs, ddof=1)
    d = power.data_seeds
    assert t_power(mean, sd, d, ALPHA / 8) >= 0.8 > t_power(mean, sd, d - 1, ALPHA / 8)
    assert f"{d} data seeds x 2 training seeds for 80% power to find it reproduced" in power.text()
    assert "plug-in" in power.text() and "0.05 / 4" in power.text()
    rng = np.random.default_rng(0)
    decided = 0
    for _ in range(600):
        draw = rng.normal(mean, sd, d)
        r, m = runs([0.0] * d, tuple(range(d))), runs(list(draw), tuple(range(d)))
        decided += judge_all([claim(id=f"c{i}") for i in range(4)], {"a": m, "b": r})[0].verdict == "reproduced"
    assert 0.72 < decided / 600 < 0.92  # ~80% (+ the rare ones the other claims' Holm steps let through)


def test_power_of_no_effect_and_of_one_dataset():
    ref, method = shifted([0.1, -0.3, 0.4])
    v = judge_all([claim(id=f"c{i}") for i in range(3)], {"a": method, "b": ref})[0]
    assert v.verdict == "inconclusive" and v.power().verdict == "no effect" and v.power().data_seeds > 3
    one = {(1, t): 50.0 + t for t in (1, 2, 3)}
    v = judge(claim(), {"b": one, "a": {k: x + (0.5, -1.5, 2.5)[k[1] - 1] for k, x in one.items()}})
    assert v.verdict == "inconclusive" and v.power().data_seeds is None and "one dataset" in v.power().text()


def test_the_report_shows_the_instrument_checks_apart_and_what_would_decide_each_claim():
    from dsgen.claims.report import claims_markdown, verdict_record

    ref, method = shifted([1.2, 2.0, 0.6])
    _, clear = shifted([5.02, 4.97, 5.01])
    verdicts = judge_all([claim(id="control", instrument=True, method="h")] + [claim(id=f"c{i}") for i in range(3)],
                         {"a": method, "b": ref, "h": clear})
    header = {"preset": "p", "encoders": ["e"], "png": "x.png", "runs": sorted(ref), "tasks": ["stsb"]}
    text = claims_markdown(verdicts, {"a": 51.0, "b": 50.0, "h": 55.0}, header)
    instruments, papers = text.split("## Instrument checks")[1].split("## The papers' claims")
    assert instruments.count("| P ") == 1 and papers.count("| P ") == 3
    assert "Holm's step-down over its 3 tested claims" in papers and "what would decide it" in papers
    assert "for 80% power to find it reproduced" in papers and "plug-in" in papers
    record = verdict_record(verdicts[1])
    assert record["family"] == "papers" and record["family_size"] == 3 and record["p_holm"] >= record["p"]
    assert record["to_decide"]["data_seeds"] == verdicts[1].power().data_seeds
    assert record["to_decide"]["estimate"].startswith("plug-in") and record["to_decide"]["target_power"] == 0.8
    assert verdict_record(verdicts[0])["family"] == "instrument"


def test_the_control_gates_the_papers_family():
    """Issue 41, item 3: the papers' claims get verdicts only if every instrument check in the report is reproduced;
    otherwise each is inconclusive, naming the check and what the family's test would have said, and nothing is
    offered to decide it but a working instrument. ``gate=False`` judges them anyway."""
    from dsgen.claims.report import claims_markdown, verdict_record

    ref, flat = shifted([0.3, -0.4, 0.2])
    _, clear = shifted([5.02, 4.97, 5.01])
    scores = {"a": clear, "b": ref, "h": flat}
    claims = [claim(id="control", instrument=True, method="h"), claim(id="c0")]
    control, paper = judge_all(claims, scores)
    assert control.verdict == "no effect" and paper.verdict == "inconclusive" and paper.p_holm < ALPHA
    assert paper.gate == "not judged: the instrument check control (no effect) did not pass"
    assert paper.reason.endswith("ungated, the family's test gives: reproduced")
    assert "instrument checks must pass" in paper.power().text() and verdict_record(paper)["gate"] == paper.gate
    header = {"preset": "p", "encoders": ["e"], "png": "x.png", "runs": sorted(ref), "tasks": ["stsb"]}
    text = claims_markdown([control, paper], {"a": 55.0, "b": 50.0, "h": 50.0}, header)
    assert "**Not judged**: the instrument check control (no effect) did not pass" in text
    assert judge_all(claims, scores, gate=False)[1].verdict == "reproduced"
    scores["h"] = clear  # the control passes: the family is judged
    control, paper = judge_all(claims, scores)
    assert control.verdict == paper.verdict == "reproduced" and not paper.gate
    assert "Gated by the instrument checks above, which all passed" in claims_markdown([control, paper], {"a": 55.0, "b": 50.0, "h": 55.0}, header)
    paper_only = claims_markdown(judge_all(claims[1:], scores), {"a": 55.0, "b": 50.0}, header)
    assert "**Ungated**: no instrument check is in this report" in paper_only


def test_the_header_gives_the_interval_each_verdict_needs_at_its_holm_step():
    """Issue 41, item 5: inside the Holm family a verdict needs a wider interval than alone: 1 - ALPHA / K for a
    direction and 1 - 2 ALPHA / K for no effect at the first step (K = 6: 99.2% and 98.3%), 95% and 90% alone."""
    from dsgen.claims.report import claims_markdown

    ref, method = shifted([1.2, 2.0, 0.6])
    verdicts = judge_all([claim(id=f"c{i}") for i in range(6)], {"a": method, "b": ref})
    header = {"preset": "p", "encoders": ["e"], "png": "x.png", "runs": sorted(ref), "tasks": ["stsb"]}
    text = claims_markdown(verdicts, {"a": 51.0, "b": 50.0}, header)
    assert "With this report's K = 6, the first step needs the 99.2% interval for a direction and the 98.3% one" in text
    assert "0.05 / (K - j)" in text and "the 90% interval within" not in text
