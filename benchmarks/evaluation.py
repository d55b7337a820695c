"""Evaluation speed: the evaluator against naive per-task, per-side encoding of the same model, in one run.

Timed one after the other on the same model, data and dtype, in each of ``rounds`` rounds:

1. naive: per task and side, ``model.encode(..., batch_size=64)`` (what a plain loop does; it
   tokenises every sentence of every pair, every time);
2. the evaluator's **first** run of a comparison: the token cache empty, so it tokenises the
   distinct sentences once and cuts them into batches of equal token length (about 2,048 padded
   tokens, ``dsgen.evaluation.evaluator.token_plan``), then encodes them;
3. the evaluator's **later** runs (``later_runs`` of them): each on a fresh copy of the encoder
   with other weights (as a comparison's runs are: trained copies with one tokenizer), the token
   cache warm; nothing else is reused (embeddings never are).

Once, after the rounds: the distinct sentences in sentence-transformers' own batches (64 per
batch, sorted by characters) and the evaluator at each further ``--token-budget`` (default: 8,192),
so that the batch shape is chosen by measurement on the CPU at hand.

Printed: seconds and sentences/s of each, the speed-ups against the naive loop of the same round
(first run and later runs apart) with their spread over the rounds, the CPU (``lscpu``'s model
name, torch's kernel capability, threads) and the load average before and after (a shared machine
stretches every timing; the ratios are measured side by side for that reason), and the largest
Spearman difference against naive (the scores must agree to the dtype's precision).

Run: ``dsgen bench eval [--model minilm-l6] [--tasks mteb] [--dtype float32|bfloat16] [--rounds N]
[--later-runs N] [--threads N] [--token-budget N ...]``; the ``cpu`` preset's setting is ``--model
smollm2-l4 --tasks sts12,sts13,sts14,sts15,sts16,stsb,sickr-test --dtype bfloat16`` on a CPU with
native bfloat16 (AVX-512; float32 on AVX2-only CPUs, as the preset falls back).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from statistics import median
from typing import Any


OTHER_BUDGETS = (8192,)


def cpu_description() -> dict[str, Any]:
    """The CPU the numbers were measured on: ``lscpu``'s model name, torch's kernel capability
    (AVX2 / AVX512), the intra-op threads and the cores the process may use."""
    import subprocess

    import torch

    name = None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        name = next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), None)
    except (OSError, subprocess.SubprocessError):
        pass
    return {"model_name": name, "capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(), "cores": len(os.sched_getaffinity(0))}


def retrained_copy(encoder: Any, seed: int, scale: float = 1e-3) -> Any:
    """A copy of ``encoder`` with other weights and the same tokenizer, as a comparison's next run
    evaluates: every floating-point parameter moved by seeded noise of ``scale`` times its mean size."""
    import copy

    import torch

    out = copy.deepcopy(encoder)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            if p.is_floating_point() and p.numel():
                p.add_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * scale * p.abs().mean())
    return out


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(median(values), 2), "min": round(min(values), 2), "max": round(max(values), 2)}


def run(model: str = "minilm-l6", tasks: str | None = "mteb", data_dir: str | None = None, batch_size: int = 64,
        json_out: Path | None = None, token_budgets: tuple[int, ...] | None = None, dtype: str = "float32",
        rounds: int = 1, later_runs: int = 2, threads: int | None = None) -> dict[str, Any]:
    """``token_budgets``: evaluator batch shapes to time after the default one (default: 8,192);
    ``threads``: torch's intra-op threads for the whole benchmark (default: torch's own)."""
    import copy

    import torch

    from dsgen.artifacts import write_json
    from dsgen.console import console as make_console
    from dsgen.encoders import load_encoder
    from dsgen.evaluation import evaluator as evaluation
    from dsgen.evaluation.evaluator import TOKEN_BUDGET, StsEvaluator, pair_cosines, score_cosine, token_plan
    from dsgen.evaluation.tasks import parse_tasks
    from dsgen.models import resolve_dtype

    if threads:
        torch.set_num_threads(threads)
    console = make_console()
    names = parse_tasks(tasks)
    encoder = load_encoder(model)
    ev = StsEvaluator(names, data_dir, batch_size, dtype=dtype)
    naive_ev = StsEvaluator(names, data_dir, batch_size, dedup=False, dtype=dtype)
    naive_ev._pairs = ev.pairs  # same data, read once
    total = sum(2 * len(p) for p in ev.pairs.values())
    distinct = ev.distinct_sentences()
    ev.distinct_rows()  # the pair index is built once per evaluator, as the runner keeps it
    cpu, load_before = cpu_description(), os.getloadavg()

    def timed(fn: Any) -> tuple[Any, float]:
        start = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - start

    copies = [retrained_copy(encoder, 1000 * r + k) for r in range(rounds) for k in range(later_runs)]
    measured: list[dict[str, Any]] = []
    naive = first = None
    encoder.encode(distinct[:batch_size], batch_size=batch_size)  # untimed warm-up: torch's one-time set-up not in the naive time
    for r in range(rounds):
        naive, naive_s = timed(lambda: naive_ev.evaluate(encoder, model))
        evaluation._TOKENS.clear()  # a comparison's first run: nothing tokenised yet
        first, first_s = timed(lambda: ev.evaluate(encoder, model))
        later_s = [timed(lambda c=c: ev.evaluate(c, model))[1] for c in copies[r * later_runs:(r + 1) * later_runs]]
        measured.append({"naive_seconds": round(naive_s, 2), "first_seconds": round(first_s, 2),
                         "later_seconds": [round(s, 2) for s in later_s],
                         "speedup_first": round(naive_s / first_s, 2),
                         "speedup_later": [round(naive_s / s, 2) for s in later_s]})
        console.print(f"round {r + 1}: naive {naive_s:.1f} s, evaluator first run {first_s:.1f} s "
                      f"({naive_s / first_s:.2f}x), later runs " + ", ".join(f"{s:.1f} s ({naive_s / s:.2f}x)" for s in later_s))

    # Once: sentence-transformers' own batching of the distinct sentences, and other batch shapes.
    half = encoder if dtype == "float32" else copy.deepcopy(encoder).to(resolve_dtype(dtype))
    start = time.perf_counter()
    emb = half.encode(distinct, batch_size=batch_size, convert_to_tensor=True).float()
    index = {s: i for i, s in enumerate(distinct)}
    plain = {t: score_cosine(pair_cosines(emb, index, p), p.scores)[0] for t, p in ev.pairs.items()}
    plain_s = time.perf_counter() - start
    del half, emb
    naive_total = sum(m["naive_seconds"] for m in measured)
    later_all = [s for m in measured for s in m["later_seconds"]]
    others = [b for b in dict.fromkeys(OTHER_BUDGETS if token_budgets is None else token_budgets) if b != TOKEN_BUDGET]
    steady = median(later_all) if later_all else sum(m["first_seconds"] for m in measured) / rounds
    budget_s: dict[int, float] = {TOKEN_BUDGET: steady}
    for budget in others:
        token_plan(encoder, distinct, budget)  # tokenised beforehand: the later runs' speed at this shape
        ev.token_budget = budget
        budget_s[budget] = timed(lambda: ev.evaluate(copies[0] if copies else encoder, model))[1]
    ev.token_budget = TOKEN_BUDGET

    diff = max(max(abs(naive.tasks[t].spearman - plain[t]), abs(naive.tasks[t].spearman - first.tasks[t].spearman))
               for t in names)
    firsts = [m["speedup_first"] for m in measured]
    laters = [s for m in measured for s in m["speedup_later"]]
    naive_mean = naive_total / rounds
    headline = spread(laters or firsts)["median"]
    result = {"model": model, "tasks": names, "dtype": dtype, "cpu": cpu,
              "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in os.getloadavg()]},
              "sentences_in_pairs": total, "distinct_sentences": len(distinct),
              "distinct_share": round(len(distinct) / total, 3), "rounds": measured,
              "naive": {"seconds": round(naive_mean, 2), "sentences_per_s": round(total / naive_mean, 1)},
              "evaluator": {"seconds": round(steady, 2), "sentences_per_s": round(total / steady, 1)},
              # the steady state of a comparison: its later runs' median ratio (the first run's without them)
              "speedup": headline,
              "speedup_first_run": spread(firsts),
              "speedup_later_runs": spread(laters) if laters else None,
              "distinct_default_batches": {"seconds": round(plain_s, 2), "sentences_per_s": round(total / plain_s, 1),
                                           "speedup": round(naive_mean / plain_s, 2)},
              "token_budget": TOKEN_BUDGET,
              "evaluator_by_token_budget": {str(b): {"seconds": round(t, 2), "sentences_per_s": round(total / t, 1),
                                                     "speedup": headline if b == TOKEN_BUDGET else round(naive_mean / t, 2)}
                                            for b, t in budget_s.items()},
              "max_spearman_difference": diff}
    console.print(f"{cpu['model_name']} ({cpu['capability']}, {cpu['threads']} threads), {dtype}, load average "
                  f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    console.print(f"{len(names)} tasks, {total} sentences in pairs, {len(distinct)} distinct ({result['distinct_share']:.0%})")
    console.print(f"naive per-task encoding: {naive_mean:.1f} s on average ({result['naive']['sentences_per_s']} sentences/s)")
    console.print(f"evaluator, first run of a comparison (tokenising): speed-up [bold]{spread(firsts)['median']}x[/bold] "
                  f"(rounds: {', '.join(f'{x:.2f}' for x in firsts)})")
    if laters:
        console.print(f"evaluator, later runs (token cache warm): speed-up [bold]{spread(laters)['median']}x[/bold] "
                      f"(runs: {', '.join(f'{x:.2f}' for x in laters)})")
    console.print(f"distinct sentences once, sentence-transformers' batches of {batch_size}: {plain_s:.1f} s "
                  f"({naive_mean / plain_s:.2f}x)")
    for b, t in list(budget_s.items())[1:]:
        console.print(f"  a later run in buckets of {b} tokens: {t:.1f} s ({naive_mean / t:.2f}x)")
    console.print(f"largest Spearman difference against naive: {diff:.2e}")
    if json_out:
        write_json(json_out, result)
    return result
