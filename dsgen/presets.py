"""Presets: small TOML files that set the scale of a run (models, number of inputs, tasks, seeds).

A preset never changes what a method claims (its task spec, sampling, loss): the method's own
settings win over the preset's. Built-in presets live in ``benchmarks/presets/`` (installed
as ``dsgen.benchmarks.presets``); ``--preset`` also takes a path to a TOML file.

Precedence, lowest first: paper defaults of each config < preset < method < command line
(resolved by :mod:`dsgen.planning`).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from dsgen.config import Config
from dsgen.errors import DsgenError


@dataclass
class Preset(Config):
    """One preset.

    Args:
        name / description: shown in tables and ``dsgen run --help``.
        seeds: default run seeds.
        data_seed: generation seed shared by every run seed (so that seeds vary postprocessing,
            reweighting and training on one dataset, and the dataset is generated once); None:
            each run seed generates its own dataset.
        inputs / max_inputs: where x1 comes from (``stsb-train`` or a text file) and how many.
        x1_entries_per_label: sentences per label when a method generates x1 from scratch.
        tasks: evaluation tasks.
        preprocess: evaluation text convention: ``raw`` (MTEB's, the files as released) or
            ``senteval`` (SentEval's Moses tokenisation and lower-casing, GenSE's convention).
        eval_dtype: weights the evaluation encodes with: ``float32`` (default, the papers') or
            ``bfloat16`` (an opt-in: about 2.4x faster on CPUs with AMX, scores within about 0.05;
            the trained model itself stays float32). Where bfloat16 is emulated (a CPU without
            AVX-512: about 100x slower than float32) the plan evaluates in float32 and says why.
        generation / training / reweighting: fields of ``GenerationConfig``, of the trainer's
            config and of the reweighter's config that set scale (model, batch size, device).
        postprocess: fields of ``PostprocessConfig`` applied to every method that postprocesses,
            over the method's own (for controls such as ``shuffle_labels``).
    """

    name: str = ""
    description: str = ""
    seeds: list[int] = field(default_factory=lambda: [1])
    data_seed: int | None = None
    inputs: str = "stsb-train"
    max_inputs: int | None = None
    x1_entries_per_label: int = 100
    tasks: list[str] = field(default_factory=list)
    preprocess: str = "raw"
    eval_dtype: str = "float32"
    generation: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    reweighting: dict[str, Any] = field(default_factory=dict)
    postprocess: dict[str, Any] = field(default_factory=dict)


def builtin_presets() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("dsgen.benchmarks.presets").iterdir() if p.name.endswith(".toml"))


def load_preset(name: str) -> Preset:
    """A built-in preset by name, or a TOML file by path."""
    path = Path(name)
    if name.endswith(".toml") and path.is_file():
        text, label = path.read_text(encoding="utf-8"), path.stem
    else:
        known = builtin_presets()
        if name not in known:
            from dsgen.suggest import unknown

            raise DsgenError(unknown("preset", name, known) + ", or a path to a .toml file")
        text, label = (resources.files("dsgen.benchmarks.presets") / f"{name}.toml").read_text(encoding="utf-8"), name
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DsgenError(f"preset {name}: invalid TOML ({exc})") from None
    data.setdefault("name", label)
    preset = Preset.from_dict(data)
    if not preset.seeds or not all(isinstance(s, int) for s in preset.seeds):
        raise DsgenError(f"preset {name}: 'seeds' must be a non-empty list of integers")
    from dsgen.evaluation.preprocess import check_preprocess
    from dsgen.evaluation.tasks import DEFAULT_TASKS, TASKS

    preset.tasks = list(preset.tasks or DEFAULT_TASKS)
    for t in preset.tasks:
        TASKS.get(t)
    check_preprocess(preset.preprocess)
    if preset.eval_dtype not in ("float32", "bfloat16"):
        raise DsgenError(f"preset {name}: eval_dtype must be float32 or bfloat16, not '{preset.eval_dtype}'")
    return preset


def parse_seeds(text: str | None, default: list[int]) -> list[int]:
    """``"1,2,3"`` -> [1, 2, 3]; None -> ``default``; a one-line error for anything else (an empty list too)."""
    if text is None:
        return list(default)
    if not text.strip():
        raise DsgenError("--seeds is empty; give comma-separated integers such as 1,2,3 or leave it out for the preset's")
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise DsgenError(f"--seeds must be comma-separated integers such as 1,2,3 (got '{text}')") from None
    if not seeds or len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise DsgenError(f"--seeds must be distinct non-negative integers such as 1,2,3 (got '{text}')")
    return seeds
