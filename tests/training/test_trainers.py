import random

import pytest

from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.training.fit import validation_evaluator
from dsgen.training.contrastive import ContrastiveConfig, ContrastiveTrainer, assemble_triplets, read_nli_triplets
from dsgen.training.fit import TrainingConfig, evaluation_interval, training_failure
from dsgen.training.regression import RegressionTrainer

WORDS = "a man woman dog cat plays runs guitar piano eats food street car red blue".split()


def sentence(rng):
    return " ".join(rng.choice(WORDS) for _ in range(6)) + "."


def relative_change(encoder_dir, model, seed=1):
    """||w - w0|| / ||w0|| over the trainable parameters of ``model`` against a fresh load of the encoder it
    started from (computed here, apart from the trainer's own record)."""
    from dsgen.encoders import load_encoder

    start = dict(load_encoder(str(encoder_dir), "cpu", seed=seed).named_parameters())
    change = size = 0.0
    for name, p in model.named_parameters():
        if p.requires_grad:
            w0 = start[name].detach().double()
            change += float((p.detach().double() - w0).pow(2).sum())
            size += float(w0.pow(2).sum())
    return (change / size) ** 0.5


def test_triplet_assembly_drops_incomplete_and_filtered_triplets():
    pairs = [Pair("x", "e1", "entailment"), Pair("x", "c1", "contradiction"),
             Pair("x", "e2", "entailment", weight=0.5), Pair("x", "c2", "contradiction", weight=0.5),
             Pair("y", "e", "entailment"),                       # no contradiction: drops out
             Pair("z", "e", "entailment"), Pair("z", "c", "contradiction", weight=0.0)]  # filtered side
    triplets = assemble_triplets(pairs)
    assert [(t.anchor, t.positive, t.negative, t.weight) for t in triplets] == [("x", "e1", "c1", 1.0), ("x", "e2", "c2", 0.25)]


def test_evaluation_schedule_follows_dino_and_rise():
    assert evaluation_interval(TrainingConfig(), steps_per_epoch=250) == 100          # DINO: every 100 steps
    assert evaluation_interval(TrainingConfig(evaluations_per_epoch=3), 250) == 83    # RISE: every third of an epoch


