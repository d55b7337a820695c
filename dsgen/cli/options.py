"""Every option more than one command takes, declared once: one name, one meaning, one help text. A command lists
the ones it takes as plain parameters (``preset: Preset = "quick"``), its own default beside them.

Where an option's name stands for two kinds of thing, each kind is declared once under its own alias: ``--out`` is a
runs folder (:data:`RunsFolder`), an export's target folder (:data:`ExportTarget`) or ``generate``'s pairs file
(:data:`PairsFile`); ``--json`` writes a JSON file (:data:`JsonFile`) or, in ``plan``, prints JSON
(:data:`JsonPrint`).

Methods are the command's arguments everywhere (``dsgen compare dino rise``, ``dsgen regress base dino --update``);
``regress`` and ``bench scheduling`` still read the old comma-separated ``--methods a,b`` (hidden:
:data:`LegacyMethods`), and ``generate`` / ``bench generation`` the old ``--seed`` for ``--data-seed``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from dsgen.errors import DsgenError

PRESET_HELP = "smoke (CI, minutes), quick (MiniLM, CPU), cpu (raw encoder, the papers' claims on CPU), paper (GPU) or a .toml file."


def config_default(cls: type, name: str) -> Any:
    """The default of a config field (nested ``sampling.top_k``), for help texts: defaults live in the config."""
    head, _, rest = name.partition(".")
    f = {f.name: f for f in dataclasses.fields(cls)}[head]
    if rest:
        return config_default(f.default_factory().__class__, rest)  # type: ignore[misc]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]


def generation_default(name: str) -> Any:
    """The generation config's default of ``name`` (``sampling.top_k``)."""
    from dsgen.generation.debiased import GenerationConfig

    return config_default(GenerationConfig, name)


def generation_help(text: str, name: str) -> str:
    """``text`` with the generation config's default of ``name``."""
    return f"{text} (default: {generation_default(name)})"


# -- what runs: preset, seeds, the settings that replace the preset's -------------------------------------------
Preset = Annotated[str, typer.Option(help=PRESET_HELP)]
Seeds = Annotated[Optional[str], typer.Option(help="Comma-separated training seeds, e.g. 1,2,3 (default: the preset's).")]
DataSeeds = Annotated[Optional[str], typer.Option(
    help="Comma-separated data (generation) seeds; each runs with every training seed (default: the preset's).")]
Seed = Annotated[Optional[int], typer.Option(help="One run's training seed (default: the preset's first run's).")]
DataSeed = Annotated[Optional[int], typer.Option(
    help="One run's data seed, the seed its dataset is generated with (default: the preset's first run's; generate "
         f"and bench generation: {generation_default('seed')}).")]
Generator = Annotated[Optional[str], typer.Option(
    help="Generator LM: smollm2-135m, gemma3-270m, an HF id, a directory or a .gguf file; openai:<model> for an "
         "OpenAI-compatible endpoint (--base-url; no self-debiasing, so generate needs --decay 0) (default: the "
         f"preset's; generate and bench generation: {generation_default('generator')}).")]
BaseUrl = Annotated[Optional[str], typer.Option(
    help="Base URL of the OpenAI-compatible endpoint of --generator openai:<model> (default: $OPENAI_BASE_URL; the key "
         "comes from $OPENAI_API_KEY).")]
Encoder = Annotated[Optional[str], typer.Option(help="Encoder instead of the preset's (alias, HF or sentence-transformers id).")]
BenchModel = Annotated[Optional[str], typer.Option(help="Encoder: an alias, HF id or directory (the cpu preset's: smollm2-l4).")]
Device = Annotated[Optional[str], typer.Option(help="cpu, cuda or auto (cuda where a GPU is visible) (default: the "
                                                    "preset's; without a preset, auto).")]
Preprocess = Annotated[Optional[str], typer.Option(
    help="Evaluation text: raw (MTEB) or senteval (GenSE's convention) (default: the preset's; without a preset, raw).")]
