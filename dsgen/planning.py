"""Planning: resolve a method under a preset, a seed and the command line into a :class:`RunPlan`.

One rule everywhere, lowest first::

    defaults (the paper's settings)  <  preset  <  method  <  command line

A preset sets scale (models, number of inputs, batch sizes); a method fixes what its paper
does; the command line wins over both. Every resolved value remembers where it came from
(``default``, ``preset``, ``method``, ``command line`` or ``seed``), so ``dsgen plan`` can show
it and a result file can embed it. The runner executes plans; this module runs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dsgen.errors import DsgenError
from dsgen.method import Method, get_method
from dsgen.presets import Preset
from dsgen.suggest import did_you_mean

ORIGINS = ("default", "preset", "method", "command line", "seed", "data seed")


@dataclass(frozen=True)
class Overrides:
    """What the command line sets for a run (None: not given)."""

    generator: str | None = None
    encoder: str | None = None
    device: str | None = None
    preprocess: str | None = None
    base_url: str | None = None

    API_PREFIX = "openai:"  # --generator openai:<model>: the debiased core's place taken by the openai generator

    def to_dict(self) -> dict[str, Any]:
        from dsgen.endpoints import redact_url  # a credential in --base-url is never stored

        return {k: redact_url(v) if k == "base_url" else v for k, v in vars(self).items() if v is not None}

    @property
    def api_model(self) -> str | None:
        """The model of ``--generator openai:<model>`` (None: a local generator)."""
        g = self.generator
        return g[len(self.API_PREFIX):] if g and g.startswith(self.API_PREFIX) else None

    # which stages each command-line setting is meant for (``encoder`` is the sentence encoder, not,
    # say, the SDI classifier's backbone that a reweighter config also calls ``encoder``)
    STAGES = {"generator": ("generation",), "encoder": ("training",),
              "device": ("generation", "labelling", "reweighting", "training")}

    def layer(self, stage: str, cls: type) -> dict[str, Any]:
        """The settings the command line sets for ``stage`` (``generation``, ``labelling``, ``reweighting``
        or ``training``) whose config is ``cls``: the one rule for every stage. A setting applies when it
        is meant for the stage and the stage's config has the field (a reweighter without a device
        simply has none to set)."""
        values = {k: getattr(self, k) for k, stages in self.STAGES.items() if stage in stages}
        if self.api_model is not None:
            values.pop("generator", None)  # the API generator takes it as its model (plan_run)
        return _known(values, cls)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, path + "."))
        else:
            out[path] = v
    return out


def _merge_into(target: dict[str, Any], layer: dict[str, Any]) -> None:
    for k, v in layer.items():
        if isinstance(v, dict) and isinstance(target.get(k), dict):
            _merge_into(target[k], v)
        else:
            target[k] = v


def resolve(cls: type, layers: list[tuple[str, dict[str, Any]]]) -> tuple[Any, dict[str, str]]:
    """Build ``cls`` from ``layers`` (origin, values), later layers winning; return it with the
    origin of every setting (dotted names for nested configs)."""
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for origin, layer in layers:
        layer = {k: v for k, v in (layer or {}).items() if v is not None}
        _merge_into(merged, layer)
        for path in _flatten(layer):
            origins[path] = origin
    cfg = cls.from_dict(merged)
    return cfg, {path: origins.get(path, "default") for path in _flatten(cfg.to_dict())}


def _known(layer: dict[str, Any], cls: type, name: str | None = None) -> dict[str, Any]:
    """The keys of a preset section that ``cls`` knows (a preset sets scale for every trainer at once),
    then those of the section's sub-table for stage ``name`` (``[training.contrastive]``)."""
    names = set(cls.field_names())
    out = {k: v for k, v in layer.items() if k in names}
    if name and isinstance(layer.get(name), dict):
        out.update(layer[name])
    return out


