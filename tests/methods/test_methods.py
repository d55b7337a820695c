"""The method registry, the built-in recipes and how presets and the command line resolve them."""

import pytest

from dsgen.errors import DsgenError
from dsgen.method import METHODS, Method, get_method
from dsgen.presets import builtin_presets, load_preset, parse_seeds
from dsgen.registry import Registry
from dsgen.runner import plan_run

BUILTIN = {"base", "dino", "dino-x1x2", "dino-decay0", "dino-decay200", "dino-no-smoothing", "dino-no-augmentation",
           "rise", "rise-filter", "rise-random", "gense", "gense-no-filter", "dino-gense-filter"}


def test_every_builtin_method_is_registered_and_composes_only_known_stages():
    from dsgen.generation import GENERATORS
    from dsgen.reweighting.base import REWEIGHTERS
    from dsgen.training.base import TRAINERS

    assert BUILTIN <= set(METHODS.names())
    for name in BUILTIN:
        m = get_method(name)
        assert m.name == name and m.description and m.paper
        assert m.generator is None or m.generator in GENERATORS
        assert m.reweighter is None or m.reweighter in REWEIGHTERS
        assert m.trainer is None or m.trainer in TRAINERS


def test_registry_rejects_duplicates_and_suggests_close_names():
    reg = Registry("method")
    reg.add("dino", 1)
    with pytest.raises(DsgenError, match="registered twice"):
        reg.add("dino", 2)
    with pytest.raises(DsgenError, match="did you mean 'dino'"):
        get_method("dnio")


def test_quick_preset_resolves_paper_defaults_and_method_changes():
    quick = load_preset("quick")
    dino = plan_run("dino", quick, seed=2)
    g = dino.generation
    assert (g.task, g.generator, g.per_label, g.max_attempts, g.seed) == ("sts-x2", "smollm2-135m", 2, 5, 42)
    assert (g.sampling.decay_constant, g.sampling.top_k, g.sampling.top_p, g.sampling.max_new_tokens) == (100, 5, 0.9, 40)
    t = dino.trainer.config
    assert (t.batch_size, t.epochs, t.learning_rate, t.warmup_ratio, t.encoder) == (32, 1, 2e-5, 0.1, "minilm-l6")
    pp = dino.postprocess
    assert (pp.label_smoothing, pp.random_pairs_per_x1, pp.validation_fraction, pp.seed) == (0.2, 2, 0.1, 2)
    assert plan_run("dino-decay0", quick, 1).generation.sampling.decay_constant == 0
    assert plan_run("dino-decay200", quick, 1).generation.sampling.decay_constant == 200
    assert plan_run("dino-no-smoothing", quick, 1).postprocess.label_smoothing == 0
    assert plan_run("dino-no-augmentation", quick, 1).postprocess.random_pairs_per_x1 == 0
    x1x2 = plan_run("dino-x1x2", quick, 1)
    assert x1x2.x1_generation.task == "sts-x1" and x1x2.x1_generation.entries_per_label == quick.x1_entries_per_label
    rise = plan_run("rise", quick, 1)
    assert rise.reweighter.config.temperature == 0.5 and rise.reweighter.config.input == "single"
    assert plan_run("rise-filter", quick, 1).reweighter.config.filter_fraction == 0.1
    gense = plan_run("gense", quick, 1)
    assert gense.generation.task == "gense" and gense.reweighter.config.alpha == 0.9
    assert gense.trainer.config.temperature == 0.05
    # methods that share DINO's data generate it once: same dataset config
    for name in ("rise", "rise-filter", "rise-random", "dino-no-smoothing", "dino-gense-filter"):
        assert plan_run(name, quick, 3).generation == dino.generation


def test_command_line_overrides_win_and_seed_independent_methods_share_a_key():
    quick = load_preset("quick")
    plan = plan_run("dino", quick, 1, generator="gemma3-270m", encoder="some/encoder")
    assert plan.generation.generator == "gemma3-270m" and plan.trainer.config.encoder == "some/encoder"
    assert plan_run("base", quick, 1).key == plan_run("base", quick, 2).key
    assert plan_run("dino", quick, 1).key != plan_run("dino", quick, 2).key


def test_paper_preset_is_the_papers_setting():
    paper = load_preset("paper")
    plan = plan_run("dino", paper, 1)
    assert plan.generation.generator == "openai-community/gpt2-xl" and paper.max_inputs is None
    assert plan.trainer.config.encoder == "FacebookAI/roberta-base"
    assert paper.x1_entries_per_label * 3 == 15000
    assert {"smoke", "quick", "paper"} <= set(builtin_presets())


@pytest.mark.parametrize("text", ["1,x", "", "1,1", "-1"])
def test_bad_seed_lists_are_rejected(text):
    if text == "":
        assert parse_seeds(text, [7]) == [7]
        return
    with pytest.raises(DsgenError, match="--seeds"):
        parse_seeds(text, [1])


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


def test_method_is_only_a_recipe():
    m = Method(name="x", generator=None, trainer=None, postprocess=None)
    assert not m.uses_seed and m.stages() == "no training"
