"""Evaluation speed: each distinct sentence encoded once for the whole run, against naive
per-task, per-side encoding of the same model, in one run.

Printed: sentences/s of both, the share of distinct sentences, the speed-up, and the largest
score difference between the two (the scores must agree).

Run: ``dsgen bench eval [--model minilm-l6] [--tasks mteb]``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def run(model: str = "minilm-l6", tasks: str | None = "mteb", data_dir: str | None = None, batch_size: int = 64,
        json_out: Path | None = None) -> dict[str, Any]:
    from rich.console import Console

    from dsgen.artifacts import write_json
    from dsgen.evaluation.evaluator import StsEvaluator
    from dsgen.evaluation.tasks import parse_tasks
    from dsgen.models import load_encoder

    console = Console()
    names = parse_tasks(tasks)
    encoder = load_encoder(model)
    cached_ev = StsEvaluator(names, data_dir, batch_size, dedup=True)
    naive_ev = StsEvaluator(names, data_dir, batch_size, dedup=False)
    total = sum(2 * len(p) for p in cached_ev.pairs.values())
    distinct = len(cached_ev.distinct_sentences())
    naive_ev._pairs = cached_ev.pairs  # same data, read once

    start = time.perf_counter()
    naive = naive_ev.evaluate(encoder, model)
    naive_s = time.perf_counter() - start
    start = time.perf_counter()
    cached = cached_ev.evaluate(encoder, model)
    cached_s = time.perf_counter() - start
    diff = max(abs(naive.tasks[t].spearman - cached.tasks[t].spearman) for t in names)
    result = {"model": model, "tasks": names, "sentences_in_pairs": total, "distinct_sentences": distinct,
              "distinct_share": round(distinct / total, 3),
              "naive": {"seconds": round(naive_s, 2), "sentences_per_s": round(total / naive_s, 1)},
              "cached": {"seconds": round(cached_s, 2), "sentences_per_s": round(total / cached_s, 1)},
              "speedup": round(naive_s / cached_s, 2), "max_spearman_difference": diff}
    console.print(f"{len(names)} tasks, {total} sentences in pairs, {distinct} distinct ({result['distinct_share']:.0%})")
    console.print(f"naive per-task encoding: {naive_s:.1f} s ({result['naive']['sentences_per_s']} sentences/s)")
    console.print(f"distinct sentences once: {cached_s:.1f} s ({result['cached']['sentences_per_s']} sentences/s)")
    console.print(f"speed-up: [bold]{result['speedup']}x[/bold]; largest Spearman difference between the two: {diff:.2e}")
    if json_out:
        write_json(json_out, result)
    return result
