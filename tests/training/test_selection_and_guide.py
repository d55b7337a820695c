"""One selection rule for every trainer (issue 32), MultiCSR's guided loss checked against MultiCSR's own code, and
the unsupervised SimCSE guide it masks with."""

import math
import random

import pytest

from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.training.contrastive import ContrastiveConfig, ContrastiveTrainer
from dsgen.training.fit import SELECTION_RULES, TrainingConfig, selection_data_of, selection_summary, selection_text
from dsgen.training.regression import RegressionTrainer

WORDS = "a man woman dog cat plays runs guitar piano eats food street car red blue".split()


def sentence(rng):
    return " ".join(rng.choice(WORDS) for _ in range(6)) + "."


# -- the selection rule ---------------------------------------------------------------------------------------------
def test_a_selection_rule_replaces_every_methods_own_selection_settings():
    """The rule is one named setting: ``stsb-dev`` puts any recipe (DINO's generated validation split every 100 steps,
    SimCSE's STSb dev every 25 steps only, E5's last step) on STSb dev at every epoch's end and every
    ceil(steps / 10) steps; ``last`` and ``ema`` turn selection off; ``paper`` keeps the recipe's."""
    dino = TrainingConfig(evaluation_steps=100)
    simcse = TrainingConfig(selection_data="stsb-dev", evaluation_steps=25, evaluate_at_epoch_end=False,
                            selection_metric="cosine")
    e5 = TrainingConfig(model_selection=False)
    for recipe in (dino, simcse, e5):
        ruled = recipe.replace(selection_rule="stsb-dev").selection(steps=57)
        assert (ruled.model_selection, ruled.selection_data, ruled.selection_metric) == (True, "stsb-dev", "cosine")
        assert ruled.evaluate_at_epoch_end and ruled.evaluation_steps == math.ceil(57 / 10)
        assert ruled.evaluations_per_epoch == 0
        assert selection_data_of(recipe.replace(selection_rule="stsb-dev")) == "stsb-dev"  # the run key holds it
        assert not recipe.replace(selection_rule="last").selection(57).model_selection
        assert selection_data_of(recipe.replace(selection_rule="last")) is None
    assert dino.selection(57) is dino and selection_data_of(dino) is None and selection_data_of(simcse) == "stsb-dev"
    assert TrainingConfig(selection_rule="stsb-dev", selection_evaluations=4).selection(steps=400).evaluation_steps == 100
    assert set(SELECTION_RULES) == {"paper", "stsb-dev", "last", "ema"}
    with pytest.raises(DsgenError, match="selection_rule must be one of"):
        TrainingConfig(selection_rule="best")
    with pytest.raises(DsgenError, match="ema_decay"):
        TrainingConfig(selection_rule="ema")
    with pytest.raises(DsgenError, match="not an average"):
        TrainingConfig(selection_rule="last", ema_decay=0.9, model_selection=False)
    # ema under the rule: the recipe's model_selection = true does not conflict (the rule replaces it)
    assert not TrainingConfig(selection_rule="ema", ema_decay=0.9).selection(10).model_selection


