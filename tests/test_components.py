"""Every registered component keeps the contract, as MTEB tests every task: one parametrised test per
registry, over whatever is registered (a new method, stage, task spec or preset is tested the moment it
exists), and every claim of the papers' files refers to registered methods and parses."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dsgen.cli import app
from dsgen.component import Component
from dsgen.config import Config
from dsgen.generation import GENERATORS
from dsgen.labelling import LABELLERS
from dsgen.method import METHODS, get_method
from dsgen.planning import plan_run
from dsgen.presets import builtin_presets, load_preset
from dsgen.registry import Registry
from dsgen.reweighting.base import REWEIGHTERS
from dsgen.taskspec import BUILTIN_SPECS, FORMATS, load_task_spec
from dsgen.training.base import TRAINERS

STAGES = {"generator": GENERATORS, "labeller": LABELLERS, "reweighter": REWEIGHTERS, "trainer": TRAINERS}


def _components():
    return [(kind, name) for kind, registry in STAGES.items() for name in registry.names()]


@pytest.mark.parametrize("kind,name", _components(), ids=[f"{k}-{n}" for k, n in _components()])
def test_every_registered_stage_keeps_the_component_contract(kind, name):
    cls = STAGES[kind].get(name)
    assert issubclass(cls, Component) and cls.kind == kind
    assert cls.name == name, "the registry names the class"
    assert isinstance(cls.version, int) and cls.version >= 1
    assert "@" in cls.citation and "title" in cls.citation, "a BibTeX citation"
    assert issubclass(cls.config_class, Config)
    config = cls.config_class()
    assert cls.config_class.from_dict(config.to_dict()) == config  # survives from_dict(to_dict())
    settings = cls(config).get_config_dict()
    assert json.loads(json.dumps(settings)) == settings  # plain JSON values
    assert kind == "generator" or settings[kind] == name  # (a generator's config names its LM under "generator")


@pytest.mark.parametrize("name", METHODS.names())
def test_every_method_composes_registered_stages_and_plans_under_every_preset(name):
    method = get_method(name)
    assert method.name == name and method.description and method.paper
    for kind, stage in (("generator", method.generator), ("labeller", method.labeller),
                        ("reweighter", method.reweighter), ("trainer", method.trainer)):
        assert stage is None or stage in STAGES[kind]
    for preset in map(load_preset, builtin_presets()):
        for data_seed, seed in preset.runs():  # resolves under every preset, for each of its runs
            plan_run(method, preset, seed, data_seed=data_seed)
    shown = CliRunner().invoke(app, ["plan", name, "--preset", "quick", "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output)["plan"]["method"]["name"] == name


@pytest.mark.parametrize("name", BUILTIN_SPECS)
def test_every_builtin_task_spec_loads_and_ends_its_instructions_with_its_opening(name):
    from tests.test_taskspec import chat_tokenizer

    spec = load_task_spec(name)
    tokenizer = chat_tokenizer() if spec.chat else None  # a chat spec renders through a chat template
    prompts = [spec.prompt(label, "A sentence.", tokenizer) for label in spec.labels]
    if spec.output.structured:  # a structured answer opens with its format's opening ("{", "1. ")
        assert spec.labels and all(p.endswith(FORMATS[spec.output.kind][0]) for p in prompts)
    else:
        assert spec.labels and all(p.endswith(spec.close_quote.replace("”", "“")) or p.endswith('"') for p in prompts)
    assert all(set(spec.counter_labels[label]) <= set(spec.labels) for label in spec.labels)


@pytest.mark.parametrize("name", builtin_presets())
def test_every_preset_loads_and_plans_dino(name):
    from dsgen.claims import paper_files

    preset = load_preset(name)
    assert preset.description and preset.tasks
    assert set(preset.claims_papers or []) <= set(paper_files())  # what `dsgen claims` tests under it by default
    plans = [plan_run("dino", preset, seed, data_seed=data_seed) for data_seed, seed in preset.runs()]
    assert all(plan.generation is not None for plan in plans)
    assert len({plan.run for plan in plans}) == len(plans)  # each run named by its own (data seed, training seed)


def test_a_preset_that_extends_another_states_only_what_it_changes(tmp_path):
    """``extends``: the parent's settings, this file's over them table by table (the experiments and the larger
    claims design of ``cpu`` are written so); a loop of presets is one line, not a recursion error."""
    from dsgen.errors import DsgenError

    child = tmp_path / "cpu-ema-test.toml"
    child.write_text('extends = "cpu"\ndescription = "d"\ntrain_seeds = [4]\n[training]\nselection_rule = "ema"\n'
                     'ema_decay = 0.9\n', encoding="utf-8")
    cpu, ext = load_preset("cpu"), load_preset(str(child))
    assert ext.name == "cpu-ema-test" and ext.description == "d" and ext.seeds == [4]
    assert ext.data_seeds == cpu.data_seeds and ext.tasks == cpu.tasks and ext.methods == cpu.methods
    assert ext.training == {**cpu.training, "selection_rule": "ema", "ema_decay": 0.9}
    assert ext.training["contrastive"] == cpu.training["contrastive"]  # a table merged, not replaced
    loop = tmp_path / "loop.toml"
    loop.write_text('extends = "loop.toml"\n', encoding="utf-8")  # relative: to the file's own folder
    with pytest.raises(DsgenError, match="'extends' makes a loop"):
        load_preset(str(loop))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cpu.toml").write_text('extends = "cpu"\ndata_seeds = [1, 2]\nseeds = [5]\n', encoding="utf-8")
    own = load_preset(str(tmp_path / "sub" / "cpu.toml"))  # a file named like the built-in it extends
    assert own.data_seeds == [1, 2] and own.seeds == [5] and own.training == cpu.training
    (tmp_path / "both.toml").write_text('extends = "cpu"\nseeds = [1]\ntrain_seeds = [2]\n', encoding="utf-8")
    with pytest.raises(DsgenError, match="not both"):
        load_preset(str(tmp_path / "both.toml"))


def test_a_presets_section_for_one_method_wins_over_the_methods_own_settings():
    """``[methods.<name>.<section>]`` is the preset's choice for that method alone (cpu: the SimCSE family at the rate
    every other method trains the raw encoder at, not their papers' 5e-5), so it is over the method's recipe; the
    preset's sections for every method stay under it (SynCSE's 3 epochs are its own)."""
    cpu = load_preset("cpu")
    plan = plan_run("syncse-partial", cpu, 1, data_seed=1)
    assert plan.trainer.config.learning_rate == 1e-3 and plan.origins["trainer"]["learning_rate"] == "preset"
    assert plan.trainer.config.batch_size == 16 and plan.trainer.config.epochs == 3.0
    assert plan.origins["trainer"]["epochs"] == "method"
    e5 = plan_run("e5-sts", cpu, 1, data_seed=1)
    assert e5.generation.entries_per_label == 120 and e5.trainer.config.batch_size == 8
    dino = plan_run("dino", cpu, 1, data_seed=1)
    assert dino.trainer.config.learning_rate == 1e-3 and dino.trainer.config.batch_size == 32


def test_a_registry_checks_the_kind_and_names_the_class():
    from dsgen.errors import DsgenError
    from dsgen.reweighting.base import Reweighter, ReweightReport

    reg = Registry("reweighter", base_cls=Reweighter)

    class Half(Reweighter):
        def score(self, pairs, context):
            return ReweightReport([0.5] * len(pairs))

    reg.add("half", Half)
    assert Half.name == "half" and reg.get("half") is Half
    with pytest.raises(DsgenError, match="must be a subclass of"):
        reg.add("not-one", dict)
    with pytest.raises(DsgenError, match="already registered as 'half'"):
        reg.add("other-name", Half)
    reg.add("lazy", "collections:OrderedDict")  # a lazy entry is checked on first use
    with pytest.raises(DsgenError, match="must be a subclass of"):
        reg.get("lazy")


def test_every_stage_kind_has_its_own_entry_point_group():
    groups = {kind: registry.entry_point_group for kind, registry in STAGES.items()}
    assert groups == {kind: f"dsgen.{kind}s" for kind in STAGES}
    assert METHODS.entry_point_group == "dsgen.methods"


# -- the claims of the papers' files ------------------------------------------------------------------------

def _claims():
    from dsgen.claims import load_claims

    return load_claims()


@pytest.mark.parametrize("claim", _claims(), ids=lambda c: c.id)
def test_every_claim_names_registered_methods_and_parses(claim):
    from dsgen.claims import KINDS

    assert claim.kind in KINDS and claim.statement and claim.table
    for name in claim.methods:
        assert name in METHODS, f"{claim.id}: method '{name}' is not registered"
    if claim.paper_method is not None:
        assert claim.paper_text() != "no figure"
        if claim.kind != "between":
            assert claim.paper_reference is not None and isinstance(claim.paper_difference, float)


def test_an_interval_that_touches_zero_does_not_reproduce_a_claim():
    """The verdict is a one-sided test at 2.5%: an interval whose lower end is exactly 0 does not exclude
    0 (p = 0.025 is not below 0.025); a hair above it does."""
    import numpy as np

    from dsgen.claims import Claim, judge
    from dsgen.evaluation.statistics import nested_interval

    ref = {(d, t): 50.0 + d for d in (1, 2, 3) for t in (1, 2)}
    diff = {1: 1.0, 2: 2.0, 3: 3.5}
    method = {(d, t): ref[(d, t)] + diff[d] for d, t in ref}
    low = nested_interval(ref, method).low
    claim = Claim("P", "c", "T", 1, "a beats b", "greater", "a", reference=("b",), margin=0.1,
                  paper_method=76.0, paper_reference=74.0)
    touching = {k: v - low for k, v in method.items()}
    assert nested_interval(ref, touching).low == pytest.approx(0.0, abs=1e-9)
    assert judge(claim, {"a": touching, "b": ref}).verdict == "inconclusive"
    above = {k: v + 1e-6 for k, v in touching.items()}
    assert judge(claim, {"a": above, "b": ref}).verdict == "reproduced"
    assert np.isfinite(judge(claim, {"a": above, "b": ref}).half_width)
