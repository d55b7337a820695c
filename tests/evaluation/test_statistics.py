"""Intervals over seeds and over test pairs, and the comparison built on them."""

import numpy as np
import pytest

from dsgen.errors import DsgenError
from dsgen.reports.comparison import Comparison
from dsgen.evaluation.results import Result, TaskScore
from dsgen.evaluation.statistics import paired_bootstrap, paired_bootstraps, seed_t_interval, spearman_rows
from dsgen.reports.tables import comparison_markdown


def test_paired_bootstrap_is_zero_for_identical_and_positive_for_better_predictions():
    rng = np.random.default_rng(0)
    gold = rng.random(300)
    noisy = gold + rng.normal(0, 0.5, 300)
    better = gold + rng.normal(0, 0.1, 300)
    assert np.allclose(paired_bootstrap([noisy], [noisy], gold, n_boot=100), 0)
    assert np.percentile(paired_bootstrap([noisy], [better], gold, n_boot=200), 2.5) > 0


def test_paired_bootstrap_agrees_with_scipy():
    from scipy.stats import bootstrap, spearmanr

    rng = np.random.default_rng(1)
    gold = rng.random(200)
    a = gold + rng.normal(0, 0.4, 200)
    b = gold + rng.normal(0, 0.3, 200)
    ours = paired_bootstrap([a], [b], gold, n_boot=4000, seed=3)

    def stat(g, x, y):
        return 100 * (spearmanr(y, g).statistic - spearmanr(x, g).statistic)

    res = bootstrap((gold, a, b), stat, paired=True, vectorized=False, n_resamples=4000, method="percentile",
                    random_state=4)
    lo, hi = np.percentile(ours, [2.5, 97.5])
    width = hi - lo
    assert lo == pytest.approx(res.confidence_interval.low, abs=0.1 * width)
    assert hi == pytest.approx(res.confidence_interval.high, abs=0.1 * width)
    assert spearman_rows(a[None, :], gold[None, :])[0] == pytest.approx(100 * spearmanr(a, gold).statistic)


def test_float32_predictions_are_ranked_and_scored_in_float64():
    """Cosines are float32; scipy 1.18 ranks a float32 input in float32, where a Spearman summed over 10,000 pairs
    rounds. The ranks are widened first, so a float32 vector scores exactly as its float64 copy."""
    rng = np.random.default_rng(3)
    gold = rng.normal(size=(4, 9927)).round(1)
    pred = (gold + rng.normal(0, 1, gold.shape)).astype(np.float32)
    assert np.array_equal(spearman_rows(pred, gold), spearman_rows(pred.astype(np.float64), gold))


@pytest.mark.parametrize("ties", [False, True])
def test_bootstrap_ranking_shortcuts_give_the_values_of_ranking_every_seed(ties):
    """Gold ranked once per chunk, identical seeds ranked once, resamples ranked by counting, several methods on the
    same resamples: the same numbers, bit for bit, as every seed ranked with scipy against its own gold resample,
    method by method. With ties in the gold (STS scores come in steps) and in the predictions too."""
    rng = np.random.default_rng(2)
    gold = rng.random(150)
    if ties:
        gold = np.round(gold * 5, 1)  # STS-like gold: 0.0, 0.2, ..., 5.0
    base = gold + rng.normal(0, 0.5, 150)
    reference = [base, base.copy(), base.copy()]  # a seed-independent method: three equal seeds
    others = {name: [gold + rng.normal(0, sd, 150) for _ in range(3)] for name, sd in (("a", 0.3), ("b", 0.6))}
    if ties:
        others = {name: [np.round(p, 1) for p in preds] for name, preds in others.items()}
    together = paired_bootstraps(reference, others, gold, n_boot=250, seed=5, chunk=100)
    for name, other in others.items():
        expected, r = [], np.random.default_rng(5)
        for start in range(0, 250, 100):
            idx = r.integers(0, 150, size=(min(100, 250 - start), 150))
            ref = np.mean([spearman_rows(p[idx], gold[idx]) for p in reference], axis=0)
            oth = np.mean([spearman_rows(p[idx], gold[idx]) for p in other], axis=0)
            expected.append(oth - ref)
        expected = np.concatenate(expected)
        assert np.array_equal(together[name], expected), name
        assert np.array_equal(paired_bootstrap(reference, other, gold, n_boot=250, seed=5, chunk=100), expected)


