"""``dsgen run``, ``compare`` and ``curve``: methods run (or reused) under a preset, over :mod:`dsgen.api`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import dsgen.cli.options as o
from dsgen.cli.output import command_line, console, exit_if_crashed, per_run_line, report_failures, wrote


def run_cmd(
    method: Annotated[str, typer.Argument(help="Method name (see `dsgen methods`).")],
    preset: o.Preset = "quick",
    seeds: o.Seeds = None,
    data_seeds: o.DataSeeds = None,
    generator: o.Generator = None,
    base_url: o.BaseUrl = None,
    encoder: o.Encoder = None,
    device: o.Device = None,
    preprocess: o.Preprocess = None,
    save_model: o.SaveModel = False,
    backend: o.Backend = "local",
    address: o.Address = None,
    workers: o.Workers = None,
    cpus_per_worker: o.CpusPerWorker = None,
    out: o.RunsFolder = Path("runs"),
    data_dir: o.DataDir = None,
    quiet: o.Quiet = False,
) -> None:
    """Generate (cached), train and evaluate one method; one result file per seed, then the table."""
    from dsgen.api import run
    from dsgen.reports.tables import to_rich

    shown = console()
    runs = run(method, preset=preset, seeds=seeds, data_seeds=data_seeds, generator=generator, base_url=base_url,
               encoder=encoder, device=device, preprocess=preprocess, save_model=save_model, backend=backend,
               address=address, workers=workers, cpus_per_worker=cpus_per_worker, out=out, data_dir=data_dir,
               progress=not quiet, on_result=per_run_line(shown), console=shown, command=command_line())
    shown.print(to_rich(runs.table, title=f"{method}, preset {runs.preset.name}"))
    shown.print(f"results under {runs.folder}")


def compare_cmd(
    methods: Annotated[list[str], typer.Argument(
        help="Methods; differences are taken to the first. `base` is added if absent.")],
    name: o.Name = None,
    preset: o.Preset = "quick",
    seeds: o.Seeds = None,
    data_seeds: o.DataSeeds = None,
    generator: o.Generator = None,
    base_url: o.BaseUrl = None,
    encoder: o.Encoder = None,
    device: o.Device = None,
    preprocess: o.Preprocess = None,
    save_model: o.SaveModel = False,
    backend: o.Backend = "local",
    address: o.Address = None,
    workers: o.Workers = None,
    cpus_per_worker: o.CpusPerWorker = None,
    out: o.RunsFolder = Path("runs"),
    publish: o.Publish = None,
    data_dir: o.DataDir = None,
    quiet: o.Quiet = False,
) -> None:
    """Run what is missing, reuse what is cached, and write one comparison table (Markdown, CSV, PNG) under --out."""
    from dsgen.api import NoResult, compare
    from dsgen.reports.tables import comparison_rich

    shown = console()
    try:
        cmp = compare(methods, name=name, preset=preset, seeds=seeds, data_seeds=data_seeds, generator=generator,
                      base_url=base_url, encoder=encoder, device=device, preprocess=preprocess, save_model=save_model,
                      backend=backend, address=address, workers=workers, cpus_per_worker=cpus_per_worker, out=out,
                      publish=publish, data_dir=data_dir, progress=not quiet, on_result=per_run_line(shown),
                      console=shown, command=command_line())
    except NoResult as exc:  # the crashed runs are named (exit 1) before the one line of bad input
        report_failures(shown, exc.failures)
        exit_if_crashed(exc.failures)
        raise
    report_failures(shown, cmp.failures)
    shown.print(comparison_rich(cmp.comparison))
    wrote(shown, cmp.written)
    exit_if_crashed(cmp.failures)


def curve_cmd(
    methods: Annotated[list[str], typer.Argument(help="Methods, e.g. dino dino-decay0 human base.")],
    sizes: Annotated[str, typer.Option(help="Comma-separated numbers of generation inputs.")] = "100,300,1000",
    name: o.Name = None,
    preset: o.Preset = "cpu",
    seeds: o.Seeds = None,
    data_seeds: o.DataSeeds = None,
    generator: o.Generator = None,
    base_url: o.BaseUrl = None,
    encoder: o.Encoder = None,
    device: o.Device = None,
    preprocess: o.Preprocess = None,
    save_model: o.SaveModel = False,
    backend: o.Backend = "local",
    address: o.Address = None,
    workers: o.Workers = None,
    cpus_per_worker: o.CpusPerWorker = None,
    out: o.RunsFolder = Path("runs"),
    publish: o.Publish = None,
    data_dir: o.DataDir = None,
    quiet: o.Quiet = False,
) -> None:
    """Each method's score as the generation inputs grow (one preset copy per size); Markdown, CSV, PNG."""
    from dsgen.api import curve
    from dsgen.reports.tables import to_rich

    shown = console()
    points = curve(methods, sizes=sizes, name=name, preset=preset, seeds=seeds, data_seeds=data_seeds,
                   generator=generator, base_url=base_url, encoder=encoder, device=device, preprocess=preprocess,
                   save_model=save_model, backend=backend, address=address, workers=workers,
                   cpus_per_worker=cpus_per_worker, out=out, publish=publish, data_dir=data_dir, progress=not quiet,
                   on_result=per_run_line(shown), console=shown, command=command_line())
    report_failures(shown, points.failures)
    shown.print(to_rich(points.means, title=f"learning curve, preset {points.preset.name}: mean avg. by inputs"))
    wrote(shown, points.written)
    exit_if_crashed(points.failures)


__all__ = ["compare_cmd", "curve_cmd", "run_cmd"]
