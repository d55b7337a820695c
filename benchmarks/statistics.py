"""The comparison table's paired bootstrap: dsgen's path against the previous one, on the same predictions, in one run.

A comparison table (:mod:`dsgen.reports.comparison`) gives every method an interval over test pairs against the
reference (its first method): ``n_boot`` resamples of each task's pairs, every seed's Spearman recomputed on each
resample. Ranking the resamples is the cost. Timed one after the other:

1. **previous**: method by method, per task and chunk of resamples, the gold, the reference's seeds and the method's
   seeds ranked with ``scipy.stats.rankdata`` (sorting), equal seeds once (dsgen's path before 2026-11-28);
2. **dsgen** (:func:`dsgen.evaluation.statistics.paired_bootstraps`): per task and chunk, the gold and each distinct
   prediction vector ranked once for all the methods, by counting instead of sorting.

The predictions are made up on the tasks' real gold scores: the gold plus noise, in float32 as the cosines are,
one vector per method and seed, the reference's the same for every seed (as ``base``'s are). Printed: the seconds of
each, the speed-up, and whether the two give the same resampled differences bit for bit (they must).

Run: ``dsgen bench table [--n-methods 8] [--n-seeds 3] [--tasks stsb,sickr-test] [--n-boot 1000]``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def previous_bootstrap(reference: list[Any], other: list[Any], gold: Any, n_boot: int, seed: int,
                       chunk: int = 100) -> Any:
    """One method against the reference, as dsgen computed it before: the baseline of the benchmark."""
    import numpy as np

    from dsgen.evaluation.statistics import centred_ranks, spearman_centred

    gold = np.asarray(gold, dtype=float)
    rng = np.random.default_rng(seed)
    preds = [np.asarray(p) for p in (*reference, *other)]
    first: dict[bytes, int] = {}
    same = [first.setdefault(np.ascontiguousarray(p).tobytes(), i) for i, p in enumerate(preds)]
    out = []
    for start in range(0, n_boot, chunk):
        idx = rng.integers(0, len(gold), size=(min(chunk, n_boot - start), len(gold)))
        rg = centred_ranks(gold[idx])
        scores = {i: spearman_centred(centred_ranks(preds[i][idx]), rg) for i in sorted(set(same))}
        per_seed = [scores[j] for j in same]
        out.append(np.mean(per_seed[len(reference):], axis=0) - np.mean(per_seed[:len(reference)], axis=0))
    return np.concatenate(out)


def run(methods: int = 8, seeds: int = 3, tasks: str | None = "stsb,sickr-test", n_boot: int = 1000,
        data_dir: str | None = None, json_out: Path | None = None) -> dict[str, Any]:
    import numpy as np

    from dsgen.artifacts import write_json
    from dsgen.benchmarks.evaluation import cpu_description
    from dsgen.console import console as make_console
    from dsgen.data.sts import data_dir as resolve_data_dir
    from dsgen.evaluation.statistics import paired_bootstraps
    from dsgen.evaluation.tasks import TASKS, parse_tasks

    console = make_console()
    names = parse_tasks(tasks)
    root = resolve_data_dir(data_dir)
    rng = np.random.default_rng(0)
    gold = {t: np.asarray(TASKS.get(t).load(root).scores, dtype=float) for t in names}
    reference = {t: [(g + rng.normal(0, 1.5, len(g))).astype(np.float32)] * seeds for t, g in gold.items()}
    others = {f"method-{m}": {t: [(g + rng.normal(0, 1.0 + 0.05 * m, len(g))).astype(np.float32)
                                  for _ in range(seeds)] for t, g in gold.items()} for m in range(methods)}

    started = time.perf_counter()
    previous = {m: {t: previous_bootstrap(reference[t], preds[t], gold[t], n_boot, seed=i) for i, t in enumerate(names)}
                for m, preds in others.items()}
    previous_s = time.perf_counter() - started
    started = time.perf_counter()
    ours = {t: paired_bootstraps(reference[t], {m: preds[t] for m, preds in others.items()}, gold[t], n_boot, seed=i)
            for i, t in enumerate(names)}
    ours_s = time.perf_counter() - started
    equal = all(np.array_equal(previous[m][t], ours[t][m]) for m in others for t in names)

    cpu = cpu_description()
    result = {"cpu": cpu, "methods": methods, "seeds": seeds, "tasks": {t: len(g) for t, g in gold.items()},
              "n_boot": n_boot, "previous_s": round(previous_s, 3), "dsgen_s": round(ours_s, 3),
              "speedup": round(previous_s / ours_s, 2), "bit_for_bit": equal}
    console.print(f"{cpu['model_name']} ({cpu['capability']}): {methods} methods x {seeds} seeds against a reference, "
                  f"{n_boot} resamples of {', '.join(f'{t} ({len(g)} pairs)' for t, g in gold.items())}")
    console.print(f"previous path (each method on its own, sorting): {previous_s:.2f} s")
    console.print(f"dsgen (reference and gold ranked once, by counting): {ours_s:.2f} s, speed-up "
                  f"[bold]{result['speedup']}x[/bold]; the same differences bit for bit: {'yes' if equal else 'NO'}")
    if json_out:
        write_json(json_out, result)
    return result
