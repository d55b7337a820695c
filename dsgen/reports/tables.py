"""Comparison tables built from result files: rows = models or methods, columns = tasks + average.

The best value of each column is marked (bold in Markdown and in the terminal). Rendered as
a rich table, Markdown and CSV (pandas).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsgen.evaluation.results import Result
from dsgen.runs.records import run_text
from dsgen.redaction import command_block

TASK_LABELS = {"sts12": "STS12", "sts13": "STS13", "sts14": "STS14", "sts15": "STS15", "sts16": "STS16",
               "stsb": "STSb", "sickr": "SICK-R", "sickr-test": "SICK-R (test)"}


def comparison_frame(results: list[Result], tasks: list[str] | None = None) -> Any:
    """A DataFrame of Spearman x100: one row per result (row label: method or model). A result that is not a
    trained model's score (:meth:`Result.training_failure`) has no numbers and its label says ``failed``
    (:func:`failed_results` gives why)."""
    import pandas as pd

    tasks = tasks or list(dict.fromkeys(t for r in results for t in r.tasks))
    rows = {}
    for r in results:
        label = r.method or r.model
        if r.seed is not None and sum((x.method or x.model) == label for x in results) > 1:
            label = f"{label} ({run_text(r.run)})"
        if r.training_failure() is not None:
            rows[f"{label} (failed)"] = {TASK_LABELS.get(t, t): float("nan") for t in tasks}
            continue
        rows[label] = {TASK_LABELS.get(t, t): (r.tasks[t].spearman if t in r.tasks else float("nan")) for t in tasks}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame["Avg."] = frame.mean(axis=1, skipna=False)
    frame.index.name = "model"
    return frame.round(2)


def load_results(paths: list[str | Path]) -> list[Result]:
    return [Result.load(p) for p in paths]


def failed_results(results: list[Result]) -> list[str]:
    """One line per result that is not a trained model's score: ``method (run): why``."""
    lines = []
    for r in results:
        failure = r.training_failure()
        if failure is not None:
            lines.append(f"{r.method or r.model}" + (f" ({run_text(r.run)})" if r.seed is not None else "") + f": {failure}")
    return lines


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


# -- comparisons (dsgen.reports.comparison.Comparison) ---------------------------------------------


def tasks_text(tasks: list[str]) -> str:
    """The evaluation columns in words (DINO's Table 1 columns when they are exactly those)."""
    dino = ["sts12", "sts13", "sts14", "sts15", "sts16", "stsb", "sickr-test"]
    if list(tasks) == dino:
        return "DINO's Table 1 columns (STS12-16, STSb, SICK-R test)"
    return ", ".join(TASK_LABELS.get(t, t) for t in tasks)


def runs_text(runs: list[tuple[int, int]]) -> str:
    """The runs of a comparison in words: ``seeds [1, 2, 3] (each its own data)``, ``data seeds [1, 2] x
    training seeds [1, 2, 3]``, or ``training seeds [1, 2, 3] on data seed 42``."""
    data = sorted({d for d, _ in runs})
    seeds = sorted({s for _, s in runs})
    if all(d == s for d, s in runs):
        return f"seeds {seeds} (each its own data)"
    if len(data) == 1:
        return f"training seeds {seeds} on data seed {data[0]}"
    return f"{len(runs)} runs: data seeds {data} x training seeds {seeds}"


def comparison_display(cmp: Any) -> Any:
    """Strings: "mean ± std" per task and average, and Δ to the reference with both intervals; a
    difference whose interval covers 0 is marked "(covers 0)"."""
    import pandas as pd

    num = cmp.frame()
    cols = [TASK_LABELS.get(t, t) for t in cmp.tasks] + ["Avg."]
    out = pd.DataFrame(index=num.index)
    multi = int(num["runs"].max()) > 1
    failed = cmp.failed()
    for c in cols:
        out[c] = ["failed" if m in failed else f"{v:.2f} ± {sd:.2f}" if multi else f"{v:.2f}"
                  for m, v, sd in zip(num.index, num[f"{c} mean"], num[f"{c} std"])]
    ref = cmp.methods[0]
    runs = len(cmp.runs) or 1

    def cell(m: str, diffs: dict[str, Any]) -> str:
        if m in failed:  # no score (the failures section has every run's reason)
            return f"no score: {len(failed[m])} of {max(runs, len(failed[m]))} runs failed"
        if m == ref or m not in diffs:
            return "-"
        iv = diffs[m]["avg"]
        return iv.text() + (" (covers 0)" if iv.covers_zero else "")

    out[f"Δ Avg. vs {ref}, 95% CI over runs"] = [cell(m, cmp.seed_diffs) for m in num.index]
    out["95% CI over test pairs"] = [cell(m, cmp.pair_diffs) for m in num.index]
    return out


