"""``dsgen methods`` and ``dsgen plan``: what can run, and what one run would use."""

from __future__ import annotations

from typing import Annotated

import typer

import dsgen.cli.options as o
from dsgen.cli.output import console


def methods_cmd() -> None:
    """List every method (built-in and plug-in) with its stages and paper."""
    from rich.markup import escape
    from rich.table import Table

    from dsgen.method import METHODS, get_method

    table = Table(title="dsgen methods")
    for col in ("method", "description", "stages", "paper"):
        table.add_column(col, overflow="fold")
    for name in METHODS.names():
        m = get_method(name)
        table.add_row(name, escape(m.description), escape(m.stages()), escape(m.paper))
    console().print(table)


def plan_cmd(
    method: Annotated[str, typer.Argument(help="Method name (see `dsgen methods`).")],
    preset: o.Preset = "quick",
    seed: o.Seed = None,
    data_seed: o.DataSeed = None,
    generator: o.Generator = None,
    base_url: o.BaseUrl = None,
    encoder: o.Encoder = None,
    device: o.Device = None,
    preprocess: o.Preprocess = None,
    as_json: o.JsonPrint = False,
) -> None:
    """Print every resolved setting a run would use, and where each value came from."""
    import json

    from rich.markup import escape
    from rich.table import Table

    from dsgen.api import plan

    resolved = plan(method, preset=preset, seed=seed, data_seed=data_seed, generator=generator, base_url=base_url,
                    encoder=encoder, device=device, preprocess=preprocess)
    if as_json:
        print(json.dumps({"plan": resolved.to_dict(), "origins": resolved.origins}, indent=2, default=str))
        return
    table = Table(title=f"plan: {method}, preset {resolved.preset.name}")
    for col in ("section", "setting", "value", "from"):
        table.add_column(col, overflow="fold")
    for section, key, value, origin in resolved.rows():
        table.add_row(section, key, escape(repr(value) if isinstance(value, str) else str(value)), origin)
    console().print(table)


__all__ = ["methods_cmd", "plan_cmd"]
