"""The pipeline end to end on a mock generator, a tiny encoder and one real STS task: caching,
seed handling, reweighting, the comparison and its files."""

import random
from pathlib import Path

import numpy as np
import pytest

from dsgen.artifacts import write_sidecar
from dsgen.data.pairs import Pair, read_pairs, write_pairs
from dsgen.evaluation.comparison import Comparison, paired_bootstrap
from dsgen.generation import GENERATORS
from dsgen.generation.base import Generator
from dsgen.method import METHODS, get_method
from dsgen.methods.dino import dino_recipe
from dsgen.presets import Preset
from dsgen.runner import Runner, plan_run, run_many


class MockGenerator(Generator):
    """Deterministic pairs: x2 = x1's words shuffled (label 1), cut (0.5) or another input (0)."""

    name = "mock-test"
    calls = 0

    def __init__(self, config):
        self.config = config

    def get_config_dict(self):
        return self.config.to_dict()

    def generate(self, inputs, out, progress=True):
        from dsgen.generation.debiased import dataset_key

        MockGenerator.calls += 1
        rng = random.Random(self.config.seed)
        pairs = []
        gense = self.config.task == "gense"
        for i, x in enumerate(inputs):
            words = x.split()
            for _ in range(self.config.per_label):
                if gense:
                    pairs.append(Pair(x, " ".join(rng.sample(words, len(words))), "entailment"))
                    pairs.append(Pair(x, inputs[(i + 1) % len(inputs)], "contradiction"))
                    continue
                pairs.append(Pair(x, " ".join(rng.sample(words, len(words))), 1.0))
                pairs.append(Pair(x, " ".join(words[: max(1, len(words) // 2)]) + f" {rng.randint(0, 9)}", 0.5))
                pairs.append(Pair(x, inputs[(i + 1 + rng.randrange(len(inputs) - 1)) % len(inputs)], 0.0))
        write_pairs(out, pairs)
        write_sidecar(out, dataset_key=dataset_key(self.config, inputs))
        return pairs


@pytest.fixture(scope="module")
def setup(tiny_encoder_dir, sts_data_dir, tmp_path_factory):
    if "mock-test" not in GENERATORS:
        GENERATORS.add("mock-test", MockGenerator)
        METHODS.add("mock-dino", dino_recipe(description="DINO recipe on the mock generator", generator="mock-test"))
        METHODS.add("mock-random", dino_recipe(description="mock + random weights", generator="mock-test",
                                               reweighter="random"))
        from dataclasses import replace

        gense = get_method("gense")
        METHODS.add("mock-gense", replace(gense, name="", generator="mock-test", reweighter_config={"alpha": 0.0}))
        METHODS.add("mock-gense-strict", replace(gense, name="", generator="mock-test", reweighter_config={"alpha": 1.0}))
    inputs = tmp_path_factory.mktemp("inputs") / "x1.txt"
    rng = random.Random(0)
    words = "a man woman dog cat plays runs guitar piano eats food street car red blue sits".split()
    inputs.write_text("\n".join(" ".join(rng.choice(words) for _ in range(7)) + "." for _ in range(40)))
    preset = Preset(name="unit", seeds=[1, 2], data_seed=42, inputs=str(inputs), tasks=["sts16"],
                    training={"encoder": str(tiny_encoder_dir), "batch_size": 16, "device": "cpu", "learning_rate": 1e-4})
    return preset, sts_data_dir


def test_run_caches_datasets_and_results_across_methods_and_seeds(setup, tmp_path):
    preset, data = setup
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    MockGenerator.calls = 0
    results = run_many(["mock-dino", "mock-random", "base"], preset, [1, 2], runner)
    assert MockGenerator.calls == 1  # one dataset for two methods and two seeds
    d1, d2 = results["mock-dino"]
    assert d1.tasks["sts16"].n_pairs == 1186 and d1.seed == 1 and d2.seed == 2
    assert d1.tasks["sts16"].spearman != d2.tasks["sts16"].spearman  # seeds change training
    assert results["base"][0].tasks == results["base"][1].tasks
    path = runner.result_path(plan_run("mock-random", preset, 1))
    assert path.exists() and path.with_suffix(".pred.npz").exists()
    weights = [p.weight for p in read_pairs(path.with_suffix(".train.jsonl"))]
    assert all(0 <= w <= 1 for w in weights) and len(set(weights)) > 10
    before = path.stat().st_mtime_ns
    again = run_many(["mock-random"], preset, [1], runner)["mock-random"][0]
    assert path.stat().st_mtime_ns == before and again.predictions is not None  # reused, not recomputed
    assert MockGenerator.calls == 1
    fresh = Runner(tmp_path / "runs", str(data), progress=False, fresh=True)
    redo = run_many(["mock-random"], preset, [1], fresh)["mock-random"][0]
    assert MockGenerator.calls == 2 and redo.tasks == again.tasks  # recomputed, same numbers

    comparison = Comparison(["mock-dino", "mock-random", "base"], preset.tasks,
                            {m: run_many([m], preset, [1, 2], runner)[m] for m in ("mock-dino", "mock-random", "base")},
                            preset="unit", n_boot=200)
    paths = comparison.write(tmp_path / "results", "cmp", command="dsgen compare mock-dino mock-random")
    md = paths["markdown"].read_text()
    assert "± " in md and "95%" in md and "dsgen compare mock-dino" in md
    assert paths["png"].read_bytes()[:4] == b"\x89PNG"
    frame = comparison.frame()
    assert frame.loc["mock-dino", "Δ Avg."] == 0
    v, lo, hi = comparison.diffs["base"]["avg"]
    assert lo <= v <= hi


def test_paired_bootstrap_is_zero_for_identical_and_positive_for_better_predictions():
    rng = np.random.default_rng(0)
    gold = rng.random(300)
    noisy = gold + rng.normal(0, 0.5, 300)
    better = gold + rng.normal(0, 0.1, 300)
    same = paired_bootstrap([noisy], [noisy], gold, n_boot=100)
    assert np.allclose(same, 0)
    diff = paired_bootstrap([noisy], [better], gold, n_boot=200)
    assert np.percentile(diff, 2.5) > 0


def test_gense_pipeline_and_a_filter_that_keeps_nothing(setup, tmp_path, tiny_lm_dir):
    from dsgen.runner import RunFailed

    preset, data = setup
    preset = Preset(**{**preset.to_dict(), "generation": {"generator": str(tiny_lm_dir), "device": "cpu"}})
    runner = Runner(tmp_path / "runs", str(data), progress=False)
    failures: list[RunFailed] = []
    results = run_many(["mock-gense", "mock-gense-strict"], preset, [1], runner, failures=failures)
    ok = results["mock-gense"][0]
    assert ok.extra["reweighting"]["kept_fraction"] == 1.0 and ok.extra["training"]["triplets"] == 40  # one distinct contradiction per x1
    assert "mock-gense-strict" not in results and len(failures) == 1
    failure = failures[0]
    assert "no complete" in failure.reason and "warning" in failure.extra["reweighting"]
    assert runner.result_path(plan_run("mock-gense-strict", preset, 1)).with_suffix(".failed.json").exists()
    with pytest.raises(RunFailed):
        run_many(["mock-gense-strict"], preset, [1], runner)
