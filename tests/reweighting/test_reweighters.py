import numpy as np
import pytest

from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.reweighting.base import REWEIGHTERS, ReweightContext
from dsgen.generation.judge import ScoreCache
from dsgen.reweighting.discriminator import (DiscriminatorConfig, DiscriminatorFilter, gense_rules,
                                             lm_true_probability)
from dsgen.reweighting.random_weights import RandomReweighter
from dsgen.reweighting.sdi import SdiClassifier, SdiConfig, SdiData, SdiReweighter, bottom_filter, importance, sdi_training_data


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


def test_sdi_training_data_is_balanced_held_out_and_drops_copies_of_human_sentences():
    human = [f"human sentence {i}." for i in range(30)]
    machine = [Pair(h, f"machine sentence {i}.", 1.0) for i, h in enumerate(human)] + [Pair(human[0], human[1], 0.0)]
    data = sdi_training_data(human, machine, single=True, seed=0, validation_fraction=0.1)
    for part, n in ((data.train, 27), (data.validation, 3)):
        labels = [y for _, y in part]
        assert labels.count(0) == labels.count(1) == n
    assert not {x for x, _ in data.train} & {x for x, _ in data.validation}  # validation never trains
    assert human[1] not in [x for x, y in data.train + data.validation if y == 0]


def test_sdi_classifier_learns_separable_toy_data(tiny_encoder_dir):
    rng = np.random.default_rng(0)
    human_words = "the dog runs in the park with a ball".split()
    machine_words = "quantum ledger protocol yields volatile synergy metrics".split()
    human = [" ".join(rng.choice(human_words, 6)) for _ in range(120)]
    machine = [" ".join(rng.choice(machine_words, 6)) for _ in range(120)]
    examples = [(t, 1) for t in human] + [(t, 0) for t in machine]
    rng.shuffle(examples)
    examples = [tuple(e) for e in examples]
    clf = SdiClassifier(SdiConfig(encoder=str(tiny_encoder_dir), epochs=4, learning_rate=1e-3, batch_size=16, device="cpu"))
    info = clf.fit(SdiData(examples[24:], examples[:24]), seed=0, progress=False)
    assert info["sdi_validation_accuracy"] > 90 and len(info["sdi_validation_history"]) == 4  # one evaluation per epoch
    losses = [h["loss"] for h in info["sdi_validation_history"]]
    assert info["sdi_best_step"] == info["sdi_validation_history"][losses.index(min(losses))]["step"]
    p = clf.p_human(["the dog runs in the park", "quantum ledger yields synergy"])
    assert p[0] > 0.5 > p[1]


def test_sdi_weights_do_not_depend_on_what_ran_before(tiny_encoder_dir):
    """The classifier head is initialised under the run's seed: same seed, same weights, in any order."""
    import torch

    rng = np.random.default_rng(1)
    human = [f"the person number {i} walks home." for i in range(40)]
    pairs = [Pair(h, " ".join(rng.choice("quantum ledger yields synergy metrics now".split(), 5)), 1.0) for h in human]
    cfg = SdiConfig(encoder=str(tiny_encoder_dir), epochs=1, batch_size=16, device="cpu", human="inputs")
    ctx = ReweightContext(human_texts=human, seed=3, progress=False)

    def weights():
        return [p.weight for p in SdiReweighter(cfg).apply(pairs, ctx)[0]]

    first = weights()
    torch.manual_seed(123)
    torch.randn(1000)  # something else ran and moved the global generator
    second = weights()
    np.random.seed(5)
    third = weights()
    assert first == second == third


def test_sdi_needs_human_inputs():
    with pytest.raises(DsgenError, match="human-written inputs"):
        REWEIGHTERS.get("sdi")().score([Pair("a", "b", 1.0)], ReweightContext(human_texts=None))


def test_sdi_config_rejects_bad_values():
    with pytest.raises(DsgenError):
        SdiConfig(input="triple")
    with pytest.raises(DsgenError):
        SdiConfig(random_pairs="maybe")


