"""The training-label agreement with an independent judge (dsgen.evaluation.quality): a dataset's cosines are a
function of the dataset alone."""

import random

import numpy as np

from dsgen.data.pairs import Pair
from dsgen.evaluation.quality import LabelJudge

WORDS = "a man woman dog cat plays runs guitar piano eats food street car red blue".split()


def dataset(seed, shared):
    rng = random.Random(seed)
    own = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 25))) + "." for _ in range(40)]
    return [Pair(a, b, rng.random()) for a, b in zip(own[:20] + shared, own[20:] + shared[::-1])]


def recording(monkeypatch):
    """The sentences of every encoding call the judges make from now on."""
    from dsgen.evaluation import evaluator

    calls, encode = [], evaluator.encode_bucketed

    def spy(model, texts, *args, **kwargs):
        calls.append(list(texts))
        return encode(model, texts, *args, **kwargs)

    monkeypatch.setattr(evaluator, "encode_bucketed", spy)
    return calls


def test_a_datasets_cosines_do_not_depend_on_what_was_judged_before(tiny_encoder_dir, monkeypatch):
    """A dataset's sentences are encoded together, in one order, whatever was judged before (a dataset sharing some
    of them) and whatever the pairs' order: so the batches, and the bits, are the dataset's own on any machine
    (where a kernel's result depends on its batch's shape, embeddings kept per sentence would carry the first
    dataset's batches into the second's cosines)."""
    shared = [p.text_a for p in dataset(0, [])[:6]]
    first, second = dataset(1, shared), dataset(2, shared)
    calls = recording(monkeypatch)
    before = LabelJudge(str(tiny_encoder_dir), "cpu", batch_size=4)
    before.agreement(first)
    after_first = before.cosines(second)
    before_calls = calls[:]
    alone = LabelJudge(str(tiny_encoder_dir), "cpu", batch_size=4)
    assert np.array_equal(alone.cosines(second[::-1])[::-1], after_first)
    assert before_calls[-1] == calls[-1] == sorted({s for p in second for s in (p.text_a, p.text_b)})
    assert np.array_equal(alone.cosines(second), after_first) and len(calls) == len(before_calls) + 1  # kept
    report = alone.agreement(second)
    assert report["pairs"] == len(second) and report["spearman"] is not None


def test_a_runs_training_pairs_are_judged_among_its_whole_dataset(tiny_encoder_dir, monkeypatch):
    """Training seeds split one dataset into training and validation pairs apart; judged among the whole dataset,
    every seed's training pairs read one encoding of its sentences (the first seed's), and a fresh judge of the second
    seed's pairs alone, in another order, gets the same bits."""
    whole = dataset(3, [])
    seeds = [random.Random(s).sample(whole, 15) for s in (1, 2)]
    calls = recording(monkeypatch)
    judge = LabelJudge(str(tiny_encoder_dir), "cpu", batch_size=4)
    judge.agreement(seeds[0], whole)
    second = judge.cosines(seeds[1], whole)
    assert calls == [sorted({s for p in whole for s in (p.text_a, p.text_b)})]  # one encoding, of the whole dataset
    fresh = LabelJudge(str(tiny_encoder_dir), "cpu", batch_size=4)
    assert np.array_equal(fresh.cosines(seeds[1][::-1], whole[::-1])[::-1], second)
    assert judge.agreement(seeds[1], whole)["pairs"] == 15 and len(calls) == 2
