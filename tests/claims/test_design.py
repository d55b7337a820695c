"""The design study (issue 31, item 5; ``python -m dsgen.benchmarks.design``): a data seed's cost counts each shared
dataset and fit once, the stage costs are read from real result files, and the designs it ranks follow the claims
report's own procedure (more data seeds decide a real effect more often; nothing over the budget is listed)."""

import json
from pathlib import Path

import pytest

from dsgen.benchmarks.design import NestedModel, check, data_seed_seconds, families, fixed_seconds, stage_costs, study
from dsgen.claims import load_claims
from dsgen.evaluation.results import Result, TaskScore


def cost(run, datasets, fits=(), seeds=(1,)):
    return {"run": run, "datasets": dict(datasets), "fits": dict(fits), "data_seeds": list(seeds)}


def test_a_data_seed_counts_each_shared_dataset_and_fit_once():
    costs = {"rise": cost(100.0, {"1:g+dev": 300.0}, {"1:sdi": 70.0}),
             "rise-dino": cost(40.0, {"1:g+dev": 300.0}, {"1:sdi": 70.0}),  # the same dataset and SDI fit
             "human": cost(30.0, {}), "base": cost(10.0, {})}
    assert data_seed_seconds(costs, list(costs), 1) == 300 + 70 + 100 + 40 + 30 + 10
    assert data_seed_seconds(costs, list(costs), 3) == 300 + 70 + 3 * 180
    two = {"dino": cost(20.0, {"1:a": 60.0, "2:b": 80.0}, seeds=(1, 2))}  # two data seeds measured: their mean
    assert data_seed_seconds(two, ["dino"], 1) == 70 + 20
    # another method measured at data seed 1 only: the data seeds where both were measured, never a mean over a
    # union that would count its dataset at data seed 2 as free
    two["decay0"] = cost(10.0, {"1:c": 50.0})
    assert data_seed_seconds(two, ["dino", "decay0"], 1) == 60 + 50 + 30


def test_stage_costs_are_read_from_result_files(tmp_path):
    """From the variant the preset plans today (an older variant's runs are left out), a fit made by one run counted
    as the data seed's, ``base``'s runs (one run key) paid once, ``human``'s reading of DINO's dataset counted."""
    from dsgen.planning import plan_run
    from dsgen.presets import load_preset

    folder = tmp_path / "results" / "cpu"
    for method, d, s, key in (("rise", 1, 1, "g"), ("rise", 1, 2, "g"), ("rise-dino", 1, 1, "g"), ("base", 1, 1, None),
                              ("base", 1, 2, None), ("human", 1, 1, None), ("dino", 1, 1, "x")):
        extra = {"dataset_key": key, "dev_dataset_key": "dev" if key == "g" else None} if key else {}
        extra["run_key"] = "b" if method == "base" else f"{method}{s}"
        if method == "rise":
            extra["data_fits"] = {"reweight": {"kind": "sdi", "key": "f1", "fit_seconds": 70.0}}
        if method == "human":
            extra["size_of"] = {"method": "dino", "pairs": 700}
        variant = plan_run(method, load_preset("cpu"), s, data_seed=d).variant
        for where in (variant, "older-settings"):
            Result(model="m", tasks={"stsb": TaskScore(50.0, 50.0, 10)}, method=method, preset="cpu", seed=s,
                   data_seed=d, timings={"dataset_generate_seconds": 300.0 if key else 0.0, "train_seconds": 20.0 + s,
                                         "evaluate_seconds": 10.0,
                                         "reweight_seconds": 0.0 if method != "rise" else 75.0 if s == 1 else 5.0,
                                         "data_fit_seconds": 70.0 if (method, s) == ("rise", 1) else 0.0},
                   extra=extra).save(folder / method / where / f"data-{d}-seed-{s}.json")
    costs = stage_costs(tmp_path, "cpu")
    assert costs["rise"]["runs"] == 2 and costs["rise"]["train"] == 21.5 and costs["rise"]["reweight"] == 40
    assert costs["rise"]["run"] == 21.5 + 10 + 5  # the fit is the data seed's, counted once, not the run's
    assert costs["rise"]["datasets"] == costs["rise-dino"]["datasets"] == {"1:g+dev": 300.0}
    assert costs["rise"]["fits"] == {"1:f1": 70.0} and costs["rise"]["generate data"] == 300
    assert costs["base"]["once"] and not costs["rise"]["once"] and costs["human"]["needs"] == ["dino"]
    assert data_seed_seconds(costs, ["rise", "rise-dino", "base"], 1) == 300 + 70 + 36.5 + 31
    assert fixed_seconds(costs, ["rise", "base"]) == 31.5
    assert data_seed_seconds(costs, ["human"], 2) == 300 + 2 * 31  # DINO's dataset, not DINO's runs


