"""Evaluation speed: the evaluator against naive per-task, per-side encoding of the same model, in one run.

Three ways to encode MTEB's seven STS tasks, timed one after the other on the same model and data:

1. naive: per task and side, ``model.encode(..., batch_size=64)`` (what a plain loop does);
2. distinct sentences once, sentence-transformers' own batching (64 per batch, sorted by characters);
3. the evaluator: distinct sentences once, in batches of equal token length and about 8,192
   padded tokens (``dsgen.evaluation.evaluator.encode_bucketed``).

Printed: sentences/s of each, the share of distinct sentences, the speed-ups against naive, and
the largest score difference against naive (the scores must agree).

Run: ``dsgen bench eval [--model minilm-l6] [--tasks mteb]``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def run(model: str = "minilm-l6", tasks: str | None = "mteb", data_dir: str | None = None, batch_size: int = 64,
        json_out: Path | None = None) -> dict[str, Any]:
    from dsgen.artifacts import write_json
    from dsgen.console import console as make_console
    from dsgen.evaluation.evaluator import StsEvaluator, pair_cosines, score_cosine
    from dsgen.evaluation.tasks import parse_tasks
    from dsgen.models import load_encoder

    console = make_console()
    names = parse_tasks(tasks)
    encoder = load_encoder(model)
    ev = StsEvaluator(names, data_dir, batch_size)
    naive_ev = StsEvaluator(names, data_dir, batch_size, dedup=False)
    naive_ev._pairs = ev.pairs  # same data, read once
    total = sum(2 * len(p) for p in ev.pairs.values())
    distinct = ev.distinct_sentences()

    start = time.perf_counter()
    naive = naive_ev.evaluate(encoder, model)
    naive_s = time.perf_counter() - start

    start = time.perf_counter()
    emb = encoder.encode(distinct, batch_size=batch_size, convert_to_tensor=True)
    index = {s: i for i, s in enumerate(distinct)}
    plain = {t: score_cosine(pair_cosines(emb, index, p), p.scores)[0] for t, p in ev.pairs.items()}
    plain_s = time.perf_counter() - start

    start = time.perf_counter()
    fast = ev.evaluate(encoder, model)
    fast_s = time.perf_counter() - start

    diff = max(max(abs(naive.tasks[t].spearman - fast.tasks[t].spearman), abs(naive.tasks[t].spearman - plain[t]))
               for t in names)
    result = {"model": model, "tasks": names, "sentences_in_pairs": total, "distinct_sentences": len(distinct),
              "distinct_share": round(len(distinct) / total, 3),
              "naive": {"seconds": round(naive_s, 2), "sentences_per_s": round(total / naive_s, 1)},
              "distinct_default_batches": {"seconds": round(plain_s, 2), "sentences_per_s": round(total / plain_s, 1)},
              "evaluator": {"seconds": round(fast_s, 2), "sentences_per_s": round(total / fast_s, 1)},
              "speedup": round(naive_s / fast_s, 2), "speedup_distinct_only": round(naive_s / plain_s, 2),
              "max_spearman_difference": diff}
    console.print(f"{len(names)} tasks, {total} sentences in pairs, {len(distinct)} distinct ({result['distinct_share']:.0%})")
    console.print(f"naive per-task encoding: {naive_s:.1f} s ({result['naive']['sentences_per_s']} sentences/s)")
    console.print(f"distinct sentences once, batches of {batch_size}: {plain_s:.1f} s ({result['speedup_distinct_only']}x)")
    console.print(f"evaluator (distinct once, token-length buckets): {fast_s:.1f} s -> speed-up [bold]{result['speedup']}x[/bold]; "
                  f"largest Spearman difference: {diff:.2e}")
    if json_out:
        write_json(json_out, result)
    return result
