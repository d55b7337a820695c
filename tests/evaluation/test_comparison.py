"""What a comparison table says beside its numbers: runs that did not train are failures, never scores, and
methods whose training seeds are not independent replicates are named in its notes."""

import pytest

from dsgen.errors import DsgenError
from dsgen.reports.comparison import Comparison
from dsgen.evaluation.results import Result, TaskScore
from dsgen.reports.tables import comparison_display, comparison_markdown
from dsgen.runs.records import RunFailed

TRAINED = {"optimizer_steps": 20, "nonzero_lr_steps": 19, "weight_update": 0.01, "min_trained_steps": 10}
RUNS = [(1, 1), (1, 2), (1, 3)]


def result(method, run, score, trained=True, training=None):
    plan = {"trainer": {"trainer": "regression"} if trained else None}
    extra = {"plan": plan, **({"training": dict(TRAINED if training is None else training)} if trained else {})}
    return Result(model="m", tasks={"sts16": TaskScore(score, score, 100)}, method=method, seed=run[1],
                  data_seed=run[0], extra=extra)


def comparison(**scores):
    results = {m: [result(m, run, s, trained=m != "base") for run, s in zip(RUNS, values)] for m, values in scores.items()}
    return Comparison(list(scores), ["sts16"], results, preset="unit", n_boot=10)


def test_methods_whose_training_seeds_are_not_replicates_are_named_in_the_notes():
    """syncse-scratch on cpu: its triplets fit one batch and its three training seeds agree within 0.01; base does
    not train. Both used to be dropped from the spread table without a word."""
    cmp = comparison(dino=[55.0, 56.2, 57.1], scratch=[55.50, 55.51, 55.49], base=[55.44, 55.44, 55.44])
    notes = cmp.replicate_notes()
    assert set(notes) == {"scratch", "base"}
    assert notes["base"].startswith("no training: every run scores the same model")
    assert "0.01 (sample sd) between training seeds" in notes["scratch"] and "not independent replicates" in notes["scratch"]
    md = comparison_markdown(cmp)
    assert "- `scratch`: its average varies by 0.01" in md and "- `base`: no training" in md
    assert "`dino`" not in md.split("Notes:")[1].split("##")[0]  # a method whose seeds vary is not named


def test_a_result_that_does_not_show_it_trained_is_refused():
    """A comparison never scores a trained run whose log lacks the training record or fails the rule."""
    for training in ({"steps": 1}, {**TRAINED, "nonzero_lr_steps": 0, "optimizer_steps": 1}):
        results = {"base": [result("base", r, 55.4, trained=False) for r in RUNS],
                   "e5": [result("e5", r, 55.4, training=training) for r in RUNS]}
        with pytest.raises(DsgenError, match="'e5' \\(data seed 1, training seed 1\\) is not a trained model's result"):
            Comparison(["base", "e5"], ["sts16"], results, n_boot=10)


def test_a_failed_method_is_a_row_marked_failed_with_no_number():
    failures = [RunFailed("e5-sts", s, "trained nothing: 22 pairs make one optimizer step, all of it warm-up "
                          "(learning rate 0); use more inputs", {}, 1) for s in (1, 2, 3)]
    cmp = comparison(base=[55.44] * 3, dino=[55.0, 56.2, 57.1])
    cmp.failures = failures
    frame = cmp.frame()
    assert frame.loc["e5-sts", "runs"] == 0 and frame.loc["e5-sts", "failed runs"] == 3
    assert frame.loc["e5-sts"].drop(["runs", "failed runs"]).isna().all()  # no score in the CSV either
    shown = comparison_display(cmp).loc["e5-sts"]
    assert (shown.iloc[:2] == "failed").all() and shown.iloc[2] == "no score: 3 of 3 runs failed"
    md = comparison_markdown(cmp)
    assert "- `e5-sts` failed: no score" in md and "## Failed runs (no score)" in md
    assert "- `e5-sts` (data seed 1, training seed 3): trained nothing: 22 pairs make one optimizer step" in md


def test_every_run_is_worded_the_same_in_its_log_line_failure_and_row():
    """The run log said "base seed 1" for one run and "base data seed 1, seed 2" for the next."""
    from dsgen.reports.tables import comparison_frame
    from dsgen.runs.records import run_text

    assert run_text((1, 1)) == "data seed 1, training seed 1" and run_text((1, 2)) == "data seed 1, training seed 2"
    assert str(RunFailed("dino", 1, "why", {}, 1)) == "dino (data seed 1, training seed 1): why"
    rows = comparison_frame([result("dino", (1, 1), 55.0), result("dino", (1, 2), 56.0)]).index
    assert list(rows) == ["dino (data seed 1, training seed 1)", "dino (data seed 1, training seed 2)"]
    stale = comparison_frame([result("dino", (1, 1), 55.0), result("dino", (1, 2), 56.0, training={"steps": 1})])
    assert stale.index[1] == "dino (data seed 1, training seed 2) (failed)" and stale.iloc[1].isna().all()