def test_model_selection_returns_the_model_that_scored_the_reported_best(tiny_encoder_dir):
    """Evaluations every 3 steps, at each epoch's end and at the last step; the returned model is
    evaluated again on the validation split and must score the best of the history."""
    rng = random.Random(0)
    train = [Pair(sentence(rng), sentence(rng), rng.choice([0.1, 0.5, 0.9]), weight=rng.choice([0.0, 0.5, 1.0]))
             for _ in range(100)]
    val = [Pair(sentence(rng), sentence(rng), rng.choice([0.1, 0.5, 0.9])) for _ in range(16)]
    cfg = TrainingConfig(encoder=str(tiny_encoder_dir), batch_size=16, learning_rate=3e-3, device="cpu",
                         evaluation_steps=3, epochs=2.0)
    outcome = RegressionTrainer(cfg).train(train, val, seed=1, progress=False)
    log = outcome.log
    kept = sum(p.weight > 0 for p in train)
    assert log["dropped_weight_zero"] == len(train) - kept and log["train_examples"] == kept
    steps_per_epoch = -(-kept // 16)
    assert log["steps"] == 2 * steps_per_epoch
    steps = [h["step"] for h in log["validation_history"]]
    assert steps == sorted(set(steps))  # each step evaluated once
    assert {3, steps_per_epoch, 2 * steps_per_epoch} <= set(steps)  # every N steps, each epoch's end, the last step
    evaluator, metric = validation_evaluator([p.text_a for p in val], [p.text_b for p in val],
                                             [float(p.label) for p in val], "max")
    again = 100 * evaluator(outcome.model)[metric.removeprefix("eval_")]
    assert again == pytest.approx(log["best_validation_spearman"], abs=1e-3)
    assert log["best_validation_spearman"] == max(h["spearman"] for h in log["validation_history"])
    assert log["selection_metric"] == "max" and outcome.model.encode(["a dog."]).shape == (1, 32)


def test_regression_trainer_refuses_empty_and_string_labels(tiny_encoder_dir):
    cfg = TrainingConfig(encoder=str(tiny_encoder_dir), device="cpu")
    with pytest.raises(DsgenError, match="no training pair"):
        RegressionTrainer(cfg).train([Pair("a", "b", 1.0, weight=0.0)], [], seed=1, progress=False)
    with pytest.raises(DsgenError, match="numeric labels"):
        RegressionTrainer(cfg).train([Pair("a", "b", "entailment")], [], seed=1, progress=False)


def test_contrastive_trainer_runs_on_triplets_with_an_nli_second_stage(tiny_encoder_dir, tmp_path, sts_data_dir):
    rng = random.Random(1)
    pairs = []
    for _ in range(20):
        x = sentence(rng)
        pairs += [Pair(x, sentence(rng), "entailment"), Pair(x, sentence(rng), "contradiction")]
    nli = tmp_path / "nli.csv"
    nli.write_text("sent0,sent1,hard_neg\n" + "".join(f"{sentence(rng)},{sentence(rng)},{sentence(rng)}\n"
                                                      for _ in range(12)))
    assert len(read_nli_triplets(str(nli))) == 12
    cfg = ContrastiveConfig(encoder=str(tiny_encoder_dir), batch_size=8, mini_batch_size=4, device="cpu",
                            nli_file=str(nli), nli_batch_size=6, nli_epochs=1.0)
    trainer = ContrastiveTrainer(cfg)
    from dsgen.identity import file_key

    assert trainer.get_config_dict()["nli_file_fingerprint"] == file_key(nli)  # the file's bytes, not its size and mtime
    from dsgen.data.sts import using_data_dir

    with using_data_dir(str(sts_data_dir)):
        outcome = trainer.train(pairs, [], seed=1, progress=False)
    assert outcome.log["triplets"] == 20 and outcome.log["steps"] == 3
    # GenSE keeps the best checkpoint by STS benchmark dev Spearman (every 250 steps, each epoch's end, the last)
    assert [h["step"] for h in outcome.log["validation_history"]] == [3] and outcome.log["best_validation_spearman"]
    unselected = ContrastiveTrainer(cfg.replace(selection_data=None, nli_file=None)).train(pairs, [], seed=1, progress=False)
    assert unselected.log["validation_history"] == [] and unselected.log["best_validation_spearman"] is None
    assert outcome.log["nli_stage"]["triplets"] == 12 and outcome.log["nli_stage"]["steps"] == 2
    for log in (outcome.log, outcome.log["nli_stage"]):  # each stage records what its optimizer did
        assert log["train_unit"] == "triplets" and log["optimizer_steps"] == log["steps"]
        assert log["nonzero_lr_steps"] == log["steps"] - 1 and log["weight_update"] > 0  # the first step is warm-up
    assert "{}" in outcome.log["text_template"]
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(DsgenError, match="expected columns"):
        read_nli_triplets(str(bad))


def test_model_selection_returns_an_earlier_best_not_the_last_model(tiny_encoder_dir):
    """Training labels that contradict the validation labels (a pair with k of 6 words replaced is
    labelled k/6 in training, 1 - k/6 in validation) make the validation score fall as training goes
    on: the best evaluation is an early one, and the returned model must be that one, not the last."""
    rng = random.Random(5)
    fillers = ["zebra", "violin", "ocean", "candle", "rocket", "pillow"]

    def pairs(n, flip):
        out = []
        for _ in range(n):
            s = sentence(rng).split()
            k = rng.randint(1, 5)
            t = list(s)
            for i in rng.sample(range(6), k):
                t[i] = rng.choice(fillers)
            out.append(Pair(" ".join(s), " ".join(t), round(k / 6 if flip else 1 - k / 6, 3)))
        return out

    train, val = pairs(120, True), pairs(24, False)
    cfg = TrainingConfig(encoder=str(tiny_encoder_dir), batch_size=16, learning_rate=5e-3, device="cpu",
                         evaluation_steps=2, epochs=2.0, warmup_ratio=0.0)
    outcome = RegressionTrainer(cfg).train(train, val, seed=1, progress=False)
    log = outcome.log
    history = log["validation_history"]
    assert log["best_step"] < log["steps"] and history[-1]["spearman"] < log["best_validation_spearman"] - 1
    # the weight update is that of the weights returned (the early best), not of the last step's
    assert log["weight_update"] == pytest.approx(relative_change(tiny_encoder_dir, outcome.model), rel=1e-3)
    assert log["optimizer_steps"] == log["nonzero_lr_steps"] == log["steps"]  # no warm-up: every step at lr > 0
    evaluator, metric = validation_evaluator([p.text_a for p in val], [p.text_b for p in val],
                                             [float(p.label) for p in val], "max")
    again = 100 * evaluator(outcome.model)[metric.removeprefix("eval_")]
    assert again == pytest.approx(log["best_validation_spearman"], abs=1e-3)


def test_the_papers_adamw_takes_uncorrected_steps_as_computed_by_hand():
    """sentence-transformers 0.4's AdamW (correct_bias=False, eps 1e-6, decay after the step): three steps of
    a two-parameter model, against the formulas written out, and unlike torch's bias-corrected AdamW."""
    import torch

    from dsgen.training.optimizers import AdamWUncorrected

    grads = [torch.tensor([0.5, -2.0]), torch.tensor([0.1, 1.0]), torch.tensor([-0.3, 0.2])]
    lr, wd, eps, b1, b2 = 0.01, 0.01, 1e-6, 0.9, 0.999
    p = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    opt = AdamWUncorrected([p], lr=lr, eps=eps, weight_decay=wd)
    ours = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    torch_opt = torch.optim.AdamW([ours], lr=lr, eps=1e-8, weight_decay=wd)
    expected, m, v = torch.tensor([1.0, -1.0], dtype=torch.float64), 0, 0
    for g in grads:
        p.grad, ours.grad = g.clone(), g.clone()
        opt.step()
        torch_opt.step()
        g64 = g.double()
        m = b1 * m + (1 - b1) * g64
        v = b2 * v + (1 - b2) * g64 ** 2
        expected = expected - lr * m / (v.sqrt() + eps)
        expected = expected - lr * wd * expected
        assert torch.allclose(p.detach().double(), expected, atol=1e-6)
    first_step = 0.01 * (0.1 * 0.5) / ((0.001 * 0.25) ** 0.5 + 1e-6)  # m1 / sqrt(v1): 3.16x a corrected step
    assert first_step == pytest.approx(0.0316, abs=1e-3)
    assert not torch.allclose(p.detach(), ours.detach(), atol=1e-4)  # torch's corrected AdamW is another optimizer


def test_the_regression_trainer_defaults_to_the_papers_optimizer_and_length(tiny_encoder_dir, monkeypatch):
    from dsgen.training import optimizers
    from dsgen.training.contrastive import ContrastiveConfig

    calls = []
    real = optimizers.AdamWUncorrected.step
    monkeypatch.setattr(optimizers.AdamWUncorrected, "step", lambda self, *a: calls.append(1) or real(self, *a))
    cfg = TrainingConfig()
    assert cfg.optimizer == "adamw-uncorrected" and cfg.max_seq_length == 128
    assert ContrastiveConfig().max_seq_length == 64 and ContrastiveConfig().optimizer == "adamw-torch"
    with pytest.raises(DsgenError, match="optimizer must be one of"):
        TrainingConfig(optimizer="sgd")
    rng = random.Random(0)
    train = [Pair(sentence(rng), sentence(rng), rng.choice([0.1, 0.9])) for _ in range(40)]
    for name in ("adamw-uncorrected", "adamw-torch"):
        out = RegressionTrainer(TrainingConfig(encoder=str(tiny_encoder_dir), batch_size=16, device="cpu",
                                               optimizer=name, learning_rate=1e-3)).train(train, [], seed=1,
                                                                                          progress=False)
        assert out.model.max_seq_length == 128 and out.log["steps"] == 3
    assert len(calls) == 3  # the three steps of the first run; torch's AdamW took the second's


@pytest.mark.parametrize("name,factor", [("adamw-uncorrected", 10 ** 0.5), ("adamw-torch", 1.0)])
def test_one_step_moves_the_weights_by_the_configured_learning_rate(tiny_encoder_dir, name, factor):
    """One full-batch step at lr 2e-5 (not either optimizer's class default): Adam moves a weight by about
    lr times m / sqrt(v), sqrt(1000) / 10 = 3.16 times lr without bias correction and 1 times lr with it."""
    from dsgen.encoders import load_encoder

    rng = random.Random(3)
    train = [Pair(sentence(rng), sentence(rng), rng.choice([0.1, 0.9])) for _ in range(16)]
    before = {k: v.clone() for k, v in load_encoder(str(tiny_encoder_dir), "cpu", seed=1).state_dict().items()}
    cfg = TrainingConfig(encoder=str(tiny_encoder_dir), batch_size=16, device="cpu", optimizer=name, learning_rate=2e-5,
                         warmup_ratio=0.0, weight_decay=0.0)
    out = RegressionTrainer(cfg).train(train, [], seed=1, progress=False)
    assert out.log["steps"] == 1
    moved = max(float((v - before[k]).abs().max()) for k, v in out.model.state_dict().items() if k in before)
    assert moved == pytest.approx(2e-5 * factor, rel=0.05)
    assert out.log["optimizer_steps"] == out.log["nonzero_lr_steps"] == 1 and out.log["train_unit"] == "pairs"
    assert out.log["weight_update"] == pytest.approx(relative_change(tiny_encoder_dir, out.model), rel=1e-3)
    # it moved, but one step is below the floor a run must reach to count as trained
    assert training_failure(out.log) == ("trained too little: 16 pairs make one optimizer step, 1 with a non-zero "
                                         "learning rate, fewer than the 10 a run needs (trainer setting "
                                         "min_trained_steps); use more inputs")
    assert training_failure({**out.log, "min_trained_steps": 1}) is None


def test_a_one_step_run_with_the_default_warm_up_trains_nothing_and_says_so(tiny_encoder_dir):
    """The issue's e5-sts run: with the default 10% warm-up, one optimizer step is all warm-up, taken at learning
    rate 0: no weight changes, and the log shows it (the rule reads the record, not the config)."""
    import torch

    from dsgen.encoders import load_encoder

    rng = random.Random(4)
    train = [Pair(sentence(rng), sentence(rng), rng.choice([0.1, 0.9])) for _ in range(22)]
    cfg = TrainingConfig(encoder=str(tiny_encoder_dir), device="cpu", learning_rate=1e-3)
    assert cfg.warmup_ratio == TrainingConfig().warmup_ratio == 0.1 and cfg.batch_size == 32  # the defaults
    before = [p.detach().clone() for p in load_encoder(str(tiny_encoder_dir), "cpu", seed=1).parameters()]
    out = RegressionTrainer(cfg).train(train, [], seed=1, progress=False)
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, out.model.parameters()))  # nothing moved
    log = out.log
    assert (log["steps"], log["optimizer_steps"], log["nonzero_lr_steps"], log["weight_update"]) == (1, 1, 0, 0.0)
    assert training_failure(log) == ("trained nothing: 22 pairs make one optimizer step, all of it warm-up "
                                     "(learning rate 0); use more inputs")
    assert "made before dsgen recorded them" in training_failure({"steps": 1})  # a log without the record fails


