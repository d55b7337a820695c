"""The claims report: Markdown (one row per claim: the paper's figure, what this run measured, the
verdict) and a PNG of the measured differences with their intervals, one row per claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dsgen.claims import Verdict

MARKS = {"reproduced": "✅ reproduced", "contradicted": "❌ contradicted", "no effect": "⭕ no effect at this scale",
         "inconclusive": "➖ inconclusive"}


def _measured(v: Verdict, means: dict[str, float]) -> str:
    c = v.claim
    if not v.intervals:
        return v.reason
    if c.kind == "between":
        lo, up = v.used["lower"], v.used["upper"]
        return f"`{lo}` {means[lo]:.2f} < `{c.method}` {means[c.method]:.2f} < `{up}` {means[up]:.2f}"
    ref = v.used["reference"]
    return f"`{c.method}` {means[c.method]:.2f} vs `{ref}` {means[ref]:.2f}"


def _intervals(v: Verdict) -> str:
    if not v.intervals:
        return "-"
    parts = []
    for role, iv in v.intervals.items():
        label = f"vs `{v.used[role]}` " if len(v.intervals) > 1 else ""
        parts.append(label + iv.text() + (" (covers 0)" if iv.covers_zero else ""))
    return "; ".join(parts)


def claims_markdown(verdicts: list[Verdict], means: dict[str, float], header: dict[str, Any], command: str = "",
                    figures: list[Any] = ()) -> str:
    import pandas as pd

    from dsgen.claims import ALPHA
    from dsgen.evaluation.tables import runs_text, tasks_text

    rows = []
    for v in verdicts:
        c = v.claim
        half = v.half_width
        rows.append({"paper": c.paper, "claim": c.statement, "where": f"{c.table}, p. {c.page}" if c.page else c.table,
                     "paper's figure": c.paper_text(), "this run (avg.)": _measured(v, means),
                     "Δ [95% CI over runs]": _intervals(v), "±": f"{half:.2f}" if half is not None else "-",
                     "verdict": MARKS[v.verdict] + (f" ({v.reason})" if v.verdict == "inconclusive" and v.intervals
                                                    and v.reason else "")})
    counts = {k: sum(v.verdict == k for v in verdicts) for k in MARKS}
    lines = [f"# The papers' claims, tested (preset `{header['preset']}`)", ""]
    if command:
        lines += ["Command:", "", "```bash", command, "```", ""]
    lines += [f"Encoder: {', '.join(f'`{e}`' for e in header['encoders'])}; {runs_text(header['runs'])}. Scores are "
              f"Spearman x 100 averaged over {tasks_text(header['tasks'])}. Δ: the difference of the averages, paired "
              "by (data seed, training seed) run, with its 95% interval (a t-interval over the data seeds' mean "
              "differences; over training seeds when there is one dataset) and its half-width (±). Each verdict is a "
              f"one-sided test at level {ALPHA:.1%} (one side of that interval), Holm-adjusted over the "
              f"{len(verdicts)} claims so that the verdicts hold together: **reproduced** (on the paper's side of 0; "
              "within ± the margin for 'close'), **contradicted** (on the other side), **no effect at this scale** "
              "(within ± the margin of 0 while the paper's difference is not), **inconclusive** (too wide to say, or "
              "a method without a result: the row says why). The paper's figures are as printed (DINO's Table 2: "
              "STS12-16 / STSb / SICK-R, with the derived 7-column average); they come from the papers' models and "
              "scale (GPT2-XL, RoBERTa/BERT, tens of thousands of pairs): compare directions, not levels.", "",
              f"Verdicts: {counts['reproduced']} reproduced, {counts['contradicted']} contradicted, "
              f"{counts['no effect']} no effect at this scale, {counts['inconclusive']} inconclusive.", "",
              pd.DataFrame(rows).to_markdown(index=False), "", "Notes:", ""]
    lines += [f"- `{v.claim.id}`: {v.claim.note}" for v in verdicts if v.claim.note]
    if figures:
        lines += ["", "Headline figures no comparison here can test:", ""]
        lines += [f"- {f.paper} ({f.table}{f', p. {f.page}' if f.page else ''}): {f.statement}. Not tested: {f.why}."
                  for f in figures]
    lines += ["", f"![differences with their intervals]({header['png']})", ""]
    return "\n".join(lines)


def claims_chart(verdicts: list[Verdict], path: str | Path, title: str) -> None:
    """One row per (claim, comparison): the measured difference with its 95% interval over seeds,
    and the paper's difference as a hollow marker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dsgen.artifacts import write_figure

    rows = []
    for v in verdicts:
        for role, iv in v.intervals.items():
            paper = v.claim.paper_difference
            if v.claim.kind == "between" and v.claim.paper_method is not None:
                other = v.claim.paper_lower if role == "lower" else v.claim.paper_upper
                paper = v.claim.paper_method - other
            rows.append((f"{v.claim.id} (vs {v.used[role]})", iv, paper, v.verdict))
    colors = {"reproduced": "#2a9d3c", "contradicted": "#c0392b", "no effect": "#2c6fbb", "inconclusive": "#7f8c8d"}
    fig, ax = plt.subplots(figsize=(8, 0.45 * max(len(rows), 2) + 1.2))
    for i, (label, iv, paper, verdict) in enumerate(reversed(rows)):
        if iv.low is not None:
            ax.plot([iv.low, iv.high], [i, i], color=colors[verdict], lw=2)
        ax.plot([iv.point], [i], "o", color=colors[verdict])
        if paper is not None:
            ax.plot([paper], [i], "D", mfc="none", color="black", ms=5)
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(rows)), [r[0] for r in reversed(rows)], fontsize=8)
    ax.set_xlabel("Δ Spearman x 100 (method - comparison), 95% CI over runs; ◇ paper")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    write_figure(fig, path)