def test_the_ranked_designs_follow_the_report_procedure_and_the_budget():
    claims = [c for c in load_claims(["control"])]
    model = NestedModel({"human": (1.4, 0.5), "base": (0.0, 0.0)}, {"human": 57.0, "base": 55.0})
    costs = {"human": cost(60.0, {}), "base": cost(40.0, {})}
    rows = study(model, claims, costs, budget=900.0, draws=200)
    assert max(r["data_seeds"] * (100 * r["train_seeds"]) for r in rows) <= 900
    assert {(r["data_seeds"], r["train_seeds"]) for r in rows} == {(d, t) for t in (1, 2, 3) for d in range(2, 31)
                                                                    if d * 100 * t <= 900}
    by = {(r["data_seeds"], r["train_seeds"]): r["control"] for r in rows}
    assert by[(2, 1)] < by[(5, 1)] < by[(9, 1)]  # a true +2: more data seeds decide it more often
    assert by[(9, 1)] > 0.9
    nothing = NestedModel({"human": (1.4, 0.5), "base": (0.0, 0.0)}, {"human": 55.0, "base": 55.0})
    assert study(nothing, claims, costs, budget=900.0, draws=400)[0]["control"] < 0.1  # no effect: at most 5% + MC


def test_families_leave_out_claims_without_a_model():
    scores = {m: {(1, 1): 50.0, (2, 1): 51.0} for m in ("human", "base", "dino", "dino-x1x2")}
    found = {papers: (every, scored) for papers, every, scored in families(("dino", "gense", "control"), scores)}
    assert set(found) == {("dino", "gense"), ("dino",), ("gense",)}
    every, scored = found[("gense",)]
    assert [c.id for c in scored] == ["human-beats-untrained"]  # gense has no model: its claim is out of the family
    assert "gense-filter-helps" in [c.id for c in every]  # but the run still runs (and pays for) gense
    assert {c.id for c in found[("dino",)][1]} == {"human-beats-untrained", "dino-x2-beats-untrained",
                                                   "dino-x2-beats-x1x2"}


def test_the_check_sets_the_models_predictions_at_an_observed_runs_design_beside_it():
    """At an observed run's design (10 data seeds x 1 training seed here) the model predicts a data seed's mean to
    spread by sqrt(data sd^2 + training sd^2 / T); a run drawn from the model itself agrees, and a large effect the
    model decides always is decided in the run too."""
    import numpy as np

    claims = load_claims(["control"])
    model = NestedModel({"human": (1.6, 1.2), "base": (0.0, 0.0)}, {"human": 60.0, "base": 55.0})
    observed = model.draw(np.random.default_rng(7), 10, 1)
    by_method, by_claim = check(model, claims, observed, draws=100)
    human = by_method.set_index("method").loc["human"]
    assert human["sd of a data seed's mean (model)"] == pytest.approx(2.0)
    assert 1.0 < human["sd of a data seed's mean (run)"] < 3.5 and 57 < human["mean (run)"] < 63
    row = by_claim.set_index("claim").loc["human-beats-untrained"]
    assert row["decide rate (model)"] == pytest.approx(1.0) and row["verdict (run)"] == "reproduced"
    assert 0.5 < row["half-width (run)"] / row["half-width (model, median)"] < 2.0
    two = {m: {(d, t): v for (d, _), v in runs.items() for t in (1, 2)} for m, runs in observed.items()}
    assert check(model, claims, two, draws=20)[0].set_index("method").loc["human", "sd of a data seed's mean (model)"] \
        == pytest.approx(np.sqrt(1.2 ** 2 + 1.6 ** 2 / 2))  # two training seeds: the training part halves in variance


