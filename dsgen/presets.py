"""Presets: small TOML files that set the scale of a run (models, number of inputs, tasks, seeds).

A preset never changes what a method claims (its task spec, sampling, loss): the method's own
settings win over the preset's. Built-in presets live in ``benchmarks/presets/`` (installed
as ``dsgen.benchmarks.presets``); ``--preset`` also takes a path to a TOML file.

Precedence, lowest first: paper defaults of each config < preset < method < command line
(resolved by :mod:`dsgen.planning`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from dsgen.artifacts import tomllib
from dsgen.config import Config
from dsgen.errors import DsgenError


@dataclass
class Preset(Config):
    """One preset.

    A preset file may start from another with ``extends = "<preset>"`` (a built-in name, or a file relative to its own
    folder) and state only what it changes, table by table; the description is not inherited.

    Args:
        name / description: shown in tables and ``dsgen run --help``.
        seeds: training seeds (TOML ``seeds`` or ``train_seeds``): postprocessing, reweighting,
            initialisation and batch order.
        data_seeds: generation seeds; every data seed is run with every training seed, so a run is
            a (data seed, training seed) pair. None: each training seed generates its own data
            (the run (s, s) for every seed s).
        data_seed: one data seed for every training seed (``data_seeds = [n]``; an older spelling).
        inputs / max_inputs: where x1 comes from (``stsb-train`` or a text file) and how many.
        dev_max_inputs: how many inputs a method that generates its validation set separately
            (RISE) generates it from (None: all of them, as the paper).
        x1_entries_per_label: sentences per label when a method generates x1 from scratch.
        tasks: evaluation tasks.
        preprocess: evaluation text convention: ``raw`` (MTEB's, the files as released) or
            ``senteval`` (SentEval's Moses tokenisation and lower-casing, GenSE's convention).
        eval_dtype: weights the evaluation encodes with: ``float32`` (default, the papers') or
            ``bfloat16`` (an opt-in: about 2.4x faster on CPUs with AMX, scores within about 0.05;
            the trained model itself stays float32). Where bfloat16 is emulated (a CPU without
            AVX-512: about 100x slower than float32) the plan evaluates in float32 and says why.
        generation / training / labelling / reweighting: fields of ``GenerationConfig``, of the trainer's,
            the labeller's and the reweighter's configs that set scale (model, batch size, device).
        postprocess: fields of ``PostprocessConfig`` applied to every method that postprocesses,
            over the method's own (for controls such as ``shuffle_labels``).
        methods: settings for one method alone, ``[methods.<name>.<section>]`` with the sections generation,
            labelling, reweighting and training, over the preset's sections and over the method's own settings, under
            the command line: the ``paper`` preset's per-method scale (each later method's encoder, batch and
            generator, where ``generator = "openai:<model>"`` asks an OpenAI-compatible endpoint, as ``--generator``
            does), a CPU preset's departures for one method (``cpu``: the SimCSE family's learning rate and batch).
        claims_papers: the papers ``dsgen claims`` tests under this preset when ``--papers`` is not given (None: the
            founding ones); a design that fits a budget may leave out the claims it cannot decide at that budget
            (``cpu``: results/variance.md, "The design chosen by measurement").
    """

    name: str = ""
    description: str = ""
    seeds: list[int] = field(default_factory=lambda: [1])
    data_seeds: list[int] | None = None
    data_seed: int | None = None
    inputs: str = "stsb-train"
    max_inputs: int | None = None
    dev_max_inputs: int | None = None
    x1_entries_per_label: int = 100
    tasks: list[str] = field(default_factory=list)
    preprocess: str = "raw"
    eval_dtype: str = "float32"
    generation: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    labelling: dict[str, Any] = field(default_factory=dict)
    reweighting: dict[str, Any] = field(default_factory=dict)
    postprocess: dict[str, Any] = field(default_factory=dict)
    methods: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    claims_papers: list[str] | None = None

    def runs(self, seeds: list[int] | None = None, data_seeds: list[int] | None = None) -> list[tuple[int, int]]:
        """The (data seed, training seed) runs: every data seed with every training seed, or (s, s)
        for each training seed when no data seed is set. ``seeds`` / ``data_seeds`` replace the
        preset's (the command line)."""
        train = list(self.seeds if seeds is None else seeds)
        data = data_seeds if data_seeds is not None else self.data_seeds if self.data_seeds is not None else (
            [self.data_seed] if self.data_seed is not None else None)
        if data is None:
            return [(s, s) for s in train]
        return [(d, s) for d in data for s in train]

    def data_seed_for(self, data_seed: int | None = None) -> int | None:
        """The data seed of a single run asked for by training seed (``dsgen plan``, ``analyze``):
        ``data_seed`` if given, else the preset's first, else None (the training seed's own data)."""
        if data_seed is not None:
            return data_seed
        data = self.data_seeds if self.data_seeds is not None else [self.data_seed] if self.data_seed is not None else None
        return data[0] if data else None

    def identity(self) -> dict[str, Any]:
        """What names a preset's result folders: everything but its seeds (runs are named by their seeds)."""
        return {k: v for k, v in self.to_dict().items() if k not in ("seeds", "data_seeds", "data_seed")}