Tasks = Annotated[Optional[str], typer.Option(
    help="Comma-separated tasks, or mteb for MTEB's seven (default: DINO's Table 1 columns; bench eval: mteb).")]
SaveModel = Annotated[bool, typer.Option(
    "--save-model", help="Keep each trained encoder under --out as a sentence-transformers folder with its model card.")]
DataDir = Annotated[Optional[str], typer.Option(help="STS data folder (default: $DSGEN_DATA_DIR).")]

# -- where the work runs (dsgen.scheduling.placement) ------------------------------------------------------------
Backend = Annotated[str, typer.Option(help="Where the work runs: local (this process) or ray (workers on a Ray cluster; "
                                           "pip install 'dsgen\\[ray]').")]
Address = Annotated[Optional[str], typer.Option(
    help="Ray cluster to join: auto or HOST:PORT (default: $RAY_ADDRESS, else a local Ray started for the command). "
         "Needs --backend ray.")]
Workers = Annotated[Optional[int], typer.Option(
    help="Most Ray workers at once. In run, compare, curve and claims a worker is a Ray task that makes one dataset, "
         "fit or run (default: as many as the live nodes hold); in generate, a Ray actor that decodes chunks "
         "(default: 1 per GPU with --device cuda, else 2). Needs --backend ray.")]
CpusPerWorker = Annotated[Optional[int], typer.Option(
    help="Threads each worker computes with (with --backend local: this process), and on Ray the CPUs it reserves. "
         "run, compare, curve and claims: default 2 on either backend, since training's results depend on the count "
         "(results record it). generate: default torch's own count here, on Ray as many CPUs as the nodes give "
         "every actor (generation's output does not depend on it).")]

# -- what is written ---------------------------------------------------------------------------------------------
RunsFolder = Annotated[Path, typer.Option("--out", help="Runs folder: cached datasets, result files, logs and tables.")]
ExportTarget = Annotated[Path, typer.Option(
    "--out", help="The folder to write (replaced only when dsgen wrote it as this kind of export, or with --overwrite).")]
PairsFile = Annotated[Path, typer.Option("--out", help="Output JSONL (a .meta.json sidecar is written beside it).")]
JsonFile = Annotated[Optional[Path], typer.Option(
    "--json", help="Write the numbers to this JSON file (eval: its result file, default runs/eval/<model>.json).")]
JsonPrint = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Name = Annotated[Optional[str], typer.Option(help="File stem of the tables (default: the command and its methods, "
                                                  "e.g. compare-dino-base).")]
Publish = Annotated[Optional[Path], typer.Option(help="Also write the tables under DIR/<preset>/ (e.g. the committed results/).")]
Overwrite = Annotated[bool, typer.Option(
    "--overwrite", help="Replace --out even when dsgen did not write it, or it is this command's input (never a "
    "folder holding runs).")]
Quiet = Annotated[bool, typer.Option("--quiet", help="No progress bars.")]

# -- the old spellings, still read ------------------------------------------------------------------------------
LegacyMethods = Annotated[Optional[str], typer.Option(
    "--methods", hidden=True, help="The old form: comma-separated methods (give them as arguments instead).")]
LegacySeed = Annotated[Optional[int], typer.Option("--seed", hidden=True, help="The old name of --data-seed.")]


def methods_given(methods: Optional[list[str]], legacy: Optional[str]) -> list[str]:
    """The methods given as arguments, or in the old form ``--methods a,b``; not both."""
    if methods and legacy is not None:
        raise DsgenError("give the methods as arguments, or in the old form --methods a,b, not both")
    if legacy is not None:
        from dsgen.api.common import name_list

        return name_list(legacy)
    return list(methods or [])


def data_seed_given(data_seed: Optional[int], seed: Optional[int]) -> Optional[int]:
    """``--data-seed``, or its old name ``--seed``; not two different ones."""
    if seed is not None and data_seed is not None and seed != data_seed:
        raise DsgenError("--seed is the old name of --data-seed; give one of them")
    return data_seed if data_seed is not None else seed