def check_preset_keys(preset: Preset) -> None:
    """A preset key that no config of its section knows is a typo: say so instead of ignoring it."""
    from dsgen.data.postprocess import PostprocessConfig
    from dsgen.generation import GENERATORS
    from dsgen.labelling import LABELLERS
    from dsgen.reweighting.base import REWEIGHTERS
    from dsgen.training.base import TRAINERS

    sections = {"generation": {n: GENERATORS.get(n).config_class for n in GENERATORS.names()},
                "labelling": {n: LABELLERS.get(n).config_class for n in LABELLERS.names()},
                "postprocess": {"postprocess": PostprocessConfig},
                "training": {n: TRAINERS.get(n).config_class for n in TRAINERS.names()},
                "reweighting": {n: REWEIGHTERS.get(n).config_class for n in REWEIGHTERS.names()}}
    if preset.methods:
        from dsgen.method import METHODS

        for name in preset.methods:
            if name not in METHODS.names():
                raise DsgenError(f"preset {preset.name}: [methods.{name}] names no method{did_you_mean(name, METHODS.names())}")
    for section, classes in sections.items():
        known = set().union(*(c.field_names() for c in classes.values()))
        for key, value in getattr(preset, section).items():
            if isinstance(value, dict) and key in classes:  # a sub-table for one stage: [training.contrastive]
                cls_known = classes[key].field_names()
                for sub in value:
                    if sub not in cls_known:
                        raise DsgenError(f"preset {preset.name}: unknown [{section}.{key}] setting "
                                         f"'{sub}'{did_you_mean(sub, cls_known)}")
            elif key not in known:
                raise DsgenError(f"preset {preset.name}: unknown [{section}] setting '{key}'"
                                 f"{did_you_mean(key, list(known) + list(classes))}")


METHOD_SECTIONS = ("generation", "labelling", "reweighting", "training")


def check_method_keys(preset: Preset, method: Method, own: dict[str, dict[str, Any]]) -> None:
    """The preset's settings for one method (``[methods.<name>.<section>]``) must name settings of that method's
    stages: a typo is said, not ignored."""
    from dsgen.generation import GENERATORS
    from dsgen.labelling import LABELLERS
    from dsgen.reweighting.base import REWEIGHTERS
    from dsgen.training.base import TRAINERS

    stages = {"generation": (GENERATORS, method.generator), "labelling": (LABELLERS, method.labeller),
              "reweighting": (REWEIGHTERS, method.reweighter), "training": (TRAINERS, method.trainer)}
    for section, values in own.items():
        if section not in stages:
            raise DsgenError(f"preset {preset.name}: [methods.{method.name}] has no section '{section}' (sections: "
                             f"{', '.join(METHOD_SECTIONS)})")
        registry, name = stages[section]
        if name is None:
            raise DsgenError(f"preset {preset.name}: [methods.{method.name}.{section}] is set, but method '{method.name}' "
                             f"has no {section} stage")
        known = registry.get(name).config_class.field_names()
        for key in values:
            if key not in known:
                raise DsgenError(f"preset {preset.name}: unknown [methods.{method.name}.{section}] setting '{key}'"
                                 f"{did_you_mean(key, known)}")


