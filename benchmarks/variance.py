"""Variance components of a comparison's runs: how much of a method's spread comes from the data seed and how
much from the training seed on fixed data, for each method and for the paired differences the claims use.

    python -m dsgen.benchmarks.variance runs/variance cpu cpu-no-selection ...

reads every result file under ``<runs>/results/<preset>/`` (one folder per preset named) and prints Markdown:
per (preset, method) the mean over runs, ``train_sd`` (between training seeds on one dataset, pooled),
``data_sd`` (between datasets beyond what training explains), ``total_sd`` of one run, and the half-width of
the nested 95% interval of the mean that the design gives; then the same for the differences of paired runs,
and, for every preset after the first, for the difference of each run from the same run (data seed, training
seed) under the first preset: what that preset's change of settings does.
It computes with :mod:`dsgen.evaluation.statistics`, as ``dsgen compare`` does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PAIRS = (("rise", "rise-dino"), ("human", "base"), ("dino", "base"), ("human", "dino"))


def scores(runs: Path, preset: str) -> dict[str, dict[tuple[int, int], float]]:
    """method -> (data seed, training seed) -> average score, over every variant folder of the preset."""
    out: dict[str, dict[tuple[int, int], float]] = {}
    for path in sorted((runs / "results" / preset).glob("*/*/data-*-seed-*.json")):
        if path.name.endswith(".failed.json"):
            continue
        r = json.loads(path.read_text())
        tasks = r["tasks"]
        run = (r.get("data_seed") if r.get("data_seed") is not None else r["seed"], r["seed"])
        out.setdefault(r["method"], {})[run] = sum(t["spearman"] for t in tasks.values()) / len(tasks)
    return out


def row(name: str, values: dict[tuple[int, int], float]) -> dict[str, Any]:
    from dsgen.evaluation.statistics import nested_interval, variance_components

    base = {k: 0.0 for k in values}
    iv = nested_interval(base, values)
    vc = variance_components(values)
    half = (iv.high - iv.low) / 2 if iv.low is not None else float("nan")
    return {"": name, "runs": len(values), "mean": sum(values.values()) / len(values), "train_sd": vc["train_sd"],
            "data_sd": vc["data_sd"], "total_sd": vc["total_sd"], "95% half-width of the mean": half}


def report(runs: Path, presets: list[str]) -> str:
    import pandas as pd

    lines = []
    by_preset = {preset: scores(runs, preset) for preset in presets}
    first = by_preset[presets[0]]
    for preset, s in by_preset.items():
        if not s:
            continue
        rows = [row(m, v) for m, v in sorted(s.items()) if m != "base"]
        for a, b in PAIRS:
            if a in s and b in s:
                common = sorted(set(s[a]) & set(s[b]) if b != "base" else set(s[a]))
                ref = s[b] if b != "base" else None
                diff = {k: s[a][k] - (ref[k] if ref is not None else next(iter(s[b].values()))) for k in common}
                if diff:
                    rows.append(row(f"{a} - {b}", diff))
        if preset != presets[0]:  # the same runs under the first preset's settings: what this preset's change does
            for m in sorted(set(s) & set(first) - {"base"}):
                common = sorted(set(s[m]) & set(first[m]))
                if common:
                    rows.append(row(f"{m}: {preset} - {presets[0]}", {k: s[m][k] - first[m][k] for k in common}))
        lines += [f"### `{preset}`", "", pd.DataFrame(rows).to_markdown(index=False, floatfmt=".2f"), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        raise SystemExit("usage: python -m dsgen.benchmarks.variance <runs folder> <preset> [<preset> ...]")
    print(report(Path(argv[0]), argv[1:]))


if __name__ == "__main__":
    main()
