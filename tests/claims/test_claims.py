"""Verdicts of the papers' claims: the nested interval, the no-effect verdict, Holm over the family,
no stand-in methods, and a report whose header says what the preset did."""

import numpy as np
import pytest

from dsgen.claims import Claim, judge, judge_all, load_claims
from dsgen.claims.report import claims_markdown


def runs(values, data=(1, 2, 3), train=(1, 2)):
    """Scores of a method over data seeds x training seeds: ``values`` per data seed, small training jitter."""
    return {(d, t): v + 0.05 * t for d, v in zip(data, values) for t in train}


def claim(kind="greater", method="a", reference=("b",), paper=(76.2, 74.49), margin=1.0, **kw):
    return Claim("P", kw.pop("id", "c"), "Table 1", 1, "a beats b", kind, method, reference=tuple(reference),
                 margin=margin, paper_method=paper[0], paper_reference=paper[1], **kw)


def test_reproduced_contradicted_no_effect_and_inconclusive():
    ref = runs([50.0, 52.0, 51.0])
    assert judge(claim(), {"a": runs([53.0, 55.1, 54.0]), "b": ref}).verdict == "reproduced"
    assert judge(claim(), {"a": runs([47.0, 48.9, 48.0]), "b": ref}).verdict == "contradicted"
    tiny = judge(claim(), {"a": runs([50.1, 52.05, 51.0]), "b": ref})  # +0.05 ± ~0.1: within ±1, the paper's +1.71 is not
    assert tiny.verdict == "no effect" and tiny.half_width < 1.0
    assert judge(claim(paper=(75.0, 74.8)), {"a": runs([50.1, 52.05, 51.0]), "b": ref}).verdict == "inconclusive"
    wide = judge(claim(), {"a": runs([48.0, 57.0, 51.0]), "b": ref})
    assert wide.verdict == "inconclusive" and wide.reason == "interval too wide to decide" and wide.half_width > 5


def test_a_missing_method_is_never_replaced_and_the_row_says_why():
    c = claim(reference=("rise-dino", "dino"))
    v = judge(c, {"a": runs([53.0, 55.0, 54.0]), "dino": runs([50.0, 52.0, 51.0])},
              missing={"rise-dino": "the filter kept no pair"})
    assert v.verdict == "inconclusive" and not v.intervals and v.used == {"reference": "rise-dino"}
    assert v.reason == "'rise-dino' has no result: the filter kept no pair"


def test_holm_makes_a_family_of_borderline_claims_harder_to_pass():
    """A difference with a two-sided p of about 0.026 (one-sided 0.013, doubled for a directional verdict)
    is reproduced alone; eleven such claims tested together are not (Holm multiplies the smallest p by 11),
    while a clear effect still is."""
    ref = runs([50.0, 52.0, 51.0, 50.5, 51.5], data=(1, 2, 3, 4, 5))
    shift = dict(zip((1, 2, 3, 4, 5), (1.2, 2.0, 0.6, 1.5, 0.2)))
    scores = {"b": ref, "c": {k: v + shift[k[0]] for k, v in ref.items()}, "a": {k: v + 5 for k, v in ref.items()}}
    alone = judge(claim(method="c"), scores)
    family = judge_all([claim(method="c", id=f"c{i}") for i in range(11)], scores)
    assert alone.verdict == "reproduced" and 0.0046 < alone.p_values["reproduced"] < 0.05
    assert alone.p == alone.p_values["reproduced"]
    assert all(v.verdict == "inconclusive" for v in family)
    assert family[0].p_holm == pytest.approx(min(1.0, 11 * alone.p))
    assert judge_all([claim(method="a", id="a")] + [claim(method="c", id=f"c{i}") for i in range(10)],
                     scores)[0].verdict == "reproduced"


def test_the_papers_figures_are_shown_as_printed():
    table2 = next(c for c in load_claims(["dino"]) if c.id == "dino-decay0-below")
    text = table2.paper_text()
    assert "/" in text and "avg." in text, text  # STS12-16 / STSb / SICK-R, then the derived average
    with pytest.raises(StopIteration):
        next(c for c in load_claims(["rise"]) if len(c.reference) > 1 or len(c.lower) > 1)  # no stand-ins left


def test_the_report_header_follows_the_preset():
    scores = {"a": runs([53.0, 55.4, 54.1]), "b": runs([50.0, 52.0, 51.0])}
    verdicts = judge_all([claim()], scores)
    means = {m: float(np.mean(list(v.values()))) for m, v in scores.items()}
    two_level = claims_markdown(verdicts, means, {"preset": "p", "encoders": ["e"], "png": "x.png",
                                                  "runs": sorted(scores["a"]), "tasks": ["stsb", "sickr-test"]})
    assert "data seeds [1, 2, 3] x training seeds [1, 2]" in two_level and "each its own data" not in two_level
    assert "STSb, SICK-R (test)" in two_level and "DINO's Table 1 columns" not in two_level
    diagonal = claims_markdown(verdicts, means, {"preset": "p", "encoders": ["e"], "png": "x.png",
                                                 "runs": [(1, 1), (2, 2)], "tasks": ["sts12", "sts13", "sts14", "sts15",
                                                                                     "sts16", "stsb", "sickr-test"]})
    assert "seeds [1, 2] (each its own data)" in diagonal and "DINO's Table 1 columns" in diagonal
    table = [[c.strip() for c in line.strip("|").split("|")] for line in two_level.splitlines() if line.startswith("|")]
    header, row = table[0], dict(zip(table[0], table[2]))
    assert verdicts[0].half_width > 0.1  # a width to show, not 0 for any column
    assert "±" in header and float(row["±"]) == pytest.approx(verdicts[0].half_width, abs=0.005)  # its own column


def test_figures_no_comparison_can_test_are_listed_with_why():
    from dsgen.claims import load_figures

    figures = load_figures(["sim-gpt", "e5"])
    assert {f.paper for f in figures} == {"Sim-GPT", "E5"} and all(f.why for f in figures)
    scores = {"a": runs([53.0, 55.0, 54.0]), "b": runs([50.0, 52.0, 51.0])}
    text = claims_markdown(judge_all([claim()], scores), {m: 0.0 for m in scores},
                           {"preset": "p", "encoders": ["e"], "png": "x.png", "runs": sorted(scores["a"]),
                            "tasks": ["stsb"]}, figures=figures)
    assert "Headline figures no comparison here can test" in text and "supervised SimCSE on NLI 82.52" in text
