"""Comparison of methods over seeds: mean ± std per task, and the difference to a reference method
with a 95% paired-bootstrap interval over test pairs.

The bootstrap resamples the test pairs of each task (the same resample for both methods, so
the comparison is paired), recomputes each seed's Spearman on the resample, averages over
seeds, and takes the difference. The interval is the 2.5-97.5 percentile of 1,000 such
differences; the average column uses the mean of the per-task differences of each resample.
Everything is built from result files and the predictions saved beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsgen.evaluation.results import Result
from dsgen.evaluation.tables import TASK_LABELS


def _spearman_rows(pred: Any, gold: Any) -> Any:
    """Spearman x100 of each row of ``pred`` (B, n) against the matching row of ``gold`` (B, n)."""
    import numpy as np
    from scipy.stats import rankdata

    rp = rankdata(pred, axis=1)
    rg = rankdata(gold, axis=1)
    rp -= rp.mean(axis=1, keepdims=True)
    rg -= rg.mean(axis=1, keepdims=True)
    return 100 * (rp * rg).sum(1) / np.sqrt((rp**2).sum(1) * (rg**2).sum(1))


def paired_bootstrap(reference: list[Any], other: list[Any], gold: Any, n_boot: int = 1000, seed: int = 0,
                     chunk: int = 100) -> Any:
    """Bootstrap distribution (``n_boot`` values) of mean-over-seeds Spearman(other) - Spearman(reference).

    Args:
        reference / other: per-seed cosine predictions (each of shape (n,)) on the same pairs.
        gold: gold scores (n,).
    """
    import numpy as np

    gold = np.asarray(gold, dtype=float)
    rng = np.random.default_rng(seed)
    n = len(gold)
    out = []
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, n, size=(min(chunk, n_boot - start), n))
        g = gold[idx]
        ref = np.mean([_spearman_rows(np.asarray(p)[idx], g) for p in reference], axis=0)
        oth = np.mean([_spearman_rows(np.asarray(p)[idx], g) for p in other], axis=0)
        out.append(oth - ref)
    return np.concatenate(out)


@dataclass
class Comparison:
    """Methods x tasks: per-seed scores, means, stds and bootstrap differences to ``methods[0]``."""

    methods: list[str]
    tasks: list[str]
    results: dict[str, list[Result]]
    preset: str = ""
    n_boot: int = 1000
    failures: list[Any] | None = None  # dsgen.runner.RunFailed of runs that produced no model

    def __post_init__(self) -> None:
        import numpy as np

        self.diffs: dict[str, dict[str, tuple[float, float, float]]] = {}
        ref = self.methods[0]
        ref_pred = [r.predictions for r in self.results[ref]]
        for m in self.methods[1:]:
            preds = [r.predictions for r in self.results[m]]
            if any(p is None for p in preds + ref_pred):
                continue
            per_task = {}
            for i, t in enumerate(self.tasks):
                per_task[t] = paired_bootstrap([p[t] for p in ref_pred], [p[t] for p in preds], ref_pred[0][f"{t}:gold"],
                                               self.n_boot, seed=i)
            self.diffs[m] = {}
            for t in self.tasks:
                self.diffs[m][t] = self._interval(self.score(m, t) - self.score(ref, t), per_task[t])
            avg = np.mean([per_task[t] for t in self.tasks], axis=0)
            self.diffs[m]["avg"] = self._interval(self.average(m) - self.average(ref), avg)

    @staticmethod
    def _interval(point: float, samples: Any) -> tuple[float, float, float]:
        import numpy as np

        lo, hi = np.percentile(samples, [2.5, 97.5])
        return float(point), float(lo), float(hi)

    def seed_scores(self, method: str, task: str | None = None) -> list[float]:
        rs = self.results[method]
        return [r.average if task is None else r.tasks[task].spearman for r in rs]

    def score(self, method: str, task: str) -> float:
        import numpy as np

        return float(np.mean(self.seed_scores(method, task)))

    def average(self, method: str) -> float:
        import numpy as np

        return float(np.mean(self.seed_scores(method)))

    def frame(self) -> Any:
        """Numeric DataFrame: mean and std columns per task and the average, Δ and its interval."""
        import numpy as np
        import pandas as pd

        rows = {}
        for m in self.methods:
            row: dict[str, float] = {}
            for t in [*self.tasks, None]:
                vals = self.seed_scores(m, t)
                name = TASK_LABELS.get(t, t) if t else "Avg."
                row[f"{name} mean"] = float(np.mean(vals))
                row[f"{name} std"] = float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
            d = self.diffs.get(m, {}).get("avg")
            row["Δ Avg."], row["Δ low"], row["Δ high"] = d if d else (0.0, float("nan"), float("nan"))
            row["seeds"] = len(self.results[m])
            rows[m] = row
        frame = pd.DataFrame.from_dict(rows, orient="index")
        frame.index.name = "method"
        return frame.round(3)

    def display_frame(self) -> Any:
        """Strings: "mean ± std" per task and average, and "Δ [low, high]" to the first method."""
        import pandas as pd

        num = self.frame()
        cols = [TASK_LABELS.get(t, t) for t in self.tasks] + ["Avg."]
        out = pd.DataFrame(index=num.index)
        multi = int(num["seeds"].max()) > 1
        for c in cols:
            out[c] = [f"{m:.2f} ± {s:.2f}" if multi else f"{m:.2f}" for m, s in zip(num[f"{c} mean"], num[f"{c} std"])]
        ref = self.methods[0]
        out[f"Δ Avg. vs {ref} [95% CI]"] = [
            "-" if m == ref or m not in self.diffs else
            f"{self.diffs[m]['avg'][0]:+.2f} [{self.diffs[m]['avg'][1]:+.2f}, {self.diffs[m]['avg'][2]:+.2f}]"
            for m in num.index]
        return out

    def diff_frame(self) -> Any:
        """Per-task Δ to the first method with its 95% interval (strings)."""
        import pandas as pd

        rows = {}
        for m, d in self.diffs.items():
            rows[m] = {(TASK_LABELS.get(t, t) if t != "avg" else "Avg."): f"{v:+.2f} [{lo:+.2f}, {hi:+.2f}]"
                       for t, (v, lo, hi) in d.items()}
        frame = pd.DataFrame.from_dict(rows, orient="index")
        frame.index.name = f"Δ vs {self.methods[0]}"
        return frame

    # -- rendering ---------------------------------------------------------------------------
    def to_markdown(self, command: str = "") -> str:
        seeds = sorted({r.seed for rs in self.results.values() for r in rs if r.seed is not None})
        lines = [f"# Comparison: {', '.join(self.methods)} (preset `{self.preset}`)", ""]
        if command:
            lines += ["Command:", "", "```bash", command, "```", ""]
        lines += [f"Spearman x 100 of cosine similarity; mean ± sample std over seeds {seeds}. Δ: difference to "
                  f"`{self.methods[0]}` with a 95% paired-bootstrap interval over test pairs (1,000 resamples).", "",
                  self.display_frame().to_markdown(), ""]
        if self.diffs:
            lines += ["## Per-task differences", "", self.diff_frame().to_markdown(), ""]
        reweighted = {m: [r.extra["reweighting"] for r in rs if "reweighting" in r.extra] for m, rs in self.results.items()}
        if any(reweighted.values()):
            lines += ["## Reweighting", ""]
            for m, infos in reweighted.items():
                for r, info in zip(self.results[m], infos):
                    lines.append(f"- `{m}` seed {r.seed}: {summarise_reweighting(info)}")
            lines.append("")
        if self.failures:
            lines += ["## Runs that produced no model", ""]
            for f in self.failures:
                rw = f.extra.get("reweighting")
                lines.append(f"- `{f.method}` seed {f.seed}: {f.reason}" + (f" ({summarise_reweighting(rw)})" if rw else ""))
            lines.append("")
        return "\n".join(lines)

    def to_rich(self) -> Any:
        from rich.table import Table

        frame = self.display_frame()
        table = Table(title=f"Spearman x 100 (preset {self.preset}); Δ vs {self.methods[0]} with 95% paired-bootstrap CI")
        table.add_column("method")
        for c in frame.columns:
            table.add_column(str(c), justify="right")
        num = self.frame()
        best = num["Avg. mean"].max()
        for m, row in frame.iterrows():
            style = "bold green" if num.loc[m, "Avg. mean"] == best else None
            table.add_row(str(m), *[str(v) for v in row], style=style)
        return table

    def bar_chart(self, path: str | Path) -> None:
        """Grouped bars: one group per task (and the average), one bar per method, std as error bars."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np

        from dsgen.artifacts import write_figure

        num = self.frame()
        cols = [TASK_LABELS.get(t, t) for t in self.tasks] + ["Avg."]
        x = np.arange(len(cols))
        width = 0.8 / len(self.methods)
        fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(cols) + 0.3 * len(self.methods)), 4))
        for i, m in enumerate(self.methods):
            ax.bar(x + i * width - 0.4 + width / 2, [num.loc[m, f"{c} mean"] for c in cols], width,
                   yerr=[num.loc[m, f"{c} std"] for c in cols], label=m, capsize=2)
        lows = [num[f"{c} mean"].min() for c in cols]
        ax.set_ylim(max(0, min(lows) - 10), min(100, max(num[f"{c} mean"].max() for c in cols) + 5))
        ax.set_xticks(x, cols, rotation=20)
        ax.set_ylabel("Spearman x 100")
        ax.set_title(f"preset {self.preset}")
        ax.legend(fontsize=8, ncol=2)
        fig.tight_layout()
        write_figure(fig, path)

    def write(self, folder: str | Path, stem: str, command: str = "") -> dict[str, Path]:
        """Write ``<stem>.md``, ``<stem>.csv`` and ``<stem>.png`` under ``folder``."""
        from dsgen.artifacts import atomic_open

        folder = Path(folder)
        paths = {"markdown": folder / f"{stem}.md", "csv": folder / f"{stem}.csv", "png": folder / f"{stem}.png"}
        with atomic_open(paths["markdown"]) as fh:
            fh.write(self.to_markdown(command))
        with atomic_open(paths["csv"]) as fh:
            self.frame().to_csv(fh)
        self.bar_chart(paths["png"])
        return paths


def summarise_reweighting(info: dict[str, Any]) -> str:
    """One line: kept share, mean weight, per-label kept fractions, classifier accuracy, warnings."""
    parts = [f"kept {info.get('kept', '?')} of {info.get('n', '?')} pairs", f"mean weight {info.get('mean_weight')}"]
    if "sdi_validation_accuracy" in info:
        parts.append(f"SDI validation accuracy {info['sdi_validation_accuracy']}%")
    for label, k in (info.get("per_label") or {}).items():
        parts.append(f"label {label} kept {100 * k['kept_fraction']:.1f}% (P(true) median {k['p_true_quantiles_10_25_50_75_90'][2]})")
    if info.get("warning"):
        parts.append(f"warning: {info['warning']}")
    return "; ".join(parts)