def test_gense_length_and_containment_rules():
    cfg = DiscriminatorConfig()
    long = "A man in a red shirt is playing a guitar outside."
    assert gense_rules(long, "A man is playing a guitar today.", cfg) is None
    assert gense_rules("A man plays a guitar.", "A man is playing a guitar today.", cfg) == "short_x1"
    assert gense_rules(long, "He plays guitar.", cfg) == "short_x2"
    assert gense_rules(long, "A man in a red shirt is playing a guitar.", cfg) == "containment"  # x2[:-1] in x1
    assert gense_rules(long, long + " And he sings along with it.", cfg) == "containment"       # x1[:-1] in x2
    off = DiscriminatorConfig(min_x1_words=0, min_x2_words=0, drop_containment=False)
    assert gense_rules("Short.", long, off) is None


def test_score_cache_is_bounded_and_keyed_by_content():
    from dsgen.identity import score_key

    cache = ScoreCache(max_entries=3)
    keys = [score_key({"model": "m", "size": 1}, "p {x1} {x2}", f"a{i}", "b") for i in range(5)]
    for i, k in enumerate(keys):
        cache.put(k, i / 10)
    assert len(cache.entries) == 3 and cache.get(keys[0]) is None and cache.get(keys[4]) == 0.4
    assert score_key({"model": "m", "size": 1}, "p", "a", "b") != score_key({"model": "m", "size": 2}, "p", "a", "b")


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
    out, summary = Toy(DiscriminatorConfig(min_x1_words=0, min_x2_words=0, drop_containment=False)).apply(
        pairs, ReweightContext())
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

    from dsgen.generation.judge import word_token_ids as _word_token_ids
    from dsgen.reweighting.discriminator import FALSE_WORDS, TRUE_WORDS

    tok = tiny_lm.tokenizer
    t_ids, f_ids = _word_token_ids(tok, TRUE_WORDS), _word_token_ids(tok, FALSE_WORDS)
    shared = set(t_ids) & set(f_ids)
    t_ids, f_ids = [i for i in t_ids if i not in shared], [i for i in f_ids if i not in shared]
    from dsgen.generation.judge import answer_lead

    lead = answer_lead(tok, [TRUE_WORDS, FALSE_WORDS])  # a character tokenizer writes the space first
    with torch.inference_mode():
        ids = tok([DiscriminatorConfig().prompt.format(x1=pairs[0][0], x2=pairs[0][1]) + lead], return_tensors="pt")
        probs = torch.softmax(tiny_lm.model(**ids).logits[0, -1], -1)
    pt, pf = probs[t_ids].sum().item(), probs[f_ids].sum().item()
    assert p_true[0] == pytest.approx(pt / (pt + pf), rel=1e-4)
    assert p_true[0] + pf / (pt + pf) == pytest.approx(1.0)


def test_self_curation_keeps_triplets_the_judge_rates_apart():
    """MultiCSR's filter on the judge's ratings (in [0, 1]: its 3.0 of 5 is 0.6): positive >= 0.6, negative
    <= 0.6 and positive above negative; an input without both sides, or failing a rule, is dropped."""
    from dsgen.reweighting.base import ReweightContext
    from dsgen.reweighting.curation import CurationConfig, SelfCuration

    def pair(x1, label, score):
        return Pair(x1, f"{x1} {label}", label, extra={"judge_score": score})

    pairs = [pair("a", "entailment", 0.9), pair("a", "contradiction", 0.2),   # kept
             pair("b", "entailment", 0.5), pair("b", "contradiction", 0.1),   # positive too low
             pair("c", "entailment", 0.8), pair("c", "contradiction", 0.7),   # negative too high
             pair("d", "entailment", 0.6), pair("d", "contradiction", 0.6),   # no gap
             pair("e", "entailment", 0.9)]                                    # incomplete
    out, summary = SelfCuration(CurationConfig()).apply(pairs, ReweightContext(progress=False))
    assert [p.weight for p in out] == [1.0, 1.0, 0, 0, 0, 0, 0, 0, 0]
    assert summary["dropped"] == {"incomplete": 1, "negative_too_high": 1, "no_gap": 1, "positive_too_low": 1}
    with pytest.raises(DsgenError, match="judge_score"):
        SelfCuration(CurationConfig()).apply([Pair("a", "b", "entailment")], ReweightContext(progress=False))