def test_seed_t_interval_by_hand():
    iv = seed_t_interval([70.0, 71.0, 72.0], [72.0, 73.5, 75.0])  # differences 2, 2.5, 3
    d = np.array([2.0, 2.5, 3.0])
    half = 4.302652729911275 * d.std(ddof=1) / np.sqrt(3)  # t(0.975, 2)
    assert iv.point == pytest.approx(d.mean()) and iv.low == pytest.approx(d.mean() - half)
    assert iv.high == pytest.approx(d.mean() + half) and iv.covers_zero is False
    assert seed_t_interval([1.0], [2.0]).low is None
    assert seed_t_interval([70.0, 71.0, 72.0], [72.0, 72.5, 75.5]).covers_zero is True  # 2, 1.5, 3.5: too spread


def result(method, seed, score, gold, pred):
    return Result("enc", {"sts16": TaskScore(score, score, len(gold))}, method=method, seed=seed,
                  predictions={"sts16": np.asarray(pred), "sts16:gold": np.asarray(gold)})


def test_a_fresh_result_compares_with_the_same_result_read_back(tmp_path):
    gold = np.array([4.4, 0.8, 3.6, 3.4, 1.4])  # float64 in memory, float32 on disk
    fresh = result("a", 1, 70.0, gold, gold / 5)
    again = Result.load(fresh.save(tmp_path / "a.json"))
    again.predictions = Result.load_predictions(tmp_path / "a.json")  # as the runner reads a cached result
    cmp = Comparison(["a", "b"], ["sts16"], {"a": [again], "b": [result("b", 1, 71.0, gold, gold[::-1])]}, n_boot=10)
    assert cmp.pair_diffs["b"]["avg"].point == pytest.approx(1.0)


def test_comparison_checks_same_pairs_and_states_its_resamples():
    rng = np.random.default_rng(2)
    gold = rng.random(50)
    results = {"a": [result("a", s, 70.0 + s, gold, gold + rng.normal(0, 0.3, 50)) for s in (1, 2, 3)],
               "b": [result("b", s, 72.0 + s * 0.5, gold, gold + rng.normal(0, 0.2, 50)) for s in (1, 2, 3)]}
    cmp = Comparison(["a", "b"], ["sts16"], results, preset="unit", n_boot=123)
    md = comparison_markdown(cmp, "dsgen compare a b")
    assert "123 resamples" in md and "t-interval" in md and "dsgen compare a b" in md
    assert cmp.seed_diffs["b"]["avg"].point == pytest.approx(np.mean([72.5 - 71, 73 - 72, 73.5 - 73]))
    other = {"a": results["a"], "b": [result("b", s, 72.0, gold[::-1], gold) for s in (1, 2, 3)]}
    with pytest.raises(DsgenError, match="other sts16 pairs"):
        Comparison(["a", "b"], ["sts16"], other, n_boot=10)


def _nested_draws(rng, n_draws, n_data, n_train, delta, data_sd, train_sd):
    """Paired differences of synthetic comparisons: delta + a data-seed effect + a training effect."""
    a = rng.normal(0, data_sd, size=(n_draws, n_data, 1))
    e = rng.normal(0, train_sd, size=(n_draws, n_data, n_train))
    return delta + a + e


@pytest.mark.parametrize("n_data,n_train", [(3, 1), (3, 3), (5, 2), (8, 1)])
def test_the_nested_interval_covers_a_known_difference_95_percent_of_the_time(n_data, n_train):
    """Simulated comparisons with a true difference of 1.7 points, data-seed sd 1.5 and training sd
    1.25 (the measured sizes): the interval covers 1.7 in 95% of 4,000 draws (binomial sd 0.35%)."""
    from dsgen.evaluation.statistics import nested_interval

    rng = np.random.default_rng(1234 + 10 * n_data + n_train)
    draws = _nested_draws(rng, 4000, n_data, n_train, 1.7, 1.5, 1.25)
    covered = 0
    for diff in draws:
        other = {(d, t): 60.0 + diff[d, t] for d in range(n_data) for t in range(n_train)}
        reference = {(d, t): 60.0 for d in range(n_data) for t in range(n_train)}
        iv = nested_interval(reference, other)
        covered += iv.low <= 1.7 <= iv.high
    assert 0.937 <= covered / len(draws) <= 0.963