def test_the_steps_at_a_non_zero_rate_are_read_from_the_optimizer(tiny_encoder_dir):
    """A 3-step warm-up over 4 steps runs at 0, 1/3, 2/3 and 1 of the rate: 3 steps at a non-zero rate, not the
    4 - 3 = 1 a count from the config would say; a zero learning rate trains nothing in any number of steps."""
    rng = random.Random(6)
    train = [Pair(sentence(rng), sentence(rng), rng.choice([0.1, 0.9])) for _ in range(64)]
    common = dict(encoder=str(tiny_encoder_dir), device="cpu", batch_size=16, model_selection=False)
    warm = RegressionTrainer(TrainingConfig(**common, warmup_steps=3, learning_rate=1e-3)).train(train, [], seed=1,
                                                                                                 progress=False)
    assert (warm.log["optimizer_steps"], warm.log["nonzero_lr_steps"]) == (4, 3) and warm.log["weight_update"] > 0
    assert training_failure({**warm.log, "min_trained_steps": 3}) is None
    assert "4 optimizer steps, 3 with a non-zero" in training_failure(warm.log)
    still = RegressionTrainer(TrainingConfig(**common, learning_rate=0.0)).train(train, [], seed=1, progress=False)
    assert (still.log["optimizer_steps"], still.log["nonzero_lr_steps"], still.log["weight_update"]) == (4, 0, 0.0)
    assert training_failure(still.log) == ("trained nothing: 64 pairs make 4 optimizer steps, every one at learning "
                                           "rate 0; check the learning rate")
    with pytest.raises(DsgenError, match="min_trained_steps"):
        TrainingConfig(min_trained_steps=0)
    # steps at a good rate, but model selection kept the first, warm-up step: the weights returned are the start's
    kept_first = {**warm.log, "min_trained_steps": 1, "weight_update": 0.0, "weights": "best validation step",
                  "best_step": 1}
    assert training_failure(kept_first) == ("trained nothing: the weights returned are the starting ones (model "
                                            "selection kept step 1 of 4, relative update 0.0e+00); use more inputs")


