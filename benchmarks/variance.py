"""Variance components of a comparison's runs: how much of a method's spread comes from the data seed and how
much from the training seed on fixed data, for each method and for the paired differences the claims use.

    python -m dsgen.benchmarks.variance runs/variance cpu cpu-paper-selection ...

reads every result file under ``<runs>/results/<preset>/`` (one folder per preset named) and prints Markdown:
per (preset, method, variant) the mean over runs, ``train_sd`` (between training seeds on one dataset, pooled),
``data_sd`` (between datasets beyond what training explains), ``total_sd`` of one run, and the half-width of
the nested 95% interval of the mean that the design gives; then the same for the differences of paired runs,
and, for every preset after the first, for the difference of each run from the same run (data seed, training
seed) under the first preset: what that preset's change of settings does.
It computes with :mod:`dsgen.evaluation.statistics`, as ``dsgen compare`` does.

A method's runs under other settings (another ``--encoder`` or ``--generator``, an edited preset) are in
another variant folder (``results/<preset>/<method>/<variant>/``) and stay a row of their own, named
``method (variant)`` when a method has several: runs of different variants are never pooled or
overwritten by one another. Differences pair a variant of one method with the variants of the other that
the same command-line settings made (the plan's ``overrides``), and a later preset's variant with the first
preset's of the same method and overrides.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.evaluation.results import Result

PAIRS = (("rise", "rise-dino"), ("human", "base"), ("dino", "base"), ("human", "dino"), ("dino-decay0", "dino"))


@dataclass
class Variant:
    """The runs of one variant folder of a method: (data seed, training seed) -> average score."""

    method: str
    variant: str
    overrides: str  # the command-line settings that made it (JSON), which pairs it with other methods' variants
    values: dict[tuple[int, int], float] = field(default_factory=dict)
    label: str = ""


def scores(runs: Path, preset: str) -> list[Variant]:
    """The runs of every variant folder of the preset, one :class:`Variant` each, labelled by the method, or
    ``method (variant)`` for a method with several variant folders."""
    found: dict[tuple[str, str], Variant] = {}
    for path in sorted((runs / "results" / preset).glob("*/*/data-*-seed-*.json")):
        if path.name.endswith((".failed.json", ".meta.json")):
            continue
        r = Result.load(path)
        if r.training_failure():  # not a trained model's score (an old result without the record): no row
            print(f"skipped {path}: {r.training_failure()}", file=sys.stderr)
            continue
        overrides = json.dumps((r.extra.get("plan") or {}).get("overrides") or {}, sort_keys=True)
        variant = found.setdefault((r.method, path.parent.name), Variant(r.method, path.parent.name, overrides))
        variant.values[r.run] = sum(t.spearman for t in r.tasks.values()) / len(r.tasks)
    out = sorted(found.values(), key=lambda v: (v.method, v.variant))
    for v in out:
        several = sum(w.method == v.method for w in out) > 1
        v.label = f"{v.method} ({v.variant})" if several else v.method
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
    for preset, variants in by_preset.items():
        if not variants:
            continue
        rows = [row(v.label, v.values) for v in variants if v.method != "base"]
        for a, b in PAIRS:
            for va in (v for v in variants if v.method == a):
                for vb in (v for v in variants if v.method == b and v.overrides == va.overrides):
                    if b == "base":  # untrained: one number for every run
                        diff = {k: x - next(iter(vb.values.values())) for k, x in sorted(va.values.items())}
                    else:
                        diff = {k: va.values[k] - vb.values[k] for k in sorted(set(va.values) & set(vb.values))}
                    if diff:
                        rows.append(row(f"{va.label} - {vb.label}", diff))
        if preset != presets[0]:  # the same runs under the first preset's settings: what this preset's change does
            for v in variants:
                for ref in (w for w in first if w.method == v.method != "base" and w.overrides == v.overrides):
                    common = sorted(set(v.values) & set(ref.values))
                    if common:
                        rows.append(row(f"{v.label}: {preset} - {presets[0]}" if ref.label == v.label else
                                        f"{v.label}: {preset} - {ref.label}: {presets[0]}",
                                        {k: v.values[k] - ref.values[k] for k in common}))
        lines += [f"### `{preset}`", "", pd.DataFrame(rows).to_markdown(index=False, floatfmt=".2f"), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2:
        raise SystemExit("usage: python -m dsgen.benchmarks.variance <runs folder> <preset> [<preset> ...]")
    print(report(Path(argv[0]), argv[1:]))


if __name__ == "__main__":
    main()
