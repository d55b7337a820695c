"""The variance-components report (``python -m dsgen.benchmarks.variance``) on result files made here."""

from dsgen.evaluation.results import Result, TaskScore


def test_the_report_splits_spread_by_source_and_pairs_differences_by_run(tmp_path):
    from dsgen.benchmarks.variance import report

    data_effect = {1: 0.0, 2: 2.0, 3: -2.0}
    train_effect = {1: 0.5, 2: -0.5, 3: 0.0}
    for method, offset in (("rise", 1.0), ("rise-dino", 0.0), ("base", None)):
        for d in (1, 2, 3):
            for t in (1, 2, 3):
                if method == "base" and (d, t) != (1, 1):
                    continue
                value = 50.0 if offset is None else 50.0 + offset + data_effect[d] + train_effect[t] * (1 + (method == "rise"))
                r = Result("m", {"stsb": TaskScore(value, value, 10)}, method=method, preset="p", seed=t, data_seed=d)
                r.save(tmp_path / "results" / "p" / method / "v" / f"data-{d}-seed-{t}.json")
    text = report(tmp_path, ["p"])
    lines = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in text.splitlines()
             if line.startswith("| ") and not line.startswith("|  ") and "runs" not in line}
    assert lines["rise"][:2] == ["9", "51.00"] and lines["rise-dino"][:2] == ["9", "50.00"]
    assert float(lines["rise - rise-dino"][1]) == 1.0  # paired by run: the data effect cancels
    assert float(lines["rise - rise-dino"][3]) == 0.0  # no data-seed spread left in the difference
    assert float(lines["rise-dino"][3]) > 1.5  # a data_sd of about 2 in each method alone


def test_a_later_preset_is_compared_run_by_run_with_the_first(tmp_path):
    from dsgen.benchmarks.variance import report

    for preset, shift in (("a", 0.0), ("b", 0.75)):
        for d in (1, 2):
            for t in (1, 2):
                value = 50.0 + 3 * d + t + shift
                r = Result("m", {"stsb": TaskScore(value, value, 10)}, method="dino", preset=preset, seed=t, data_seed=d)
                r.save(tmp_path / "results" / preset / "dino" / "v" / f"data-{d}-seed-{t}.json")
    text = report(tmp_path, ["a", "b"])
    row = next(line for line in text.splitlines() if line.startswith("| dino: b - a"))
    cells = [c.strip() for c in row.split("|")[2:-1]]
    assert cells[:2] == ["4", "0.75"] and float(cells[2]) == 0.0 and float(cells[3]) == 0.0


def test_two_variants_of_a_method_stay_apart_and_pair_with_their_own_base(tmp_path):
    """Runs of one method under other settings (here ``--encoder``) are another variant folder: a row of
    their own, never pooled with or overwritten by the first variant's runs of the same seeds, and their
    difference to ``base`` taken against the base made with the same settings."""
    from dsgen.benchmarks.variance import report

    settings = {"v-default": ({}, 50.0, 40.0), "v-other": ({"encoder": "other"}, 60.0, 45.0)}
    for variant, (overrides, level, base) in settings.items():
        extra = {"variant": variant, "plan": {"overrides": overrides}}
        for d in (1, 2):
            for t in (1, 2):
                value = level + d + 0.5 * t
                r = Result("m", {"stsb": TaskScore(value, value, 10)}, method="dino", preset="p", seed=t, data_seed=d,
                           extra=extra)
                r.save(tmp_path / "results" / "p" / "dino" / variant / f"data-{d}-seed-{t}.json")
        r = Result("m", {"stsb": TaskScore(base, base, 10)}, method="base", preset="p", seed=1, data_seed=1,
                   extra={**extra, "variant": f"b-{variant}"})
        r.save(tmp_path / "results" / "p" / "base" / f"b-{variant}" / "data-1-seed-1.json")
    text = report(tmp_path, ["p"])
    lines = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]] for line in text.splitlines()
             if line.startswith("| ") and not line.startswith("|  ") and "runs" not in line}
    assert "dino (v-default)" in lines and "dino" not in lines, text  # not one row of both variants' runs
    assert lines["dino (v-default)"][:2] == ["4", "52.25"] and lines["dino (v-other)"][:2] == ["4", "62.25"]
    assert lines["dino (v-default) - base (b-v-default)"][:2] == ["4", "12.25"]
    assert lines["dino (v-other) - base (b-v-other)"][:2] == ["4", "17.25"]
    assert not any(name.startswith("dino (v-default) - base (b-v-other)") for name in lines)  # other settings


def test_a_result_that_is_no_trained_model_is_no_row(tmp_path):
    """A result whose plan trains an encoder but whose training log fails the rule of
    dsgen.training.fit.training_failure (here: no record of the steps taken) gives no score to the report."""
    from dsgen.benchmarks.variance import report

    for d in (1, 2):
        for t in (1, 2):
            value = 50.0 + d + t
            for method, extra in (("dino", {"plan": {"trainer": {"epochs": 1}}, "training": {"steps": 1}}),
                                  ("human", {})):
                r = Result("m", {"stsb": TaskScore(value, value, 10)}, method=method, preset="p", seed=t, data_seed=d,
                           extra=extra)
                r.save(tmp_path / "results" / "p" / method / "v" / f"data-{d}-seed-{t}.json")
    text = report(tmp_path, ["p"])
    rows = {line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")}
    assert "human" in rows and "dino" not in rows, text