def test_the_rule_runs_as_named_and_the_training_log_says_so(tiny_encoder_dir, sts_data_dir, monkeypatch):
    """A regression run (DINO's recipe: its own validation split every 100 steps) under ``stsb-dev`` is evaluated on
    STSb dev every ceil(steps / 10) steps and at the end, and records the rule; under ``last`` nothing is evaluated."""
    monkeypatch.setenv("DSGEN_DATA_DIR", str(sts_data_dir))
    rng = random.Random(4)
    train = [Pair(sentence(rng), sentence(rng), rng.random()) for _ in range(80)]
    validation = [Pair(sentence(rng), sentence(rng), rng.random()) for _ in range(8)]
    common = dict(encoder=str(tiny_encoder_dir), batch_size=8, learning_rate=5e-3, device="cpu", warmup_ratio=0.0,
                  min_trained_steps=1)
    ruled = RegressionTrainer(TrainingConfig(**common, selection_rule="stsb-dev", selection_evaluations=3)).train(
        train, validation, 1, False)
    log = ruled.log
    assert log["steps"] == 10 and log["evaluation_interval"] == 4 and log["selection_rule"] == "stsb-dev"
    assert log["selection_data"] == "stsb-dev" and log["selection_metric"] == "cosine"
    assert [h["step"] for h in log["validation_history"]] == [4, 8, 10]  # every ceil(10 / 3) and the end
    own = RegressionTrainer(TrainingConfig(**common)).train(train, validation, 1, False).log
    assert own["selection_data"] == "validation" and own["evaluation_interval"] == 100
    assert [h["step"] for h in own["validation_history"]] == [10]  # DINO's: the epoch's end only at this length
    last = RegressionTrainer(TrainingConfig(**common, selection_rule="last")).train(train, validation, 1, False).log
    assert last["weights"] == "last step" and last["validation_history"] == [] and last["selection_rule"] == "last"
    assert selection_text(log) == ("the best checkpoint by cosine Spearman on STSb dev, evaluated every 4 steps, each "
                                   "epoch's end and the last step")
    assert selection_text(own).startswith("the best checkpoint by the best of four Spearmans on its own validation")
    assert selection_text(last) == "last step" and selection_text({}).startswith("not recorded")


def test_the_table_names_the_rule_that_ran():
    """One rule for every method is named once; each method's own rule is spelled out, method by method."""
    same = {"dino": [{"selection_rule": "stsb-dev", "weights": "best validation step", "evaluation_interval": 2}],
            "syncse-partial": [{"selection_rule": "stsb-dev", "weights": "best validation step", "evaluation_interval": 1}]}
    text = selection_summary(same)
    assert text.startswith('one rule for every trained method, `selection_rule = "stsb-dev"`')
    assert "`dino` 2" in text and "`syncse-partial` 1" in text
    apart = {"dino": [{"selection_rule": "paper", "weights": "best validation step", "evaluation_interval": 100,
                       "selection_metric": "max", "selection_at_epoch_end": True}],
             "e5-sts": [{"selection_rule": "paper", "weights": "last step"}]}
    text = selection_summary(apart)
    assert text.startswith("each method's own") and "`e5-sts`: last step" in text
    assert "`dino`: the best checkpoint by the best of four Spearmans on its own validation pairs, evaluated every 100" \
        in text


# -- MultiCSR's loss ------------------------------------------------------------------------------------------------
def multicsr_reference(z1, z2, zn, g1, g2, gn, phi=0.95, temp=0.05):
    """Circle-Ming/MultiCSR@596898f:simcse/models.py#L243-L270, line for line (single device, no MLM)."""
    import torch
    import torch.nn as nn

    cos = nn.CosineSimilarity(dim=-1)

    def sim(x, y):
        return cos(x, y) / temp

    cos_sim = sim(z1.unsqueeze(1), z2.unsqueeze(0))
    cos_sim_mask = sim(g1.unsqueeze(1), g2.unsqueeze(0))
    labels = torch.arange(cos_sim.size(0)).long()
    cos_sim_negative = sim(z1.unsqueeze(1), zn.unsqueeze(0))
    cos_sim = torch.cat([cos_sim, cos_sim_negative], 1)
    cos_sim_negative_mask = sim(g1.unsqueeze(1), gn.unsqueeze(0))
    cos_sim_mask = torch.cat([cos_sim_mask, cos_sim_negative_mask], 1)
    labels_mask = torch.cat([torch.eye(cos_sim.size(0))[labels], torch.zeros_like(cos_sim_negative)], -1)
    weights = torch.where(cos_sim_mask > phi * 20, 0, 1)
    mask_weights = torch.eye(cos_sim.size(0)) - torch.diag_embed(torch.diag(weights))
    weights = weights + torch.cat([mask_weights, torch.zeros_like(cos_sim_negative)], -1)
    soft_cos_sim = torch.softmax(cos_sim * weights, -1)
    loss = - (labels_mask * torch.log(soft_cos_sim) + (1 - labels_mask) * torch.log(1 - soft_cos_sim))
    return torch.mean(loss)


