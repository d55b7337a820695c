"""The method registry, the built-in recipes and how presets and the command line resolve them."""

import pytest

from dsgen.errors import DsgenError
from dsgen.method import METHODS, Method, get_method
from dsgen.planning import Overrides, plan_run
from dsgen.presets import builtin_presets, load_preset, parse_seeds
from dsgen.registry import Registry

BUILTIN = {"base", "dino", "dino-x1x2", "dino-decay0", "dino-decay200", "dino-no-smoothing", "dino-no-augmentation",
           "rise", "rise-filter", "rise-random", "rise-dino", "gense", "gense-no-filter", "gense-paper-sampling",
           "dino-gense-filter", "human"}


def test_the_founding_papers_methods_are_registered():
    """(Every registered method is tested in tests/test_components.py; this checks none went missing.)"""
    assert BUILTIN <= set(METHODS.names())


def test_registry_rejects_duplicates_and_suggests_close_names():
    reg = Registry("method")
    reg.add("dino", 1)
    with pytest.raises(DsgenError, match="registered twice"):
        reg.add("dino", 2)
    with pytest.raises(DsgenError, match="unknown method 'dnio' \\(did you mean 'dino'"):
        get_method("dnio")


def test_paper_defaults_of_each_method():
    quick = load_preset("quick")
    dino = plan_run("dino", quick, seed=2)
    g = dino.generation
    # DINO: 5 samples per (x1, label) in one draw, no retry; postprocessing keeps at most 2
    assert (g.task, g.generator, g.per_label, g.max_attempts, g.seed, g.dtype) == ("sts-x2", "smollm2-135m", 5, 1, 42, "float32")
    assert (g.sampling.decay_constant, g.sampling.top_k, g.sampling.top_p, g.sampling.max_new_tokens) == (100, 5, 0.9, 40)
    t = dino.trainer.config
    assert (t.batch_size, t.epochs, t.learning_rate, t.warmup_ratio, t.encoder) == (32, 1, 2e-5, 0.1, "minilm-l6")
    assert (t.evaluation_steps, t.selection_metric) == (100, "max")  # DINO's code: every 100 steps, best of 4 Spearmans
    pp = dino.postprocess
    assert (pp.max_per_x1_label, pp.label_smoothing, pp.random_pairs_per_x1, pp.validation_fraction, pp.seed) == (2, 0.2, 2, 0.1, 2)
    assert plan_run("dino-decay0", quick, 1).generation.sampling.decay_constant == 0
    assert plan_run("dino-decay200", quick, 1).generation.sampling.decay_constant == 200
    assert plan_run("dino-no-smoothing", quick, 1).postprocess.label_smoothing == 0
    assert plan_run("dino-no-augmentation", quick, 1).postprocess.random_pairs_per_x1 == 0
    x1x2 = plan_run("dino-x1x2", quick, 1)
    assert x1x2.x1_generation.task == "sts-x1" and x1x2.x1_generation.entries_per_label == quick.x1_entries_per_label
    rise = plan_run("rise", quick, 1)
    r = rise.reweighter.config
    assert (r.temperature, r.input, r.human, r.learning_rate, r.epochs, r.warmup_ratio, r.weight_decay) == \
        (0.5, "single", "source", 1e-5, 5, 0.1, 0.0)
    assert (rise.trainer.config.epochs, rise.trainer.config.evaluations_per_epoch) == (3, 3)  # RISE's schedule
    assert plan_run("rise-filter", quick, 1).reweighter.config.filter_fraction == 0.1
    assert plan_run("rise-dino", quick, 1).reweighter is None and plan_run("rise-dino", quick, 1).trainer.config.epochs == 3
    gense = plan_run("gense", quick, 1)
    d = gense.reweighter.config
    assert gense.generation.task == "gense" and (d.alpha, d.min_x1_words, d.min_x2_words, d.drop_containment) == (0.9, 8, 5, True)
    c = gense.trainer.config
    assert (c.temperature, c.prompt, c.learning_rate) == (0.05, True, 5e-5)
    paper_sampling = plan_run("gense-paper-sampling", quick, 1).generation
    assert (paper_sampling.sampling.top_k, paper_sampling.sampling.top_p, paper_sampling.per_label,
            paper_sampling.counter_labels) == (50, 0.9, 1, False)
    human = plan_run("human", quick, 1)
    assert human.generation.source == "stsb-train" and human.size_of.method.name == "dino"
    # methods that share DINO's data generate it once: same dataset config
    for name in ("rise", "rise-filter", "rise-random", "rise-dino", "dino-no-smoothing", "dino-gense-filter"):
        assert plan_run(name, quick, 3).generation == dino.generation


