"""A claim on a method whose runs did not train is inconclusive, and the report lists those runs as failed, never
with a score."""

from dsgen.claims import Claim, judge_all
from dsgen.claims.report import claims_markdown
from dsgen.runs.records import RunFailed


def test_a_method_that_trained_nothing_is_a_listed_failure_in_the_claims_report():
    runs = [(1, 1), (1, 2)]
    scores = {"dino": {r: 55.0 + 0.1 * r[1] for r in runs}}
    failures = [RunFailed("e5-sts", s, "trained nothing: 22 pairs make one optimizer step, all of it warm-up "
                          "(learning rate 0); use more inputs", {}, 1) for s in (1, 2)]
    claim = Claim("E5", "e5-beats-dino", "Table 1", 1, "e5 beats dino", "greater", "e5-sts", reference=("dino",),
                  margin=1.0, paper_method=80.0, paper_reference=77.0)
    (verdict,) = judge_all([claim], scores, missing={f.method: f.reason for f in failures})
    assert verdict.verdict == "inconclusive" and "'e5-sts' has no result: trained nothing" in verdict.reason
    md = claims_markdown([verdict], {"dino": 55.15}, {"preset": "cpu", "encoders": ["e"], "png": "x.png",
                                                      "runs": runs, "tasks": ["stsb"]}, failures=failures)
    assert "Failed runs (no score" in md
    assert "- `e5-sts` (data seed 1, training seed 2): trained nothing: 22 pairs make one optimizer step" in md
    row = next(line for line in md.splitlines() if line.startswith("| E5"))
    assert "e5-sts` 5" not in row and "trained nothing" in row  # the row says why, and shows no score for it