def test_multicsrs_loss_is_multicsrs_code_and_masks_only_what_its_guide_finds_above_095(tiny_encoder_dir):
    import torch

    from dsgen.encoders import load_encoder
    from dsgen.training.losses import MultiCSRGuidedLoss

    model = load_encoder(str(tiny_encoder_dir), "cpu", seed=1)
    loss = MultiCSRGuidedLoss(model, load_encoder(str(tiny_encoder_dir), "cpu", seed=1), temperature=0.05,
                              threshold=0.95)
    torch.manual_seed(0)
    b, d = 6, 8
    z = [torch.randn(b, d) for _ in range(3)]
    g = [torch.randn(b, d) for _ in range(3)]  # the guide's anchors, positives, hard negatives

    def at_cosine(v, c):  # a vector at cosine c with v
        u = torch.randn(d)
        u = u - (u @ v) / (v @ v) * v
        return c * v / v.norm() + (1 - c * c) ** 0.5 * u / u.norm()

    g[1][0] = g[0][0]                      # anchor 0's own positive at cosine 1: never masked
    g[1][1] = at_cosine(g[0][0], 0.96)     # anchor 0 vs the in-batch positive 1: masked
    g[2][3] = at_cosine(g[0][2], 0.999)    # anchor 2 vs the hard negative 3: masked
    g[1][5] = at_cosine(g[0][4], 0.94)     # anchor 4 vs positive 5, below 0.95: kept
    ours = loss.compute_loss(z, g, None)
    assert float(ours) == pytest.approx(float(multicsr_reference(*z, *g)), rel=1e-5)
    assert loss.masked_fraction[-1] == pytest.approx(2 / (b * 2 * b - b))  # 2 of the 66 off-target entries
    # per-anchor weights: the loss is linear in them (weight 0 takes an anchor out; MultiCSR's are all 1)
    keep, only_last = torch.tensor([1.0, 1, 1, 1, 1, 0]), torch.tensor([0.0, 0, 0, 0, 0, 1])
    assert float(loss.compute_loss(z, g, keep) + loss.compute_loss(z, g, only_last)) == pytest.approx(float(ours))
    assert float(loss.compute_loss(z, g, torch.ones(b))) == pytest.approx(float(ours))


# -- the unsupervised SimCSE guide ----------------------------------------------------------------------------------
def test_the_guide_is_unsupervised_simcse_on_the_methods_inputs(tiny_lm_dir, sts_data_dir, monkeypatch, tmp_path):
    """Trained from the run's encoder on the method's input sentences, (x, x) with dropout as the only noise (a Llama
    encoder has none: SimCSE's 0.1 is set on its attention), at SimCSE's unsupervised recipe; stored and loaded back
    as the same encoder, dsgen's own modules with it (``standardize=1``, as `cpu`'s encoder: recent sentence-transformers
    refused the stored folder's ``dsgen.encoders.Standardize`` without ``trust_remote_code``, and MultiCSR crashed)."""
    import torch

    monkeypatch.setenv("DSGEN_DATA_DIR", str(sts_data_dir))
    from dsgen.training.guide import load_guide, save_guide, train_simcse_guide

    encoder = f"lm:{tiny_lm_dir}?layers=2&pooling=mean&standardize=1"
    rng = random.Random(5)
    texts = [sentence(rng) for _ in range(70)]
    guide, log = train_simcse_guide(encoder, texts + texts[:3], "cpu", progress=False, seed=7)
    assert log["sentences"] == len(set(texts)) and log["optimizer_steps"] == 2 and log["seed"] == 7  # batch 64
    assert log["noise"] == "dropout 0.1 set (the encoder has none)" and log["weight_update"] > 0
    assert not guide.training and not any(p.requires_grad for p in guide.parameters())
    save_guide(guide, tmp_path / "guide")
    back = load_guide(tmp_path / "guide", "cpu")
    assert [type(m).__name__ for m in back] == ["Transformer", "Pooling", "Standardize"]
    a, b = guide.encode(texts[:4], convert_to_tensor=True), back.encode(texts[:4], convert_to_tensor=True)
    assert torch.allclose(a, b, atol=1e-5)