def test_one_precedence_rule_defaults_preset_method_command_line():
    preset = load_preset("quick")
    preset.training = {"encoder": "from-preset", "learning_rate": 1e-3, "contrastive": {"batch_size": 64}}
    preset.generation = {"generator": "from-preset", "batch_size": 64}
    method = Method(name="m", description="d", paper="p", generation={"task": "sts-x2", "generator": "from-method"},
                    trainer_config={"encoder": "from-method"})
    plan = plan_run(method, preset, 1)
    assert plan.generation.generator == "from-method" and plan.trainer.config.encoder == "from-method"
    assert plan.origins["generation"]["generator"] == "method" and plan.origins["trainer"]["encoder"] == "method"
    assert plan.origins["trainer"]["learning_rate"] == "preset" and plan.origins["trainer"]["batch_size"] == "default"
    cli = plan_run(method, preset, 1, Overrides(generator="from-cli", encoder="from-cli"))
    assert cli.generation.generator == "from-cli" and cli.trainer.config.encoder == "from-cli"
    assert cli.origins["generation"]["generator"] == "command line" and cli.origins["trainer"]["encoder"] == "command line"
    gense = plan_run("gense", preset, 1)
    assert gense.trainer.config.batch_size == 64 and gense.origins["trainer"]["batch_size"] == "preset"
    rows = {(s, k): o for s, k, _, o in plan.rows()}
    assert rows[("generation", "sampling.top_k")] == "default" and rows[("generation", "seed")] == "data seed"


def test_paper_preset_is_the_papers_setting():
    paper = load_preset("paper")
    plan = plan_run("dino", paper, 1)
    assert plan.generation.generator == "openai-community/gpt2-xl" and paper.max_inputs is None
    assert plan.generation.dtype == "float32"  # DINO ran GPT2-XL in float32
    assert plan.trainer.config.encoder == "FacebookAI/roberta-base"
    assert plan_run("rise", paper, 1).reweighter.config.encoder == "google-bert/bert-base-uncased"
    assert plan_run("gense", paper, 1).trainer.config.batch_size == 1024
    assert paper.x1_entries_per_label * 3 == 15000
    assert {"smoke", "quick", "cpu", "paper"} <= set(builtin_presets())


@pytest.mark.parametrize("text", ["1,x", "", "1,1", "-1", " "])
def test_bad_seed_lists_are_rejected(text):
    with pytest.raises(DsgenError, match="--seeds"):
        parse_seeds(text, [1])
    assert parse_seeds(None, [7]) == [7]


def test_unknown_preset_and_bad_preset_file(tmp_path):
    with pytest.raises(DsgenError, match="did you mean 'quick'"):
        load_preset("quik")
    bad = tmp_path / "p.toml"
    bad.write_text('seeds = [1]\nmax_input = 3\n')
    with pytest.raises(DsgenError, match="did you mean 'max_inputs'"):
        load_preset(str(bad))


def test_preset_section_typos_are_reported():
    preset = load_preset("smoke")
    preset.training = {"encodr": "x"}
    with pytest.raises(DsgenError, match="unknown \\[training\\] setting 'encodr' \\(did you mean 'encoder'"):
        plan_run("dino", preset, 1)
    preset.training = {"contrastive": {"batchsize": 3}}
    with pytest.raises(DsgenError, match="unknown \\[training.contrastive\\] setting 'batchsize'"):
        plan_run("dino", preset, 1)


def test_config_values_are_coerced_to_their_types():
    from dsgen.generation.debiased import GenerationConfig

    a = GenerationConfig.from_dict({"sampling": {"decay_constant": 100, "top_p": 1}, "per_label": 5.0})
    b = GenerationConfig.from_dict({"sampling": {"decay_constant": 100.0, "top_p": 1.0}, "per_label": 5})
    assert a.to_dict() == b.to_dict() and isinstance(a.to_dict()["sampling"]["decay_constant"], float)
    with pytest.raises(DsgenError, match="must be an integer"):
        GenerationConfig.from_dict({"per_label": 2.5})
    with pytest.raises(DsgenError, match="must be true or false"):
        GenerationConfig.from_dict({"counter_labels": "yes"})


def test_method_is_only_a_recipe():
    m = Method(name="x", generator=None, trainer=None, postprocess=None)
    assert not m.uses_seed and m.stages() == "no training"


def test_one_rule_for_command_line_settings_across_stages():
    """--device reaches every stage whose config has a device (a reweighter without one is not an
    error: `dsgen run rise-random --device cpu` exited 2), --generator only generation, --encoder only
    the trained sentence encoder (not the SDI classifier's backbone, which its config also calls encoder)."""
    from dsgen.planning import Overrides, plan_run

    preset = load_preset("cpu")
    ov = Overrides(generator="gemma3-270m", encoder="minilm-l6", device="cpu")
    for method in ("rise-random", "rise", "gense", "dino", "human", "base"):
        plan = plan_run(method, preset, 1, ov, data_seed=1)
        for section in ("generation", "reweighter", "trainer"):
            values = plan.sections()[section]
            if values and "device" in values:
                assert values["device"] == "cpu" and plan.origins[section]["device"] == "command line", (method, section)
    rise = plan_run("rise", preset, 1, ov, data_seed=1)
    assert rise.generation.generator == "gemma3-270m" and rise.trainer.config.encoder == "minilm-l6"
    assert rise.reweighter.config.encoder == plan_run("rise", preset, 1, data_seed=1).reweighter.config.encoder  # untouched
    assert "device" not in plan_run("rise-random", preset, 1, ov, data_seed=1).sections()["reweighter"]