def test_weight_averaging_is_polyak_averaging_over_the_steps():
    import torch

    from dsgen.training.fit import WeightAverage

    w = torch.nn.Parameter(torch.tensor([0.0, 4.0]))
    avg = WeightAverage([w], decay=0.5)
    trajectory = [torch.tensor([2.0, 2.0]), torch.tensor([4.0, 0.0])]
    for point in trajectory:
        with torch.no_grad():
            w.copy_(point)
        avg.update()
    avg.apply()
    # a0 = w0; a1 = 0.5 a0 + 0.5 w1; a2 = 0.5 a1 + 0.5 w2
    assert torch.allclose(w.detach(), torch.tensor([0.25 * 0 + 0.25 * 2 + 0.5 * 4, 0.25 * 4 + 0.25 * 2 + 0.5 * 0]))


def test_a_trainer_with_weight_averaging_keeps_the_average_not_the_last_step(tiny_encoder_dir):
    import torch

    rng = random.Random(3)
    train = [Pair(sentence(rng), sentence(rng), rng.random()) for _ in range(64)]
    common = dict(encoder=str(tiny_encoder_dir), batch_size=16, learning_rate=5e-3, device="cpu", model_selection=False,
                  warmup_steps=1)
    last = RegressionTrainer(TrainingConfig(**common)).train(train, [], seed=1, progress=False)
    averaged = RegressionTrainer(TrainingConfig(**common, ema_decay=0.8)).train(train, [], seed=1, progress=False)
    almost = RegressionTrainer(TrainingConfig(**common, ema_decay=1e-12)).train(train, [], seed=1, progress=False)
    assert averaged.log["weights"] == "exponential moving average, decay 0.8" and last.log["weights"] == "last step"
    a, b, c = (next(p for p in o.model.parameters() if p.requires_grad).detach() for o in (last, averaged, almost))
    assert not torch.allclose(a, b) and torch.allclose(a, c, atol=1e-6)  # decay -> 0 is the last step
    with pytest.raises(DsgenError, match="replaces model selection"):
        TrainingConfig(encoder="x", ema_decay=0.9)