@dataclass
class RunPlan:
    """Every resolved setting of one run, with the origin of each."""

    method: Method
    preset: Preset
    seed: int
    overrides: Overrides = field(default_factory=Overrides)
    data_seed: int | None = None  # the generation seed; None: the training seed (each seed its own data)
    generator: str | None = None  # the generator stage's registry name (the method's, or openai for --generator openai:)
    generation: Any = None
    x1_generation: Any = None
    postprocess: Any = None
    labeller: Any = None
    reweighter: Any = None
    trainer: Any = None
    encoder: str = "minilm-l6"
    evaluation: dict[str, Any] = field(default_factory=dict)
    size_of: "RunPlan | None" = None
    origins: dict[str, dict[str, str]] = field(default_factory=dict)
    notes: dict[str, dict[str, str]] = field(default_factory=dict)  # section -> setting -> what a stage cannot do

    @property
    def uses_seed(self) -> bool:
        return self.method.uses_seed

    @property
    def run(self) -> tuple[int, int]:
        """(data seed, training seed): what names and pairs this run among a method's runs."""
        return (self.seed if self.data_seed is None else self.data_seed, self.seed)

    @property
    def variant(self) -> str:
        """Names the result folder: every resolved setting (values coerced, so ``1`` and ``1.0`` of a
        float setting are one folder) except the seeds, and except the evaluation dtype, which the
        machine decides (bfloat16 only where it is native)."""
        from dsgen.identity import variant_key

        def without_seeds(value: Any) -> Any:
            if isinstance(value, dict):
                return {k: without_seeds(v) for k, v in value.items() if k not in ("seed", "data_seed")}
            return value

        plan = without_seeds(self.to_dict())
        plan["evaluation"] = {k: v for k, v in plan["evaluation"].items() if k != "dtype"}
        return variant_key(self.method.to_dict(), plan, self.overrides.to_dict())

    def sections(self) -> dict[str, Any]:
        """Resolved settings by section (plain values)."""
        return {
            "generation": self.generation.to_dict() if self.generation else None,
            "x1_generation": self.x1_generation.to_dict() if self.x1_generation else None,
            "postprocess": self.postprocess.to_dict() if self.postprocess else None,
            "labeller": self.labeller.get_config_dict() if self.labeller else None,
            "reweighter": self.reweighter.get_config_dict() if self.reweighter else None,
            "trainer": self.trainer.get_config_dict() if self.trainer else None,
            "encoder": self.encoder,
            "evaluation": self.evaluation,
        }

    def to_dict(self) -> dict[str, Any]:
        dev = ({"dev_inputs": self.method.dev_inputs, "dev_max_inputs": self.preset.dev_max_inputs}
               if self.method.dev_inputs else {})
        api = {"generator": self.generator, "notes": self.notes} if self.generator != self.method.generator else {}
        return {"method": self.method.to_dict(), "preset": self.preset.name, "inputs": self.preset.inputs,
                "max_inputs": self.preset.max_inputs, **dev, "seed": self.seed if self.uses_seed else None,
                "overrides": self.overrides.to_dict(), **api, **self.sections(),
                "size_of": self.size_of.data_dict() if self.size_of else None}

    def data_dict(self) -> dict[str, Any]:
        """What determines this plan's training data (used by a plan sized like it)."""
        s = self.sections()
        return {"method": self.method.name, "inputs": self.preset.inputs, "max_inputs": self.preset.max_inputs,
                "input_sample": self.method.input_sample, "dev_inputs": self.method.dev_inputs,
                "x1_generation": s["x1_generation"], "generation": s["generation"], "postprocess": s["postprocess"]}

    def inputs_drawn(self) -> str:
        """What the run reads as inputs x1, in words: the one meaning of a data seed (:mod:`dsgen.data.inputs`):
        ``max_inputs`` drawn with the data seed, or every input as the paper reads it."""
        source, n, sample = self.preset.inputs, self.preset.max_inputs, self.method.input_sample
        population = f"a shuffled set of at most {sample:,} of {source} (drawn with the data seed)" if sample else source
        if n is None:
            return f"all of {population}" if sample else f"all of {source}, in file order (the paper's)"
        return f"{n} of {population}" if sample else f"{n} of {source}, drawn with the data seed"

    def models(self) -> list[str]:
        """Every model name the run uses (their fingerprints go into the run key)."""
        names = [g.generator for g in (self.generation, self.x1_generation) if hasattr(g, "generator")]
        for stage in (self.labeller, self.reweighter, self.trainer):
            if stage is not None:
                names += list(stage.models(self))
        names.append(self.encoder)
        return list(dict.fromkeys(names))

    def rows(self) -> list[tuple[str, str, Any, str]]:
        """(section, setting, value, origin) for every resolved setting, for ``dsgen plan``."""
        rows = [("run", "method", self.method.name, "command line"), ("run", "preset", self.preset.name, "command line"),
                ("run", "seed", self.seed if self.uses_seed else "(not used)", "command line"),
                ("run", "data seed", self.run[0] if self.generation is not None else "(not used)", "command line")]
        if self.generation is not None and self.x1_generation is None:
            from dsgen.generation import GENERATORS

            if GENERATORS.get(self.generator)(self.generation).needs_inputs():
                rows.append(("run", "inputs", self.inputs_drawn(), "preset"))
        for section, values in self.sections().items():
            if values is None:
                continue
            flat = _flatten(values) if isinstance(values, dict) else {"name": values}
            for key, value in flat.items():
                rows.append((section, key, value, self.origins.get(section, {}).get(key, "default")))
            for key, note in self.notes.get(section, {}).items():
                rows.append((section, key, note, f"{self.generator} generator"))
        return rows


