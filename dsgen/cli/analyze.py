"""``dsgen analyze``: RISE's Table 1 for a run, over :func:`dsgen.api.analyze`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

import dsgen.cli.options as o
from dsgen.cli.output import command_line, console, wrote


def analyze_cmd(
    method: Annotated[str, typer.Argument(help="A method whose reweighter records p_D (rise, rise-filter).")] = "rise",
    preset: o.Preset = "quick",
    seed: o.Seed = None,
    data_seed: o.DataSeed = None,
    out: o.RunsFolder = Path("runs"),
    publish: o.Publish = None,
    data_dir: o.DataDir = None,
    quiet: o.Quiet = False,
) -> None:
    """RISE's Table 1 for a run: top / bottom 10% of machine sentences by p_D against the human ones."""
    from dsgen.api import analyze

    analysis = analyze(method, preset=preset, seed=seed, data_seed=data_seed, out=out, publish=publish,
                       data_dir=data_dir, progress=not quiet, command=command_line())
    shown = console()
    shown.print(analysis.table.to_string())
    wrote(shown, analysis.written)


__all__ = ["analyze_cmd"]