def diff_frame(diffs: dict[str, dict[str, Any]], tasks: list[str], label: str) -> Any:
    """Per-task Δ with intervals (strings), one row per method."""
    import pandas as pd

    rows = {m: {(TASK_LABELS.get(t, t) if t != "avg" else "Avg."): d[t].text() + (" (covers 0)" if d[t].covers_zero else "")
                for t in [*tasks, "avg"]} for m, d in diffs.items()}
    frame = pd.DataFrame.from_dict(rows, orient="index")
    frame.index.name = label
    return frame


def summarise_reweighting(info: dict[str, Any]) -> str:
    """One line: kept share, mean weight, per-label kept fractions, classifier accuracy, warnings."""
    parts = [f"kept {info.get('kept', '?')} of {info.get('n', '?')} pairs", f"mean weight {info.get('mean_weight')}"]
    if "sdi_validation_accuracy" in info:
        parts.append(f"SDI validation accuracy {info['sdi_validation_accuracy']}% (RISE: 77.87%)")
    for label, k in (info.get("per_label") or {}).items():
        parts.append(f"label {label} kept {100 * k['kept_fraction']:.1f}% (P(true) median {k['p_true_quantiles_10_25_50_75_90'][2]})")
    if info.get("dropped_by_rule"):
        parts.append("dropped by GenSE's rules " + ", ".join(f"{k} {v}" for k, v in info["dropped_by_rule"].items()))
    if info.get("warning"):
        parts.append(f"warning: {info['warning']}")
    return "; ".join(parts)


def comparison_markdown(cmp: Any, command: str = "") -> str:
    import pandas as pd

    lines = [f"# Comparison: {', '.join(cmp.methods)} (preset `{cmp.preset}`)", ""]
    lines += command_block(command)
    lines += [f"Encoder: {', '.join(f'`{e}`' for e in cmp.encoders())}. Spearman x 100 of cosine similarity; mean ± "
              f"sample std over {runs_text(cmp.runs)}. Δ: difference to `{cmp.methods[0]}` with a 95% interval over "
              f"the runs, paired by (data seed, training seed): a t-interval over the data seeds' mean differences "
              f"(nested; over training seeds when there is one dataset) as the headline, and a 95% paired-bootstrap "
              f"interval over test pairs ({cmp.n_boot:,} resamples of each task's pairs). An interval that covers 0 is "
              f"marked.", ""]
    from dsgen.training.fit import selection_summary

    selection = selection_summary({m: [r.extra["training"] for r in rs if r.extra.get("training")]
                                   for m, rs in cmp.results.items() if any(r.extra.get("training") for r in rs)})
    if selection:
        lines += [f"Model selection: {selection}.", ""]
    lines += [comparison_display(cmp).to_markdown(), ""]
    failed = cmp.failed()
    notes = cmp.replicate_notes()
    if failed or notes:
        lines += ["Notes:", ""]
        lines += [f"- `{m}` failed: no score (its runs are listed under \"Failed runs\" below)." for m in failed]
        lines += [f"- `{m}`: {note}." for m, note in notes.items()]
        lines.append("")
    if cmp.seed_diffs:
        lines += ["## Per-task differences (95% CI over runs)", "",
                  diff_frame(cmp.seed_diffs, cmp.tasks, f"Δ vs {cmp.methods[0]}").to_markdown(), ""]
    if cmp.pair_diffs:
        lines += [f"## Per-task differences (95% CI over test pairs, {cmp.n_boot:,} resamples)", "",
                  diff_frame(cmp.pair_diffs, cmp.tasks, f"Δ vs {cmp.methods[0]}").to_markdown(), ""]
    spread = cmp.spread()
    if spread and any(v["data_seeds"] > 1 or v["train_seeds"] > 1 for v in spread.values()):
        lines += ["## Spread by source (average score)", "",
                  "Sample standard deviations of one run's average score: `train_sd` between training seeds on one "
                  "dataset (pooled over the datasets), `data_sd` between datasets beyond what training explains "
                  "(one-way random-effects ANOVA; 0 when the datasets' means vary less than training alone would "
                  "make them; blank with one dataset), `total_sd` of a single run.", "",
                  pd.DataFrame.from_dict(spread, orient="index").rename_axis("method").to_markdown(floatfmt=".2f"), ""]
    quality = cmp.quality()
    if quality:
        lines += ["## Data quality: label agreement with an independent judge", "",
                  "Spearman x 100 between each training pair's label and the cosine of the embedded all-MiniLM-L6-v2 "
                  "(not a metric of the papers; it shows whether generation or a filter changed the data), mean over "
                  "seeds, over all training pairs and over the generated ones only.", "",
                  pd.DataFrame.from_dict(quality, orient="index").rename_axis("method").to_markdown(), ""]
    stages = pd.DataFrame.from_dict(cmp.stage_seconds(), orient="index").rename_axis("method")
    stages = stages.astype(object).where(stages.notna(), None)  # a stage a row does not have: blank, not nan
    lines += ["## Time per stage (seconds, summed over each method's runs)", "", stages.to_markdown(missingval=""), ""]
    reweighted = {m: [(r.run, r.extra["reweighting"]) for r in rs if "reweighting" in r.extra] for m, rs in cmp.results.items()}
    if any(reweighted.values()):
        lines += ["## Reweighting", ""]
        lines += [f"- `{m}` ({run_text(run)}): {summarise_reweighting(info)}" for m, infos in reweighted.items()
                  for run, info in infos]
        lines.append("")
    if cmp.failures:
        lines += ["## Failed runs (no score)", "",
                  "Runs that produced no trained model: a filter kept nothing, training trained nothing (fewer optimizer "
                  "steps with a non-zero learning rate than the trainer's `min_trained_steps`, or no weight update), or "
                  "the run crashed (its traceback under the output folder's `logs/`). A method with any such run is not "
                  "compared.", ""]
        for f in cmp.failures:
            rw = f.extra.get("reweighting")
            lines.append(f"- `{f.method}` ({run_text((getattr(f, 'data_seed', None), f.seed))}): {f.reason}"
                         + (f" ({summarise_reweighting(rw)})" if rw else ""))
        lines.append("")
    return "\n".join(lines)


