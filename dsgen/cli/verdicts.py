"""``dsgen claims`` and ``dsgen regress``: verdicts, over :mod:`dsgen.api` (the papers' claims; the committed
baseline)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

import dsgen.cli.options as o
from dsgen.cli.output import command_line, console, exit_if_crashed, per_run_line, report_failures, wrote


def claims_cmd(
    papers: Annotated[Optional[str], typer.Option(
        help="Comma-separated papers (default: the preset's claims_papers, else the founding ones, dino, rise, gense, "
             "control; also syncse, claif, sim-gpt, e5, multicsr; all).")] = None,
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
    allow_mixed: Annotated[bool, typer.Option(
        "--allow-mixed", help="Publish even when the runs were made at other commits or from a dirty tree (the report "
                              "lists each run's commit and flags it).")] = False,
    recipes: Annotated[Optional[str], typer.Option(
        help="Comma-separated presets (e.g. extends-variants of --preset that change its training settings) to judge the same claims "
             "under too; a robustness report marks each claim robust or recipe-dependent.")] = None,
    confirm: Annotated[Optional[str], typer.Option(
        help="Comma-separated claim ids to confirm after the exploratory report: fresh data seeds, as many as it plans "
             "for 80% power, the claims tested on them alone as a new family.")] = None,
    confirm_data_seeds: Annotated[Optional[int], typer.Option(
        help="With --confirm: run this many fresh data seeds instead of the planned number (a departure).")] = None,
    data_dir: o.DataDir = None,
    quiet: o.Quiet = False,
) -> None:
    """Test the papers' claims: run (or reuse) every method they involve; one verdict per claim (Markdown + PNG).
    The verdicts are exploratory; --confirm tests named claims again on fresh data seeds."""
    from dsgen.api import judge_claims

    shown = console()
    report = judge_claims(papers, preset=preset, seeds=seeds, data_seeds=data_seeds, generator=generator,
                          base_url=base_url, encoder=encoder, device=device, preprocess=preprocess,
                          save_model=save_model, backend=backend, address=address, workers=workers,
                          cpus_per_worker=cpus_per_worker, out=out, publish=publish, allow_mixed=allow_mixed,
                          recipes=recipes, confirm=confirm, confirm_data_seeds=confirm_data_seeds, data_dir=data_dir,
                          progress=not quiet, on_result=per_run_line(shown), console=shown, command=command_line())
    reports = [report, *report.recipes] + ([report.confirmation] if report.confirmation else [])
    for r in reports:
        report_failures(shown, r.failures)
        shown.print(f"{r.stage}, preset {r.preset.name}, {len(r.runs)} runs:")
        for v in r.verdicts:
            shown.print(f"{v.verdict:>13}  {v.claim.paper}: {v.claim.statement}")
    if report.robustness:
        shown.print("across recipes:")
        for row in report.robustness:
            shown.print(f"{row['across']:>13}  {row['claim']}")
    wrote(shown, list(dict.fromkeys(p for r in reports for p in r.written)))
    exit_if_crashed([f for r in reports for f in r.failures])


def regress_cmd(
    methods: Annotated[Optional[list[str]], typer.Argument(
        help="Methods to rerun for --update (default: the baseline's, or base dino for a new one); a check reruns the baseline's.",
        show_default=False)] = None,
    preset: o.Preset = "smoke",
    baseline: Annotated[Optional[Path], typer.Option(
        help="Baseline file (default: results/baseline/<preset>.json).")] = None,
    tolerance: Annotated[Optional[float], typer.Option(
        help="Points of Spearman x100 a task may fall below the baseline (default: the baseline file's, chosen from "
             "measured seed spread).")] = None,
    update: Annotated[bool, typer.Option("--update", help="Write the baseline from this run instead of checking.")] = False,
    out: o.RunsFolder = Path("runs/regress"),
    data_dir: o.DataDir = None,
    quiet: o.Quiet = False,
    legacy_methods: o.LegacyMethods = None,
) -> None:
    """Rerun a preset from scratch; exit 1 when a task falls more than the tolerance below the baseline (or is NaN)."""
    from rich.table import Table

    from dsgen.api import regress

    shown = console()
    check = regress(preset=preset, baseline=baseline, tolerance=tolerance,
                    methods=o.methods_given(methods, legacy_methods), update=update, out=out, data_dir=data_dir,
                    progress=not quiet, on_result=per_run_line(shown))
    if check.updated:
        shown.print(check.summary(preset))
        return
    shown.print(check.against)
    table = Table(title=f"regression check, preset {check.preset}, tolerance {check.tolerance}")
    for col in ("method", "task", "baseline", "now", "Δ", "status"):
        table.add_column(col, justify="right" if col not in ("method", "task") else "left")
    for c in check.checks:
        table.add_row(c.method, c.task, f"{c.baseline:.2f}", f"{c.current:.2f}", f"{c.delta:+.2f}",
                      f"[red]{c.status}[/red]" if c.failed else c.status)
    shown.print(table)
    if not check.passed:
        shown.print(f"[red]{check.summary(preset)}[/red]")
        raise typer.Exit(1)
    shown.print(check.summary(preset))


__all__ = ["claims_cmd", "regress_cmd"]