def test_multicsr_trains_with_its_guide_on_its_own_inputs(tiny_encoder_dir, sts_data_dir, monkeypatch):
    monkeypatch.setenv("DSGEN_DATA_DIR", str(sts_data_dir))
    rng = random.Random(6)
    pairs = []
    for _ in range(24):
        x = sentence(rng)
        pairs += [Pair(x, sentence(rng), "entailment"), Pair(x, sentence(rng), "contradiction", weight=0.0)]
    pairs[1] = Pair(pairs[1].text_a, pairs[1].text_b, "contradiction")  # one triplet kept by the curation
    pairs += [Pair(p.text_a + " ok", p.text_b, p.label) for p in pairs[:16]]  # 8 more complete triplets
    cfg = ContrastiveConfig(encoder=str(tiny_encoder_dir), loss="multicsr", batch_size=3, mini_batch_size=3,
                            device="cpu", prompt=False, warmup_ratio=0.0, weight_decay=0.0, min_trained_steps=1,
                            selection_data=None)
    trainer = ContrastiveTrainer(cfg)
    assert trainer.models(None) == [] and trainer.get_config_dict()["guide_recipe"]["batch_size"] == 64
    outcome = trainer.train(pairs, [], seed=1, progress=False)
    assert outcome.log["triplets"] == 9 and outcome.log["optimizer_steps"] == 3 and outcome.log["weight_update"] > 0
    guide = outcome.log["guide"]
    assert guide["guide"] == "unsup-simcse" and guide["sentences"] == 24 + 8  # every input, curated out or kept
    assert 0.0 <= guide["masked_share"] <= 1.0
    named = ContrastiveTrainer(cfg.replace(guide=str(tiny_encoder_dir)))
    assert named.models(None) == [str(tiny_encoder_dir)] and "guide_recipe" not in named.get_config_dict()


def test_the_comparison_table_says_which_selection_rule_ran():
    from dsgen.reports.comparison import Comparison
    from dsgen.evaluation.results import Result, TaskScore
    from dsgen.reports.tables import comparison_markdown

    trained = {"optimizer_steps": 20, "nonzero_lr_steps": 19, "weight_update": 0.01, "min_trained_steps": 10,
               "weights": "best validation step", "selection_data": "stsb-dev", "selection_metric": "cosine",
               "selection_at_epoch_end": True}

    def runs(method, rule, interval):
        return [Result(model="m", tasks={"sts16": TaskScore(s, s, 100)}, method=method, seed=t, data_seed=1,
                       extra={"plan": {"trainer": {"trainer": "regression"}},
                              "training": {**trained, "selection_rule": rule, "evaluation_interval": interval}})
                for t, s in zip((1, 2, 3), (55.0, 56.0, 57.0))]

    shared = Comparison(["dino", "syncse-partial"], ["sts16"], {"dino": runs("dino", "stsb-dev", 2),
                        "syncse-partial": runs("syncse-partial", "stsb-dev", 1)}, preset="unit", n_boot=10)
    assert 'Model selection: one rule for every trained method, `selection_rule = "stsb-dev"`' in comparison_markdown(shared)
    apart = Comparison(["dino", "syncse-partial"], ["sts16"], {"dino": runs("dino", "paper", 100),
                       "syncse-partial": runs("syncse-partial", "paper", 25)}, preset="unit", n_boot=10)
    md = comparison_markdown(apart)
    assert "Model selection: each method's own" in md and "evaluated every 100 steps" in md and "every 25 steps" in md