def test_a_two_level_bootstrap_over_three_data_seeds_covers_far_less():
    """Why the headline is not a percentile bootstrap: over 3 data seeds it covers ~80%, not 95%."""
    rng = np.random.default_rng(7)
    draws = _nested_draws(rng, 1000, 3, 3, 0.0, 1.5, 1.25)
    covered = 0
    for diff in draws:
        d_idx = rng.integers(0, 3, size=(500, 3))
        t_idx = rng.integers(0, 3, size=(500, 3, 3))
        means = diff[d_idx[..., None], t_idx].mean(axis=(1, 2))
        lo, hi = np.percentile(means, [2.5, 97.5])
        covered += lo <= 0.0 <= hi
    assert covered / len(draws) < 0.88


def test_nested_interval_pairs_runs_and_says_what_it_is_over():
    from dsgen.evaluation.statistics import nested_interval, nested_p_value

    ref = {(1, 1): 50.0, (1, 2): 51.0, (2, 1): 52.0, (2, 2): 50.0, (3, 1): 49.0, (3, 2): 50.0}
    other = {k: v + 2.0 + 0.5 * k[0] for k, v in ref.items()}  # per data seed +2.5, +3.0, +3.5
    iv = nested_interval(ref, other)
    assert iv.point == pytest.approx(3.0) and iv.low == pytest.approx(3.0 - 4.302653 * 0.5 / 3 ** 0.5, abs=1e-5)
    assert "3 data seeds x 2 training seeds" in iv.method
    one = nested_interval({k: v for k, v in ref.items() if k[0] == 1}, other)
    assert "2 training seeds on one dataset" in one.method and one.low == one.high == pytest.approx(2.5)
    assert nested_p_value(ref, other, alternative="greater") < 0.05 < nested_p_value(ref, other, null=3.0)
    assert nested_interval(ref, {(9, 9): 1.0}).low is None


def test_holm_adjusts_a_family_step_down():
    from dsgen.evaluation.statistics import holm

    adjusted = holm([0.01, 0.04, float("nan"), 0.03, 0.5])
    assert adjusted[0] == pytest.approx(0.04) and adjusted[3] == pytest.approx(0.09)
    assert adjusted[1] == pytest.approx(0.09) and adjusted[4] == pytest.approx(0.5)  # monotone step-down
    assert adjusted[2] != adjusted[2]


def test_variance_components_separate_data_and_training_spread():
    from dsgen.evaluation.statistics import variance_components

    rng = np.random.default_rng(3)
    scores = {}
    for d in range(40):
        a = rng.normal(0, 2.0)
        for t in range(4):
            scores[(d, t)] = 55 + a + rng.normal(0, 1.0)
    vc = variance_components(scores)
    assert vc["data_seeds"] == 40 and vc["train_seeds"] == 4
    assert vc["train_sd"] == pytest.approx(1.0, abs=0.15) and vc["data_sd"] == pytest.approx(2.0, abs=0.5)


def test_a_two_level_comparison_pairs_by_run_and_shows_the_spread_by_source():
    rng = np.random.default_rng(4)
    gold = rng.random(40)
    runs = [(d, t) for d in (1, 2, 3) for t in (1, 2)]

    def res(method, d, t, score):
        r = result(method, t, score, gold, gold + rng.normal(0, 0.3, 40))
        r.data_seed = d
        return r

    data_effect = {1: 0.0, 2: 3.0, 3: -2.0}
    results = {"a": [res("a", d, t, 60 + data_effect[d] + 0.4 * t) for d, t in runs],
               "b": [res("b", d, t, 62 + data_effect[d] + 0.4 * t + 0.1 * d) for d, t in runs]}
    cmp = Comparison(["a", "b"], ["sts16"], dict(results), n_boot=10)
    iv = cmp.seed_diffs["b"]["avg"]
    assert iv.point == pytest.approx(2.2) and "3 data seeds x 2 training seeds" in iv.method  # data noise cancels
    spread = cmp.spread()
    assert spread["a"]["data_seeds"] == 3 and spread["a"]["train_seeds"] == 2
    assert spread["a"]["train_sd"] == pytest.approx(0.4 / np.sqrt(2), abs=1e-3) and spread["a"]["data_sd"] > 2
    md = comparison_markdown(cmp)
    assert "Spread by source" in md and "6 runs: data seeds [1, 2, 3] x training seeds [1, 2]" in md
    shuffled = {"a": results["a"][::-1], "b": results["b"]}  # order does not matter, runs do
    assert Comparison(["a", "b"], ["sts16"], shuffled, n_boot=10).seed_diffs["b"]["avg"].point == pytest.approx(2.2)
    with pytest.raises(DsgenError, match="different \\(data seed, training seed\\) runs"):
        Comparison(["a", "b"], ["sts16"], {"a": results["a"], "b": results["b"][:-1]}, n_boot=10)


