"""Evaluation speed: the evaluator against naive per-task, per-side encoding of the same model, in one run.

Three ways to encode MTEB's seven STS tasks, timed one after the other on the same model and data:

1. naive: per task and side, ``model.encode(..., batch_size=64)`` (what a plain loop does);
2. distinct sentences once, sentence-transformers' own batching (64 per batch, sorted by characters);
3. the evaluator: distinct sentences once, in batches of equal token length and about 2,048
   padded tokens (``dsgen.evaluation.evaluator.encode_bucketed``), and again at each further
   ``--token-budget`` (default: 8,192, the budget before 2026-11-23), so that the batch shape is
   chosen by measurement on the CPU at hand.

Printed: sentences/s of each, the share of distinct sentences, the speed-ups against naive, and
the largest score difference against naive (the scores must agree).

Run: ``dsgen bench eval [--model minilm-l6] [--tasks mteb] [--token-budget N ...]``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


OTHER_BUDGETS = (8192,)


def run(model: str = "minilm-l6", tasks: str | None = "mteb", data_dir: str | None = None, batch_size: int = 64,
        json_out: Path | None = None, token_budgets: tuple[int, ...] | None = None) -> dict[str, Any]:
    """``token_budgets``: evaluator batch shapes to time after the default one (default: 8,192)."""
    from dsgen.artifacts import write_json
    from dsgen.console import console as make_console
    from dsgen.evaluation.evaluator import TOKEN_BUDGET, StsEvaluator, pair_cosines, score_cosine
    from dsgen.evaluation.tasks import parse_tasks
    from dsgen.encoders import load_encoder

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

    others = [b for b in dict.fromkeys(OTHER_BUDGETS if token_budgets is None else token_budgets) if b != TOKEN_BUDGET]
    budget_s, budget_results = {TOKEN_BUDGET: fast_s}, [fast]
    for budget in others:
        ev.token_budget = budget
        start = time.perf_counter()
        budget_results.append(ev.evaluate(encoder, model))
        budget_s[budget] = time.perf_counter() - start
    ev.token_budget = TOKEN_BUDGET

    diff = max(max(abs(naive.tasks[t].spearman - plain[t]),
                   *(abs(naive.tasks[t].spearman - r.tasks[t].spearman) for r in budget_results)) for t in names)
    result = {"model": model, "tasks": names, "sentences_in_pairs": total, "distinct_sentences": len(distinct),
              "distinct_share": round(len(distinct) / total, 3),
              "naive": {"seconds": round(naive_s, 2), "sentences_per_s": round(total / naive_s, 1)},
              "distinct_default_batches": {"seconds": round(plain_s, 2), "sentences_per_s": round(total / plain_s, 1)},
              "evaluator": {"seconds": round(fast_s, 2), "sentences_per_s": round(total / fast_s, 1)},
              "speedup": round(naive_s / fast_s, 2), "speedup_distinct_only": round(naive_s / plain_s, 2),
              "token_budget": TOKEN_BUDGET,
              "evaluator_by_token_budget": {str(b): {"seconds": round(t, 2), "sentences_per_s": round(total / t, 1),
                                                     "speedup": round(naive_s / t, 2)} for b, t in budget_s.items()},
              "max_spearman_difference": diff}
    console.print(f"{len(names)} tasks, {total} sentences in pairs, {len(distinct)} distinct ({result['distinct_share']:.0%})")
    console.print(f"naive per-task encoding: {naive_s:.1f} s ({result['naive']['sentences_per_s']} sentences/s)")
    console.print(f"distinct sentences once, batches of {batch_size}: {plain_s:.1f} s ({result['speedup_distinct_only']}x)")
    console.print(f"evaluator (distinct once, buckets of {TOKEN_BUDGET} tokens): {fast_s:.1f} s -> speed-up "
                  f"[bold]{result['speedup']}x[/bold]")
    for b in others:
        console.print(f"  the same in buckets of {b} tokens: {budget_s[b]:.1f} s ({naive_s / budget_s[b]:.2f}x)")
    console.print(f"largest Spearman difference against naive: {diff:.2e}")
    if json_out:
        write_json(json_out, result)
    return result
