"""Comparison tables built from result files: rows = models or methods, columns = tasks + average.

The best value of each column is marked (bold in Markdown and in the terminal). Rendered as
a rich table, Markdown and CSV (pandas).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsgen.evaluation.results import Result

TASK_LABELS = {"sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16",
               "stsb": "STSb", "sickr": "SICK-R", "sickr-test": "SICK-R (test)"}


def comparison_frame(results: list[Result], tasks: list[str] | None = None) -> Any:
    """A DataFrame of Spearman x100: one row per result (row label: method or model)."""
    import pandas as pd

    tasks = tasks or list(dict.fromkeys(t for r in results for t in r.tasks))
    rows = {}
    for r in results:
        label = r.method or r.model
        if r.seed is not None and sum((x.method or x.model) == label for x in results) > 1:
            label = f"{label} (seed {r.seed})"
        rows[label] = {TASK_LABELS.get(t, t): (r.tasks[t].spearman if t in r.tasks else float("nan")) for t in tasks}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame["Avg."] = frame.mean(axis=1, skipna=False)
    frame.index.name = "model"
    return frame.round(2)


def load_results(paths: list[str | Path]) -> list[Result]:
    return [Result.load(p) for p in paths]


def _marked(frame: Any, bold: str) -> Any:
    out = frame.map(lambda v: f"{v:.2f}")
    for col in frame.columns:
        if frame[col].notna().any():
            best = frame[col].max()
            out.loc[frame[col] == best, col] = bold.format(f"{best:.2f}")
    return out


def to_markdown(frame: Any) -> str:
    return _marked(frame, "**{}**").to_markdown()


def to_csv(frame: Any, path: str | Path) -> None:
    from dsgen.artifacts import atomic_open

    with atomic_open(path) as fh:
        frame.to_csv(fh)


def to_rich(frame: Any, title: str = "") -> Any:
    from rich.table import Table

    table = Table(title=title or None)
    table.add_column(frame.index.name or "")
    for col in frame.columns:
        table.add_column(str(col), justify="right")
    marked = _marked(frame, "[bold green]{}[/bold green]")
    for label, row in marked.iterrows():
        table.add_row(str(label), *[str(v) for v in row])
    return table