def test_a_comparison_of_every_registered_method_writes_its_tables(tmp_path):
    """`dsgen compare <every method>` named its files compare-<23 names>: 300 characters, beyond a file name's 255
    (the paper path's run of every method crashed writing its table)."""
    from dsgen.reports.tables import MAX_STEM, file_stem
    from dsgen.method import METHODS

    stem = "compare-" + "-".join(METHODS.names())
    assert len(stem) > 255 and len(file_stem(stem).encode()) <= MAX_STEM and file_stem("compare-dino") == "compare-dino"
    assert file_stem(stem) != file_stem(stem + "-x") and file_stem(stem).startswith("compare-base-claif")
    (tmp_path / f".{file_stem(stem)}.long.csv.abcdefgh.tmp").write_text("fits")  # with a temporary file's suffixes


def test_the_guide_is_a_data_level_fit_made_once_per_dataset(tiny_encoder_dir, sts_data_dir, tmp_path, monkeypatch):
    """The engine makes the trained guide once per (encoder, inputs, data seed) and every run that reads that data
    (both training seeds here) uses it; a new data seed makes another (dsgen.data.fits)."""
    from dataclasses import replace

    from dsgen.method import METHODS, get_method
    from dsgen.presets import Preset
    from dsgen.orchestration import run_many
    from dsgen.runs.pipeline import Runner
    from dsgen.training import guide as guide_module
    from tests.mock_components import register_mock_components

    register_mock_components()
    if "mock-multicsr" not in METHODS:
        METHODS.add("mock-multicsr", replace(get_method("multicsr"), name="", generator="mock-test", labeller=None,
                                             reweighter=None, generation={"task": "gense", "per_label": 1}))
    rng = random.Random(0)
    inputs = tmp_path / "x1.txt"
    inputs.write_text("\n".join(sentence(rng) for _ in range(16)))
    preset = Preset(name="unit", seeds=[1, 2], inputs=str(inputs), tasks=["sts16"], max_inputs=16,
                    generation={"device": "cpu"},
                    training={"encoder": str(tiny_encoder_dir), "device": "cpu", "min_trained_steps": 1,
                              "contrastive": {"batch_size": 8, "mini_batch_size": 8}})
    made = []
    real = guide_module.train_simcse_guide
    monkeypatch.setattr(guide_module, "train_simcse_guide", lambda *a, **k: made.append(k["seed"]) or real(*a, **k))
    runner = Runner(tmp_path / "runs", str(sts_data_dir), progress=False)
    runs = run_many(["mock-multicsr"], preset, [(42, 1), (42, 2)], runner)["mock-multicsr"]
    assert made == [42]  # one guide, seeded with the data seed, for both training seeds
    used = [r.extra["training"]["guide"] for r in runs]
    assert used[0]["key"] == used[1]["key"] and used[0]["sentences"] == 16 and used[0]["seed"] == 42
    assert (runner.out / "cache" / "fits" / f"simcse-guide-{used[0]['key']}" / "fit.json").exists()
    assert runs[0].extra["data_fits"]["trainer"]["key"] == used[0]["key"]
    other = run_many(["mock-multicsr"], preset, [(7, 1)], runner)["mock-multicsr"][0]
    assert made == [42, 7] and other.extra["training"]["guide"]["key"] != used[0]["key"]


def test_a_shared_rule_trains_on_the_generated_validation_split_that_only_the_papers_rule_reads():
    """Under a shared rule (stsb-dev, last, ema) DINO's 10% generated validation split is read by nothing, so every
    pair is trained on (origin named); under "paper" DINO holds it out to select on it, as its repository does."""
    from dsgen.planning import plan_run
    from dsgen.presets import load_preset

    cpu = load_preset("cpu")
    assert cpu.training["selection_rule"] == "last"
    for rule, fraction in (("paper", 0.1), ("last", 0.0), ("stsb-dev", 0.0)):
        preset = cpu.replace(training={**cpu.training, "selection_rule": rule})
        plan = plan_run("dino", preset, 1, None, 1)
        assert plan.postprocess.validation_fraction == fraction, rule
        assert plan.trainer.config.selection_rule == rule
        if fraction == 0.0:
            assert plan.origins["postprocess"]["validation_fraction"] == f"selection_rule {rule}"
    assert plan_run("rise", cpu, 1, None, 1).postprocess.validation_fraction == 0.0  # RISE holds out none under any rule
