"""``dsgen eval`` (over :func:`dsgen.api.evaluate`) and ``dsgen table``: scores of encoders and of result files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

import dsgen.cli.options as o
from dsgen.cli.output import console


def eval_cmd(
    model: Annotated[str, typer.Argument(
        help="Encoder: minilm-l6, a causal-LM encoder alias (see README), or an id or path.")],
    tasks: o.Tasks = None,
    data_dir: o.DataDir = None,
    preprocess: o.Preprocess = None,
    json_out: o.JsonFile = None,
    batch_size: Annotated[int, typer.Option(help="Encoding batch size.")] = 64,
    device: o.Device = None,
) -> None:
    """Evaluate a sentence encoder on STS12-16, STSb and SICK-R (Spearman x100, as MTEB)."""
    from dsgen.api import evaluate
    from dsgen.reports.tables import to_rich

    scored = evaluate(model, tasks=tasks, data_dir=data_dir, preprocess=preprocess, json_out=json_out,
                      batch_size=batch_size, device=device)
    shown = console()
    shown.print(to_rich(scored.table, title="Spearman x 100 (cosine)"))
    timings = scored.result.timings
    shown.print(f"wrote {scored.path} ({timings['sentences_encoded']} sentences encoded in "
                f"{timings['encode_and_score_seconds']} s)")


def table_cmd(
    results: Annotated[list[Path], typer.Argument(help="Result JSON files.")],
    markdown: Annotated[Optional[Path], typer.Option(help="Also write the table as Markdown.")] = None,
    csv: Annotated[Optional[Path], typer.Option(help="Also write the table as CSV.")] = None,
) -> None:
    """Build one comparison table from result files (best per column marked)."""
    from dsgen.artifacts import atomic_open, check_writable_target
    from dsgen.reports.tables import comparison_frame, failed_results, load_results, to_csv, to_markdown, to_rich

    for target in (markdown, csv):
        if target is not None:
            check_writable_target(target)
    loaded = load_results(results)
    frame = comparison_frame(loaded)
    shown = console()
    shown.print(to_rich(frame, title="Spearman x 100 (cosine)"))
    for line in failed_results(loaded):  # a run that did not train: a row marked failed, never a score
        shown.print(f"failed: {line}", markup=False)
    if markdown:
        with atomic_open(markdown) as fh:
            fh.write(to_markdown(frame) + "\n")
    if csv:
        to_csv(frame, csv)


__all__ = ["eval_cmd", "table_cmd"]
