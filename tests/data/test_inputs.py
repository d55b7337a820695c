"""The input sets the papers used: DINO's 11,498 STSb train sentences with duplicates, RISE's shuffled
10k, and RISE's dev set generated from other (validation) sentences than its training set."""

import pytest

from dsgen.data.inputs import load_inputs


def test_dinos_inputs_keep_duplicates_and_the_distinct_set_is_named(sts_data_dir):
    dino = load_inputs("stsb-train", None, str(sts_data_dir))
    distinct = load_inputs("stsb-train-distinct", None, str(sts_data_dir))
    assert len(dino) == 11_498 and len(distinct) == 10_536 and set(dino) == set(distinct)
    assert dino[:2] == distinct[:2]  # file order, pair by pair


def test_rises_shuffled_10k_is_seeded_distinct_and_drawn_from_the_whole_set(sts_data_dir):
    a = load_inputs("stsb-train", None, str(sts_data_dir), sample=10_000, seed=1)
    again = load_inputs("stsb-train", None, str(sts_data_dir), sample=10_000, seed=1)
    other = load_inputs("stsb-train", None, str(sts_data_dir), sample=10_000, seed=2)
    distinct = set(load_inputs("stsb-train-distinct", None, str(sts_data_dir)))
    assert a == again and a != other and len(a) == len(set(a)) == 10_000 and set(a) <= distinct
    assert load_inputs("stsb-train", 100, str(sts_data_dir), sample=10_000, seed=1) == a[:100]


def test_rises_dev_set_comes_from_validation_sentences_not_from_its_training_inputs(sts_data_dir, tmp_path):
    """The old protocol split one dataset 90/10, so training and dev shared x1 (a leak). RISE's dev inputs
    are STSb validation sentences; they meet the training inputs only where STSb's splits share a sentence."""
    from dsgen.planning import plan_run
    from dsgen.presets import load_preset
    from dsgen.runs.pipeline import Runner

    plan = plan_run("rise", load_preset("cpu"), 1, data_seed=1)
    data = Runner(tmp_path, str(sts_data_dir), progress=False).data.data_inputs(plan)
    train_pool = set(load_inputs("stsb-train-distinct", None, str(sts_data_dir)))
    dev_pool = set(load_inputs("stsb-validation", None, str(sts_data_dir)))
    assert set(data.inputs) <= train_pool and set(data.dev_inputs) <= dev_pool and len(data.dev_inputs) == 50
    assert set(data.inputs) & set(data.dev_inputs) <= train_pool & dev_pool
    assert len(set(data.inputs) & set(data.dev_inputs)) <= 2
    assert data.keys["dev"] != data.keys["train"]
    cpu = load_preset("cpu")  # the old protocol, kept as a named method, selects on its split under its own rule
    own_rule = cpu.replace(training={**cpu.training, "selection_rule": "paper"})
    split = plan_run("rise-split-dev", own_rule, 1, data_seed=1)
    assert split.method.dev_inputs is None and split.postprocess.validation_fraction == 0.1
    assert plan_run("rise-split-dev", cpu, 1, data_seed=1).postprocess.validation_fraction == 0.0  # cpu's shared rule
    with pytest.raises(Exception):
        load_inputs("stsb-validation", 0, str(sts_data_dir))


def test_a_data_seed_draws_the_inputs_of_every_method_and_the_papers_scale_reads_them_all(sts_data_dir, tmp_path):
    """Issue 31, one meaning of a data seed: DINO-style methods read the same first 100 sentences for every data
    seed (only the sampling changed) while RISE's drew new inputs. Now a data seed draws what every method reads
    (the first max_inputs of the method's population in an order the data seed draws; nested across sizes), and
    without max_inputs (the papers' scale) every input is read as the paper does, whatever the data seed."""
    from dataclasses import replace

    from dsgen.planning import plan_run
    from dsgen.presets import load_preset
    from dsgen.runs.pipeline import Runner

    d = str(sts_data_dir)
    population = load_inputs("stsb-train", None, d)
    one, two = load_inputs("stsb-train", 100, d, seed=1), load_inputs("stsb-train", 100, d, seed=2)
    assert one != two and len(one) == len(two) == 100 and set(one) | set(two) <= set(population)
    assert one != population[:100] and load_inputs("stsb-train", 100, d) == population[:100]  # no seed: the first 100
    assert load_inputs("stsb-train", 300, d, seed=1)[:100] == one  # a learning curve's sizes are nested
    assert load_inputs("stsb-train", None, d, seed=1) == load_inputs("stsb-train", None, d, seed=2) == population
    runner = Runner(tmp_path, d, progress=False)
    cpu = load_preset("cpu")
    for method in ("dino", "rise"):  # every method the same way
        inputs = {s: runner.data.data_inputs(plan_run(method, cpu, 1, data_seed=s)).inputs for s in (1, 2)}
        assert inputs[1] != inputs[2] and len(inputs[1]) == len(inputs[2]) == 100
    dev = {s: runner.data.data_inputs(plan_run("rise", cpu, 1, data_seed=s)).dev_inputs for s in (1, 2)}
    assert dev[1] != dev[2]  # RISE's dev inputs too
    paper = replace(cpu, max_inputs=None)
    full = {s: runner.data.data_inputs(plan_run("dino", paper, 1, data_seed=s)).inputs for s in (1, 2)}
    assert full[1] == full[2] == population  # the papers' scale: all 11,498 in file order, only generation varies
    rows = {r[1]: r[2] for r in plan_run("dino", cpu, 1, data_seed=1).rows()}
    assert rows["inputs"] == "100 of stsb-train, drawn with the data seed"  # dsgen plan says it


def test_human_pairs_are_drawn_like_inputs(sts_data_dir, tmp_path):
    """The human method draws its pairs with the data seed through the same function: a data seed redraws them,
    a larger draw holds a smaller one, and asking for the whole source gives it in file order for every seed."""
    from dsgen.data.pairs import read_pairs
    from dsgen.generation.human import HumanPairsConfig, HumanPairsGenerator

    def pairs(n, seed):
        out = tmp_path / f"h-{n}-{seed}.jsonl"
        HumanPairsGenerator(HumanPairsConfig(n_pairs=n, seed=seed), str(sts_data_dir)).generate(None, out, progress=False)
        return [(p.text_a, p.text_b) for p in read_pairs(out)]

    assert pairs(50, 1) != pairs(50, 2) and pairs(150, 1)[:50] == pairs(50, 1)
    gen = HumanPairsGenerator(HumanPairsConfig(), str(sts_data_dir))
    source = [(p.text_a, p.text_b) for p in gen.source_pairs()]
    assert pairs(0, 1) == pairs(0, 2) == source
