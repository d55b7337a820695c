from collections import Counter

from dsgen.data.pairs import Pair
from dsgen.data.postprocess import PostprocessConfig, postprocess


def gen_pairs():
    pairs = []
    for i in range(20):
        x1 = f"x1 number {i}"
        pairs += [Pair(x1, x1, 1.0),  # identical: removed
                  Pair(x1, f"same {i}", 1.0), Pair(x1, f"same {i}", 1.0),  # duplicate
                  Pair(x1, f"same b {i}", 1.0), Pair(x1, f"same c {i}", 1.0),  # third x2 for (x1, 1): capped
                  Pair(x1, f"half {i}", 0.5), Pair(x1, f"other {i}", 0.0)]
    return pairs


def test_dino_postprocessing_steps():
    train, val = postprocess(gen_pairs(), PostprocessConfig(seed=1))
    everything = train + val
    gen = [p for p in everything if p.extra["source"] == "generated"]
    rand = [p for p in everything if p.extra["source"] == "random"]
    assert all(p.text_a != p.text_b for p in gen)
    assert len(gen) == 20 * 4  # 2 x (x1, 1) + 1 x (x1, 0.5) + 1 x (x1, 0)
    assert Counter(p.label for p in gen) == {0.9: 40, 0.5: 20, 0.1: 20}  # smoothing 0 -> 0.1, 1 -> 0.9
    assert len(rand) == 2 * 20 and all(p.label == 0.0 for p in rand)
    assert all(p.text_b.split()[-1] != p.text_a.split()[-1] for p in rand)  # x2 of another entry
    assert abs(len(val) - 0.1 * len(everything)) <= 3
    by_label = Counter(p.label for p in val)
    assert by_label == {0.9: 4, 0.5: 2, 0.1: 2, 0.0: 4}  # stratified


def test_each_step_can_be_turned_off():
    cfg = PostprocessConfig(remove_identical=False, remove_duplicates=False, max_per_x1_label=0,
                            label_smoothing=0.0, random_pairs_per_x1=0, validation_fraction=0.0)
    train, val = postprocess(gen_pairs(), cfg)
    assert len(train) == len(gen_pairs()) and not val
    assert {p.label for p in train} == {1.0, 0.5, 0.0}


def test_shuffled_labels_keep_the_pairs_and_the_label_mix_but_not_the_pairing():
    plain, _ = postprocess(gen_pairs(), PostprocessConfig(seed=1, validation_fraction=0.0))
    shuffled, _ = postprocess(gen_pairs(), PostprocessConfig(seed=1, validation_fraction=0.0, shuffle_labels=True))
    assert Counter(p.label for p in shuffled) == Counter(p.label for p in plain)
    assert {(p.text_a, p.text_b) for p in shuffled} == {(p.text_a, p.text_b) for p in plain}
    label = {(p.text_a, p.text_b): p.label for p in plain}
    moved = sum(label[(p.text_a, p.text_b)] != p.label for p in shuffled)
    assert moved > len(plain) / 3 and all(p.extra["shuffled"] for p in shuffled)


def test_a_preset_postprocess_control_applies_to_every_method_and_is_checked(sts_data_dir, tmp_path):
    """(The run key fingerprints the raw encoder, whose standardisation is fitted on STSb sentences.)"""
    import pytest

    from dsgen.errors import DsgenError
    from dsgen.planning import plan_run
    from dsgen.presets import load_preset

    preset = load_preset("smoke")
    preset.postprocess = {"shuffle_labels": True}
    for method in ("dino", "dino-no-smoothing", "human"):
        plan = plan_run(method, preset, 1)
        assert plan.postprocess.shuffle_labels and plan.origins["postprocess"]["shuffle_labels"] == "preset"
    from dsgen.runs.pipeline import Runner

    runner = Runner(tmp_path, str(sts_data_dir), progress=False)  # keys only: nothing is generated
    assert runner.run_key(plan_run("dino", preset, 1)) != runner.run_key(plan_run("dino", load_preset("smoke"), 1))
    preset.postprocess = {"shufle_labels": True}
    with pytest.raises(DsgenError, match="did you mean 'shuffle_labels'"):
        plan_run("dino", preset, 1)
