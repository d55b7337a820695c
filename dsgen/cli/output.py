"""What the commands print besides their tables: the per-run line, failed runs, the files written, the exit for
crashed runs; and the command line the tables record."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterable

import typer


def console() -> Any:
    from dsgen.console import console as make

    return make()


def command_line() -> str:
    """This command as typed, recorded by the tables it writes (their *Command* line), credentials masked."""
    from dsgen.redaction import redact_command

    return redact_command(" ".join(["dsgen", *sys.argv[1:]]))


def per_run_line(out: Any) -> Any:
    """The per-run line on ``out``: ``method (data seed d, training seed t): avg ...``, worded as a failed run's line."""
    from dsgen.runs.records import run_text

    def on_result(method: str, plan: Any, result: Any) -> None:
        out.print(f"[bold]{method}[/bold] ({run_text(plan.run)}): avg {result.average:.2f} "
                  f"({', '.join(f'{t} {s.spearman:.2f}' for t, s in result.tasks.items())})")
    return on_result


def report_failures(out: Any, failures: list[Any]) -> None:
    """One line per failed run (``method (run): reason``): it has a row marked failed in the tables."""
    from rich.markup import escape

    for f in failures:
        out.print(f"[red]no model[/red] {escape(str(f))}")


def exit_if_crashed(failures: list[Any]) -> None:
    """Exit 1, naming them, when runs crashed on an unexpected exception (the other runs went on and the tables
    were written); their tracebacks are under ``--out``'s ``logs/``."""
    from dsgen.runs.records import run_text
    from dsgen.runs.records import RunCrashed

    crashed = [f for f in failures if isinstance(f, RunCrashed)]
    if crashed:
        print(f"error: {len(crashed)} run{'s' if len(crashed) > 1 else ''} crashed: "
              + "; ".join(f"{f.method} ({run_text(f.run)}), traceback in {f.log}" for f in crashed), file=sys.stderr)
        raise typer.Exit(1)


def wrote(out: Any, paths: Iterable[Path]) -> None:
    out.print("wrote " + ", ".join(str(x) for x in paths))