def plan_run(method: Method | str, preset: Preset, seed: int, overrides: Overrides | None = None,
             data_seed: int | None = None) -> RunPlan:
    """Resolve the configs of one run: defaults < preset < method < command line (postprocessing:
    defaults < method < preset, so that a preset's control such as ``shuffle_labels`` applies to
    every method). ``seed`` is the training seed, ``data_seed`` the generation seed (None: the
    preset's single data seed if it has one, else ``seed``: each seed its own data)."""
    from dsgen.data.postprocess import PostprocessConfig
    from dsgen.reweighting.base import REWEIGHTERS
    from dsgen.training.base import TRAINERS

    method = get_method(method) if isinstance(method, str) else method
    ov = overrides or Overrides()
    check_preset_keys(preset)
    if data_seed is None:
        single = preset.data_seeds if preset.data_seeds is not None else (
            [preset.data_seed] if preset.data_seed is not None else None)
        if single is not None and len(single) > 1:
            raise DsgenError(f"preset {preset.name} has {len(single)} data seeds; plan a run with one of them")
        data_seed = single[0] if single else None
    plan = RunPlan(method, preset, seed, ov, data_seed)
    data_seed_layer = ("data seed", data_seed) if data_seed is not None else ("seed", seed)
    # the preset's settings for this method alone ([methods.<name>.<section>]: a paper's per-method scale, a CPU
    # preset's departures for one method): over the method's own settings, as the more specific choice of the preset
    own = {section: dict(values) for section, values in preset.methods.get(method.name, {}).items()}
    check_method_keys(preset, method, own)
    if method.generator:
        from dsgen.generation import GENERATORS

        cls = GENERATORS.get(method.generator).config_class
        own_generation = own.get("generation", {})
        preset_api = str(own_generation.get("generator", ""))  # [methods.<name>.generation] generator = "openai:<model>"
        preset_api = preset_api[len(Overrides.API_PREFIX):] if preset_api.startswith(Overrides.API_PREFIX) else None
        if preset_api is not None:
            own_generation.pop("generator")
        api_model = ov.api_model if ov.generator else preset_api  # a --generator on the command line wins
        api = api_model is not None and method.generator == "debiased"  # --generator openai:<model>
        plan.generator = "openai" if api else method.generator

        def generation(extra_preset: dict[str, Any], recipe: dict[str, Any],
                       section: str = "generation") -> tuple[Any, dict[str, str]]:
            layer = _known({**preset.generation, **extra_preset}, cls, method.generator)
            cfg, origins = resolve(cls, [("preset", layer), ("method", recipe), ("preset", own_generation),
                                         ("command line", ov.layer("generation", cls)),
                                         (data_seed_layer[0], _known({"seed": data_seed_layer[1]}, cls))])
            if not api:
                return cfg, origins
            # the method's settings for the core, as the API generator's (a method needing self-debiasing is refused)
            api_cls = GENERATORS.get("openai")
            settings, notes = api_cls.adapt(cfg, f"method '{method.name}'")
            plan.notes[section] = notes
            openai = preset.generation.get("openai") if isinstance(preset.generation.get("openai"), dict) else {}
            acfg, aorigins = resolve(api_cls.config_class, [
                ("method", settings), ("preset", {**openai, "model": preset_api}),
                ("command line", {"model": ov.api_model if ov.generator else None, "base_url": ov.base_url})])
            renamed = {ours: f"sampling.{theirs}" for theirs, ours in api_cls.SAMPLING.items()}
            for key in aorigins:
                if aorigins[key] == "method":
                    aorigins[key] = origins.get(renamed.get(key, key), "default")
            return acfg, aorigins

        plan.generation, plan.origins["generation"] = generation({}, method.generation)
        if "entries_per_label" in cls.field_names() and not GENERATORS.get(method.generator)(plan.generation).needs_inputs():
            # a method that writes its x1 in the same call (E5's S1) makes as many as the preset gives every method
            # that writes its x1 (x1_entries_per_label per label, as dino-x1x2 and syncse-scratch)
            plan.generation, plan.origins["generation"] = generation(
                {"entries_per_label": preset.x1_entries_per_label}, method.generation)
        if method.x1_generation is not None:
            plan.x1_generation, plan.origins["x1_generation"] = generation(
                {"entries_per_label": preset.x1_entries_per_label}, method.x1_generation, "x1_generation")
        if method.postprocess is not None:
            plan.postprocess, plan.origins["postprocess"] = resolve(PostprocessConfig, [
                ("method", method.postprocess), ("preset", preset.postprocess), ("seed", {"seed": seed})])

    def configured_stage(registry: Any, name: str, preset_section: dict[str, Any], method_config: dict[str, Any],
                         section: str) -> tuple[Any, dict[str, str]]:
        """A labeller or reweighter from the preset's section, the method's settings and the command line."""
        cls = registry.get(name)
        cfg, origins = resolve(cls.config_class, [
            ("preset", _known(preset_section, cls.config_class, name)), ("method", method_config),
            ("preset", own.get(section, {})),
            ("command line", ov.layer(section, cls.config_class))])
        return cls(cfg), origins

    if method.labeller:
        from dsgen.labelling import LABELLERS

        plan.labeller, plan.origins["labeller"] = configured_stage(
            LABELLERS, method.labeller, preset.labelling, method.labeller_config, "labelling")
    if method.reweighter:
        plan.reweighter, plan.origins["reweighter"] = configured_stage(
            REWEIGHTERS, method.reweighter, preset.reweighting, method.reweighter_config, "reweighting")
    if plan.generator == "openai":
        for stage in (plan.labeller, plan.reweighter):
            if stage is not None and stage.needs_generator_lm():
                raise DsgenError(f"method '{method.name}' has its {stage.kind} {stage.name} judge with the run's generator "
                                 "LM, which is an API here; set its model (scorer) to a local LM, or use a local "
                                 "generator")
    if method.trainer:
        cls = TRAINERS.get(method.trainer)
        cfg, plan.origins["trainer"] = resolve(cls.config_class, [
            ("preset", _known(preset.training, cls.config_class, method.trainer)), ("method", method.trainer_config),
            ("preset", own.get("training", {})),
            ("command line", ov.layer("training", cls.config_class))])
        plan.trainer = cls(cfg)
        plan.encoder = cfg.encoder
        if cfg.selection_rule != "paper" and plan.postprocess is not None and plan.postprocess.validation_fraction:
            # a shared rule never reads the generated validation split (stsb-dev selects on STSb dev, last and ema on
            # nothing): every pair is trained on, as by the methods that hold none out
            plan.postprocess = plan.postprocess.replace(validation_fraction=0.0)
            plan.origins["postprocess"]["validation_fraction"] = f"selection_rule {cfg.selection_rule}"
        plan.origins["encoder"] = {"name": plan.origins["trainer"].get("encoder", "default")}
    else:
        plan.encoder = ov.encoder or preset.training.get("encoder", "minilm-l6")
        plan.origins["encoder"] = {"name": "command line" if ov.encoder else "preset" if "encoder" in preset.training
                                   else "default"}
    eval_dtype, dtype_origin = preset.eval_dtype, "preset" if preset.eval_dtype != "float32" else "default"
    if eval_dtype == "bfloat16":
        from dsgen.models import native_bfloat16

        device = getattr(getattr(plan.trainer, "config", None), "device", None) or ov.device or "auto"
        if not native_bfloat16(device):  # emulated bfloat16 is ~100x slower than the float32 it would save on
            eval_dtype, dtype_origin = "float32", "preset asks bfloat16; float32: no native bfloat16 on this device"
    plan.evaluation = {"tasks": list(preset.tasks), "preprocess": ov.preprocess or preset.preprocess,
                       "dtype": eval_dtype}
    plan.origins["evaluation"] = {"tasks": "preset", "preprocess": "command line" if ov.preprocess else
                                  "preset" if preset.preprocess != "raw" else "default", "dtype": dtype_origin}
    if method.size_of:
        if method.size_of == method.name or plan.generation is None or "n_pairs" not in plan.generation.field_names():
            raise DsgenError(f"method '{method.name}': size_of needs a generator with an n_pairs setting and "
                             "another method to take the size from")
        plan.size_of = plan_run(method.size_of, preset, seed, ov, data_seed)
    return plan
