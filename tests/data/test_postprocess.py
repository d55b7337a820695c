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
