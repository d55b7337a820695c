"""The later methods as their repositories have them (issue 32): trainer settings, output caps, CLAIF's data and
judge, MultiCSR's curation and guide, E5's amount of data following the preset, and a preset's per-method settings
(the paper path's encoder, batch and generator)."""

import pytest

from dsgen.errors import DsgenError
from dsgen.planning import Overrides, plan_run
from dsgen.presets import load_preset

SIMCSE_FAMILY = ("syncse-partial", "syncse-scratch", "sim-gpt", "multicsr")


def plan(method, preset="quick", **kw):
    return plan_run(method, load_preset(preset), 1, **kw)


def test_the_simcse_family_trains_with_simcses_optimiser_settings():
    """SimCSE's code has no warm-up and no weight decay (transformers 4.2.1's TrainingArguments defaults,
    princeton-nlp/SimCSE train.py#L188), bias-corrected AdamW; the contrastive trainer's own defaults are 10% and
    0.01 (GenSE's row keeps them)."""
    for name in SIMCSE_FAMILY:
        t = plan(name).trainer.config
        assert (t.warmup_ratio, t.weight_decay, t.optimizer, t.max_seq_length, t.temperature) == \
            (0.0, 0.0, "adamw-torch", 32, 0.05), name
        assert (t.selection_data, t.selection_metric, t.evaluate_at_epoch_end, t.prompt) == \
            ("stsb-dev", "cosine", False, False), name
    steps = {name: (plan(name).trainer.config.epochs, plan(name).trainer.config.evaluation_steps) for name in SIMCSE_FAMILY}
    assert steps == {"syncse-partial": (3, 25), "syncse-scratch": (3, 25), "sim-gpt": (5, 125), "multicsr": (3, 25)}
    gense = plan("gense").trainer.config
    assert (gense.warmup_ratio, gense.weight_decay) == (0.1, 0.01)
    e5 = plan("e5-sts").trainer.config
    assert (e5.temperature, e5.epochs, e5.model_selection) == (0.02, 1, False)  # E5: one epoch, its last step


def test_each_methods_output_cap_comes_from_its_repository_or_a_measurement_and_plan_shows_it():
    caps = {name: plan(name).generation.sampling.max_new_tokens
            for name in ("syncse-partial", "sim-gpt", "e5-sts", "claif", "multicsr", "dino")}
    # measured (STSb train sentences: at most 72 SmolLM2 tokens) x sentences per output; CLAIF's and MultiCSR's
    # repositories: 256 (data_generation.py#L19, flan_generate_scoring.py#L119); DINO's 40
    assert caps == {"syncse-partial": 80, "sim-gpt": 160, "e5-sts": 256, "claif": 256, "multicsr": 256, "dino": 40}
    assert plan("syncse-scratch").x1_generation.sampling.max_new_tokens == 80
    rows = {(s, k): (v, o) for s, k, v, o in plan("sim-gpt").rows()}
    assert rows[("generation", "sampling.max_new_tokens")] == (160, "method")


def test_claif_trains_on_all_its_pairs_with_its_judges_written_0_to_1_score():
    claif = plan("claif")
    assert claif.postprocess.validation_fraction == 0.0  # --using_stsb_dev: no 10% hold-out (run_training.py#L182-L188)
    j = claif.labeller.config
    assert (j.read, j.parse, j.max_score, j.label_smoothing, j.max_per_x1_score) == ("written", "first", 1, 0.2, 2)
    assert "from 0.0 to 1.0" in j.prompt and not j.judge_random_pairs
    t = claif.trainer.config
    assert (t.optimizer, t.adam_epsilon, t.selection_data, t.evaluation_steps, t.epochs) == \
        ("adamw-torch", 1e-6, "stsb-dev", 125, 3)
    assert (t.warmup_ratio, t.weight_decay, t.batch_size, t.learning_rate) == (0.1, 0.01, 32, 2e-5)