def builtin_presets() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("dsgen.benchmarks.presets").iterdir() if p.name.endswith(".toml"))


def _read(name: str, text: str, label: str, ident: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A preset file's settings, over those of the preset it names in ``extends`` (a built-in preset, or a path, taken
    relative to the file's own folder; its tables merged key by key, so a larger design of ``cpu`` states only what it
    changes; its description not inherited). ``ident`` names the preset for the loop check (a resolved path, or
    ``builtin:<name>``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DsgenError(f"preset {name}: invalid TOML ({exc})") from None
    data.setdefault("name", label)
    _check_spellings(name, data)
    parent = data.pop("extends", None)
    if parent is None:
        return data
    if not isinstance(parent, str) or not parent:
        raise DsgenError(f"preset {name}: 'extends' must name another preset (got {parent!r})")
    if parent.endswith(".toml") and not ident.startswith("builtin:") and not Path(parent).is_absolute():
        parent = str(Path(ident).parent / parent)
    text2, label2, ident2 = _text(parent)
    if ident2 in (*seen, ident):
        raise DsgenError(f"preset {name}: 'extends' makes a loop through {parent}; name another preset")
    base = _read(parent, text2, label2, ident2, (*seen, ident))
    base.pop("description", None)
    merged = _merge(base, data)
    for a, b in (("seeds", "train_seeds"), ("data_seed", "data_seeds")):  # one setting, two spellings: the file's wins
        if a in data:
            merged.pop(b, None)
        elif b in data:
            merged.pop(a, None)
    return merged


def _check_spellings(name: str, data: dict[str, Any]) -> None:
    if "train_seeds" in data and "seeds" in data:
        raise DsgenError(f"preset {name}: give 'train_seeds' or 'seeds' (the same setting), not both")
    if "data_seed" in data and "data_seeds" in data:
        raise DsgenError(f"preset {name}: give 'data_seeds' or 'data_seed', not both")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _text(name: str) -> tuple[str, str, str]:
    """A preset's TOML text, label (its file's stem or its built-in name) and identity (resolved path or built-in)."""
    path = Path(name)
    if name.endswith(".toml") and path.is_file():
        try:
            return path.read_text(encoding="utf-8"), path.stem, str(path.resolve())
        except UnicodeDecodeError as exc:
            raise DsgenError(f"preset {name}: not UTF-8 text (byte {exc.start}); save the file as UTF-8") from None
    known = builtin_presets()
    if name not in known:
        from dsgen.suggest import unknown

        raise DsgenError(unknown("preset", name, known) + ", or a path to a .toml file")
    text = (resources.files("dsgen.benchmarks.presets") / f"{name}.toml").read_text(encoding="utf-8")
    return text, name, f"builtin:{name}"


def load_preset(name: str) -> Preset:
    """A built-in preset by name, or a TOML file by path."""
    data = _read(name, *_text(name))
    if "train_seeds" in data:
        data["seeds"] = data.pop("train_seeds")
    preset = Preset.from_dict(data)
    from dsgen.folders import check_path_name

    check_path_name(f"preset {name}: its name", preset.name, "set name = \"...\" in the preset to a plain name")
    if not preset.seeds or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in preset.seeds):
        raise DsgenError(f"preset {name}: 'seeds' must be a non-empty list of non-negative integers (got {preset.seeds!r})")
    if preset.max_inputs is not None and preset.max_inputs < 1:
        raise DsgenError(f"preset {name}: max_inputs must be at least 1, or left out for every input (got {preset.max_inputs})")
    if preset.data_seed is not None and not (isinstance(preset.data_seed, int) and preset.data_seed >= 0):
        raise DsgenError(f"preset {name}: 'data_seed' must be a non-negative integer (got {preset.data_seed!r})")
    if preset.data_seeds is not None and (not preset.data_seeds or len(set(preset.data_seeds)) != len(preset.data_seeds)
                                          or not all(isinstance(s, int) and s >= 0 for s in preset.data_seeds)):
        raise DsgenError(f"preset {name}: 'data_seeds' must be a non-empty list of distinct non-negative integers")
    from dsgen.evaluation.preprocess import check_preprocess
    from dsgen.evaluation.tasks import DEFAULT_TASKS, TASKS

    preset.tasks = list(preset.tasks or DEFAULT_TASKS)
    for t in preset.tasks:
        TASKS.get(t)
    check_preprocess(preset.preprocess)
    if preset.eval_dtype not in ("float32", "bfloat16"):
        raise DsgenError(f"preset {name}: eval_dtype must be float32 or bfloat16, not '{preset.eval_dtype}'")
    return preset


def parse_seeds(text: str | None, default: list[int] | None, option: str = "--seeds") -> list[int] | None:
    """``"1,2,3"`` -> [1, 2, 3]; None -> ``default``; a one-line error for anything else (an empty list too)."""
    if text is None:
        return None if default is None else list(default)
    if not text.strip():
        raise DsgenError(f"{option} is empty; give comma-separated integers such as 1,2,3 or leave it out for the preset's")
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise DsgenError(f"{option} must be comma-separated integers such as 1,2,3 (got '{text}')") from None
    if not seeds or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise DsgenError(f"{option} must be distinct non-negative integers such as 1,2,3 (got '{text}')")
    return seeds
