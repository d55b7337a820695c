"""The ``dsgen`` command line: thin command modules over the library API (:mod:`dsgen.api`), their shared options
declared once (:mod:`dsgen.cli.options`). Heavy libraries are imported inside the commands so that ``dsgen --help``
answers at once.

Every command checks what it was given before any long work and before writing anything: bad input is one line on
stderr and exit code 2. Everything a command writes goes under its ``--out`` (or the file it was given);
``--publish DIR`` additionally copies tables into a folder such as the committed ``results/``.

| module | commands |
| --- | --- |
| :mod:`~dsgen.cli.generate` | ``generate`` |
| :mod:`~dsgen.cli.evaluate` | ``eval``, ``table`` |
| :mod:`~dsgen.cli.bench` | ``bench generation``, ``bench eval``, ``bench scheduling``, ``bench table`` |
| :mod:`~dsgen.cli.info` | ``methods``, ``plan`` |
| :mod:`~dsgen.cli.running` | ``run``, ``compare``, ``curve`` |
| :mod:`~dsgen.cli.verdicts` | ``claims``, ``regress`` |
| :mod:`~dsgen.cli.analyze` | ``analyze`` |
| :mod:`~dsgen.cli.export` | ``export dataset``, ``export pairs``, ``export mteb`` |
"""

from __future__ import annotations

import sys
from typing import MutableMapping

import typer

from dsgen.cli import analyze, bench, evaluate, export, generate, info, running, verdicts
from dsgen.errors import DsgenError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Generate labelled sentence-pair datasets with language models and measure what they are worth.")
bench_app = typer.Typer(no_args_is_help=True, help="Speed benchmarks (printed as ratios against a baseline measured in the same run).")
app.add_typer(bench_app, name="bench")
export_app = typer.Typer(no_args_is_help=True, help="Exports other tools read: dataset folders, MTEB results.")
app.add_typer(export_app, name="export")

app.command("generate")(generate.generate_cmd)
app.command("eval")(evaluate.eval_cmd)
app.command("table")(evaluate.table_cmd)
bench_app.command("generation")(bench.bench_generation)
bench_app.command("eval")(bench.bench_eval)
bench_app.command("scheduling")(bench.bench_scheduling)
bench_app.command("table")(bench.bench_table)
bench_app.command("training")(bench.bench_training)
app.command("methods")(info.methods_cmd)
app.command("plan")(info.plan_cmd)
app.command("run")(running.run_cmd)
app.command("compare")(running.compare_cmd)
app.command("curve")(running.curve_cmd)
app.command("regress")(verdicts.regress_cmd)
app.command("analyze")(analyze.analyze_cmd)
app.command("claims")(verdicts.claims_cmd)
export_app.command("dataset")(export.export_dataset_cmd)
export_app.command("pairs")(export.export_pairs_cmd)
export_app.command("mteb")(export.export_mteb_cmd)


def quiet_libraries(env: MutableMapping[str, str]) -> None:
    """dsgen draws its own rich progress bars and errors: silence the libraries' tqdm bars, info logs and the Hub
    client's retry warnings (in ``env``, before the libraries are imported; a variable set already is kept)."""
    for name, value in (("HF_HUB_DISABLE_PROGRESS_BARS", "1"), ("TRANSFORMERS_VERBOSITY", "error"),
                        ("HF_HUB_VERBOSITY", "error"), ("TQDM_DISABLE", "1")):
        env.setdefault(name, value)


def main() -> None:
    import os

    quiet_libraries(os.environ)
    try:
        app()
    except DsgenError as exc:
        msg = str(exc).replace("\n", " ")
        print(f"error: {msg}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


__all__ = ["app", "main", "quiet_libraries"]
