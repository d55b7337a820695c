import random

import pytest

from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.training.contrastive import ContrastiveConfig, ContrastiveTrainer, assemble_triplets
from dsgen.training.fit import TrainingConfig
from dsgen.training.regression import RegressionTrainer

WORDS = "a man woman dog cat plays runs guitar piano eats food street car red blue".split()


def sentence(rng):
    return " ".join(rng.choice(WORDS) for _ in range(6)) + "."


def test_triplet_assembly_drops_incomplete_and_filtered_triplets():
    pairs = [Pair("x", "e1", "entailment"), Pair("x", "c1", "contradiction"),
             Pair("x", "e2", "entailment", weight=0.5), Pair("x", "c2", "contradiction", weight=0.5),
             Pair("y", "e", "entailment"),                       # no contradiction: drops out
             Pair("z", "e", "entailment"), Pair("z", "c", "contradiction", weight=0.0)]  # filtered side
    triplets = assemble_triplets(pairs)
    assert [(t.anchor, t.positive, t.negative, t.weight) for t in triplets] == [("x", "e1", "c1", 1.0), ("x", "e2", "c2", 0.25)]


def test_regression_trainer_trains_selects_and_drops_weight_zero(tiny_encoder_dir):
    rng = random.Random(0)
    train = [Pair(sentence(rng), sentence(rng), rng.choice([0.1, 0.5, 0.9]), weight=rng.choice([0.0, 0.5, 1.0]))
             for _ in range(96)]
    val = [Pair(sentence(rng), sentence(rng), rng.choice([0.1, 0.5, 0.9])) for _ in range(12)]
    cfg = TrainingConfig(encoder=str(tiny_encoder_dir), batch_size=16, learning_rate=1e-3, device="cpu")
    outcome = RegressionTrainer(cfg).train(train, val, seed=1, progress=False)
    log = outcome.log
    kept = sum(p.weight > 0 for p in train)
    assert log["dropped_weight_zero"] == len(train) - kept and log["train_examples"] == kept
    assert log["steps"] == -(-kept // 16)
    history = [h["spearman"] for h in log["validation_history"]]
    assert len(history) == log["steps"] and log["best_validation_spearman"] == max(history)
    assert outcome.model.encode(["a dog."]).shape == (1, 32)


def test_regression_trainer_refuses_empty_and_string_labels(tiny_encoder_dir):
    cfg = TrainingConfig(encoder=str(tiny_encoder_dir), device="cpu")
    with pytest.raises(DsgenError, match="no training pair"):
        RegressionTrainer(cfg).train([Pair("a", "b", 1.0, weight=0.0)], [], seed=1, progress=False)
    with pytest.raises(DsgenError, match="numeric labels"):
        RegressionTrainer(cfg).train([Pair("a", "b", "entailment")], [], seed=1, progress=False)


def test_contrastive_trainer_runs_on_triplets(tiny_encoder_dir):
    rng = random.Random(1)
    pairs = []
    for _ in range(20):
        x = sentence(rng)
        pairs += [Pair(x, sentence(rng), "entailment"), Pair(x, sentence(rng), "contradiction")]
    cfg = ContrastiveConfig(encoder=str(tiny_encoder_dir), batch_size=8, device="cpu", prompt=True)
    outcome = ContrastiveTrainer(cfg).train(pairs, [], seed=1, progress=False)
    assert outcome.log["triplets"] == 20 and outcome.log["steps"] == 3
    assert "{}" in outcome.log["text_template"]