def test_the_committed_claims_runs_give_the_simulations_spreads():
    """The family simulation's measured spreads are what the design study reads off the committed claims runs."""
    from dsgen.benchmarks.design import scores_from_claims
    from tests.claims.test_family_simulation import SPREAD

    scores, failed = scores_from_claims(Path(__file__).parents[2] / "results/cpu/claims.json")
    model = NestedModel.from_scores(scores)
    for m, (train, data) in model.spread.items():
        assert SPREAD[m] == pytest.approx((train, data), abs=0.006), m
    assert "gense" in failed and "gense" not in scores
    assert json.loads((Path(__file__).parents[2] / "results/cpu/claims.json").read_text())["preset"] == "cpu"


def test_the_refit_reads_each_spread_from_the_runs_that_measure_it():
    """Issue 41, item 5: training spread pooled over runs with replicates, data-seed spread from the widest run
    less what training explains, means from the latest run, and the correlation of methods on one dataset as the
    widest run measured it."""
    import numpy as np

    from dsgen.benchmarks.design import refit

    rng = np.random.default_rng(0)
    older = {"dino": {(d, t): 50.0 + d + (1.0 if t == 2 else -1.0) for d in (1, 2) for t in (1, 2)},  # train var 2
             "base": {(d, t): 55.0 for d in (1, 2) for t in (1, 2)}}
    shared = rng.normal(size=20)
    newer = {"dino": {(d, 1): 53.0 + 3 * shared[d - 1] for d in range(1, 21)},
             "dino-no-smoothing": {(d, 1): 54.0 + 3 * shared[d - 1] + rng.normal() for d in range(1, 21)},
             "base": {(d, 1): 55.0 for d in range(1, 21)}}
    model = refit([older, newer])
    assert model.means["dino"] == pytest.approx(np.mean(list(newer["dino"].values())))  # the latest run's
    train, data = model.spread["dino"]
    assert train == pytest.approx(np.sqrt(2.0))
    assert data == pytest.approx(np.sqrt(np.var(list(newer["dino"].values()), ddof=1) - 2.0))
    assert model.spread["base"] == (0.0, 0.0)
    assert model.spread["dino-no-smoothing"][0] == 0.0  # never replicated on one dataset: no training spread seen
    rho = np.corrcoef(list(newer["dino"].values()), list(newer["dino-no-smoothing"].values()))[0, 1]
    assert model.rho_data == model.rho_train == pytest.approx(rho) and rho > 0.8


def test_designs_are_weighed_by_the_claims_procedure():
    """Exploration decides a large effect and a claim it decides is not followed up; two recipes of one model
    agree on it; a claim whose recipes' effects point apart is never robust."""
    from dsgen.benchmarks.design import confirm_rates, robust_rates

    claims = load_claims(["dino", "control"])
    spread = {m: (0.5, 0.0) for m in ("human", "dino", "dino-x1x2", "dino-decay0", "dino-decay200",
                                       "dino-no-smoothing", "dino-no-augmentation")}
    spread["base"] = (0.0, 0.0)
    model = NestedModel(spread, {"human": 60.0, "base": 55.0, "dino": 58.0, "dino-decay0": 50.0}, rho_data=0.0,
                        rho_train=0.0)
    explored, confirmed, seeds, asked = confirm_rates(model, claims, 8, 1, draws=20)
    assert explored["dino-decay0-below"] == pytest.approx(1.0) and asked["dino-decay0-below"] == []
    assert explored["human-beats-untrained"] == pytest.approx(1.0)
    assert all(n >= 2 for ns in asked.values() for n in ns) and seeds <= 15
    flipped = NestedModel(spread, {**model.means, "dino-decay0": 66.0}, rho_data=0.0, rho_train=0.0)
    robust = robust_rates([model, flipped], claims, 8, 1, draws=20)
    assert robust["human-beats-untrained"] == pytest.approx(1.0) and robust["dino-decay0-below"] == 0.0
    assert robust_rates([model, model], claims, 8, 1, draws=20)["dino-decay0-below"] == pytest.approx(1.0)