def test_holm_can_hold_a_rejections_share_of_the_level():
    """``frees``: a rejection that frees no share leaves the next step's divisor as it was (issue 31: a claim decided
    'no effect' frees none); none freeing is Bonferroni."""
    from dsgen.evaluation.statistics import holm

    p = [0.01, 0.02, 0.03]
    assert holm(p) == pytest.approx([0.03, 0.04, 0.04])
    assert holm(p, [False, True, True]) == pytest.approx([0.03, 0.06, 0.06])  # the second step still divides by 3
    assert holm(p, [False, False, False]) == pytest.approx([0.03, 0.06, 0.09])


@pytest.mark.parametrize("effect,sd,n,level", [(1.0, 1.5, 5, 0.0025), (0.5, 1.0, 10, 0.025), (-0.3, 1.0, 6, 0.05)])
def test_t_power_is_the_rejection_rate_of_the_t_test(effect, sd, n, level):
    """The noncentral t's power against 20,000 simulated one-sided t-tests (binomial sd at most 0.35%)."""
    from scipy.stats import t

    from dsgen.evaluation.statistics import t_power

    rng = np.random.default_rng(11)
    x = rng.normal(effect, sd, (20000, n))
    stat = x.mean(1) / (x.std(1, ddof=1) / np.sqrt(n))
    assert t_power(effect, sd, n, level) == pytest.approx(np.mean(stat > t.ppf(1 - level, n - 1)), abs=0.012)


@pytest.mark.parametrize("difference,sd,n,margin,level", [(0.2, 1.0, 10, 1.0, 0.05), (0.0, 0.5, 3, 1.0, 0.05),
                                                          (0.5, 1.0, 20, 1.0, 0.005), (0.9, 0.3, 4, 1.0, 0.05)])
def test_tost_power_is_the_rate_at_which_the_interval_falls_inside_the_margin(difference, sd, n, margin, level):
    from scipy.stats import t

    from dsgen.evaluation.statistics import tost_power

    rng = np.random.default_rng(12)
    x = rng.normal(difference, sd, (20000, n))
    mean, half = x.mean(1), t.ppf(1 - level, n - 1) * x.std(1, ddof=1) / np.sqrt(n)
    simulated = np.mean((mean - half > -margin) & (mean + half < margin))
    assert tost_power(difference, sd, n, margin, level) == pytest.approx(simulated, abs=0.012)
    assert tost_power(1.5, sd, 200, margin, level) < 1e-6  # beyond the margin: never within it


def test_data_seeds_for_power_is_the_smallest_that_reaches_it():
    from dsgen.evaluation.statistics import data_seeds_for_power, t_power, tost_power

    d = data_seeds_for_power(lambda n: t_power(1.0, 1.5, n, 0.0025))
    assert t_power(1.0, 1.5, d, 0.0025) >= 0.8 > t_power(1.0, 1.5, d - 1, 0.0025)
    d = data_seeds_for_power(lambda n: tost_power(0.28, 0.82, n, 1.0, 0.005))
    assert tost_power(0.28, 0.82, d, 1.0, 0.005) >= 0.8 > tost_power(0.28, 0.82, d - 1, 1.0, 0.005)
    assert data_seeds_for_power(lambda n: t_power(-0.5, 1.0, n, 0.025)) is None  # the wrong side: never
    assert data_seeds_for_power(lambda n: t_power(10.0, 0.1, n, 0.025)) == 2


def test_the_interval_and_its_test_read_the_same_differences():
    from dsgen.evaluation.statistics import nested_interval, nested_p_value, seed_differences, t_interval, t_p_value

    ref = {(d, t): 50.0 + d + 0.3 * t for d in (1, 2, 3, 4) for t in (1, 2, 3)}
    other = {k: v + 1.0 + 0.4 * k[0] - 0.2 * k[1] for k, v in ref.items()}
    diffs, what = seed_differences(ref, other)
    assert diffs == pytest.approx([1.0, 1.4, 1.8, 2.2]) and "4 data seeds x 3 training seeds" in what
    assert t_interval(diffs, what) == nested_interval(ref, other)
    assert t_p_value(diffs, 1.0, "greater") == nested_p_value(ref, other, 1.0, "greater")