def test_multicsr_curates_its_written_scores_and_masks_with_an_unsupervised_simcse_guide():
    m = plan("multicsr")
    assert (m.labeller.config.read, m.labeller.config.parse) == ("written", "exact")
    c = m.reweighter.config
    assert (c.min_positive, c.max_negative, c.min_gap) == (0.6, 0.6, 0.0)  # 3 / 3 of 5, positive above negative
    t = m.trainer.config
    assert (t.loss, t.guide, t.guide_threshold) == ("multicsr", "unsup-simcse", 0.95)
    assert m.models() == ["smollm2-135m", "minilm-l6"]  # the trained guide is no separate model


def test_e5s_amount_of_data_follows_the_preset():
    """E5 writes its anchors itself: as many calls per label as every method that writes x1 gets
    (x1_entries_per_label), a fixed 300 calls before on every preset."""
    for preset in ("quick", "smoke", "paper"):
        p = load_preset(preset)
        e5 = plan_run("e5-sts", p, 1)
        assert e5.generation.entries_per_label == p.x1_entries_per_label
        assert e5.origins["generation"]["entries_per_label"] == "preset"
        assert plan_run("dino-x1x2", p, 1).x1_generation.entries_per_label == p.x1_entries_per_label
    assert plan("e5-sts").generation.max_attempts == 10
    # a method with inputs is untouched (its dataset key does not change)
    assert plan("dino").generation.entries_per_label == 100


def test_a_preset_gives_one_method_its_own_settings_under_the_methods_own():
    from tests.test_paper_preset import LATER as expected

    paper = load_preset("paper")
    for name, (encoder, batch, generator, model) in expected.items():
        p = plan_run(name, paper, 1)
        g = p.generation
        assert (p.trainer.config.encoder, p.trainer.config.batch_size, p.generator,
                getattr(g, "model", None) or getattr(g, "generator", None)) == (encoder, batch, generator, model), name
        assert p.origins["trainer"]["encoder"] == "preset"
    # the founding methods keep the paper preset's general sections
    assert plan_run("gense", paper, 1).trainer.config.batch_size == 1024
    assert plan_run("dino", paper, 1).generation.generator == "openai-community/gpt2-xl"
    # the command line's generator wins over the preset's per-method one
    local = plan_run("syncse-partial", paper, 1, Overrides(generator="smollm2-135m"))
    assert local.generator == "debiased" and local.generation.generator == "smollm2-135m"
    served = plan_run("syncse-partial", paper, 1, Overrides(generator="openai:other", base_url="http://127.0.0.1:1/v1"))
    assert served.generation.model == "other" and served.generation.base_url == "http://127.0.0.1:1/v1"
    assert plan_run("syncse-partial", paper, 1, Overrides(base_url="http://127.0.0.1:1/v1")).generation.model == \
        "gpt-3.5-turbo"


def test_a_preset_s_per_method_settings_are_checked():
    preset = load_preset("quick")
    preset.methods = {"syncse-partial": {"training": {"batchsize": 3}}}
    with pytest.raises(DsgenError, match=r"unknown \[methods.syncse-partial.training\] setting 'batchsize'"):
        plan_run("syncse-partial", preset, 1)
    preset.methods = {"sycnse-partial": {"training": {"batch_size": 3}}}
    with pytest.raises(DsgenError, match="names no method.*syncse-partial"):
        plan_run("dino", preset, 1)
    preset.methods = {"base": {"training": {"batch_size": 3}}}
    with pytest.raises(DsgenError, match="has no training stage"):
        plan_run("base", preset, 1)
    preset.methods = {"dino": {"evaluation": {}}}
    with pytest.raises(DsgenError, match="no section 'evaluation'"):
        plan_run("dino", preset, 1)


def test_every_preset_names_its_selection_rule():
    from dsgen.presets import builtin_presets

    for name in builtin_presets():
        assert load_preset(name).training.get("selection_rule") in ("paper", "stsb-dev", "last", "ema"), name