def comparison_rich(cmp: Any) -> Any:
    from rich.table import Table

    frame = comparison_display(cmp)
    table = Table(title=f"Spearman x 100 (preset {cmp.preset}); Δ vs {cmp.methods[0]}, 95% CI over runs and over test pairs")
    table.add_column("method")
    for c in frame.columns:
        table.add_column(str(c), justify="right")
    num = cmp.frame()
    best = num["Avg. mean"].max()
    for m, row in frame.iterrows():
        table.add_row(str(m), *[str(v) for v in row], style="bold green" if num.loc[m, "Avg. mean"] == best else None)
    return table


def comparison_bar_chart(cmp: Any, path: str | Path) -> None:
    """Grouped bars: one group per task (and the average), one bar per method, std as error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from dsgen.artifacts import write_figure

    num = cmp.frame()
    cols = [TASK_LABELS.get(t, t) for t in cmp.tasks] + ["Avg."]
    x = np.arange(len(cols))
    width = 0.8 / len(cmp.methods)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cols) + 0.3 * len(cmp.methods)), 4))
    for i, m in enumerate(cmp.methods):
        ax.bar(x + i * width - 0.4 + width / 2, [num.loc[m, f"{c} mean"] for c in cols], width,
               yerr=[num.loc[m, f"{c} std"] for c in cols], label=m, capsize=2)
    lows = [num[f"{c} mean"].min() for c in cols]
    ax.set_ylim(max(0, min(lows) - 10), min(100, max(num[f"{c} mean"].max() for c in cols) + 5))
    ax.set_xticks(x, cols, rotation=20)
    ax.set_ylabel("Spearman x 100")
    ax.set_title(f"preset {cmp.preset}")
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    write_figure(fig, path)


MAX_STEM = 120
"""The longest file stem written (bytes): a file name holds 255, and a temporary file adds its suffixes."""


def file_stem(stem: str) -> str:
    """``stem``, or, when it is too long for a file name (a comparison of every registered method is 300 characters),
    its first bytes and its content key (:func:`dsgen.identity.content_key`), so two long stems stay apart."""
    if len(stem.encode()) <= MAX_STEM:
        return stem
    from dsgen.identity import content_key

    return f"{stem.encode()[:MAX_STEM - 13].decode(errors='ignore')}-{content_key(stem)}"


def write_comparison(cmp: Any, folder: str | Path, stem: str, command: str = "") -> dict[str, Path]:
    """Write ``<stem>.md``, ``<stem>.csv`` (wide), ``<stem>.long.csv`` (tidy) and ``<stem>.png`` under ``folder``
    (a stem too long for a file name shortened, :func:`file_stem`)."""
    from dsgen.artifacts import atomic_open, ensure_writable_dir

    folder = ensure_writable_dir(Path(folder))
    stem = file_stem(stem)
    paths = {"markdown": folder / f"{stem}.md", "csv": folder / f"{stem}.csv", "png": folder / f"{stem}.png",
             "long": folder / f"{stem}.long.csv"}
    with atomic_open(paths["markdown"]) as fh:
        fh.write(comparison_markdown(cmp, command))
    with atomic_open(paths["csv"]) as fh:
        cmp.frame().to_csv(fh)
    with atomic_open(paths["long"]) as fh:  # tidy: one row per (method, variant, run, task, metric)
        cmp.long_frame().to_csv(fh, index=False)
    comparison_bar_chart(cmp, paths["png"])
    return paths


# -- learning curves (dsgen.reports.curve) -----------------------------------------------------------


def curve_frame(points: list[Any]) -> Any:
    """One row per (inputs, method): mean, 95% interval, runs, training pairs, human cap."""
    import pandas as pd

    return pd.DataFrame([p.to_dict() for p in points]).set_index(["inputs", "method"])


def curve_markdown(points: list[Any], header: dict[str, Any], command: str = "") -> str:
    lines = [f"# Learning curve (preset `{header['preset']}`)", ""]
    lines += command_block(command)
    lines += [f"Encoder: {', '.join(f'`{e}`' for e in header['encoders'])}; {runs_text(header['runs'])} at every size. "
              f"Average Spearman x 100 over {header['tasks_text']}, mean over the runs with its 95% interval "
              "(a t-interval over the data seeds' means; over training seeds when there is one dataset). The "
              "`human` row trains on as many human pairs as DINO's dataset holds; where that is more than the "
              "STS benchmark's 5,749 train pairs it trains on all of them (capped). Training pairs are those "
              "trained on, after postprocessing; a method that selects its model holds the rest out as its dev "
              "split.", ""]
    rows = []
    for p in points:
        iv = p.interval
        if iv is None:
            cell = f"failed: no score ({len(p.failed)} run{'' if len(p.failed) == 1 else 's'} failed)"
        else:
            cell = f"{iv.point:.2f}" + (f" [{iv.low:.2f}, {iv.high:.2f}]" if iv.low is not None else "")
        rows.append({"inputs": p.size, "method": p.method, "avg. [95% CI]": cell, "runs": p.runs,
                     "training pairs": "-" if p.train_pairs is None else f"{p.train_pairs:.0f}"
                     + (f" (capped: all {p.capped_at:,} human pairs)" if p.capped_at else "")})
    import pandas as pd

    lines += [pd.DataFrame(rows).to_markdown(index=False), ""]
    failed = [(p, why) for p in points for why in p.failed]
    if failed:
        lines += ["Failed runs (no score; a point with any is not drawn):", ""]
        lines += [f"- `{p.method}` at {p.size} inputs ({run}): {why}" for p, (run, why) in failed]
        lines.append("")
    lines += [f"![learning curve]({header['png']})", ""]
    return "\n".join(lines)


def curve_chart(points: list[Any], path: str | Path, title: str) -> None:
    """Mean average score against inputs (log scale), one line per method, 95% intervals as bars; a
    capped human point is hollow and labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dsgen.artifacts import write_figure

    fig, ax = plt.subplots(figsize=(7, 4.5))
    points = [p for p in points if p.interval is not None]  # a failed point has no score to draw
    for method in dict.fromkeys(p.method for p in points):
        mine = [p for p in points if p.method == method]
        xs = [p.size for p in mine]
        ys = [p.interval.point for p in mine]
        err = [[p.interval.point - p.interval.low if p.interval.low is not None else 0 for p in mine],
               [p.interval.high - p.interval.point if p.interval.high is not None else 0 for p in mine]]
        line = ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=method)
        for p in mine:
            if p.capped_at:
                ax.plot([p.size], [p.interval.point], "o", mfc="white", color=line[0].get_color(), ms=9)
                ax.annotate(f"all {p.capped_at:,} human pairs", (p.size, p.interval.point), fontsize=7,
                            textcoords="offset points", xytext=(-60, 8))
    ax.set_xscale("log")
    sizes = sorted({p.size for p in points})
    ax.set_xticks(sizes, [str(s) for s in sizes])
    ax.set_xlabel("generation inputs (STSb train sentences)")
    ax.set_ylabel("avg. Spearman x 100 (95% CI)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    write_figure(fig, path)


def write_curve(points: list[Any], folder: str | Path, stem: str, header: dict[str, Any], command: str = "") -> dict[str, Path]:
    """Write ``<stem>.md``, ``<stem>.csv`` and ``<stem>.png`` under ``folder`` (:func:`file_stem`)."""
    from dsgen.artifacts import atomic_open, ensure_writable_dir

    folder = ensure_writable_dir(Path(folder))
    stem = file_stem(stem)
    paths = {"markdown": folder / f"{stem}.md", "csv": folder / f"{stem}.csv", "png": folder / f"{stem}.png"}
    curve_chart(points, paths["png"], f"learning curve, preset {header['preset']}")
    with atomic_open(paths["markdown"]) as fh:
        fh.write(curve_markdown(points, {**header, "png": paths["png"].name}, command))
    with atomic_open(paths["csv"]) as fh:
        curve_frame(points).to_csv(fh)
    return paths
