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
    from dsgen.runner import Runner

    plan = plan_run("rise", load_preset("cpu"), 1, data_seed=1)
    data = Runner(tmp_path, str(sts_data_dir), progress=False).data_inputs(plan)
    train_pool = set(load_inputs("stsb-train-distinct", None, str(sts_data_dir)))
    dev_pool = set(load_inputs("stsb-validation", None, str(sts_data_dir)))
    assert set(data.inputs) <= train_pool and set(data.dev_inputs) <= dev_pool and len(data.dev_inputs) == 50
    assert set(data.inputs) & set(data.dev_inputs) <= train_pool & dev_pool
    assert len(set(data.inputs) & set(data.dev_inputs)) <= 2
    assert data.keys["dev"] != data.keys["train"]
    split = plan_run("rise-split-dev", load_preset("cpu"), 1, data_seed=1)  # the old protocol, kept as a named method
    assert split.method.dev_inputs is None and split.postprocess.validation_fraction == 0.1
    with pytest.raises(Exception):
        load_inputs("stsb-validation", 0, str(sts_data_dir))