def test_self_curation_drops_a_triplet_the_judge_did_not_rate():
    """A judge's missing score (None: it abstained) is no rating: its triplet is dropped (MultiCSR keeps only
    triplets with two scores), counted as an abstention, and more than max_abstention_share of the pairs read
    abstaining fails the run with one line (the labelling stage's rule, one function). It raised TypeError."""
    from dsgen.reweighting.curation import CurationConfig, SelfCuration

    def pair(x1, label, score):
        return Pair(x1, f"{x1} {label}", label, extra={"judge_score": score})

    pairs = [pair("a", "entailment", 0.9), pair("a", "contradiction", None),  # abstained: dropped
             pair("b", "entailment", 0.9), pair("b", "contradiction", 0.1)]   # kept
    pairs += [pair(f"x{i}", label, score) for i in range(3) for label, score in (("entailment", 1.0),
                                                                                ("contradiction", 0.0))]
    out, summary = SelfCuration(CurationConfig()).apply(pairs, ReweightContext(progress=False))
    assert [p.weight for p in out] == [0, 0, 1.0, 1.0] + [1.0] * 6
    assert summary["dropped"] == {"abstained": 1} and summary["abstained"] == 1 and summary["abstained_share"] == 0.1
    pairs[2].extra["judge_score"] = None  # 2 of 10
    with pytest.raises(DsgenError, match=r"self-curation: the judge gave no score for 2 of 10 pairs") as err:
        SelfCuration(CurationConfig()).apply(pairs, ReweightContext(progress=False))
    assert "\n" not in str(err.value) and "[reweighting] max_abstention_share = 0.1" in str(err.value)
    out, summary = SelfCuration(CurationConfig(max_abstention_share=0.2)).apply(pairs, ReweightContext(progress=False))
    assert summary["dropped"] == {"abstained": 2} and sum(p.weight for p in out) == 6


def test_the_sdi_classifier_is_a_data_fit_that_reads_back_exactly(tiny_encoder_dir, tmp_path):
    """The classifier is a data-level fit (dsgen.data.fits): its settings leave out how scores become weights (rise
    and rise-filter declare one fit), it reads the dataset and the human side, and the stored classifier gives the
    same p_D bits as the one just fitted (a run on another process or node loads it)."""
    from dsgen.data.fits import FitData

    cfg = SdiConfig(encoder=str(tiny_encoder_dir), epochs=1.0, device="cpu", human="inputs")
    rise, rise_filter = SdiReweighter(cfg).data_fit(), SdiReweighter(cfg.replace(filter_fraction=0.1, temperature=0.9)).data_fit()
    assert rise.settings == rise_filter.settings and rise.reads == ("generated", "inputs") and rise.kind == "sdi-classifier"
    assert SdiReweighter(cfg.replace(human="source")).data_fit().reads == ("generated", "inputs", "source")
    assert SdiReweighter(cfg.replace(epochs=2.0)).data_fit().settings != rise.settings
    human = [f"A person number {i} walks a red dog in the park." for i in range(24)]
    generated = [Pair(h, f"Machine text {i} about things and stuff.", 1.0) for i, h in enumerate(human)]
    data = FitData(seed=3, generated=generated, inputs=human, progress=False)
    (tmp_path / "fit").mkdir()
    info = rise.compute(data, tmp_path / "fit")
    assert info["sdi_human"] == {"rule": "inputs", "available": 24} and (tmp_path / "fit" / "config.json").exists()
    texts = [p.text_b for p in generated] + human
    fitted = SdiClassifier(cfg)  # the classifier in memory, right after its fit
    fitted.fit(sdi_training_data(human, generated, True, 3), seed=3, progress=False)
    assert (rise.load(tmp_path / "fit", info).logits(texts) == fitted.logits(texts)).all()
    assert SdiReweighter(cfg).fit_alone(data).value.logits(texts).tolist() == fitted.logits(texts).tolist()
    with pytest.raises(DsgenError, match="human-written inputs"):
        rise.compute(FitData(seed=3, generated=generated, inputs=None), tmp_path / "none")