def test_the_gist_loss_trains_with_a_guide_and_refuses_graded_weights(tiny_encoder_dir):
    """MultiCSR's guided masking through sentence-transformers' GISTEmbedLoss: the guide is a second model
    of the run (its fingerprint enters the key), and the loss takes 0/1 weights only."""
    rng = random.Random(2)
    pairs = []
    for _ in range(16):
        x = sentence(rng)
        pairs += [Pair(x, sentence(rng), "entailment"), Pair(x, sentence(rng), "contradiction")]
    cfg = ContrastiveConfig(encoder=str(tiny_encoder_dir), guide=str(tiny_encoder_dir), loss="gist", batch_size=8,
                            mini_batch_size=4, device="cpu", selection_data=None, prompt=False)
    trainer = ContrastiveTrainer(cfg)
    outcome = trainer.train(pairs, [], seed=1, progress=False)
    assert outcome.log["triplets"] == 16 and outcome.log["steps"] == 2
    # the weights moved: measured here against a fresh encoder, and as the trainer recorded it
    moved = relative_change(tiny_encoder_dir, outcome.model)
    assert moved > 1e-4 and outcome.log["weight_update"] == pytest.approx(moved, rel=1e-3)
    assert outcome.log["optimizer_steps"] == 2 and outcome.log["nonzero_lr_steps"] == 1  # step 1 is warm-up
    assert trainer.models(None) == [str(tiny_encoder_dir)] and ContrastiveTrainer(ContrastiveConfig()).models(None) == []
    graded = [Pair(p.text_a, p.text_b, p.label, weight=0.5) for p in pairs]
    with pytest.raises(DsgenError, match="unweighted"):
        trainer.train(graded, [], seed=1, progress=False)


def test_a_trainers_run_freezes_the_heap_only_while_it_runs():
    """accelerate's full garbage collection at the start of every Trainer run skips what was alive before it
    (dsgen.heap.heap_frozen); the heap is unfrozen after, and an inner block leaves it to the outer."""
    import gc

    from dsgen.heap import heap_frozen

    # Frozen objects that die leave the frozen set (another thread of the worker may free some at any time), so
    # counts are compared with a margin far below the objects an inner freeze would add. CPython 3.12 starts with
    # 375 of its static tuples frozen: unfrozen here, so that the block starts from nothing frozen.
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    with heap_frozen():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        born_after = [[i] for i in range(20_000)]  # tracked objects an inner freeze would add to the frozen set
        with heap_frozen():
            assert 0 < gc.get_freeze_count() < frozen + 10_000
        assert 0 < gc.get_freeze_count() < frozen + 10_000  # still frozen after the inner block
        del born_after
    assert gc.get_freeze_count() == 0
    # a freeze made before, by the interpreter or the program, is left as it is: unfreezing is all or nothing
    gc.freeze()
    theirs = gc.get_freeze_count()
    with heap_frozen():
        assert theirs - 10_000 < gc.get_freeze_count() <= theirs
    assert theirs - 10_000 < gc.get_freeze_count() <= theirs
    gc.unfreeze()
