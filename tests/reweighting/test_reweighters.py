import numpy as np
import pytest

from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.reweighting.base import REWEIGHTERS, ReweightContext
from dsgen.reweighting.discriminator import DiscriminatorConfig, DiscriminatorFilter, lm_true_probability
from dsgen.reweighting.random_weights import RandomReweighter
from dsgen.reweighting.sdi import SdiClassifier, SdiConfig, bottom_filter, importance, sdi_training_data


def test_registry_holds_the_builtin_reweighters():
    assert {"sdi", "random", "discriminator"} <= set(REWEIGHTERS.names())


def test_importance_is_a_probability_and_large_tau_flattens_it():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 5, size=(200, 2))
    p = importance(logits, 0.5)
    assert ((p >= 0) & (p <= 1)).all()
    flat = importance(logits, 1e6)
    assert np.allclose(flat, 0.5, atol=1e-4)
    # tau scales confidence: lower tau pushes p_D away from 0.5
    assert np.abs(importance(logits, 0.5) - 0.5).mean() > np.abs(importance(logits, 1.0) - 0.5).mean()
    assert importance(np.array([[0.0, np.log(3.0)]]), 1.0)[0] == pytest.approx(0.75)


def test_bottom_filter_removes_exactly_ten_percent():
    scores = np.random.default_rng(1).random(250)
    w = bottom_filter(scores, 0.1)
    assert (w == 0).sum() == 25 and set(np.unique(w)) == {0.0, 1.0}
    assert scores[w == 0].max() <= scores[w == 1].min()


def test_random_weights_reproducible_by_seed():
    pairs = [Pair(f"a{i}", f"b{i}", 0.5) for i in range(50)]
    r = RandomReweighter()
    w1, _ = r.apply(pairs, ReweightContext(seed=3))
    w2, _ = r.apply(pairs, ReweightContext(seed=3))
    w3, _ = r.apply(pairs, ReweightContext(seed=4))
    a, b, c = ([p.weight for p in ws] for ws in (w1, w2, w3))
    assert a == b and a != c and all(0 <= x <= 1 for x in a)


def test_sdi_training_data_is_balanced_and_drops_copies_of_human_sentences():
    human = [f"human sentence {i}." for i in range(30)]
    machine = [Pair(h, f"machine sentence {i}.", 1.0) for i, h in enumerate(human)] + [Pair(human[0], human[1], 0.0)]
    ex = sdi_training_data(human, machine, single=True, seed=0)
    labels = [y for _, y in ex]
    assert labels.count(0) == labels.count(1) == 30
    assert human[1] not in [x for x, y in ex if y == 0]


def test_sdi_classifier_learns_separable_toy_data(tiny_encoder_dir):
    rng = np.random.default_rng(0)
    human_words = "the dog runs in the park with a ball".split()
    machine_words = "quantum ledger protocol yields volatile synergy metrics".split()
    human = [" ".join(rng.choice(human_words, 6)) for _ in range(120)]
    machine = [" ".join(rng.choice(machine_words, 6)) for _ in range(120)]
    examples = [(t, 1) for t in human] + [(t, 0) for t in machine]
    rng.shuffle(examples)
    clf = SdiClassifier(SdiConfig(encoder=str(tiny_encoder_dir), epochs=4, learning_rate=1e-3, batch_size=16, device="cpu"))
    info = clf.fit([tuple(e) for e in examples], seed=0, progress=False)
    assert info["sdi_validation_accuracy"] > 90
    p = clf.p_human(["the dog runs in the park", "quantum ledger yields synergy"])
    assert p[0] > 0.5 > p[1]


def test_sdi_needs_human_inputs():
    with pytest.raises(DsgenError, match="human-written inputs"):
        REWEIGHTERS.get("sdi")().score([Pair("a", "b", 1.0)], ReweightContext(human_texts=None))


def test_sdi_config_rejects_bad_values():
    with pytest.raises(DsgenError):
        SdiConfig(input="triple")
    with pytest.raises(DsgenError):
        SdiConfig(random_pairs="maybe")


def test_discriminator_keeps_exactly_the_pairs_above_alpha():
    f = DiscriminatorFilter(DiscriminatorConfig(alpha=0.9))
    labels = ["entailment", "entailment", "contradiction", "contradiction", 0.9, 0.1, 0.5, 0.0, 1.0]
    p_true = np.array([0.95, 0.89, 0.05, 0.2, 0.9, 0.5, 0.01, 0.08, 0.3])
    keep = f.keep(p_true, 1 - p_true, labels)
    assert keep.tolist() == [1, 0, 1, 0, 1, 0, 1, 1, 0]


def test_discriminator_reports_kept_fractions_and_starved_labels():
    class Toy(DiscriminatorFilter):
        def probabilities(self, pairs, context):
            p = np.array([0.99, 0.5, 0.5, 0.5])
            return p, 1 - p

    pairs = [Pair("a", "b", "entailment"), Pair("a", "c", "entailment"), Pair("a", "d", "contradiction"),
             Pair("a", "e", "contradiction")]
    out, summary = Toy().apply(pairs, ReweightContext())
    assert [p.weight for p in out] == [1.0, 0.0, 0.0, 0.0]
    assert summary["per_label"]["entailment"]["kept_fraction"] == 0.5
    assert summary["per_label"]["contradiction"]["kept_fraction"] == 0.0
    assert "contradiction" in summary["warning"] and summary["kept_fraction"] == 0.25


def test_lm_discriminator_probabilities_sum_to_one(tiny_lm):
    pairs = [("A man plays.", "A man plays music."), ("The cat.", "A dog runs fast.")]
    p_true = lm_true_probability(tiny_lm, pairs, DiscriminatorConfig().prompt)
    assert p_true.shape == (2,) and ((p_true > 0) & (p_true < 1)).all()
    # P(true) + P(false) = 1 by construction; check against a direct softmax over the two token sets
    import torch

    from dsgen.reweighting.discriminator import FALSE_WORDS, TRUE_WORDS, _word_token_ids

    tok = tiny_lm.tokenizer
    t_ids, f_ids = _word_token_ids(tok, TRUE_WORDS), _word_token_ids(tok, FALSE_WORDS)
    shared = set(t_ids) & set(f_ids)
    t_ids, f_ids = [i for i in t_ids if i not in shared], [i for i in f_ids if i not in shared]
    with torch.inference_mode():
        ids = tok([DiscriminatorConfig().prompt.format(x1=pairs[0][0], x2=pairs[0][1])], return_tensors="pt")
        probs = torch.softmax(tiny_lm.model(**ids).logits[0, -1], -1)
    pt, pf = probs[t_ids].sum().item(), probs[f_ids].sum().item()
    assert p_true[0] == pytest.approx(pt / (pt + pf), rel=1e-4)
    assert p_true[0] + pf / (pt + pf) == pytest.approx(1.0)
