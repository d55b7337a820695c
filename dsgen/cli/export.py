"""``dsgen export``: what other tools read (dataset folders, MTEB results), built from result files and the cache
(:mod:`dsgen.export`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import dsgen.cli.options as o
from dsgen.cli.output import command_line, console
from dsgen.errors import DsgenError


def export_dataset_cmd(
    method: Annotated[str, typer.Argument(help="The method whose run's dataset to export.")],
    preset: o.Preset = "quick",
    seed: o.Seed = None,
    data_seed: o.DataSeed = None,
    generator: o.Generator = None,
    base_url: o.BaseUrl = None,
    encoder: o.Encoder = None,
    device: o.Device = None,
    preprocess: o.Preprocess = None,
    cpus_per_worker: o.CpusPerWorker = None,
    data_dir: o.DataDir = None,
    runs: Annotated[Path, typer.Option("--runs", help="Where the run lives (its --out).")] = Path("runs"),
    out: o.ExportTarget = ...,
    overwrite: o.Overwrite = False,
) -> None:
    """A run's training data (after postprocessing and reweighting, with the weights) as a Hugging Face dataset folder.

    The run is named as it was made: the same preset, seeds and overrides (--generator, --encoder, ...) and
    --cpus-per-worker; only its current result is exported (not a failed or an older one)."""
    from dsgen.api import plan
    from dsgen.export.dataset_folder import from_plan, write_dataset_folder
    from dsgen.scheduling.placement import Placement

    resolved = plan(method, preset=preset, seed=seed, data_seed=data_seed, generator=generator, base_url=base_url,
                    encoder=encoder, device=device, preprocess=preprocess)
    threads = Placement(cpus_per_worker=cpus_per_worker).check().threads
    found = from_plan(resolved, runs, command_line(), data_dir=data_dir, threads=threads)
    folder = write_dataset_folder(found, out, overwrite)
    console().print(f"wrote {folder} (datasets.load_dataset('{folder}') reads it)")


def export_pairs_cmd(
    pairs: Annotated[Path, typer.Argument(
        help="A generated pairs file with its sidecar (dsgen generate --out, or a cache entry).")],
    out: o.ExportTarget,
    overwrite: o.Overwrite = False,
) -> None:
    """A generated pairs file as it left the generator, as a Hugging Face dataset folder (one train split)."""
    from dsgen.export.dataset_folder import from_pairs_file, write_dataset_folder

    folder = write_dataset_folder(from_pairs_file(pairs, command_line()), out, overwrite)
    console().print(f"wrote {folder}")


def export_mteb_cmd(
    results: Annotated[list[Path], typer.Argument(help="Result files, or folders searched for them (a run's --out).")],
    out: o.ExportTarget,
    overwrite: o.Overwrite = False,
) -> None:
    """Results in MTEB's layout: <out>/results/<model>/<revision>/<Task>.json and model_meta.json (mteb.ResultCache(out) reads it)."""
    from dsgen.evaluation.results import Result
    from dsgen.export.mteb_results import KIND, export_mteb, import_mteb
    from dsgen.folders import check_target_folder, result_files

    import_mteb()
    check_target_folder(out, KIND, overwrite)  # before reading anything: a folder it may not replace fails at once
    files: list[Path] = []
    for path in results:
        if path.is_dir():  # a run folder: its run results and its `dsgen eval` results
            files += result_files(path)
        elif path.is_file():
            files.append(path)
        else:
            raise DsgenError(f"no result file or folder at {path}")
    loaded = [Result.load(f) for f in files]
    if not loaded:
        raise DsgenError(f"no dsgen result files in {', '.join(map(str, results))}")
    written, notes = export_mteb(loaded, out, command_line(), overwrite)
    shown = console()
    for note in sorted(set(notes)):
        shown.print(note)
    shown.print(f"wrote {len(written)} task results under {out} (mteb.ResultCache('{out}').load_results() reads them)")


__all__ = ["export_dataset_cmd", "export_mteb_cmd", "export_pairs_cmd"]
